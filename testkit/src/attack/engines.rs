//! Attacks through what control reads about workers, and on etcd itself: records no worker
//! should have (written with a registrar's credential, as a buggy or stolen launcher would), an
//! engine whose `/server_info` claims four billion ranks, and writes to etcd by clients without
//! the right credentials.

use std::time::Duration;

use futures_util::FutureExt as _;
use infera_proto::types::{RegisteredWorker, WorkerId, WorkerRecord};
use infera_registry::keys;
use infera_registry::roles;
use serde_json::json;
use tokio::net::TcpListener;

use super::target::MODEL;
use super::{Report, Scale, Target};
use crate::etcd::Auth;
use crate::http::metric_sum;

/// The targets control routes to, by its gauge.
async fn targets(t: &Target) -> anyhow::Result<f64> {
    Ok(metric_sum(&t.cluster.control.metrics().await?, "infera_router_targets", ""))
}

async fn registrar(t: &Target) -> anyhow::Result<etcd_client::Client> {
    let etcd = t.cluster.etcd.as_ref().ok_or_else(|| anyhow::anyhow!("no etcd"))?;
    Ok(infera_registry::connect(&etcd.client_as(roles::LAUNCH.name, Auth::Certificate)).await?)
}

fn record_json(id: &str, url: &str) -> serde_json::Value {
    let record: RegisteredWorker = WorkerRecord::decode(id, url, MODEL, 1).into();
    serde_json::to_value(record).expect("a record serializes")
}

/// Records under the workers' prefix that are no worker: four billion DP ranks, a URL with a
/// space, JSON that does not parse, an id that is not its key's. Control refuses each with a
/// reason and a metric and routes as before.
pub(super) async fn hostile_record(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "worker-hostile-record",
        "4 worker records with the launcher's etcd credential: dp_size 4294967295, url \"http://h:1/a b\", malformed JSON, an id not its key's",
    );
    let mut etcd = registrar(t).await?;
    let refused = |m: &str| metric_sum(m, "infera_router_registry_changes_total", "kind=\"refused\"");
    let before = refused(&t.cluster.control.metrics().await?);
    let targets_before = targets(t).await?;
    let mut ranks = record_json("hostile-ranks", "http://127.0.0.1:9");
    ranks["dp_size"] = json!(u32::MAX);
    let mut space = record_json("hostile-url", "http://127.0.0.1:9");
    space["url"] = json!("http://h:1/a b");
    let writes = [
        ("hostile-ranks", ranks.to_string()),
        ("hostile-url", space.to_string()),
        ("hostile-json", "{\"id\": \"hostile-json\", ".to_owned()),
        ("hostile-id", record_json("someone-else", "http://127.0.0.1:9").to_string()),
    ];
    for (id, value) in &writes {
        etcd.put(keys::worker(&WorkerId::new(*id)), value.as_str(), None).await?;
    }
    let seen =
        crate::eventually::poll(Duration::from_secs(15), "control to refuse the records", async || {
            let now = refused(&t.cluster.control.metrics().await.ok()?);
            (now - before >= writes.len() as f64).then_some(now - before)
        })
        .await;
    let targets_after = targets(t).await?;
    for (id, _) in &writes {
        etcd.delete(keys::worker(&WorkerId::new(*id)), None).await?;
    }
    r = r.answered(format!(
        "{} refused by control (registry_changes kind=refused); targets {targets_before} → {targets_after}",
        seen.as_ref().map_or_else(|e| format!("not all ({e})"), |n| n.to_string())
    ));
    r.expect(seen.is_ok(), || "control did not count every refused record".into());
    r.expect(targets_after == targets_before, || format!("targets {targets_before} → {targets_after}"));
    Ok(r)
}

/// A valid record whose engine answers `/server_info` with `dp_size` 4294967295: held out of
/// routing with a reason, control serving on.
pub(super) async fn hostile_server_info(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "worker-hostile-server-info",
        "a valid decode record whose engine's /server_info claims dp_size 4294967295",
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let record: RegisteredWorker = WorkerRecord::decode("hostile-engine", url.as_str(), MODEL, 1).into();
    let mut info = crate::engine_stub::server_info(&record);
    info["dp_size"] = json!(u32::MAX);
    let stub = tokio::spawn(crate::engine_stub::serve(listener, info));
    let mut registered = record_json("hostile-engine", &url);
    registered.as_object_mut().map(|o| o.remove("dp_size"));
    let mut etcd = registrar(t).await?;
    let key = keys::worker(&WorkerId::new("hostile-engine"));
    let targets_before = targets(t).await?;
    etcd.put(key.as_str(), registered.to_string(), None).await?;
    let failures =
        |m: &str| metric_sum(m, "infera_router_engine_facts_failures_total", "worker=\"hostile-engine\"");
    let seen = crate::eventually::poll(
        Duration::from_secs(15),
        "control to refuse the engine's facts",
        async || (failures(&t.cluster.control.metrics().await.ok()?) >= 1.0).then_some(()),
    )
    .await;
    let metrics = t.cluster.control.metrics().await?;
    let targets_after = targets(t).await?;
    etcd.delete(key.as_str(), None).await?;
    stub.abort();
    let reasons: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("infera_router_engine_facts_failures_total") && l.contains("hostile-engine")
        })
        .collect();
    r = r.answered(format!("{}; targets {targets_before} → {targets_after}", reasons.join(", ")));
    r.expect(seen.is_ok(), || "control never refused the engine's answer".into());
    r.expect(targets_after == targets_before, || format!("targets {targets_before} → {targets_after}"));
    Ok(r)
}

/// etcd's intruders (plain text, no certificate, a foreign CA or certificate, an unknown user,
/// a wrong password, no role, another part's role) each try infera's keys while the
/// deployment runs: every write refused, no key holds what they wrote.
pub(super) async fn etcd_intruders(t: &Target, _: &Scale) -> anyhow::Result<Report> {
    let mut r = Report::new(
        "etcd-without-credentials",
        "worker, setting, leader and proxy-book writes by 8 clients without the right credentials",
    );
    let etcd = t.cluster.etcd.as_ref().ok_or_else(|| anyhow::anyhow!("no etcd"))?;
    match std::panic::AssertUnwindSafe(etcd.intrude()).catch_unwind().await {
        Ok(refusals) => r = r.answered(format!("{} writes, all refused; nothing written", refusals.len())),
        Err(panic) => {
            let why =
                panic.downcast_ref::<String>().cloned().unwrap_or_else(|| "a write went through".into());
            r = r.answered(why.clone());
            r.breaches.push(why);
        }
    }
    Ok(r)
}
