//! Send the legs: the client's JSON plus SGLang's PD fields, both legs at once, the decode
//! head (and a stream's first data frame: [`first_byte`](crate::first_byte)) awaited while a
//! prefill failure or the attempt's deadline fails the attempt.
//!
//! Injected keys, the PD fields SGLang 0.5.23 takes on every generation request
//! (python/sglang/srt/managers/io_struct.py `GenerateReqInput`,
//! python/sglang/srt/entrypoints/openai/protocol.py `PDRoutingFields`):
//! - both legs: `bootstrap_host` (prefill URL host), `bootstrap_port`, `bootstrap_room` (random
//!   u63; with several prefill ranks `room % N` is the prefill's rank, as SGLang's
//!   `follow_bootstrap_room` requires), `routed_dp_rank` (each leg its own rank);
//! - decode: `disagg_prefill_dp_rank`;
//! - `rid` = the client's own, else the request id; a retry's gets `-retry{n}` ([`engine_rid`]);
//!   a batch keeps SGLang's own per-item ids.
//!
//! Headers: `content-type`, the client's `authorization`, `accept` and `x-request-id`, and the
//! W3C trace context — the proxy's span when OTLP export is on, else the client's unchanged.

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::Full;
use hyper::body::Incoming;
use infera_proto::types::{Api, RequestId};
use serde_json::{Map, Value, json};

use crate::error::{Leg, ProxyError, upstream_error_text};
use crate::facts::Facts;
use crate::first_byte::{self, Urls};
use crate::prefill::PrefillLeg;
use crate::request_legs::RequestLegs;
use crate::route::Route;
use crate::targets::Endpoint;
use crate::upstream::Upstreams;

/// A request once its first byte arrived.
#[derive(Debug)]
pub struct Dispatched {
    /// The decode response (head received, body streaming after `first`).
    pub response: Response<Incoming>,
    /// A stream's first data frame, read from `response` already (`None`: not a stream, or
    /// one that ended without data).
    pub first: Option<hyper::body::Frame<Bytes>>,
    /// Its legs, until the answer ends.
    pub legs: RequestLegs,
}

/// The bodies of both legs, each the client's JSON with the keys the leg sets on top.
#[derive(Debug, Clone, PartialEq)]
pub struct LegBodies {
    /// Prefill body (PD only).
    pub prefill: Option<LegBody>,
    /// Decode body.
    pub decode: LegBody,
    /// The id both legs carry to the engines (`None`: a batch, whose items SGLang names).
    pub rid: Option<RequestId>,
}

/// One leg's body: the keys it sets over the client's body. The client's JSON tree is parsed
/// once and shared; each leg's bytes are written from it and these keys, never from a copy of
/// the tree (a 32 MiB prompt is not held three times).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LegBody {
    /// The keys this leg sets (a key the client sent too takes its place in the client's order).
    pub over: Map<String, Value>,
}

impl LegBody {
    /// The bytes sent: the client's members in their order, those `over` sets replaced, then
    /// `over`'s other keys.
    pub fn to_bytes(&self, base: &Map<String, Value>) -> Bytes {
        let merged = Merged { base, over: &self.over };
        Bytes::from(serde_json::to_vec(&merged).expect("a JSON map serialises"))
    }
}

/// A JSON object written as `base` with `over` on top, without building it.
struct Merged<'a> {
    base: &'a Map<String, Value>,
    over: &'a Map<String, Value>,
}

impl serde::Serialize for Merged<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let added = self.over.iter().filter(|(k, _)| !self.base.contains_key(*k));
        let mut map = s.serialize_map(Some(self.base.len() + added.clone().count()))?;
        for (k, v) in self.base {
            map.serialize_entry(k, self.over.get(k).unwrap_or(v))?;
        }
        for (k, v) in added {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The key SGLang takes a request's id under.
fn rid_key(api: Api) -> &'static str {
    if api == Api::Responses { "request_id" } else { "rid" }
}

