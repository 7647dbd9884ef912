//! A PromQL query checked against what the binaries export: the query is parsed as Prometheus
//! parses it, every vector and matrix selector's metric must be a series the scrape (or a
//! recording rule) has, and every label a matcher, `by`/`without`, `on` or a function names
//! must be one the series it applies to carry there.
//!
//! The labels an expression carries are followed through the tree: a selector has its series'
//! labels, an aggregation keeps its `by` labels (or drops its `without` ones), `label_replace`
//! adds its destination, `histogram_quantile` drops `le`, a one-to-one match `on (…)` keeps
//! those. Where nothing is known (a series without a sample in the scrape) nothing is checked.

use std::collections::{BTreeMap, BTreeSet};

use promql_parser::label::{METRIC_NAME, Matchers};
use promql_parser::parser::{
    self, Expr, LabelModifier, VectorMatchCardinality, VectorSelector, value::ValueType,
};

use crate::exposition::Scrape;

/// Label names; `None` where they are not known.
type Labels = Option<BTreeSet<String>>;

/// What queries may name: the scraped series and the recording rules' outputs.
#[derive(Debug)]
pub struct Schema<'a> {
    scrape: &'a Scrape,
    recorded: BTreeMap<String, Labels>,
}

impl<'a> Schema<'a> {
    /// The series of `scrape`.
    pub fn new(scrape: &'a Scrape) -> Self {
        Self { scrape, recorded: BTreeMap::new() }
    }

    /// Adds the recording rule `name = query` (checked first, as any query): its series carry
    /// the labels its expression keeps, and its own `labels:`.
    ///
    /// # Errors
    /// The query's problems: it does not parse, or names what does not exist.
    pub fn record(&mut self, name: &str, query: &str, extra: &[String]) -> Result<(), Vec<String>> {
        let labels = self.labels_of(query)?;
        let labels = labels.map(|mut l| {
            l.extend(extra.iter().cloned());
            l
        });
        self.recorded.insert(name.to_owned(), labels);
        Ok(())
    }

    /// Every problem of `query`; empty when it is sound.
    pub fn check(&self, query: &str) -> Vec<String> {
        self.labels_of(query).err().unwrap_or_default()
    }

    /// The labels `query`'s result carries (`None`: not known), or its problems.
    ///
    /// # Errors
    /// As [`Schema::check`].
    pub fn labels_of(&self, query: &str) -> Result<Option<BTreeSet<String>>, Vec<String>> {
        let expr = parser::parse(query).map_err(|e| vec![format!("does not parse: {e}")])?;
        let mut problems = Vec::new();
        let labels = self.walk(&expr, &mut problems);
        if problems.is_empty() { Ok(labels) } else { Err(problems) }
    }

    fn series(&self, name: &str) -> Option<Labels> {
        if let Some(labels) = self.recorded.get(name) {
            return Some(labels.clone());
        }
        self.scrape.has_series(name).then(|| self.scrape.labels(name))
    }

    fn selector(&self, vs: &VectorSelector, problems: &mut Vec<String>) -> Labels {
        let by_matcher =
            || vs.matchers.matchers.iter().find(|m| m.name == METRIC_NAME).map(|m| m.value.clone());
        let name = vs.name.clone().or_else(by_matcher);
        let Some(name) = name else {
            problems.push(format!("a selector without a metric name: {vs}"));
            return None;
        };
        let Some(labels) = self.series(&name) else {
            problems.push(format!("no series {name} in the scrape"));
            return None;
        };
        for label in matcher_labels(&vs.matchers) {
            need(&labels, &label, &name, problems);
        }
        labels
    }

