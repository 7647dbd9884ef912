//! The main job on the embedded default: a 1P1D deployment on loopback, all real processes —
//! two emulated SGLang workers (`infera-sim`: a prefill, and a decode with 8 attention-DP
//! ranks), `infera-control` with a static workers file, and two `infera-proxy`s. It streams
//! one chat completion, shows the decode ledger while requests are in flight, checks it
//! returns to zero, prints where to send requests, and serves until Ctrl-C (`--once`: stop).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{cargo, setup, status};

const MODEL: &str = "glm-5.2";
const DECODE_RANKS: u32 = 8;

/// A child process, killed on drop.
struct Proc {
    name: &'static str,
    child: Child,
    line: String,
}

impl Proc {
    fn start(name: &'static str, mut cmd: Command) -> anyhow::Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .env("INFERA_LOG", "warn")
            .env("INFERA_SIM_LOG", "warn")
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        if !line.contains("listening") {
            bail!("{name} did not start: {line:?}");
        }
        Ok(Self { name, child, line })
    }

    fn addr(&self, key: &str) -> anyhow::Result<String> {
        self.line
            .split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_owned)
            .with_context(|| format!("{} printed no {key}: {:?}", self.name, self.line))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let once = args.iter().any(|a| a == "--once");
    let mut build = cargo(root);
    build.args(["build", "-q", "--locked", "-p", "infera-control", "-p", "infera-proxy", "-p", "infera-sim"]);
    status(build)?;
    let bin = |name: &str| root.join("target/debug").join(name);

    let sim = |mode: &str, dp: u32| {
        let mut c = Command::new(bin("infera-sim"));
        c.args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--model-path",
            "zai-org/GLM-5.2",
            "--served-model-name",
            MODEL,
        ])
        .args(["--disaggregation-mode", mode, "--disaggregation-bootstrap-port", "0"])
        .args([
            "--enable-dp-attention",
            "--dp-size",
            &dp.to_string(),
            "--page-size",
            "64",
            "--sim-seed",
            "1",
        ]);
        c
    };
    let prefill = Proc::start("prefill sim", sim("prefill", 1))?;
    let decode = Proc::start("decode sim", sim("decode", DECODE_RANKS))?;
    let (prefill_url, bootstrap) =
        (format!("http://{}", prefill.addr("http=")?), prefill.addr("bootstrap=")?);
    let bootstrap_port = bootstrap.rsplit(':').next().context("bootstrap address")?.to_owned();
    let decode_url = format!("http://{}", decode.addr("http=")?);
    let dir = root.join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let workers = dir.join("workers.toml");
    std::fs::write(
        &workers,
        format!(
            "# written by `cargo xtask demo`\n\
             [[workers]]\nid = \"prefill-0\"\nrole = \"prefill\"\nurl = \"{prefill_url}\"\nmodel = \"{MODEL}\"\nbootstrap_port = {bootstrap_port}\n\n\
             [[workers]]\nid = \"decode-0\"\nrole = \"decode\"\nurl = \"{decode_url}\"\nmodel = \"{MODEL}\"\ndp_size = {DECODE_RANKS}\n"
        ),
    )?;
    let mut c = Command::new(bin("infera-control"));
    c.args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--workers"]).arg(&workers);
    c.args(["--decode-input-demand", "on", "--decode-request-weight", "1000000"]);
    let control = Proc::start("infera-control", c)?;
    let grpc = control.addr("grpc=")?;
    let proxies = (0..2)
        .map(|_| {
            let mut c = Command::new(bin("infera-proxy"));
            c.args(["--listen", "127.0.0.1:0", "--control", &format!("http://{grpc}")]);
            Proc::start("infera-proxy", c)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let proxy_addrs = proxies.iter().map(|p| p.addr("http=")).collect::<anyhow::Result<Vec<_>>>()?;
    for p in &proxy_addrs {
        wait_ready(p)?;
    }

    println!("== a 1P1D deployment on loopback");
    println!("   prefill-0   {prefill_url} (bootstrap {bootstrap})   infera-sim");
    println!("   decode-0    {decode_url} ({DECODE_RANKS} attention-DP ranks)   infera-sim");
    println!(
        "   control     {grpc} (--decode-input-demand on --decode-request-weight 1000000), workers {}",
        workers.display()
    );
    for (i, p) in proxy_addrs.iter().enumerate() {
        println!("   proxy {i}     http://{p}");
    }

    println!("\n== one streamed chat completion through proxy 0");
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "What does PD disaggregation buy?"}], "max_tokens": 12, "stream": true});
    let answer = post(&proxy_addrs[0], "/v1/chat/completions", &body)?;
    let events: Vec<&str> = answer.lines().filter(|l| l.starts_with("data: ")).collect();
    for e in events.iter().take(3) {
        println!("   {e}");
    }
    println!("   … {} events in all, the last: {}", events.len(), events.last().unwrap_or(&""));

    println!("\n== the decode ledger with 24 streams in flight (Admin/ListTargets)");
    let grpcurl = setup::grpcurl(root);
    let streams: Vec<_> = (0..24)
        .map(|i| {
            let addr = proxy_addrs[i % 2].clone();
            let tokens = if i % 3 == 0 { 160 } else { 40 };
            std::thread::spawn(move || {
                let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "x ".repeat(200 * (i + 1))}], "max_tokens": tokens, "stream": true});
                post(&addr, "/v1/chat/completions", &body)
            })
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(10);
    while ledger(&grpcurl, &grpc)?.iter().map(|r| r.0).sum::<u64>() < 12 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    print_ledger(&grpcurl, &grpc)?;
    for s in streams {
        let text = s.join().map_err(|_| anyhow::anyhow!("a stream thread panicked"))??;
        if !text.contains("data: [DONE]") {
            bail!("a stream did not finish: {text}");
        }
    }
    let end = Instant::now() + Duration::from_secs(10);
    while ledger(&grpcurl, &grpc)?.iter().any(|r| r != &(0, 0)) {
        if Instant::now() > end {
            bail!("the ledger did not return to zero");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("   all 24 finished; every rank is back to 0 requests, 0 tokens");

    println!("\n== send requests to either proxy");
    println!("   curl http://{}/v1/chat/completions -H 'content-type: application/json' \\", proxy_addrs[0]);
    println!(
        "        -d '{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"stream\":true}}'"
    );
    println!("   OpenAI client: base_url=\"http://{}/v1\"", proxy_addrs[1]);
    println!("   operators:     {} -plaintext {grpc} infera.control.v1.Admin/ListTargets", grpcurl.display());
    if once {
        return Ok(());
    }
    println!("\nServing until Ctrl-C (or the end of standard input).");
    wait_for_ctrl_c();
    Ok(())
}

fn wait_for_ctrl_c() {
    // The children share our process group, so Ctrl-C reaches them too. A closed standard
    // input (a non-interactive run) ends the demo as well.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let _ = tx.send(());
    });
    let _ = rx.recv();
}

fn wait_ready(addr: &str) -> anyhow::Result<()> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if get(addr, "/readiness").is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
            && get(addr, "/v1/models").is_ok_and(|r| r.contains(MODEL))
        {
            return Ok(());
        }
        if Instant::now() > end {
            bail!("proxy {addr} did not become ready");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(addr: &str, path: &str) -> anyhow::Result<String> {
    exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"))
}

fn post(addr: &str, path: &str, body: &Value) -> anyhow::Result<String> {
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, &req)
}

fn exchange(addr: &str, request: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(request.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

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
