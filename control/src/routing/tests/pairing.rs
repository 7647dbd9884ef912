//! PD pairing in the core: unpaired targets take no picks, a model without a pair refuses every
//! pick, and drains leave the pairing as it is.

use super::*;

fn paged(id: &str, role: Role, page_size: u32) -> WorkerRecord {
    worker(id, role, "m", 1).with_page_size(page_size)
}

fn unpaired(f: &Fixture) -> Vec<(String, String)> {
    f.core
        .targets(None, None, f.now)
        .iter()
        .filter_map(|r| Some((r.slot.target.to_string(), r.slot.unpaired.as_deref()?.to_owned())))
        .collect()
}

#[test]
fn no_compatible_pair_refuses_both_picks_and_books_nothing() {
    let s = settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(vec![paged("p", Role::Prefill, 16), paged("d", Role::Decode, 1)], s);
    for kind in [PickKind::Prefill, PickKind::Decode] {
        let e = f.pick(kind, "m", 100).unwrap_err();
        assert!(matches!(e, ControlError::NoCompatiblePair { .. }), "{e}");
        assert_eq!(e.reason(), infera_proto::error::ErrorReason::NoCompatiblePair);
        assert!(e.to_string().contains("its prefills run page_size 16, its decodes run page_size 1"), "{e}");
    }
    assert_eq!(f.core.total_load(), Load::default());
    assert_eq!(
        unpaired(&f),
        [
            ("d/0".to_owned(), "page_size 1, but the model's prefills run page_size 16".to_owned()),
            ("p/0".to_owned(), "page_size 16, but the model's decodes run page_size 1".to_owned()),
        ]
    );
}

#[test]
fn a_compatible_decode_makes_the_pair_serve_and_the_odd_one_takes_no_picks() {
    let s = settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(vec![paged("p", Role::Prefill, 16), paged("d1", Role::Decode, 1)], s);
    f.core.take_pairing_changes();
    f.core.upsert_worker(paged("d16", Role::Decode, 16));
    let changes = f.core.take_pairing_changes();
    assert_eq!(changes.len(), 1, "one change, for model m");
    assert_eq!(changes[0].after.no_pair, None);
    assert!(f.pick(PickKind::Prefill, "m", 100).is_ok());
    for _ in 0..4 {
        assert_eq!(f.decode(100).worker.id.as_str(), "d16", "d1 is unpaired");
    }
    assert_eq!(
        unpaired(&f),
        [("d1/0".to_owned(), "page_size 1, but the model's paired workers run page_size 16".to_owned())]
    );
    // Drains are not structural: the serving decode drained leaves d1 unpaired.
    f.core.set_drained(&WorkerId::new("d16"), None, true).unwrap();
    assert!(matches!(f.pick(PickKind::Decode, "m", 1).unwrap_err(), ControlError::NoEligibleTarget { .. }));
    assert!(f.core.take_pairing_changes().is_empty());
    // The serving decode leaving takes the pair with it.
    assert!(f.core.remove_worker(&WorkerId::new("d16")));
    assert!(matches!(f.pick(PickKind::Decode, "m", 1).unwrap_err(), ControlError::NoCompatiblePair { .. }));
}

#[test]
fn mixed_workers_and_other_models_are_not_paired() {
    let s = settings(DecodeInputDemand::On, 0.0, DecodePolicy::RoundRobin);
    let mut f = Fixture::new(
        vec![
            paged("p", Role::Prefill, 16),
            paged("d", Role::Decode, 1),
            worker("x", Role::Mixed, "agg", 2).with_page_size(64),
        ],
        s,
    );
    assert!(f.pick(PickKind::Decode, "agg", 1).is_ok());
    assert!(unpaired(&f).iter().all(|(t, _)| !t.starts_with("x/")));
}
