//! What SMG did in an arm, from its Prometheus metrics at the arm's end: how many decode
//! selections its named policy made, how many requests went elsewhere because every worker was
//! overloaded (or vetoed as not live), sheds and retries, and the decode dispatches per DP rank.

use std::fmt::Write as _;

use infera_testkit::http::metric_sum;
use serde_json::{Value, json};

use crate::study::numbers::thousands;

/// SMG's counters at the end of an arm (a fresh SMG: they start at 0).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Counters {
    /// The `policy` label of `smg_worker_selection_total{worker_type="decode"}`.
    pub(crate) decode_policy: String,
    /// `smg_worker_selection_total{worker_type="decode"}`.
    pub(crate) decode_selections: f64,
    /// `smg_worker_selection_total{worker_type="prefill"}` (the prefill policy: SMG's default
    /// `--policy cache_aware`).
    pub(crate) prefill_selections: f64,
    /// `smg_worker_overload_fallback_total`: routed to the least-loaded worker because every
    /// worker was overloaded. No worker-type label: the single prefill counts too.
    pub(crate) overload_fallbacks: f64,
    /// `smg_worker_overload_shed_total` (every stage).
    pub(crate) overload_sheds: f64,
    /// `smg_worker_liveness_fallback_total`.
    pub(crate) liveness_fallbacks: f64,
    /// `smg_worker_retries_total` (every worker type and endpoint).
    pub(crate) retries: f64,
    /// `smg_worker_requests_total{worker="DECODE@r"}` per DP rank r, decode after decode.
    pub(crate) rank_dispatches: Vec<f64>,
    /// The priority scheduler's outcomes (all 0 without `--priority-scheduler-enabled`).
    pub(crate) scheduler: Scheduler,
}

/// `smg_scheduler_admit_total` by outcome, and `smg_scheduler_preemption_total`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Scheduler {
    pub(crate) admitted: f64,
    /// `rejected_queue_full` (429) and `rejected_queue_timeout` (408).
    pub(crate) rejected: f64,
    pub(crate) preempted: f64,
}

impl Scheduler {
    fn parse(text: &str) -> Self {
        let outcome = |o: &str| metric_sum(text, "smg_scheduler_admit_total", &format!("outcome=\"{o}\""));
        Self {
            admitted: outcome("admitted"),
            rejected: outcome("rejected_queue_full") + outcome("rejected_queue_timeout"),
            preempted: metric_sum(text, "smg_scheduler_preemption_total", ""),
        }
    }

    fn add(&mut self, o: &Scheduler) {
        self.admitted += o.admitted;
        self.rejected += o.rejected;
        self.preempted += o.preempted;
    }

    fn ran(&self) -> bool {
        self.admitted + self.rejected + self.preempted > 0.0
    }
}

/// A decode as SMG names it (`http://host:port`), with its DP ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DecodeRanks {
    pub(crate) url: String,
    pub(crate) ranks: u32,
}

impl Counters {
    /// From a `/metrics` text; `decodes` the decodes it knew of.
    pub(crate) fn parse(text: &str, decodes: &[DecodeRanks]) -> Self {
        let decode = "worker_type=\"decode\"";
        let decode_policy = text
            .lines()
            .filter(|l| l.starts_with("smg_worker_selection_total{") && l.contains(decode))
            .find_map(|l| Some(l.split_once("policy=\"")?.1.split_once('"')?.0.to_owned()))
            .unwrap_or_default();
        Self {
            decode_policy,
            decode_selections: metric_sum(text, "smg_worker_selection_total", decode),
            prefill_selections: metric_sum(text, "smg_worker_selection_total", "worker_type=\"prefill\""),
            overload_fallbacks: metric_sum(text, "smg_worker_overload_fallback_total", ""),
            overload_sheds: metric_sum(text, "smg_worker_overload_shed_total", ""),
            liveness_fallbacks: metric_sum(text, "smg_worker_liveness_fallback_total", ""),
            retries: metric_sum(text, "smg_worker_retries_total", ""),
            rank_dispatches: decodes
                .iter()
                .flat_map(|d| (0..d.ranks).map(move |r| (d, r)))
                .map(|(d, r)| {
                    metric_sum(text, "smg_worker_requests_total", &format!("worker=\"{}@{r}\"", d.url))
                })
                .collect(),
            scheduler: Scheduler::parse(text),
        }
    }

    /// Several replicas' counters as one: sums (the policy is the first's).
    pub(crate) fn sum(all: &[Counters]) -> Counters {
        let mut out = all.first().cloned().unwrap_or_else(|| Counters::parse("", &[]));
        for c in all.iter().skip(1) {
            out.decode_selections += c.decode_selections;
            out.prefill_selections += c.prefill_selections;
            out.overload_fallbacks += c.overload_fallbacks;
            out.overload_sheds += c.overload_sheds;
            out.liveness_fallbacks += c.liveness_fallbacks;
            out.retries += c.retries;
            out.scheduler.add(&c.scheduler);
            for (a, b) in out.rank_dispatches.iter_mut().zip(&c.rank_dispatches) {
                *a += b;
            }
        }
        out
    }

