//! `deploy/kubernetes`: every overlay renders (`kubectl kustomize`), every object is valid
//! against the Kubernetes 1.37 OpenAPI schemas (strict: no unknown field) and the Prometheus
//! Operator's types, checkov finds nothing that is not listed with a reason, every infera
//! container's command line and environment parse with the binary's own parser, the worker
//! pods are the deployment file's hosts, and the network policies let only proxies reach
//! control's Router and only operators its Admin.

mod support;

use std::collections::BTreeMap;

use infera_deploy::{Rendered, overlays, render, venv};
use support::pods::pods;

/// Every overlay, rendered once for all the tests of this binary.
fn rendered() -> &'static [Rendered] {
    static RENDERED: std::sync::OnceLock<Vec<Rendered>> = std::sync::OnceLock::new();
    RENDERED.get_or_init(|| {
        let all: Vec<Rendered> =
            overlays().iter().map(|o| render(o).unwrap_or_else(|e| panic!("{e:#}"))).collect();
        assert!(
            all.len() >= 4,
            "sim-1p1d, amd-pd, nvidia-pd, existing-etcd: {:?}",
            all.iter().map(|r| &r.name)
        );
        all
    })
}

/// `kubernetes-validate` in strict mode against Kubernetes 1.37, on `yaml` (written to a file).
fn validate_strict(yaml: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut validate = std::process::Command::new(venv().join("bin/kubernetes-validate"));
    validate.args(["--strict", "--kubernetes-version", "1.37.0", "--quiet"]).arg(&file);
    infera_deploy::output(&mut validate, None).unwrap()
}

/// The Prometheus Operator's validators (`tests/support/validate_crds.mjs`) on `objects`.
fn validate_crds(objects: &[serde_json::Value]) -> std::process::Output {
    let mut node = std::process::Command::new("node");
    node.arg(infera_deploy::dir().join("tests/support/validate_crds.mjs"))
        .arg(venv().join("npm/node_modules"));
    infera_deploy::output(&mut node, Some(&serde_json::to_string(objects).unwrap())).unwrap()
}

#[test]
fn every_object_of_every_overlay_is_valid_kubernetes_1_37() {
    for overlay in rendered() {
        let out = validate_strict(&overlay.yaml);
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        // Only the Prometheus Operator's kinds have no schema there: they are checked below.
        let unchecked: Vec<&str> =
            text.lines().filter(|l| !l.contains("api version monitoring.coreos.com/v1")).collect();
        assert!(out.status.success() && unchecked.is_empty(), "{}:\n{text}", overlay.name);

        let out = validate_crds(&overlay.objects);
        let checked = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {checked}{}", overlay.name, String::from_utf8_lossy(&out.stderr));
        assert!(
            checked.contains("checked 3 "),
            "two ServiceMonitors and the rules in {}: {checked}",
            overlay.name
        );
    }
}

#[test]
fn the_validators_catch_a_misspelt_field_and_a_bad_monitor() {
    let overlay = render(&infera_deploy::dir().join("kubernetes/overlays/sim-1p1d")).unwrap();
    let out = validate_strict(&overlay.yaml.replacen("readOnlyRootFilesystem", "readOnlyRootFilesytem", 1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("readOnlyRootFilesytem"), "{out:?}");

    let mut objects = overlay.objects.clone();
    let monitor = objects.iter_mut().find(|o| o["kind"] == "ServiceMonitor").unwrap();
    monitor["spec"]["endpoints"][0]["interval"] = "every 15 s".into();
    let out = validate_crds(&objects);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stdout).contains("interval"), "{out:?}");
}

#[test]
fn checkov_finds_nothing_that_is_not_listed_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    for overlay in rendered() {
        std::fs::write(dir.path().join(format!("{}.yaml", overlay.name)), &overlay.yaml).unwrap();
        // Every skip an object carries says why (`checkov.io/skipN: CHECK=reason`).
        for object in &overlay.objects {
            let annotations = object["metadata"]["annotations"].as_object().into_iter().flatten();
            for (key, value) in annotations.filter(|(k, _)| k.starts_with("checkov.io/skip")) {
                let reason = value.as_str().and_then(|v| v.split_once('=')).map(|(_, r)| r.trim());
                assert!(reason.is_some_and(|r| r.len() > 20), "{key}: {value} gives no reason");
            }
        }
    }
    let config = infera_deploy::dir().join("kubernetes/checkov.yaml");
    let mut checkov = std::process::Command::new(venv().join("bin/checkov"));
    checkov.arg("--config-file").arg(&config).arg("--directory").arg(dir.path());
    checkov.args(["--framework", "kubernetes", "--compact", "--quiet", "--skip-download"]);
    let report = infera_deploy::run(&mut checkov, None).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!report.contains("FAILED"), "{report}");

    let mut dockerfile = std::process::Command::new(venv().join("bin/checkov"));
    dockerfile
        .arg("--config-file")
        .arg(&config)
        .arg("--file")
        .arg(infera_deploy::dir().join("docker/Dockerfile"));
    dockerfile.args(["--framework", "dockerfile", "--compact", "--quiet", "--skip-download"]);
    let report = infera_deploy::run(&mut dockerfile, None).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(!report.contains("FAILED"), "{report}");
}

