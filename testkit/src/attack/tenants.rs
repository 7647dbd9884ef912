//! Attacks of one tenant on another, and on what errors tell: a request under another tenant's
//! `rid` that hangs up (its abort must not reach the other's request), and failing workers whose
//! addresses must not reach clients.

use ::http::{Request, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::json;

use super::target::{MODEL, chat_body};
use super::{Report, Scale, Target};
use crate::http::client;

/// A streamed chat completion as `key` with `rid`: the response, its body not read yet.
async fn stream(
    t: &Target,
    key: &str,
    rid: &str,
    max_tokens: u32,
) -> anyhow::Result<::http::Response<Incoming>> {
    let mut body = chat_body("a long answer, please", max_tokens, true);
    body["rid"] = json!(rid);
    body["ignore_eos"] = json!(true);
    let req = Request::post(format!("{}/v1/chat/completions", t.proxy().url))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body)?)))?;
    let resp = client().request(req).await?;
    anyhow::ensure!(resp.status() == StatusCode::OK, "a stream answered {}", resp.status());
    Ok(resp)
}

/// Reads the next data frame of `body` (the first SSE events).
async fn next_data(body: &mut Incoming) -> anyhow::Result<Bytes> {
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            return Ok(data);
        }
    }
    anyhow::bail!("the stream ended before any data")
}

/// Alice streams under a `rid`; bob sends the same `rid` to the same proxy and hangs up after
/// his first bytes (the proxy then aborts his request on the engine by id). Alice's answer must
/// still come whole.
pub(super) async fn cross_tenant_abort(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let max_tokens = 120;
    let mut r = Report::new(
        "proxy-cross-tenant-abort",
        format!("alice streams {max_tokens} tokens under rid R; bob sends rid R, reads a chunk and hangs up"),
    );
    let rid = format!("shared-{}", super::target::secret());
    let mut alice = stream(t, &t.alice, &rid, max_tokens).await?.into_body();
    let first = next_data(&mut alice).await?;
    let mut bob = stream(t, &t.bob, &rid, max_tokens).await?.into_body();
    next_data(&mut bob).await?;
    drop(bob);
    let rest = alice.collect().await?.to_bytes();
    let text = format!("{}{}", String::from_utf8_lossy(&first), String::from_utf8_lossy(&rest));
    let tokens = text.lines().filter(|l| l.starts_with("data: {") && l.contains("\"content\"")).count();
    let finished = text.contains("\"finish_reason\":\"length\"");
    // What the engines saw: two different ids, neither the bare rid.
    let mut engine_rids = Vec::new();
    for sim in &t.cluster.sims {
        for entry in sim.requests().await {
            let seen = entry["rid"].as_str().unwrap_or_default().to_owned();
            if seen.contains(&rid) && !engine_rids.contains(&seen) {
                engine_rids.push(seen);
            }
        }
    }
    r = r.answered(format!(
        "alice got {tokens} content events, finish_reason length: {finished}; the engines saw {} distinct ids for R",
        engine_rids.len()
    ));
    r.expect(finished, || format!("alice's stream did not finish whole: {:.300}", text));
    r.expect(engine_rids.len() >= 2 && !engine_rids.iter().any(|e| e == &rid), || {
        format!("engine ids {engine_rids:?}")
    });
    Ok(r)
}

/// Requests the workers refuse (values SGLang rejects, which the proxy passes on) and a model
/// no worker serves: the client's error names no worker address.
pub(super) async fn error_hygiene(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "proxy-error-hygiene",
        "chat requests with temperature -1, top_p 5, max_tokens -1 (each refused by the engine), and an unknown model",
    );
    let mut answers = Vec::new();
    for (key, value) in [("temperature", json!(-1.0)), ("top_p", json!(5.0)), ("max_tokens", json!(-1))] {
        let mut body = chat_body("refused", 2, false);
        body[key] = value;
        answers.push(t.chat(&t.alice, &body).await?);
    }
    answers.push(t.chat(&t.alice, &json!({"model": format!("{MODEL}-unknown"), "messages": []})).await?);
    let addresses: Vec<String> =
        t.cluster.sims.iter().map(|s| s.record.url.trim_start_matches("http://").to_owned()).collect();
    let leaked: Vec<&String> =
        addresses.iter().filter(|a| answers.iter().any(|(_, body)| body.contains(a.as_str()))).collect();
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| s.as_u16()).collect();
    let from_workers = answers.iter().filter(|(_, body)| body.contains("worker answered")).count();
    r = r.answered(format!(
        "statuses {statuses:?} ({from_workers} relayed from a worker); worker addresses in the bodies: {}",
        leaked.len()
    ));
    r.expect(leaked.is_empty(), || format!("the errors named {leaked:?}: {answers:?}"));
    r.expect(answers.iter().all(|(s, _)| s.is_client_error()), || format!("statuses {statuses:?}"));
    Ok(r)
}
