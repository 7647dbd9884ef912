//! The W an infera arm's decode picks used over the run, from control's `Admin/GetConfig`
//! (each decode pool's `request_weight` in use and its `fitted_weight`) read at a fixed
//! emulated interval: for an `auto` arm the W the fit settled on and how long it took; for a
//! pinned arm what the fit would have used.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::deploy::Deployment;

/// A fit "settled" once W in use stays within this share of its final value to the end.
pub(crate) const SETTLED_WITHIN: f64 = 0.10;

/// One reading of the first decode pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct WeightPoint {
    /// Emulated seconds from the run's start.
    pub(crate) t_s: f64,
    /// The W picks use.
    pub(crate) in_use: f64,
    /// The pool's fitted W, once a fit is trusted.
    pub(crate) fitted: Option<f64>,
}

/// The readings of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct WeightSeries(pub(crate) Vec<WeightPoint>);

impl WeightSeries {
    /// The last reading.
    pub(crate) fn last(&self) -> Option<WeightPoint> {
        self.0.last().copied()
    }

    /// Emulated seconds from the start until W in use came within [`SETTLED_WITHIN`] of its
    /// final value and stayed there.
    pub(crate) fn settled_s(&self) -> Option<f64> {
        let last = self.last()?.in_use;
        let near = |p: &WeightPoint| (p.in_use - last).abs() <= SETTLED_WITHIN * last.abs();
        let from = self.0.iter().rposition(|p| !near(p)).map_or(0, |i| i + 1);
        self.0.get(from).map(|p| p.t_s)
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "t_s": self.0.iter().map(|p| p.t_s).collect::<Vec<_>>(),
            "in_use": self.0.iter().map(|p| p.in_use).collect::<Vec<_>>(),
            "fitted": self.0.iter().map(|p| p.fitted).collect::<Vec<_>>(),
            "settled_s": self.settled_s(),
        })
    }

    /// One line: the final W and fit, and (`fitted`: W follows the fit) when it settled.
    pub(crate) fn line(&self, fitted: bool) -> Option<String> {
        let last = self.last()?;
        let fit = last.fitted.map_or_else(|| "no trusted fit".to_owned(), |f| format!("fitted {f:.0}"));
        let settled = match self.settled_s() {
            Some(s) if fitted => format!(", settled at {s:.0} s"),
            _ => String::new(),
        };
        Some(format!("W in use at the end {:.0} ({fit}){settled}", last.in_use))
    }
}

/// Reads `deployment`'s W every `interval_s` emulated seconds until `stop` resolves; an SMG
/// deployment gives an empty series.
pub(crate) async fn sample(
    deployment: &Deployment,
    interval_s: f64,
    compression: f64,
    stop: impl Future<Output = ()>,
) -> WeightSeries {
    let origin = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64((interval_s / compression).max(0.001)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut series = WeightSeries::default();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return series,
            _ = tick.tick() => {}
        }
        let Some((in_use, fitted)) = deployment.decode_weight().await else { return series };
        series.0.push(WeightPoint { t_s: origin.elapsed().as_secs_f64() * compression, in_use, fitted });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fit_settles_when_w_stays_near_its_final_value() {
        let p = |t_s, in_use| WeightPoint { t_s, in_use, fitted: Some(in_use) };
        let s = WeightSeries(vec![p(0.0, 1e6), p(10.0, 4e5), p(20.0, 1.02e6), p(30.0, 9.5e5), p(40.0, 1e6)]);
        assert_eq!(s.settled_s(), Some(20.0));
        assert_eq!(WeightSeries(vec![p(0.0, 5.0), p(1.0, 5.0)]).settled_s(), Some(0.0));
        assert_eq!(WeightSeries::default().settled_s(), None);
        assert_eq!(s.line(true).unwrap(), "W in use at the end 1000000 (fitted 1000000), settled at 20 s");
        assert_eq!(s.line(false).unwrap(), "W in use at the end 1000000 (fitted 1000000)");
    }
}
