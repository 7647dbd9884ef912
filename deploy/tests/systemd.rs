//! `deploy/systemd`: every variable of each env file is one its binary reads, and the unit's
//! command line plus the env file's values parse and check as the binary would at start-up.
//! Site-specific values (the model's tokenizer, the node's deployment file and host) are
//! replaced by this machine's; everything else is taken as written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};

fn deploy(file: &str) -> PathBuf {
    infera_deploy::dir().join("systemd").join(file)
}

/// `KEY=VALUE` lines, comments and blank lines skipped.
fn env_file(name: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(deploy(name)).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("{name}: not KEY=VALUE: {l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// The unit's `ExecStart` words after the program, with the instance `%i` and host `%H`.
fn exec_start(unit: &str, instance: &str) -> (String, Vec<String>) {
    let text = std::fs::read_to_string(deploy(unit)).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart line");
    let mut words = line.split_whitespace().map(|w| w.replace("%i", instance).replace("%H", "node-1"));
    let program = words.next().unwrap();
    let name = Path::new(&program).file_name().unwrap().to_str().unwrap().to_owned();
    (name, words.collect())
}

/// The env file as the flags the binary's parser maps those variables to; panics on a variable
/// the binary does not read.
fn as_flags(cmd: &clap::Command, env: &BTreeMap<String, String>) -> Vec<String> {
    infera_deploy::as_flags(cmd, env).unwrap_or_else(|e| panic!("{e}"))
}

/// The unit's `Environment=` lines, `%d` (its credentials) being `credentials`.
fn unit_environment(unit: &str, credentials: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(deploy(unit)).unwrap();
    let d = credentials.display().to_string();
    text.lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{unit}: not KEY=VALUE: {kv}"));
            (k.to_owned(), v.replace("%d", &d))
        })
        .collect()
}

/// etcd's CA and a client certificate for `user`, as files named `ca`, `cert`, `key` in `dir`
/// (what the units' LoadCredential lines and launch.env point at).
fn etcd_credentials(dir: &Path, user: &str, [ca, cert, key]: [&str; 3]) {
    let test_ca = infera_testkit::tls::TestCa::new("etcd");
    let issued = test_ca.issue(user, &[]);
    for (from, to) in [(test_ca.ca(), ca), (issued.cert, cert), (issued.key, key)] {
        std::fs::copy(&from, dir.join(to)).unwrap();
    }
}

/// Control's etcd settings from `unit` with its credentials written to a temporary directory.
fn control_etcd_env(unit: &str) -> (BTreeMap<String, String>, tempfile::TempDir) {
    let credentials = tempfile::tempdir().unwrap();
    etcd_credentials(credentials.path(), "infera-control", ["etcd-ca.pem", "etcd-cert.pem", "etcd-key.pem"]);
    (unit_environment(unit, credentials.path()), credentials)
}

/// The control settings are over TLS with a client certificate, to `https://` endpoints.
fn assert_secured_etcd(config: &infera_control::Config) {
    let etcd = config.etcd.as_ref().expect("control follows etcd");
    assert!(etcd.endpoints().iter().all(|e| e.starts_with("https://")), "{:?}", etcd.endpoints());
    let security = etcd.security();
    assert!(security.ca.is_some() && security.cert.is_some() && security.key.is_some(), "{security:?}");
}

#[test]
fn control_unit_and_env_start_a_valid_control() {
    let (name, words) = exec_start("infera-control.service", "");
    assert_eq!(name, "infera-control");
    // systemd: variables of EnvironmentFile= win over the unit's Environment=.
    let (mut env, _credentials) = control_etcd_env("infera-control.service");
    env.extend(env_file("control.env"));
    let argv: Vec<String> =
        std::iter::once(name).chain(words).chain(as_flags(&infera_control::Args::command(), &env)).collect();
    let args = infera_control::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = infera_control::Config::try_from(args).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.etcd.as_ref().map(|e| e.endpoints().to_vec()),
        Some(vec![env["INFERA_CONTROL_ETCD"].clone()])
    );
    assert_eq!(config.settings.overlap_credit.get().to_string(), env["INFERA_PREFILL_OVERLAP_CREDIT"]);
    assert!(config.admin_token.is_none(), "no token ships: each site makes its own");
    assert_secured_etcd(&config);
}

