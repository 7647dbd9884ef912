//! The gRPC boundary over arbitrary field values and bytes: every conversion returns a value or a
//! `ConvertError` naming the first offending field, never panics, and valid values round-trip.

use std::time::Duration;

use infera_proto::convert::{
    ConvertError, Problem, drain_request, pick_request, picked, redeclare_request, release_request,
    worker_endpoint,
};
use infera_proto::pb;
use infera_proto::types::{
    LeaseId, MAX_EXCLUDED_TARGETS, MAX_PAGE_HASHES, MAX_REQUEST_TOKENS, Release, ReservationId,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use prost::Message as _;

fn config(cases: u32) -> ProptestConfig {
    let persistence = FileFailurePersistence::Direct("proptest-regressions/convert_fuzz.txt");
    ProptestConfig { cases, failure_persistence: Some(Box::new(persistence)), ..ProptestConfig::default() }
}

/// What a conversion must fail with: the field, and the kind of problem.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    Empty,
    Missing,
    Unknown(i32),
    Unspecified,
    NotAllowed,
    Id,
    TooLarge(u64),
}

fn matches(e: &ConvertError, field: &str, want: Want) -> bool {
    e.field == field
        && match (&e.problem, want) {
            (Problem::Empty, Want::Empty)
            | (Problem::Missing, Want::Missing)
            | (Problem::Unspecified, Want::Unspecified)
            | (Problem::NotAllowed(_), Want::NotAllowed)
            | (Problem::Id(_), Want::Id) => true,
            (Problem::UnknownEnum(v), Want::Unknown(w)) => *v == w,
            (Problem::TooLarge { value, .. }, Want::TooLarge(w)) => *value == w,
            _ => false,
        }
}

type Expected = Option<(&'static str, Want)>;

macro_rules! assert_outcome {
    ($result:expr, $expected:expr) => {
        match ($result, $expected) {
            (Ok(_), None) => {}
            (Err(e), Some((field, want))) => {
                prop_assert!(matches(&e, field, want), "{e:?}, wanted {field} {want:?}")
            }
            (r, want) => prop_assert!(false, "{r:?}, wanted {want:?}"),
        }
    };
}

/// `<prefix>-<8 hex>-<decimal ≥ 1>`, read independently of the parser.
fn grammar(prefix: &str, s: &str) -> Option<(u32, u64)> {
    let rest = s.strip_prefix(prefix)?.strip_prefix('-')?;
    let (epoch, seq) = rest.split_once('-')?;
    let hex = epoch.len() == 8 && epoch.bytes().all(|b| b.is_ascii_hexdigit());
    let dec = !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit());
    if !(hex && dec) {
        return None;
    }
    let seq: u64 = seq.parse().ok().filter(|s| *s != 0)?;
    Some((u32::from_str_radix(epoch, 16).ok()?, seq))
}

fn id_problem(prefix: &str, s: &str) -> Option<Want> {
    if s.is_empty() { Some(Want::Empty) } else { grammar(prefix, s).is_none().then_some(Want::Id) }
}

fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), Just(" \t\n".to_owned()), "[a-z0-9/._-]{1,12}", any::<String>(),]
}

/// Ids of either kind, canonical, near-miss (signs, case, width) or junk.
fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (prop_oneof![Just('l'), Just('r')], any::<u32>(), 1u64..)
            .prop_map(|(k, e, s)| format!("{k}-{e:08x}-{s}")),
        "[lr]-[+0-9a-fA-F]{7,9}-[+0-9]{0,3}",
        "[lr]-[0-9a-f]{8}-(0|00|18446744073709551616)",
        text(),
    ]
}

fn enum_value() -> impl Strategy<Value = i32> {
    prop_oneof![4 => -1i32..7, 1 => any::<i32>()]
}

fn tokens() -> impl Strategy<Value = u64> {
    prop_oneof![0..=MAX_REQUEST_TOKENS, Just(MAX_REQUEST_TOKENS + 1), any::<u64>()]
}

fn target() -> impl Strategy<Value = pb::Target> {
    (text(), any::<u32>()).prop_map(|(worker_id, dp_rank)| pb::Target { worker_id, dp_rank })
}

