//! `--load-publish-endpoint`: each rank's `LoadStat` on its own socket, advertised in
//! `/server_info.kv_events` as SGLang 0.5.23 does, carrying the counters `/v1/loads` reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use infera_kv::load::{LoadMessage, LoadStat, follow_load};
use serde_json::{Value, json};

use super::harness::{Events, Sim, eventually};
use super::kv_config;

/// The latest reading of each rank, as `follow_load` hands them over.
type Latest = Arc<Mutex<HashMap<u32, LoadStat>>>;

fn follow(port: u16, rank: u32, latest: &Latest) -> tokio::task::JoinHandle<()> {
    let latest = latest.clone();
    let endpoint = format!("tcp://127.0.0.1:{}", u32::from(port) + rank);
    tokio::spawn(follow_load(endpoint, move |m: LoadMessage| {
        latest.lock().unwrap().insert(rank, m.stat);
    }))
}

/// What `/v1/loads` says of `rank`, as the `LoadStat` the socket must carry.
fn expected(load: &Value, rank: u32) -> LoadStat {
    let n = |k: &str| load[k].as_u64().unwrap();
    LoadStat {
        num_running_reqs: n("num_running_reqs"),
        num_waiting_reqs: n("num_waiting_reqs"),
        num_tokens: n("num_used_tokens"),
        max_total_num_tokens: n("max_total_num_tokens"),
        attn_dp_rank: Some(rank),
        num_waiting_uncached_tokens: n("num_waiting_uncached_tokens"),
        num_total_tokens: n("num_total_tokens"),
        max_running_requests: n("max_running_requests"),
        total_prefill_uncached_tokens: n("total_prefill_uncached_tokens"),
        total_prefill_busy_us: n("total_prefill_busy_us"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_rank_publishes_what_v1_loads_reports() {
    let kv = kv_config(true);
    let flags = ["--dp-size", "2", "--kv-events-config", &kv, "--load-publish-endpoint", "tcp://127.0.0.1:0"];
    let sim = Sim::start(&flags).await;
    let (_, info) = sim.get("/server_info").await;
    let d = &info["kv_events"];
    assert_eq!(d["load_topic"], "load");
    let port =
        u16::try_from(d["load_endpoint_port_base"].as_u64().expect("the load port is advertised")).unwrap();
    assert_ne!(port, 0);

    let latest = Latest::default();
    let followers = [follow(port, 0, &latest), follow(port, 1, &latest)];
    // Idle: both ranks' heartbeats arrive, field by field what /v1/loads says.
    eventually("both ranks' idle readings", async || {
        let loads = sim.loads().await;
        let got = latest.lock().unwrap().clone();
        (0..2).all(|r| got.get(&r) == Some(&expected(&loads[r as usize], r)))
    })
    .await;

    // A long request on rank 1: its reading changes, and again matches /v1/loads.
    let body = json!({"input_ids": (0..64).collect::<Vec<u32>>(), "stream": true, "routed_dp_rank": 1,
        "sampling_params": {"max_new_tokens": 100_000, "ignore_eos": true}});
    let mut stream = Events::open(sim.http, "/generate", body).await;
    let _ = stream.next().await;
    eventually("rank 1 publishes its running request", async || {
        let loads = sim.loads().await;
        let got = latest.lock().unwrap().get(&1).copied();
        got.is_some_and(|s| s.num_running_reqs == 1 && s.num_tokens > 0 && s == expected(&loads[1], 1))
    })
    .await;
    assert_eq!(latest.lock().unwrap()[&0].num_running_reqs, 0);
    stream.hang_up();
    eventually("rank 1 publishes that it is idle again", async || {
        latest.lock().unwrap().get(&1).is_some_and(|s| s.num_running_reqs == 0)
    })
    .await;
    followers.iter().for_each(|f| f.abort());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_packs_after_the_kv_ranges_and_older_versions_have_no_flag() {
    let kv = kv_config(true);
    let sim = Sim::start(&["--kv-events-config", &kv, "--load-publish-endpoint", "auto"]).await;
    let (_, info) = sim.get("/server_info").await;
    assert!(info["kv_events"]["load_endpoint_port_base"].as_u64().is_some_and(|p| p > 0), "{info}");
    sim.stop().await;

    // SGLang 0.5.18 has no such flag: the sim drops it (with a warning) and publishes nothing.
    let old =
        ["--sim-sglang-version", "0.5.18", "--kv-events-config", &kv, "--load-publish-endpoint", "auto"];
    let sim = Sim::start(&old).await;
    let (_, info) = sim.get("/server_info").await;
    assert!(info["kv_events"].get("load_endpoint_port_base").is_none(), "{info}");
    assert!(info["kv_events"].get("load_topic").is_none());
    sim.stop().await;
}
