//! SGLang's `GET /v1/loads` answer → one [`EngineLoad`] per DP rank. The shape is SGLang's
//! `LoadSnapshot.to_dict` (`python/sglang/srt/managers/load_snapshot.py` and
//! `entrypoints/v1_loads.py` in SGLang 0.5.23; the same fields since 0.5.18): `{"loads": [{
//! "dp_rank", "num_running_reqs", "num_waiting_reqs", "num_used_tokens",
//! "max_total_num_tokens", …, "disaggregation": {"decode_prealloc_queue_reqs", …}}]}`. A
//! field a version lacks reads as 0; a rank without `dp_rank` or a body that is not that
//! shape is an error.
//!
//! Each rank's `decode_moments` (`[steps, Σ batch, Σ step_us, Σ batch², Σ batch·step_us,
//! Σ generated]`, null before the first counted step) feed the fit of W ([`crate::fit`]); any
//! other shape of it reads as none.
//!
//! SGLang's `num_waiting_reqs` already counts the disaggregation queues that wait: a prefill's
//! bootstrap queue, a decode's prealloc, transfer and retracted queues
//! (`managers/scheduler_components/load_inquirer.py`, 0.5.18 and 0.5.23). Only a prefill's
//! in-flight queue (prefilled, sending its KV) is outside both the running batch and it.

use serde::Deserialize;

use crate::fit::Moments;

/// What one DP rank's engine reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineLoad {
    /// Requests in the running batch (decoding, or prefilling in chunks).
    pub running: u64,
    /// Requests waiting, as SGLang counts them: its waiting queue and the disaggregation
    /// queues below but the prefill's in-flight one.
    pub waiting: u64,
    /// Of `waiting`, on a PD decode: requests waiting for KV memory to be preallocated.
    pub prealloc_queue: u64,
    /// Of `waiting`, on a PD decode: requests whose KV is arriving.
    pub transfer_queue: u64,
    /// Of `waiting`, on a PD decode: requests retracted for lack of KV memory.
    pub retracted: u64,
    /// Of `waiting`, on a PD prefill: requests waiting for their decode's bootstrap.
    pub bootstrap_queue: u64,
    /// PD prefill: prefilled requests still sending their KV (not in `waiting`).
    pub inflight_queue: u64,
    /// KV tokens in use.
    pub used_tokens: u64,
    /// KV capacity in tokens (0 when the engine does not say).
    pub max_total_tokens: u64,
}

impl EngineLoad {
    /// Every request the rank holds in any state: running and in every queue.
    pub fn holding(&self) -> u64 {
        self.running + self.queued()
    }

    /// Requests the rank holds that are not in the running batch.
    pub fn queued(&self) -> u64 {
        self.waiting + self.inflight_queue
    }
}

/// A `/v1/loads` body that is not SGLang's shape.
#[derive(Debug, thiserror::Error)]
#[error("not a /v1/loads answer: {0}")]
pub struct LoadsError(#[from] serde_json::Error);

#[derive(Deserialize)]
struct Body {
    loads: Vec<Rank>,
}

#[derive(Deserialize)]
struct Rank {
    dp_rank: u32,
    /// Seconds since the epoch, a float; lenient (another shape is no clock, not a lost answer).
    #[serde(default, deserialize_with = "seconds")]
    timestamp: Option<f64>,
    #[serde(default)]
    num_running_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
    #[serde(default)]
    num_used_tokens: u64,
    #[serde(default)]
    max_total_num_tokens: u64,
    #[serde(default)]
    disaggregation: Option<Disaggregation>,
    #[serde(default, deserialize_with = "six_numbers")]
    decode_moments: Option<[f64; 6]>,
}

/// A rank's `timestamp`: a number of seconds, else none.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(serde_json::Value::deserialize(d)?.as_f64().filter(|s| s.is_finite() && *s >= 0.0))
}

/// `decode_moments` of any shape: six numbers, else none (a sample lost to the fit, not the
/// whole answer lost to the rank's readings).
fn six_numbers<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<[f64; 6]>, D::Error> {
    Ok(serde_json::from_value(serde_json::Value::deserialize(d)?).ok())
}

#[derive(Deserialize, Default)]
struct Disaggregation {
    #[serde(default)]
    prefill_bootstrap_queue_reqs: u64,
    #[serde(default)]
    prefill_inflight_queue_reqs: u64,
    #[serde(default)]
    decode_prealloc_queue_reqs: u64,
    #[serde(default)]
    decode_transfer_queue_reqs: u64,
    #[serde(default)]
    decode_retracted_queue_reqs: u64,
}

/// One rank of a `/v1/loads` answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankAnswer {
    /// The DP rank.
    pub rank: u32,
    /// Its counts.
    pub load: EngineLoad,
    /// Its decode step moments (`None`: null, missing or not six numbers).
    pub moments: Option<Moments>,
    /// Its scheduler's clock when it wrote the snapshot, in microseconds since the epoch.
    pub clock_micros: Option<u64>,
}

