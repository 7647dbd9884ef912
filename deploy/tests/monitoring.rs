//! The monitoring files against the binaries they watch and the manual that explains them: the
//! Grafana dashboard (`deploy/grafana/`) and the Prometheus rules (`deploy/prometheus/`), read
//! as in `manual/operations/monitoring.md`.
//!
//! promtool (`INFERA_PROMTOOL`, else `promtool` on `PATH`) checks the rules and runs their unit
//! tests; the real binaries' `/metrics` are scraped and every query of the dashboard and the
//! rules must name series and labels they export.

#[path = "monitoring/cluster.rs"]
mod cluster;
#[path = "monitoring/fitted.rs"]
mod fitted;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use infera_deploy::dashboard;
use infera_deploy::promql::Schema;
use infera_deploy::rules::{RUNBOOK_BASE, RulesFile, TestFile};
use serde_json::Value;

fn rules_path() -> PathBuf {
    infera_deploy::dir().join("prometheus/infera.rules.yml")
}

fn rules() -> RulesFile {
    RulesFile::read(&rules_path()).expect("the rules file reads")
}

fn rule_tests() -> Vec<(PathBuf, TestFile)> {
    let dir = infera_deploy::dir().join("prometheus/tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/prometheus/tests")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    files.into_iter().map(|p| (p.clone(), TestFile::read(&p).expect("a promtool test file"))).collect()
}

