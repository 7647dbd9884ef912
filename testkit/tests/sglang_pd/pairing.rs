//! A prefill at page size 16 and a decode at 1: SGLang's decode dies on the first request such a
//! pair sends it (`Page size mismatch`, `sglang/srt/disaggregation/common/conn.py`). Control must
//! never pair them, and must know each worker's page size from its engine.

use infera_proto::types::WorkerRecord;
use infera_testkit::{ClusterSpec, http};
use serde_json::{Value, json};

use super::sglang::{run, sglang_counter, tokenizer_flags};
use super::{MISMATCHED, MODEL, PAGE, world};

#[test]
fn a_prefill_and_a_decode_of_different_page_sizes_are_never_paired() {
    run(async {
        let w = world().await;
        // The records say page size 1 for both: control must learn 16 from the prefill's engine.
        let records: Vec<WorkerRecord> = w
            .mismatched
            .iter()
            .map(|e| WorkerRecord { page_size: 1, ..e.record.clone() })
            .chain(w.pd_records())
            .collect();
        let mut prompts = Vec::new();
        for e in &w.mismatched {
            prompts.push(sglang_counter(e, "sglang:prompt_tokens_total").await);
        }
        let mut spec = ClusterSpec::new(MODEL, Vec::new()).running(records);
        spec.proxies = 1;
        spec.proxy_flags = tokenizer_flags();
        let cluster = spec.start().await.expect("cluster");
        let url = format!("{}/v1/chat/completions", cluster.proxies[0].url);
        let body =
            json!({"model": MISMATCHED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        for _ in 0..3 {
            let (status, text) = http::post_json(&url, &body).await.unwrap();
            assert_eq!(status.as_u16(), 503, "{text}");
            let err: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(err["error"]["code"], "no_compatible_pd_pair", "{err}");
        }
        let targets = cluster.control.targets().await;
        let page = |worker: &str| {
            let t =
                targets.iter().find(|t| t.worker.as_ref().is_some_and(|w| w.worker_id == worker)).unwrap();
            t.worker.as_ref().unwrap().page_size
        };
        assert_eq!(page("prefill-16"), 16, "the engine's page size, not the record's");
        assert_eq!(page("decode-1"), 1);
        assert_eq!(page("prefill-0"), PAGE);
        // Both servers are still up, and neither was sent a request.
        for (e, before) in w.mismatched.iter().zip(prompts) {
            let loads = e.loads().await.expect("still answering");
            assert_eq!(loads.len(), 1);
            let after = sglang_counter(e, "sglang:prompt_tokens_total").await;
            assert_eq!(after, before, "{} computed no prompt", e.record.id.as_str());
        }
        // The compatible pair of the other model still serves.
        let ok = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        let (status, text) = http::post_json(&url, &ok).await.unwrap();
        assert!(status.is_success(), "{status} {text}");
        cluster.ledger_returns_to_zero().await.unwrap();
        cluster.stop().await.unwrap();
    });
}
