//! `deploy/systemd`: each unit, started as systemd would on a host set up as
//! manual/guides/systemd.md says (its blocks run, `/etc/infera` in a temporary folder), gives its
//! binary a command line and environment its own parser accepts, with every variable one the
//! binary reads. And what the parts run with by default: control over TLS, its Router asking a
//! token of every call (never `--router-allow-unauthenticated`), its Admin a token it cannot
//! start without; the proxies at `https://` control with a token, their API over HTTPS with API
//! keys and `/metrics` on a loopback port apart; a file-descriptor limit above what the
//! connections need. Site-specific values (the model's tokenizer, the node's deployment file and
//! host) are replaced by this machine's; everything else is taken as written.

mod site;

use clap::{CommandFactory, Parser};
use infera_deploy::systemd::{Started, Unit};
use site::{Site, argv};

/// A control unit's process as its parser takes it, on `site`.
fn control(site: &Site, unit: &str, instance: &str) -> (infera_control::Config, Started) {
    let (started, _credentials) = site.start(unit, instance).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(started.program, "infera-control");
    let argv = argv(&infera_control::Args::command(), &started);
    let args = infera_control::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    (infera_control::Config::try_from(args).unwrap_or_else(|e| panic!("{argv:?}: {e}")), started)
}

/// What every control unit runs with: etcd over TLS with a client certificate, gRPC over TLS,
/// a Router that knows each proxy host's token from the guide, an admin token.
fn assert_secured(config: &infera_control::Config, started: &Started, site: &Site) {
    let etcd = config.etcd.as_ref().expect("control follows etcd");
    assert!(etcd.endpoints().iter().all(|e| e.starts_with("https://")), "{:?}", etcd.endpoints());
    let security = etcd.security();
    assert!(security.ca.is_some() && security.cert.is_some() && security.key.is_some(), "{security:?}");
    assert!(config.tls.is_some(), "gRPC without TLS");
    assert!(!config.router.is_open(), "the Router asks no credential");
    assert!(
        !started.env.contains_key("INFERA_CONTROL_ROUTER_ALLOW_UNAUTHENTICATED")
            && !started.args.iter().any(|a| a.contains("allow-unauthenticated")),
        "an open Router by choice"
    );
    let tokens = config.router.tokens.as_ref().expect("--router-tokens").current();
    for host in ["proxy-1", "proxy-2"] {
        let token = site.pki_text(&format!("{host}.token"));
        let identity = tokens.identify(token.as_bytes()).map(|i| i.as_str().to_owned());
        assert_eq!(identity.as_deref(), Some(host), "the guide's {host}.token is not what its hash lists");
    }
    let admin = site.pki_text("control-admin.env");
    assert_eq!(
        config.admin_token.as_deref(),
        admin.strip_prefix("INFERA_ADMIN_TOKEN="),
        "the guide's admin token"
    );
}

#[test]
fn control_unit_and_env_start_a_valid_secured_control() {
    let site = Site::new();
    let (config, started) = control(&site, "infera-control.service", "");
    let env = site.env("control.env");
    assert_eq!(
        config.etcd.as_ref().map(|e| e.endpoints().to_vec()),
        Some(vec![env["INFERA_CONTROL_ETCD"].clone()])
    );
    assert_eq!(config.settings.overlap_credit.get().to_string(), env["INFERA_PREFILL_OVERLAP_CREDIT"]);
    assert_secured(&config, &started, &site);
    assert!(!env.contains_key("INFERA_ADMIN_TOKEN"), "no token ships: each site makes its own");
}

#[test]
fn control_does_not_start_without_its_admin_token_file() {
    let site = Site::new();
    std::fs::remove_file(site.root.join("control-admin.env")).unwrap();
    for (unit, instance) in [("infera-control.service", ""), ("infera-control@.service", "a")] {
        let e = site.start(unit, instance).expect_err("a required EnvironmentFile is missing");
        assert!(format!("{e:#}").contains("control-admin.env"), "{unit}: {e:#}");
    }
}

