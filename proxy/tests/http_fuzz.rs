//! Through a running proxy (control and a scripted worker on loopback): request bodies around the
//! `--max-body-bytes` limit, in one piece or chunked, with odd `x-request-id`s, get the status
//! `facts::derive` gives them (413 past the limit); a worker's streamed answer, split anywhere,
//! reaches the client byte for byte; a worker's 4xx reaches it with the worker's message. After
//! either, nothing stays booked.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioIo;
use infera_proto::types::{Api, WorkerRecord};
use infera_proxy::facts::derive;
use infera_testkit::{Control, ControlSpec, Ledger, Proxy, ProxySpec, Workers, eventually};
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

const LIMIT: usize = 4096;

type Body = BoxBody<Bytes, Infallible>;

/// What the worker answers a request id with.
#[derive(Clone, Debug)]
struct Script {
    status: u16,
    chunks: Vec<Vec<u8>>,
    /// One piece with a `content-length`, else chunked with a pause between chunks.
    length: bool,
}

type Scripts = Arc<Mutex<HashMap<String, Script>>>;

fn runner(cases: u32, name: &'static str) -> TestRunner {
    let persistence = FileFailurePersistence::Direct(name);
    TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(persistence)),
        ..ProptestConfig::default()
    })
}

async fn answer(scripts: Scripts, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let script = if req.method() == Method::POST { scripts.lock().unwrap().get(&id).cloned() } else { None };
    let server_info = req.method() == Method::GET && req.uri().path() == "/server_info";
    let _ = req.into_body().collect().await;
    // Control reads every worker's `/server_info` before routing to it: SGLang's shape for w0.
    if server_info {
        let info = infera_testkit::engine_stub::server_info(&record().into());
        return Ok(Response::new(Full::from(info.to_string()).boxed()));
    }
    // Control's `/v1/loads` poll, `/abort_request` and unscripted requests.
    let Some(s) = script else {
        return Ok(Response::new(Full::from(r#"{"loads":[{"dp_rank":0}]}"#).boxed()));
    };
    let mut resp = if s.length {
        Response::new(Full::from(s.chunks.concat()).boxed())
    } else {
        let frames = futures_util::stream::unfold(s.chunks.into_iter(), |mut rest| async move {
            let chunk = rest.next()?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            Some((Ok(Frame::data(Bytes::from(chunk))), rest))
        });
        Response::new(StreamBody::new(frames).boxed())
    };
    *resp.status_mut() = StatusCode::from_u16(s.status).expect("a status");
    Ok(resp)
}

struct Deployment {
    scripts: Scripts,
    worker_url: String,
    control: Control,
    proxy: Proxy,
    client: Client<HttpConnector, Body>,
}

/// A scripted mixed worker, control over it, and a proxy with a 4 KiB body limit.
async fn deploy() -> Deployment {
    let scripts = Scripts::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let worker_url = format!("http://{}", listener.local_addr().unwrap());
    let shared = scripts.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let scripts = shared.clone();
            let service = hyper::service::service_fn(move |req| answer(scripts.clone(), req));
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    let record = WorkerRecord { url: worker_url.clone(), ..record() };
    let control = ControlSpec::new(Workers::Records(vec![record])).start().await.unwrap();
    control.wait_targets(1).await.unwrap();
    let proxy = ProxySpec::new(control.url()).flag("--max-body-bytes", LIMIT).start().await.unwrap();
    proxy.wait_ready("m").await.unwrap();
    let client = infera_testkit::http::client();
    Deployment { scripts, worker_url, control, proxy, client }
}

/// The scripted worker's record (`deploy` sets the URL it listens at).
fn record() -> WorkerRecord {
    WorkerRecord::mixed("w0", "http://127.0.0.1:1", "m", 1)
}

impl Deployment {
    /// POSTs `body` to `path`, whole or in `cuts` pieces (chunked): status, headers, body.
    async fn post(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: Vec<u8>,
        cuts: Option<Vec<usize>>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let body: Body = match cuts {
            None => Full::from(body).boxed(),
            Some(cuts) => {
                let frames = pieces(&body, &cuts).into_iter().map(|p| Ok(Frame::data(Bytes::from(p))));
                StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>())).boxed()
            }
        };
        let mut req = Request::post(format!("{}{path}", self.proxy.url)).body(body).unwrap();
        req.headers_mut().extend(headers.clone());
        let resp = self.client.request(req).await.expect("the proxy answers");
        let (head, body) = resp.into_parts();
        (head.status, head.headers, body.collect().await.expect("a whole body").to_bytes())
    }

    async fn nothing_booked(&self) {
        let control = &self.control;
        eventually(Duration::from_secs(10), "the ledger to return to zero", async || {
            control.ledger().await == Ledger::default()
        })
        .await;
    }
}

/// `bytes` cut at `cuts` (taken modulo its length), without empty pieces.
fn pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).chain([0, bytes.len()]).collect();
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
}

