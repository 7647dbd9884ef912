//! A decode with a small KV capacity (`--max-total-tokens`): the second request waits in the
//! prealloc queue while the first holds its reservation, then everything drains.

use serde_json::{Value, json};

use super::pair;
use crate::harness::{self, Sim};

/// A non-streaming PD `/generate` with a 100-token prompt.
fn body(prefill: &Sim, room: u64) -> Value {
    json!({
        "input_ids": (0..100).collect::<Vec<u32>>(),
        "sampling_params": {"max_new_tokens": 20},
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": prefill.bootstrap.unwrap().port(),
        "bootstrap_room": room,
    })
}

fn spawn_post(sim: &Sim, body: Value) -> tokio::task::JoinHandle<u16> {
    let addr = sim.http;
    tokio::spawn(async move { harness::post(addr, "/generate", body).await.unwrap().0.as_u16() })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_decode_queues_in_prealloc_until_a_reservation_frees() {
    // 250 tokens, 64 reserved: the first (100 + 64) fits; the second sees 250 − 100 − 64 = 86.
    let (prefill, decode) =
        pair(&[], &["--max-total-tokens", "250", "--num-reserved-decode-tokens", "64"]).await;
    // Both decode legs arrive before any prefill: the first reserves and waits for its KV.
    let first = spawn_post(&decode, body(&prefill, 1));
    harness::eventually("the first reserved", || async {
        decode.disagg_sum("decode_transfer_queue_reqs").await == 1
    })
    .await;
    let second = spawn_post(&decode, body(&prefill, 2));
    harness::eventually("the second waits for a reservation", || async {
        decode.disagg_sum("decode_prealloc_queue_reqs").await == 1
    })
    .await;
    let load = &decode.loads().await[0];
    assert_eq!(load["disaggregation"]["decode_transfer_queue_reqs"], 1);
    assert_eq!(load["num_used_tokens"], 100);
    assert_eq!(load["max_total_num_tokens"], 250);
    assert_eq!(load["token_usage"], 0.4);
    assert_eq!(load["num_waiting_reqs"], 2, "SGLang counts a decode's prealloc and transfer queues");
    assert_eq!(load["num_total_tokens"], 200);
    assert_eq!(load["num_active_tokens"], 0, "no KV has arrived");
    assert_eq!(load["queues"]["prealloc_ready"], 1);

    let prefills = [spawn_post(&prefill, body(&prefill, 1)), spawn_post(&prefill, body(&prefill, 2))];
    for leg in [first, second].into_iter().chain(prefills) {
        assert_eq!(leg.await.unwrap(), 200);
    }
    let load = &decode.loads().await[0];
    for key in ["decode_prealloc_queue_reqs", "decode_transfer_queue_reqs", "decode_retracted_queue_reqs"] {
        assert_eq!(load["disaggregation"][key], 0, "{key}");
    }
    assert_eq!((&load["num_used_tokens"], &load["num_waiting_reqs"]), (&json!(0), &json!(0)));
    assert_eq!(load["queues"]["retracted"], 0);
    prefill.stop().await;
    decode.stop().await;
}
