//! The real Anthropic Python client (PyPI `anthropic`, installed by `cargo xtask setup`) through a
//! proxy that checks API keys: a message, a stream, `count_tokens`, and errors the client turns
//! into its own exception types.

use std::time::Duration;

use http::StatusCode;
use sha2::{Digest, Sha256};

use crate::harness::*;

const KEY: &str = "sk-ant-test";

const SCRIPT: &str = r#"
import json, sys
import anthropic
url, model, key = sys.argv[1], sys.argv[2], sys.argv[3]
client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
turns = [{"role": "user", "content": [{"type": "text", "text": "Say a few words, please."}]}]
whole = client.messages.create(model=model, max_tokens=6, system="Be brief.", messages=turns)
with client.messages.stream(model=model, max_tokens=7, system="Be brief.", messages=turns) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
count = client.messages.count_tokens(model=model, system="Be brief.", messages=turns)
errors = {}
for name, c, m in [("model", client, "no-such-model"),
                   ("key", anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0), model)]:
    try:
        c.messages.create(model=m, max_tokens=1, messages=turns)
        errors[name] = None
    except anthropic.APIStatusError as e:
        errors[name] = [type(e).__name__, e.status_code, e.body["error"]["type"]]
print(json.dumps({
    "whole": {"text": whole.content[0].text, "stop": whole.stop_reason,
              "input": whole.usage.input_tokens, "output": whole.usage.output_tokens},
    "stream": {"text": text, "stop": final.stop_reason, "input": final.usage.input_tokens,
               "output": final.usage.output_tokens, "final_text": final.content[0].text},
    "count": count.input_tokens,
    "errors": errors,
}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_client_sends_messages_through_a_proxy() {
    let cluster = Cluster::start(Shape { decode_dp: 1, proxies: 0, ..Shape::default() }).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    let hex: String = Sha256::digest(KEY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(file.path(), format!("[[keys]]\nname = \"sdk\"\nsha256 = \"{hex}\"\n")).unwrap();
    let keys = file.path().display().to_string();
    let proxy = spawn_proxy(cluster.control_addr, &["--api-keys", &keys]).await;
    eventually(Duration::from_secs(30), "the proxy to list the model", async || {
        let (status, text) = get_with(&format!("{}/v1/models", proxy.url), &[("x-api-key", KEY)]).await;
        (status == StatusCode::OK && text.contains(&format!("\"id\":\"{MODEL}\""))).then_some(())
    })
    .await;
    let url = proxy.url.clone();
    let v = python_json(SCRIPT, vec![url, MODEL.to_owned(), KEY.to_owned()]).await;
    assert_eq!(v["whole"]["stop"], "max_tokens", "{v}");
    assert_eq!(v["whole"]["output"], 6, "{v}");
    assert_eq!(v["whole"]["text"].as_str().unwrap().split(' ').count(), 6, "a word a token: {v}");
    let input = v["whole"]["input"].as_u64().unwrap();
    assert!(input > 0, "{v}");
    assert_eq!(v["stream"]["text"].as_str().unwrap().split(' ').count(), 7, "{v}");
    assert_eq!(v["stream"]["text"], v["stream"]["final_text"], "the client assembled the stream: {v}");
    assert_eq!((v["stream"]["stop"].as_str(), v["stream"]["output"].as_u64()), (Some("max_tokens"), Some(7)));
    assert_eq!(v["stream"]["input"], input, "{v}");
    assert_eq!(v["count"], input, "count_tokens counts what a message prefills: {v}");
    assert_eq!(v["errors"]["model"], serde_json::json!(["NotFoundError", 404, "not_found_error"]), "{v}");
    assert_eq!(
        v["errors"]["key"],
        serde_json::json!(["AuthenticationError", 401, "authentication_error"]),
        "{v}"
    );
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}