/// The OpenAI error's `code`; on `/v1/messages`, the type of Anthropic's envelope
/// (`{"type": "error", "error": {"type", "message"}}`).
fn error_code(api: Api, body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if api.is_anthropic() {
        return v["error"]["type"].as_str().filter(|_| v["type"] == "error").map(str::to_owned);
    }
    Some(v["error"]["code"].as_str()?.to_owned())
}

/// A body of about `size` bytes: valid chat JSON padded with blanks, chat JSON cut short, or junk.
fn request_body() -> impl Strategy<Value = Vec<u8>> {
    let size = prop_oneof![0usize..64, (LIMIT - 8)..(LIMIT + 8), (LIMIT + 1)..(3 * LIMIT)];
    let kind = prop_oneof![2 => Just(0u8), 1 => Just(1), 1 => Just(2)];
    (size, kind, any::<u8>(), any::<bool>()).prop_map(|(size, kind, junk, stream)| {
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream})
            .to_string();
        let mut b = match kind {
            0 => chat.into_bytes(),
            1 => chat.as_bytes()[..chat.len() / 2].to_vec(),
            _ => vec![junk; size],
        };
        b.resize(size.max(b.len()), b' ');
        b
    })
}

fn request_id() -> impl Strategy<Value = Option<Vec<u8>>> {
    let byte = prop_oneof![8 => 0x21u8..0x7f, 1 => Just(b' '), 1 => 0x80u8..=0xff];
    let long = (prop::collection::vec(byte.clone(), 1..4), 250usize..262)
        .prop_map(|(p, n)| p.iter().cycle().take(n).copied().collect());
    prop::option::of(prop_oneof![prop::collection::vec(byte, 0..10), long])
}

#[test]
fn request_bodies_around_the_limit_get_the_status_derive_gives_them() {
    let rt = Runtime::new().unwrap();
    let d = rt.block_on(deploy());
    let cases = (
        prop::sample::select(Api::ALL.to_vec()),
        request_body(),
        proptest::option::of(prop::collection::vec(any::<usize>(), 0..6)),
        request_id(),
    );
    let mut runner = runner(96, "proptest-regressions/http_fuzz_requests.txt");
    let result = runner.run(&cases, |(api, body, cuts, id)| {
        let mut headers = HeaderMap::new();
        if let Some(v) = id.as_ref().and_then(|id| HeaderValue::from_bytes(id).ok()) {
            headers.insert("x-request-id", v);
        }
        // The proxy sees the field value without its leading and trailing whitespace, which HTTP
        // drops (RFC 9110, section 5.5): derive what it sees.
        let mut received = HeaderMap::new();
        if let Some(v) = id.as_ref().and_then(|id| HeaderValue::from_bytes(id.trim_ascii()).ok())
            && headers.contains_key("x-request-id")
        {
            received.insert("x-request-id", v);
        }
        let derived = derive(api, &received, &body);
        let sent_id = received
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 256);
        if let (Ok(f), Some(_)) = (&derived, sent_id) {
            let script = Script { status: 200, chunks: vec![b"ok".to_vec()], length: true };
            d.scripts.lock().unwrap().insert(f.request_id.as_str().to_owned(), script);
        }
        let (status, head, answer) = rt.block_on(d.post(api.path(), &headers, body.clone(), cuts));
        match derived {
            _ if body.len() > LIMIT => {
                prop_assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
                prop_assert_eq!(error_code(api, &answer), Some("request_too_large".to_owned()));
            }
            Err(e) => {
                prop_assert_eq!(status, e.status(), "{}", String::from_utf8_lossy(&answer));
                let invalid = if api.is_anthropic() { "invalid_request_error" } else { "invalid_request" };
                prop_assert_eq!(error_code(api, &answer), Some(invalid.to_owned()));
            }
            Ok(_) => prop_assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&answer)),
        }
        let echoed = head.get("x-request-id").and_then(|v| v.to_str().ok());
        prop_assert!(echoed.is_some(), "every answer names its request");
        if let Some(id) = sent_id {
            prop_assert_eq!(echoed, Some(id));
        }
        Ok(())
    });
    result.unwrap();
    rt.block_on(d.nothing_booked());
}