/// The id the engines know attempt `attempt` (0: the first) of a request by: the client's own
/// `rid` if it set one, else the request id (a client's `x-request-id`, or the proxy's own); with
/// API keys scoped to the caller's tenant, `{tenant}/{id}`, so that one tenant's id cannot name,
/// collide with or abort another's on a shared engine; a retry's is suffixed `-retry{n}`. One id per
/// attempt: an abort meant for an earlier attempt (sent by id, maybe still on its way) must not
/// end the retry on the same worker, and SGLang refuses an id it still holds
/// (python/sglang/srt/managers/tokenizer_manager.py, "Duplicate request ID detected").
/// `None` for a batch.
pub fn engine_rid(facts: &Facts, attempt: u32) -> Option<RequestId> {
    if is_batch(facts) {
        return None;
    }
    let own = facts.body.get(rid_key(facts.api)).and_then(Value::as_str);
    let id = own.unwrap_or(facts.request_id.as_str());
    let base = match &facts.tenant {
        Some(tenant) => format!("{tenant}/{id}"),
        None => id.to_owned(),
    };
    Some(RequestId::new(if attempt == 0 { base } else { format!("{base}-retry{attempt}") }))
}

/// Builds the leg bodies of attempt `attempt` for a decode endpoint and, in PD, a prefill
/// endpoint; `room` is the random u63 (adjusted here for DP prefills).
pub fn leg_bodies(
    facts: &Facts,
    attempt: u32,
    prefill: Option<&Endpoint>,
    decode: &Endpoint,
    room: u64,
) -> LegBodies {
    let mut base = Map::new();
    // The id becomes SGLang's request id, so /abort_request can name it.
    let rid = engine_rid(facts, attempt);
    if let Some(rid) = &rid {
        base.insert(rid_key(facts.api).into(), json!(rid.as_str()));
    }
    let with_rank = |mut over: Map<String, Value>, e: &Endpoint| {
        if e.dp_size > 1 {
            over.insert("routed_dp_rank".into(), json!(e.rank.0));
        }
        LegBody { over }
    };
    let Some(p) = prefill else {
        return LegBodies { prefill: None, decode: with_rank(base, decode), rid };
    };
    let n = u64::from(p.dp_size.max(1));
    let room = room - room % n + u64::from(p.rank.0) % n;
    let host = p.url.parse::<http::Uri>().ok().and_then(|u| u.host().map(str::to_owned)).unwrap_or_default();
    base.insert("bootstrap_host".into(), json!(host));
    base.insert("bootstrap_port".into(), p.bootstrap_port.map_or(Value::Null, |port| json!(port)));
    base.insert("bootstrap_room".into(), json!(room));
    let prefill_body = with_rank(base.clone(), p);
    let mut decode_body = with_rank(base, decode);
    if p.dp_size > 1 {
        decode_body.over.insert("disagg_prefill_dp_rank".into(), json!(p.rank.0));
    }
    LegBodies { prefill: Some(prefill_body), decode: decode_body, rid }
}

fn is_batch(facts: &Facts) -> bool {
    let b = &facts.body;
    // SGLang's rerank takes no id (V1RerankReqInput): one pass per document.
    let pooled_batch = match facts.api {
        Api::Rerank => true,
        Api::Embeddings | Api::Classify => {
            matches!(b.get("input"), Some(Value::Array(a)) if a.iter().any(|x| !x.is_number()))
        }
        _ => false,
    };
    pooled_batch
        || b.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1)
        || matches!(b.get("prompt"), Some(Value::Array(a)) if a.iter().any(|x| !x.is_number()))
        || matches!(b.get("text"), Some(Value::Array(_)))
        || matches!(b.get("input_ids"), Some(Value::Array(a)) if a.first().is_some_and(Value::is_array))
}

