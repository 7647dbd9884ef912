//! Registration and the worker watch against a real etcd (Debian `etcd-server`) on loopback.

use std::time::{Duration, Instant};

use infera_proto::types::{RegisteredWorker, WorkerId, WorkerRecord};
use infera_registry::{Change, Registration, watch_workers};
use infera_testkit::EtcdServer;
use tokio::sync::{mpsc, watch};

fn record(id: &str) -> RegisteredWorker {
    WorkerRecord::decode(id, "http://127.0.0.1:30001", "m", 4)
        .with_page_size(64)
        .with_sglang_version("0.5.23")
        .into()
}

async fn next(rx: &mut mpsc::Receiver<Change>, within: Duration) -> Change {
    tokio::time::timeout(within, rx.recv()).await.expect("a change in time").expect("the watch is running")
}

fn start_watch(etcd: &EtcdServer) -> (mpsc::Receiver<Change>, watch::Sender<()>) {
    let (tx, rx) = mpsc::channel(64);
    let (stop, stopped) = watch::channel(());
    tokio::spawn(watch_workers(vec![etcd.url()], tx, None, stopped));
    (rx, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_worker_appears_and_leaves_with_its_lease() {
    let etcd = EtcdServer::start();
    let (mut changes, _stop) = start_watch(&etcd);
    let reg = Registration::start(vec![etcd.url()], record("decode-0"), Duration::from_secs(2));
    assert_eq!(
        next(&mut changes, Duration::from_secs(10)).await,
        Change::Upsert(Box::new(record("decode-0")))
    );
    // A clean stop revokes the lease: gone at once.
    reg.stop().await;
    assert_eq!(next(&mut changes, Duration::from_secs(2)).await, Change::Remove(WorkerId::new("decode-0")));

    // A registrar that dies (no revoke): gone when its 2 s lease runs out.
    let reg = Registration::start(vec![etcd.url()], record("decode-1"), Duration::from_secs(2));
    assert_eq!(
        next(&mut changes, Duration::from_secs(10)).await,
        Change::Upsert(Box::new(record("decode-1")))
    );
    let died = Instant::now();
    drop(reg);
    assert_eq!(next(&mut changes, Duration::from_secs(8)).await, Change::Remove(WorkerId::new("decode-1")));
    assert!(died.elapsed() >= Duration::from_millis(500), "removed by lease expiry, not at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_outage_keeps_the_view_and_the_watch_resumes_without_repeats() {
    let mut etcd = EtcdServer::start();
    let (mut changes, _stop) = start_watch(&etcd);
    let _a = Registration::start(vec![etcd.url()], record("a"), Duration::from_secs(10));
    assert_eq!(next(&mut changes, Duration::from_secs(10)).await, Change::Upsert(Box::new(record("a"))));

    etcd.stop();
    // 20 s without etcd: the watch must not report any change (no drop-all).
    let quiet = tokio::time::timeout(Duration::from_secs(20), changes.recv()).await;
    assert!(quiet.is_err(), "a change during the outage: {quiet:?}");
    etcd.resume();

    let _b = Registration::start(vec![etcd.url()], record("b"), Duration::from_secs(10));
    assert_eq!(next(&mut changes, Duration::from_secs(15)).await, Change::Upsert(Box::new(record("b"))));
    // "a" re-registered itself after the outage with the same record: no change is reported.
    let repeat = tokio::time::timeout(Duration::from_secs(4), changes.recv()).await;
    assert!(repeat.is_err(), "a repeated change after the resync: {repeat:?}");
}

/// The drain round trip as the registrar and control's leader make it: the request lives under
/// the worker's lease, the watch sees it come and go, and the wait ends on a report newer than
/// the request that says 0 held (a stale report, or none, runs into the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_request_lives_under_the_lease_and_the_wait_ends_on_a_fresh_empty_report() {
    use infera_registry::drain::{self, Drained};
    use tokio::time::Instant as TokioInstant;

    let etcd = EtcdServer::start();
    let config = infera_registry::EtcdConfig::plain(vec![etcd.url()]);
    let (requests, mut seen) = watch::channel(drain::Requests::new());
    let (_stop, stopped) = watch::channel(());
    tokio::spawn(drain::watch_requests(config.clone(), requests, stopped));
    let id = WorkerId::new("decode-0");
    let mut control = infera_registry::connect(&config).await.unwrap();
    // A report left over from an earlier drain of the same worker.
    drain::report(&mut control, &id, 0).await.unwrap();

    let reg = Registration::start(config.clone(), record("decode-0"), Duration::from_secs(2));
    let since = reg.drain().await.expect("the registration runs");
    tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|s| s.get(&id) == Some(&since)))
        .await
        .unwrap()
        .unwrap();
    // The old report does not count: no fresh one within the deadline.
    let waited =
        drain::wait_drained(&config, &id, since, TokioInstant::now() + Duration::from_millis(400)).await;
    assert_eq!(waited, Drained::Deadline { held: None });
    // The leader reports 2 held, then 0.
    drain::report(&mut control, &id, 2).await.unwrap();
    let waited =
        drain::wait_drained(&config, &id, since, TokioInstant::now() + Duration::from_millis(400)).await;
    assert_eq!(waited, Drained::Deadline { held: Some(2) });
    let wait = tokio::spawn({
        let config = config.clone();
        let id = id.clone();
        async move {
            drain::wait_drained(&config, &id, since, TokioInstant::now() + Duration::from_secs(10)).await
        }
    });
    drain::report(&mut control, &id, 0).await.unwrap();
    assert_eq!(wait.await.unwrap(), Drained::Empty);
    // Deregistering takes the request with the lease.
    reg.stop().await;
    tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|s| s.is_empty())).await.unwrap().unwrap();
    drain::clear_report(&mut control, &id).await.unwrap();
}