    /// The labels `expr` carries, with the problems found beneath it.
    fn walk(&self, expr: &Expr, problems: &mut Vec<String>) -> Labels {
        match expr {
            Expr::VectorSelector(vs) => self.selector(vs, problems),
            Expr::MatrixSelector(ms) => self.selector(&ms.vs, problems),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Some(BTreeSet::new()),
            Expr::Unary(u) => self.walk(&u.expr, problems),
            Expr::Paren(p) => self.walk(&p.expr, problems),
            Expr::Subquery(s) => self.walk(&s.expr, problems),
            Expr::Aggregate(a) => {
                let inner = self.walk(&a.expr, problems);
                if let Some(param) = &a.param {
                    self.walk(param, problems);
                }
                let what = format!("{}(…)", a.op);
                match &a.modifier {
                    Some(LabelModifier::Include(by)) => {
                        by.labels.iter().for_each(|l| need(&inner, l, &what, problems));
                        Some(by.labels.iter().cloned().collect())
                    }
                    Some(LabelModifier::Exclude(without)) => {
                        without.labels.iter().for_each(|l| need(&inner, l, &what, problems));
                        inner.map(|i| i.into_iter().filter(|l| !without.labels.contains(l)).collect())
                    }
                    None if ["topk", "bottomk", "limitk", "limit_ratio"]
                        .contains(&a.op.to_string().as_str()) =>
                    {
                        inner
                    }
                    None => Some(BTreeSet::new()),
                }
            }
            Expr::Call(call) => self.call(call.func.name, &call.args.args, problems),
            Expr::Binary(b) => {
                let lhs = self.walk(&b.lhs, problems);
                let rhs = self.walk(&b.rhs, problems);
                let scalar = |e: &Expr| e.value_type() == ValueType::Scalar;
                match (scalar(&b.lhs), scalar(&b.rhs)) {
                    (true, true) => Some(BTreeSet::new()),
                    (true, false) => rhs,
                    (false, true) => lhs,
                    (false, false) => self.matched(b, lhs, rhs, problems),
                }
            }
            Expr::Extension(_) => None,
        }
    }

    /// A vector-vector operation's labels.
    fn matched(
        &self,
        b: &parser::BinaryExpr,
        lhs: Labels,
        rhs: Labels,
        problems: &mut Vec<String>,
    ) -> Labels {
        let op = b.op.to_string();
        let Some(modifier) = &b.modifier else {
            return if op == "or" { union(lhs, rhs) } else { lhs };
        };
        if let Some(LabelModifier::Include(on)) = &modifier.matching {
            for l in &on.labels {
                need(&lhs, l, &format!("the left of {op} on (…)"), problems);
                need(&rhs, l, &format!("the right of {op} on (…)"), problems);
            }
        }
        match (&modifier.card, &modifier.matching) {
            (VectorMatchCardinality::ManyToOne(include), _) => {
                union(lhs, Some(include.labels.iter().cloned().collect()))
            }
            (VectorMatchCardinality::OneToMany(include), _) => {
                union(rhs, Some(include.labels.iter().cloned().collect()))
            }
            (VectorMatchCardinality::ManyToMany, _) if op == "or" => union(lhs, rhs),
            (VectorMatchCardinality::ManyToMany, _) => lhs,
            (VectorMatchCardinality::OneToOne, Some(LabelModifier::Include(on))) => {
                Some(on.labels.iter().cloned().collect())
            }
            (VectorMatchCardinality::OneToOne, Some(LabelModifier::Exclude(ignoring))) => {
                lhs.map(|l| l.into_iter().filter(|x| !ignoring.labels.contains(x)).collect())
            }
            (VectorMatchCardinality::OneToOne, None) => lhs,
        }
    }

