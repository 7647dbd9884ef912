//! The decode workers' DP ranks over time, read from each one's SGLang `/v1/loads` (one entry
//! per rank: `num_running_reqs`, and `num_used_tokens` = the KV it holds, which counts requests
//! still receiving their KV as SGLang's `#token` does) at a fixed interval, and summarised as
//! the original study summarised their decode logs. With several decode workers a sample is every rank
//! of the workers in the pool at that moment (the set may change during a run: a worker joins,
//! one is drained), one after another:
//!
//! - **running per rank**: the mean over samples of the mean over ranks;
//! - **busiest median / p90**: percentiles over samples of the busiest rank's requests;
//! - **requests busiest / mean** and **context busiest / mean** (median / p90): per sample the
//!   busiest rank's value over the mean rank's, then percentiles over samples (samples with
//!   an idle decode have no ratio);
//! - **step median** (emulated engine only): the decode step the sim's timing model gives for
//!   each sample's loads (`infera_sim::timing::step_ms`), median over samples.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use infera_sim::params::TimingParams;
use infera_sim::timing::{self, RankLoad};
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::percentile::percentile;

/// One reading of every rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RankSample {
    /// Milliseconds from the run's start (emulated once scaled).
    pub(crate) at_ms: f64,
    /// `num_running_reqs` per rank, in rank order.
    pub(crate) running: Vec<u32>,
    /// `num_used_tokens` per rank, in rank order.
    pub(crate) tokens: Vec<u64>,
    /// Which worker each run of ranks is (empty: one worker, all of them).
    pub(crate) workers: Vec<WorkerSpan>,
}

/// A worker's ranks within a [`RankSample`]: the next `ranks` entries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WorkerSpan {
    /// Its base URL.
    pub(crate) url: Arc<str>,
    pub(crate) ranks: usize,
}

impl RankSample {
    /// The busiest rank's requests.
    pub(crate) fn busiest(&self) -> u32 {
        self.running.iter().copied().max().unwrap_or(0)
    }

    /// The mean rank's requests.
    pub(crate) fn mean_running(&self) -> f64 {
        mean_of(self.running.iter().map(|&r| f64::from(r)))
    }

    /// The mean requests over the ranks of the worker at `url`, if it is in the sample.
    pub(crate) fn worker_mean_running(&self, url: &str) -> Option<f64> {
        let mut start = 0;
        for w in &self.workers {
            if &*w.url == url {
                return Some(mean_of(self.running[start..start + w.ranks].iter().map(|&r| f64::from(r))));
            }
            start += w.ranks;
        }
        None
    }

    /// Busiest over mean, for requests and for context; `None` when that mean is 0.
    fn ratios(&self) -> (Option<f64>, Option<f64>) {
        let ratio = |max: f64, mean: f64| (mean > 0.0).then(|| max / mean);
        let tokens_max = self.tokens.iter().copied().max().unwrap_or(0) as f64;
        (
            ratio(f64::from(self.busiest()), self.mean_running()),
            ratio(tokens_max, mean_of(self.tokens.iter().map(|&t| t as f64))),
        )
    }
}

fn mean_of(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let n = values.len();
    if n == 0 { 0.0 } else { values.sum::<f64>() / n as f64 }
}

/// Median and p90.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Spread {
    pub(crate) p50: Option<f64>,
    pub(crate) p90: Option<f64>,
}

impl Spread {
    fn of(values: &[f64]) -> Self {
        Self { p50: percentile(values, 50.0), p90: percentile(values, 90.0) }
    }

    fn json(&self) -> Value {
        json!({"p50": self.p50, "p90": self.p90})
    }
}

/// The decode ranks over a window, as the original study's second table.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RankStats {
    pub(crate) samples: usize,
    pub(crate) running_per_rank: f64,
    pub(crate) busiest: Spread,
    pub(crate) requests_ratio: Spread,
    pub(crate) context_ratio: Spread,
    /// Model ms, when the engine's timing parameters are known.
    pub(crate) step_ms_p50: Option<f64>,
}

