//! The real OpenAI Python client (PyPI `openai`) streaming through a proxy.

use crate::harness::*;

const SCRIPT: &str = r#"
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0)
chunks, text = 0, ""
stream = client.chat.completions.create(
    model=sys.argv[2],
    messages=[{"role": "user", "content": "Stream a few words, please."}],
    max_tokens=12,
    stream=True,
    stream_options={"include_usage": True},
)
usage = None
for chunk in stream:
    chunks += 1
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage.completion_tokens
full = client.chat.completions.create(
    model=sys.argv[2], messages=[{"role": "user", "content": "And once more, whole."}], max_tokens=5
)
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    err = None
except Exception as e:
    err = type(e).__name__
print(json.dumps({"chunks": chunks, "text": text, "usage": usage,
                  "full": full.choices[0].message.content, "finish": full.choices[0].finish_reason, "err": err}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_client_streams_through_a_proxy() {
    let cluster = Cluster::start(Shape { proxies: 1, ..Shape::default() }).await;
    let proxy = cluster.proxies[0].clone();
    let v = python_json(SCRIPT, vec![proxy, MODEL.to_owned()]).await;
    assert!(v["chunks"].as_u64().unwrap() >= 3, "{v}");
    assert!(!v["text"].as_str().unwrap().is_empty(), "{v}");
    assert_eq!(v["usage"], 12, "{v}");
    assert!(!v["full"].as_str().unwrap().is_empty(), "{v}");
    assert_eq!(v["finish"], "length");
    assert_eq!(v["err"], "NotFoundError", "an unknown model is a 404 the client understands");
    cluster.ledger_returns_to_zero().await;
    cluster.stop().await;
}
