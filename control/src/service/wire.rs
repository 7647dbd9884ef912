//! Domain → wire for what control sends back (incoming values are converted in
//! `infera_proto::convert`).

use infera_proto::convert::timestamp;
use infera_proto::pb;
use infera_proto::types::RequestWeight;

use crate::decisions::{CandidateTerms, Decision};
use crate::engine::{EngineBoard, Reading};
use crate::fit::{PoolFit, WeightMode, WorkerRow};
use crate::leader::LeadershipView;
use crate::routing::{ReservationRow, TargetRow};
use crate::settings::Settings;

pub(super) fn config(
    s: &Settings,
    mode: WeightMode,
    pools: &[PoolFit],
    leadership: pb::Leadership,
) -> pb::Config {
    pb::Config {
        leadership: Some(leadership),
        decode_request_weight_auto: mode == WeightMode::Auto,
        decode_pool_weights: pools.iter().map(|p| pool_weight(p, mode, s.weight)).collect(),
        decode_input_demand: pb::DecodeInputDemand::from(s.mode) as i32,
        decode_request_weight: s.weight.get(),
        decode_policy: pb::DecodePolicy::from(s.policy) as i32,
        default_lease_ttl_ms: millis(s.lease_ttl),
        prefill_session_slack_tokens: s.session_slack_tokens,
        session_ttl_ms: millis(s.session_ttl),
        prefill_policy: s.prefill_policy.as_str().to_owned(),
        prefill_overlap_credit: s.overlap_credit.get(),
        decode_prefilling_weight: s.prefilling_weight.get(),
        decode_prefilling_age_decay: s.prefilling_age_decay.is_on(),
    }
}

pub(super) fn leadership(view: &LeadershipView, warm: bool) -> pb::Leadership {
    pb::Leadership {
        role: view.role.as_str().to_owned(),
        url: view.url.clone(),
        leader_url: view.leader_url.clone().unwrap_or_default(),
        epoch: view.epoch,
        warm,
        leading_since: view.since_wall.map(timestamp),
        admin_url: view.admin_url.clone().unwrap_or_default(),
        leader_admin_url: view.leader_admin_url.clone().unwrap_or_default(),
    }
}

fn pool_weight(p: &PoolFit, mode: WeightMode, set: RequestWeight) -> pb::DecodePoolWeight {
    pb::DecodePoolWeight {
        model: p.model.to_string(),
        request_weight: match mode {
            WeightMode::Pinned => set.get(),
            WeightMode::Auto => p.weight.unwrap_or(set.get()),
        },
        fitted_weight: p.weight,
        workers: p.workers.iter().map(worker_fit).collect(),
    }
}

fn worker_fit(row: &WorkerRow) -> pb::DecodeWeightFit {
    let r = &row.report;
    let s = r.solution;
    let of = |f: fn(&crate::fit::regress::Solution) -> f64| s.as_ref().map_or(0.0, f);
    pb::DecodeWeightFit {
        worker_id: row.worker.to_string(),
        verdict: r.verdict.as_str().to_owned(),
        weight_in_force: r.weight,
        fitted_weight: s.map(|s| s.weight_tokens).filter(|w| w.is_finite()),
        r_squared: of(|s| s.r_squared),
        samples: r.samples,
        relative_standard_error: of(|s| s.weight_rel_se),
        base_ms: of(|s| s.base_ms),
        ms_per_request: of(|s| s.ms_per_request),
        ms_per_mtoken: of(|s| s.ms_per_mtoken),
        mean_requests: of(|s| s.mean_requests),
        mean_context_tokens: of(|s| s.mean_context_tokens),
    }
}

pub(super) fn millis(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

pub(super) fn target_status(
    TargetRow { slot, load, health, .. }: &TargetRow,
    engine: &EngineBoard,
) -> pb::TargetStatus {
    let reading = engine.get(&slot.target);
    let drift = reading.map_or(0, |r| signed(load.held_requests) - signed(r.load.holding()));
    pb::TargetStatus {
        target: Some((&slot.target).into()),
        worker: Some(slot.worker.as_ref().into()),
        drained: slot.drained,
        booked_input_tokens: load.booked_input_tokens,
        held_requests: load.held_requests,
        engine: reading.map(|r| engine_load(&r)),
        drift_requests: drift,
        prefilling_requests: load.prefilling.requests,
        health: health.state.to_owned(),
        consecutive_failures: health.failures,
        ejected_for_ms: u64::try_from(health.ejected_for.as_millis()).unwrap_or(u64::MAX),
        unpaired_reason: slot.unpaired.as_deref().unwrap_or_default().to_owned(),
        draining: slot.draining,
    }
}

fn engine_load(r: &Reading) -> pb::EngineLoad {
    let l = r.load;
    pb::EngineLoad {
        running_requests: l.running,
        queued_requests: l.queued(),
        waiting_requests: l.waiting,
        prealloc_queue_requests: l.prealloc_queue,
        transfer_queue_requests: l.transfer_queue,
        used_tokens: l.used_tokens,
        max_total_tokens: l.max_total_tokens,
        age_ms: millis(r.at.elapsed()),
    }
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn targets(rows: &[TargetRow], engine: &EngineBoard) -> pb::ListTargetsResponse {
    pb::ListTargetsResponse { targets: rows.iter().map(|r| target_status(r, engine)).collect() }
}

pub(super) fn terms(c: &CandidateTerms, request_tokens: u64, w: RequestWeight) -> pb::CandidateTerms {
    pb::CandidateTerms {
        target: Some((&c.target).into()),
        booked_input_tokens: c.load.booked_input_tokens,
        held_requests: c.load.held_requests,
        request_tokens,
        request_weight: w.get(),
        cost: c.cost,
        session_affinity: c.session_affinity,
        overlap_pages: c.overlap_pages,
        cached_tokens: c.cached_tokens,
        prefilling_requests: c.load.prefilling.requests,
        prefilling_tokens: c.load.prefilling.tokens,
        kv_overflow: c.kv_overflow,
        prefilling_weighted: c.prefilling_weighted.requests,
        prefilling_weighted_tokens: c.prefilling_weighted.tokens,
        probe: c.probe,
    }
}

pub(super) fn reservation(row: &ReservationRow) -> pb::Reservation {
    let r = &row.reservation;
    pb::Reservation {
        reservation_id: r.id.to_string(),
        lease_id: r.lease.to_string(),
        holder: row.holder.clone(),
        kind: pb::PickKind::from(r.kind) as i32,
        target: Some((&row.target).into()),
        request_id: r.request_id.to_string(),
        input_tokens: r.input_tokens,
        booked_at: Some(timestamp(r.booked_at)),
        owner: row.owner.as_ref().map(ToString::to_string).unwrap_or_default(),
    }
}

pub(super) fn decision(d: &Decision) -> pb::DecisionEvent {
    pb::DecisionEvent {
        at: Some(timestamp(d.at)),
        kind: pb::PickKind::from(d.kind) as i32,
        request_id: d.request_id.to_string(),
        reservation_id: d.reservation.to_string(),
        model: d.model.to_string(),
        mode: pb::DecodeInputDemand::from(d.mode) as i32,
        policy: pb::DecodePolicy::from(d.policy) as i32,
        chosen: Some((&d.chosen).into()),
        suggested: d.suggested.as_ref().map(Into::into),
        agree: d.agree,
        request_weight: d.weight.get(),
        request_tokens: d.request_tokens,
        candidates: d.candidates.iter().map(|c| terms(c, d.request_tokens, d.weight)).collect(),
    }
}
