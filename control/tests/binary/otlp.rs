//! Traces: with --otlp-endpoint, control exports its RPC spans over OTLP, continuing the
//! caller's W3C trace. The collector is in-process (no OTLP collector is installable here),
//! built from opentelemetry-proto's generated server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use infera_proto::pb::{self, router_client::RouterClient};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};
use tokio_stream::wrappers::TcpListenerStream;

use crate::process::*;

/// (span name, trace id) of every exported span.
type Spans = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

#[derive(Clone, Default)]
struct Collector(Spans);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        r: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for rs in &r.get_ref().resource_spans {
            for ss in &rs.scope_spans {
                spans.extend(ss.spans.iter().map(|s| (s.name.clone(), s.trace_id.clone())));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[test]
fn rpc_spans_reach_the_collector_under_the_callers_trace() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let collector = Collector::default();
    let endpoint = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = TraceServiceServer::new(collector.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        format!("http://{addr}")
    });

    let workers = stubbed_workers();
    let mut cmd = command(&workers.file);
    cmd.args(["--otlp-endpoint", &endpoint]);
    let mut control = Running::spawn(cmd);
    control.wait_targets(5);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    // A pick of a PickMany carries its own request's trace.
    let item_trace_id = "0af7651916cd43dd8448eb211c80319c";
    rt.block_on(async {
        let mut router = RouterClient::connect(control.url()).await.unwrap();
        let lease = router
            .open_lease(pb::OpenLeaseRequest { holder: "otlp-test".into(), ttl_ms: 0 })
            .await
            .unwrap()
            .into_inner()
            .lease_id;
        let pick = pb::PickRequest {
            lease_id: lease,
            request_id: "traced".into(),
            model: "m".into(),
            input_tokens: 10,
            session_key: String::new(),
            page_hashes: Vec::new(),
            fixed_page_hashes: Vec::new(),
            page_size: 0,
            exclude: Vec::new(),
            ..Default::default()
        };
        let item = pb::PickItem {
            kind: pb::PickKind::Decode as i32,
            pick: Some(pb::PickRequest { request_id: "traced-item".into(), ..pick.clone() }),
            trace_context: [("traceparent".to_owned(), format!("00-{item_trace_id}-b7ad6b7169203331-01"))]
                .into(),
        };
        let mut req = tonic::Request::new(pick);
        req.metadata_mut()
            .insert("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01").parse().unwrap());
        router.pick_decode(req).await.unwrap();
        let answer = router.pick_many(pb::PickManyRequest { picks: vec![item] }).await.unwrap().into_inner();
        assert!(matches!(answer.results[0].outcome, Some(pb::pick_result::Outcome::Picked(_))), "{answer:?}");
    });

    // Shutdown flushes the batch exporter.
    assert_eq!(control.terminate().code(), Some(0));
    let bytes =
        |hex: &str| (0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    let (expected, item_expected): (Vec<u8>, Vec<u8>) = (bytes(trace_id), bytes(item_trace_id));
    let traces =
        infera_testkit::eventually_blocking(Duration::from_secs(10), "the PickDecode spans exported", || {
            let spans = collector.0.lock().unwrap().clone();
            let traces: Vec<Vec<u8>> =
                spans.into_iter().filter(|(name, _)| name == "PickDecode").map(|(_, tid)| tid).collect();
            (traces.len() >= 2).then_some(traces)
        });
    assert!(traces.contains(&expected), "the unary pick's span continues the caller's trace");
    assert!(traces.contains(&item_expected), "the PickMany pick's span continues its own request's trace");
    let many = collector.0.lock().unwrap().iter().any(|(name, _)| name == "PickMany");
    assert!(many, "the PickMany call has its span too");
}