fn pick() -> impl Strategy<Value = pb::PickRequest> {
    let exclude =
        prop_oneof![8 => prop::collection::vec(target(), 0..3), 1 => prop::collection::vec(target(), 65..67)];
    let hashes = prop::collection::vec(any::<i64>(), 0..4);
    // Which field carries them: the fixed one (today's proxies), the varint one (older
    // clients), or both (refused).
    let fields = prop_oneof![3 => Just((false, true)), 2 => Just((true, false)), 1 => Just((true, true))];
    let page_size = prop_oneof![Just(0), any::<u32>()];
    ((id_text(), text(), text(), tokens()), (text(), hashes, fields, page_size, exclude)).prop_map(
        |(a, (session, hashes, (varint, fixed), page_size, exclude))| {
            let mut m = pb::PickRequest::default();
            (m.lease_id, m.request_id, m.model, m.input_tokens) = a;
            (m.session_key, m.page_size, m.exclude) = (session, page_size, exclude);
            if varint {
                m.page_hashes = hashes.clone();
            }
            if fixed {
                m.fixed_page_hashes = hashes;
            }
            m
        },
    )
}

/// The first of the problems that are there.
fn first<const N: usize>(checks: [Expected; N]) -> Expected {
    checks.into_iter().flatten().next()
}

/// An enum number's problem: UNSPECIFIED, or unknown (outside `known`).
fn enum_problem(v: i32, known: std::ops::RangeInclusive<i32>) -> Option<Want> {
    if v == 0 { Some(Want::Unspecified) } else { (!known.contains(&v)).then_some(Want::Unknown(v)) }
}

/// The page hashes a pick carries, in whichever field.
fn hashes(m: &pb::PickRequest) -> &[i64] {
    if m.page_hashes.is_empty() { &m.fixed_page_hashes } else { &m.page_hashes }
}

fn pick_expected(m: &pb::PickRequest) -> Expected {
    first([
        (m.input_tokens > MAX_REQUEST_TOKENS).then_some(("input_tokens", Want::TooLarge(m.input_tokens))),
        (!m.page_hashes.is_empty() && !m.fixed_page_hashes.is_empty())
            .then_some(("page_hashes", Want::NotAllowed)),
        (!hashes(m).is_empty() && m.page_size == 0).then_some(("page_size", Want::NotAllowed)),
        (m.exclude.len() > MAX_EXCLUDED_TARGETS)
            .then_some(("exclude", Want::TooLarge(m.exclude.len() as u64))),
        m.exclude.iter().any(|t| blank(&t.worker_id)).then_some(("exclude.worker_id", Want::Empty)),
        id_problem("l", &m.lease_id).map(|w| ("lease_id", w)),
        blank(&m.request_id).then_some(("request_id", Want::Empty)),
        blank(&m.model).then_some(("model", Want::Empty)),
    ])
}

fn leg() -> impl Strategy<Value = pb::DeclaredLeg> {
    let target = proptest::option::weighted(0.9, target());
    (enum_value(), target, text(), text(), tokens(), any::<u64>(), id_text()).prop_map(|f| {
        let mut m = pb::DeclaredLeg::default();
        (m.kind, m.target, m.model, m.request_id, m.input_tokens, m.age_ms, m.previous_reservation_id) = f;
        // A lease id's text stands for "no previous reservation" (a local fallback pick).
        if m.previous_reservation_id.starts_with('l') {
            m.previous_reservation_id.clear();
        }
        m
    })
}

fn leg_expected(m: &pb::DeclaredLeg) -> Expected {
    let previous = &m.previous_reservation_id;
    first([
        (m.input_tokens > MAX_REQUEST_TOKENS)
            .then_some(("legs.input_tokens", Want::TooLarge(m.input_tokens))),
        enum_problem(m.kind, 1..=2).map(|w| ("legs.kind", w)),
        m.target.is_none().then_some(("legs.target", Want::Missing)),
        m.target.as_ref().filter(|t| blank(&t.worker_id)).map(|_| ("legs.target.worker_id", Want::Empty)),
        blank(&m.model).then_some(("legs.model", Want::Empty)),
        blank(&m.request_id).then_some(("legs.request_id", Want::Empty)),
        (!previous.is_empty() && grammar("r", previous).is_none())
            .then_some(("legs.previous_reservation_id", Want::Id)),
    ])
}

fn endpoint() -> impl Strategy<Value = pb::WorkerEndpoint> {
    let port = prop_oneof![Just(0u32), 1u32..=65_535, Just(65_536u32), any::<u32>()];
    let url = prop_oneof![text(), "https?://[a-z0-9.-]{1,12}(:[0-9]{1,5})?(/[a-z]{0,4})?"];
    let dp_size = prop_oneof![0u32..=1_024, any::<u32>()];
    (text(), enum_value(), text(), url, port, dp_size, any::<u32>()).prop_map(|f| {
        let mut m = pb::WorkerEndpoint::default();
        (m.worker_id, m.role, m.model, m.url, m.bootstrap_port, m.dp_size, m.page_size) = f;
        m
    })
}

