//! An in-process control on loopback port 0, driven over real gRPC.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use infera_control::{Args, Config, Listeners};
use infera_proto::pb::{self, admin_client::AdminClient, router_client::RouterClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tonic::transport::Channel;

/// One decode worker `d` with `ranks` DP ranks for model `m`, and one prefill `p` with 2.
pub(crate) fn pd_workers(ranks: u32) -> String {
    format!(
        "[[workers]]\nid = 'p'\nrole = 'prefill'\nurl = 'http://127.0.0.1:30000'\nmodel = 'm'\ndp_size = 2\n\
         [[workers]]\nid = 'd'\nrole = 'decode'\nurl = 'http://127.0.0.1:30001'\nmodel = 'm'\ndp_size = {ranks}\n\
         [[workers]]\nid = 'x'\nrole = 'mixed'\nurl = 'http://127.0.0.1:30002'\nmodel = 'agg'\ndp_size = 2\n"
    )
}

/// A running control.
pub(crate) struct Control {
    pub(crate) addr: SocketAddr,
    pub(crate) metrics_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _workers: Option<tempfile::NamedTempFile>,
}

impl Control {
    /// Starts control on `workers` with extra flags, exactly as the binary would parse them.
    pub(crate) async fn start(workers: &str, flags: &[&str]) -> Self {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), workers).unwrap();
        let path = file.path().to_str().unwrap().to_owned();
        let mut argv = vec!["--workers", path.as_str()];
        argv.extend_from_slice(flags);
        Self::start_with(&argv, Some(file)).await
    }

    /// Starts control with exactly these flags (plus `--seed 7`).
    pub(crate) async fn start_with(flags: &[&str], workers: Option<tempfile::NamedTempFile>) -> Self {
        let mut argv = vec!["infera-control", "--seed", "7"];
        argv.extend_from_slice(flags);
        let config = Config::try_from(Args::try_parse_from(argv).unwrap()).unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, metrics_addr) = (grpc.local_addr().unwrap(), metrics.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(infera_control::run(Listeners { grpc, metrics }, config, shutdown));
        Self { addr, metrics_addr, stop: Some(stop), task: Some(task), _workers: workers }
    }

    /// A channel on its own connection.
    pub(crate) async fn channel(&self) -> Channel {
        // The listener is bound and accepting is queued by the kernel: connecting succeeds
        // without waiting for the server task to be scheduled.
        Channel::from_shared(format!("http://{}", self.addr)).unwrap().connect().await.unwrap()
    }

    pub(crate) async fn router(&self) -> RouterClient<Channel> {
        RouterClient::new(self.channel().await)
    }

    pub(crate) async fn admin(&self) -> AdminClient<Channel> {
        AdminClient::new(self.channel().await)
    }

    /// Opens a lease with `ttl_ms` (0 = default) and returns its id.
    pub(crate) async fn lease(&self, ttl_ms: u32) -> String {
        let req = pb::OpenLeaseRequest { holder: "test-proxy".into(), ttl_ms };
        self.router().await.open_lease(req).await.unwrap().into_inner().lease_id
    }

    /// The OpenMetrics text.
    pub(crate) async fn metrics(&self) -> String {
        let mut s = tokio::net::TcpStream::connect(self.metrics_addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }

    /// Stops control and waits for it to finish cleanly.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub(crate) fn pick(lease: &str, model: &str, tokens: u64) -> pb::PickRequest {
    pb::PickRequest {
        lease_id: lease.into(),
        request_id: format!("req-{tokens}"),
        model: model.into(),
        input_tokens: tokens,
        session_key: String::new(),
        page_hashes: Vec::new(),
        page_size: 0,
    }
}

pub(crate) fn release(id: &str, reason: pb::ReleaseReason) -> pb::ReleaseRequest {
    pb::ReleaseRequest { reservation_id: id.into(), reason: reason as i32 }
}

pub(crate) fn target_of(resp: &pb::PickResponse) -> (String, u32) {
    let t = resp.target.as_ref().unwrap();
    (t.worker_id.clone(), t.dp_rank)
}

/// Held requests per rank of worker `worker`, from Admin.ListTargets.
pub(crate) async fn held(control: &Control, worker: &str) -> Vec<(u64, u64)> {
    let rows =
        control.admin().await.list_targets(pb::ListTargetsRequest::default()).await.unwrap().into_inner();
    rows.targets
        .iter()
        .filter(|t| t.target.as_ref().unwrap().worker_id == worker)
        .map(|t| (t.held_requests, t.booked_input_tokens))
        .collect()
}

/// Polls `check` until it holds or `deadline` passes.
pub(crate) async fn eventually<F, Fut>(deadline: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The value of one sample line in OpenMetrics text, e.g. `infera_router_leases 1`.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap())
}
