//! Where a prefill pick's KV overlaps come from: the prefix index itself (the pure core's tests and
//! benchmarks), or overlaps computed beforehand, outside the routing lock ([`Overlaps`]).
//!
//! [`crate::state::ControlState::pick`] asks the index for the pool's overlaps under the index's
//! read lock alone, then books under the routing lock with the answer; only the booking waits on
//! other picks. A candidate that joined the pool in between is credited no overlap, which can
//! only under-state its cache, never invent one. A decode pick that the prefill guard may hold
//! gets the prefills' overlaps the same way ([`Overlaps::needed_for`]).

use infera_kv::hash::PageHash;
use infera_proto::types::{ModelName, PickKind, PickRequest};
use rand::Rng;

use super::RoutingCore;
use crate::admission::AdmitLimit;
use crate::target::TargetKey;

/// The KV prefix index as control keeps it: per target key.
pub type KvIndex = infera_kv::index::PrefixIndex<TargetKey>;

/// Answers "how many leading pages of this prompt does each of these targets hold".
pub trait OverlapSource: std::fmt::Debug {
    /// Leading pages of the prompt `page_hashes` (a pick request's) each of `keys` holds, into
    /// `out` (same order as `keys`).
    fn overlaps(&self, page_hashes: &[i64], keys: &[TargetKey], out: &mut Vec<u32>);
}

impl OverlapSource for KvIndex {
    fn overlaps(&self, page_hashes: &[i64], keys: &[TargetKey], out: &mut Vec<u32>) {
        let hashes: Vec<PageHash> = page_hashes.iter().map(|&h| PageHash(h)).collect();
        KvIndex::overlaps(self, &hashes, keys, out);
    }
}

/// One prompt's overlaps with some targets, computed before the pick; targets not among them
/// count 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlaps {
    keys: Vec<TargetKey>,
    pages: Vec<u32>,
}

impl Overlaps {
    /// Which pool's overlaps a pick needs before it books, if any: a prefill pick its own (its
    /// cost credits them); a decode pick its model's prefills when fleet admission may hold it
    /// for the top class's first token (`limit` with `protect_ttft_ms`: the prefill guard
    /// predicts from what the prefill would compute, `crate::admission`). None without the
    /// prompt's page hashes; the proxy sends them on prefill picks and on decode picks that
    /// wait in control's queue.
    pub fn needed_for(kind: PickKind, req: &PickRequest, limit: Option<AdmitLimit>) -> Option<PickKind> {
        if req.page_hashes.is_empty() {
            return None;
        }
        match (kind, limit) {
            (PickKind::Prefill, _) => Some(PickKind::Prefill),
            (PickKind::Decode, Some(AdmitLimit { protect_ttft_ms: Some(_), .. })) => Some(PickKind::Prefill),
            (PickKind::Decode, _) => None,
        }
    }

    /// Asks `index` for the overlap of `page_hashes` (a pick request's) with each of `keys`.
    pub fn compute(index: &KvIndex, page_hashes: &[i64], keys: Vec<TargetKey>) -> Self {
        let mut pages = Vec::with_capacity(keys.len());
        OverlapSource::overlaps(index, page_hashes, &keys, &mut pages);
        Self { keys, pages }
    }
}

impl OverlapSource for Overlaps {
    /// `page_hashes` must be the prompt these overlaps were computed for.
    fn overlaps(&self, _page_hashes: &[i64], keys: &[TargetKey], out: &mut Vec<u32>) {
        out.clear();
        out.extend(keys.iter().map(|k| self.keys.iter().position(|c| c == k).map_or(0, |i| self.pages[i])));
    }
}

impl<R: Rng> RoutingCore<R> {
    /// The keys of the targets a pick of `kind` for `model` would consider (live, not drained),
    /// into `out`; empty when there are none. Outside the pick, so the KV overlaps of a prefill
    /// pick can be computed before it takes the routing lock ([`Overlaps`]).
    pub fn pool_keys(&mut self, model: &ModelName, kind: PickKind, out: &mut Vec<TargetKey>) {
        out.clear();
        let ledger = &self.ledger;
        if self.view.candidates(model, kind, |k| ledger.load(k), &mut self.candidates).is_ok() {
            out.extend(self.candidates.iter().map(|c| c.key));
        }
    }
}
