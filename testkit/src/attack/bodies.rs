//! Request bodies built to cost the proxy memory or control state: over the size bound, nested
//! past any parser's depth, 30 MiB of prompt numbers, ids and session keys over their length
//! bound, and a flood of distinct sessions.

use ::http::StatusCode;
use serde_json::{Value, json};

use super::target::{MODEL, chat_body};
use super::{Report, Scale, Target};
use crate::http::{self, metric_exact, metric_sum};

/// POSTs `body` to the first proxy's `path` as alice: the status, or `None` when the proxy
/// closed the connection before answering (an early refusal of a body it would not read).
async fn post(
    t: &Target,
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> anyhow::Result<(Option<StatusCode>, String)> {
    let auth = format!("Bearer {}", t.alice);
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    match http::post_bytes(&format!("{}{path}", t.proxy().url), body, &all).await {
        Ok((status, text)) => Ok((Some(status), text)),
        Err(e) if e.chain().any(|c| c.downcast_ref::<hyper::Error>().is_some()) => Ok((None, e.to_string())),
        Err(e) => Err(e),
    }
}

fn error_type(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["type"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.chars().take(80).collect())
}

/// 40 MiB of chat body (over the 32 MiB bound): 413, or the connection closed unread.
pub(super) async fn oversized(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new("proxy-oversized-body", "a 40 MiB chat completion body (the bound is 32 MiB)");
    let pad = "a".repeat(40 << 20);
    let body = serde_json::to_vec(&json!({"model": MODEL, "messages": [{"role": "user", "content": pad}]}))?;
    let (status, text) = post(t, "/v1/chat/completions", body, &[]).await?;
    r = r.answered(format!("{status:?} {}", error_type(&text)));
    r.expect(matches!(status, Some(StatusCode::PAYLOAD_TOO_LARGE) | None), || {
        format!("{status:?}: {text:.200}")
    });
    Ok(r)
}

/// 100,000 nested arrays as a message's content: a 400, no stack overflow.
pub(super) async fn deeply_nested(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let depth = 100_000;
    let mut r =
        Report::new("proxy-deep-json", format!("a chat body whose content nests {depth} arrays deep"));
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let body =
        format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":{nested}}}]}}"#).into_bytes();
    let (status, text) = post(t, "/v1/chat/completions", body, &[]).await?;
    r = r.answered(format!("{status:?} {}", error_type(&text)));
    r.expect(status == Some(StatusCode::BAD_REQUEST), || format!("{status:?}: {text:.200}"));
    Ok(r)
}

/// A completions prompt of token ids 30 MiB long (≈ 15 M numbers, over the 1 M values bound):
/// 413 before the tree is built.
pub(super) async fn number_array(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r =
        Report::new("proxy-number-array-30mib", "a /v1/completions prompt of 15.7 M token ids (30 MiB)");
    let mut body = format!(r#"{{"model":"{MODEL}","prompt":["#).into_bytes();
    while body.len() < 30 << 20 {
        body.extend_from_slice(b"1,");
    }
    body.extend_from_slice(b"1]}");
    let (status, text) = post(t, "/v1/completions", body, &[]).await?;
    r = r.answered(format!("{status:?} {}", error_type(&text)));
    r.expect(status == Some(StatusCode::PAYLOAD_TOO_LARGE), || format!("{status:?}: {text:.200}"));
    Ok(r)
}

/// Bodies that the proxy must hold whole before it can judge them: `scale.bodies` of 20 MiB at
/// once, each cut short so that none is worth forwarding. Their bytes are held against
/// `--max-body-bytes-in-flight`; past it, 503 `overloaded` at once.
pub(super) async fn body_flood(t: &Target, s: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "proxy-body-flood",
        format!(
            "{} chat bodies of 20 MiB at once, each cut short (--max-body-bytes-in-flight {} MiB)",
            s.bodies, s.body_budget_mib
        ),
    );
    let body = {
        let mut b = format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"#).into_bytes();
        b.resize(20 << 20, b'a');
        b
    };
    let calls = (0..s.bodies).map(|_| post(t, "/v1/chat/completions", body.clone(), &[]));
    let answers = futures_util::future::join_all(calls).await;
    let mut codes = Vec::new();
    for a in answers {
        codes.push(a?.0.map_or(0, |c| c.as_u16()));
    }
    let count = |code: u16| codes.iter().filter(|c| **c == code).count();
    // 0: the proxy refused the body while it was still being sent and closed the connection.
    r = r.answered(format!(
        "{} answered 400 (read whole, then refused as JSON), {} refused by the budget (503 overloaded, or closed before the body was sent)",
        count(400),
        count(503) + count(0)
    ));
    r.expect(count(400) + count(503) + count(0) == codes.len(), || format!("statuses {codes:?}"));
    r.expect(count(503) + count(0) > 0, || "the budget never refused a body".into());
    Ok(r)
}

/// A model name, `user`, `rid`, `x-request-id` and `x-session-id` of 300 bytes each: 400 each.
pub(super) async fn long_ids(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "proxy-long-ids",
        "a model, user, rid, x-request-id and x-session-id of 300 bytes, one per request",
    );
    let long = "x".repeat(300);
    let mut codes = Vec::new();
    for key in ["model", "user", "rid"] {
        let mut body = chat_body("long", 2, false);
        body[key] = json!(long);
        codes.push(post(t, "/v1/chat/completions", serde_json::to_vec(&body)?, &[]).await?.0);
    }
    for header in ["x-request-id", "x-session-id"] {
        let body = serde_json::to_vec(&chat_body("long", 2, false))?;
        codes.push(post(t, "/v1/chat/completions", body, &[(header, &long)]).await?.0);
    }
    r = r.answered(format!("{codes:?}"));
    r.expect(codes.iter().all(|c| *c == Some(StatusCode::BAD_REQUEST)), || format!("{codes:?}"));
    Ok(r)
}

