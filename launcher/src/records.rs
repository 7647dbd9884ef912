//! The worker records a deployment registers (in etcd, or in control's static workers file),
//! derived from the same [`Plan`] the workers' argv comes from, so the record cannot disagree
//! with the command line: URL from `--host`/`--port`, bootstrap port, DP ranks, page size.

use infera_proto::types::{KvEventsSource, ModelName, Role, WorkerId, WorkerRecord};
use serde::Serialize;

use crate::plan::{Plan, WorkerPlan};

/// One record per worker of `plan`, in plan order.
pub fn worker_records(plan: &Plan) -> Vec<WorkerRecord> {
    plan.workers.iter().map(worker_record).collect()
}

/// The record of one worker.
pub fn worker_record(w: &WorkerPlan) -> WorkerRecord {
    let server = &w.args.server;
    let model = server.served_model_name.clone().unwrap_or_else(|| server.model_path.clone());
    let bootstrap_port = match w.role {
        Role::Prefill => w.args.disaggregation.as_ref().and_then(|d| d.bootstrap_port),
        Role::Decode | Role::Mixed => None,
    };
    let host = reachable_host(&server.host);
    // The worker binds its KV sockets on every interface (`tcp://*:port`); control dials the
    // host it reaches the worker's HTTP server on.
    let kv_events = w.args.kv_events.as_ref().map(|k| KvEventsSource {
        endpoint: format!("tcp://{}", host_port(&host, k.port)),
        replay_endpoint: Some(format!("tcp://{}", host_port(&host, k.replay_port))),
        topic: k.topic.clone(),
    });
    // SGLang serves HTTPS when given a certificate (`--ssl-certfile`, passed in `extra_args`).
    let scheme = if w.args.extra.iter().any(|a| a == "--ssl-certfile") { "https" } else { "http" };
    WorkerRecord {
        id: WorkerId::new(w.name.as_str()),
        role: w.role,
        url: format!("{scheme}://{}", host_port(&host, server.port)),
        model: ModelName::new(model.as_str()),
        bootstrap_port,
        // Always given: the plan knows the ranks, so control never has to ask the worker.
        dp_size: w.args.parallel.dp_ranks(),
        page_size: server.page_size.unwrap_or(1),
        transfer_backend: None,
        kv_cache_dtype: None,
        sglang_version: Some(w.args.version.to_string()),
        kv_events,
        load_events: w.args.load_publish_port().map(|port| format!("tcp://{}", host_port(&host, port))),
        labels: Default::default(),
    }
}

/// The worker's `/health` URL.
pub fn health_url(record: &WorkerRecord) -> String {
    format!("{}/health", record.url.trim_end_matches('/'))
}

/// A wildcard bind address is reached on loopback from this node.
fn reachable_host(host: &str) -> String {
    match host {
        "0.0.0.0" | "" => "127.0.0.1".to_owned(),
        "::" | "[::]" => "[::1]".to_owned(),
        h => h.to_owned(),
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[derive(Serialize)]
#[serde(bound(serialize = "Ranks: Serialize + Copy + Into<Option<u32>>"))]
struct WorkersFile<'a, Ranks> {
    workers: &'a [WorkerRecord<Ranks>],
}

/// Control's static workers file (`infera-control --workers FILE`) listing `records`: the
/// launcher's records give `dp_size` (it knows the ranks from the plan); a
/// [`infera_proto::types::RegisteredWorker`] without one leaves it for control to ask.
pub fn workers_file<Ranks: Serialize + Copy + Into<Option<u32>>>(records: &[WorkerRecord<Ranks>]) -> String {
    let head = "# Written by infera-launch up: the workers of the deployment (control --workers).\n";
    let body = toml::to_string(&WorkersFile { workers: records }).expect("worker records serialize to TOML");
    format!("{head}{body}")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const SIM: &str = include_str!("../../examples/sim_1p1d/deployment.toml");

    #[test]
    fn sim_example_records_follow_the_plan() {
        let plan = crate::plan_text(Path::new("sim.toml"), SIM).unwrap();
        let records = worker_records(&plan);
        assert_eq!(records.len(), 2);
        let (p, d) = (&records[0], &records[1]);
        assert_eq!((p.id.as_str(), p.role), ("prefill-0", Role::Prefill));
        assert_eq!(p.url, "http://127.0.0.1:30000");
        assert_eq!(p.model.as_str(), "glm-5.2");
        assert_eq!(p.bootstrap_port, Some(8998));
        assert_eq!((p.dp_size, p.page_size), (1, 64));
        assert_eq!(p.sglang_version.as_deref(), Some("0.5.23"));
        assert_eq!((d.id.as_str(), d.role), ("decode-0", Role::Decode));
        assert_eq!(d.url, "http://127.0.0.1:30001");
        assert_eq!(d.bootstrap_port, None);
        assert_eq!(d.dp_size, 8, "attention-DP ranks");
        // The sockets of --kv-events-config, dialled on the host the HTTP server is reached on.
        let kv = p.kv_events.as_ref().unwrap();
        assert_eq!(kv.endpoint, "tcp://127.0.0.1:5557");
        assert_eq!(kv.replay_endpoint.as_deref(), Some("tcp://127.0.0.1:5558"), "replay after the PUB ports");
        assert_eq!(kv.topic, "kv@prefill-0");
        assert_eq!(d.kv_events.as_ref().unwrap().for_rank(7).unwrap().0, "tcp://127.0.0.1:5607");
        // The load sockets, after the replay ports (16 = 2 × 8 ranks); none for the prefill.
        assert_eq!(d.load_events.as_deref(), Some("tcp://127.0.0.1:5616"));
        assert_eq!(p.load_events, None);
        for r in &records {
            assert_eq!(r.check(), Ok(()), "{r:?}");
        }
        assert_eq!(health_url(p), "http://127.0.0.1:30000/health");
    }

    #[test]
    fn records_of_the_glm_kit_use_hosts_defaults_and_replicas() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sglang_2p1d_glm5.2/deployment.toml");
        let plan = crate::plan_file(&path).unwrap();
        let records = worker_records(&plan);
        assert_eq!(records.len(), plan.workers.len());
        for (r, w) in records.iter().zip(&plan.workers) {
            assert_eq!(r.id.as_str(), w.name);
            assert_eq!(r.url, format!("http://{}:{}", w.host, w.args.server.port));
            assert_eq!(r.dp_size, w.args.parallel.dp * w.args.parallel.attn_dp);
            assert_eq!(r.bootstrap_port.is_some(), r.role == Role::Prefill, "{r:?}");
            assert_eq!(r.check(), Ok(()));
        }
    }

    #[test]
    fn wildcard_hosts_are_reached_on_loopback() {
        assert_eq!(host_port(&reachable_host("0.0.0.0"), 1), "127.0.0.1:1");
        assert_eq!(host_port(&reachable_host("::"), 1), "[::1]:1");
        assert_eq!(host_port("fe80::1", 2), "[fe80::1]:2");
        assert_eq!(host_port("node-7", 3), "node-7:3");
    }

    #[test]
    fn the_workers_file_is_what_control_reads() {
        let plan = crate::plan_text(Path::new("sim.toml"), SIM).unwrap();
        let text = workers_file(&worker_records(&plan));
        #[derive(serde::Deserialize)]
        struct File {
            workers: Vec<WorkerRecord>,
        }
        let back: File = toml::from_str(&text).unwrap();
        assert_eq!(back.workers, worker_records(&plan));
        assert!(text.contains("bootstrap_port = 8998"), "{text}");
    }
}
