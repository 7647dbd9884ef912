//! The sim's KV events: each DP rank publishes its prefix-cache changes in SGLang's format
//! (page hashes from `infera_kv::hash`), discoverable through `/server_info.kv_events`.
//! ZMQ ports are picked by the OS (`tcp://127.0.0.1:0`).

#[path = "../harness/mod.rs"]
mod harness;
mod load;

use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use harness::Sim;
use infera_kv::event::{EventBatch, KvEvent, Medium};
use infera_kv::hash::page_hashes;
use infera_kv::subscribe::{EventKind, Subscriber, SubscriberConfig, SubscriberEvent};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::timeout;
use zeromq::{Socket as _, SocketRecv as _};

const WAIT: Duration = Duration::from_secs(20);
/// How long to wait for a subscriber before probing again (ZMQ slow joiner).
const PROBE: Duration = Duration::from_millis(50);

fn kv_config(replay: bool) -> String {
    let mut c = json!({"publisher": "zmq", "endpoint": "tcp://127.0.0.1:0", "topic": "kv@sim"});
    if replay {
        c["replay_endpoint"] = json!("tcp://127.0.0.1:0");
    }
    c.to_string()
}

async fn next_batch(rx: &mut mpsc::Receiver<SubscriberEvent>) -> EventBatch {
    let event = timeout(WAIT, rx.recv()).await.expect("a batch in time").unwrap();
    match event.kind {
        EventKind::Batch { batch, .. } => batch,
        EventKind::Reset(why) => panic!("unexpected reset: {why}"),
    }
}

/// `/flush_cache` (which publishes `AllBlocksCleared` on every rank) until `rx` hears something;
/// then drains up to the last flush. Returns every batch received, in order.
async fn join_by_flushing(sim: &Sim, rx: &mut mpsc::Receiver<SubscriberEvent>) -> Vec<EventBatch> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut flushes = 1; // the start-up AllBlocksCleared
    let mut got = Vec::new();
    loop {
        assert_eq!(sim.post("/flush_cache", json!({})).await.0, 200);
        flushes += 1;
        if let Ok(event) = timeout(PROBE, rx.recv()).await {
            let EventKind::Batch { batch, .. } = event.unwrap().kind else { panic!("no reset expected") };
            got.push(batch);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the subscriber never joined");
    }
    while got.len() < flushes {
        got.push(next_batch(rx).await);
    }
    got
}

async fn generate(sim: &Sim, ids: &[u32], rank: u32) {
    let body = json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 1}, "routed_dp_rank": rank});
    let (status, answer) = sim.post("/generate", body).await;
    assert_eq!(status, 200, "{answer}");
}

