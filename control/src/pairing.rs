//! PD pairing: which of a model's prefill and decode workers may serve together.
//!
//! A decode pulls a request's KV from its prefill, and SGLang refuses the transfer when the two
//! engines disagree on the KV page size or the KV cache dtype — it raises in the decode's
//! scheduler, which takes the whole decode server down (`sglang/srt/disaggregation/common/conn.py`,
//! `CommonKVReceiver.try_ensure_parallel_info`, SGLang 0.5.23). Both ends must also speak the same
//! transfer backend (`--disaggregation-transfer-backend`: mooncake, nixl, …). So a model's prefill
//! and decode workers are grouped by a [`PairingKey`] of those three, and exactly one group serves:
//!
//! - a group is *complete* when it has at least one prefill and one decode;
//! - the serving group is the complete group with the most workers, then the most targets (DP
//!   ranks), then the one whose first worker id sorts first — a function of the set of workers
//!   alone, so every control replica chooses the same group whatever order workers arrived in;
//! - every prefill or decode outside it is *unpaired*: it takes no picks, with a reason;
//! - with no complete group, every pick for the model is refused (`NO_COMPATIBLE_PAIR`).
//!
//! Pairing is judged once a model has both prefill and decode workers; a model with only one of
//! the two roles has nothing to pair (its picks fail or succeed as they did before). Mixed
//! (aggregated) workers are never paired. Pairing is structural: drains, ejections and health do
//! not change it. Values the engine does not report are "unknown", and pair only with unknown.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use infera_proto::types::{Role, WorkerId, WorkerRecord};

/// What a prefill and a decode must agree on to exchange KV.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PairingKey {
    /// KV page size in tokens.
    pub page_size: u32,
    /// `disaggregation_transfer_backend`; `None` when unknown.
    pub transfer_backend: Option<String>,
    /// `kv_cache_dtype`; `None` when unknown.
    pub kv_cache_dtype: Option<String>,
}

impl PairingKey {
    /// The key of a worker as control routes to it (the engine's values).
    pub fn of(record: &WorkerRecord) -> Self {
        Self {
            page_size: record.page_size,
            transfer_backend: record.transfer_backend.clone(),
            kv_cache_dtype: record.kv_cache_dtype.clone(),
        }
    }

    /// The field's value, spelled for people.
    fn value(&self, field: Field) -> String {
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".to_owned());
        match field {
            Field::PageSize => self.page_size.to_string(),
            Field::TransferBackend => text(&self.transfer_backend),
            Field::KvCacheDtype => text(&self.kv_cache_dtype),
        }
    }

    /// `field value` for each of `fields`, comma-separated.
    fn describe(&self, fields: &[Field]) -> String {
        fields.iter().map(|f| format!("{} {}", f.name(), self.value(*f))).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for PairingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&Field::ALL))
    }
}

/// A field of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    PageSize,
    TransferBackend,
    KvCacheDtype,
}

impl Field {
    const ALL: [Self; 3] = [Self::PageSize, Self::TransferBackend, Self::KvCacheDtype];

    fn name(self) -> &'static str {
        match self {
            Self::PageSize => "page_size",
            Self::TransferBackend => "transfer_backend",
            Self::KvCacheDtype => "kv_cache_dtype",
        }
    }

    /// The fields in which `a` and `b` differ.
    fn differing(a: &PairingKey, b: &PairingKey) -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(move |f| match f {
            Self::PageSize => a.page_size != b.page_size,
            Self::TransferBackend => a.transfer_backend != b.transfer_backend,
            Self::KvCacheDtype => a.kv_cache_dtype != b.kv_cache_dtype,
        })
    }
}

/// One of a model's prefill or decode workers, as pairing sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The worker.
    pub id: WorkerId,
    /// `Prefill` or `Decode` (others are ignored).
    pub role: Role,
    /// What it must agree on with its partners.
    pub key: PairingKey,
    /// Its targets (DP ranks).
    pub ranks: u32,
}

impl Member {
    /// A worker of the view as a member.
    pub fn of(record: &WorkerRecord) -> Self {
        Self { id: record.id.clone(), role: record.role, key: PairingKey::of(record), ranks: record.dp_size }
    }
}

