//! The Grafana dashboard's queries: every panel target's `expr` (rows' panels included) and
//! every query variable's `label_values(…)` / `query_result(…)`, each with the PromQL Prometheus
//! receives once Grafana has put in its variables.

use serde_json::Value;

/// One query of the dashboard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Where it is: `panel "<title>"` or `variable <name>`.
    pub place: String,
    /// As written.
    pub text: String,
    /// The PromQL sent, variables put in.
    pub promql: String,
    /// A label `label_values(…, label)` reads, which the selector's series must carry.
    pub label: Option<String>,
}

/// The value each variable stands for while checking: `$__rate_interval` and the other
/// intervals become a duration, every template variable a plain word (a valid regex and a
/// valid label value).
pub fn substitute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').map_or(braced.len(), |e| e + 1);
            (braced[..end.saturating_sub(1)].split(':').next().unwrap_or(""), end + 1)
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = match name {
            "__rate_interval" | "__interval" | "__range" => "5m".to_owned(),
            // A `$` alone, or `$1` in a label_replace replacement: PromQL's own.
            n if n.chars().all(|c| c.is_ascii_digit()) => format!("${n}"),
            _ => "x".to_owned(),
        };
        out.push_str(&value);
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// Every query of the dashboard `json`.
pub fn queries(json: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    panels(json.get("panels"), &mut out);
    for var in json.pointer("/templating/list").and_then(Value::as_array).into_iter().flatten() {
        if var.get("type").and_then(Value::as_str) != Some("query") {
            continue;
        }
        let name = var.get("name").and_then(Value::as_str).unwrap_or("?");
        let query = var.get("query");
        let text = query.and_then(|q| q.get("query")).or(query).and_then(Value::as_str).unwrap_or_default();
        out.push(variable(name, text));
    }
    out
}

fn panels(list: Option<&Value>, out: &mut Vec<Query>) {
    for panel in list.and_then(Value::as_array).into_iter().flatten() {
        let title = panel.get("title").and_then(Value::as_str).unwrap_or("?");
        for target in panel.get("targets").and_then(Value::as_array).into_iter().flatten() {
            if let Some(expr) = target.get("expr").and_then(Value::as_str) {
                let place = format!("panel \"{title}\"");
                out.push(Query { place, text: expr.to_owned(), promql: substitute(expr), label: None });
            }
        }
        panels(panel.get("panels"), out);
    }
}

/// A variable's query: `label_values(selector, label)` checks the selector and the label,
/// `query_result(q)` the query, `label_values(label)` nothing beyond the label's existence
/// somewhere (left to the panels).
fn variable(name: &str, text: &str) -> Query {
    let place = format!("variable {name}");
    let trimmed = text.trim();
    let call = |f: &str| trimmed.strip_prefix(f).and_then(|r| r.trim().strip_prefix('(')?.strip_suffix(')'));
    let (promql, label) = if let Some(args) = call("label_values") {
        match args.rsplit_once(',') {
            Some((selector, label)) => (substitute(selector.trim()), Some(label.trim().to_owned())),
            None => (String::new(), Some(args.trim().to_owned())),
        }
    } else if let Some(q) = call("query_result") {
        (substitute(q), None)
    } else {
        (substitute(trimmed), None)
    };
    Query { place, text: text.to_owned(), promql, label }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_put_in() {
        let q =
            r#"sum by (target) (rate(x_total{target=~"(${worker:pipe})/.*", m="$model"}[$__rate_interval]))"#;
        assert_eq!(substitute(q), r#"sum by (target) (rate(x_total{target=~"(x)/.*", m="x"}[5m]))"#);
        assert_eq!(
            substitute(r#"label_replace(a, "w", "$1", "t", "(.*)")"#),
            r#"label_replace(a, "w", "$1", "t", "(.*)")"#
        );
    }

    #[test]
    fn panels_rows_and_variables_are_all_read() {
        let json = serde_json::json!({
            "panels": [
                {"title": "A", "targets": [{"expr": "up"}]},
                {"title": "Row", "type": "row", "panels": [{"title": "B", "targets": [{"expr": "rate(y_total[$__rate_interval])"}]}]}
            ],
            "templating": {"list": [
                {"name": "datasource", "type": "datasource"},
                {"name": "model", "type": "query", "query": {"query": "label_values(w{x=\"1\"}, model)"}},
                {"name": "worker", "type": "query", "query": "label_values(worker)"}
            ]}
        });
        let q = queries(&json);
        let got: Vec<(&str, &str, Option<&str>)> =
            q.iter().map(|q| (q.place.as_str(), q.promql.as_str(), q.label.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("panel \"A\"", "up", None),
                ("panel \"B\"", "rate(y_total[5m])", None),
                ("variable model", "w{x=\"1\"}", Some("model")),
                ("variable worker", "", Some("worker")),
            ]
        );
    }
}
