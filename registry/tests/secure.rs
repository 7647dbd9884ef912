//! The registry against an etcd secured as deployments run it (`EtcdServer::start_secure`: TLS
//! with client certificates required, auth on, infera's roles): each part works with its own
//! role and nothing more; clients without the right certificate, CA, password or role are refused
//! and write nothing; a part that loses its access at run time keeps going as through an outage;
//! a password rotated in its file is used from the next connection on.

use std::time::Duration;

use etcd_client::GetOptions;
use infera_proto::types::{RegisteredWorker, WorkerId, WorkerRecord};
use infera_registry::roles::{CONTROL, LAUNCH};
use infera_registry::{Change, EtcdFailure, Registration, keys, watch_workers};
use infera_testkit::etcd::{Auth, EtcdServer, Intruder};
use tokio::sync::{mpsc, watch};

fn record(id: &str) -> RegisteredWorker {
    WorkerRecord::decode(id, "http://127.0.0.1:30001", "m", 4).with_page_size(64).into()
}

async fn next(rx: &mut mpsc::Receiver<Change>, within: Duration) -> Change {
    tokio::time::timeout(within, rx.recv()).await.expect("a change in time").expect("the watch is running")
}

/// No change within `quiet` (the watch would have reported one by then).
async fn no_change(rx: &mut mpsc::Receiver<Change>, quiet: Duration, why: &str) {
    let got = tokio::time::timeout(quiet, rx.recv()).await;
    assert!(got.is_err(), "{why}: {got:?}");
}

/// Control's watch of the workers, as `auth`.
fn control_watch(etcd: &EtcdServer, auth: Auth) -> (mpsc::Receiver<Change>, watch::Sender<()>) {
    let (tx, rx) = mpsc::channel(64);
    let (stop, stopped) = watch::channel(());
    tokio::spawn(watch_workers(etcd.client_as(CONTROL.name, auth), tx, None, stopped));
    (rx, stop)
}