    /// The busiest rank's dispatches over the mean rank's.
    pub(crate) fn dispatch_max_over_mean(&self) -> Option<f64> {
        let n = self.rank_dispatches.len() as f64;
        let mean = self.rank_dispatches.iter().sum::<f64>() / n;
        let max = self.rank_dispatches.iter().copied().fold(0.0, f64::max);
        (mean > 0.0).then_some(max / mean)
    }

    /// One line for the report.
    pub(crate) fn line(&self) -> String {
        let mut out = format!(
            "{} decode selections by {} ({} prefill selections), {} overload fallbacks (to the least-loaded worker: all over the thresholds; prefill included), {} sheds, {} liveness fallbacks, {} retries; decode dispatches per rank ",
            thousands(self.decode_selections),
            if self.decode_policy.is_empty() { "–" } else { &self.decode_policy },
            thousands(self.prefill_selections),
            thousands(self.overload_fallbacks),
            thousands(self.overload_sheds),
            thousands(self.liveness_fallbacks),
            thousands(self.retries),
        );
        let ranks: Vec<String> = self.rank_dispatches.iter().map(|d| thousands(*d)).collect();
        out.push_str(&ranks.join("/"));
        if let Some(r) = self.dispatch_max_over_mean() {
            let _ = write!(out, " (busiest / mean {r:.2})");
        }
        let s = &self.scheduler;
        if s.ran() {
            let _ = write!(
                out,
                "; priority scheduler: {} admitted, {} rejected (queue full or timed out), {} preempted",
                thousands(s.admitted),
                thousands(s.rejected),
                thousands(s.preempted)
            );
        }
        out
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "decode_policy": self.decode_policy,
            "decode_selections": self.decode_selections,
            "prefill_selections": self.prefill_selections,
            "overload_fallbacks": self.overload_fallbacks,
            "overload_sheds": self.overload_sheds,
            "liveness_fallbacks": self.liveness_fallbacks,
            "retries": self.retries,
            "decode_rank_dispatches": self.rank_dispatches,
            "scheduler": {
                "admitted": self.scheduler.admitted,
                "rejected": self.scheduler.rejected,
                "preempted": self.scheduler.preempted,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_smg_metrics() {
        let text = "# HELP smg_worker_selection_total Worker selection events\n\
            smg_worker_selection_total{worker_type=\"prefill\",connection_mode=\"http\",model=\"m\",policy=\"cache_aware\"} 6\n\
            smg_worker_selection_total{worker_type=\"decode\",connection_mode=\"http\",model=\"m\",policy=\"least_load\"} 6\n\
            smg_worker_overload_fallback_total{stage=\"selection\"} 2\n\
            smg_worker_overload_shed_total{stage=\"dispatch\"} 0\n\
            smg_worker_overload_shed_total{stage=\"pd_admission\"} 1\n\
            smg_worker_liveness_fallback_total{stage=\"selection\"} 0\n\
            smg_worker_retries_total{worker_type=\"decode\",endpoint=\"chat\"} 3\n\
            smg_worker_requests_total{worker=\"http://127.0.0.1:9@0\",model=\"m\"} 4\n\
            smg_worker_requests_total{worker=\"http://127.0.0.1:9@1\",model=\"m\"} 2\n\
            smg_worker_requests_total{worker=\"http://127.0.0.1:8\",model=\"m\"} 6\n\
            smg_scheduler_admit_total{class=\"interactive\",outcome=\"admitted\"} 5\n\
            smg_scheduler_admit_total{class=\"bulk\",outcome=\"admitted\"} 1\n\
            smg_scheduler_admit_total{class=\"bulk\",outcome=\"rejected_queue_timeout\"} 2\n\
            smg_scheduler_preemption_total{victim_class=\"bulk\",by_class=\"interactive\"} 1\n";
        let c = Counters::parse(text, &[DecodeRanks { url: "http://127.0.0.1:9".into(), ranks: 2 }]);
        assert_eq!(c.decode_policy, "least_load");
        assert_eq!(
            (c.decode_selections, c.overload_fallbacks, c.overload_sheds, c.liveness_fallbacks, c.retries),
            (6.0, 2.0, 1.0, 0.0, 3.0)
        );
        assert_eq!(c.rank_dispatches, [4.0, 2.0]);
        assert_eq!(c.dispatch_max_over_mean(), Some(4.0 / 3.0));
        assert_eq!(c.prefill_selections, 6.0);
        assert!(
            c.line().starts_with(
                "6 decode selections by least_load (6 prefill selections), 2 overload fallbacks"
            ),
            "{}",
            c.line()
        );
        assert_eq!(c.scheduler, Scheduler { admitted: 6.0, rejected: 2.0, preempted: 1.0 });
        assert!(
            c.line().ends_with(
                "per rank 4/2 (busiest / mean 1.33); priority scheduler: 6 admitted, 2 rejected (queue full or timed out), 1 preempted"
            ),
            "{}",
            c.line()
        );
        let two = Counters::sum(&[c.clone(), c.clone()]);
        assert_eq!((two.decode_selections, two.rank_dispatches.clone()), (12.0, vec![8.0, 4.0]));
        assert_eq!(two.decode_policy, "least_load");
    }
}