#[test]
fn every_infera_container_parses_with_its_binarys_own_parser() {
    let mut seen = BTreeMap::<&str, usize>::new();
    for overlay in rendered() {
        for pod in pods(overlay) {
            for container in &pod.containers {
                let parsed = support::flags::parse(overlay, &pod, container)
                    .unwrap_or_else(|e| panic!("{} {} {}: {e}", overlay.name, pod.name, container.name));
                if let Some(parsed) = parsed {
                    *seen.entry(parsed.binary()).or_default() += 1;
                }
            }
        }
    }
    for binary in ["infera-control", "infera-proxy", "infera-launch"] {
        assert!(seen.get(binary).is_some_and(|n| *n >= 4), "{binary} in every overlay: {seen:?}");
    }
}

#[test]
fn the_worker_pods_are_the_deployment_files_hosts() {
    for overlay in rendered() {
        let workers = support::workers::check(overlay).unwrap_or_else(|e| panic!("{}: {e}", overlay.name));
        assert!(workers >= 2, "{}: a prefill and a decode at least", overlay.name);
    }
}

#[test]
fn only_proxies_reach_the_router_and_only_operators_and_replicas_the_admin() {
    use support::policy::{Peer, allowed};
    for overlay in rendered() {
        let control = label("infera-control");
        let peers = [
            ("proxy", Peer::here(label("infera-proxy"))),
            ("replica", Peer::here(label("infera-control"))),
            ("worker", Peer::here(label("infera-workers"))),
            ("operator", Peer::elsewhere("ops", [("infera.dev/operator", "true")])),
            ("other", Peer::elsewhere("apps", [("app", "web")])),
        ];
        let who = |port: u16| -> Vec<&str> {
            peers.iter().filter(|(_, p)| allowed(overlay, &control, p, port)).map(|(n, _)| *n).collect()
        };
        assert_eq!(who(50051), ["proxy"], "{}: Router", overlay.name);
        assert_eq!(who(50052), ["replica", "operator"], "{}: Admin", overlay.name);
        let api = |p: &Peer| allowed(overlay, &label("infera-proxy"), p, 8000);
        assert!(peers.iter().all(|(_, p)| api(p)), "{}: the API is open to clients", overlay.name);
        if overlay.get("StatefulSet", "infera-etcd").is_some() {
            let etcd = label("infera-etcd");
            let who: Vec<&str> =
                peers.iter().filter(|(_, p)| allowed(overlay, &etcd, p, 2379)).map(|(n, _)| *n).collect();
            assert_eq!(who, ["replica", "worker"], "{}: etcd", overlay.name);
        }
    }
}

#[test]
fn the_autoscalers_pods_metric_is_a_proxy_gauge() {
    let mut registry = prometheus_client::registry::Registry::default();
    let _metrics = infera_proxy::metrics::ProxyMetrics::register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for overlay in rendered() {
        let hpa = overlay.get("HorizontalPodAutoscaler", "infera-proxy").expect("the proxies scale");
        let metrics = hpa["spec"]["metrics"].as_array().unwrap();
        let pods: Vec<&str> = metrics.iter().filter_map(|m| m["pods"]["metric"]["name"].as_str()).collect();
        assert!(!pods.is_empty(), "{}: on requests in flight", overlay.name);
        for name in pods {
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{name} is not a proxy gauge");
        }
        assert!(metrics.iter().any(|m| m["resource"]["name"] == "cpu"), "{}: and on CPU", overlay.name);
    }
}

#[test]
fn control_runs_as_ha_replicas_that_stay_apart_and_up() {
    for overlay in rendered() {
        let control = overlay.get("StatefulSet", "infera-control").unwrap();
        assert_eq!(control["spec"]["replicas"], 3, "{}", overlay.name);
        let spec = &control["spec"]["template"]["spec"];
        assert!(spec["affinity"]["podAntiAffinity"].is_object(), "{}: anti-affinity", overlay.name);
        let probe = &spec["containers"][0]["readinessProbe"]["httpGet"];
        assert_eq!(probe["path"], "/readiness", "{}", overlay.name);
        let pdb = overlay.get("PodDisruptionBudget", "infera-control").unwrap();
        assert_eq!(pdb["spec"]["minAvailable"], 2, "{}", overlay.name);
        let has_etcd = overlay.get("StatefulSet", "infera-etcd");
        if overlay.name != "existing-etcd" {
            let etcd = has_etcd.unwrap_or_else(|| panic!("{}: its own etcd", overlay.name));
            assert_eq!(etcd["spec"]["replicas"], 3);
            assert!(
                etcd["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
                    .is_string()
            );
        } else {
            assert!(has_etcd.is_none(), "existing-etcd runs none");
            let endpoints =
                overlay.get("ConfigMap", "infera-etcd").unwrap()["data"]["endpoints"].as_str().unwrap();
            assert!(!endpoints.contains("infera-etcd-"), "{endpoints}");
        }
    }
}

fn label(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_owned(), name.to_owned())])
}

