//! `[router]` → flags that `infera-control` and `infera-proxy` really accept: the kitchen-sink
//! fixture sets every key, and their own command-line parsers (not a copy of their flag names)
//! read what `up` would pass them, values included.

use std::path::{Path, PathBuf};

use clap::Parser;
use infera_launcher::records::{worker_records, workers_file};
use infera_launcher::router::RouterPlan;

fn kitchen_sink() -> (PathBuf, infera_launcher::deployment::DeploymentFile) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kitchen_sink.toml");
    let (file, _) = infera_launcher::deployment::load(&path).unwrap();
    (path, file)
}

/// What control's own parser makes of `router`'s flags, with the static workers file `up`
/// writes from `plan`.
fn control_config(plan: &infera_launcher::Plan, router: &RouterPlan) -> infera_control::Config {
    control_verdict(&worker_records(plan), router).unwrap_or_else(|e| panic!("{e}"))
}

/// Control's own verdict on `router`'s flags with a workers file of `records`.
fn control_verdict(
    records: &[infera_proto::types::WorkerRecord],
    router: &RouterPlan,
) -> Result<infera_control::Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let workers = dir.path().join("workers.toml");
    std::fs::write(&workers, workers_file(records)).unwrap();
    let argv = std::iter::once("infera-control".to_owned())
        .chain(router.control_args.iter().cloned())
        .chain(["--workers".to_owned(), workers.display().to_string()]);
    let args = infera_control::Args::try_parse_from(argv).map_err(|e| e.to_string())?;
    infera_control::Config::try_from(args).map_err(|e| e.to_string())
}

/// Where the launcher fills in control's defaults to check a `[router]` (the demand mode, the W
/// that `auto` falls back on, control's listen address), its verdict is control's own: a default
/// changed on one side only fails here.
#[test]
fn the_launcher_refuses_a_router_section_exactly_when_control_does() {
    let head = "engine = \"sim\"\nsglang_version = \"0.5.23\"\n[model]\npath = \"m\"\n\
        [[mixed.workers]]\nname = \"w\"\ngpus = [0]\nport = 1\n[router]\n";
    // Refused: (the [router] lines, a word control's error names).
    let refused = [
        ("decode_request_weight = \"auto\"\n", "decode-input-demand"),
        ("admin_listen = \"127.0.0.1:50051\"\n", "admin"),
    ];
    let accepted = [
        "decode_request_weight = \"auto\"\ndecode_request_weight_fallback = 0\n",
        "decode_request_weight = \"auto\"\ndecode_input_demand = \"shadow\"\n",
        "admin_listen = \"127.0.0.1:50052\"\n",
    ];
    let records = worker_records(&infera_launcher::plan_text(Path::new("t.toml"), head).unwrap());
    let verdicts = |router: &str| {
        let text = format!("{head}{router}");
        let launcher =
            infera_launcher::plan_text(Path::new("t.toml"), &text).map(|_| ()).map_err(|e| e.to_string());
        let file = infera_launcher::deployment::parse(Path::new("t.toml"), &text).unwrap();
        let control = control_verdict(&records, &RouterPlan::from_section(file.router.as_ref())).map(|_| ());
        (launcher, control)
    };
    for (router, named) in refused {
        let (launcher, control) = verdicts(router);
        assert!(launcher.is_err(), "the launcher accepts {router:?}");
        let e = control.expect_err(&format!("control accepts {router:?}"));
        assert!(e.contains(named), "control refuses {router:?} for another reason: {e}");
    }
    for router in accepted {
        let (launcher, control) = verdicts(router);
        assert_eq!((launcher, control), (Ok(()), Ok(())), "{router:?}");
    }
}

#[test]
fn control_accepts_every_forwarded_setting() {
    let (path, file) = kitchen_sink();
    let router = RouterPlan::from_section(file.router.as_ref());
    // Every key of the fixture's [router] that is control's reaches it.
    for flag in [
        "--decode-input-demand",
        "--decode-request-weight",
        "--decode-policy",
        "--prefill-policy",
        "--prefill-overlap-credit",
        "--prefill-session-slack-tokens",
        "--session-ttl-ms",
        "--kv-index-max-blocks",
        "--lease-ttl-ms",
    ] {
        assert!(router.control_args.iter().any(|a| a == flag), "{flag} missing: {:?}", router.control_args);
    }
    let plan = infera_launcher::plan_file(&path).unwrap();
    let config = control_config(&plan, &router);
    assert_eq!(config.kv_index_max_blocks, 2_000_000);
    assert_eq!(config.settings.session_slack_tokens, 16_384);
    assert_eq!(config.settings.session_ttl.as_millis(), 120_000);
    assert_eq!(config.settings.lease_ttl.as_millis(), 5_000);
    assert_eq!(config.settings.overlap_credit.get(), 1.5);
    assert_eq!(config.settings.weight.to_string(), "2500.5");
    assert_eq!(config.workers.len(), plan.workers.len());
}

#[test]
fn every_proxy_accepts_its_forwarded_settings() {
    let (_, file) = kitchen_sink();
    let router = RouterPlan::from_section(file.router.as_ref());
    assert_eq!(
        router.proxy_args,
        [
            "--lease-ttl-ms",
            "5000",
            "--tokenizer",
            "/models/target/tokenizer.json",
            "--chat-template",
            "/models/target/chat_template.jinja"
        ]
    );
    for listen in &router.proxies {
        let argv = ["infera-proxy", "--listen", listen, "--control", "http://127.0.0.1:50051"]
            .into_iter()
            .map(str::to_owned)
            .chain(router.proxy_args.iter().cloned());
        infera_proxy::Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn control_accepts_auto_w_and_an_admin_address_as_forwarded() {
    let text = "engine = \"sim\"\nsglang_version = \"0.5.23\"\n[model]\npath = \"m\"\n\
        [[mixed.workers]]\nname = \"w\"\ngpus = [0]\nport = 1\n\
        [router]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndecode_input_demand = \"shadow\"\n\
        decode_request_weight = \"auto\"\ndecode_request_weight_fallback = 180000\n\
        decode_weight_fit_half_life_ms = 30000\n";
    let plan = infera_launcher::plan_text(Path::new("t.toml"), text).unwrap();
    let file = infera_launcher::deployment::parse(Path::new("t.toml"), text).unwrap();
    let router = RouterPlan::from_section(file.router.as_ref());
    let config = control_config(&plan, &router);
    assert_eq!(config.weight_mode, infera_control::fit::WeightMode::Auto);
    assert_eq!(config.settings.weight.get(), 180_000.0, "the fallback until a fit is trusted");
    assert_eq!(config.fit_half_life.as_millis(), 30_000);
    assert_eq!(config.admin_listen, Some("127.0.0.1:0".parse().unwrap()));
}
