//! The main job on the embedded default (`cargo xtask demo`): a 1P1D deployment on loopback,
//! all real processes started with the test kit — two emulated SGLang workers (`infera-sim`: a
//! prefill, and a decode with 8 attention-DP ranks), `infera-control` with a static workers
//! file, and two `infera-proxy`s. It streams one chat completion, shows the decode ledger while
//! requests are in flight, checks it returns to zero, prints where to send requests, and serves
//! until Ctrl-C or the end of standard input (`--once`: stop at once).
//!
//! `INFERA_BIN_DIR` names the binaries (`cargo xtask demo` builds them), `INFERA_GRPCURL` the
//! grpcurl that shows the ledger as an operator would see it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use infera_testkit::http::post_json;
use infera_testkit::{ClusterSpec, ControlSpec, SimSpec, Workers, poll};
use serde_json::{Value, json};

const MODEL: &str = "glm-5.2";
const DECODE_RANKS: u32 = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let once = std::env::args().any(|a| a == "--once");
    let grpcurl =
        PathBuf::from(std::env::var_os("INFERA_GRPCURL").context("INFERA_GRPCURL (run `cargo xtask demo`)")?);
    let sim = |s: SimSpec| s.model_path("zai-org/GLM-5.2").page_size(64).seed(1);
    let sims = vec![
        sim(SimSpec::prefill("prefill-0", MODEL)),
        sim(SimSpec::decode("decode-0", MODEL, DECODE_RANKS)),
    ];
    let mut spec = ClusterSpec::new(MODEL, sims);
    let control_flags = ["--decode-input-demand", "on", "--decode-request-weight", "1000000"];
    spec.control = ControlSpec::new(Workers::None).flags(control_flags);
    spec.control.seed = None;
    spec.processes = true;
    let cluster = spec.start().await?;
    let grpc = cluster.control.addr.to_string();
    let proxies = cluster.proxy_urls();

    println!("== a 1P1D deployment on loopback");
    let (prefill, decode) = (cluster.sim("prefill-0"), cluster.sim("decode-0"));
    let bootstrap = prefill.bootstrap.context("the prefill's bootstrap address")?;
    println!("   prefill-0   {} (bootstrap {bootstrap})   infera-sim", prefill.url);
    println!("   decode-0    {} ({DECODE_RANKS} attention-DP ranks)   infera-sim", decode.url);
    let file = cluster.control.workers_file().map(|p| p.display().to_string()).unwrap_or_default();
    println!("   control     {grpc} ({}), workers {file}", control_flags.join(" "));
    for (i, p) in proxies.iter().enumerate() {
        println!("   proxy {i}     {p}");
    }

    println!("\n== one streamed chat completion through proxy 0");
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "What does PD disaggregation buy?"}], "max_tokens": 12, "stream": true});
    let (status, answer) = post_json(&format!("{}/v1/chat/completions", proxies[0]), &body).await?;
    anyhow::ensure!(status.is_success(), "{status}: {answer}");
    let events: Vec<&str> = answer.lines().filter(|l| l.starts_with("data: ")).collect();
    for e in events.iter().take(3) {
        println!("   {e}");
    }
    println!("   … {} events in all, the last: {}", events.len(), events.last().unwrap_or(&""));

    println!("\n== the decode ledger with 24 streams in flight (Admin/ListTargets)");
    let streams: Vec<_> = (0..24)
        .map(|i| {
            let url = format!("{}/v1/chat/completions", proxies[i % 2]);
            let tokens = if i % 3 == 0 { 160 } else { 40 };
            let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "x ".repeat(200 * (i + 1))}], "max_tokens": tokens, "stream": true});
            tokio::spawn(async move { post_json(&url, &body).await })
        })
        .collect();
    let in_flight = poll(Duration::from_secs(10), "12 streams in flight", async || {
        ledger(&grpcurl, &grpc).is_ok_and(|rows| rows.iter().map(|r| r.0).sum::<u64>() >= 12)
    })
    .await;
    if in_flight.is_err() {
        println!("   (fewer than 12 streams were in flight at once)");
    }
    print_ledger(&grpcurl, &grpc)?;
    for s in streams {
        let (_, text) = s.await??;
        if !text.contains("data: [DONE]") {
            bail!("a stream did not finish: {text}");
        }
    }
    poll(Duration::from_secs(10), "the ledger to return to zero", async || {
        ledger(&grpcurl, &grpc).is_ok_and(|rows| rows.iter().all(|r| r == &(0, 0)))
    })
    .await?;
    println!("   all 24 finished; every rank is back to 0 requests, 0 tokens");

    println!("\n== send requests to either proxy");
    println!("   curl {}/v1/chat/completions -H 'content-type: application/json' \\", proxies[0]);
    println!(
        "        -d '{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"stream\":true}}'"
    );
    println!("   OpenAI client: base_url=\"{}/v1\"", proxies[1]);
    println!("   operators:     {} -plaintext {grpc} infera.control.v1.Admin/ListTargets", grpcurl.display());
    if !once {
        println!("\nServing until Ctrl-C (or the end of standard input).");
        // A plain thread: a runtime's blocking task would hold its shutdown until input came.
        let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            let _ = closed.send(());
        });
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = stdin_closed => {}
        }
    }
    cluster.stop().await
}

/// (held requests, booked tokens) per decode rank, as grpcurl shows them.
fn ledger(grpcurl: &PathBuf, grpc: &str) -> anyhow::Result<Vec<(u64, u64)>> {
    let out = Command::new(grpcurl)
        .args(["-plaintext", "-d", r#"{"role":"ROLE_DECODE"}"#, grpc, "infera.control.v1.Admin/ListTargets"])
        .output()?;
    if !out.status.success() {
        bail!("grpcurl: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Value = serde_json::from_slice(&out.stdout)?;
    let num = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0u64);
    Ok(v["targets"].as_array().map_or_else(Vec::new, |t| {
        t.iter().map(|r| (num(&r["heldRequests"]), num(&r["bookedInputTokens"]))).collect()
    }))
}

fn print_ledger(grpcurl: &PathBuf, grpc: &str) -> anyhow::Result<()> {
    let rows = ledger(grpcurl, grpc)?;
    println!("   rank       {}", (0..rows.len()).map(|r| format!("{r:>7}")).collect::<String>());
    println!("   requests   {}", rows.iter().map(|r| format!("{:>7}", r.0)).collect::<String>());
    println!("   tokens     {}", rows.iter().map(|r| format!("{:>7}", r.1)).collect::<String>());
    Ok(())
}