fn endpoint_expected(m: &pb::WorkerEndpoint) -> Expected {
    first([
        blank(&m.worker_id).then_some(("worker.worker_id", Want::Empty)),
        enum_problem(m.role, 1..=3).map(|w| ("worker.role", w)),
        blank(&m.url).then_some(("worker.url", Want::Empty)),
        (!url_ok(&m.url)).then_some(("worker.url", Want::NotAllowed)),
        blank(&m.model).then_some(("worker.model", Want::Empty)),
        (m.dp_size > 1_024).then_some(("worker.dp_size", Want::TooLarge(u64::from(m.dp_size)))),
    ])
}

/// `http(s)://host[:port][/path]` with a plain host and a port that fits 16 bits: the URLs the
/// generator builds on purpose, read independently of the parser (other text is refused).
fn url_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let (host, port) = authority.split_once(':').map_or((authority, None), |(h, p)| (h, Some(p)));
    let host_ok =
        !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let path_ok = rest[authority.len()..].bytes().all(|b| b == b'/' || b.is_ascii_lowercase());
    host_ok && path_ok && port.is_none_or(|p| p.parse::<u16>().is_ok())
}

proptest! {
    #![proptest_config(config(1_000))]

    #[test]
    fn ids_parse_exactly_their_grammar(s in id_text()) {
        let lease = s.parse::<LeaseId>().ok().map(|l| (l.epoch, l.seq));
        let reservation = s.parse::<ReservationId>().ok().map(|r| (r.epoch, r.seq));
        prop_assert_eq!(lease, grammar("l", &s), "lease {:?}", s);
        prop_assert_eq!(reservation, grammar("r", &s), "reservation {:?}", s);
        if let Ok(l) = s.parse::<LeaseId>() {
            prop_assert_eq!(l.to_string().parse::<LeaseId>(), Ok(l));
        }
    }

    #[test]
    fn picks_convert_or_name_the_first_bad_field(m in pick()) {
        let expected = pick_expected(&m);
        let result = pick_request(m.clone());
        if let Ok(p) = &result {
            prop_assert_eq!(p.session.is_none(), m.session_key.is_empty());
            prop_assert_eq!(p.page_size, if hashes(&m).is_empty() { 0 } else { m.page_size });
            prop_assert_eq!(&p.page_hashes[..], hashes(&m));
            prop_assert_eq!(pick_request(pb::PickRequest::from(p)), Ok(p.clone()), "round trip");
        }
        assert_outcome!(result, expected);
    }

    #[test]
    fn releases_convert_or_name_the_first_bad_field(
        id in id_text(), reason in enum_value(), failure in enum_value(),
    ) {
        let m = pb::ReleaseRequest { reservation_id: id.clone(), reason, failure };
        let expected = first([
            id_problem("r", &id).map(|w| ("reservation_id", w)),
            enum_problem(reason, 1..=5).map(|w| ("reason", w)),
            (reason == 4).then_some(("reason", Want::NotAllowed)),
            (!(0..=4).contains(&failure)).then_some(("failure", Want::Unknown(failure))),
            (failure != 0 && reason != 3).then_some(("failure", Want::NotAllowed)),
        ]);
        let result = release_request(&m);
        if let Ok(Release { id, reason, failure }) = &result {
            let back = pb::ReleaseRequest {
                reservation_id: id.to_string(),
                reason: pb::ReleaseReason::from(*reason) as i32,
                failure: failure.map_or(0, |f| pb::LegFailure::from(f) as i32),
            };
            prop_assert_eq!(release_request(&back), result.clone(), "round trip");
        }
        assert_outcome!(result, expected);
    }

    #[test]
    fn redeclares_convert_or_name_the_first_bad_field(
        lease in id_text(), legs in prop::collection::vec(leg(), 0..4),
    ) {
        let expected = match id_problem("l", &lease) {
            Some(w) => Some(("lease_id", w)),
            None => legs.iter().find_map(leg_expected),
        };
        let result = redeclare_request(pb::RedeclareRequest { lease_id: lease, legs: legs.clone() });
        if let Ok((lease, back)) = &result {
            prop_assert!(back.iter().zip(&legs).all(|(d, m)| d.age == Duration::from_millis(m.age_ms)));
            let legs = back.iter().map(Into::into).collect();
            let wire = pb::RedeclareRequest { lease_id: lease.to_string(), legs };
            prop_assert_eq!(redeclare_request(wire), result.clone(), "round trip");
        }
        assert_outcome!(result, expected);
    }

    #[test]
    fn drains_and_endpoints_convert_or_name_the_bad_field(
        worker_id in text(), dp_rank in any::<Option<u32>>(), stop_when_drained in any::<bool>(), m in endpoint(),
    ) {
        let drain = drain_request(pb::DrainTargetRequest { worker_id: worker_id.clone(), dp_rank, stop_when_drained });
        let expected = if blank(&worker_id) {
            Some(("worker_id", Want::Empty))
        } else {
            (stop_when_drained && dp_rank.is_some()).then_some(("dp_rank", Want::NotAllowed))
        };
        assert_outcome!(drain, expected);
        let expected = endpoint_expected(&m);
        let result = worker_endpoint(&m);
        if let Ok(w) = &result {
            let port = u16::try_from(m.bootstrap_port).ok().filter(|p| *p != 0);
            prop_assert_eq!(w.bootstrap_port, port);
            prop_assert_eq!(worker_endpoint(&pb::WorkerEndpoint::from(w)), Ok(w.clone()), "round trip");
        }
        assert_outcome!(result, expected);
    }

    #[test]
    fn pick_answers_convert_or_name_the_first_bad_field(
        id in id_text(),
        t in proptest::option::weighted(0.9, target()),
        w in proptest::option::weighted(0.9, endpoint()),
    ) {
        let expected = first([
            id_problem("r", &id).map(|w| ("reservation_id", w)),
            t.is_none().then_some(("target", Want::Missing)),
            t.as_ref().filter(|t| blank(&t.worker_id)).map(|_| ("target.worker_id", Want::Empty)),
            w.is_none().then_some(("worker", Want::Missing)),
            w.as_ref().and_then(endpoint_expected),
        ]);
        let answer = pb::PickResponse { reservation_id: id, target: t, worker: w, cost: None, mode: 0 };
        assert_outcome!(picked(&answer), expected);
    }

    #[test]
    fn arbitrary_and_bent_wire_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..96),
        m in pick(),
        (at, byte) in (any::<usize>(), any::<u8>()),
    ) {
        let mut bent = m.encode_to_vec();
        if !bent.is_empty() {
            let at = at % bent.len();
            bent[at] = byte;
        }
        for b in [&bytes[..], &bent[..]] {
            if let Ok(m) = pb::PickRequest::decode(b) { let _ = pick_request(m); }
            if let Ok(m) = pb::ReleaseRequest::decode(b) { let _ = release_request(&m); }
            if let Ok(m) = pb::RedeclareRequest::decode(b) { let _ = redeclare_request(m); }
            if let Ok(m) = pb::DrainTargetRequest::decode(b) { let _ = drain_request(m); }
            if let Ok(m) = pb::PickResponse::decode(b) { let _ = picked(&m); }
        }
    }
}

