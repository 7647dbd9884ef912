//! The worker pods against the deployment file they run: each pod's `--only-host` (its own
//! stable name) selects workers of the pod's role, its probes and port are those workers',
//! and every worker of the file has a pod.

use std::collections::BTreeSet;

use infera_deploy::Rendered;

use super::flags::{launch, start};
use super::pods::pods;

/// Checks `overlay`'s worker pods; the number of workers they run.
pub(crate) fn check(overlay: &Rendered) -> Result<usize, String> {
    let mut running = BTreeSet::new();
    let mut all = None;
    for pod in pods(overlay).iter().filter(|p| p.label("app.kubernetes.io/name") == Some("infera-workers")) {
        let role = pod.label("app.kubernetes.io/component").ok_or("a worker pod without its role")?;
        let container = pod.containers.first().ok_or("no container")?;
        let start = start(overlay, pod, container)?;
        let file = start.words.get(2).ok_or("up FILE")?;
        let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        let every =
            infera_launcher::plan_text(std::path::Path::new(file), &text).map_err(|e| e.to_string())?;
        all.get_or_insert_with(|| every.workers.iter().map(|w| w.name.clone()).collect::<BTreeSet<_>>());
        let up = launch(&start)?;
        let host =
            format!("{}.{}", pod.name, pod.workload["spec"]["serviceName"].as_str().unwrap_or_default());
        let mut ports = BTreeSet::new();
        for worker in &up.plan.workers {
            if worker.host != host || worker.role.as_str() != role {
                return Err(format!(
                    "{}: {} is a {} on {}, not a {role} on {host}",
                    pod.name,
                    worker.name,
                    worker.role.as_str(),
                    worker.host
                ));
            }
            ports.insert(worker.args.server.port);
            running.insert(worker.name.clone());
        }
        let spec = &container.spec;
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let port = spec[probe]["httpGet"]["port"]
                .as_u64()
                .ok_or(format!("{}: {probe} on a numeric port", pod.name))?;
            if !ports.iter().any(|p| u64::from(*p) == port) {
                return Err(format!("{}: {probe} on {port}, its workers listen on {ports:?}", pod.name));
            }
        }
        let declared = spec["ports"][0]["containerPort"].as_u64();
        if !declared.is_some_and(|d| ports.iter().any(|p| u64::from(*p) == d)) {
            return Err(format!("{}: containerPort {declared:?}, its workers listen on {ports:?}", pod.name));
        }
    }
    let all = all.ok_or("no worker pods")?;
    if running != all {
        return Err(format!("the pods run {running:?}, the file has {all:?}"));
    }
    Ok(running.len())
}
