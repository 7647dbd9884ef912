//! The first byte: a decode that takes a streamed request and then says nothing is retried
//! elsewhere once `--attempt-timeout-ms` passes (nothing had reached the client), and one that
//! goes silent mid-stream is cut after `--stream-idle-timeout-ms` with an SSE error event. Both
//! legs are released; the ledger returns to zero.

use http::StatusCode;
use infera_testkit::{ClusterSpec, ControlSpec, SimSpec, Workers};
use serde_json::json;

use crate::harness::*;

async fn two_decodes(proxy_flags: &[&str]) -> infera_testkit::Cluster {
    let sims = vec![
        sim(SimSpec::prefill("prefill-0", MODEL)),
        sim(SimSpec::decode("decode-0", MODEL, 1)),
        sim(SimSpec::decode("decode-1", MODEL, 1)),
    ];
    let mut spec = ClusterSpec::new(MODEL, sims);
    spec.control = ControlSpec::new(Workers::None).flags(["--decode-input-demand", "on"]);
    spec.proxies = 1;
    spec.proxy_flags = proxy_flags.iter().map(|f| (*f).to_owned()).collect();
    spec.start().await.expect("the cluster starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_silent_before_its_first_token_is_retried_elsewhere_after_the_attempt_timeout() {
    let kit = two_decodes(&["--attempt-timeout-ms", "400", "--retries", "2"]).await;
    kit.sim("decode-0").faults(json!({"stall_after_tokens": 0})).await;
    let url = format!("{}/v1/chat/completions", kit.proxy_urls()[0]);
    // Four at once: the ledger spreads them over both decodes, so some attempts stall.
    let sends = (0..4).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { post_json(&url, &chat(6, true), &[]).await })
    });
    for send in sends {
        let (status, body) = send.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("[DONE]") && !body.contains("\"error\""), "{body}");
    }
    let stalled = kit.sim("decode-0").requests().await.len();
    assert!(stalled >= 1, "no attempt reached the silent decode: the test proves nothing");
    assert!(kit.sim("decode-1").requests().await.len() >= 4, "every request was answered by decode-1");
    let proxy = kit.proxies[0].metrics().await.unwrap();
    assert!(
        proxy.lines().any(|l| l.starts_with("infera_proxy_retries_total") && !l.ends_with(" 0")),
        "{proxy}"
    );
    kit.sim("decode-0").faults(json!({"stall_after_tokens": null})).await;
    kit.ledger_returns_to_zero().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_silent_after_its_first_tokens_is_cut_with_an_error_event_after_the_idle_timeout() {
    let kit = two_decodes(&["--stream-idle-timeout-ms", "300"]).await;
    for decode in ["decode-0", "decode-1"] {
        kit.sim(decode).faults(json!({"stall_after_tokens": 2})).await;
    }
    let url = format!("{}/v1/chat/completions", kit.proxy_urls()[0]);
    let (status, body) = post_json(&url, &chat(8, true), &[]).await;
    assert_eq!(status, StatusCode::OK, "the stream had begun: {body}");
    let events = sse_events(&body);
    assert!(events.iter().any(|e| e.contains("stream-idle-timeout-ms")), "{events:#?}");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:#?}");
    for decode in ["decode-0", "decode-1"] {
        kit.sim(decode).faults(json!({"stall_after_tokens": null})).await;
    }
    kit.ledger_returns_to_zero().await.unwrap();
}
