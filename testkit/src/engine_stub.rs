//! Engines that answer only `GET /server_info`, for the tests and benchmarks that route without
//! sending a request to a worker: control reads every worker's `/server_info` before routing to
//! it, so a record needs an engine behind its URL even when no request ever reaches it.
//!
//! Each stub listens on a port-0 socket of its own and describes its record in the shape SGLang
//! 0.5.23 serves (the top-level keys of `sglang/srt/entrypoints/http_server.py`'s `server_info`
//! that control reads): every other path is a 404. A test that wants an engine which disagrees
//! with its record, or a real API, starts a sim ([`crate::sim`]) instead.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use infera_proto::types::{RegisteredWorker, Role, WorkerRecord};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// SGLang's `--disaggregation-transfer-backend` default.
const DEFAULT_TRANSFER_BACKEND: &str = "mooncake";
/// SGLang's `--kv-cache-dtype` default.
const DEFAULT_KV_CACHE_DTYPE: &str = "auto";

/// Running stubs, one per record; stopped when dropped.
#[derive(Debug)]
pub struct EngineStubs {
    /// The records, each with its URL moved to its stub.
    pub records: Vec<RegisteredWorker>,
    tasks: Vec<JoinHandle<()>>,
}

impl EngineStubs {
    /// A stub for each record, on loopback port 0; the records keep everything but their URL.
    ///
    /// # Errors
    /// When a socket cannot be bound.
    pub async fn start(records: impl IntoIterator<Item = RegisteredWorker>) -> anyhow::Result<Self> {
        let (mut out, mut tasks) = (Vec::new(), Vec::new());
        for mut record in records {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            record.url = format!("http://{}", listener.local_addr()?);
            tasks.push(tokio::spawn(serve(listener, server_info(&record))));
            out.push(record);
        }
        Ok(Self { records: out, tasks })
    }

    /// [`EngineStubs::start`] for records that give their ranks.
    ///
    /// # Errors
    /// When a socket cannot be bound.
    pub async fn start_records(records: impl IntoIterator<Item = WorkerRecord>) -> anyhow::Result<Self> {
        Self::start(records.into_iter().map(RegisteredWorker::from)).await
    }

    /// The records with their stubs' URLs, ranks as given (1 where left out).
    pub fn worker_records(&self) -> Vec<WorkerRecord> {
        self.records.iter().map(|r| r.clone().with_discovered_ranks(r.dp_size.unwrap_or(1))).collect()
    }

    /// The stub URL of worker `id`.
    ///
    /// # Panics
    /// When no record has that id.
    pub fn url(&self, id: &str) -> &str {
        &self.records.iter().find(|r| r.id.as_str() == id).expect("a stubbed worker").url
    }
}

impl Drop for EngineStubs {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// The `/server_info` an engine running `record` answers: its model, ranks (`dp_size` as
/// replicas, `attn_dp_size` 1; 1 where the record leaves it out), page size, mode, transfer backend
/// and KV cache dtype (SGLang's defaults where the record says nothing).
pub fn server_info(record: &RegisteredWorker) -> Value {
    let mode = match record.role {
        Role::Prefill => "prefill",
        Role::Decode => "decode",
        Role::Mixed => "null",
    };
    json!({
        "model_path": record.model.as_str(),
        "served_model_name": record.model.as_str(),
        "tp_size": 1,
        "dp_size": record.dp_size.unwrap_or(1),
        "attn_dp_size": 1,
        "page_size": record.page_size,
        "disaggregation_mode": mode,
        "disaggregation_bootstrap_port": record.bootstrap_port,
        "disaggregation_transfer_backend":
            record.transfer_backend.as_deref().unwrap_or(DEFAULT_TRANSFER_BACKEND),
        "kv_cache_dtype": record.kv_cache_dtype.as_deref().unwrap_or(DEFAULT_KV_CACHE_DTYPE),
        "version": record.sglang_version.as_deref().unwrap_or("0.5.23"),
    })
}

/// Answers `GET /server_info` with `info` on every connection, 404 otherwise.
pub(crate) async fn serve(listener: TcpListener, info: Value) {
    let body = Bytes::from(info.to_string());
    while let Ok((stream, _)) = listener.accept().await {
        let body = body.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let found = req.method() == http::Method::GET && req.uri().path() == "/server_info";
            let (status, body) =
                if found { (StatusCode::OK, body.clone()) } else { (StatusCode::NOT_FOUND, Bytes::new()) };
            let mut resp = Response::new(Full::new(body));
            *resp.status_mut() = status;
            resp.headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            std::future::ready(Ok::<_, Infallible>(resp))
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
        );
    }
}
