//! Fleet admission over gRPC (`--admission on`): one queue in control, in priority, tenant-share
//! and deadline order. A rank cap of one request makes "no room" exact without a step fit (a
//! full pool queues under admission as a predicted step past the ITL target does; the core's
//! tests cover the prediction).

use std::time::{Duration, Instant};

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb;
use tokio::sync::mpsc;

use crate::harness::{Control, eventually, pick, sample};

const WORKERS: &str =
    "[[workers]]\nid = 'x'\nrole = 'mixed'\nurl = 'http://127.0.0.1:30002'\nmodel = 'agg'\ndp_size = 1\n";

const CLASSES: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
ttft_ms = 60000
itl_ms = 1000
priority = 1
[[classes]]
name = "batch"
ttft_ms = 60000
itl_ms = 1000
[[classes]]
name = "quick"
ttft_ms = 400
itl_ms = 1000
priority = 1
[tenants]
weights = { a = 3, flood = 1 }
"#;

async fn start() -> (Control, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("classes.toml");
    std::fs::write(&file, CLASSES).unwrap();
    let flags =
        ["--admission", "on", "--max-requests-per-rank", "1", "--service-classes", file.to_str().unwrap()];
    (Control::start(WORKERS, &flags).await, dir)
}

fn classed(lease: &str, id: &str, class: &str, tenant: &str, wait: bool) -> pb::PickRequest {
    pb::PickRequest {
        request_id: id.into(),
        service_class: class.into(),
        tenant: tenant.into(),
        wait_admission: wait,
        ..pick(lease, "agg", 100)
    }
}

/// A waiting pick on its own task; its answer (with its id) comes through `done`.
async fn wait_in_queue(
    control: &Control,
    req: pb::PickRequest,
    done: mpsc::UnboundedSender<(String, Result<String, tonic::Status>)>,
) -> tokio::task::JoinHandle<()> {
    let mut router = control.router().await;
    tokio::spawn(async move {
        let id = req.request_id.clone();
        let answer = router.pick_decode(req).await.map(|r| r.into_inner().reservation_id);
        let _ = done.send((id, answer));
    })
}

async fn waiting(control: &Control, class: &str) -> f64 {
    let series = format!("infera_router_admission_waiting{{model=\"agg\",class=\"{class}\"}}");
    sample(&control.metrics().await, &series).unwrap_or(0.0)
}