fn stored(ids: &[u32], pages: usize) -> KvEvent {
    let hashes = page_hashes(ids, 4);
    KvEvent::BlockStored {
        block_hashes: hashes[..pages].iter().map(|h| h.0).collect(),
        parent_block_hash: None,
        token_ids: ids[..pages * 4].iter().map(|&t| u64::from(t)).collect(),
        block_size: 4,
        medium: Medium::Gpu,
        cache_salt: None,
        lora_name: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rank_publishes_its_stored_pages_and_their_eviction() {
    // Four pages of four tokens per rank.
    let mut params = tempfile::NamedTempFile::new().unwrap();
    writeln!(params, "prefix_cache_tokens = 16").unwrap();
    let config = kv_config(true);
    let sim = Sim::start(&[
        "--dp-size",
        "2",
        "--page-size",
        "4",
        "--sim-speedup",
        "100",
        "--sim-params",
        params.path().to_str().unwrap(),
        "--kv-events-config",
        &config,
    ])
    .await;
    let (_, info) = sim.get("/server_info").await;
    let kv = &info["kv_events"];
    let (port, replay) =
        (kv["endpoint_port_base"].as_u64().unwrap(), kv["replay_endpoint_port_base"].as_u64().unwrap());
    assert_eq!(
        *kv,
        json!({"publisher": "zmq", "endpoint_host": "127.0.0.1", "endpoint_port_base": port, "topic": "kv@sim",
               "block_size": 4, "dp_size": 2, "replay_endpoint_port_base": replay}),
        "the kv_events descriptor of SGLang 0.5.23's /server_info (manual/reference/sim.md)"
    );
    assert_eq!(info["kv_events_config"], config);

    // Follow rank 1 (PUB base + 1, replay base + 1).
    let mut sc = SubscriberConfig::new("sim", 1, format!("tcp://127.0.0.1:{}", port + 1));
    sc.replay_endpoint = Some(format!("tcp://127.0.0.1:{}", replay + 1));
    sc.topic = "kv@sim".into();
    sc.backoff_initial = Duration::from_millis(10);
    let (tx, mut rx) = mpsc::channel(256);
    let sub = Subscriber::spawn(sc, tx);
    let flushed = join_by_flushing(&sim, &mut rx).await;
    for b in &flushed {
        assert_eq!((b.events.as_slice(), b.attn_dp_rank), (&[KvEvent::AllBlocksCleared][..], Some(1)));
    }

    // Three prompts of two full pages and a partial one (which is not cached).
    let prompt = |salt: u32| (0..10).map(|i| salt * 1000 + i).collect::<Vec<u32>>();
    let (a, b, c) = (prompt(1), prompt(2), prompt(3));
    generate(&sim, &a, 1).await;
    assert_eq!(next_batch(&mut rx).await.events, [stored(&a, 2)], "hashes are SGLang's page hashes");
    generate(&sim, &b, 1).await;
    assert_eq!(next_batch(&mut rx).await.events, [stored(&b, 2)]);
    generate(&sim, &c, 1).await;
    let a_hashes = page_hashes(&a, 4);
    let removed =
        KvEvent::BlockRemoved { block_hashes: vec![a_hashes[1].0, a_hashes[0].0], medium: Medium::Gpu };
    assert_eq!(
        next_batch(&mut rx).await.events,
        [stored(&c, 2), removed],
        "the oldest path goes, leaf first"
    );
    // A prompt extending b: only its new page, chained on b's last page.
    let mut d = b[..8].to_vec();
    d.extend([7, 7, 7, 7]);
    generate(&sim, &d, 1).await;
    let d_hashes = page_hashes(&d, 4);
    let c_hashes = page_hashes(&c, 4);
    assert_eq!(
        next_batch(&mut rx).await.events,
        [
            KvEvent::BlockStored {
                block_hashes: vec![d_hashes[2].0],
                parent_block_hash: Some(d_hashes[1].0),
                token_ids: vec![7, 7, 7, 7],
                block_size: 4,
                medium: Medium::Gpu,
                cache_salt: None,
                lora_name: None,
            },
            KvEvent::BlockRemoved { block_hashes: vec![c_hashes[1].0], medium: Medium::Gpu },
        ]
    );
    assert_eq!(sim.post("/flush_cache", json!({})).await.0, 200);
    assert_eq!(next_batch(&mut rx).await.events, [KvEvent::AllBlocksCleared]);
    let stats = sub.stats().snapshot();
    assert_eq!((stats.resets, stats.malformed), (0, 0));
    sub.stop().await;
    sim.stop().await;
}

/// The first batch a raw SUB socket sees on `port` (probing with `/flush_cache`).
async fn first_payload(sim: &Sim, port: u64) -> Bytes {
    let mut sub = zeromq::SubSocket::new();
    sub.subscribe("kv@sim").await.unwrap();
    sub.connect(&format!("tcp://127.0.0.1:{port}")).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        assert_eq!(sim.post("/flush_cache", json!({})).await.0, 200);
        if let Ok(message) = timeout(PROBE, sub.recv()).await {
            let frames = message.unwrap().into_vec();
            assert_eq!(frames.len(), 3, "[topic, seq, payload]");
            assert_eq!(frames[0], "kv@sim");
            return frames[2].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "nothing published");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn encoding_and_descriptor_follow_the_emulated_version() {
    for (version, event_marker, replay_key) in
        [("0.5.18", 0x91u8, false), ("0.5.21", 0x81, false), ("0.5.22", 0x81, true)]
    {
        let config = kv_config(true);
        let sim = Sim::start(&["--sim-sglang-version", version, "--kv-events-config", &config]).await;
        let (_, info) = sim.get("/server_info").await;
        let kv = &info["kv_events"];
        assert_eq!(kv["dp_size"], 1);
        assert_eq!(kv.get("replay_endpoint_port_base").is_some(), replay_key, "{version}");
        let payload = first_payload(&sim, kv["endpoint_port_base"].as_u64().unwrap()).await;
        // [ts (float64), [event], rank]: the event is a tagged array (≤ 0.5.19) or map (≥ 0.5.20).
        assert_eq!(
            (payload[0], payload[1], payload[10], payload[11]),
            (0x93, 0xcb, 0x91, event_marker),
            "{version}"
        );
        sim.stop().await;
    }
    let sim = Sim::start(&["--kv-events-config", r#"{"publisher": "null"}"#]).await;
    assert_eq!(sim.get("/server_info").await.1["kv_events"], Value::Null);
    sim.stop().await;
}
