use super::*;

fn pick(lease: &str, model: &str, tokens: u64) -> pb::PickRequest {
    pb::PickRequest {
        lease_id: lease.into(),
        request_id: "req-1".into(),
        model: model.into(),
        input_tokens: tokens,
        session_key: String::new(),
        page_hashes: Vec::new(),
        fixed_page_hashes: Vec::new(),
        page_size: 0,
        exclude: Vec::new(),
        ..Default::default()
    }
}

#[test]
fn picks_are_checked_field_by_field() {
    assert_eq!(pick_request(pick("", "m", 1)).unwrap_err().field, "lease_id");
    assert_eq!(pick_request(pick("l-00000001-1", "", 1)).unwrap_err().field, "model");
    let huge = pick_request(pick("l-00000001-1", "m", MAX_REQUEST_TOKENS + 1)).unwrap_err();
    assert_eq!(huge.field, "input_tokens");
    let ok = pick_request(pick("l-00000001-1", "m", MAX_REQUEST_TOKENS)).unwrap();
    assert_eq!(ok.input_tokens, MAX_REQUEST_TOKENS);
    assert_eq!(ok.session, None);
}

#[test]
fn redeclared_legs_round_trip_and_are_checked_field_by_field() {
    let leg = DeclaredLeg {
        kind: PickKind::Decode,
        target: Target::new(WorkerId::new("d"), DpRank(3)),
        model: ModelName::new("m"),
        request_id: RequestId::new("req-1"),
        input_tokens: 900,
        age: Duration::from_millis(1_234),
        previous: Some(ReservationId { epoch: 9, seq: 4, tag: 7 }),
    };
    let wire = |legs: Vec<pb::DeclaredLeg>| pb::RedeclareRequest {
        lease_id: "l-00000002-1-0000000000000007".into(),
        legs,
    };
    let (lease, back) = redeclare_request(wire(vec![(&leg).into()])).unwrap();
    assert_eq!((lease, back), (LeaseId { epoch: 2, seq: 1, tag: 7 }, vec![leg.clone()]));
    let fallback = DeclaredLeg { previous: None, ..leg.clone() };
    assert_eq!(redeclare_request(wire(vec![(&fallback).into()])).unwrap().1, vec![fallback]);
    let bad = |f: fn(&mut pb::DeclaredLeg)| {
        let mut m = pb::DeclaredLeg::from(&leg);
        f(&mut m);
        redeclare_request(wire(vec![m])).unwrap_err().field
    };
    assert_eq!(bad(|m| m.kind = 0), "legs.kind");
    assert_eq!(bad(|m| m.target = None), "legs.target");
    assert_eq!(bad(|m| m.target.as_mut().unwrap().worker_id.clear()), "legs.target.worker_id");
    assert_eq!(bad(|m| m.model.clear()), "legs.model");
    assert_eq!(bad(|m| m.request_id.clear()), "legs.request_id");
    assert_eq!(bad(|m| m.input_tokens = MAX_REQUEST_TOKENS + 1), "legs.input_tokens");
    assert_eq!(bad(|m| m.previous_reservation_id = "r-1".into()), "legs.previous_reservation_id");
    let no_lease = pb::RedeclareRequest { lease_id: String::new(), legs: Vec::new() };
    assert_eq!(redeclare_request(no_lease).unwrap_err().field, "lease_id");
}

