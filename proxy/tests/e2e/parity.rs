//! Render parity: the proxy asks each worker's `/v1/tokenize` for the probe conversations and
//! compares with its own rendering. A worker with another chat template is found and exported as
//! `infera_render_parity … 0`; when it is a prefill, the model's chat prompts stop carrying token
//! ids to control.

use http::StatusCode;
use serde_json::json;

use infera_testkit::SimSpec;

use crate::harness::{self, *};

/// A template that renders the same messages with other markers than the fixture's ChatML.
const OTHER_TEMPLATE: &str = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}\
    {% if add_generation_prompt %}[assistant] {% endif %}";

/// A PD pair whose prefill (`Role::Prefill`) or decode renders with another template, or neither
/// (`None`), a control and a proxy with the fixture's tokenizer; a chat and a completion request
/// sent.
async fn probe_and_ask(apart: Option<&str>, expect: [(&str, f64); 3]) {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = infera_tokenize::fixture::write_model_dir(dir.path(), 2_000).unwrap();
    let model_dir = dir.path().to_str().unwrap().to_owned();
    let template = dir.path().join("other.jinja");
    std::fs::write(&template, OTHER_TEMPLATE).unwrap();
    let sim = |spec: SimSpec| harness::sim(spec).extra(["--tokenizer-path".to_owned(), model_dir.clone()]);
    let other = ["--chat-template".to_owned(), template.to_str().unwrap().to_owned()];
    let mut prefill = sim(SimSpec::prefill("prefill-0", MODEL));
    let mut decode = sim(SimSpec::decode("decode-0", MODEL, 1));
    match apart {
        Some("prefill-0") => prefill = prefill.extra(other),
        Some(_) => decode = decode.extra(other),
        None => {}
    }
    let prefill = prefill.start().await.unwrap();
    let decode = decode.start().await.unwrap();
    let control = start_control(vec![prefill.record.clone(), decode.record.clone()], &[]).await;
    let flags = ["--tokenizer", tokenizer.to_str().unwrap(), "--render-parity-interval-ms", "60000"];
    let proxy = start_proxy(control.addr, &flags).await;
    wait_ready(&proxy).await;

    let [(prefill_series, prefill_want), (decode_series, decode_want), (routed_series, routed_want)] = expect;
    assert_eq!(value_of(&proxy.url, prefill_series).await, prefill_want);
    assert_eq!(value_of(&proxy.url, decode_series).await, decode_want);
    let chat =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2});
    let (status, text) = post_json(&format!("{}/v1/chat/completions", proxy.url), &chat, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // A completion is not rendered with a chat template: it keeps its ids either way.
    let completion = json!({"model": MODEL, "prompt": "hello there", "max_tokens": 2});
    let (status, text) = post_json(&format!("{}/v1/completions", proxy.url), &completion, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(value_of(&proxy.url, routed_series).await, routed_want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_with_another_chat_template_is_found_and_the_models_chat_prompts_route_on_load() {
    probe_and_ask(
        Some("prefill-0"),
        [
            (r#"infera_render_parity{worker="prefill-0",model="m"}"#, 0.0),
            (r#"infera_render_parity{worker="decode-0",model="m"}"#, 1.0),
            ("infera_render_parity_routed_on_load_total", 1.0),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_that_renders_apart_is_exported_but_keeps_the_hashes_no_pick_sends_it() {
    probe_and_ask(
        Some("decode-0"),
        [
            (r#"infera_render_parity{worker="prefill-0",model="m"}"#, 1.0),
            (r#"infera_render_parity{worker="decode-0",model="m"}"#, 0.0),
            ("infera_render_parity_routed_on_load_total", 0.0),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_that_render_as_the_proxy_does_keep_their_token_ids() {
    probe_and_ask(
        None,
        [
            (r#"infera_render_parity{worker="prefill-0",model="m"}"#, 1.0),
            (r#"infera_render_parity{worker="decode-0",model="m"}"#, 1.0),
            ("infera_render_parity_routed_on_load_total", 0.0),
        ],
    )
    .await;
}
