//! The last known target list (from control's `ListTargets`), the proxy's own in-flight count
//! per target, and the local fallback choice used when control cannot answer in time.

use std::collections::HashMap;
use std::sync::Mutex;

use infera_proto::convert::{self, ConvertError, Problem};
use infera_proto::pb;
use infera_proto::types::{DpRank, ModelName, PickKind, Role, Target, WorkerId, WorkerRecord};
use rand::Rng;

/// A worker rank the proxy can send a leg to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The worker's id.
    pub worker_id: WorkerId,
    /// The worker's base URL, e.g. `http://10.0.0.7:30000`.
    pub url: String,
    /// PD bootstrap port (prefill workers).
    pub bootstrap_port: Option<u16>,
    /// Attention-DP ranks of the worker.
    pub dp_size: u32,
    /// The rank this leg goes to.
    pub rank: DpRank,
    /// The worker's role.
    pub role: Role,
}

impl Endpoint {
    /// Rank `rank` of `worker`.
    pub fn new(worker: &WorkerRecord, rank: DpRank) -> Self {
        Self {
            worker_id: worker.id.clone(),
            url: worker.url.trim_end_matches('/').to_owned(),
            bootstrap_port: worker.bootstrap_port,
            dp_size: worker.dp_size.max(1),
            rank,
            role: worker.role,
        }
    }

    /// The target the leg goes to.
    pub fn target(&self) -> Target {
        Target::new(self.worker_id.clone(), self.rank)
    }
}

/// One target of the list, converted from control's `TargetStatus`.
#[derive(Clone, Debug)]
struct Listed {
    /// The worker behind the target.
    worker: WorkerRecord,
    /// The target's rank.
    rank: DpRank,
    /// Whether an operator drained it, or its registrar is draining it before a stop (no new picks).
    drained: bool,
    /// Whether control ejected it for failing (outlier ejection).
    ejected: bool,
    /// Why its worker cannot pair with the model's serving prefill/decode group (control's
    /// `unpaired_reason`): it takes no legs, even here.
    unpaired: Option<String>,
}

impl Listed {
    fn from_wire(t: &pb::TargetStatus) -> Result<Self, ConvertError> {
        let missing = |field| ConvertError { field, problem: Problem::Missing };
        let target = convert::target(t.target.as_ref().ok_or_else(|| missing("target"))?)?;
        let worker = convert::worker_endpoint(t.worker.as_ref().ok_or_else(|| missing("worker"))?)?;
        Ok(Self {
            worker,
            rank: target.rank,
            drained: t.drained || t.draining,
            ejected: t.health == "ejected",
            unpaired: Some(t.unpaired_reason.clone()).filter(|r| !r.is_empty()),
        })
    }
}

/// The last target list control gave.
#[derive(Debug, Default)]
pub struct TargetList {
    targets: Vec<Listed>,
}

impl TargetList {
    /// From a `ListTargets` answer; entries that do not convert (no worker, an unspecified role,
    /// an empty id) are left out, with a warning.
    pub fn new(targets: Vec<pb::TargetStatus>) -> Self {
        let targets = targets
            .iter()
            .filter_map(|t| {
                Listed::from_wire(t)
                    .map_err(|e| tracing::warn!(error = %e, "ignoring a target control listed"))
                    .ok()
            })
            .collect();
        Self { targets }
    }

    /// Whether control was never reached (nothing known).
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    pub(crate) fn workers(&self) -> impl Iterator<Item = &WorkerRecord> {
        self.targets.iter().map(|t| &t.worker)
    }

    /// The served models, sorted.
    pub fn models(&self) -> Vec<ModelName> {
        let mut m: Vec<ModelName> = self.workers().map(|w| w.model.clone()).collect();
        m.sort();
        m.dedup();
        m
    }

    /// The model a request is for: the one it names (the base model of a LoRA adapter it names,
    /// [`crate::lora`]), else the deployment's only model (`None` when it names none and several
    /// are served).
    pub fn model_for(&self, named: Option<&ModelName>) -> Option<ModelName> {
        match named {
            Some(m) => Some(self.resolve(m).base),
            None => self.only_model(),
        }
    }