/// The pairing of one model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelPairing {
    /// The key of the serving group; `None` when nothing is paired (no complete group, or only one
    /// of the two roles).
    pub serving: Option<PairingKey>,
    /// The model has prefill and decode workers but no complete group: why, for the refusal.
    pub no_pair: Option<String>,
    /// Prefill and decode workers outside the serving group, with why, by id.
    pub unpaired: BTreeMap<WorkerId, Unpaired>,
}

/// An unpaired worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unpaired {
    /// Its role (`Prefill` or `Decode`).
    pub role: Role,
    /// Why, e.g. `page_size 16, but the model's decodes run page_size 1`.
    pub reason: String,
}

impl ModelPairing {
    /// Unpaired workers of `role`.
    pub fn unpaired_of(&self, role: Role) -> usize {
        self.unpaired.values().filter(|u| u.role == role).count()
    }
}

/// How big a group is, for choosing the serving one.
#[derive(Debug, Default)]
struct Group<'a> {
    prefills: usize,
    decodes: usize,
    ranks: u64,
    first: Option<&'a WorkerId>,
}

/// Pairs a model's workers (`members`; roles other than prefill and decode are ignored).
pub fn pair(members: &[Member]) -> ModelPairing {
    let pd: Vec<&Member> =
        members.iter().filter(|m| matches!(m.role, Role::Prefill | Role::Decode)).collect();
    let side = |role: Role| -> BTreeSet<&PairingKey> {
        pd.iter().filter(|m| m.role == role).map(|m| &m.key).collect()
    };
    let (prefills, decodes) = (side(Role::Prefill), side(Role::Decode));
    if prefills.is_empty() || decodes.is_empty() {
        return ModelPairing::default();
    }
    let mut groups: BTreeMap<&PairingKey, Group<'_>> = BTreeMap::new();
    for m in &pd {
        let g = groups.entry(&m.key).or_default();
        match m.role {
            Role::Prefill => g.prefills += 1,
            _ => g.decodes += 1,
        }
        g.ranks += u64::from(m.ranks);
        g.first = Some(g.first.map_or(&m.id, |first| first.min(&m.id)));
    }
    let serving = groups
        .iter()
        .filter(|(_, g)| g.prefills > 0 && g.decodes > 0)
        .max_by_key(|(_, g)| (g.prefills + g.decodes, g.ranks, Reverse(g.first)))
        .map(|(key, _)| (*key).clone());
    let unpaired = pd
        .iter()
        .filter(|m| serving.as_ref() != Some(&m.key))
        .map(|m| {
            let reason = match &serving {
                Some(key) => differs(&m.key, &[key], "the model's paired workers run"),
                None if m.role == Role::Prefill => {
                    differs(&m.key, &Vec::from_iter(decodes.iter().copied()), "the model's decodes run")
                }
                None => {
                    differs(&m.key, &Vec::from_iter(prefills.iter().copied()), "the model's prefills run")
                }
            };
            (m.id.clone(), Unpaired { role: m.role, reason })
        })
        .collect();
    let no_pair = serving.is_none().then(|| {
        let fields = fields_differing(&prefills, &decodes);
        let list = |keys: &BTreeSet<&PairingKey>| join_or(keys.iter().map(|k| k.describe(&fields)));
        format!("its prefills run {}, its decodes run {}", list(&prefills), list(&decodes))
    });
    ModelPairing { serving, no_pair, unpaired }
}

/// `own`'s values where it differs from `others`, "but {whose} {their values}".
fn differs(own: &PairingKey, others: &[&PairingKey], whose: &str) -> String {
    let fields = fields_differing(&BTreeSet::from([own]), &others.iter().copied().collect());
    let theirs = join_or(others.iter().map(|k| k.describe(&fields)));
    format!("{}, but {whose} {theirs}", own.describe(&fields))
}

/// The fields in which some key of `a` differs from some key of `b`, in key order.
fn fields_differing(a: &BTreeSet<&PairingKey>, b: &BTreeSet<&PairingKey>) -> Vec<Field> {
    let set: BTreeSet<Field> =
        a.iter().flat_map(|x| b.iter().flat_map(move |y| Field::differing(x, y))).collect();
    set.into_iter().collect()
}

/// The distinct `items`, in order, joined by " or ".
fn join_or(items: impl Iterator<Item = String>) -> String {
    let mut seen = BTreeSet::new();
    items.filter(|i| seen.insert(i.clone())).collect::<Vec<_>>().join(" or ")
}

#[cfg(test)]
mod tests;
