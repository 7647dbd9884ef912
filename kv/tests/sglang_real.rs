//! SGLang's real publisher (`python/sglang/srt/disaggregation/kv_events.py`, unmodified, loaded
//! without torch by `sglang_kv_publisher.py` next to this file) → our subscriber, for the
//! oldest and the newest supported release (tagged arrays / tagged maps; both replay formats).
//!
//! Every batch is decoded exactly (against the script's own description of it) and, where the
//! decoded form is lossless, re-encoded byte for byte as SGLang's msgspec wrote it. Gaps are
//! recovered from SGLang's real replay socket: the batches published before the subscriber
//! joined (caught up right after connecting), and one batch a forwarder between SGLang's PUB
//! socket and ours drops mid-stream (a gap).
//!
//! The venvs come from `cargo xtask setup`; `cargo xtask test` passes their Pythons as
//! `INFERA_SGLANG_<X_Y_Z>_PYTHON` (the launcher's conformance test reads the same variables).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use infera_kv::event::{EventBatch, KvEvent, Medium};
use infera_kv::subscribe::{EventKind, Subscriber, SubscriberConfig, SubscriberEvent};
use infera_kv::testing::SglangPublisher;
use infera_kv::wire::{Encoding, encode_batch};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::timeout;
use zeromq::{Socket as _, SocketRecv as _, SocketSend as _};

/// Generous: a loaded CI machine; SGLang's import takes ~1 s.
const WAIT: Duration = Duration::from_secs(30);
/// How long to wait for the subscriber before publishing the next probe (ZMQ slow joiner).
const PROBE: Duration = Duration::from_millis(100);

