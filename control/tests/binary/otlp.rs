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

    let workers = workers_file(WORKERS);
    let mut cmd = command(&workers);
    cmd.args(["--otlp-endpoint", &endpoint]);
    let mut control = Running::spawn(cmd);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    rt.block_on(async {
        let mut router = RouterClient::connect(control.url()).await.unwrap();
        let lease = router
            .open_lease(pb::OpenLeaseRequest { holder: "otlp-test".into(), ttl_ms: 0 })
            .await
            .unwrap()
            .into_inner()
            .lease_id;
        let mut req = tonic::Request::new(pb::PickRequest {
            lease_id: lease,
            request_id: "traced".into(),
            model: "m".into(),
            input_tokens: 10,
            session_key: String::new(),
            page_hashes: Vec::new(),
            fixed_page_hashes: Vec::new(),
            page_size: 0,
            exclude: Vec::new(),
        });
        req.metadata_mut()
            .insert("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01").parse().unwrap());
        router.pick_decode(req).await.unwrap();
    });

    // Shutdown flushes the batch exporter.
    assert_eq!(control.terminate().code(), Some(0));
    let expected =
        (0..16).map(|i| u8::from_str_radix(&trace_id[2 * i..2 * i + 2], 16).unwrap()).collect::<Vec<_>>();
    let tid =
        infera_testkit::eventually_blocking(Duration::from_secs(10), "a PickDecode span exported", || {
            let spans = collector.0.lock().unwrap().clone();
            spans.into_iter().find(|(name, _)| name == "PickDecode").map(|(_, tid)| tid)
        });
    assert_eq!(tid, expected, "the span continues the caller's trace");
}
