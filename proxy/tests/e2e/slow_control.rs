//! Control slower than the pick deadline: every request is still served, from the last known
//! target list (counted as fallbacks); the picks control answers late are released at once, and
//! the ledger returns to exactly zero.
//!
//! Control itself is unchanged: a TCP relay between proxy and control holds every byte of
//! control's answers for a while, which is what a slow control looks like to the proxy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::harness::*;

/// A TCP relay to `upstream` that delays what upstream sends by an adjustable time (order and
/// bytes kept; the other direction passes at once). Stops relaying when dropped.
struct SlowLink {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl SlowLink {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        let accept = tokio::spawn(async move {
            // Dropped with the accept task: every connection's relay stops too.
            let mut links = JoinSet::new();
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = TcpStream::connect(upstream).await else { continue };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let ((down_r, down_w), (up_r, up_w)) = (down.into_split(), up.into_split());
                links.spawn(pass(down_r, up_w));
                links.spawn(delayed(up_r, down_w, delay.clone()));
            }
        });
        Self { addr, delay_ms, accept }
    }

    /// From now on, upstream's bytes arrive `delay` late.
    fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to` as it comes.
async fn pass(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf) {
    let _ = tokio::io::copy(&mut from, &mut to).await;
    let _ = to.shutdown().await;
}

/// Copies `from` to `to`, each chunk written `delay_ms` after it was read.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_ms: Arc<AtomicU64>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        let due = tokio::time::Instant::now() + Duration::from_millis(delay_ms.load(Ordering::SeqCst));
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// The sum of a proxy counter over its label sets.
async fn counter(proxy: &str, name: &str) -> f64 {
    let (_, metrics) = get(&format!("{proxy}/metrics")).await;
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_slower_than_the_pick_deadline_serves_by_fallback_and_releases_the_late_picks() {
    let cluster = Cluster::start(Shape { proxies: 0, ..Shape::default() }).await;
    let link = SlowLink::start(cluster.control_addr).await;
    let proxy_node = start_proxy(link.addr, &["--pick-timeout-ms", "200"]).await;
    wait_ready(&proxy_node).await;
    let proxy = proxy_node.url.clone();
    let chat_url = format!("{proxy}/v1/chat/completions");

    // While control is fast: poll until a request is booked by control (the proxy holds its
    // lease and no pick of it fell back).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let before = counter(&proxy, "infera_proxy_fallback_picks_total").await;
        let (status, text) = post_json(&chat_url, &chat(2, false), &[]).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        if counter(&proxy, "infera_proxy_fallback_picks_total").await == before {
            break;
        }
        assert!(Instant::now() < deadline, "no request was ever routed by control");
    }
    cluster.ledger_returns_to_zero().await;
    let fallback_before = counter(&proxy, "infera_proxy_fallback_picks_total").await;
    let late_before = counter(&proxy, "infera_proxy_late_picks_total").await;

    // Control's answers now come 600 ms late, three times the pick deadline: every pick falls
    // back, and every pick control booked is answered after the proxy stopped waiting.
    link.set_delay(Duration::from_millis(600));
    const N: usize = 6;
    let mut requests = Vec::new();
    for i in 0..N {
        let u = chat_url.clone();
        requests.push(tokio::spawn(async move { post_json(&u, &chat(3, i % 2 == 0), &[]).await }));
    }
    for r in requests {
        let (status, text) = r.await.unwrap();
        assert_eq!(status, StatusCode::OK, "served from the last target list: {text}");
    }
    let fallback = counter(&proxy, "infera_proxy_fallback_picks_total").await - fallback_before;
    assert_eq!(fallback, (2 * N) as f64, "both picks of every request routed locally");

    // The late answers arrive and are released: exactly one late pick per pick.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let late = counter(&proxy, "infera_proxy_late_picks_total").await - late_before;
        assert!(late <= (2 * N) as f64, "{late} late picks for {} picks", 2 * N);
        if late == (2 * N) as f64 {
            break;
        }
        assert!(Instant::now() < deadline, "only {late} of {} late picks released", 2 * N);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}
