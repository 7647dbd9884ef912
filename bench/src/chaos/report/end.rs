//! What the chaos bench reads once the load is over: control's rows and reservations, the
//! engines' queues, the proxies' metrics and peak memory, the faulty sims' request logs.

use std::time::Duration;

use infera_proto::pb;
use infera_testkit::http::get_ok;
use serde_json::Value;

use crate::chaos::deploy::Deployment;
use crate::chaos::events::vm_hwm_kb;

/// What was read once the load was over.
#[derive(Debug)]
pub(crate) struct End {
    pub(crate) targets: Vec<pb::TargetStatus>,
    pub(crate) reservations: usize,
    /// Per sim: name, running, waiting (summed over ranks).
    pub(crate) engines: Vec<(String, u64, u64)>,
    pub(crate) control_metrics: String,
    pub(crate) proxy_metrics: Vec<String>,
    pub(crate) proxy_hwm_kb: Vec<Option<u64>>,
    /// How long the ledger and the engines took to reach zero (`None`: not within the deadline).
    pub(crate) drain: Option<Duration>,
    /// Control's rows the moment the last request had ended.
    pub(crate) left_at_load_end: Vec<pb::TargetStatus>,
    /// The request logs of decode-0 and prefill-0.
    pub(crate) logs: [Vec<Value>; 2],
    /// The targets seen ejected during the run.
    pub(crate) ejected: std::collections::BTreeSet<String>,
}

async fn engines(d: &Deployment) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for s in &d.cluster.sims {
        let loads = s.loads().await;
        let sum = |k: &str| loads.iter().map(|r| r[k].as_u64().unwrap_or(0)).sum::<u64>();
        out.push((s.record.id.as_str().to_owned(), sum("num_running_reqs"), sum("num_waiting_reqs")));
    }
    out
}

async fn reservations(d: &Deployment) -> Option<usize> {
    let req = pb::ListReservationsRequest::default();
    Some(d.admin.clone().list_reservations(req).await.ok()?.into_inner().reservations.len())
}

/// Whether control holds nothing (no held request, booked token or reservation) and no engine
/// runs or queues anything.
pub(crate) async fn at_zero(d: &Deployment) -> bool {
    let Some(targets) = d.targets().await else { return false };
    let ledger = targets.iter().all(|t| t.held_requests == 0 && t.booked_input_tokens == 0);
    ledger
        && reservations(d).await == Some(0)
        && engines(d).await.iter().all(|(_, running, waiting)| running + waiting == 0)
}

impl End {
    pub(crate) async fn read(d: &mut Deployment, drain: Option<Duration>) -> Self {
        let mut proxy_metrics = Vec::new();
        let mut proxy_hwm_kb = Vec::new();
        for p in &mut d.cluster.proxies {
            proxy_metrics.push(get_ok(&format!("{}/metrics", p.url)).await.unwrap_or_default());
            proxy_hwm_kb.push(vm_hwm_kb(p.node.process().and_then(|p| p.pid())));
        }
        Self {
            targets: d.targets().await.unwrap_or_default(),
            reservations: reservations(d).await.unwrap_or(usize::MAX),
            engines: engines(d).await,
            control_metrics: d.cluster.control.metrics().await.unwrap_or_default(),
            proxy_metrics,
            proxy_hwm_kb,
            drain,
            left_at_load_end: Vec::new(),
            logs: [d.sim("decode-0").requests().await, d.sim("prefill-0").requests().await],
            ejected: std::collections::BTreeSet::new(),
        }
    }
}
