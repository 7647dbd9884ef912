//! A scenario's events during a run, and what they did: each [`Event`] is applied to the
//! deployment at its emulated time (the wall clock × the time compression, from the replay's
//! start), and for a decode that joins, how long its ranks took to carry the pool's mean load.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::deploy::Deployment;
use super::scenario::{Change, Event};
use crate::replay::ranks::RankSample;

/// A joining decode "carries the mean" once its ranks' mean running requests reach this share
/// of the pool's mean rank (the pool mean includes it; 1.0 would be missed by sampling noise).
pub(crate) const CATCH_UP_SHARE: f64 = 0.9;

/// An event as it happened.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Applied {
    pub(crate) event: Event,
    /// What it changed (`decode-1 joins`).
    pub(crate) what: String,
    /// The decode's base URL.
    pub(crate) url: String,
    /// Emulated seconds from the run's start when the routers had it.
    pub(crate) done_s: f64,
}

impl Applied {
    pub(crate) fn json(&self, catch_up_s: Option<f64>) -> Value {
        json!({
            "at_s": self.event.at_s,
            "what": self.what,
            "done_s": self.done_s,
            "catch_up_s": catch_up_s,
        })
    }
}

/// Applies `events` to `deployment` at their times; stops at the first that fails.
pub(crate) async fn drive(
    deployment: &Deployment,
    events: &[Event],
    compression: f64,
) -> anyhow::Result<Vec<Applied>> {
    let origin = Instant::now();
    let mut applied = Vec::new();
    for &event in events {
        tokio::time::sleep_until((origin + Duration::from_secs_f64(event.at_s / compression)).into()).await;
        let decode = deployment.apply(event.change).await?;
        let verb = match event.change {
            Change::Join(_) => "joins",
            Change::Drain(_) => "is drained",
        };
        applied.push(Applied {
            event,
            what: format!("{} {verb}", decode.name),
            url: decode.url,
            done_s: origin.elapsed().as_secs_f64() * compression,
        });
    }
    Ok(applied)
}

/// Emulated seconds from `join_s` until the worker at `url` first carries the mean
/// ([`CATCH_UP_SHARE`]), from the run's samples (emulated ms); `None` if it never does.
pub(crate) fn catch_up_s(series: &[RankSample], url: &str, join_s: f64) -> Option<f64> {
    series.iter().filter(|s| s.at_ms / 1e3 >= join_s).find_map(|s| {
        let own = s.worker_mean_running(url)?;
        let mean = s.mean_running();
        (mean > 0.0 && own >= CATCH_UP_SHARE * mean).then(|| s.at_ms / 1e3 - join_s)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ranks::WorkerSpan;

    fn sample(at_s: f64, old: [u32; 2], new: Option<[u32; 2]>) -> RankSample {
        let mut s = RankSample { at_ms: at_s * 1e3, ..RankSample::default() };
        s.running.extend(old);
        s.workers.push(WorkerSpan { url: "http://old".into(), ranks: 2 });
        if let Some(new) = new {
            s.running.extend(new);
            s.workers.push(WorkerSpan { url: "http://new".into(), ranks: 2 });
        }
        s.tokens = vec![0; s.running.len()];
        s
    }

    #[test]
    fn a_joining_worker_catches_up_when_its_ranks_carry_the_mean() {
        let series = [
            sample(90.0, [8, 8], None),
            sample(100.0, [8, 8], Some([0, 0])),
            sample(110.0, [7, 7], Some([2, 2])), // 2 < 0.9 × 4.5
            sample(120.0, [6, 6], Some([4, 5])), // 4.5 < 0.9 × 5.25
            sample(130.0, [6, 6], Some([5, 5])), // 5 ≥ 0.9 × 5.5
        ];
        assert_eq!(catch_up_s(&series, "http://new", 100.0), Some(30.0));
        assert_eq!(catch_up_s(&series[..4], "http://new", 100.0), None);
        assert_eq!(catch_up_s(&series, "http://other", 100.0), None);
    }
}
