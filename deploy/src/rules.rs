//! The Prometheus rules file (`groups:` of recording and alerting rules) and promtool's unit
//! test files (`rule_files`, `tests:` with `alert_rule_test`), read as far as the checks need.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// Where every alert's `runbook_url` points unless the deployment gives another base: the
/// manual folder in infera's repository. A runbook is `{RUNBOOK_BASE}/operations/monitoring.md#<alert>`;
/// `kubernetes/components/runbook-base-url` and the monitoring page's `sed` change the base.
pub const RUNBOOK_BASE: &str = "https://github.com/infera-project/infera/blob/main/manual";

/// A rules file.
#[derive(Debug, Deserialize)]
pub struct RulesFile {
    /// Its groups.
    pub groups: Vec<Group>,
}

/// One rule group.
#[derive(Debug, Deserialize)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// Its rules, evaluated in order.
    pub rules: Vec<Rule>,
}

/// A recording or an alerting rule.
#[derive(Debug, Deserialize)]
pub struct Rule {
    /// The series a recording rule writes.
    pub record: Option<String>,
    /// The alert's name.
    pub alert: Option<String>,
    /// The query.
    pub expr: String,
    /// How long the condition must hold before the alert fires.
    #[serde(rename = "for")]
    pub for_: Option<String>,
    /// Labels added to the series or the alert.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The alert's annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl RulesFile {
    /// Reads `path`.
    ///
    /// # Errors
    /// When it cannot be read or is not a rules file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        Ok(serde_yaml::from_str(&std::fs::read_to_string(path)?)?)
    }

    /// Every rule, in file order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.groups.iter().flat_map(|g| &g.rules)
    }
}

/// A promtool unit test file.
#[derive(Debug, Deserialize)]
pub struct TestFile {
    /// The rules files it loads.
    pub rule_files: Vec<String>,
    /// Its test groups.
    pub tests: Vec<TestGroup>,
}

/// One test group: input series and what is expected of them.
#[derive(Debug, Deserialize)]
pub struct TestGroup {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// The alerts expected at given times.
    #[serde(default)]
    pub alert_rule_test: Vec<AlertTest>,
}

/// The alerts of one name expected at one time.
#[derive(Debug, Deserialize)]
pub struct AlertTest {
    /// When (`5m`).
    pub eval_time: String,
    /// The alert's name.
    pub alertname: String,
    /// The alerts expected firing then; empty: none.
    #[serde(default)]
    pub exp_alerts: Vec<ExpAlert>,
}

/// One alert expected firing.
#[derive(Debug, Deserialize)]
pub struct ExpAlert {
    /// Its labels.
    #[serde(default)]
    pub exp_labels: BTreeMap<String, String>,
    /// Its annotations.
    #[serde(default)]
    pub exp_annotations: BTreeMap<String, String>,
}

impl TestFile {
    /// Reads `path`.
    ///
    /// # Errors
    /// When it cannot be read or is not a promtool test file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        Ok(serde_yaml::from_str(&std::fs::read_to_string(path)?)?)
    }
}
