//! A pick's candidates before the choice: the KV overlap credited to prefill candidates, decode
//! candidates' prefilling requests weighed by their age, and decode candidates whose KV would
//! overflow passed by.

use std::time::{Duration, Instant};

use infera_proto::types::PickRequest;

use super::OverlapSource;
use crate::affinity::LastPrefill;
use crate::capacity::Capacity;
use crate::ejection::{Admit, Breakers};
use crate::ledger::Ledger;
use crate::scoring::{Candidate, Scored};
use crate::target::{KvRoom, TargetKey};
use crate::view::View;

/// What screening left of the candidates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Screened {
    /// Every candidate was ejected or excluded, so none was passed by.
    pub(super) bypassed: bool,
}

/// Passes by the candidates a pick may not use: those ejected for failing (outlier ejection;
/// a half-open one is kept as a probe) and those the request already failed on (`exclude`, a
/// retry). When that would leave none, none is passed by: routing somewhere beats refusing.
pub(super) fn screen(
    candidates: &mut Vec<Candidate>,
    breakers: &Breakers,
    excluded: &[TargetKey],
    now: Instant,
) -> Screened {
    let usable = |c: &Candidate| !excluded.contains(&c.key) && breakers.admits(c.key, now) != Admit::No;
    if !candidates.iter().any(usable) {
        return Screened { bypassed: !candidates.is_empty() };
    }
    candidates.retain(usable);
    for c in candidates.iter_mut() {
        c.probe = breakers.admits(c.key, now) == Admit::Probe;
    }
    Screened { bypassed: false }
}

/// Passes by the candidates at their rank's cap ([`Capacity`]); `false` when that leaves none
/// (the pick is refused then, and the proxies queue the request).
pub(super) fn within_capacity(
    candidates: &mut Vec<Candidate>,
    caps: &Capacity,
    view: &View,
    kv_room: Option<&dyn KvRoom>,
) -> bool {
    if !caps.is_on() {
        return true;
    }
    candidates.retain(|c| caps.has_room(&c.load, kv_room.and_then(|r| r.kv_use(&view.slot(c.key).target))));
    !candidates.is_empty()
}

/// Reused buffers of the KV overlap query, so a pick allocates nothing for it.
#[derive(Debug, Default)]
pub(super) struct OverlapScratch {
    /// The candidates' target keys.
    pub(super) keys: Vec<TargetKey>,
    /// Pages matched, per candidate.
    pub(super) pages: Vec<u32>,
}

/// Credits each prefill candidate with what it caches of `req`: the KV index's pages when the
/// proxy hashed the prompt (and control has an index), else the session's last prompt on its
/// previous prefill target (`last`, looked up only then). The prefill pick and the prefill guard
/// both credit through here, so the guard counts what the pick would book.
pub(super) fn credit_cached(
    candidates: &mut [Candidate],
    scratch: &mut OverlapScratch,
    kv: Option<&dyn OverlapSource>,
    last: impl FnOnce() -> Option<LastPrefill>,
    req: &PickRequest,
) {
    match kv {
        _ if req.page_hashes.is_empty() => credit_session(candidates, last(), req.input_tokens),
        Some(index) => credit_overlap(candidates, scratch, index, req),
        None => {}
    }
}

/// Fills each prefill candidate's overlap from `source`; only targets whose page size is the one
/// the prompt was hashed with can match.
fn credit_overlap(
    candidates: &mut [Candidate],
    OverlapScratch { keys, pages: out }: &mut OverlapScratch,
    source: &dyn OverlapSource,
    req: &PickRequest,
) {
    keys.clear();
    keys.extend(candidates.iter().map(|c| c.key));
    source.overlaps(&req.page_hashes, keys, out);
    for (c, &pages) in candidates.iter_mut().zip(out.iter()) {
        if c.page_size == req.page_size && pages > 0 {
            c.overlap_pages = pages;
            c.cached_tokens = (u64::from(pages) * u64::from(c.page_size)).min(req.input_tokens);
        }
    }
}

/// Without page hashes (no tokenizer in the proxy) the KV index cannot say what a prefill
/// holds; a session's previous prefill target holds at least its last prompt, which it just
/// computed. That target is credited with it as cached (at most this request's tokens), as the
/// index would credit the pages, and books only the rest (`manual/features/kv_aware_routing.md`).
fn credit_session(candidates: &mut [Candidate], last: Option<LastPrefill>, request_tokens: u64) {
    let Some(last) = last else { return };
    if let Some(c) = candidates.iter_mut().find(|c| c.key == last.target) {
        c.cached_tokens = last.tokens.min(request_tokens);
    }
}

/// The age decay (`crate::prefill_phase`): each decode candidate's prefilling reservations count
/// `min(1, median / age)` each, against the pool's `median` prefill phase (`None` before the
/// first, or with the decay off: all count whole, as loaded). Touches only the candidates' own prefilling
/// reservations.
pub(super) fn decay_prefilling(
    candidates: &mut [Candidate],
    ledger: &Ledger,
    median: Option<Duration>,
    now: Instant,
) {
    if median.is_none() {
        return;
    }
    for c in candidates.iter_mut().filter(|c| c.load.prefilling.requests > 0) {
        c.prefilling = ledger.prefilling_weighted(c.key, median, now);
    }
}

/// KV headroom: a decode candidate whose KV would overflow with this request and what is on its
/// way there ([`KvUse::would_overflow`]) costs infinity, so the lowest-cost choice passes it by —
/// unless every candidate would overflow, when none is skipped. Marks each in `overflow`.
pub(super) fn skip_overflowing(
    view: &View,
    room: &dyn KvRoom,
    request_tokens: u64,
    scored: &mut [Scored],
    overflow: &mut Vec<bool>,
) {
    overflow.extend(scored.iter().map(|s| {
        let target = &view.slot(s.candidate.key).target;
        room.kv_use(target).is_some_and(|kv| kv.would_overflow(s.candidate.load, request_tokens))
    }));
    if overflow.iter().all(|o| *o) {
        return;
    }
    for (s, o) in scored.iter_mut().zip(overflow.iter()) {
        if *o {
            s.cost = f64::INFINITY;
        }
    }
}
