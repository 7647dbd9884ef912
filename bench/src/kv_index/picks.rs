//! What a KV-aware prefill pick costs over a plain one, in-process: the routing core with one
//! prefill worker whose ranks are the index's targets.

use std::time::{Duration, Instant, SystemTime};

use infera_control::routing::{KvIndex, OverlapSource, Overlaps, PickContext, RoutingCore};
use infera_control::view::View;
use infera_kv::hash::PageHash;
use infera_proto::types::{
    ModelName, PickKind, PickRequest, Release, ReleaseReason, RequestId, RequestWeight, WorkerId,
    WorkerRecord,
};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::{Args, micros};

/// Microseconds of prefill picks + releases (each sample one pick and its release).
pub(super) struct PickCosts {
    /// Without page hashes.
    pub(super) plain: Vec<f64>,
    /// With them, the index asked inside the pick.
    pub(super) kv: Vec<f64>,
    /// With them as control does it: the overlap lookup alone (outside the routing lock) ...
    pub(super) lookup: Vec<f64>,
    /// ... and the pick + release credited from it (under the routing lock).
    pub(super) booking: Vec<f64>,
}

/// Prefill pick costs without and with the query's page hashes.
pub(super) fn pick_costs(index: &KvIndex, queries: &[Vec<PageHash>], args: &Args) -> PickCosts {
    let worker = WorkerRecord::prefill("prefill", "http://10.0.0.1:30000", "m", 8998)
        .with_dp_size(args.targets)
        .with_page_size(args.page_size as u32);
    let settings = crate::control::core_settings(RequestWeight::ZERO);
    let view = View::new([worker]);
    // The view interns the worker's ranks as keys 0..targets, the keys the events used.
    let keys = view.worker_targets(&WorkerId::new("prefill"), None).expect("registered");
    assert!(keys.iter().zip(0..).all(|(k, i)| k.index() == i && i < args.targets as usize));
    let mut core = RoutingCore::new(view, settings, 1, SmallRng::seed_from_u64(1)).expect("valid settings");
    let (now, wall) = (Instant::now(), SystemTime::now());
    let caller = infera_control::identity::Identity::anonymous();
    let lease =
        core.open_lease("bench".into(), &caller, Duration::from_secs(300), now).expect("a lease").lease;
    let tokens = (args.query_pages * args.page_size) as u64;
    let hashes: Vec<Vec<i64>> = queries.iter().map(|q| q.iter().map(|h| h.0).collect()).collect();
    let request = |i: usize, with_hashes: bool| PickRequest {
        lease,
        request_id: RequestId::new("bench"),
        model: ModelName::new("m"),
        input_tokens: tokens,
        session: None,
        page_hashes: if with_hashes { hashes[i % hashes.len()].clone() } else { Vec::new() },
        page_size: if with_hashes { args.page_size as u32 } else { 0 },
        exclude: Vec::new(),
        admission: Default::default(),
    };
    let pick = |core: &mut RoutingCore<SmallRng>, req: &PickRequest, kv: &dyn OverlapSource| {
        let ctx =
            PickContext { caller: &caller, kv: Some(kv), record_decision: false, now, wall, kv_room: None };
        let picked = core.pick(PickKind::Prefill, req, ctx).expect("pick");
        core.release(Release::new(picked.reservation, ReleaseReason::Eof), &caller, now).expect("release");
    };
    let mut costs = PickCosts { plain: Vec::new(), kv: Vec::new(), lookup: Vec::new(), booking: Vec::new() };
    for i in 0..args.queries {
        let (plain, kv) = (request(i, false), request(i, true));
        costs.plain.push(micros(|| pick(&mut core, &plain, index)));
        costs.kv.push(micros(|| pick(&mut core, &kv, index)));
        let mut pool = Vec::new();
        core.pool_keys(&kv.model, PickKind::Prefill, &mut pool);
        let mut overlaps = None;
        costs.lookup.push(micros(|| overlaps = Some(Overlaps::compute(index, &kv.page_hashes, pool))));
        let overlaps = overlaps.expect("computed");
        costs.booking.push(micros(|| pick(&mut core, &kv, &overlaps)));
    }
    costs
}