#[test]
fn too_many_page_hashes_name_the_field() {
    let (lease_id, page_hashes) = ("l-00000001-1".into(), vec![0; MAX_PAGE_HASHES + 1]);
    let m = pb::PickRequest { lease_id, page_hashes, page_size: 16, ..pb::PickRequest::default() };
    let e = pick_request(m).unwrap_err();
    assert!(matches(&e, "page_hashes", Want::TooLarge(MAX_PAGE_HASHES as u64 + 1)), "{e:?}");
    let fixed_page_hashes = vec![0; MAX_PAGE_HASHES + 1];
    let m = pb::PickRequest {
        lease_id: "l-00000001-1".into(),
        fixed_page_hashes,
        page_size: 16,
        ..pb::PickRequest::default()
    };
    let e = pick_request(m).unwrap_err();
    assert!(matches(&e, "fixed_page_hashes", Want::TooLarge(MAX_PAGE_HASHES as u64 + 1)), "{e:?}");
}

#[test]
fn both_page_hash_fields_are_refused_and_either_alone_converts_alike() {
    let base = pb::PickRequest {
        lease_id: "l-00000001-1".into(),
        request_id: "req-1".into(),
        model: "m".into(),
        page_size: 16,
        ..pb::PickRequest::default()
    };
    let varint = pb::PickRequest { page_hashes: vec![-3, i64::MAX], ..base.clone() };
    let fixed = pb::PickRequest { fixed_page_hashes: vec![-3, i64::MAX], ..base.clone() };
    let both = pb::PickRequest { fixed_page_hashes: vec![-3, i64::MAX], ..varint.clone() };
    let (varint, fixed) = (pick_request(varint).unwrap(), pick_request(fixed).unwrap());
    assert_eq!(varint, fixed);
    assert_eq!(fixed.page_hashes, vec![-3, i64::MAX]);
    let e = pick_request(both).unwrap_err();
    assert!(matches(&e, "page_hashes", Want::NotAllowed), "{e:?}");
    // On the wire the fixed field is 8 bytes a hash; an int64 varint of a negative one is 10.
    let wide = pb::PickRequest { page_hashes: vec![-1; 100], ..base.clone() };
    let narrow = pb::PickRequest { fixed_page_hashes: vec![-1; 100], ..base };
    assert!(narrow.encoded_len() + 150 < wide.encoded_len());
}