    /// A function call's labels.
    fn call(&self, func: &str, args: &[Box<Expr>], problems: &mut Vec<String>) -> Labels {
        let labels: Vec<Labels> = args.iter().map(|a| self.walk(a, problems)).collect();
        let string = |i: usize| match args.get(i).map(AsRef::as_ref) {
            Some(Expr::StringLiteral(s)) => Some(s.val.clone()),
            _ => None,
        };
        match func {
            "label_replace" => {
                let inner = labels.first().cloned().flatten();
                if let Some(src) = string(3) {
                    need(&inner.clone(), &src, "label_replace", problems);
                }
                union(inner, string(1).map(|dst| BTreeSet::from([dst])))
            }
            "label_join" => {
                let inner = labels.first().cloned().flatten();
                for i in 3..args.len() {
                    if let Some(src) = string(i) {
                        need(&inner.clone(), &src, "label_join", problems);
                    }
                }
                union(inner, string(1).map(|dst| BTreeSet::from([dst])))
            }
            "histogram_quantile" => {
                let inner = labels.get(1).cloned().flatten();
                need(&inner.clone(), "le", "histogram_quantile", problems);
                inner.map(|l| l.into_iter().filter(|x| x != "le").collect())
            }
            "vector" | "time" | "scalar" | "pi" | "absent" | "absent_over_time" => Some(BTreeSet::new()),
            _ => {
                let vector =
                    args.iter().position(|a| matches!(a.value_type(), ValueType::Vector | ValueType::Matrix));
                vector.map_or(Some(BTreeSet::new()), |i| labels[i].clone())
            }
        }
    }
}

fn matcher_labels(m: &Matchers) -> BTreeSet<String> {
    m.matchers
        .iter()
        .chain(m.or_matchers.iter().flatten())
        .map(|m| m.name.clone())
        .filter(|n| n != METRIC_NAME)
        .collect()
}

fn need(labels: &Labels, label: &str, on: &str, problems: &mut Vec<String>) {
    if let Some(have) = labels
        && !have.contains(label)
    {
        problems.push(format!("label {label} is not on {on} (it has {have:?})"));
    }
}

fn union(a: Labels, b: Labels) -> Labels {
    let (mut a, b) = (a?, b?);
    a.extend(b);
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape() -> Scrape {
        let mut s = Scrape::default();
        s.add(
            "control",
            "# TYPE infera_router_decode_demand_requests gauge\n\
             infera_router_decode_demand_requests{target=\"decode-0/0\"} 1\n\
             # TYPE infera_router_pick_duration_seconds histogram\n\
             infera_router_pick_duration_seconds_bucket{kind=\"decode\",le=\"+Inf\"} 1\n\
             # TYPE infera_router_ejections counter\n",
        );
        s
    }

    #[test]
    fn names_and_labels_are_followed_through_the_tree() {
        let s = scrape();
        let mut schema = Schema::new(&s);
        let spread = r#"max by (worker) (label_replace(infera_router_decode_demand_requests, "worker", "$1", "target", "(.*)/.*"))"#;
        assert_eq!(schema.record("infera:spread", spread, &[]), Ok(()));
        assert!(schema.check(r#"infera:spread{worker="decode-0"} > 2"#).is_empty());
        let q = "histogram_quantile(0.99, sum by (le, kind) (rate(infera_router_pick_duration_seconds_bucket[5m])))";
        assert!(schema.check(q).is_empty());
        assert!(schema.check("increase(infera_router_ejections_total{cause=\"x\"}[5m]) > 0").is_empty());
        assert!(schema.check("sum by (instance) (infera_router_decode_demand_requests)").is_empty());
    }

    #[test]
    fn what_does_not_exist_is_named() {
        let s = scrape();
        let schema = Schema::new(&s);
        let p = schema.check("rate(infera_router_ejections[5m])");
        assert_eq!(p, ["no series infera_router_ejections in the scrape"]);
        let p = schema.check("sum by (model) (infera_router_decode_demand_requests)");
        assert!(p[0].starts_with("label model is not on sum(…)"), "{p:?}");
        let p = schema.check(r#"infera:spread{worker="a"}"#);
        assert_eq!(p, ["no series infera:spread in the scrape"]);
        let p = schema.check(r#"infera_router_decode_demand_requests{worker="a"}"#);
        assert!(p[0].starts_with("label worker is not on infera_router_decode_demand_requests"), "{p:?}");
        let p = schema.check(
            "histogram_quantile(0.5, sum by (kind) (rate(infera_router_pick_duration_seconds_bucket[5m])))",
        );
        assert!(p[0].starts_with("label le is not on histogram_quantile"), "{p:?}");
        assert!(schema.check("sum(")[0].starts_with("does not parse"));
    }
}
