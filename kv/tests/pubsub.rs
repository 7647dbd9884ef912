//! Rust publisher → Rust subscriber over real ZMQ sockets on loopback (ports picked by the OS):
//! late join and forced gaps recovered by replay, gaps without (enough) replay reset, a
//! publisher that is not up yet or restarts, malformed messages counted.

use std::time::Duration;

use bytes::Bytes;
use infera_kv::event::{EventBatch, KvEvent, Medium};
use infera_kv::publish::{Publisher, PublisherConfig};
use infera_kv::subscribe::{
    EventKind, ReplayFailure, ResetReason, Subscriber, SubscriberConfig, SubscriberEvent,
};
use tokio::sync::mpsc;
use tokio::time::timeout;
use zeromq::{Socket as _, SocketSend as _, ZmqMessage};

/// How long any single expected event may take (generous: a loaded CI machine).
const WAIT: Duration = Duration::from_secs(20);
/// How long to wait for the subscriber before re-publishing a probe (ZMQ slow joiner).
const PROBE: Duration = Duration::from_millis(50);

fn batch(n: u64) -> EventBatch {
    let n64 = n as i64;
    EventBatch {
        ts: n as f64,
        events: vec![
            KvEvent::BlockStored {
                block_hashes: vec![n64, -n64 - 1],
                parent_block_hash: n.checked_sub(1).map(|p| p as i64),
                token_ids: vec![n, n + 1, n + 2, n + 3],
                block_size: 2,
                medium: Medium::Gpu,
                cache_salt: None,
                lora_name: None,
            },
            KvEvent::BlockRemoved { block_hashes: vec![n64], medium: Medium::CpuPinned },
        ],
        attn_dp_rank: Some(3),
    }
}

async fn publisher(replay: bool, buffer_steps: usize, version: &str) -> Publisher {
    let mut config = PublisherConfig::new("tcp://127.0.0.1:0").for_sglang(version);
    config.topic = "kv@w0".into();
    config.buffer_steps = buffer_steps;
    config.replay_endpoint = replay.then(|| "tcp://127.0.0.1:0".into());
    Publisher::bind(config).await.unwrap()
}

fn subscriber(p: &Publisher) -> (Subscriber, mpsc::Receiver<SubscriberEvent>) {
    let mut config = SubscriberConfig::new("w0", 3, format!("tcp://127.0.0.1:{}", p.port()));
    config.topic = "kv@w0".into();
    config.replay_endpoint = p.replay_port().map(|port| format!("tcp://127.0.0.1:{port}"));
    config.backoff_initial = Duration::from_millis(10);
    let (tx, rx) = mpsc::channel(1024);
    (Subscriber::spawn(config, tx), rx)
}

async fn next(rx: &mut mpsc::Receiver<SubscriberEvent>) -> EventKind {
    let event = timeout(WAIT, rx.recv()).await.expect("no event in time").expect("subscriber ended");
    assert_eq!((&*event.worker, event.rank), ("w0", 3));
    event.kind
}

/// Publishes probes (`batch(first)`, `batch(first + 1)`, …) until the subscriber delivers
/// something; returns everything received up to the batch of the last probe, and the number of
/// batches `p` has published.
async fn join(p: &Publisher, rx: &mut mpsc::Receiver<SubscriberEvent>, first: u64) -> (Vec<EventKind>, u64) {
    join_labelled(p, rx, first, first).await
}

/// [`join`] for a publisher whose next seq is `seq` while its batches are labelled from `label`.
async fn join_labelled(
    p: &Publisher,
    rx: &mut mpsc::Receiver<SubscriberEvent>,
    label: u64,
    seq: u64,
) -> (Vec<EventKind>, u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let (mut n, mut label) = (seq, label);
    let first_event = loop {
        p.publish_batch(batch(label)).unwrap();
        n += 1;
        label += 1;
        if let Ok(event) = timeout(PROBE, rx.recv()).await {
            break event.expect("subscriber ended").kind;
        }
        assert!(tokio::time::Instant::now() < deadline, "the subscriber never received a probe");
    };
    let mut got = vec![first_event];
    while !matches!(got.last(), Some(EventKind::Batch { seq, .. }) if *seq == n - 1) {
        got.push(next(rx).await);
    }
    (got, n)
}