/// The ranks of a `/v1/loads` body.
///
/// # Errors
/// When the body is not SGLang's shape.
pub fn parse(body: &[u8]) -> Result<Vec<RankAnswer>, LoadsError> {
    let body: Body = serde_json::from_slice(body)?;
    Ok(body
        .loads
        .into_iter()
        .map(|r| {
            let moments = r.decode_moments.map(Moments);
            let d = r.disaggregation.unwrap_or_default();
            let load = EngineLoad {
                running: r.num_running_reqs,
                waiting: r.num_waiting_reqs,
                prealloc_queue: d.decode_prealloc_queue_reqs,
                transfer_queue: d.decode_transfer_queue_reqs,
                retracted: d.decode_retracted_queue_reqs,
                bootstrap_queue: d.prefill_bootstrap_queue_reqs,
                inflight_queue: d.prefill_inflight_queue_reqs,
                used_tokens: r.num_used_tokens,
                max_total_tokens: r.max_total_num_tokens,
            };
            let clock_micros = r.timestamp.map(|s| (s * 1e6) as u64);
            RankAnswer { rank: r.dp_rank, load, moments, clock_micros }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglangs_shape_reads_every_queue() {
        // As SGLang 0.5.23's /v1/loads answers for a PD decode (fields trimmed to those read,
        // plus a few it also sends): num_waiting_reqs 7 = 1 waiting + 2 prealloc + 3 transfer
        // + 1 retracted.
        let body = br#"{"timestamp":"2026-12-01T00:00:00+00:00","version":"0.5.23","accelerator":null,
            "num_accelerators":1,"loads":[
            {"timestamp":1.0,"dp_rank":0,"num_running_reqs":5,"num_waiting_reqs":7,"num_used_tokens":9000,
             "num_total_tokens":9100,"max_total_num_tokens":500000,"token_usage":0.02,"decode_moments":null,
             "disaggregation":{"mode":"decode","prefill_bootstrap_queue_reqs":0,"prefill_inflight_queue_reqs":0,
               "decode_prealloc_queue_reqs":2,"decode_transfer_queue_reqs":3,"decode_retracted_queue_reqs":1,
               "kv_transfer_speed_gb_s":0.0,"kv_transfer_latency_ms":0.0}},
            {"dp_rank":1,"num_running_reqs":0}]}"#;
        let ranks = parse(body).unwrap();
        assert_eq!(ranks.len(), 2);
        let RankAnswer { rank, load, moments, clock_micros } = ranks[0];
        assert_eq!((rank, moments, clock_micros), (0, None, Some(1_000_000)));
        assert_eq!(
            load,
            EngineLoad {
                running: 5,
                waiting: 7,
                prealloc_queue: 2,
                transfer_queue: 3,
                retracted: 1,
                bootstrap_queue: 0,
                inflight_queue: 0,
                used_tokens: 9000,
                max_total_tokens: 500_000,
            }
        );
        assert_eq!((load.queued(), load.holding()), (7, 12), "the queues are not counted twice");
        assert_eq!(
            ranks[1],
            RankAnswer { rank: 1, load: EngineLoad::default(), moments: None, clock_micros: None },
            "missing fields read as 0"
        );
    }

    #[test]
    fn a_prefill_counts_bootstrap_and_inflight() {
        // SGLang counts the bootstrap queue in num_waiting_reqs, not the in-flight one.
        let body = br#"{"loads":[{"dp_rank":0,"num_running_reqs":1,"num_waiting_reqs":5,"disaggregation":{"mode":"prefill",
            "prefill_bootstrap_queue_reqs":4,"prefill_inflight_queue_reqs":2}}]}"#;
        let load = parse(body).unwrap()[0].load;
        assert_eq!((load.bootstrap_queue, load.inflight_queue, load.holding()), (4, 2, 8));
    }

    #[test]
    fn decode_moments_are_six_sums() {
        let body = br#"{"loads":[{"dp_rank":0,"decode_moments":[3.0,18.0,120000.0,108.0,720000.0,65.0]},
            {"dp_rank":1,"decode_moments":[1.0,2.0]},{"dp_rank":2,"decode_moments":null},
            {"dp_rank":3,"decode_moments":[1,2,3,4,5,null]},{"dp_rank":4,"decode_moments":"x"}]}"#;
        let ranks = parse(body).unwrap();
        assert_eq!(ranks[0].moments, Some(Moments([3.0, 18.0, 120_000.0, 108.0, 720_000.0, 65.0])));
        assert_eq!((ranks[1].moments, ranks[2].moments), (None, None));
        assert_eq!((ranks[3].moments, ranks[4].moments), (None, None), "any other shape reads as none");
    }

    #[test]
    fn other_shapes_are_errors() {
        for bad in [
            &b"{}"[..],
            b"[]",
            b"not json",
            br#"{"loads":[{"num_running_reqs":1}]}"#,
            br#"{"loads":[{"dp_rank":-1}]}"#,
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
