//! Attacks on the proxy's listener and its files: key files that do not parse, `/metrics` on the
//! public port, and floods of slow and silent sockets.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ::http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::target::chat_body;
use super::{Report, Scale, Target};
use crate::http::{self, metric_sum};
use crate::process::binary;

/// How long a flood's sockets may stay open past the proxy's 1 s header timeout (a loaded
/// 2-core machine accepts slowly).
const CLOSED_WITHIN: Duration = Duration::from_secs(20);

/// Runs `infera-proxy` against the deployment's control with `--api-keys` at `keys`: its exit
/// code (bounded wait) and stderr.
fn start_proxy_with_keys(t: &Target, keys: &std::path::Path) -> anyhow::Result<(Option<i32>, String)> {
    let mut child = Command::new(binary("infera-proxy")?)
        .args(["--listen", "127.0.0.1:0", "--control", &t.cluster.control.url(), "--api-keys"])
        .arg(keys)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait()? {
            break status.code();
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut stderr)?;
    }
    Ok((code, stderr))
}

/// A `[[keys]]` file with one missing quote, and a bare list of keys without the plain header:
/// a new proxy refuses to start (64); the running one, sent SIGHUP on the broken file, keeps the
/// keys in force, and the file's own lines are no keys.
pub(super) async fn broken_key_file(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "proxy-key-file-broken",
        "a [[keys]] file with one missing quote and a bare key list, to a new proxy and on SIGHUP to a running one; then `Bearer [[keys]]`",
    );
    let dir = tempfile::tempdir()?;
    let broken = dir.path().join("broken.toml");
    let broken_text = "[[keys]]\nname = \"alice\nsha256 = \"00\"\n";
    std::fs::write(&broken, broken_text)?;
    let bare = dir.path().join("bare.txt");
    std::fs::write(&bare, "sk-one\nsk-two\n")?;
    let (broken_exit, broken_err) = tokio::task::block_in_place(|| start_proxy_with_keys(t, &broken))?;
    let (bare_exit, _) = tokio::task::block_in_place(|| start_proxy_with_keys(t, &bare))?;
    r.expect(broken_exit == Some(64) && broken_err.contains("--api-keys"), || {
        format!("a broken key file: exit {broken_exit:?}, {broken_err}")
    });
    r.expect(bare_exit == Some(64), || format!("a bare key list: exit {bare_exit:?}"));

    // The running proxy reads the broken file on SIGHUP: it keeps its keys.
    let keys = t.keys_file();
    let good = std::fs::read_to_string(&keys)?;
    std::fs::write(&keys, broken_text)?;
    let proxy = t.proxy();
    let pid = proxy.node.pid().ok_or_else(|| anyhow::anyhow!("the proxy runs as no process"))?;
    let errors = |m: &str| metric_sum(m, "infera_proxy_api_key_reloads_total", "outcome=\"error\"");
    let before = errors(&proxy.metrics().await?);
    Command::new("kill").args(["-HUP", &pid.to_string()]).status()?;
    crate::eventually::poll(Duration::from_secs(10), "the proxy to read the broken key file", async || {
        (errors(&proxy.metrics().await.ok()?) > before).then_some(())
    })
    .await?;
    let lines = ["[[keys]]", "name = \"alice", "sk-one"];
    let mut line_codes = Vec::new();
    for line in lines {
        line_codes.push(t.chat(line, &chat_body("a file line as a key", 2, false)).await?.0);
    }
    let (alice, _) = t.chat(&t.alice, &chat_body("my key still works", 2, false)).await?;
    std::fs::write(&keys, good)?;
    Command::new("kill").args(["-HUP", &pid.to_string()]).status()?;
    r = r.answered(format!(
        "new proxy: exit {broken_exit:?} and {bare_exit:?}; after SIGHUP: file lines as keys {line_codes:?}, alice {alice}"
    ));
    r.expect(line_codes.iter().all(|c| *c == StatusCode::UNAUTHORIZED), || {
        format!("file lines as keys: {line_codes:?}")
    });
    r.expect(alice == StatusCode::OK, || format!("alice's key after the failed reload: {alice}"));
    Ok(r)
}

