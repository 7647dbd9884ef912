use super::*;

#[test]
fn arms_parse_and_map_to_smg_argv() {
    let arm = SmgArm::parse("least_load").unwrap();
    assert_eq!(
        arm,
        SmgArm {
            gateway: Gateway::Smg,
            policy: SmgPolicy::LeastLoad,
            overload_protection: true,
            priority_scheduler: false
        }
    );
    let off = SmgArm::parse("cache_aware:no-overload").unwrap();
    assert_eq!(
        off,
        SmgArm {
            gateway: Gateway::Smg,
            policy: SmgPolicy::CacheAware,
            overload_protection: false,
            priority_scheduler: false
        }
    );
    assert_eq!((arm.spec(), off.spec()), ("smg:least_load".into(), "smg:cache_aware:no-overload".into()));
    for p in SmgPolicy::ALL {
        assert_eq!(SmgArm::parse(p.name()).unwrap().policy, p);
    }
    assert!(SmgArm::parse("fastest").unwrap_err().contains("round_robin, power_of_two"));
    assert!(SmgArm::parse("least_load:overload").is_err() && SmgArm::parse("").is_err());

    let launch = Launch {
        arm,
        load_monitor_interval_s: None,
        prefills: vec![PrefillUrl { url: "http://127.0.0.1:4001".into(), bootstrap_port: 4002 }],
        decodes: vec!["http://127.0.0.1:4003".into()],
        port: 4004,
        metrics_port: 4005,
        extra: Vec::new(),
        api_key: None,
        control_key: None,
    };
    assert_eq!(
        launch.argv().join(" "),
        "launch --host 127.0.0.1 --port 4004 --pd-disaggregation --prefill http://127.0.0.1:4001 4002 \
         --decode http://127.0.0.1:4003 --decode-policy least_load --dp-aware --prometheus-host 127.0.0.1 \
         --prometheus-port 4005 --log-level warn"
    );
    let off = Launch { arm: off, ..launch };
    assert_eq!(off.argv().last().map(String::as_str), Some("--disable-worker-overload-protection"));
    assert_eq!(off.argv()[12], "cache_aware");
    let fair = Launch { load_monitor_interval_s: load_monitor_interval_s(10.0), ..off.clone() };
    assert!(
        fair.argv().join(" ").ends_with("--disable-worker-overload-protection --load-monitor-interval 1")
    );
    let priority = SmgArm::parse("least_load:no-overload:priority").unwrap();
    assert!(priority.priority_scheduler && !priority.overload_protection);
    assert_eq!(priority.spec(), "smg:least_load:no-overload:priority");
    assert_eq!(SmgArm::parse(&priority.spec()["smg:".len()..]), Ok(priority), "the spec parses back");
    assert!(SmgArm::parse("least_load:priority:no-overload").is_err(), "one order");
    let admits = Launch { arm: priority, ..off.clone() }.argv().join(" ");
    assert!(
        admits.ends_with("--disable-worker-overload-protection --priority-scheduler-enabled"),
        "{admits}"
    );
    assert!(!off.argv().join(" ").contains("priority"), "off unless asked for");
    let old = SmgArm::parse_sglang_router("cache_aware").unwrap();
    assert_eq!(old.spec(), "sglang-router:cache_aware");
    assert!(SmgArm::parse_sglang_router("least_load").unwrap_err().contains("round_robin, power_of_two"));
    let router = Launch { arm: old, load_monitor_interval_s: Some(1), ..off.clone() };
    let argv = router.argv().join(" ");
    assert!(argv.contains("--decode-policy cache_aware --prometheus-host"), "not DP-aware: {argv}");
    assert!(argv.ends_with("--log-level warn"), "no SMG-only flag: {argv}");
    let keyed = Launch { extra: vec!["--max-concurrent-requests".into(), "8".into()], ..off.clone() };
    assert!(
        keyed.argv().join(" ").ends_with("--disable-worker-overload-protection --max-concurrent-requests 8"),
        "further flags come last"
    );
    assert_eq!(
        [1.0, 2.0, 10.0, 25.0].map(load_monitor_interval_s),
        [None, Some(5), Some(1), Some(1)],
        "the default at 1×, its floor past 10×"
    );
}

#[test]
fn a_missing_smg_says_how_to_get_it() {
    let e = binary(Gateway::Smg, Some(Path::new("/nonexistent/smg"))).unwrap_err().to_string();
    assert!(e.contains("cargo xtask setup") && e.contains(SMG_VAR), "{e}");
    let e = binary(Gateway::SglangRouter, Some(Path::new("/nonexistent/r"))).unwrap_err().to_string();
    assert!(e.contains("sglang-router==0.3.2") && e.contains(SGLANG_ROUTER_VAR), "{e}");
}