#[test]
fn an_ha_replica_unit_and_its_two_env_files_start_a_valid_secured_control() {
    let site = Site::new();
    let (config, started) = control(&site, "infera-control@.service", "a");
    // The replica's own file is read after the shared one: its values win.
    let own = site.env("control-a.env");
    let url = config.advertise_url.as_deref().expect("a replica advertises its URL");
    assert_eq!(url, own["INFERA_CONTROL_ADVERTISE_URL"]);
    assert!(url.starts_with("https://"), "proxies and replicas reach it over TLS: {url}");
    assert!(started.env.contains_key("INFERA_CONTROL_TLS_PEER_CA"), "a follower verifies the leader");
    assert_eq!(config.leader_ttl.as_secs().to_string(), started.env["INFERA_CONTROL_LEADER_LEASE_TTL_SECS"]);
    assert_secured(&config, &started, &site);
}

#[test]
fn proxy_unit_and_env_start_a_valid_secured_proxy() {
    let site = Site::new();
    let _model = site.tokenizer();
    let (started, _credentials) =
        site.start("infera-proxy@.service", "8000").unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(started.program, "infera-proxy");
    let argv = argv(&infera_proxy::Args::command(), &started);
    let args = infera_proxy::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = infera_proxy::Config::try_from(args).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.listen.port(), 8000);
    assert_eq!(config.name.as_deref(), Some("proxy-node-1-8000"));
    assert!(config.tokenizers.configured().any(|(model, _)| model.is_none()), "--tokenizer for every model");

    assert!(config.control.iter().all(|u| u.scheme_str() == Some("https")), "{:?}", config.control);
    let control = config.tls.control.as_ref().expect("control over TLS");
    assert!(control.files.ca.is_some(), "control verified with the site's CA");
    assert!(config.control_token.is_some(), "Router calls with the host's token");
    assert!(config.tls.listener.is_some(), "the API over HTTPS");
    let keys = config.api_keys.as_ref().expect("API keys").get();
    let key = format!("Bearer {}", site.pki_text("team-a.key"));
    assert_eq!(
        keys.identify(Some(key.as_bytes())).map(|c| c.name.to_string()).ok().as_deref(),
        Some("team-a")
    );

    let metrics = config.connections.metrics_listen.expect("/metrics apart from the API");
    assert!(metrics.ip().is_loopback() && metrics.port() == 18000, "{metrics}");

    // Each client connection, and each of its requests' two legs to the workers.
    let connections = u64::try_from(config.connections.limits.max_connections).unwrap();
    let (soft, hard) =
        Unit::read("infera-proxy@.service").unwrap().limit_nofile().unwrap().expect("LimitNOFILE");
    assert!(
        soft == hard && soft >= 3 * connections,
        "LimitNOFILE={soft}:{hard}, --max-connections {connections}"
    );
}

#[test]
fn launch_unit_and_env_start_one_nodes_workers() {
    let site = Site::new();
    let example = infera_deploy::dir().join("../examples/sim_1p1d/deployment.toml");
    std::fs::copy(&example, site.root.join("deployment.toml")).unwrap();
    site.set("launch.env", "INFERA_LAUNCH_ONLY_HOST", "127.0.0.1");
    let (started, _credentials) = site.start("infera-launch@.service", "deployment").unwrap();
    assert_eq!(started.program, "infera-launch");
    let cmd = infera_launcher::Args::command();
    let argv = argv(cmd.find_subcommand("up").expect("an up subcommand"), &started);
    let args = infera_launcher::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = infera_launcher::Config::try_from(args).unwrap_or_else(|e| panic!("{e}"));
    let infera_launcher::Command::Up(up) = config.command else { panic!("{argv:?}: not up") };
    let etcd = up.etcd.expect("the registrar registers in etcd");
    assert!(etcd.endpoints().iter().all(|e| e.starts_with("https://")) && etcd.security().cert.is_some());
}

#[test]
fn every_unit_raises_the_file_descriptor_limit() {
    for unit in [
        "infera-control.service",
        "infera-control@.service",
        "infera-proxy@.service",
        "infera-launch@.service",
    ] {
        let limit = Unit::read(unit).unwrap().limit_nofile().unwrap();
        // SGLang raises its own soft limit to 65535, which the workers' hard limit must allow.
        assert!(limit.is_some_and(|(soft, hard)| soft == hard && soft >= 65_535), "{unit}: {limit:?}");
    }
}