fn batches(events: &[EventKind]) -> Vec<(u64, EventBatch)> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Batch { seq, batch } => Some((*seq, batch.clone())),
            EventKind::Reset(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn late_join_and_a_forced_gap_are_recovered_by_replay() {
    for version in ["0.5.18", "0.5.23"] {
        let p = publisher(true, 100, version).await;
        // Published before anyone listens: only the replay buffer has them.
        for n in 0..3 {
            p.publish_batch(batch(n)).unwrap();
        }
        let (sub, mut rx) = subscriber(&p);
        let (mut got, n) = join(&p, &mut rx, 3).await;
        // Seq n is kept for replay but never sent live; n + 1 is sent and reveals the gap.
        p.publish_replay_only(batch(n)).unwrap();
        p.publish_batch(batch(n + 1)).unwrap();
        while got.len() < n as usize + 2 {
            got.push(next(&mut rx).await);
        }
        let want: Vec<(u64, EventBatch)> = (0..n + 2).map(|s| (s, batch(s))).collect();
        assert_eq!(batches(&got), want, "{version}: every batch, in order, exactly once");
        assert!(got.iter().all(|e| matches!(e, EventKind::Batch { .. })), "{version}: no reset");
        let stats = sub.stats().snapshot();
        // The late join is caught up from replay right after connecting (not seen as a gap);
        // the forced gap is the one gap.
        assert_eq!((stats.gaps, stats.replays, stats.resets, stats.malformed), (1, 2, 0, 0), "{version}");
        assert_eq!((stats.batches, stats.events), (n + 2, 2 * (n + 2)));
        assert!(stats.replayed_batches >= 4, "seqs 0..3 and the forced gap");
        assert_eq!(p.stats().replays(), 2);
        sub.stop().await;
    }
}

#[tokio::test]
async fn a_gap_without_replay_resets_and_carries_on() {
    let p = publisher(false, 100, "0.5.23").await;
    let (sub, mut rx) = subscriber(&p);
    let (_, n) = join(&p, &mut rx, 0).await;
    let resets = sub.stats().snapshot().resets;
    p.publish_replay_only(batch(n)).unwrap();
    p.publish_batch(batch(n + 1)).unwrap();
    let why = ReplayFailure::NotConfigured;
    assert_eq!(next(&mut rx).await, EventKind::Reset(ResetReason::Missed { from: n, to: n + 1, why }));
    assert_eq!(next(&mut rx).await, EventKind::Batch { seq: n + 1, batch: batch(n + 1) });
    p.publish_batch(batch(n + 2)).unwrap();
    assert_eq!(next(&mut rx).await, EventKind::Batch { seq: n + 2, batch: batch(n + 2) });
    assert_eq!(sub.stats().snapshot().resets, resets + 1);
}

#[tokio::test]
async fn a_short_replay_buffer_resets_and_keeps_what_follows_the_hole() {
    let p = publisher(true, 2, "0.5.21").await;
    let (sub, mut rx) = subscriber(&p);
    let (_, n) = join(&p, &mut rx, 0).await;
    let resets = sub.stats().snapshot().resets;
    for s in n..n + 3 {
        p.publish_replay_only(batch(s)).unwrap();
    }
    p.publish_batch(batch(n + 3)).unwrap();
    // The buffer keeps the last two: seq n + 2 and the live n + 3.
    let why = ReplayFailure::Incomplete { first: Some(n + 2) };
    assert_eq!(next(&mut rx).await, EventKind::Reset(ResetReason::Missed { from: n, to: n + 3, why }));
    assert_eq!(next(&mut rx).await, EventKind::Batch { seq: n + 2, batch: batch(n + 2) });
    assert_eq!(next(&mut rx).await, EventKind::Batch { seq: n + 3, batch: batch(n + 3) });
    assert_eq!(sub.stats().snapshot().resets, resets + 1);
}

/// Two ports that were free at once a moment ago (the OS picks them; the caller binds them
/// again). Held together so that the OS cannot hand out the same port twice.
fn two_free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, b) = (bind(), bind());
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}