/// SSE as a worker may write it: events, comments, CRLF, `[DONE]`, and bytes that are none.
fn sse() -> impl Strategy<Value = Vec<u8>> {
    let event = prop_oneof![
        "[a-z ]{0,20}".prop_map(
            |t| format!("data: {}\n\n", json!({"choices": [{"delta": {"content": t}}]})).into_bytes()
        ),
        Just(b"data: {\"usage\":{\"prompt_tokens\":3}}\r\n\r\n".to_vec()),
        Just(b": keep-alive\n\n".to_vec()),
        Just(b"event: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n".to_vec()),
        Just(b"data: [DONE]\n\n".to_vec()),
        prop::collection::vec(any::<u8>(), 0..16),
    ];
    prop::collection::vec(event, 0..8).prop_map(|e| e.concat())
}

/// A worker's error body and the message the client must see (`false`: a prefix of it).
fn error_body() -> impl Strategy<Value = (Vec<u8>, String, bool)> {
    let text = "[ -~]{0,24}";
    prop_oneof![
        text.prop_map(|m| (json!({"error": {"message": m}}).to_string().into_bytes(), m, true)),
        text.prop_map(|m| (
            json!({"object": "error", "message": m, "code": 400}).to_string().into_bytes(),
            m,
            true
        )),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|mut b| {
            if b.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{') {
                b.insert(0, b'x');
            }
            let m = String::from_utf8_lossy(&b).trim().to_owned();
            (b, m, true)
        }),
        Just((vec![b'x'; 17 << 10], "(unreadable error body".to_owned(), false)),
    ]
}

#[test]
fn worker_answers_reach_the_client_as_the_worker_sent_them() {
    let rt = Runtime::new().unwrap();
    let d = rt.block_on(deploy());
    let status = prop::sample::select(vec![200u16, 200, 200, 400, 401, 404, 422]);
    let cases = (
        status,
        sse(),
        error_body(),
        prop::collection::vec(any::<usize>(), 0..8),
        any::<bool>(),
        any::<bool>(),
    );
    let n = std::cell::Cell::new(0u32);
    let mut runner = runner(96, "proptest-regressions/http_fuzz_answers.txt");
    let result = runner.run(&cases, |(status, sse, (error, message, exact), cuts, length, stream)| {
        n.set(n.get() + 1);
        let id = format!("answer-{}", n.get());
        let body = if status == 200 { sse } else { error };
        let script = Script { status, chunks: pieces(&body, &cuts), length };
        d.scripts.lock().unwrap().insert(id.clone(), script);
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_str(&id).unwrap());
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream});
        let (got, _, answer) =
            rt.block_on(d.post("/v1/chat/completions", &headers, chat.to_string().into_bytes(), None));
        prop_assert_eq!(got.as_u16(), status);
        if status == 200 {
            prop_assert_eq!(&answer[..], &body[..], "relayed byte for byte");
        } else {
            let v: Value = serde_json::from_slice(&answer).expect("an error JSON");
            let got = v["error"]["message"].as_str().unwrap_or_default();
            let head = format!("decode worker answered {}: ", StatusCode::from_u16(status).unwrap());
            prop_assert!(got.starts_with(&head), "{got}");
            prop_assert!(!got.contains(&d.worker_url), "{got:?} names the worker's address");
            prop_assert!(got[head.len()..].starts_with(&message), "{got:?}, wanted {message:?}");
            prop_assert!(!exact || got.len() == head.len() + message.len(), "{got:?}, wanted {message:?}");
        }
        Ok(())
    });
    result.unwrap();
    rt.block_on(d.nothing_booked());
}