#[test]
fn without_the_prometheus_operator_only_its_objects_go() {
    // A site's own kustomization on top (kustomize takes relative paths only): in the target
    // folder, inside the workspace.
    let site = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = infera_deploy::dir().join("..").canonicalize().unwrap();
    let depth =
        site.path().strip_prefix(&root).expect("the target folder is in the workspace").components().count();
    let kubernetes = std::path::PathBuf::from("../".repeat(depth)).join("deploy/kubernetes");
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{}]\ncomponents: [{}]\n",
        kubernetes.join("overlays/sim-1p1d").display(),
        kubernetes.join("components/no-prometheus-operator").display()
    );
    std::fs::write(site.path().join("kustomization.yaml"), kustomization).unwrap();
    let without = render(site.path()).unwrap();
    let with = render(&infera_deploy::dir().join("kubernetes/overlays/sim-1p1d")).unwrap();
    let kept: Vec<&serde_json::Value> =
        with.objects.iter().filter(|o| o["apiVersion"] != "monitoring.coreos.com/v1").collect();
    assert_eq!(
        kept.len() + 3,
        with.objects.len(),
        "the overlay has two ServiceMonitors and a PrometheusRule"
    );
    assert_eq!(without.objects.iter().collect::<Vec<_>>(), kept);
}

#[test]
fn the_prometheus_rule_holds_the_rules_file_word_for_word() {
    let file = infera_deploy::dir().join("prometheus/infera.rules.yml");
    let rules: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(rules["groups"].as_array().is_some_and(|g| !g.is_empty()));
    for overlay in rendered() {
        let rule =
            overlay.get("PrometheusRule", "infera").unwrap_or_else(|| panic!("{}: the alerts", overlay.name));
        assert_eq!(rule["spec"], rules, "{}: base/alerts.yaml is not the rules file", overlay.name);
    }
}

#[test]
fn the_dashboard_renders_as_a_valid_config_map_holding_the_json_file() {
    let grafana = render(&infera_deploy::dir().join("grafana")).unwrap();
    let [map] = grafana.objects.as_slice() else { panic!("one ConfigMap: {:?}", grafana.objects) };
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1", "the sidecar's label");
    let json = std::fs::read_to_string(infera_deploy::dir().join("grafana/infera.json")).unwrap();
    assert_eq!(map["data"]["infera.json"], json.as_str());
    let out = validate_strict(&grafana.yaml);
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
}

#[test]
fn runbook_links_take_the_deployments_base_url() {
    // The monitoring page's two blocks, run as written from a folder where `deploy/` is this
    // repository's.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::os::unix::fs::symlink(infera_deploy::dir(), dir.path().join("deploy")).unwrap();
    let wiki = "https://wiki.example.com/infera/manual/operations/monitoring.md#";
    let block = |name: &str| {
        let script = infera_deploy::manual_block(
            "operations/monitoring.md",
            &format!("deploy/tests/runbooks: {name}"),
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        infera_deploy::run_sh(dir.path(), &script).unwrap_or_else(|e| panic!("{e:#}"));
    };
    let links = |rules: &serde_json::Value| -> Vec<(String, String)> {
        let groups = rules["groups"].as_array().expect("groups");
        let all = groups.iter().flat_map(|g| g["rules"].as_array().expect("rules"));
        all.filter_map(|r| {
            Some((r["alert"].as_str()?.to_owned(), r["annotations"]["runbook_url"].as_str()?.to_owned()))
        })
        .collect()
    };
    let expect = |links: &[(String, String)]| {
        assert!(links.len() >= 10, "{links:?}");
        for (alert, url) in links {
            assert_eq!(url, &format!("{wiki}{}", alert.to_lowercase()), "{alert}");
        }
    };

    block("rules file");
    let file = std::fs::read_to_string(dir.path().join("infera.rules.yml")).unwrap();
    expect(&links(&serde_yaml::from_str(&file).unwrap()));

    block("kustomize");
    let rendered = render(&dir.path().join("my-site")).unwrap();
    let rule = rendered.get("PrometheusRule", "infera").expect("the alerts");
    expect(&links(&rule["spec"]));
    assert!(
        rendered.get("ConfigMap", "infera-runbooks").is_none(),
        "the base URL's ConfigMap is kustomize's only"
    );
    // Nothing else changes: the site renders the overlay's objects but for the links.
    let overlay = render(&infera_deploy::dir().join("kubernetes/overlays/sim-1p1d")).unwrap();
    assert_eq!(rendered.objects.len(), overlay.objects.len());
}