#[test]
fn release_reasons_are_checked() {
    let r = |reason| pb::ReleaseRequest { reservation_id: "r-00000001-1".into(), reason, failure: 0 };
    assert!(release_request(&r(pb::ReleaseReason::Eof as i32)).is_ok());
    let failed = |failure| pb::ReleaseRequest { failure, ..r(pb::ReleaseReason::Failed as i32) };
    assert_eq!(
        release_request(&failed(pb::LegFailure::Connect as i32)).unwrap().failure,
        Some(LegFailure::Connect)
    );
    assert_eq!(release_request(&failed(0)).unwrap().failure, None, "a failed leg of unknown cause");
    assert_eq!(release_request(&failed(77)).unwrap_err().problem, Problem::UnknownEnum(77));
    let eof_with_kind = pb::ReleaseRequest { failure: 1, ..r(pb::ReleaseReason::Eof as i32) };
    assert_eq!(release_request(&eof_with_kind).unwrap_err().field, "failure");
    assert_eq!(release_request(&r(0)).unwrap_err().problem, Problem::Unspecified);
    assert_eq!(release_request(&r(99)).unwrap_err().problem, Problem::UnknownEnum(99));
    assert!(release_request(&r(pb::ReleaseReason::LeaseExpired as i32)).is_err());
}

#[test]
fn pick_answers_are_checked() {
    let worker = pb::WorkerEndpoint {
        worker_id: "d".into(),
        role: pb::Role::Decode as i32,
        model: "m".into(),
        url: "http://d:1".into(),
        bootstrap_port: 0,
        dp_size: 2,
        page_size: 16,
        transfer_backend: "nixl".into(),
        kv_cache_dtype: String::new(),
        sglang_version: "0.5.18".into(),
    };
    let answer = pb::PickResponse {
        reservation_id: "r-00000001-7-0000000000000007".into(),
        target: Some(pb::Target { worker_id: "d".into(), dp_rank: 1 }),
        worker: Some(worker.clone()),
        cost: None,
        mode: 0,
    };
    let p = picked(&answer).unwrap();
    assert_eq!(p.reservation, ReservationId { epoch: 1, seq: 7, tag: 7 });
    assert_eq!(p.target.to_string(), "d/1");
    assert_eq!((p.worker.role, p.worker.bootstrap_port), (Role::Decode, None));
    assert_eq!(p.worker.transfer_backend.as_deref(), Some("nixl"));
    assert_eq!(p.worker.kv_cache_dtype, None, "empty: the engine did not say (or an older control)");
    assert_eq!(p.worker.sglang_version.as_deref(), Some("0.5.18"));
    assert_eq!(pb::WorkerEndpoint::from(&p.worker), worker, "back to the wire as it came");
    assert_eq!(picked(&pb::PickResponse { target: None, ..answer.clone() }).unwrap_err().field, "target");
    let unspecified = pb::WorkerEndpoint { role: 0, ..worker };
    let bad = pb::PickResponse { worker: Some(unspecified), ..answer };
    assert_eq!(picked(&bad).unwrap_err().problem, Problem::Unspecified);
}

#[test]
fn release_reasons_round_trip_to_the_wire() {
    for reason in ReleaseReason::ALL.into_iter().filter(|r| *r != ReleaseReason::LeaseExpired) {
        let m = pb::ReleaseRequest {
            reservation_id: "r-00000001-1".into(),
            reason: pb::ReleaseReason::from(reason) as i32,
            failure: 0,
        };
        assert_eq!(release_request(&m).unwrap().reason, reason);
    }
}

#[test]
fn releases_go_to_the_wire_and_back_as_they_were() {
    let id = ReservationId { epoch: 1, seq: 9, tag: 7 };
    let failed = Release { id, reason: ReleaseReason::Failed, failure: Some(LegFailure::StreamCut) };
    let eof = Release { id, reason: ReleaseReason::Eof, failure: None };
    for release in [failed, eof] {
        assert_eq!(release_request(&pb::ReleaseRequest::from(&release)), Ok(release));
    }
    assert_eq!(pb::ReleaseRequest::from(&eof).failure, 0, "no failure: unspecified on the wire");
}

#[test]
fn unknown_modes_are_rejected() {
    assert!(decode_input_demand("m", 0).is_err());
    assert!(decode_input_demand("m", 7).is_err());
    assert_eq!(decode_input_demand("m", 3).unwrap(), DecodeInputDemand::On);
}
