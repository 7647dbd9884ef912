//! A `/metrics` answer (OpenMetrics or Prometheus text) read into what a query can name: each
//! family's type from its `# TYPE` line, the series names Prometheus stores for it, and the
//! label names its samples carry.
//!
//! Prometheus stores a counter family `x` as `x_total`, a histogram as `x_bucket`, `x_sum` and
//! `x_count`, a summary as `x`, `x_sum` and `x_count`, an info family as `x_info`. The
//! OpenMetrics `x_created` samples are read as the series' start times and not stored as series,
//! so no query can name them: they are left out of the names a query may use.

use std::collections::{BTreeMap, BTreeSet};

/// Labels Prometheus attaches to every series it scrapes (the target's), which no `/metrics`
/// answer shows.
pub const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// One metric family as scraped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Family {
    /// `counter`, `gauge`, `histogram`, `summary`, `info`, `stateset`, `unknown`, …
    pub kind: String,
    /// Which endpoint(s) it came from (the names given to [`Scrape::add`]).
    pub sources: BTreeSet<String>,
    /// Its `# HELP` text (empty without one).
    pub help: String,
}

/// Every family and series of one or more `/metrics` answers.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Families by their `# TYPE` name.
    pub families: BTreeMap<String, Family>,
    /// Label names per series name, from the samples (without `__name__`).
    pub samples: BTreeMap<String, BTreeSet<String>>,
}

impl Scrape {
    /// Adds the answer `text` of the endpoint `source`.
    pub fn add(&mut self, source: &str, text: &str) {
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("# HELP ") {
                if let Some((name, help)) = rest.split_once(' ') {
                    self.families.entry(name.to_owned()).or_default().help = help.trim().to_owned();
                }
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    let family = self.families.entry(name.to_owned()).or_default();
                    family.kind = kind.to_owned();
                    family.sources.insert(source.to_owned());
                }
            } else if !line.is_empty() && !line.starts_with('#') {
                let (name, labels) = sample(line);
                self.samples.entry(name.to_owned()).or_default().extend(labels);
            }
        }
    }

    /// The series names Prometheus stores for the families, each with the family it belongs to.
    pub fn series(&self) -> BTreeMap<String, &str> {
        let mut out = BTreeMap::new();
        for (name, family) in &self.families {
            let suffixes: &[&str] = match family.kind.as_str() {
                "counter" => &["_total"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            for suffix in suffixes {
                // prometheus-client names a counter's family without `_total`; some exporters
                // put it in the `# TYPE` line too.
                let series = if family.kind == "counter" && name.ends_with("_total") {
                    name.clone()
                } else {
                    format!("{name}{suffix}")
                };
                out.insert(series, name.as_str());
            }
        }
        for name in self.samples.keys() {
            if !name.ends_with("_created") && !out.contains_key(name) {
                out.insert(name.clone(), name.as_str());
            }
        }
        out
    }

    /// Whether a query may name the series `name`.
    pub fn has_series(&self, name: &str) -> bool {
        self.series().contains_key(name)
    }

    /// The label names of the series `name` (its samples' and the target's), or `None` when it
    /// has no sample in the scrape (then nothing is known of its labels).
    pub fn labels(&self, name: &str) -> Option<BTreeSet<String>> {
        let mut labels = self.samples.get(name)?.clone();
        labels.extend(TARGET_LABELS.map(str::to_owned));
        Some(labels)
    }
}

/// A sample line's series name and label names.
fn sample(line: &str) -> (&str, Vec<String>) {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..end];
    let mut labels = Vec::new();
    if line[end..].starts_with('{') {
        let mut rest = &line[end + 1..];
        // `name="value",…}`; values may hold escaped quotes, commas and braces.
        while let Some(eq) = rest.find('=') {
            let label = rest[..eq].trim().trim_start_matches(',').trim();
            if label.is_empty() || label.starts_with('}') {
                break;
            }
            labels.push(label.to_owned());
            let value = &rest[eq + 1..];
            let Some(after) = value.strip_prefix('"') else { break };
            let mut escaped = false;
            let close = after.char_indices().find(|&(_, c)| {
                let end = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                end
            });
            let Some((close, _)) = close else { break };
            rest = &after[close + 1..];
            if rest.trim_start().starts_with('}') {
                break;
            }
        }
    }
    (name, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP infera_router_picks Picks.
# TYPE infera_router_picks counter
infera_router_picks_total{kind="decode",mode="on",outcome="ok"} 3
infera_router_picks_created{kind="decode",mode="on",outcome="ok"} 1.7e9
# TYPE infera_router_pick_duration_seconds histogram
infera_router_pick_duration_seconds_bucket{kind="decode",le="0.1"} 1
infera_router_pick_duration_seconds_sum{kind="decode"} 0.01
infera_router_pick_duration_seconds_count{kind="decode"} 1
# TYPE infera_router_leader gauge
infera_router_leader 1
# TYPE infera_router_target_ejected gauge
# TYPE odd gauge
odd{a="x,\"}b=",b="y"} 2
# EOF
"#;

    #[test]
    fn families_become_the_series_prometheus_stores() {
        let mut s = Scrape::default();
        s.add("control", TEXT);
        let series = s.series();
        for name in [
            "infera_router_picks_total",
            "infera_router_pick_duration_seconds_bucket",
            "infera_router_pick_duration_seconds_sum",
            "infera_router_pick_duration_seconds_count",
            "infera_router_leader",
            "infera_router_target_ejected",
        ] {
            assert!(series.contains_key(name), "{name} in {series:?}");
        }
        assert!(!s.has_series("infera_router_picks"));
        assert!(!s.has_series("infera_router_picks_created"));
        assert!(!s.has_series("infera_router_pick_duration_seconds"));
        assert_eq!(s.families["infera_router_picks"].help, "Picks.");
        assert_eq!(s.families["infera_router_leader"].help, "");
    }

    #[test]
    fn labels_come_from_the_samples_and_the_target() {
        let mut s = Scrape::default();
        s.add("control", TEXT);
        let picks = s.labels("infera_router_picks_total").unwrap();
        assert!(["kind", "mode", "outcome", "job", "instance"].iter().all(|l| picks.contains(*l)));
        assert!(s.labels("infera_router_pick_duration_seconds_bucket").unwrap().contains("le"));
        assert!(!s.labels("infera_router_pick_duration_seconds_sum").unwrap().contains("le"));
        assert_eq!(s.labels("infera_router_target_ejected"), None, "no sample: labels unknown");
        let odd: Vec<String> = s.labels("odd").unwrap().into_iter().collect();
        assert_eq!(odd, ["a", "b", "instance", "job"]);
    }
}
