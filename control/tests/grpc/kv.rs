//! KV-aware prefill over real ZMQ: workers' publishers (infera_kv's, in SGLang's framing) feed
//! control's index; PickPrefill credits the overlap and shows it per candidate; a missed batch is
//! recovered from the replay socket; a reset clears only its target.

use std::time::Duration;

use infera_kv::event::{KvEvent, Medium};
use infera_kv::hash::page_hashes;
use infera_kv::publish::{Publisher, PublisherConfig};
use infera_proto::pb::{self, ReleaseReason};

use crate::harness::*;

const PS: usize = 16;

async fn publisher() -> Publisher {
    let mut config = PublisherConfig::new("tcp://127.0.0.1:0");
    config.replay_endpoint = Some("tcp://127.0.0.1:0".into());
    Publisher::bind(config).await.unwrap()
}

fn worker(id: &str, p: &Publisher) -> String {
    format!(
        "[[workers]]\nid = '{id}'\nrole = 'prefill'\nurl = 'http://127.0.0.1:30000'\nmodel = 'm'\ndp_size = 1\npage_size = {PS}\n\
         kv_events = {{ endpoint = 'tcp://127.0.0.1:{}', replay_endpoint = 'tcp://127.0.0.1:{}' }}\n",
        p.port(),
        p.replay_port().unwrap()
    )
}

/// `BlockStored` for pages `from..to` of `prompt`, chained on page `from - 1`, with SGLang's hashes.
fn stored(prompt: &[u32], from: usize, to: usize) -> KvEvent {
    let engine = page_hashes(prompt, PS);
    KvEvent::BlockStored {
        block_hashes: engine[from..to].iter().map(|h| h.0).collect(),
        parent_block_hash: from.checked_sub(1).map(|p| engine[p].0),
        token_ids: prompt[from * PS..to * PS].iter().map(|&t| u64::from(t)).collect(),
        block_size: PS as u32,
        medium: Medium::Gpu,
        cache_salt: None,
        lora_name: None,
    }
}

fn kv_pick(lease: &str, prompt: &[u32]) -> pb::PickRequest {
    let mut req = pick(lease, "m", prompt.len() as u64);
    req.fixed_page_hashes = page_hashes(prompt, PS).iter().map(|h| h.0).collect();
    req.page_size = PS as u32;
    req
}

