//! What sending legs to workers needs: the HTTP client to the workers, the link to control and
//! the metrics ([`Upstreams`]), asking a worker to abort a request ([`abort`]), and asking one a
//! question the proxy reads the JSON answer of itself ([`worker_json`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use infera_proto::types::RequestId;
use infera_runtime::serve::tls::TlsError;
use infera_runtime::serve::worker_client::{WorkerConnector, WorkerTlsFiles};
use serde_json::{Value, json};

use crate::control::ControlLink;
use crate::metrics::ProxyMetrics;

/// The HTTP client to the workers.
pub type WorkerClient = Client<WorkerConnector, Full<Bytes>>;

/// A client with `connect_timeout`, no Nagle delay and pooled keep-alive connections; `https://`
/// workers over TLS with `tls` (`--worker-ca`), never in plain text.
///
/// # Errors
/// When a TLS file cannot be read or used.
pub fn worker_client(
    connect_timeout: Duration,
    tls: Option<&WorkerTlsFiles>,
) -> Result<WorkerClient, TlsError> {
    let connector = WorkerConnector::new(Some(connect_timeout), tls)?;
    Ok(Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(connector))
}

/// What dispatching needs.
#[derive(Debug, Clone)]
pub struct Upstreams {
    /// The HTTP client every leg is sent with.
    pub client: WorkerClient,
    /// Picks and releases.
    pub link: Arc<ControlLink>,
    /// The proxy's metrics.
    pub metrics: Arc<ProxyMetrics>,
}

/// Asks a worker to abort a request (SGLang `POST /abort_request`), in the background.
pub fn abort(client: &WorkerClient, url: &str, rid: &RequestId) {
    let body = json!({"rid": rid.as_str(), "abort_all": false}).to_string();
    let req = Request::post(format!("{url}/abort_request"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request");
    let client = client.clone();
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(2), client.request(req)).await;
    });
}

/// How long a worker has to answer a question the proxy asks for itself ([`worker_json`]).
pub const WORKER_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `req` to a worker and reads its answer as JSON, within [`WORKER_ANSWER_TIMEOUT`]; the
/// error says why not (the send, a status that is not a success, the body, the JSON, the time).
pub async fn worker_json(client: &WorkerClient, req: Request<Full<Bytes>>) -> Result<Value, String> {
    let answer = async {
        let response = client.request(req).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        if !status.is_success() {
            return Err(format!("answered {status}"));
        }
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    };
    tokio::time::timeout(WORKER_ANSWER_TIMEOUT, answer)
        .await
        .map_err(|_| format!("no answer in {WORKER_ANSWER_TIMEOUT:?}"))?
}