    /// What `named` names: a served model, or an adapter of one ([`crate::lora::resolve`]).
    pub fn resolve(&self, named: &ModelName) -> crate::lora::Resolved {
        crate::lora::resolve(named, self.targets.iter().map(|t| &t.worker.model))
    }

    /// Whether some worker serves `model` (without building the list of models).
    pub fn serves(&self, model: &ModelName) -> bool {
        self.workers().any(|w| w.model == *model)
    }

    /// Whether `model` is served by PD workers (`Some(true)`), mixed ones (`Some(false)`), or
    /// not known (`None`).
    pub fn is_pd(&self, model: &ModelName) -> Option<bool> {
        let roles: Vec<Role> = self.workers().filter(|w| w.model == *model).map(|w| w.role).collect();
        if roles.is_empty() { None } else { Some(roles.contains(&Role::Prefill)) }
    }

    /// When `model` has prefill and decode targets of which none is paired (control refuses its
    /// picks with `NO_COMPATIBLE_PAIR`; the fallback must too): each worker's reason,
    /// `worker: reason` joined by `; `.
    pub fn no_pair(&self, model: &ModelName) -> Option<String> {
        let pd: Vec<&Listed> = self
            .targets
            .iter()
            .filter(|t| t.worker.model == *model && matches!(t.worker.role, Role::Prefill | Role::Decode))
            .collect();
        let has = |role| pd.iter().any(|t| t.worker.role == role);
        if !(has(Role::Prefill) && has(Role::Decode)) || pd.iter().any(|t| t.unpaired.is_none()) {
            return None;
        }
        let mut reasons: Vec<String> = pd
            .iter()
            .map(|t| format!("{}: {}", t.worker.id, t.unpaired.as_deref().unwrap_or_default()))
            .collect();
        reasons.dedup();
        Some(reasons.join("; "))
    }

    /// The model when the deployment serves exactly one.
    pub fn only_model(&self) -> Option<ModelName> {
        let models = self.models();
        (models.len() == 1).then(|| models[0].clone())
    }

    /// The KV page size of `model`'s paired prefill workers (the first listed; they share one),
    /// which the prompt's page hashes are computed with.
    pub fn prefill_page_size(&self, model: &ModelName) -> Option<u32> {
        self.targets
            .iter()
            .find(|t| t.unpaired.is_none() && t.worker.model == *model && t.worker.role == Role::Prefill)
            .map(|t| t.worker.page_size)
    }

    /// One endpoint (rank 0) per worker of `model` that takes requests now (not drained, not
    /// ejected, paired), in the list's order: those a request any worker answers alike can go
    /// to (`crate::any_worker`).
    pub fn workers_of(&self, model: &ModelName) -> Vec<Endpoint> {
        let mut out: Vec<Endpoint> = Vec::new();
        let open = self
            .targets
            .iter()
            .filter(|t| !t.drained && !t.ejected && t.unpaired.is_none() && t.worker.model == *model);
        for t in open {
            if !out.iter().any(|e| e.worker_id == t.worker.id) {
                out.push(Endpoint::new(&t.worker, DpRank(0)));
            }
        }
        out
    }

    /// Eligible endpoints of a pool: paired and not drained, and neither ejected by control nor
    /// in `exclude` (the request failed there) — unless that leaves none.
    fn pool(&self, model: &ModelName, kind: PickKind, exclude: &[Target]) -> Vec<Endpoint> {
        let with_role = |role: Role| -> Vec<Endpoint> {
            let open: Vec<&Listed> = self
                .targets
                .iter()
                .filter(|t| {
                    !t.drained && t.unpaired.is_none() && t.worker.model == *model && t.worker.role == role
                })
                .collect();
            let excluded = |t: &Listed| exclude.iter().any(|x| x.worker == t.worker.id && x.rank == t.rank);
            // The best tier that is not empty: healthy and not failed here, not failed here, any.
            let tiers: [&dyn Fn(&Listed) -> bool; 2] = [&|t| !t.ejected && !excluded(t), &|t| !excluded(t)];
            let chosen = tiers
                .iter()
                .map(|keep| open.iter().copied().filter(|t| keep(t)).collect::<Vec<&Listed>>())
                .find(|tier| !tier.is_empty())
                .unwrap_or(open);
            chosen.into_iter().map(|t| Endpoint::new(&t.worker, t.rank)).collect()
        };
        match kind {
            PickKind::Prefill => with_role(Role::Prefill),
            PickKind::Decode => {
                let decode = with_role(Role::Decode);
                if decode.is_empty() { with_role(Role::Mixed) } else { decode }
            }
        }
    }
}