fn dashboard_json() -> Value {
    let text =
        std::fs::read_to_string(infera_deploy::dir().join("grafana/infera.json")).expect("the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

fn promtool(args: &[&str]) {
    let program = std::env::var_os("INFERA_PROMTOOL").unwrap_or_else(|| "promtool".into());
    let out = Command::new(&program)
        .args(args)
        .current_dir(infera_deploy::dir())
        .output()
        .unwrap_or_else(|e| panic!("{program:?} does not run ({e}): install Prometheus' promtool"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
}

#[test]
fn promtool_finds_the_rules_clean_and_their_unit_tests_pass() {
    promtool(&["check", "rules", "prometheus/infera.rules.yml"]);
    let tests: Vec<String> = rule_tests().iter().map(|(p, _)| p.display().to_string()).collect();
    assert!(!tests.is_empty(), "no promtool test files");
    let mut args = vec!["test", "rules"];
    args.extend(tests.iter().map(String::as_str));
    promtool(&args);
}

#[test]
fn every_alert_is_tested_firing_and_quiet() {
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for (path, file) in rule_tests() {
        assert_eq!(file.rule_files, ["../infera.rules.yml"], "{}", path.display());
        for case in file.tests.iter().flat_map(|g| &g.alert_rule_test) {
            let seen = if case.exp_alerts.is_empty() { &mut quiet } else { &mut fired };
            seen.insert(case.alertname.clone());
        }
    }
    let alerts: BTreeSet<String> = rules().rules().filter_map(|r| r.alert.clone()).collect();
    let untested: Vec<String> = alerts
        .iter()
        .flat_map(|a| {
            let mut gaps = Vec::new();
            if !fired.contains(a) {
                gaps.push(format!("{a}: no case where it fires"));
            }
            if !quiet.contains(a) {
                gaps.push(format!("{a}: no case where it stays quiet"));
            }
            gaps
        })
        .collect();
    assert!(untested.is_empty(), "{untested:#?}");
    let unknown: Vec<&String> = fired.union(&quiet).filter(|a| !alerts.contains(*a)).collect();
    assert!(unknown.is_empty(), "tests of alerts the rules do not have: {unknown:?}");
}

/// GitHub's anchor of a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_wait_a_severity_its_annotations_and_a_runbook_in_the_manual() {
    let manual_dir = infera_deploy::dir().join("../manual/operations");
    let manual = std::fs::read_to_string(manual_dir.join("monitoring.md")).expect("the monitoring page");
    let anchors: BTreeSet<String> = manual
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect();
    let mut problems = Vec::new();
    for rule in rules().rules() {
        let Some(alert) = &rule.alert else { continue };
        let mut lack = |what: &str| problems.push(format!("{alert}: {what}"));
        if rule.for_.is_none() {
            lack("no for:");
        }
        if !matches!(rule.labels.get("severity").map(String::as_str), Some("critical" | "warning" | "info")) {
            lack("severity is not critical, warning or info");
        }
        for key in ["summary", "description"] {
            if rule.annotations.get(key).is_none_or(|v| v.trim().is_empty()) {
                lack(&format!("no {key}"));
            }
        }
        match rule
            .annotations
            .get("runbook_url")
            .and_then(|u| u.strip_prefix(RUNBOOK_BASE))
            .and_then(|u| u.strip_prefix("/operations/monitoring.md#"))
        {
            Some(a) if anchors.contains(a) && a == alert.to_lowercase() => {}
            Some(a) => lack(&format!("runbook anchor #{a} is not a heading ### {alert} of the page")),
            None => lack(&format!("runbook_url is not {RUNBOOK_BASE}/operations/monitoring.md#…")),
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_dashboard_is_a_grafana_39_dashboard_on_a_chosen_prometheus_and_kustomize_wraps_it() {
    let json = dashboard_json();
    assert!(
        json["schemaVersion"].as_u64().is_some_and(|v| v >= 39),
        "schemaVersion {}",
        json["schemaVersion"]
    );
    let vars = json.pointer("/templating/list").and_then(Value::as_array).expect("template variables");
    let ds = vars.iter().find(|v| v["name"] == "datasource").expect("a datasource variable");
    assert_eq!((ds["type"].as_str(), ds["query"].as_str()), (Some("datasource"), Some("prometheus")));
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    let mut check = |p: &Value| {
        let title = p["title"].as_str().unwrap_or("?").to_owned();
        if !ids.insert(p["id"].as_u64()) {
            problems.push(format!("{title}: id {} twice", p["id"]));
        }
        if p.get("gridPos").is_none() {
            problems.push(format!("{title}: no gridPos"));
        }
        if p["type"] == "row" {
            return;
        }
        let on_var = |d: &Value| d["uid"] == "${datasource}" && d["type"] == "prometheus";
        if !on_var(&p["datasource"]) {
            problems.push(format!("{title}: its datasource is not ${{datasource}}"));
        }
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
        if targets.is_empty() || !targets.iter().all(|t| on_var(&t["datasource"]) && t["expr"].is_string()) {
            problems.push(format!("{title}: a target without a query on ${{datasource}}"));
        }
    };
    for p in json["panels"].as_array().expect("panels") {
        check(p);
        p["panels"].as_array().into_iter().flatten().for_each(&mut check);
    }
    assert!(problems.is_empty(), "{problems:#?}");

    let text = std::fs::read_to_string(infera_deploy::dir().join("grafana/kustomization.yaml"))
        .expect("kustomization");
    let k: serde_yaml::Value = serde_yaml::from_str(&text).expect("kustomization YAML");
    assert_eq!(k["generatorOptions"]["disableNameSuffixHash"], serde_yaml::Value::Bool(true));
    let generator = &k["configMapGenerator"][0];
    assert_eq!(generator["files"], serde_yaml::to_value(["infera.json"]).unwrap());
    assert_eq!(generator["options"]["labels"]["grafana_dashboard"], serde_yaml::Value::String("1".into()));
}

/// `manual/reference/metrics.md` as the scrape makes it: per binary, every family it exports,
/// its type and its help text.
fn metrics_reference(scrape: &infera_deploy::exposition::Scrape) -> String {
    let mut page = String::from(
        "# Metrics reference\n\n\
         Every metric family `infera-control` and `infera-proxy` export on `/metrics`, with its type and \
         help text. This page is generated from a scrape of the real binaries by \
         `deploy/tests/monitoring.rs`, which fails when a family is added, renamed or explained \
         differently without the page following; regenerate it by running that test with \
         `INFERA_BLESS=1` ([testing guide](../guides/testing.md)). A counter is stored \
         by Prometheus as `NAME_total`, a histogram as `NAME_bucket`, `NAME_sum` and `NAME_count`. \
         What to watch, the dashboard and the alerts: [monitoring](../operations/monitoring.md).\n",
    );
    for source in ["infera-control", "infera-proxy"] {
        page.push_str(&format!("\n## {source}\n\n| family | type | help |\n|---|---|---|\n"));
        for (name, family) in scrape.families.iter().filter(|(_, f)| f.sources.contains(source)) {
            let help = family.help.replace('|', "\\|");
            page.push_str(&format!("| `{name}` | {} | {help} |\n", family.kind));
        }
    }
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_names_series_and_labels_the_binaries_export_and_the_metrics_reference_lists_them() {
    let scrape = cluster::scrape().await;
    let reference = infera_deploy::dir().join("../manual/reference/metrics.md");
    let page = metrics_reference(&scrape);
    if std::env::var_os("INFERA_BLESS").is_some() {
        std::fs::write(&reference, &page).expect("the metrics reference");
    }
    let written = std::fs::read_to_string(&reference).unwrap_or_default();
    assert!(
        written == page,
        "manual/reference/metrics.md is not what the binaries export; regenerate it with INFERA_BLESS=1. \
         Expected:\n{page}"
    );
    let mut schema = Schema::new(&scrape);
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rule in rules().rules() {
        if let Some(name) = &rule.record {
            let extra: Vec<String> = rule.labels.keys().cloned().collect();
            if let Err(p) = schema.record(name, &rule.expr, &extra) {
                problems.insert(format!("rule {name}"), p);
            }
        }
    }
    for rule in rules().rules() {
        if let Some(alert) = &rule.alert {
            let p = schema.check(&rule.expr);
            if !p.is_empty() {
                problems.insert(format!("alert {alert}"), p);
            }
        }
    }
    let queries = dashboard::queries(&dashboard_json());
    assert!(queries.len() > 20, "the dashboard's queries: {queries:#?}");
    for q in &queries {
        let mut p = if q.promql.is_empty() { Vec::new() } else { schema.check(&q.promql) };
        if let (Some(label), false) = (&q.label, q.promql.is_empty()) {
            match schema.labels_of(&q.promql) {
                Ok(Some(labels)) if !labels.contains(label) => p.push(format!("label {label} is not on it")),
                _ => {}
            }
        }
        if !p.is_empty() {
            problems
                .entry(q.place.clone())
                .or_default()
                .extend(p.into_iter().map(|e| format!("{}: {e}", q.text)));
        }
    }
    assert!(problems.is_empty(), "queries naming what the binaries do not export:\n{problems:#?}");
}
