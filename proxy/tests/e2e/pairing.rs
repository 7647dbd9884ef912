//! A prefill at page size 16 and a decode at page size 1 cannot exchange KV (SGLang's decode
//! would die on the first transfer): the proxy answers 503 `no_compatible_pd_pair`, from control's
//! refusal and from its own fallback list alike, and no request reaches either worker.

use http::StatusCode;
use serde_json::Value;

use crate::harness::*;

/// Posts a chat completion; the status and the error's `code`.
async fn refused(proxy: &str) -> (StatusCode, String) {
    let (status, text) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(2, false), &[]).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("page_size")), "{v}");
    assert_eq!(v["error"]["type"], "server_error", "{v}");
    (status, v["error"]["code"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_a_compatible_pd_pair_is_refused_with_503_even_from_the_fallback() {
    // The prefill's record says page size 1 (the kit's record is not told of the extra flag);
    // its engine runs 16. The decode runs SGLang's default, 1.
    let shape = Shape {
        proxies: 1,
        decode_dp: 1,
        prefill_flags: vec!["--page-size".into(), "16".into()],
        ..Shape::default()
    };
    let mut cluster = Cluster::start(shape).await;
    let proxy = cluster.proxies[0].clone();
    let want = (StatusCode::SERVICE_UNAVAILABLE, "no_compatible_pd_pair".to_owned());
    for stream in [false, true] {
        let (status, text) = post_json(&format!("{proxy}/v1/chat/completions"), &chat(2, stream), &[]).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    }
    assert_eq!(refused(&proxy).await, want);
    cluster.ledger_returns_to_zero().await;

    // Control down: the fallback list knows both targets are unpaired.
    cluster.stop_control().await;
    assert_eq!(refused(&proxy).await, want);
    for sim in [cluster.prefill().unwrap(), cluster.decode()] {
        assert_eq!(sim.requests().await, Vec::<Value>::new(), "{} got a request", sim.record.id);
    }
    cluster.stop().await;
}