/// Requests this proxy has in flight per target: the fallback's load signal.
#[derive(Debug, Default)]
pub struct LocalLoad {
    inflight: Mutex<HashMap<Target, u64>>,
}

impl LocalLoad {
    /// A leg starts on `e`.
    pub fn start(&self, e: &Endpoint) {
        *self.inflight.lock().expect("local load lock").entry(e.target()).or_default() += 1;
    }

    /// A leg on `e` ends.
    pub fn end(&self, e: &Endpoint) {
        let mut map = self.inflight.lock().expect("local load lock");
        if let Some(n) = map.get_mut(&e.target()) {
            *n = n.saturating_sub(1);
        }
    }

    /// Legs in flight on `e`.
    pub fn get(&self, e: &Endpoint) -> u64 {
        self.inflight.lock().expect("local load lock").get(&e.target()).copied().unwrap_or(0)
    }

    /// The local choice: the eligible endpoint with the fewest of this proxy's legs, ties at
    /// random. `None` when the pool is empty.
    pub fn choose(
        &self,
        list: &TargetList,
        model: &ModelName,
        kind: PickKind,
        exclude: &[Target],
        rng: &mut impl Rng,
    ) -> Option<Endpoint> {
        let pool = list.pool(model, kind, exclude);
        // One snapshot of the counts, so the minimum and the tied set agree.
        let counts: Vec<u64> = {
            let map = self.inflight.lock().expect("local load lock");
            pool.iter().map(|e| map.get(&e.target()).copied().unwrap_or(0)).collect()
        };
        let min = *counts.iter().min()?;
        let least: Vec<&Endpoint> =
            pool.iter().zip(&counts).filter(|(_, n)| **n == min).map(|(e, _)| e).collect();
        Some(least[rng.random_range(0..least.len())].clone())
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn status(worker: &str, role: pb::Role, model: &str, rank: u32, drained: bool) -> pb::TargetStatus {
        pb::TargetStatus {
            target: Some(pb::Target { worker_id: worker.into(), dp_rank: rank }),
            worker: Some(pb::WorkerEndpoint {
                worker_id: worker.into(),
                role: role as i32,
                model: model.into(),
                url: format!("http://{worker}:1/"),
                bootstrap_port: if role == pb::Role::Prefill { 8998 } else { 0 },
                dp_size: 2,
                page_size: 1,
                transfer_backend: "mooncake".into(),
                kv_cache_dtype: "auto".into(),
                sglang_version: String::new(),
            }),
            drained,
            booked_input_tokens: 0,
            held_requests: 0,
            engine: None,
            drift_requests: 0,
            prefilling_requests: 0,
            health: "healthy".into(),
            consecutive_failures: 0,
            ejected_for_ms: 0,
            unpaired_reason: String::new(),
            draining: false,
        }
    }

    #[test]
    fn the_fallback_passes_a_worker_its_registrar_is_draining_by() {
        let draining = pb::TargetStatus { draining: true, ..status("d", pb::Role::Decode, "m", 0, false) };
        let list = TargetList::new(vec![draining.clone(), status("p", pb::Role::Prefill, "m", 0, false)]);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let m = ModelName::new("m");
        assert!(LocalLoad::default().choose(&list, &m, PickKind::Decode, &[], &mut rng).is_none());
        let list = TargetList::new(vec![
            draining,
            status("e", pb::Role::Decode, "m", 0, false),
            status("p", pb::Role::Prefill, "m", 0, false),
        ]);
        let picked = LocalLoad::default().choose(&list, &m, PickKind::Decode, &[], &mut rng).unwrap();
        assert_eq!(picked.worker_id.as_str(), "e");
    }

    #[test]
    fn the_fallback_picks_the_least_loaded_eligible_target() {
        let list = TargetList::new(vec![
            status("d", pb::Role::Decode, "m", 0, false),
            status("d", pb::Role::Decode, "m", 1, false),
            status("p", pb::Role::Prefill, "m", 0, true),
            status("x", pb::Role::Mixed, "agg", 0, false),
        ]);
        let (m, agg) = (ModelName::new("m"), ModelName::new("agg"));
        assert_eq!(list.is_pd(&m), Some(true));
        assert_eq!(list.is_pd(&agg), Some(false));
        assert_eq!(list.is_pd(&ModelName::new("nope")), None);
        let load = LocalLoad::default();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let first = load.choose(&list, &m, PickKind::Decode, &[], &mut rng).unwrap();
        load.start(&first);
        let second = load.choose(&list, &m, PickKind::Decode, &[], &mut rng).unwrap();
        assert_ne!(first.rank, second.rank, "the busier rank is avoided");
        assert_eq!(second.url, "http://d:1");
        assert!(load.choose(&list, &m, PickKind::Prefill, &[], &mut rng).is_none(), "drained prefill");
        assert_eq!(
            load.choose(&list, &agg, PickKind::Decode, &[], &mut rng).unwrap().worker_id.as_str(),
            "x"
        );
        load.end(&first);
        assert_eq!(load.get(&first), 0);
    }

    #[test]
    fn the_fallback_passes_by_ejected_and_excluded_targets_unless_none_is_left() {
        let ejected =
            pb::TargetStatus { health: "ejected".into(), ..status("d", pb::Role::Decode, "m", 0, false) };
        let list = TargetList::new(vec![ejected, status("d", pb::Role::Decode, "m", 1, false)]);
        let (m, load) = (ModelName::new("m"), LocalLoad::default());
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for _ in 0..8 {
            let e = load.choose(&list, &m, PickKind::Decode, &[], &mut rng).unwrap();
            assert_eq!(e.rank, DpRank(1), "rank 0 is ejected");
        }
        // Rank 1 failed this request: the ejected rank 0 is all that is left, so it is used.
        let failed = [Target::new(WorkerId::new("d"), DpRank(1))];
        assert_eq!(load.choose(&list, &m, PickKind::Decode, &failed, &mut rng).unwrap().rank, DpRank(0));
    }

    #[test]
    fn the_fallback_never_picks_an_unpaired_target() {
        let unpaired = |s: pb::TargetStatus| pb::TargetStatus {
            unpaired_reason: "page_size 1, but the model's paired workers run page_size 16".into(),
            ..s
        };
        let list = TargetList::new(vec![
            status("p", pb::Role::Prefill, "m", 0, false),
            status("d16", pb::Role::Decode, "m", 0, false),
            unpaired(status("d1", pb::Role::Decode, "m", 0, false)),
        ]);
        let (m, load) = (ModelName::new("m"), LocalLoad::default());
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        assert_eq!(list.no_pair(&m), None);
        for _ in 0..8 {
            let e = load.choose(&list, &m, PickKind::Decode, &[], &mut rng).unwrap();
            assert_eq!(e.worker_id.as_str(), "d16");
        }
        // Not even when the paired decode failed this request.
        let failed = [Target::new(WorkerId::new("d16"), DpRank(0))];
        assert_eq!(
            load.choose(&list, &m, PickKind::Decode, &failed, &mut rng).unwrap().worker_id.as_str(),
            "d16"
        );

        let none = TargetList::new(vec![
            unpaired(status("p", pb::Role::Prefill, "m", 0, false)),
            unpaired(status("d1", pb::Role::Decode, "m", 0, false)),
        ]);
        assert_eq!(
            none.no_pair(&m).as_deref(),
            Some(
                "p: page_size 1, but the model's paired workers run page_size 16; \
                 d1: page_size 1, but the model's paired workers run page_size 16"
            )
        );
        assert_eq!(none.prefill_page_size(&m), None);
        assert!(load.choose(&none, &m, PickKind::Prefill, &[], &mut rng).is_none());
    }
}