/// A random room id in `[0, 2^63)`, as SGLang's routers make them.
pub fn new_room() -> u64 {
    rand::random::<u64>() & (i64::MAX as u64)
}

/// Sends both legs `route` picked, as attempt `attempt`. The prefill leg runs in its own task (and
/// releases its reservation); the decode head is awaited, then a stream's first data frame, and a
/// prefill failure or the deadline `attempt_timeout` meanwhile fails the attempt (blamed on the
/// leg that caused it). From here the legs are one [`RequestLegs`]: answered, they go on with the
/// answer; failed, both are released (the one that failed on its worker with how) and the
/// decode's worker is asked to abort.
pub async fn dispatch(
    up: &Upstreams,
    facts: &Facts,
    route: Route,
    headers: &http::HeaderMap,
    attempt: u32,
    attempt_timeout: Option<std::time::Duration>,
) -> Result<Dispatched, ProxyError> {
    let deadline = attempt_timeout.map(|t| (tokio::time::Instant::now() + t, t));
    let Route { prefill, decode, .. } = route;
    let decode_url = decode.endpoint.url.clone();
    let prefill_url = prefill.as_ref().map(|p| p.endpoint.url.clone());
    let urls = Urls { decode: &decode_url, prefill: prefill_url.as_deref() };
    let bodies =
        leg_bodies(facts, attempt, prefill.as_ref().map(|p| &p.endpoint), &decode.endpoint, new_room());
    let rid = bodies.rid.clone().unwrap_or_else(|| facts.request_id.clone());
    let decode_req = leg_request(&decode.endpoint, facts.api, headers, bodies.decode.to_bytes(&facts.body));
    let prefill = match (prefill, bodies.prefill) {
        (Some(pick), Some(body)) => {
            let req = leg_request(&pick.endpoint, facts.api, headers, body.to_bytes(&facts.body));
            let keep_logprobs = facts.api == Api::Generate && crate::prompt_logprobs::wanted(&facts.body);
            Some(PrefillLeg::spawn(up.clone(), pick, req, rid.clone(), keep_logprobs))
        }
        _ => None,
    };
    let mut legs = RequestLegs::new(up.client.clone(), decode, prefill, rid);
    let answered = async {
        let response = head(up, decode_req, legs.prefill_mut(), urls, deadline).await?;
        if !response.status().is_success() {
            let status = response.status();
            let body = upstream_error_text(response.into_body()).await;
            let e = ProxyError::UpstreamStatus { leg: Leg::Decode, url: decode_url.clone(), status, body };
            return Err(first_byte::blame(e, legs.prefill_mut(), urls, first_byte::Suspect::Decode).await);
        }
        if !facts.stream {
            return Ok((response, None));
        }
        let (parts, mut body) = response.into_parts();
        let first = first_byte::first_frame(&mut body, facts.api, legs.prefill_mut(), urls, deadline).await?;
        Ok((Response::from_parts(parts, body), first))
    };
    match answered.await {
        Ok((response, first)) => Ok(Dispatched { response, first, legs }),
        Err(e) => {
            // Whichever leg failed, the other one ends too; a decode that may have started
            // generating is asked to stop.
            // (A failed prefill leg counted itself.)
            if e.leg_failure().is_none_or(|(leg, _)| leg == Leg::Decode) {
                up.metrics.upstream_error(Leg::Decode);
            }
            legs.fail(&e);
            Err(e)
        }
    }
}

/// The decode answer's head, while a prefill failure or the deadline fails the attempt.
async fn head(
    up: &Upstreams,
    req: Request<Full<Bytes>>,
    mut prefill: Option<&mut PrefillLeg>,
    urls: Urls<'_>,
    deadline: Option<(tokio::time::Instant, std::time::Duration)>,
) -> Result<Response<Incoming>, ProxyError> {
    match first_byte::race(up.client.request(req), prefill.as_deref_mut(), urls, deadline).await? {
        Ok(response) => Ok(response),
        Err(e) => {
            let e = ProxyError::upstream(Leg::Decode, urls.decode, &e);
            Err(first_byte::blame(e, prefill, urls, first_byte::Suspect::Decode).await)
        }
    }
}