/// Picks (and releases) until the chosen candidate's overlap is `pages`; returns that answer.
async fn until_overlap(control: &Control, lease: &str, prompt: &[u32], pages: u32) -> pb::PickResponse {
    let mut router = control.router().await;
    eventually(Duration::from_secs(10), &format!("a prefill pick to see {pages} pages"), async || {
        let p = router.pick_prefill(kv_pick(lease, prompt)).await.unwrap().into_inner();
        router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
        (p.cost.as_ref().unwrap().overlap_pages == pages).then_some(p)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_picks_follow_the_kv_events_of_each_worker() {
    let (a, b) = (publisher().await, publisher().await);
    let control = Control::start(&(worker("prefill-a", &a) + &worker("prefill-b", &b)), &[]).await;
    let lease = control.lease(0).await;
    let prompt: Vec<u32> = (0..(12 * PS) as u32).map(|t| t * 7 + 1).collect();

    // b stores 10 pages (published before control's subscriber joined: recovered by replay).
    b.publish(vec![KvEvent::AllBlocksCleared, stored(&prompt, 0, 10)]).unwrap();
    let p = until_overlap(&control, &lease, &prompt, 10).await;
    assert_eq!(target_of(&p), ("prefill-b".to_owned(), 0));
    assert_eq!(p.cost.as_ref().unwrap().cached_tokens, 160);

    // The decision event shows every candidate's overlap.
    let mut admin = control.admin().await;
    let req = pb::WatchDecisionsRequest { kind: pb::PickKind::Prefill as i32, model: "m".into() };
    let mut decisions = admin.watch_decisions(req).await.unwrap().into_inner();
    let mut router = control.router().await;
    let p = router.pick_prefill(kv_pick(&lease, &prompt)).await.unwrap().into_inner();
    let d = decisions.message().await.unwrap().unwrap();
    let overlaps: Vec<(String, u32, u64)> = d
        .candidates
        .iter()
        .map(|c| (c.target.as_ref().unwrap().worker_id.clone(), c.overlap_pages, c.cached_tokens))
        .collect();
    assert_eq!(overlaps, vec![("prefill-a".into(), 0, 0), ("prefill-b".into(), 10, 160)]);
    router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();

    // A client built before `fixed_page_hashes` sends the varint field: the same pick.
    let mut old = kv_pick(&lease, &prompt);
    old.page_hashes = std::mem::take(&mut old.fixed_page_hashes);
    let p = router.pick_prefill(old).await.unwrap().into_inner();
    assert_eq!(p.cost.as_ref().unwrap().overlap_pages, 10);
    router.release(release(&p.reservation_id, ReleaseReason::Eof)).await.unwrap();
    // Both at once is refused, naming the field.
    let mut both = kv_pick(&lease, &prompt);
    both.page_hashes = both.fixed_page_hashes.clone();
    let e = router.pick_prefill(both).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("page_hashes"), "{}", e.message());

    // A batch that never goes out live: the next one reveals the gap, replay fills it.
    b.publish_replay_only(infera_kv::event::EventBatch {
        ts: 0.0,
        events: vec![stored(&prompt, 10, 11)],
        attn_dp_rank: None,
    })
    .unwrap();
    b.publish(vec![stored(&prompt, 11, 12)]).unwrap();
    until_overlap(&control, &lease, &prompt, 12).await;

    // Eviction on b, a cache on a: a now holds more of the prompt.
    a.publish(vec![KvEvent::AllBlocksCleared, stored(&prompt, 0, 4)]).unwrap();
    let engine = page_hashes(&prompt, PS);
    b.publish(vec![KvEvent::BlockRemoved {
        block_hashes: engine[2..].iter().map(|h| h.0).collect(),
        medium: Medium::Gpu,
    }])
    .unwrap();
    let p = until_overlap(&control, &lease, &prompt, 4).await;
    assert_eq!(target_of(&p), ("prefill-a".to_owned(), 0));

    // The feed's counters reach the metrics once a second.
    eventually(Duration::from_secs(10), "the KV metrics show the replay and the index", || async {
        let m = control.metrics().await;
        sample(&m, "infera_kv_replays_total{worker=\"prefill-b\",rank=\"0\"}").unwrap_or(0.0) >= 1.0
            && sample(&m, "infera_kv_subscribers") == Some(2.0)
            && sample(&m, "infera_kv_index_blocks") == Some(6.0) // a: 4, b: 2
            && sample(&m, "infera_kv_index_rehashed_blocks") == Some(0.0) // SGLang's own hashes
            && sample(&m, "infera_kv_blocks_total{outcome=\"removed\"}") == Some(10.0)
    })
    .await;
    control.stop().await;
    a.close().await;
    b.close().await;
}

/// SGLang's own publisher (its `kv_events.py`, run by the venv of `version`) feeds control: the
/// events published before control subscribed come back through SGLang's replay socket (a late
/// join is a gap from seq 0), and the overlap is exactly the pages stored minus those removed.
async fn real_sglang_events_feed_control(version: &str) {
    let (mut sglang, hello) = infera_kv::testing::SglangPublisher::start(version).await;
    let (rank, port, replay) = (
        hello["rank"].as_u64().unwrap(),
        hello["port"].as_u64().unwrap(),
        hello["replay_port"].as_u64().unwrap(),
    );
    let prompt: Vec<u32> = (0..(8 * PS) as u32).map(|t| 100_000 + t * 13).collect();
    let hashes = page_hashes(&prompt, PS);
    let events = serde_json::json!([
        {"type": "AllBlocksCleared"},
        {"type": "BlockStored", "block_hashes": hashes.iter().map(|h| h.0).collect::<Vec<_>>(),
         "parent_block_hash": null, "token_ids": prompt, "block_size": PS, "medium": "GPU"},
    ]);
    assert_eq!(sglang.publish_events(&events).await["seq"], 0);

    // The record names rank 0's ports, as SGLang's /server_info does; the script's rank is `rank`.
    let workers = format!(
        "[[workers]]\nid = 'sglang'\nrole = 'prefill'\nurl = 'http://127.0.0.1:30000'\nmodel = 'm'\npage_size = {PS}\n\
         dp_size = {}\nkv_events = {{ endpoint = 'tcp://127.0.0.1:{}', replay_endpoint = 'tcp://127.0.0.1:{}', topic = '{}' }}\n",
        rank + 1,
        port - rank,
        replay - rank,
        hello["topic"].as_str().unwrap()
    );
    let control = Control::start(&workers, &[]).await;
    let lease = control.lease(0).await;
    let p = until_overlap(&control, &lease, &prompt, 8).await;
    assert_eq!(target_of(&p), ("sglang".to_owned(), rank as u32));

    let removed = serde_json::json!([
        {"type": "BlockRemoved", "block_hashes": hashes[5..].iter().map(|h| h.0).collect::<Vec<_>>(), "medium": "GPU"},
    ]);
    assert_eq!(sglang.publish_events(&removed).await["seq"], 1);
    let p = until_overlap(&control, &lease, &prompt, 5).await;
    assert_eq!(p.cost.as_ref().unwrap().cached_tokens, 5 * PS as u64);
    control.stop().await;
    sglang.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_sglang_0_5_18_events_feed_control() {
    real_sglang_events_feed_control("0.5.18").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_sglang_0_5_23_events_feed_control() {
    real_sglang_events_feed_control("0.5.23").await;
}

/// A worker whose etcd lease ends takes its KV state with it: its subscriber stops and the index
/// holds nothing of it any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_leaves_takes_its_index_with_it() {
    use infera_proto::types::{KvEventsSource, Role, WorkerRecord};
    let etcd = infera_testkit::EtcdServer::start();
    let url = etcd.url();
    let p = publisher().await;
    let record = WorkerRecord::new("prefill-a", Role::Prefill, "http://stub", "m")
        .with_page_size(PS as u32)
        .with_kv_events(KvEventsSource {
            endpoint: format!("tcp://127.0.0.1:{}", p.port()),
            replay_endpoint: Some(format!("tcp://127.0.0.1:{}", p.replay_port().unwrap())),
            topic: String::new(),
        });
    let engines = infera_testkit::EngineStubs::start_records([record]).await.unwrap();
    let record = engines.worker_records().remove(0);
    let control = Control::start_with(&["--etcd", &url]).await;
    let reg = infera_registry::Registration::start(vec![url.clone()], record, Duration::from_secs(2));
    eventually(Duration::from_secs(10), "prefill-a registered", || async {
        let req = pb::ListTargetsRequest { model: "m".into(), role: pb::Role::Prefill as i32 };
        control.admin().await.list_targets(req).await.unwrap().into_inner().targets.len() == 1
    })
    .await;
    let prompt: Vec<u32> = (0..(6 * PS) as u32).collect();
    p.publish(vec![KvEvent::AllBlocksCleared, stored(&prompt, 0, 6)]).unwrap();
    let lease = control.lease(0).await;
    until_overlap(&control, &lease, &prompt, 6).await;

    drop(reg);
    eventually(Duration::from_secs(15), "the worker left and its index and subscriber are gone", || async {
        let m = control.metrics().await;
        sample(&m, "infera_kv_index_blocks") == Some(0.0) && sample(&m, "infera_kv_subscribers") == Some(0.0)
    })
    .await;
    control.stop().await;
    p.close().await;
}
