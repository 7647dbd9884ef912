//! `deploy/kubernetes` runs control and the proxies authenticated and over TLS by default, in
//! every overlay: each control replica serves gRPC over TLS with a certificate of its Secret,
//! advertises `https://` URLs and asks every Router call for a token its tokens file lists (never
//! `--router-allow-unauthenticated`); every proxy reaches the replicas at `https://`, verifies
//! them with control's CA and shows its token, and serves its API over HTTPS (probed so) with
//! `/metrics` on a port of its own, which the ServiceMonitor scrapes and only the monitoring
//! namespace reaches, while the API Service carries no metrics port. The configurations are the
//! binaries' own parsers' (`Config::try_from`), with the files the Secrets hold; and the Secrets
//! the guide's own commands make (manual/guides/kubernetes.md, run as written) start them too,
//! with a control certificate that names every address it is dialled at.

#[allow(dead_code)]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use infera_deploy::{Rendered, overlays, render};
use support::flags::{Parsed, parse, start};
use support::pods::pods;
use support::policy::{Peer, allowed};
use support::secrets::{CONTROL_NAMES, PROXY_TOKEN};

fn rendered() -> Vec<Rendered> {
    let all: Vec<Rendered> =
        overlays().iter().map(|o| render(o).unwrap_or_else(|e| panic!("{e:#}"))).collect();
    assert!(all.len() >= 4, "every overlay");
    all
}

/// The host of an `http(s)://host:port` URL.
fn host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split([':', '/']).next().unwrap_or_default()
}

#[test]
fn control_serves_tls_and_asks_every_router_call_for_a_token_in_every_overlay() {
    for overlay in rendered() {
        let mut replicas = 0;
        for pod in
            pods(&overlay).iter().filter(|p| p.label("app.kubernetes.io/name") == Some("infera-control"))
        {
            let (name, at) = (&overlay.name, &pod.name);
            let container = &pod.containers[0];
            let raw = start(&overlay, pod, container).unwrap_or_else(|e| panic!("{name} {at}: {e}"));
            assert!(
                !raw.words.iter().any(|w| w.contains("router-allow-unauthenticated"))
                    && !raw.env.contains_key("INFERA_CONTROL_ROUTER_ALLOW_UNAUTHENTICATED"),
                "{name} {at}: an open Router"
            );
            assert!(
                raw.env.contains_key("INFERA_CONTROL_TLS_PEER_CA"),
                "{name} {at}: followers verify the leader"
            );
            let Some(Parsed::Control(config)) =
                parse(&overlay, pod, container).unwrap_or_else(|e| panic!("{name} {at}: {e}"))
            else {
                panic!("{name} {at}: not control")
            };
            assert!(config.tls.is_some(), "{name} {at}: gRPC without TLS");
            assert!(!config.router.is_open(), "{name} {at}: the Router asks no credential");
            let tokens =
                config.router.tokens.as_ref().unwrap_or_else(|| panic!("{name} {at}: no --router-tokens"));
            let proven = tokens.current().identify(PROXY_TOKEN.as_bytes()).map(|i| i.as_str().to_owned());
            assert_eq!(proven.as_deref(), Some("infera-proxy"), "{name} {at}: the proxies' token");
            assert!(config.admin_token.is_some(), "{name} {at}: Admin without its token");
            // What the proxies and the other replicas dial: this replica's name, over TLS.
            for url in [&config.advertise_url, &config.admin_advertise_url] {
                let url = url.as_deref().unwrap_or_else(|| panic!("{name} {at}: an advertised URL"));
                assert!(url.starts_with("https://"), "{name} {at}: {url}");
                assert_eq!(host(url), format!("{at}.infera-control"), "{name}: {url}");
            }
            replicas += 1;
        }
        assert_eq!(replicas, 3, "{}", overlay.name);
    }
}

/// The proxy pod's container port named `name`.
fn container_port(container: &serde_json::Value, name: &str) -> Option<u64> {
    let ports = container["ports"].as_array().into_iter().flatten();
    ports.into_iter().find(|p| p["name"] == name).and_then(|p| p["containerPort"].as_u64())
}

