//! PD pairing with real sims behind control: a prefill at page size 16 and a decode at page size 1
//! (the pair that killed SGLang's decode) take no picks and no request reaches them; a compatible
//! decode registered later makes the pair serve while the odd one stays out; a record whose page
//! size is wrong is listed with the engine's.

use std::time::Duration;

use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb;
use infera_registry::Registration;
use infera_testkit::EtcdServer;
use infera_testkit::http::metric_sum;
use infera_testkit::{Control, ControlSpec, Sim, SimSpec, Workers};

use crate::harness::{eventually, pick};

const WAIT: Duration = Duration::from_secs(15);

/// `worker`'s rows in `Admin/ListTargets`: page size and unpaired reason of each rank.
async fn rows(control: &Control, worker: &str) -> Vec<(u32, String)> {
    let rows = control.targets().await;
    rows.iter()
        .filter(|r| r.target.as_ref().is_some_and(|t| t.worker_id == worker))
        .map(|r| (r.worker.as_ref().unwrap().page_size, r.unpaired_reason.clone()))
        .collect()
}

async fn unpaired(control: &Control, role: &str) -> f64 {
    let labels = format!("model=\"m\",role=\"{role}\"");
    metric_sum(&control.metrics().await.unwrap(), "infera_router_unpaired_workers", &labels)
}

async fn lease(control: &Control) -> String {
    let req = pb::OpenLeaseRequest { holder: "test".into(), ttl_ms: 0 };
    control.router().await.open_lease(req).await.unwrap().into_inner().lease_id
}

/// Both picks for `m` are refused with `NO_COMPATIBLE_PAIR`, naming what each side runs.
async fn refused(control: &Control, lease: &str) {
    let mut router = control.router().await;
    let errors =
        [router.pick_prefill(pick(lease, "m", 10)).await, router.pick_decode(pick(lease, "m", 10)).await];
    for e in errors {
        let status = e.unwrap_err();
        assert_eq!(StatusReason::of(&status).known(), Some(ErrorReason::NoCompatiblePair), "{status:?}");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(
            status.message().contains("its prefills run page_size 16, its decodes run page_size 1"),
            "{status:?}"
        );
    }
}

async fn no_requests(sims: &[&Sim]) {
    for sim in sims {
        assert_eq!(sim.requests().await, Vec::<serde_json::Value>::new(), "{} got a request", sim.record.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_at_page_16_and_a_decode_at_page_1_never_serve_until_a_compatible_decode_comes() {
    let etcd = EtcdServer::start();
    let mut p16 = SimSpec::prefill("prefill-16", "m").page_size(16).start().await.unwrap();
    let mut d1 = SimSpec::decode("decode-1", "m", 1).page_size(1).start().await.unwrap();
    let mut d16 = SimSpec::decode("decode-16", "m", 2).page_size(16).start().await.unwrap();
    let mut control = ControlSpec::new(Workers::None)
        .etcd(etcd.url())
        .flags(["--engine-poll-ms", "0"])
        .start()
        .await
        .unwrap();
    control.wait_leading().await.unwrap();
    // The prefill's record says page size 1 (as a launcher that was not told --page-size writes
    // it): control lists the 16 its engine runs.
    let ttl = Duration::from_secs(10);
    let p16_record = p16.record.clone().with_page_size(1);
    let _p = Registration::start(vec![etcd.url()], p16_record, ttl);
    let _d1 = Registration::start(vec![etcd.url()], d1.record.clone(), ttl);
    control.wait_targets(2).await.unwrap();

    assert_eq!(
        rows(&control, "prefill-16").await,
        [(16, "page_size 16, but the model's decodes run page_size 1".into())]
    );
    assert_eq!(
        rows(&control, "decode-1").await,
        [(1, "page_size 1, but the model's prefills run page_size 16".into())]
    );
    let metrics = control.metrics().await.unwrap();
    let mismatch = r#"worker="prefill-16",field="page_size""#;
    assert_eq!(metric_sum(&metrics, "infera_router_record_mismatches_total", mismatch), 1.0);
    assert_eq!((unpaired(&control, "prefill").await, unpaired(&control, "decode").await), (1.0, 1.0));
    let lease = lease(&control).await;
    refused(&control, &lease).await;
    let outcome = r#"outcome="no_compatible_pair""#;
    assert_eq!(metric_sum(&control.metrics().await.unwrap(), "infera_router_picks_total", outcome), 2.0);
    no_requests(&[&p16, &d1]).await;

    // A decode at page size 16 registers: it pairs with the prefill; decode-1 stays out.
    let d16_registration = Registration::start(vec![etcd.url()], d16.record.clone(), ttl);
    control.wait_targets(4).await.unwrap();
    let reason = "page_size 1, but the model's paired workers run page_size 16".to_owned();
    assert_eq!(rows(&control, "decode-1").await, [(1, reason)]);
    assert_eq!(rows(&control, "decode-16").await, [(16, String::new()), (16, String::new())]);
    assert_eq!(rows(&control, "prefill-16").await, [(16, String::new())]);
    assert_eq!((unpaired(&control, "prefill").await, unpaired(&control, "decode").await), (0.0, 1.0));
    let mut router = control.router().await;
    let prefill = router.pick_prefill(pick(&lease, "m", 10)).await.unwrap().into_inner();
    assert_eq!(prefill.worker.unwrap().worker_id, "prefill-16");
    for _ in 0..6 {
        let decode = router.pick_decode(pick(&lease, "m", 10)).await.unwrap().into_inner();
        assert_eq!(decode.worker.unwrap().worker_id, "decode-16", "decode-1 is unpaired");
    }
    no_requests(&[&d1]).await;

    // The compatible decode leaves: the model is refused again.
    d16_registration.stop().await;
    eventually(WAIT, "decode-16 gone", async || rows(&control, "decode-16").await.is_empty()).await;
    refused(&control, &lease).await;
    control.stop().await.unwrap();
    for sim in [&mut p16, &mut d1, &mut d16] {
        sim.stop().await.unwrap();
    }
}
