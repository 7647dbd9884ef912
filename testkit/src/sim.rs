//! Emulated SGLang workers described with the launcher's typed SGLang arguments
//! ([`infera_launcher::sglang::SglangArgs`]), so a test's sim gets the command line a deployment
//! file would give it, spelled for its SGLang version, and its worker record from the same
//! plan the launcher registers ([`infera_launcher::records::worker_record`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use infera_launcher::WorkerPlan;
use infera_launcher::records::worker_record;
use infera_launcher::sglang::{
    Disaggregation, DisaggregationMode, Graphs, KvEvents, LoadEvents, Parallel, SchedulePolicy, Scheduling,
    Server as SglangServer, SglangArgs, Speculative, SpeculativeAlgorithm,
};
use infera_launcher::version::SglangVersion;
use infera_proto::types::{KvEventsSource, Role, WorkerRecord};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::http;
use crate::node::Node;
use crate::process::{Process, ProcessSpec, Rebind, binary, set_flag};
use crate::server::Server;

/// One sim to start.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// The worker id (its record's `id`).
    pub name: String,
    /// Prefill, decode or mixed.
    pub role: Role,
    /// Its SGLang command line; ports 0 are picked when it starts.
    pub args: SglangArgs,
    /// `--sim-*` flags, after the SGLang ones.
    pub sim: Vec<String>,
    /// `--sim-params` as TOML text, written to a file that lives as long as the sim.
    pub params: Option<String>,
}

impl SimSpec {
    /// A worker of `role` serving `model` with one rank, seed 7, no time compression.
    pub fn new(name: &str, role: Role, model: &str) -> Self {
        let mode = match role {
            Role::Prefill => Some(DisaggregationMode::Prefill),
            Role::Decode => Some(DisaggregationMode::Decode),
            Role::Mixed => None,
        };
        let args = SglangArgs {
            version: SglangVersion::NEWEST,
            server: SglangServer {
                model_path: format!("/models/{model}"),
                served_model_name: Some(model.to_owned()),
                host: "127.0.0.1".to_owned(),
                port: 0,
                trust_remote_code: false,
                context_length: None,
                page_size: None,
                enable_metrics: false,
            },
            parallel: Parallel { tp: 1, pp: 1, dp: 1, attn_dp: 1 },
            disaggregation: mode.map(|mode| Disaggregation {
                mode,
                bootstrap_port: (mode == DisaggregationMode::Prefill).then_some(0),
                backend: None,
                ib_devices: Vec::new(),
            }),
            scheduling: Scheduling::default(),
            graphs: Graphs::default(),
            hicache: None,
            speculative: None,
            kv_events: None,
            load_events: None,
            extra: Vec::new(),
        };
        Self { name: name.to_owned(), role, args, sim: Vec::new(), params: None }.seed(7)
    }

    /// A prefill worker.
    pub fn prefill(name: &str, model: &str) -> Self {
        Self::new(name, Role::Prefill, model)
    }

    /// A decode worker with `ranks` attention-DP ranks.
    pub fn decode(name: &str, model: &str, ranks: u32) -> Self {
        Self::new(name, Role::Decode, model).ranks(ranks)
    }

    /// An aggregated worker with `ranks` attention-DP ranks.
    pub fn mixed(name: &str, model: &str, ranks: u32) -> Self {
        Self::new(name, Role::Mixed, model).ranks(ranks)
    }

    /// `ranks` attention-DP ranks over TP `ranks` (one rank: no DP attention).
    pub fn ranks(mut self, ranks: u32) -> Self {
        self.args.parallel = Parallel { tp: ranks.max(1), pp: 1, dp: 1, attn_dp: ranks.max(1) };
        self
    }

    /// Tensor parallel size, keeping the ranks.
    pub fn tp(mut self, tp: u32) -> Self {
        self.args.parallel.tp = tp;
        self
    }

    /// `--model-path` (a tokenizer directory makes the sim tokenize like SGLang).
    pub fn model_path(mut self, path: impl Into<String>) -> Self {
        self.args.server.model_path = path.into();
        self
    }

