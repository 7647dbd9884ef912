//! The timing model end to end: time compression, prefix-cache hits, lockstep pacing.
//! Modeled durations are lower bounds on wall time (sleeps never end early), so each test
//! asserts a lower bound on the slow side and a wide ratio on the fast side.

#[path = "../harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use harness::{Events, Next, Sim};

/// A `--sim-params` file; kept alive by the caller.
fn params(toml: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), toml).unwrap();
    file
}

/// Wall time of a whole `/generate`, and its body.
async fn timed(sim: &Sim, body: Value) -> (Duration, Value) {
    let started = Instant::now();
    let (status, body) = sim.post("/generate", body).await;
    assert_eq!(status, 200, "{body}");
    (started.elapsed(), body)
}

#[tokio::test(flavor = "multi_thread")]
async fn speedup_compresses_every_duration() {
    let real = Sim::start(&[]).await;
    let fast = Sim::start(&["--sim-speedup", "50"]).await;
    let body = json!({"text": "x", "sampling_params": {"max_new_tokens": 40}});
    // 1 + 11 steps × 3.61 ≥ 40 tokens; each step ≥ 32.75 ms of model time.
    let (slow, _) = timed(&real, body.clone()).await;
    assert!(slow >= Duration::from_millis(11 * 32), "{slow:?}");
    // The request log's engine time covers the modeled steps and fits inside the client's wait.
    let mut engine_ms = None;
    harness::eventually("the request's end is logged", async || {
        engine_ms = real.requests().await.last().and_then(|e| e["engine_ms"].as_f64());
        engine_ms.is_some()
    })
    .await;
    let engine_ms = engine_ms.unwrap();
    assert!(engine_ms >= 11.0 * 32.0 && engine_ms <= slow.as_secs_f64() * 1e3, "{engine_ms} ms of {slow:?}");
    let (quick, out) = timed(&fast, body).await;
    assert_eq!(out["meta_info"]["completion_tokens"], 40);
    assert!(quick < slow / 5, "{quick:?} vs {slow:?}");
    real.stop().await;
    fast.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prefix_cache_hit_shortens_time_to_first_token() {
    // 2,000 new tokens at 0.5 ms each: a cold prefill takes over a second of model time.
    let file = params("prefill_ms_per_token = 0.5\n");
    let sim = Sim::start(&["--sim-speedup", "10", "--sim-params", file.path().to_str().unwrap()]).await;
    let prompt = "abcd".repeat(2000);
    let body = json!({"text": prompt, "sampling_params": {"max_new_tokens": 1}, "stream": true});
    let ttft = |body: Value| {
        let addr = sim.http;
        async move {
            let started = Instant::now();
            let mut events = Events::open(addr, "/generate", body).await;
            let first = events.data().await;
            let elapsed = started.elapsed();
            assert!(matches!(events.rest().await.1, Next::End));
            (elapsed, first["meta_info"]["cached_tokens"].as_u64().unwrap())
        }
    };
    let (cold, cold_cached) = ttft(body.clone()).await;
    let (warm, warm_cached) = ttft(body).await;
    assert_eq!((cold_cached, warm_cached), (0, 1999));
    assert!(cold >= Duration::from_millis(100), "{cold:?}");
    assert!(warm < cold / 2, "warm {warm:?} vs cold {cold:?}");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_busiest_rank_paces_every_rank() {
    let idle = Sim::start(&["--dp-size", "2", "--sim-speedup", "2"]).await;
    let busy = Sim::start(&["--dp-size", "2", "--sim-speedup", "2"]).await;
    // Ten requests hold rank 0 of `busy` for the whole measurement.
    let mut held = Vec::new();
    for _ in 0..10 {
        let body = json!({"text": "x", "routed_dp_rank": 0, "stream": true, "sampling_params": {"max_new_tokens": 100000}});
        let mut events = Events::open(busy.http, "/generate", body).await;
        events.data().await;
        held.push(events);
    }
    let probe = json!({"text": "x", "routed_dp_rank": 1, "sampling_params": {"max_new_tokens": 73}});
    // 20 steps: idle ≥ 20 × 32.75 ms, busy ≥ 20 × 55.4 ms of model time (x = 10 requests).
    let (fast, _) = timed(&idle, probe.clone()).await;
    let (slow, _) = timed(&busy, probe).await;
    assert!(slow >= Duration::from_millis(20 * 55 / 2), "{slow:?}");
    assert!(slow > fast + Duration::from_millis(100), "busy {slow:?} vs idle {fast:?}");
    for events in held {
        events.hang_up();
    }
    idle.stop().await;
    busy.stop().await;
}