#[test]
fn proxies_reach_control_over_tls_with_a_token_and_serve_https_and_metrics_apart() {
    for overlay in rendered() {
        let name = &overlay.name;
        let mut proxies = 0;
        for pod in pods(&overlay).iter().filter(|p| p.label("app.kubernetes.io/name") == Some("infera-proxy"))
        {
            let container = &pod.containers[0];
            let Some(Parsed::Proxy(config)) =
                parse(&overlay, pod, container).unwrap_or_else(|e| panic!("{name}: {e}"))
            else {
                panic!("{name}: not a proxy")
            };
            let urls: Vec<String> = config.control.iter().map(ToString::to_string).collect();
            assert_eq!(urls.len(), CONTROL_NAMES.len(), "{name}: every replica");
            for (url, replica) in urls.iter().zip(CONTROL_NAMES) {
                assert!(url.starts_with("https://") && host(url) == replica, "{name}: {url}");
            }
            let control_tls =
                config.tls.control.as_ref().unwrap_or_else(|| panic!("{name}: control in clear"));
            assert!(control_tls.files.ca.is_some(), "{name}: control verified by the system's roots");
            assert!(
                config.control_token.is_some() || control_tls.files.identity.is_some(),
                "{name}: Router calls without a credential"
            );
            assert!(config.tls.listener.is_some(), "{name}: the API in clear");

            let api = config.listen.port();
            let metrics =
                config.connections.metrics_listen.unwrap_or_else(|| panic!("{name}: /metrics on the API"));
            assert_ne!(metrics.port(), api, "{name}: /metrics on the API port");
            let spec = &container.spec;
            assert_eq!(container_port(spec, "https"), Some(u64::from(api)), "{name}: the API port");
            assert_eq!(container_port(spec, "metrics"), Some(u64::from(metrics.port())), "{name}");
            for probe in ["readinessProbe", "livenessProbe"] {
                let get = &spec[probe]["httpGet"];
                assert_eq!(
                    (get["port"].as_str(), get["scheme"].as_str()),
                    (Some("https"), Some("HTTPS")),
                    "{name}: {probe}"
                );
            }
            scraped_there(&overlay, metrics.port());
            let proxy = BTreeMap::from([("app.kubernetes.io/name".to_owned(), "infera-proxy".to_owned())]);
            let monitoring = Peer::elsewhere("monitoring", [("app.kubernetes.io/name", "prometheus")]);
            let client = Peer::elsewhere("apps", [("app", "web")]);
            assert!(allowed(&overlay, &proxy, &monitoring, metrics.port()), "{name}: Prometheus scrapes");
            assert!(!allowed(&overlay, &proxy, &client, metrics.port()), "{name}: metrics to anyone");
            assert!(allowed(&overlay, &proxy, &client, api), "{name}: the API to clients");
            proxies += 1;
        }
        assert!(proxies > 0, "{name}: proxies");
    }
}

/// The proxies' ServiceMonitor reaches `/metrics` on container port `metrics`, through a
/// Service of its selector; the API Service (`infera-proxy`) carries no port to it.
fn scraped_there(overlay: &Rendered, metrics: u16) {
    let name = &overlay.name;
    let target_is_metrics = |port: &serde_json::Value| {
        port["targetPort"] == "metrics" || port["targetPort"].as_u64() == Some(u64::from(metrics))
    };
    let api = overlay.get("Service", "infera-proxy").expect("the API Service");
    let api_ports = api["spec"]["ports"].as_array().expect("ports");
    assert!(!api_ports.iter().any(target_is_metrics), "{name}: the API Service exposes /metrics");

    let monitor = overlay.get("ServiceMonitor", "infera-proxy").expect("the proxies' ServiceMonitor");
    let selector = monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels");
    let [endpoint] = monitor["spec"]["endpoints"].as_array().expect("endpoints").as_slice() else {
        panic!("{name}: one endpoint")
    };
    assert_eq!(endpoint["path"], "/metrics", "{name}");
    let services: Vec<&serde_json::Value> = overlay
        .all("Service")
        .filter(|s| selector.iter().all(|(k, v)| &s["metadata"]["labels"][k] == v))
        .collect();
    assert!(!services.is_empty(), "{name}: the ServiceMonitor selects no Service");
    for service in services {
        assert_eq!(service["spec"]["selector"]["app.kubernetes.io/name"], "infera-proxy", "{name}");
        let port =
            service["spec"]["ports"].as_array().into_iter().flatten().find(|p| p["name"] == endpoint["port"]);
        assert!(
            port.is_some_and(target_is_metrics),
            "{name}: scraped on {:?}, not the metrics port",
            endpoint["port"]
        );
    }
}

