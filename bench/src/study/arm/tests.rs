//! The arms' names, flags and keys.

use super::*;

#[test]
fn arms_parse_and_map_to_control_flags() {
    let arms: Vec<Arm> =
        ["0", "180_000", "1e6", "round-robin", "power-of-two"].iter().map(|s| s.parse().unwrap()).collect();
    assert_eq!(arms[2], Arm::Weight(1e6));
    let phased: Arm = "1e6/p0.5".parse().unwrap();
    assert_eq!(phased, Arm::Phased { weight: 1e6, prefilling: 0.5, age_decay: false, overlap_credit: None });
    assert_eq!(
        phased.control_flags()[4..].join(" "),
        "--decode-prefilling-age-decay off --decode-prefilling-weight 0.5"
    );
    assert!("1e6/p9".parse::<Arm>().is_err() && "1e6/px".parse::<Arm>().is_err());
    let aged: Arm = "1e6/age".parse().unwrap();
    assert_eq!(aged, Arm::Phased { weight: 1e6, prefilling: 1.0, age_decay: true, overlap_credit: None });
    assert_eq!(
        aged.control_flags()[4..].join(" "),
        "--decode-prefilling-age-decay on --decode-prefilling-weight 1"
    );
    assert_eq!(
        (aged.key(), aged.to_string()),
        ("w1000000-p1-age".into(), "W = 1,000,000, prefilling ×1, age-decayed".into())
    );
    let half: Arm = "1e6/p0.5/age".parse().unwrap();
    assert_eq!(half, Arm::Phased { weight: 1e6, prefilling: 0.5, age_decay: true, overlap_credit: None });
    let credited: Arm = "1e6/age/c1".parse().unwrap();
    assert_eq!(
        credited,
        Arm::Phased { weight: 1e6, prefilling: 1.0, age_decay: true, overlap_credit: Some(1.0) }
    );
    assert_eq!(
        credited.control_flags()[4..].join(" "),
        "--decode-prefilling-age-decay on --decode-prefilling-weight 1 --prefill-overlap-credit 1"
    );
    assert_eq!(
        (credited.key(), credited.to_string()),
        (
            "w1000000-p1-age-c1".into(),
            "W = 1,000,000, prefilling ×1, age-decayed, prefill overlap credit 1".into()
        )
    );
    for bad in ["1e6/c1/c2", "1e6/cx", "round-robin/c1", "1e6/c-1", "1e6/c1/age"] {
        assert!(bad.parse::<Arm>().is_err(), "{bad}");
    }
    assert_eq!(phased.key(), "w1000000-p0.5", "no /age: no decay, the key as before");
    for bad in ["round-robin/age", "1e6/age/age", "/age", "1e6/age/p1"] {
        assert!(bad.parse::<Arm>().is_err(), "{bad}");
    }
    assert_eq!(
        arms[1].control_flags().join(" "),
        "--decode-input-demand on --decode-request-weight 180000 --decode-prefilling-age-decay off"
    );
    assert_eq!(arms[4].control_flags().join(" "), "--decode-input-demand off --decode-policy power-of-two");
    assert_eq!(
        arms.iter().map(Arm::key).collect::<Vec<_>>(),
        ["w0", "w180000", "w1000000", "round-robin", "power-of-two"]
    );
    assert_eq!(arms[2].to_string(), "W = 1,000,000");
    let least: Arm = "least-running".parse().unwrap();
    assert_eq!(least.control_flags().join(" "), "--decode-input-demand off --decode-policy least-running");
    assert!("-1".parse::<Arm>().is_err() && "fastest".parse::<Arm>().is_err());
    let smg: Arm = "smg:least_load:no-overload".parse().unwrap();
    assert_eq!(smg.key(), "smg-least_load-no-overload");
    assert_eq!(smg.to_string(), "SMG least_load, no overload protection");
    assert!(smg.control_flags().is_empty());
    assert_eq!("smg:round_robin".parse::<Arm>().unwrap().to_string(), "SMG round_robin");
    assert!("smg:random".parse::<Arm>().is_err() && "smg:".parse::<Arm>().is_err());
    assert!(smg.is_peer() && least.is_peer() && !aged.is_peer());
    assert_eq!(smg.load_view(10.0), "10 (load monitor, 1 s wall)");
    assert_eq!(smg.load_view(1.0), "10 (load monitor, 10 s wall)");
    assert_eq!(least.load_view(10.0), "0.1 (engine poll)");
    assert_eq!(least.load_view(25.0), "0.1 (engine poll)");
    assert!(aged.load_view(10.0).starts_with("0 (ledger"));
    let old: Arm = "sglang-router:cache_aware".parse().unwrap();
    assert_eq!(
        (old.key(), old.to_string()),
        ("sglang-router-cache_aware".into(), "sglang-router 0.3.2 cache_aware, not DP-aware".into())
    );
    assert!(old.is_peer() && old.load_view(10.0).contains("DP controller"));
    let admitted: Arm = "auto/admission/no-guard".parse().unwrap();
    assert_eq!(admitted, Arm::Admitted { weight: AdmittedWeight::Auto, guard: PrefillGuard::Off });
    assert!(admitted.control_flags().join(" ").ends_with("--admission on --admission-prefill-guard off"));
    assert_eq!(
        (admitted.key(), admitted.to_string()),
        ("auto-admission-no-guard".into(), "W = auto, fleet admission, no prefill guard".into())
    );
    let plain: Arm = "auto/admission".parse().unwrap();
    assert_eq!(
        (plain.key(), plain.to_string()),
        ("auto-admission".into(), "W = auto, fleet admission".into())
    );
    assert!(plain.control_flags().join(" ").ends_with("--admission-prefill-guard queue"));
    let pinned: Arm = "1e6/age/admission".parse().unwrap();
    assert_eq!(
        pinned.control_flags().join(" "),
        "--decode-input-demand on --decode-request-weight 1000000 --decode-prefilling-age-decay on \
         --admission on --admission-prefill-guard queue"
    );
    assert_eq!(
        (pinned.key(), pinned.to_string()),
        ("w1000000-age-admission".into(), "W = 1,000,000, age-decayed, fleet admission".into())
    );
    let pinned_off: Arm = "1e6/age/admission/no-guard".parse().unwrap();
    assert_eq!(pinned_off.key(), "w1000000-age-admission-no-guard");
    assert!(pinned_off.control_flags().join(" ").ends_with("--admission-prefill-guard off"));
    assert!(!pinned.is_peer() && pinned.load_view(10.0).starts_with("0 (ledger"));
    for bad in [
        "auto/admission/x",
        "auto/admissions",
        "auto/admission/top-class",
        "1e6/admission",
        "1e6/p0/age/admission",
        "1e6/age/c1/admission",
        "round-robin/admission",
    ] {
        assert!(bad.parse::<Arm>().is_err(), "{bad}");
    }
    let auto: Arm = "auto".parse().unwrap();
    assert_eq!(auto.control_flags().join(" "), "--decode-input-demand on --decode-request-weight auto");
    assert_eq!((auto.key(), auto.to_string()), ("auto".to_owned(), "W = auto".to_owned()));
}