fn leg_request(
    endpoint: &Endpoint,
    api: Api,
    client_headers: &http::HeaderMap,
    bytes: Bytes,
) -> Request<Full<Bytes>> {
    let mut req = Request::post(format!("{}{}", endpoint.url, api.path()))
        .body(Full::new(bytes))
        .expect("a valid request");
    let headers = req.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    for name in [header::AUTHORIZATION, header::ACCEPT, http::HeaderName::from_static("x-request-id")] {
        if let Some(v) = client_headers.get(&name) {
            headers.insert(name, v.clone());
        }
    }
    trace_context(client_headers, headers);
    req
}

/// W3C trace-context headers.
const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// Writes the trace context of a leg: the proxy's span when it has one (OTLP export on; the
/// span continues the client's `traceparent`), else the client's `traceparent` and
/// `tracestate` unchanged, so the workers join the client's trace either way.
fn trace_context(client_headers: &http::HeaderMap, headers: &mut http::HeaderMap) {
    infera_runtime::telemetry::inject_headers(&tracing::Span::current(), headers);
    if headers.contains_key(TRACE_HEADERS[0]) {
        return;
    }
    for name in TRACE_HEADERS {
        if let Some(v) = client_headers.get(name) {
            headers.insert(name, v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;
    use infera_proto::types::{DpRank, Role, WorkerId};

    use super::*;
    use crate::facts::derive;

    /// What a leg sends, read back.
    fn sent(leg: &LegBody, facts: &Facts) -> Map<String, Value> {
        serde_json::from_slice(&leg.to_bytes(&facts.body)).unwrap()
    }

    #[test]
    fn a_key_the_client_sent_is_replaced_in_its_place_and_new_ones_follow() {
        let base: Map<String, Value> = serde_json::from_str(r#"{"a":1,"rid":"mine","b":2}"#).unwrap();
        let over: Map<String, Value> = serde_json::from_str(r#"{"rid":"r-1","room":7}"#).unwrap();
        let bytes = LegBody { over }.to_bytes(&base);
        assert_eq!(&bytes[..], br#"{"a":1,"rid":"r-1","b":2,"room":7}"#);
    }

    fn endpoint(worker: &str, port: Option<u16>, dp_size: u32, rank: u32) -> Endpoint {
        Endpoint {
            worker_id: WorkerId::new(worker),
            url: format!("http://10.0.0.{}:30000", rank + 1),
            bootstrap_port: port,
            dp_size,
            rank: DpRank(rank),
            role: if port.is_some() { Role::Prefill } else { Role::Decode },
        }
    }

    #[test]
    fn pd_bodies_carry_the_bootstrap_fields_and_ranks() {
        let facts = derive(
            Api::ChatCompletions,
            &HeaderMap::new(),
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
        )
        .unwrap();
        let (prefill, decode) = (endpoint("p", Some(8998), 4, 2), endpoint("d", None, 8, 5));
        let b = leg_bodies(&facts, 0, Some(&prefill), &decode, 1_000_001);
        let (p, d) = (sent(&b.prefill.unwrap(), &facts), sent(&b.decode, &facts));
        assert_eq!(p["bootstrap_room"], d["bootstrap_room"]);
        let room = p["bootstrap_room"].as_u64().unwrap();
        assert_eq!(room % 4, 2, "room % prefill ranks is the prefill rank");
        assert_eq!(p["bootstrap_host"], "10.0.0.3");
        assert_eq!(p["bootstrap_port"], 8998);
        assert_eq!((p["routed_dp_rank"].as_u64(), d["routed_dp_rank"].as_u64()), (Some(2), Some(5)));
        assert_eq!(d["disagg_prefill_dp_rank"], 2);
        assert!(p.get("disagg_prefill_dp_rank").is_none());
        assert_eq!(d["rid"], facts.request_id.as_str());
        assert_eq!(p["rid"], d["rid"], "both legs carry one id");
        let retry = leg_bodies(&facts, 2, Some(&prefill), &decode, 1_000_001);
        let retry_rid = format!("{}-retry2", facts.request_id.as_str());
        assert_eq!(
            (sent(&retry.decode, &facts)["rid"].as_str(), retry.rid.as_ref().map(RequestId::as_str)),
            (Some(&*retry_rid), Some(&*retry_rid))
        );
        // The client's keys come first, in their order.
        assert_eq!(d.keys().take(3).collect::<Vec<_>>(), ["model", "messages", "stream"]);
    }

    #[test]
    fn a_clients_own_rid_is_scoped_to_its_tenant() {
        let body = br#"{"model":"m","prompt":"x","rid":"mine"}"#;
        let mut facts = derive(Api::Completions, &HeaderMap::new(), body).unwrap();
        assert_eq!(engine_rid(&facts, 0).unwrap().as_str(), "mine", "one tenant: as sent");
        facts.tenant = Some("key-0a1b2c3d".into());
        assert_eq!(engine_rid(&facts, 0).unwrap().as_str(), "key-0a1b2c3d/mine");
        assert_eq!(engine_rid(&facts, 1).unwrap().as_str(), "key-0a1b2c3d/mine-retry1");
        let d = sent(&leg_bodies(&facts, 0, None, &endpoint("d", None, 1, 0), 7).decode, &facts);
        assert_eq!(d["rid"], "key-0a1b2c3d/mine", "the leg carries the scoped id");
    }

    #[test]
    fn without_a_span_context_the_client_trace_context_passes_through() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut client = HeaderMap::new();
        client.insert("traceparent", parent.parse().unwrap());
        client.insert("tracestate", "vendor=x".parse().unwrap());
        client.insert("x-request-id", "r-7".parse().unwrap());
        client.insert("cookie", "secret".parse().unwrap());
        let facts = derive(Api::Generate, &client, br#"{"text":"x"}"#).unwrap();
        let bodies = leg_bodies(&facts, 0, None, &endpoint("d", None, 1, 0), 7);
        // No OpenTelemetry layer is installed here: the proxy has no span context of its own.
        let req = leg_request(
            &endpoint("d", None, 1, 0),
            Api::Generate,
            &client,
            bodies.decode.to_bytes(&facts.body),
        );
        let h = req.headers();
        assert_eq!(
            (h["traceparent"].to_str().unwrap(), h["tracestate"].to_str().unwrap()),
            (parent, "vendor=x")
        );
        assert_eq!(h["x-request-id"], "r-7");
        assert!(h.get("cookie").is_none(), "only the listed headers are forwarded");
        let bytes = bodies.decode.to_bytes(&facts.body);
        let req = leg_request(&endpoint("d", None, 1, 0), Api::Generate, &HeaderMap::new(), bytes);
        assert!(req.headers().get("traceparent").is_none(), "no trace context is made up");
    }

    #[test]
    fn aggregated_bodies_have_no_bootstrap_fields() {
        let facts =
            derive(Api::Completions, &HeaderMap::new(), br#"{"model":"m","prompt":"x","n":2}"#).unwrap();
        let b = leg_bodies(&facts, 0, None, &endpoint("x", None, 1, 0), 7);
        assert!(b.prefill.is_none());
        let d = sent(&b.decode, &facts);
        assert!(d.get("bootstrap_room").is_none());
        assert!(d.get("routed_dp_rank").is_none(), "one rank: nothing to pin");
        assert!(d.get("rid").is_none(), "batches keep SGLang's own rids");
        assert_eq!(d, facts.body, "nothing set: the client's body as it came");
        assert!(new_room() < (1 << 63));
    }
}