    /// `--page-size`.
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.args.server.page_size = Some(page_size);
        self
    }

    /// `--chunked-prefill-size`.
    pub fn chunked_prefill(mut self, tokens: i64) -> Self {
        self.args.scheduling.chunked_prefill_size = Some(tokens);
        self
    }

    /// `--schedule-policy`.
    pub fn schedule_policy(mut self, policy: SchedulePolicy) -> Self {
        self.args.scheduling.schedule_policy = Some(policy);
        self
    }

    /// EAGLE speculative decoding with these steps, top-k and draft tokens.
    pub fn eagle(mut self, num_steps: u32, eagle_topk: u32, num_draft_tokens: u32) -> Self {
        self.args.speculative = Some(Speculative {
            algorithm: SpeculativeAlgorithm::Eagle,
            num_steps,
            eagle_topk,
            num_draft_tokens,
            draft_model_path: None,
        });
        self
    }

    /// Publishes KV events (OS-picked PUB and replay ports) under `topic`.
    pub fn kv_events(mut self, topic: &str) -> Self {
        self.args.kv_events = Some(KvEvents { port: 0, replay_port: 0, topic: topic.to_owned() });
        self
    }

    /// Each rank also publishes its load on its own socket (`--load-publish-endpoint`, an
    /// OS-picked port); needs [`SimSpec::kv_events`], as in SGLang.
    pub fn load_events(mut self) -> Self {
        self.args.load_events = Some(LoadEvents { port: 0 });
        self
    }

    /// More SGLang flags, verbatim.
    pub fn extra<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.args.extra.extend(flags.into_iter().map(Into::into));
        self
    }

    /// A `--sim-*` flag (or any flag the sim takes) with its value.
    pub fn sim_flag(mut self, flag: &str, value: impl ToString) -> Self {
        set_flag(&mut self.sim, flag, value.to_string());
        self
    }

    /// `--sim-seed`.
    pub fn seed(self, seed: u64) -> Self {
        self.sim_flag("--sim-seed", seed)
    }

    /// `--sim-speedup`.
    pub fn speedup(self, speedup: f64) -> Self {
        self.sim_flag("--sim-speedup", speedup)
    }

    /// `--sim-params` with this TOML.
    pub fn params(mut self, toml: impl Into<String>) -> Self {
        self.params = Some(toml.into());
        self
    }

    /// The plan of this worker on these ports, as the launcher would have it.
    pub fn plan(&self, port: u16, bootstrap_port: Option<u16>) -> WorkerPlan {
        let mut args = self.args.clone();
        args.server.port = port;
        if let Some(d) = &mut args.disaggregation {
            d.bootstrap_port = bootstrap_port.or(d.bootstrap_port);
        }
        WorkerPlan {
            name: self.name.clone(),
            role: self.role,
            host: args.server.host.clone(),
            gpus: Vec::new(),
            program: vec!["infera-sim".to_owned()],
            args,
            env: BTreeMap::new(),
        }
    }

    /// Serves on `host` (an address of this machine) instead of loopback.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.args.server.host = host.into();
        self
    }

    /// Its worker record were it serving on `port` (for a registry told of it before it starts).
    pub fn record_at(&self, port: u16) -> WorkerRecord {
        worker_record(&self.plan(port, None))
    }

    fn argv(&self, plan: &WorkerPlan, params: Option<&tempfile::NamedTempFile>) -> Vec<String> {
        let mut argv = plan.args.render();
        argv.extend(self.sim.iter().cloned());
        if let Some(p) = params {
            argv.extend(["--sim-params".to_owned(), p.path().display().to_string()]);
        }
        argv
    }

    fn params_file(&self) -> anyhow::Result<Option<tempfile::NamedTempFile>> {
        let Some(text) = &self.params else { return Ok(None) };
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), text)?;
        Ok(Some(file))
    }

    /// The sim's configuration on these ports, as `infera-sim` would parse its command line,
    /// for a caller that runs it itself; the params file must live as long as the sim.
    ///
    /// # Errors
    /// When the command line does not parse or validate.
    pub fn config(&self, port: u16, bootstrap_port: Option<u16>) -> anyhow::Result<Prepared> {
        let plan = self.plan(port, bootstrap_port);
        let params = self.params_file()?;
        let mut argv = vec!["infera-sim".to_owned()];
        argv.extend(self.argv(&plan, params.as_ref()));
        let config = infera_sim::SimConfig::from_argv(argv)?;
        Ok(Prepared { config, plan, params })
    }

    /// Starts it in this process on port-0 listeners.
    ///
    /// # Errors
    /// When the command line does not parse or a socket cannot be bound.
    pub async fn start(self) -> anyhow::Result<Sim> {
        let host = self.args.server.host.clone();
        self.start_on(TcpListener::bind((host.as_str(), 0)).await?).await
    }

    /// Starts it in this process on a listener bound earlier (a worker that starts answering on
    /// an address others were given before it served), its bootstrap listener on port 0.
    ///
    /// # Errors
    /// When the command line does not parse or a socket cannot be bound.
    pub async fn start_on(self, http: TcpListener) -> anyhow::Result<Sim> {
        let bootstrap = if self.role == Role::Prefill {
            Some(TcpListener::bind((http.local_addr()?.ip(), 0)).await?)
        } else {
            None
        };
        let addr = http.local_addr()?;
        let bootstrap_addr = bootstrap.as_ref().map(TcpListener::local_addr).transpose()?;
        let Prepared { config, plan, params } = self.config(addr.port(), bootstrap_addr.map(|a| a.port()))?;
        let listeners = infera_sim::Listeners { http, bootstrap };
        let server = Server::spawn(self.name.clone(), move |stop| infera_sim::run(listeners, config, stop));
        Sim::ready(Node::InProcess(server), plan, addr, bootstrap_addr, params).await
    }

    /// Starts it as an `infera-sim` process on OS-picked ports (kept on restart).
    ///
    /// # Errors
    /// When the binary is missing or does not start.
    pub async fn spawn(self) -> anyhow::Result<Sim> {
        let plan = self.plan(0, Some(0));
        let params = self.params_file()?;
        let spec = ProcessSpec {
            name: self.name.clone(),
            program: binary("infera-sim")?,
            args: self.argv(&plan, params.as_ref()),
            env: BTreeMap::from([("INFERA_SIM_LOG".to_owned(), "warn".to_owned())]),
            rebind: vec![
                Rebind { flag: "--port", key: "http=", port_only: true },
                Rebind { flag: "--disaggregation-bootstrap-port", key: "bootstrap=", port_only: true },
            ],
        };
        let process = tokio::task::spawn_blocking(move || Process::start(spec)).await??;
        let addr = process.addr("http=");
        let bootstrap = process.try_addr("bootstrap=");
        let plan = self.plan(addr.port(), bootstrap.map(|a| a.port()));
        Sim::ready(Node::Process(process), plan, addr, bootstrap, params).await
    }
}