#[test]
fn the_guides_secrets_start_control_and_the_proxies_under_every_name_they_are_dialled_by() {
    let guide = Guide::new();
    let secrets = |name: &str, dir: &Path| guide.secret(name, dir);
    let token = std::fs::read_to_string(guide.pki.join("token")).unwrap();
    // Operators reach Admin through this Service (its name, as grpcurl's -authority).
    let mut dialled = std::collections::BTreeSet::from(["infera-control-admin".to_owned()]);
    for overlay in rendered() {
        for pod in pods(&overlay) {
            for container in &pod.containers {
                let parsed = support::flags::parse_with(&overlay, &pod, container, &secrets)
                    .unwrap_or_else(|e| panic!("{} {}: {e}", overlay.name, pod.name));
                match parsed {
                    Some(Parsed::Control(config)) => {
                        let tokens = config.router.tokens.as_ref().expect("--router-tokens").current();
                        let who = tokens.identify(token.trim().as_bytes()).map(|i| i.as_str().to_owned());
                        assert_eq!(who.as_deref(), Some("infera-proxy"), "the guide's token and its hash");
                        let urls = [&config.advertise_url, &config.admin_advertise_url];
                        dialled.extend(urls.into_iter().flatten().map(|u| host(u).to_owned()));
                    }
                    Some(Parsed::Proxy(config)) => {
                        dialled.extend(config.control.iter().filter_map(|u| u.host()).map(str::to_owned));
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(dialled.len() > 3, "{dialled:?}");
    for name in &dialled {
        assert!(guide.names("control.pem", name), "control's certificate does not name {name}");
    }
    assert!(guide.names("proxy.pem", "infera-proxy.infera.svc"), "the proxies' Service");
    // The check can fail: a name no certificate lists, and a certificate of the other part.
    assert!(!guide.names("control.pem", "infera-control-3.infera-control"));
    assert!(!guide.names("proxy.pem", "infera-control-0.infera-control"));
}

/// The Secrets the guide makes (manual/guides/kubernetes.md, "TLS and tokens"): its openssl
/// block run as written, its `kubectl -n infera create secret generic NAME --from-file=KEY=FILE`
/// lines read for which file each key holds.
#[derive(Debug)]
pub(crate) struct Guide {
    _dir: tempfile::TempDir,
    /// Where the block made its files (`control-pki`).
    pub(crate) pki: PathBuf,
    secrets: BTreeMap<String, support::secrets::Keys>,
}

impl Guide {
    /// Runs the guide's blocks.
    pub(crate) fn new() -> Self {
        let block = |name: &str| {
            infera_deploy::manual_block("guides/kubernetes.md", &format!("deploy/tests/kubernetes: {name}"))
                .unwrap_or_else(|e| panic!("{e:#}"))
        };
        let dir = tempfile::tempdir().expect("a temporary folder");
        infera_deploy::run_sh(dir.path(), &block("make")).unwrap_or_else(|e| panic!("{e:#}"));
        let pki = dir.path().join("control-pki");
        let mut secrets = BTreeMap::new();
        for line in block("secrets").replace("\\\n", " ").lines().filter(|l| !l.trim().is_empty()) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(["kubectl", "-n", "infera", "create", "secret", "generic", name, flags @ ..]) =
                Some(words.as_slice())
            else {
                panic!("not a `kubectl -n infera create secret generic` line: {line}")
            };
            let mut keys = support::secrets::Keys::new();
            for flag in flags {
                let from =
                    flag.strip_prefix("--from-file=").unwrap_or_else(|| panic!("{flag}: not read here"));
                let (key, file) = from.split_once('=').unwrap_or((from, from));
                keys.insert(key.to_owned(), pki.join(file));
            }
            secrets.insert((*name).to_owned(), keys);
        }
        Self { _dir: dir, pki, secrets }
    }

    /// What Secret `name` holds: the guide's, for control's and the proxies' own; a plausible
    /// one for the others (API keys, etcd's, made elsewhere).
    pub(crate) fn secret(&self, name: &str, dir: &Path) -> Result<support::secrets::Keys, String> {
        match self.secrets.get(name) {
            Some(keys) => Ok(keys.clone()),
            None if name.starts_with("infera-control-") || name.starts_with("infera-proxy-") => {
                Err(format!("the guide does not create Secret {name}"))
            }
            None => support::secrets::plausible(name, dir),
        }
    }

    /// Whether `openssl verify` finds `certificate` (of the guide's folder) good for a server
    /// called `host`, under the guide's CA.
    pub(crate) fn names(&self, certificate: &str, host: &str) -> bool {
        let mut verify = std::process::Command::new("openssl");
        verify.current_dir(&self.pki).args(["verify", "-CAfile", "ca.pem", "-purpose", "sslserver"]);
        verify.args(["-verify_hostname", host, certificate]);
        infera_deploy::output(&mut verify, None).is_ok_and(|o| o.status.success())
    }
}