/// The batch the script says it published, as our decoder must see it.
fn expected(v: &Value) -> EventBatch {
    let medium = |m: &Value| m.as_str().map_or(Medium::Gpu, |m| Medium::from_wire(m).unwrap());
    let ints = |a: &Value| a.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>();
    let events = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "BlockStored" => KvEvent::BlockStored {
                block_hashes: ints(&e["block_hashes"]),
                parent_block_hash: e["parent_block_hash"].as_i64(),
                token_ids: e["token_ids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect(),
                block_size: e["block_size"].as_u64().unwrap() as u32,
                medium: medium(&e["medium"]),
                cache_salt: e["cache_salt"].as_str().map(str::to_owned),
                lora_name: e["lora_name"].as_str().map(str::to_owned),
            },
            "BlockRemoved" => {
                KvEvent::BlockRemoved { block_hashes: ints(&e["block_hashes"]), medium: medium(&e["medium"]) }
            }
            other => {
                assert_eq!(other, "AllBlocksCleared");
                KvEvent::AllBlocksCleared
            }
        })
        .collect();
    EventBatch {
        ts: v["ts"].as_f64().unwrap(),
        events,
        attn_dp_rank: v["attn_dp_rank"].as_u64().map(|r| r as u32),
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Seqs below this never pass the forwarder: the subscriber can only get them from replay,
/// however early the forwarder joined SGLang's PUB socket.
const UNSEEN: u64 = 3;

/// Relays SGLang's PUB stream to a PUB socket of ours, dropping seqs below [`UNSEEN`] and the
/// seq in `drop_seq`.
async fn forwarder(sglang_port: u16, topic: &str, drop_seq: Arc<AtomicU64>) -> u16 {
    let mut out = zeromq::PubSocket::new();
    let port = match out.bind("tcp://127.0.0.1:0").await.unwrap() {
        zeromq::Endpoint::Tcp(_, port) => port,
        other => panic!("{other}"),
    };
    let mut input = zeromq::SubSocket::new();
    input.subscribe(topic).await.unwrap();
    input.connect(&format!("tcp://127.0.0.1:{sglang_port}")).await.unwrap();
    tokio::spawn(async move {
        while let Ok(message) = input.recv().await {
            let seq =
                message.get(1).and_then(|s| <[u8; 8]>::try_from(s.as_ref()).ok()).map(u64::from_be_bytes);
            if seq.is_some_and(|s| s < UNSEEN || s == drop_seq.load(Ordering::SeqCst)) {
                continue;
            }
            if out.send(message).await.is_err() {
                break;
            }
        }
    });
    port
}

async fn real_sglang_events_arrive_exactly(version: &str) {
    let (mut sglang, hello) = SglangPublisher::start(version).await;
    let topic = hello["topic"].as_str().unwrap().to_owned();
    let rank = hello["rank"].as_u64().unwrap() as u32;
    let sglang_port = hello["port"].as_u64().unwrap() as u16;
    let replay_port = hello["replay_port"].as_u64().unwrap();
    let drop_seq = Arc::new(AtomicU64::new(u64::MAX));
    let port = forwarder(sglang_port, &topic, drop_seq.clone()).await;

    let mut published = Vec::new();
    // Never forwarded: only SGLang's replay buffer has these for the subscriber.
    for i in 0..UNSEEN {
        published.push(sglang.publish(i).await);
    }
    let mut config = SubscriberConfig::new("sglang", rank, format!("tcp://127.0.0.1:{port}"));
    config.replay_endpoint = Some(format!("tcp://127.0.0.1:{replay_port}"));
    config.topic = topic;
    config.backoff_initial = Duration::from_millis(10);
    let (tx, mut rx) = mpsc::channel::<SubscriberEvent>(1024);
    let sub = Subscriber::spawn(config, tx);
    // Probes through SGLang and the forwarder until the subscriber has joined.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut got = Vec::new();
    loop {
        published.push(sglang.publish(published.len() as u64).await);
        if let Ok(event) = timeout(PROBE, rx.recv()).await {
            got.push(event.unwrap().kind);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "SGLang {version}: the subscriber never joined");
    }
    // A batch the forwarder drops: the subscriber sees the gap at the next one.
    let dropped = published.len() as u64;
    drop_seq.store(dropped, Ordering::SeqCst);
    for _ in 0..2 {
        published.push(sglang.publish(published.len() as u64).await);
    }
    while got.len() < published.len() {
        let event = timeout(WAIT, rx.recv()).await.expect("all batches in time").unwrap();
        assert_eq!(event.rank, rank);
        got.push(event.kind);
    }

    let encoding = Encoding::for_sglang(version);
    for (seq, (answer, kind)) in published.iter().zip(&got).enumerate() {
        assert_eq!(answer["seq"], seq as u64, "SGLang numbers batches from 0");
        let EventKind::Batch { seq: got_seq, batch } = kind else {
            panic!("SGLang {version}: no reset expected, got {kind:?}")
        };
        assert_eq!(*got_seq, seq as u64, "SGLang {version}: in order, each once");
        assert_eq!(*batch, expected(&answer["expect"]), "SGLang {version}: batch {seq}");
        if answer["lossless"] == true {
            let ours = Bytes::from(encode_batch(batch, encoding).unwrap());
            assert_eq!(
                ours,
                unhex(answer["payload"].as_str().unwrap()),
                "SGLang {version}: batch {seq} bytes"
            );
        }
    }
    assert!(
        published.iter().any(|a| a["lossless"] == true) && published.iter().any(|a| a["lossless"] == false)
    );
    let adapter =
        published.iter().any(|a| a["lossless"] == true && a["expect"]["events"][0]["lora_name"] == "sql");
    assert_eq!(
        adapter,
        version == "0.5.23",
        "SGLang {version}: a lossless adapter's store (0.5.23's lora_name)"
    );
    let stats = sub.stats().snapshot();
    // The late join is caught up from SGLang's replay socket right after connecting; the dropped
    // batch is a gap, filled from it too. A probe published while the subscription was still
    // being set up can be lost as well (ZMQ's slow joiner): another gap, filled the same way.
    // Every gap costs a replay, and the catch-up one more (a reconnect check would add one).
    assert!(stats.gaps >= 1, "SGLang {version}: the dropped batch is a gap");
    assert!(stats.replays > stats.gaps, "SGLang {version}: the catch-up and a replay per gap: {stats:?}");
    assert_eq!((stats.resets, stats.malformed), (0, 0), "SGLang {version}");
    assert!(stats.replayed_batches >= 4, "SGLang {version}: seqs 0..3 and seq {dropped} came from replay");
    sub.stop().await;
    sglang.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_5_18_tagged_arrays_and_old_replay_frames() {
    real_sglang_events_arrive_exactly("0.5.18").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_5_23_tagged_maps_and_new_replay_frames() {
    real_sglang_events_arrive_exactly("0.5.23").await;
}
