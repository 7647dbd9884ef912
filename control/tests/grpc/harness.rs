//! An in-process control on loopback port 0 (the workspace's test kit), driven over real gRPC.
//! Control routes to a worker only once its `/server_info` has answered, so the workers of a
//! workers file are stood in for by the kit's engine stubs ([`EngineStubs`]).

use infera_proto::pb;
pub(crate) use infera_testkit::eventually;
use infera_testkit::{ControlSpec, EngineStubs, Workers};

/// One decode worker `d` with `ranks` DP ranks for model `m`, one prefill `p` with 2, and a mixed
/// `x` with 2 for model `agg` (their URLs are replaced by engine stubs' when started here).
pub(crate) fn pd_workers(ranks: u32) -> String {
    format!(
        "[[workers]]\nid = 'p'\nrole = 'prefill'\nurl = 'http://127.0.0.1:30000'\nmodel = 'm'\ndp_size = 2\n\
         [[workers]]\nid = 'd'\nrole = 'decode'\nurl = 'http://127.0.0.1:30001'\nmodel = 'm'\ndp_size = {ranks}\n\
         [[workers]]\nid = 'x'\nrole = 'mixed'\nurl = 'http://127.0.0.1:30002'\nmodel = 'agg'\ndp_size = 2\n"
    )
}

/// A running control, started with the workspace's test kit, and the engine stubs of its workers.
pub(crate) struct Control(pub(crate) infera_testkit::Control, pub(crate) Option<EngineStubs>);

impl std::ops::Deref for Control {
    type Target = infera_testkit::Control;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Control {
    /// Starts control on `workers` (a workers file's text, each worker's URL replaced by an
    /// engine stub's that describes it) with extra flags, exactly as the binary would parse them
    /// (plus `--seed 7`), and waits until every worker is routable.
    pub(crate) async fn start(workers: &str, flags: &[&str]) -> Self {
        let (engines, spec) = stubbed(workers).await;
        let targets: usize = engines.records.iter().map(|r| r.dp_size.unwrap_or(1) as usize).sum();
        let control = spec.flags(flags.iter().copied()).start().await.unwrap();
        control.wait_targets(targets).await.unwrap();
        Self(control, Some(engines))
    }

    /// The URL of worker `id`'s engine stub.
    pub(crate) fn url_of(&self, id: &str) -> &str {
        self.1.as_ref().expect("started on stubbed workers").url(id)
    }

    /// Starts control without a workers file, with exactly these flags (plus `--seed 7`).
    /// With `--etcd` it is a replica: this waits until it leads (it books only then).
    pub(crate) async fn start_with(flags: &[&str]) -> Self {
        let control = ControlSpec::new(Workers::None).flags(flags.iter().copied()).start().await.unwrap();
        if flags.contains(&"--etcd") {
            control.wait_leading().await.unwrap();
        }
        Self(control, None)
    }

    /// Opens a lease with `ttl_ms` (0 = default) and returns its id.
    pub(crate) async fn lease(&self, ttl_ms: u32) -> String {
        let req = pb::OpenLeaseRequest { holder: "test-proxy".into(), ttl_ms };
        self.router().await.open_lease(req).await.unwrap().into_inner().lease_id
    }

    /// The OpenMetrics text.
    pub(crate) async fn metrics(&self) -> String {
        self.0.metrics().await.unwrap()
    }

    /// Stops control and waits for it to finish cleanly.
    pub(crate) async fn stop(mut self) {
        self.0.stop().await.unwrap();
    }
}

/// Engine stubs for the workers of a workers file's text, and a control spec listing them.
pub(crate) async fn stubbed(workers: &str) -> (EngineStubs, ControlSpec) {
    let registered =
        infera_control::workers_file::parse(workers, std::path::Path::new("test workers")).unwrap();
    let engines = EngineStubs::start(registered).await.unwrap();
    let spec = ControlSpec::new(Workers::Registered(engines.records.clone()));
    (engines, spec)
}

/// `msg` with the admin token `token` (`authorization: Bearer …`).
pub(crate) fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

pub(crate) fn pick(lease: &str, model: &str, tokens: u64) -> pb::PickRequest {
    pb::PickRequest {
        lease_id: lease.into(),
        request_id: format!("req-{tokens}"),
        model: model.into(),
        input_tokens: tokens,
        session_key: String::new(),
        page_hashes: Vec::new(),
        fixed_page_hashes: Vec::new(),
        page_size: 0,
        exclude: Vec::new(),
        ..Default::default()
    }
}

pub(crate) fn release(id: &str, reason: pb::ReleaseReason) -> pb::ReleaseRequest {
    pb::ReleaseRequest { reservation_id: id.into(), reason: reason as i32, failure: 0 }
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

/// The value of one sample line in OpenMetrics text, e.g. `infera_router_leases 1`.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap())
}
