//! Clients that go away: whatever leg they leave running ends on its engine, and the ledger
//! returns to zero.

use infera_proto::pb;
use infera_testkit::{eventually, http};
use serde_json::json;

use super::sglang::{SETTLED, cluster_over, hang_up_after_first_event, run, send_and_hold, sglang_counter};
use super::{MODEL, world};

#[test]
fn a_client_that_hangs_up_mid_stream_ends_both_legs() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, w.pd_records()).await;
        let aborted = sglang_counter(&w.decode, "sglang:num_aborted_requests_total").await;
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Talk for a long time."}],
            "max_tokens": 3000, "ignore_eos": true, "stream": true});
        hang_up_after_first_event(&cluster.proxies[0].url, "/v1/chat/completions", &body).await;
        w.all_idle().await;
        eventually(SETTLED, "the decode to count the request it aborted", async || {
            sglang_counter(&w.decode, "sglang:num_aborted_requests_total").await == aborted + 1.0
        })
        .await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}

#[test]
fn a_client_that_hangs_up_during_the_prefill_ends_both_legs() {
    run(async {
        let w = world().await;
        let cluster = cluster_over(MODEL, w.pd_records()).await;
        let url = cluster.proxies[0].url.clone();
        let released = |m: &str| {
            http::metric_sum(m, "infera_router_releases_total", "kind=\"prefill\",reason=\"cancelled\"")
        };
        let before = released(&cluster.control.metrics().await.unwrap());
        // Long prompts (~3,300 tokens, ~0.2 s of prefill each here) keep both prefills busy, so
        // the next request waits in a prefill's queue: its client is gone before its prefill ends.
        let prompt =
            |n: usize| format!("{n} {}", "The quick brown fox jumps over the lazy dog. ".repeat(330));
        let busy = (0..8).map(|n| {
            let (url, body) = (url.clone(), json!({"model": MODEL, "prompt": prompt(n), "max_tokens": 1}));
            tokio::spawn(async move { http::post_json(&format!("{url}/v1/completions"), &body).await })
        });
        let busy: Vec<_> = busy.collect();
        eventually(SETTLED, "the long prompts to be booked on the prefills", async || {
            cluster.control.ledger().await.held_requests >= 8
        })
        .await;
        let body = json!({"model": MODEL, "prompt": prompt(99), "max_tokens": 64, "stream": true});
        let client = send_and_hold(&url, "/v1/completions", "gone-in-prefill", &body).await;
        let admin = cluster.control.admin().await;
        eventually(SETTLED, "both legs of the request to be booked", async || {
            let mut admin = admin.clone();
            let listed =
                admin.list_reservations(pb::ListReservationsRequest::default()).await.unwrap().into_inner();
            listed.reservations.iter().filter(|r| r.request_id == "gone-in-prefill").count() == 2
        })
        .await;
        drop(client);
        for b in busy {
            let (status, text) = b.await.unwrap().unwrap();
            assert!(status.is_success(), "{status} {text}");
        }
        eventually(SETTLED, "the proxy to release the prefill leg of the client gone", async || {
            released(&cluster.control.metrics().await.unwrap_or_default()) > before
        })
        .await;
        w.all_idle().await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}