#[tokio::test]
async fn a_publisher_that_comes_up_late_or_restarts_is_followed() {
    let (port, replay_port) = two_free_ports();
    let config = || {
        let mut c = PublisherConfig::new(format!("tcp://127.0.0.1:{port}"));
        c.replay_endpoint = Some(format!("tcp://127.0.0.1:{replay_port}"));
        c
    };
    let mut sc = SubscriberConfig::new("w0", 3, format!("tcp://127.0.0.1:{port}"));
    sc.replay_endpoint = Some(format!("tcp://127.0.0.1:{replay_port}"));
    sc.backoff_initial = Duration::from_millis(10);
    sc.backoff_max = Duration::from_millis(200);
    let (tx, mut rx) = mpsc::channel(1024);
    let sub = Subscriber::spawn(sc, tx);
    // The subscriber is already retrying when the publisher binds.
    let deadline = tokio::time::Instant::now() + WAIT;
    while sub.stats().snapshot().connect_failures == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no connection attempt");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let p = Publisher::bind(config()).await.unwrap();
    let (_, n) = join(&p, &mut rx, 0).await;
    assert!(n >= 1);
    p.close().await;
    // A new publisher on the same ports counts from 0 again, with other batches.
    let p = Publisher::bind(config()).await.unwrap();
    let (got, m) = join_labelled(&p, &mut rx, 100, 0).await;
    let restarted =
        got.iter().position(|e| matches!(e, EventKind::Reset(ResetReason::PublisherRestarted { .. })));
    let restarted = restarted.unwrap_or_else(|| panic!("the restart is a reset: {got:?}"));
    let want: Vec<(u64, EventBatch)> = (0..m).map(|s| (s, batch(100 + s))).collect();
    assert_eq!(
        batches(&got[restarted..]),
        want,
        "the new publisher's batches from seq 0, replayed where missed"
    );
    sub.stop().await;
}

#[tokio::test]
async fn malformed_messages_are_counted_and_bad_payloads_reset() {
    let mut raw = zeromq::PubSocket::new();
    let port = match raw.bind("tcp://127.0.0.1:0").await.unwrap() {
        zeromq::Endpoint::Tcp(_, port) => port,
        other => panic!("{other}"),
    };
    let (tx, mut rx) = mpsc::channel(16);
    let mut sc = SubscriberConfig::new("w0", 3, format!("tcp://127.0.0.1:{port}"));
    sc.backoff_initial = Duration::from_millis(10);
    let sub = Subscriber::spawn(sc, tx);
    let frames = |seq: &[u8], payload: &[u8]| {
        ZmqMessage::try_from(vec![Bytes::new(), Bytes::copy_from_slice(seq), Bytes::copy_from_slice(payload)])
            .unwrap()
    };
    let good = infera_kv::wire::encode_batch(&batch(0), infera_kv::wire::Encoding::Maps).unwrap();
    // Slow joiner: seq 0 until it arrives.
    let deadline = tokio::time::Instant::now() + WAIT;
    let first = loop {
        raw.send(frames(&0u64.to_be_bytes(), &good)).await.unwrap();
        if let Ok(event) = timeout(PROBE, rx.recv()).await {
            break event.unwrap().kind;
        }
        assert!(tokio::time::Instant::now() < deadline, "never joined");
    };
    assert_eq!(first, EventKind::Batch { seq: 0, batch: batch(0) });
    raw.send(frames(&[1, 2, 3], &good)).await.unwrap();
    raw.send(ZmqMessage::from(Bytes::new())).await.unwrap();
    raw.send(frames(&1u64.to_be_bytes(), b"\x93\xc1\x90\x00")).await.unwrap();
    let EventKind::Reset(ResetReason::Undecodable { seq: 1, error }) = next(&mut rx).await else {
        panic!("an undecodable batch resets")
    };
    assert!(error.to_string().contains("float"), "{error}");
    raw.send(frames(&2u64.to_be_bytes(), &good)).await.unwrap();
    assert_eq!(next(&mut rx).await, EventKind::Batch { seq: 2, batch: batch(0) });
    let stats = sub.stats().snapshot();
    assert_eq!((stats.malformed, stats.resets, stats.gaps), (3, 1, 0));
    drop(sub);
    // Dropping the handle stops the task: the channel closes.
    assert!(timeout(WAIT, rx.recv()).await.unwrap().is_none());
}