#[test]
fn an_ha_replica_unit_and_its_two_env_files_start_a_valid_control() {
    let (name, words) = exec_start("infera-control@.service", "a");
    assert_eq!(name, "infera-control");
    // The replica's own file is read after the shared one: its values win.
    let (mut env, _credentials) = control_etcd_env("infera-control@.service");
    env.extend(env_file("control.env"));
    let own = env_file("control-a.env");
    env.extend(own.clone());
    let argv: Vec<String> =
        std::iter::once(name).chain(words).chain(as_flags(&infera_control::Args::command(), &env)).collect();
    let args = infera_control::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = infera_control::Config::try_from(args).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.etcd.is_some(), "replicas elect through etcd");
    assert_eq!(config.advertise_url.as_deref(), Some(own["INFERA_CONTROL_ADVERTISE_URL"].as_str()));
    assert_eq!(config.leader_ttl.as_secs().to_string(), env["INFERA_CONTROL_LEADER_LEASE_TTL_SECS"]);
    assert_secured_etcd(&config);
}

#[test]
fn proxy_unit_and_env_start_a_valid_proxy() {
    let (name, words) = exec_start("infera-proxy@.service", "8000");
    assert_eq!(name, "infera-proxy");
    let mut env = env_file("proxy.env");
    let dir = tempfile::tempdir().unwrap();
    infera_tokenize::fixture::write_model_dir(dir.path(), 300).unwrap();
    let tokenizer = env.get_mut("INFERA_PROXY_TOKENIZER").expect("the proxies tokenize");
    *tokenizer = dir.path().join("tokenizer.json").display().to_string();
    let argv: Vec<String> =
        std::iter::once(name).chain(words).chain(as_flags(&infera_proxy::Args::command(), &env)).collect();
    let args = infera_proxy::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = infera_proxy::Config::try_from(args).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.listen.port(), 8000);
    assert_eq!(config.name.as_deref(), Some("proxy-node-1-8000"));
    assert!(config.tokenizer.is_some());
}

#[test]
fn launch_unit_and_env_start_one_nodes_workers() {
    let example = infera_deploy::dir().join("../examples/sim_1p1d/deployment.toml");
    let (name, words) = exec_start("infera-launch@.service", "deployment");
    assert_eq!(name, "infera-launch");
    let words: Vec<String> = words
        .into_iter()
        .map(|w| if w == "/etc/infera/deployment.toml" { example.display().to_string() } else { w })
        .collect();
    let mut env = env_file("launch.env");
    *env.get_mut("INFERA_LAUNCH_ONLY_HOST").expect("one node of several") = "127.0.0.1".into();
    // The site's etcd files, made here where launch.env names them.
    let etcd_files = tempfile::tempdir().unwrap();
    etcd_credentials(etcd_files.path(), "infera-launch", ["ca.pem", "launch.pem", "launch-key.pem"]);
    for var in ["INFERA_LAUNCH_ETCD_CA", "INFERA_LAUNCH_ETCD_CERT", "INFERA_LAUNCH_ETCD_KEY"] {
        let path = env.get_mut(var).unwrap_or_else(|| panic!("launch.env sets {var}"));
        *path = path.replace("/etc/infera/etcd", &etcd_files.path().display().to_string());
    }
    let cmd = infera_launcher::Args::command();
    let up = cmd.find_subcommand("up").expect("an up subcommand");
    let argv: Vec<String> = std::iter::once(name).chain(words).chain(as_flags(up, &env)).collect();
    let args = infera_launcher::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let config = infera_launcher::Config::try_from(args).unwrap_or_else(|e| panic!("{e}"));
    let infera_launcher::Command::Up(up) = config.command else { panic!("{argv:?}: not up") };
    let etcd = up.etcd.expect("the registrar registers in etcd");
    assert!(etcd.endpoints().iter().all(|e| e.starts_with("https://")) && etcd.security().cert.is_some());
}