impl RankStats {
    /// Summarises `samples`; `params` (the emulated engine's) adds the modelled step time.
    pub(crate) fn of(samples: &[RankSample], params: Option<&TimingParams>) -> Self {
        let busiest: Vec<f64> = samples.iter().map(|s| f64::from(s.busiest())).collect();
        let (requests, context): (Vec<_>, Vec<_>) = samples.iter().map(RankSample::ratios).unzip();
        let flat = |v: Vec<Option<f64>>| v.into_iter().flatten().collect::<Vec<f64>>();
        let step_ms_p50 = params.and_then(|p| {
            let steps: Vec<f64> = samples
                .iter()
                .filter(|s| s.busiest() > 0)
                .map(|s| {
                    let loads: Vec<RankLoad> = s
                        .running
                        .iter()
                        .zip(&s.tokens)
                        .map(|(&requests, &context_tokens)| RankLoad { requests, context_tokens })
                        .collect();
                    timing::step_ms(p, &loads)
                })
                .collect();
            percentile(&steps, 50.0)
        });
        Self {
            samples: samples.len(),
            running_per_rank: mean_of(samples.iter().map(RankSample::mean_running)),
            busiest: Spread::of(&busiest),
            requests_ratio: Spread::of(&flat(requests)),
            context_ratio: Spread::of(&flat(context)),
            step_ms_p50,
        }
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "samples": self.samples,
            "running_per_rank": self.running_per_rank,
            "busiest_requests": self.busiest.json(),
            "requests_busiest_over_mean": self.requests_ratio.json(),
            "context_busiest_over_mean": self.context_ratio.json(),
            "step_ms_p50_model": self.step_ms_p50,
        })
    }
}

/// The samples as JSON columns: times in s, then one row of ranks per sample.
pub(crate) fn series_json(samples: &[RankSample]) -> Value {
    json!({
        "t_s": samples.iter().map(|s| s.at_ms / 1e3).collect::<Vec<_>>(),
        "running": samples.iter().map(|s| s.running.clone()).collect::<Vec<_>>(),
        "tokens": samples.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>(),
    })
}

/// Reads `/v1/loads` of every worker in a changing set every `interval` until stopped.
#[derive(Debug)]
pub(crate) struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<(Vec<RankSample>, usize)>,
}

