//! End to end: 30 requests in the Mooncake format (made here: 3 per 3-second tick, all sharing
//! their first block, as the conversation trace does), open loop at a high speed-up, and the
//! built-in agentic trace closed loop (no `--trace`), each against an in-process sim worker on a
//! port-0 listener (bound before the run starts, so no waiting).

use clap::Parser;
use tokio::net::TcpListener;

use super::{ReplayArgs, replay};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

/// A Mooncake-format trace of `n` requests, deterministic.
fn mooncake_trace(n: u64) -> tempfile::NamedTempFile {
    let mut next_block = 1;
    let lines: Vec<String> = (0..n)
        .map(|i| {
            let input = 1_000 + (i * 7_919) % 7_000;
            let output = 100 + (i * 104_729) % 700;
            let blocks = input.div_ceil(512);
            let ids: Vec<u64> = std::iter::once(0)
                .chain((1..blocks).map(|_| {
                    next_block += 1;
                    next_block
                }))
                .collect();
            serde_json::json!({"timestamp": (i / 3) * 3_000, "input_length": input, "output_length": output, "hash_ids": ids})
                .to_string()
        })
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), lines.join("\n") + "\n").unwrap();
    file
}

/// A running sim: its base URL, its stop and its task.
type Sim = (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<anyhow::Result<()>>);

/// A sim worker serving model `m`.
async fn start_sim() -> Sim {
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = http.local_addr().unwrap();
    let port = addr.port().to_string();
    let argv = [
        "infera-sim",
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--model-path",
        "m",
        "--served-model-name",
        "m",
        "--disaggregation-mode",
        "null",
        "--sim-seed",
        "7",
        "--sim-speedup",
        "50",
    ];
    let config = infera_sim::SimConfig::try_from(infera_sim::SimArgs::try_parse_from(argv).unwrap()).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sim = tokio::spawn(infera_sim::run(infera_sim::Listeners { http, bootstrap: None }, config, async {
        let _ = stopped.await;
    }));
    (format!("http://{addr}"), stop, sim)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_a_mooncake_trace_against_a_sim() {
    let trace_file = mooncake_trace(30);
    let trace_path = trace_file.path().to_str().unwrap().to_owned();
    let (url, stop, sim) = start_sim().await;
    let cli = Cli::try_parse_from([
        "replay",
        "--trace",
        &trace_path,
        "--url",
        &url,
        "--speedup",
        "100",
        "--output-scale",
        "0.05",
        "--warmup-per-lane",
        "2",
        "--quiet",
    ])
    .unwrap();
    let report = replay(&cli.replay.plan().unwrap()).await.unwrap();
    assert_eq!((report.completed, report.failed, report.warmup), (28, 0, 2), "{report}");
    assert_eq!(report.mode, "open");
    // max_tokens = round(output × 0.05) for every measured request (the first two are warm-up).
    let trace = std::fs::read_to_string(trace_file.path()).unwrap();
    let asked: u64 = trace
        .lines()
        .skip(2)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["output_length"].as_f64().unwrap())
        .map(|o| (o * 0.05).round().max(1.0) as u64)
        .sum();
    assert_eq!(report.output_tokens, asked, "{report}");
    // Not ITL: under CPU load a request's tokens may all arrive in one chunk (no gaps).
    assert!(report.ttft_ms.p50.is_some(), "{report}");
    assert_eq!(report.json()["shaping"]["speedup"], 100.0);

    let _ = stop.send(());
    sim.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_trace_closed_loop_replays_the_builtin_agentic_sessions() {
    let (url, stop, sim) = start_sim().await;
    let cli = Cli::try_parse_from([
        "replay",
        "--url",
        &url,
        "--mode",
        "closed",
        "--concurrency",
        "2",
        "--max-requests",
        "6",
        "--think-time-scale",
        "0",
        "--output-scale",
        "0.02",
        "--quiet",
    ])
    .unwrap();
    let plan = cli.replay.plan().unwrap();
    assert_eq!(plan.trace.to_string(), "builtin:agentic");
    let report = replay(&plan).await.unwrap();
    assert_eq!((report.completed, report.failed), (6, 0), "{report}");
    assert_eq!((report.mode, report.trace.as_str()), ("closed", "builtin:agentic"));

    let _ = stop.send(());
    sim.await.unwrap().unwrap();
}
