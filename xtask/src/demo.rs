//! The main job on the embedded default: control on loopback with the static workers file,
//! driven the way a proxy and an operator drive it (grpcurl). It books one workload — a few
//! long requests, then many short ones — on the 8 decode ranks three times: legacy
//! round-robin (in shadow), token-only demand (on, W = 0), and W = 1,000,000, and prints each
//! rank's held requests and tokens.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{cargo, setup, status};

const MODEL: &str = "glm-5.2";
const LONG: (usize, u64) = (4, 100_000);
const SHORT: (usize, u64) = (40, 4_000);

struct Control {
    child: Child,
    grpc: String,
    metrics: String,
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let mut build = cargo(root);
    build.args(["build", "-q", "--locked", "-p", "infera-control"]);
    status(build)?;
    let workers = root.join("examples/local/workers.toml");
    let mut child = Command::new(root.join("target/debug/infera-control"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--seed", "1"])
        .args(["--decode-input-demand", "shadow", "--decode-policy", "round-robin", "--log", "warn"])
        .arg("--workers")
        .arg(&workers)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting infera-control")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let field = |k: &str| line.split(k).nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_owned);
    let (Some(grpc), Some(metrics)) = (field("grpc="), field("metrics=")) else {
        bail!("infera-control did not start: {line:?}");
    };
    let control = Control { child, grpc, metrics };
    let grpcurl = Grpcurl { bin: setup::grpcurl(root), addr: control.grpc.clone() };

    println!(
        "== infera-control on {} (metrics http://{}/metrics), workers from {}",
        control.grpc,
        control.metrics,
        workers.display()
    );
    println!("$ grpcurl -plaintext {} list", control.grpc);
    print!("{}", grpcurl.raw(&["list"])?);
    println!("$ grpcurl -plaintext {} infera.control.v1.Admin/GetConfig", control.grpc);
    println!("{}", grpcurl.call("Admin/GetConfig", json!({}))?);

    let workload =
        format!("{} requests of {} tokens, then {} of {} tokens", LONG.0, LONG.1, SHORT.0, SHORT.1);
    println!("\n== one proxy books the same workload three times: {workload}");
    phase(&grpcurl, "shadow, legacy round-robin selects", &[])?;
    println!("   shadow decisions: {}", shadow_counts(&control.metrics)?);
    phase(
        &grpcurl,
        "on, W = 0 (token-only demand)",
        &[("Admin/SetDecodeInputDemand", json!({"decode_input_demand": "DECODE_INPUT_DEMAND_ON"}))],
    )?;
    phase(
        &grpcurl,
        "on, W = 1,000,000",
        &[("Admin/SetDecodeRequestWeight", json!({"decode_request_weight": 1_000_000}))],
    )?;
    println!("\nToken-only demand sends every short request to the ranks without a long one; W balances the");
    println!("request count, which is what sets the step time of the busiest rank under DP attention.");
    Ok(())
}

/// Applies `changes`, books the workload under a fresh lease, prints the per-rank ledger,
/// closes the lease and checks the ledger is back to zero.
fn phase(g: &Grpcurl, title: &str, changes: &[(&str, Value)]) -> anyhow::Result<()> {
    for (method, body) in changes {
        g.call(method, body.clone())?;
    }
    let lease = g.call("Router/OpenLease", json!({"holder": "demo-proxy", "ttl_ms": 60_000}))?;
    let lease_id = lease["leaseId"].as_str().context("leaseId")?.to_owned();
    let mut n = 0;
    for (count, tokens) in [LONG, SHORT] {
        for _ in 0..count {
            n += 1;
            let req = json!({"lease_id": lease_id, "request_id": format!("demo-{n}"), "model": MODEL, "input_tokens": tokens});
            g.call("Router/PickDecode", req)?;
        }
    }
    let targets = g.call("Admin/ListTargets", json!({"model": MODEL, "role": "ROLE_DECODE"}))?;
    let rows: Vec<(u64, u64)> = targets["targets"]
        .as_array()
        .context("targets")?
        .iter()
        .map(|t| (num(&t["heldRequests"]), num(&t["bookedInputTokens"])))
        .collect();
    println!("\n-- {title}");
    println!("   rank       {}", (0..rows.len()).map(|r| format!("{r:>7}")).collect::<String>());
    println!("   requests   {}", rows.iter().map(|r| format!("{:>7}", r.0)).collect::<String>());
    println!("   k tokens   {}", rows.iter().map(|r| format!("{:>7}", r.1 / 1000)).collect::<String>());
    println!("   busiest rank holds {} requests", rows.iter().map(|r| r.0).max().unwrap_or(0));
    let closed = g.call("Router/CloseLease", json!({"lease_id": lease_id}))?;
    let after = g.call("Admin/ListReservations", json!({}))?;
    if after.get("reservations").is_some() {
        bail!("ledger not empty after closing the lease: {after}");
    }
    println!(
        "   closed the lease: {} reservations released, ledger back to zero",
        num(&closed["releasedReservations"])
    );
    Ok(())
}

fn num(v: &Value) -> u64 {
    // proto3 JSON: uint64 as a string, zero omitted.
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn shadow_counts(metrics: &str) -> anyhow::Result<String> {
    let mut s = std::net::TcpStream::connect(metrics)?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("infera_router_decode_shadow_decisions_total"))
        .map(|l| l.trim_start_matches("infera_router_decode_shadow_decisions_total"))
        .collect::<Vec<_>>()
        .join(", "))
}

struct Grpcurl {
    bin: std::path::PathBuf,
    addr: String,
}

impl Grpcurl {
    fn raw(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.bin).arg("-plaintext").arg(&self.addr).args(args).output()?;
        if !out.status.success() {
            bail!("grpcurl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    fn call(&self, method: &str, body: Value) -> anyhow::Result<Value> {
        let out = Command::new(&self.bin)
            .args(["-plaintext", "-d", &body.to_string(), &self.addr, &format!("infera.control.v1.{method}")])
            .output()?;
        if !out.status.success() {
            bail!("grpcurl {method} {body}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}