impl Sampler {
    /// Starts sampling the workers `pool` names at each tick (base URLs, `http://host:port`);
    /// times are from `origin`. A tick at which any of them does not answer counts as failed.
    pub(crate) fn start(pool: watch::Receiver<Vec<String>>, interval: Duration, origin: Instant) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
            let mut tick = tokio::time::interval(interval.max(Duration::from_millis(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut samples, mut errors) = (Vec::new(), 0);
            loop {
                tokio::select! {
                    _ = &mut stopped => return (samples, errors),
                    _ = tick.tick() => {}
                }
                let at_ms = origin.elapsed().as_secs_f64() * 1e3;
                let urls = pool.borrow().clone();
                match read_all(&client, &urls).await {
                    Some(mut sample) => {
                        sample.at_ms = at_ms;
                        samples.push(sample);
                    }
                    None => errors += 1,
                }
            }
        });
        Self { stop, task }
    }

    /// Stops and returns the samples and how many readings failed.
    pub(crate) async fn stop(self) -> (Vec<RankSample>, usize) {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// One sample of every worker in `urls`, in that order; `None` when one does not answer.
async fn read_all(client: &LoadsClient, urls: &[String]) -> Option<RankSample> {
    let reads =
        urls.iter().map(|u| read(client, format!("{}/v1/loads?include=core", u.trim_end_matches('/'))));
    let mut sample = RankSample::default();
    for (url, read) in urls.iter().zip(futures_util::future::join_all(reads).await) {
        let (running, tokens) = read?;
        sample.workers.push(WorkerSpan { url: url.as_str().into(), ranks: running.len() });
        sample.running.extend(running);
        sample.tokens.extend(tokens);
    }
    Some(sample)
}

type LoadsClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

async fn read(client: &LoadsClient, url: String) -> Option<(Vec<u32>, Vec<u64>)> {
    let uri: http::Uri = url.parse().ok()?;
    let resp = client.get(uri).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    parse_loads(&serde_json::from_slice(&body).ok()?)
}

/// `(running, used tokens)` per rank, in `dp_rank` order, from a `/v1/loads` body.
pub(crate) fn parse_loads(v: &Value) -> Option<(Vec<u32>, Vec<u64>)> {
    let mut ranks: Vec<(u64, u32, u64)> = v
        .get("loads")?
        .as_array()?
        .iter()
        .map(|l| {
            let n = |k: &str| l.get(k).and_then(Value::as_u64).unwrap_or(0);
            (n("dp_rank"), u32::try_from(n("num_running_reqs")).unwrap_or(u32::MAX), n("num_used_tokens"))
        })
        .collect();
    ranks.sort_by_key(|r| r.0);
    Some(ranks.into_iter().map(|(_, r, t)| (r, t)).unzip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(running: &[u32], tokens: &[u64]) -> RankSample {
        RankSample { at_ms: 0.0, running: running.to_vec(), tokens: tokens.to_vec(), workers: Vec::new() }
    }

    #[test]
    fn busiest_and_ratios_per_sample_then_percentiles() {
        let samples = [
            sample(&[8, 4, 4, 0], &[400, 100, 100, 200]), // busiest 8, mean 4 → 2.0; tokens 400/200
            sample(&[2, 2, 2, 2], &[100, 100, 100, 100]), // 1.0 and 1.0
            sample(&[0, 0, 0, 0], &[0, 0, 0, 0]),         // idle: busiest 0, no ratios
        ];
        let s = RankStats::of(&samples, None);
        assert_eq!(s.samples, 3);
        assert!((s.running_per_rank - 2.0).abs() < 1e-12, "(4 + 2 + 0) / 3");
        assert_eq!(s.busiest.p50, Some(2.0));
        assert!((s.busiest.p90.unwrap() - 6.8).abs() < 1e-9, "0, 2, 8 at rank 1.8");
        assert_eq!(s.requests_ratio.p50, Some(1.5));
        assert!((s.requests_ratio.p90.unwrap() - 1.9).abs() < 1e-9);
        assert_eq!(s.context_ratio.p50, Some(1.5));
        assert_eq!(s.step_ms_p50, None);
    }

    #[test]
    fn the_step_is_the_sims_model_at_each_samples_loads() {
        let p = TimingParams::default();
        let s = RankStats::of(&[sample(&[9, 1], &[0, 0]), sample(&[0, 0], &[0, 0])], Some(&p));
        assert!((s.step_ms_p50.unwrap() - 49.5).abs() < 1e-9, "idle samples have no step");
    }

    #[test]
    fn a_workers_mean_is_over_its_own_ranks() {
        let s = RankSample {
            running: vec![4, 2, 0, 0, 1],
            tokens: vec![0; 5],
            workers: vec![
                WorkerSpan { url: "http://a".into(), ranks: 2 },
                WorkerSpan { url: "http://b".into(), ranks: 3 },
            ],
            ..RankSample::default()
        };
        assert_eq!(s.worker_mean_running("http://a"), Some(3.0));
        assert!((s.worker_mean_running("http://b").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.worker_mean_running("http://c"), None);
        assert!((s.mean_running() - 1.4).abs() < 1e-12);
    }

    #[test]
    fn loads_are_read_in_rank_order() {
        let body = json!({"loads": [
            {"dp_rank": 1, "num_running_reqs": 3, "num_used_tokens": 30},
            {"dp_rank": 0, "num_running_reqs": 5, "num_used_tokens": 50},
        ]});
        assert_eq!(parse_loads(&body), Some((vec![5, 3], vec![50, 30])));
        assert_eq!(parse_loads(&json!({})), None);
    }
}