/// `/metrics` (key names and traffic) is not on the public port when it has its own.
pub(super) async fn metrics_apart(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r =
        Report::new("proxy-metrics-apart", "GET /metrics on the public API port, with and without a key");
    let url = format!("{}/metrics", t.proxy().url);
    let (open, _) = http::get(&url).await?;
    let auth = format!("Bearer {}", t.alice);
    let (keyed, body) =
        http::request_with(http::Method::GET, &url, None, &[("authorization", &auth)]).await?;
    let apart = t.proxy().metrics().await?;
    r = r.answered(format!(
        "{open} and {keyed} on the public port; the metrics port serves {} bytes",
        apart.len()
    ));
    r.expect(open == StatusCode::NOT_FOUND && keyed == StatusCode::NOT_FOUND, || {
        format!("public /metrics answered {open} / {keyed}: {body:.200}")
    });
    r.expect(!body.contains("infera_proxy_"), || "the public port served metrics".into());
    r.expect(apart.contains("infera_proxy_requests"), || "the metrics port serves no metrics".into());
    Ok(r)
}

/// Opens `n` connections to the proxy, each sending `first` (maybe nothing) and then nothing more;
/// returns how many the proxy closed within [`CLOSED_WITHIN`], the last close's time, and how many
/// could not even connect.
async fn flood(t: &Target, n: usize, first: &'static [u8]) -> anyhow::Result<(usize, Duration, usize)> {
    let addr = t.proxy().url.trim_start_matches("http://").to_owned();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(&addr).await else { return Err(()) };
            if !first.is_empty() && s.write_all(first).await.is_err() {
                return Ok(Some(start.elapsed()));
            }
            let mut buf = [0u8; 512];
            // Read until the proxy closes (EOF or reset), whatever it says first (a 408).
            loop {
                match tokio::time::timeout_at((start + CLOSED_WITHIN).into(), s.read(&mut buf)).await {
                    Err(_) => return Ok(None),
                    Ok(Ok(0) | Err(_)) => return Ok(Some(start.elapsed())),
                    Ok(Ok(_)) => {}
                }
            }
        }));
    }
    let (mut closed, mut last, mut refused) = (0, Duration::ZERO, 0);
    for task in tasks {
        match task.await? {
            Ok(Some(at)) => {
                closed += 1;
                last = last.max(at);
            }
            Ok(None) => {}
            Err(()) => refused += 1,
        }
    }
    Ok((closed, last, refused))
}

/// The file descriptors `pid` holds now.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Slack over a proxy's own descriptors (its control channels, its workers' connections).
const FD_SLACK: usize = 16;

async fn socket_flood(
    t: &Target,
    s: &Scale,
    case: &'static str,
    first: &'static [u8],
    what: &str,
) -> anyhow::Result<Report> {
    let mut r = Report::new(
        case,
        format!(
            "{} connections at once ({what}), then nothing (--max-connections {}, header timeout 1 s)",
            s.sockets, s.max_connections
        ),
    );
    let pid = t.proxy().node.pid().ok_or_else(|| anyhow::anyhow!("the proxy runs as no process"))?;
    let before = fds(pid);
    // What the proxy holds, sampled while the flood lasts: the sockets it accepted.
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut most = 0;
        loop {
            most = most.max(fds(pid));
            tokio::select! {
                _ = &mut stop_rx => return most,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    });
    let (closed, last, refused) = flood(t, s.sockets, first).await?;
    let _ = stop_tx.send(());
    let most = sampler.await?;
    let settled = crate::eventually::poll(
        Duration::from_secs(10),
        "the proxy to hold its own descriptors again",
        async || (fds(pid) <= before + FD_SLACK).then_some(()),
    )
    .await;
    let after = fds(pid);
    r = r.answered(format!(
        "the proxy held at most {} sockets over its {before} descriptors, {} after; clients saw {closed} closed by the proxy (the last after {:.1} s), {} never accepted by the kernel, {refused} refused",
        most.saturating_sub(before),
        after.saturating_sub(before),
        last.as_secs_f64(),
        s.sockets - closed - refused,
    ));
    r.expect(most <= before + s.max_connections + FD_SLACK, || {
        format!("the proxy held {most} descriptors (from {before})")
    });
    r.expect(settled.is_ok(), || format!("the proxy still holds {after} descriptors (from {before})"));
    Ok(r)
}

/// Slow-loris: half a request line each, never finished.
pub(super) async fn slow_loris(t: &Target, s: &Scale) -> anyhow::Result<Report> {
    socket_flood(
        t,
        s,
        "proxy-slow-loris",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le",
        "half a request head",
    )
    .await
}

/// Sockets that connect and never send a byte.
pub(super) async fn idle_sockets(t: &Target, s: &Scale) -> anyhow::Result<Report> {
    socket_flood(t, s, "proxy-idle-sockets", b"", "silent").await
}