async fn release(control: &Control, lease: &str, id: &str) {
    let _ = lease;
    let req =
        pb::ReleaseRequest { reservation_id: id.into(), reason: pb::ReleaseReason::Eof as i32, failure: 0 };
    control.router().await.release(req).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_queue_admits_by_priority_sheds_at_the_ttft_target_and_forgets_who_left() {
    let (control, _dir) = start().await;
    let lease = control.lease(60_000).await;
    let mut router = control.router().await;
    let held = router.pick_decode(classed(&lease, "held", "", "", false)).await.unwrap().into_inner();

    // No room: a caller that does not wait is told so at once.
    let refused = router.pick_decode(classed(&lease, "now", "interactive", "", false)).await.unwrap_err();
    assert_eq!(StatusReason::of(&refused).known(), Some(ErrorReason::AdmissionQueued), "{refused:?}");
    // A class control does not define is a bad request, admission or not.
    let unknown = router.pick_decode(classed(&lease, "gold", "gold", "", true)).await.unwrap_err();
    assert_eq!(StatusReason::of(&unknown).known(), Some(ErrorReason::UnknownServiceClass), "{unknown:?}");

    // A batch request waits first, then an interactive one.
    let (done, mut answers) = mpsc::unbounded_channel();
    wait_in_queue(&control, classed(&lease, "batch-1", "batch", "", true), done.clone()).await;
    eventually(Duration::from_secs(10), "batch-1 to wait", async || waiting(&control, "batch").await == 1.0)
        .await;
    wait_in_queue(&control, classed(&lease, "inter-1", "interactive", "", true), done.clone()).await;
    eventually(Duration::from_secs(10), "inter-1 to wait", async || {
        waiting(&control, "interactive").await == 1.0
    })
    .await;

    // A quick request waits past its 400 ms TTFT target: shed, with its reason.
    let started = Instant::now();
    wait_in_queue(&control, classed(&lease, "quick-1", "quick", "", true), done.clone()).await;
    let (id, shed) = answers.recv().await.unwrap();
    assert_eq!(id, "quick-1");
    let shed = shed.unwrap_err();
    assert_eq!(StatusReason::of(&shed).known(), Some(ErrorReason::AdmissionShed), "{shed:?}");
    assert!(started.elapsed() >= Duration::from_millis(300), "shed at {:?}", started.elapsed());

    // A caller that leaves gives up its place.
    let gone = wait_in_queue(&control, classed(&lease, "gone", "batch", "", true), done.clone()).await;
    eventually(Duration::from_secs(10), "gone to wait", async || waiting(&control, "batch").await == 2.0)
        .await;
    gone.abort();
    eventually(Duration::from_secs(10), "gone to be forgotten", async || {
        waiting(&control, "batch").await == 1.0
    })
    .await;

    // Room frees: the higher priority goes first, though it came later.
    release(&control, &lease, &held.reservation_id).await;
    let (id, first) = answers.recv().await.unwrap();
    assert_eq!(id, "inter-1");
    release(&control, &lease, &first.unwrap()).await;
    let (id, second) = answers.recv().await.unwrap();
    assert_eq!(id, "batch-1");
    release(&control, &lease, &second.unwrap()).await;
    assert_eq!(control.0.ledger().await, infera_testkit::Ledger::default(), "the ledger is back to zero");

    let m = control.metrics().await;
    let count = |outcome: &str, class: &str| {
        sample(
            &m,
            &format!(
                "infera_router_admissions_total{{model=\"agg\",class=\"{class}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(count("admitted", "interactive"), Some(1.0), "{m}");
    assert_eq!(count("queued", "interactive"), Some(1.0), "{m}");
    assert_eq!(count("waited", "interactive"), Some(1.0), "{m}");
    assert_eq!(count("waited", "batch"), Some(1.0), "{m}");
    assert_eq!(count("shed", "quick"), Some(1.0), "{m}");
    assert_eq!(count("cancelled", "batch"), Some(1.0), "{m}");
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_is_held_to_its_share_of_admissions() {
    let (control, _dir) = start().await;
    let lease = control.lease(60_000).await;
    let mut router = control.router().await;
    let mut held =
        router.pick_decode(classed(&lease, "held", "", "", false)).await.unwrap().into_inner().reservation_id;
    // The flood queues first; tenant a (weight 3 to the flood's 1) comes after it.
    let (done, mut answers) = mpsc::unbounded_channel();
    for (i, tenant) in (0..16).map(|i| (i, if i < 8 { "flood" } else { "a" })) {
        wait_in_queue(
            &control,
            classed(&lease, &format!("{tenant}-{i}"), "interactive", tenant, true),
            done.clone(),
        )
        .await;
        eventually(Duration::from_secs(10), "the request to wait", async || {
            waiting(&control, "interactive").await == f64::from(i + 1)
        })
        .await;
    }
    let mut order = Vec::new();
    for _ in 0..8 {
        release(&control, &lease, &held).await;
        let (id, answer) = answers.recv().await.unwrap();
        held = answer.unwrap();
        order.push(id);
    }
    let a = order.iter().filter(|id| id.starts_with("a-")).count();
    assert_eq!(a, 6, "tenant a is admitted 3 times for each of the flood's: {order:?}");
    // The rest drain one by one; the ledger ends at zero.
    for _ in 0..8 {
        release(&control, &lease, &held).await;
        held = answers.recv().await.unwrap().1.unwrap();
    }
    release(&control, &lease, &held).await;
    assert_eq!(control.0.ledger().await, infera_testkit::Ledger::default(), "the ledger is back to zero");
    let m = control.metrics().await;
    let tokens =
        |t: &str| sample(&m, &format!("infera_router_admitted_tokens_total{{model=\"agg\",tenant=\"{t}\"}}"));
    assert_eq!((tokens("a"), tokens("flood")), (Some(800.0), Some(800.0)), "{m}");
    control.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_control_turns_its_waiters_to_the_next_leader_at_once() {
    let (control, _dir) = start().await;
    let lease = control.lease(60_000).await;
    let mut router = control.router().await;
    router.pick_decode(classed(&lease, "held", "", "", false)).await.unwrap();
    let (done, mut answers) = mpsc::unbounded_channel();
    wait_in_queue(&control, classed(&lease, "batch-1", "batch", "", true), done).await;
    eventually(Duration::from_secs(10), "batch-1 to wait", async || waiting(&control, "batch").await == 1.0)
        .await;
    // Its TTFT target is a minute away; the stop does not wait for it.
    let stopping = Instant::now();
    control.stop().await;
    let (id, answer) = answers.recv().await.unwrap();
    assert_eq!(id, "batch-1");
    let status = answer.unwrap_err();
    assert_eq!(StatusReason::of(&status).known(), Some(ErrorReason::NotLeader), "{status:?}");
    assert!(stopping.elapsed() < Duration::from_secs(20), "stopped in {:?}", stopping.elapsed());
}