/// A sim's parsed configuration and the plan it came from.
#[derive(Debug)]
pub struct Prepared {
    /// What `infera_sim::run` takes.
    pub config: infera_sim::SimConfig,
    /// The worker's plan (its record: [`worker_record`]).
    pub plan: WorkerPlan,
    /// The `--sim-params` file, when there is one.
    pub params: Option<tempfile::NamedTempFile>,
}

/// A running sim.
#[derive(Debug)]
pub struct Sim {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its HTTP address.
    pub http: SocketAddr,
    /// The prefill's bootstrap address.
    pub bootstrap: Option<SocketAddr>,
    /// Its worker record (what a registrar would write), with the real ports.
    pub record: WorkerRecord,
    /// How it runs.
    pub node: Node,
    _params: Option<tempfile::NamedTempFile>,
}

impl Sim {
    async fn ready(
        node: Node,
        plan: WorkerPlan,
        http: SocketAddr,
        bootstrap: Option<SocketAddr>,
        params: Option<tempfile::NamedTempFile>,
    ) -> anyhow::Result<Self> {
        let mut record = worker_record(&plan);
        // `https://` for a sim given SGLang's `--ssl-certfile` (the record's own scheme).
        let url = record.url.clone();
        if plan.args.kv_events.is_some() {
            // Port 0 was asked for: the sockets the sim bound are in its `/server_info`.
            let info = http::get_json(&format!("{url}/server_info")).await?;
            let kv = &info["kv_events"];
            let port = |key: &str| kv[key].as_u64().unwrap_or(0);
            record.kv_events = Some(KvEventsSource {
                endpoint: format!("tcp://{}:{}", http.ip(), port("endpoint_port_base")),
                replay_endpoint: Some(format!("tcp://{}:{}", http.ip(), port("replay_endpoint_port_base"))),
                topic: kv["topic"].as_str().unwrap_or_default().to_owned(),
            });
            if plan.args.load_publish_port().is_some() {
                let base = port("load_endpoint_port_base");
                record.load_events = Some(format!("tcp://{}:{base}", http.ip()));
            }
        }
        Ok(Self { url, http, bootstrap, record, node, _params: params })
    }

    /// The bootstrap port of a prefill.
    pub fn bootstrap_port(&self) -> Option<u16> {
        self.bootstrap.map(|a| a.port())
    }

    /// GET `path` as JSON.
    ///
    /// # Errors
    /// When the sim does not answer 2xx with JSON.
    pub async fn get_json(&self, path: &str) -> anyhow::Result<Value> {
        http::get_json(&format!("{}{path}", self.url)).await
    }

    /// The log of its data-plane requests (`/sim/requests`).
    ///
    /// # Panics
    /// When the sim does not answer.
    pub async fn requests(&self) -> Vec<Value> {
        let v = self.get_json("/sim/requests").await.expect("/sim/requests");
        v.as_array().cloned().or_else(|| v["requests"].as_array().cloned()).unwrap_or_default()
    }

    /// Its `/v1/loads` entries, one per rank.
    ///
    /// # Panics
    /// When the sim does not answer.
    pub async fn loads(&self) -> Vec<Value> {
        let v = self.get_json("/v1/loads").await.expect("/v1/loads");
        v["loads"].as_array().cloned().unwrap_or_default()
    }

    /// Sets fault knobs (`POST /sim/faults`).
    ///
    /// # Panics
    /// When the sim refuses them.
    pub async fn faults(&self, faults: Value) {
        let (status, body) =
            http::post_json(&format!("{}/sim/faults", self.url), &faults).await.expect("/sim/faults");
        assert!(status.is_success(), "{status} {body}");
    }

    /// Stops it gracefully (bounded).
    ///
    /// # Errors
    /// As [`Node::stop`].
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.node.stop().await
    }
}