/// Requests with as many distinct session keys as `scale.sessions`, through both proxies:
/// control remembers at most `--session-max`, the oldest forgotten first.
pub(super) async fn session_flood(t: &Target, s: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "proxy-session-key-flood",
        format!("{} requests, each with a new x-session-id (--session-max {})", s.sessions, s.session_max),
    );
    let proxies = t.cluster.proxy_urls();
    let auth = format!("Bearer {}", t.alice);
    let mut failed = 0;
    for chunk in (0..s.sessions).collect::<Vec<_>>().chunks(8) {
        let calls = chunk.iter().map(|i| {
            let url = format!("{}/v1/chat/completions", proxies[i % proxies.len()]);
            let (auth, session) = (auth.clone(), format!("flood-session-{i}"));
            async move {
                let body = serde_json::to_vec(&chat_body("s", 1, false)).expect("json");
                http::post_bytes(&url, body, &[("authorization", &auth), ("x-session-id", &session)]).await
            }
        });
        for result in futures_util::future::join_all(calls).await {
            if !matches!(result, Ok((StatusCode::OK, _))) {
                failed += 1;
            }
        }
    }
    // Control exports the session gauges on a timer: wait (bounded) for the flood to show.
    let evicted_at_least = (s.sessions - s.session_max) as f64;
    let read = async || {
        let m = t.cluster.control.metrics().await.ok()?;
        let held = metric_exact(&m, "infera_router_sessions", "");
        let evicted = metric_sum(&m, "infera_router_sessions_evicted_total", "");
        (evicted >= evicted_at_least).then_some((held, evicted))
    };
    let shown =
        crate::eventually::poll(std::time::Duration::from_secs(10), "the sessions to be counted", read).await;
    let metrics = t.cluster.control.metrics().await?;
    let held = metric_exact(&metrics, "infera_router_sessions", "");
    let evicted = metric_sum(&metrics, "infera_router_sessions_evicted_total", "");
    r.expect(shown.is_ok(), || format!("{evicted} sessions evicted, {evicted_at_least} expected"));
    r = r.answered(format!(
        "{} answered 200, {failed} not; control holds {held} sessions, {evicted} evicted",
        s.sessions - failed
    ));
    r.expect(held <= s.session_max as f64, || {
        format!("{held} sessions held over --session-max {}", s.session_max)
    });
    r.expect(failed == 0, || format!("{failed} session requests failed"));
    Ok(r)
}
