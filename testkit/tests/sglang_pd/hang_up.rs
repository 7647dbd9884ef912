//! Clients that go away: whatever leg they leave running ends on its engine, and the ledger
//! returns to zero.

use infera_testkit::{eventually, http};
use serde_json::json;

use super::sglang::{SETTLED, cluster_over, hang_up_after_first_event, hang_up_at_once, run, sglang_counter};
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
        let released = |m: &str| http::metric_sum(m, "infera_router_releases_total", "kind=\"prefill\",reason=\"cancelled\"");
        let before = released(&cluster.control.metrics().await.unwrap());
        // A prompt of ~3,500 tokens: its prefill takes long enough on this CPU for the client to
        // be gone before it ends.
        let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(330);
        let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 64, "stream": true});
        hang_up_at_once(&cluster.proxies[0].url, "/v1/completions", &body).await;
        eventually(SETTLED, "the proxy to release the prefill leg of a client gone", async || {
            released(&cluster.control.metrics().await.unwrap_or_default()) > before
        })
        .await;
        w.all_idle().await;
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}