/// Polls `until` every 20 ms for at most `within`.
async fn poll(within: Duration, what: &str, mut until: impl AsyncFnMut() -> bool) {
    let end = tokio::time::Instant::now() + within;
    while !until().await {
        assert!(tokio::time::Instant::now() < end, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn worker_keys(etcd: &EtcdServer) -> Vec<String> {
    etcd.infera_keys().await.into_keys().filter(|k| k.starts_with(keys::WORKERS)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_part_works_with_its_own_role_and_nothing_more() {
    let etcd = EtcdServer::start_secure();
    assert!(etcd.url().starts_with("https://"));
    // Control by password (over its client certificate), the registrar by certificate alone.
    let (mut changes, _stop) = control_watch(&etcd, Auth::Password);
    let reg = Registration::start(
        etcd.client_as(LAUNCH.name, Auth::Certificate),
        record("decode-0"),
        Duration::from_secs(2),
    );
    assert_eq!(
        next(&mut changes, Duration::from_secs(10)).await,
        Change::Upsert(Box::new(record("decode-0")))
    );
    // Stopping revokes the lease, which needs write on the worker's key: the registrar has it.
    reg.stop().await;
    assert_eq!(next(&mut changes, Duration::from_secs(5)).await, Change::Remove(WorkerId::new("decode-0")));

    let control = etcd.client_as(CONTROL.name, Auth::Certificate);
    infera_registry::config::store(&control, &[("decode_request_weight", "180000".into())]).await.unwrap();
    let stored = infera_registry::config::load(&control).await.unwrap();
    assert_eq!(stored.get("decode_request_weight").map(String::as_str), Some("180000"));

    // Nothing beyond the role: control does not write workers, the registrar reads nothing.
    let mut c = infera_registry::connect(&control).await.unwrap();
    let e = infera_registry::RegistryError::from(
        c.put(keys::worker(&WorkerId::new("x")), "{}", None).await.unwrap_err(),
    );
    assert_eq!(e.failure(), Some(EtcdFailure::PermissionDenied), "{e}");
    let mut l = infera_registry::connect(&etcd.client_as(LAUNCH.name, Auth::Password)).await.unwrap();
    let e = l.get(keys::WORKERS, Some(GetOptions::new().with_prefix())).await.unwrap_err();
    assert_eq!(EtcdFailure::of(&e), EtcdFailure::PermissionDenied, "{e}");
    let e = infera_registry::config::load(&etcd.client_as(LAUNCH.name, Auth::Certificate)).await.unwrap_err();
    assert!(e.is_refusal() && e.to_string().starts_with("etcd denied the request"), "{e}");
    assert!(worker_keys(&etcd).await.is_empty(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intruders_are_refused_and_write_nothing() {
    let etcd = EtcdServer::start_secure();
    // Keys to keep: a worker and a setting.
    let _reg = Registration::start(
        etcd.client_as(LAUNCH.name, Auth::Certificate),
        record("decode-0"),
        Duration::from_secs(10),
    );
    let control = etcd.client_as(CONTROL.name, Auth::Password);
    infera_registry::config::store(&control, &[("decode_input_demand", "on".into())]).await.unwrap();
    poll(Duration::from_secs(10), "decode-0 registered", async || worker_keys(&etcd).await.len() == 1).await;

    let refusals = etcd.assert_intruders_write_nothing().await;
    // Each intruder is refused for one reason, whatever the key.
    let why = |intruder: Intruder| {
        let mine: Vec<_> = refusals.iter().filter(|r| r.intruder == intruder).collect();
        let errors: Vec<String> = mine.iter().map(|r| r.error.to_string()).collect();
        assert!(!mine.is_empty(), "{intruder:?} tried");
        assert!(
            mine.iter().all(|r| r.error.failure() == mine[0].error.failure()),
            "{intruder:?}: {errors:?}"
        );
        (mine[0].error.failure(), errors)
    };
    for tls in [Intruder::Plaintext, Intruder::NoCertificate, Intruder::WrongCa, Intruder::ForeignCertificate]
    {
        let (failure, errors) = why(tls);
        assert_eq!(failure, Some(EtcdFailure::Tls), "{tls:?}: {errors:?}");
    }
    assert_eq!(why(Intruder::WrongPassword).0, Some(EtcdFailure::Authentication));
    for denied in [Intruder::UnknownUser, Intruder::NoRole, Intruder::OtherRole] {
        let (failure, errors) = why(denied);
        assert_eq!(failure, Some(EtcdFailure::PermissionDenied), "{denied:?}: {errors:?}");
    }
    let other_role: Vec<&str> =
        refusals.iter().filter(|r| r.intruder == Intruder::OtherRole).map(|r| r.key.as_str()).collect();
    assert!(
        other_role.iter().all(|k| !k.starts_with(keys::WORKERS)) && other_role.len() == 3,
        "{other_role:?}"
    );

    // infera's own client says which etcd refused what, and why.
    let mut wrong = etcd.security_as(CONTROL.name, Auth::Password);
    let pw = etcd.dir().join("wrong-password");
    std::fs::write(&pw, "not-it\n").unwrap();
    wrong.password_file = Some(pw);
    let wrong = infera_registry::EtcdConfig::new(vec![etcd.url()], wrong).unwrap();
    let e = infera_registry::connect(&wrong).await.err().expect("refused");
    assert_eq!(e.failure(), Some(EtcdFailure::Authentication));
    assert!(e.to_string().contains("authentication failed"), "{e}");
    let mut foreign_ca = etcd.security_as(CONTROL.name, Auth::Certificate);
    foreign_ca.ca = Some(etcd.dir().join("tls/foreign/ca.pem"));
    let foreign_ca = infera_registry::EtcdConfig::new(vec![etcd.url()], foreign_ca).unwrap();
    let e = infera_registry::reach(&foreign_ca).await.err().expect("refused");
    assert!(e.is_refusal() && e.to_string().contains("UnknownIssuer"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_access_at_run_time_is_an_outage_and_access_back_resumes() {
    let mut etcd = EtcdServer::start_secure();
    let (mut changes, _stop) = control_watch(&etcd, Auth::Password);
    let launch = etcd.client_as(LAUNCH.name, Auth::Certificate);
    let _a = Registration::start(launch.clone(), record("a"), Duration::from_secs(10));
    assert_eq!(next(&mut changes, Duration::from_secs(10)).await, Change::Upsert(Box::new(record("a"))));

    // Control's user loses its role; etcd restarts, so every connection is made again.
    let mut root = infera_registry::connect(&etcd.root()).await.unwrap();
    root.user_revoke_role(CONTROL.name, CONTROL.name).await.unwrap();
    etcd.stop();
    etcd.resume();
    let _b = Registration::start(launch.clone(), record("b"), Duration::from_secs(10));
    poll(Duration::from_secs(10), "b registered", async || worker_keys(&etcd).await.len() == 2).await;
    no_change(&mut changes, Duration::from_secs(3), "a refused watch reports nothing, and drops nothing")
        .await;

    let mut root = infera_registry::connect(&etcd.root()).await.unwrap();
    root.user_grant_role(CONTROL.name, CONTROL.name).await.unwrap();
    assert_eq!(next(&mut changes, Duration::from_secs(10)).await, Change::Upsert(Box::new(record("b"))));
    no_change(&mut changes, Duration::from_secs(2), "a stayed: resynced as a diff").await;

    // The registrar loses its role: a new worker is retried, not given up, and lands once the
    // role is back.
    root.user_revoke_role(LAUNCH.name, LAUNCH.name).await.unwrap();
    let _c = Registration::start(launch, record("c"), Duration::from_secs(10));
    no_change(&mut changes, Duration::from_secs(2), "c is refused").await;
    assert_eq!(worker_keys(&etcd).await.len(), 2);
    root.user_grant_role(LAUNCH.name, LAUNCH.name).await.unwrap();
    assert_eq!(next(&mut changes, Duration::from_secs(10)).await, Change::Upsert(Box::new(record("c"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_rotated_in_its_file_is_used_from_the_next_connection() {
    let etcd = EtcdServer::start_secure();
    let control = etcd.client_as(CONTROL.name, Auth::Password);
    infera_registry::connect(&control).await.unwrap();
    let mut root = infera_registry::connect(&etcd.root()).await.unwrap();
    root.user_change_password(CONTROL.name, "rotated-password").await.unwrap();
    let e = infera_registry::connect(&control).await.err().expect("refused");
    assert_eq!(e.failure(), Some(EtcdFailure::Authentication), "{e}");
    std::fs::write(etcd.password_file(CONTROL.name), "rotated-password\n").unwrap();
    let mut c = infera_registry::connect(&control).await.expect("the new password, read from the file");
    c.get(keys::CONFIG, Some(GetOptions::new().with_prefix())).await.unwrap();
}
