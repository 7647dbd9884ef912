//! `--decode-request-weight auto` end to end: control polls a running sim's `/v1/loads`, its
//! `decode_moments` reach the fit, and `Admin/GetConfig`, the gauges and the decision events show
//! the W in use. Before a fit is trusted that is the fallback; `weight_fit_sim.rs` shows the fit
//! itself recovering the sim's W.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use infera_proto::pb;
use infera_testkit::{ControlSpec, SimSpec, Workers, http};
use serde_json::json;

use crate::harness::{eventually, pick, sample};

/// Keeps a short request on `rank` until `stop`.
async fn lane(url: String, rank: u32, stop: Arc<AtomicBool>) {
    let mut i = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let body = json!({"text": format!("{rank}-{i}-").repeat(500), "routed_dp_rank": rank,
            "sampling_params": {"max_new_tokens": 300, "ignore_eos": true}});
        let (status, out) =
            http::post_json(&format!("{url}/generate"), &body).await.expect("the sim answers");
        assert!(status.is_success(), "{status} {out}");
        i += 1;
    }
}

async fn config(control: &infera_testkit::Control) -> pb::Config {
    control.admin().await.get_config(pb::GetConfigRequest {}).await.unwrap().into_inner()
}

fn set(w: f64, auto: bool) -> pb::SetDecodeRequestWeightRequest {
    pb::SetDecodeRequestWeightRequest { decode_request_weight: w, auto }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_reads_the_engines_moments_and_uses_the_fallback_until_a_fit_counts() {
    let mut sim = SimSpec::mixed("mixed-0", "m", 8)
        .speedup(10.0)
        .params("prefill_batch_ms = 0.5\nprefill_ms_per_token = 0.0\nprefill_ms_per_token2 = 0.0\n")
        .start()
        .await
        .unwrap();
    let flags = [
        "--engine-poll-ms",
        "50",
        "--decode-input-demand",
        "shadow",
        "--decode-request-weight",
        "auto",
        "--decode-request-weight-fallback",
        "500000",
    ];
    let mut control =
        ControlSpec::new(Workers::Records(vec![sim.record.clone()])).flags(flags).start().await.unwrap();
    let c = config(&control).await;
    assert!(c.decode_request_weight_auto);
    assert_eq!(c.decode_request_weight, 500_000.0, "in auto the number is the fallback");

    let stop = Arc::new(AtomicBool::new(false));
    let lanes: Vec<_> =
        [0, 0, 3].into_iter().map(|r| tokio::spawn(lane(sim.url.clone(), r, stop.clone()))).collect();
    // The decode steps reach the fit: it counts intervals (two requests of the same size on the
    // busiest rank say nothing about context, so no fit is trusted and the fallback stays).
    let pool = eventually(Duration::from_secs(60), "the fit to count intervals", async || {
        let pool = config(&control).await.decode_pool_weights.into_iter().find(|p| p.model == "m")?;
        let fit = pool.workers.iter().find(|w| w.worker_id == "mixed-0")?;
        (fit.samples >= 5.0).then_some(pool)
    })
    .await;
    let fit = &pool.workers[0];
    assert_ne!(fit.verdict, "trusted", "{fit:?}");
    assert_eq!((pool.fitted_weight, pool.request_weight), (None, 500_000.0), "{pool:?}");
    stop.store(true, Ordering::Relaxed);

    let metrics = eventually(Duration::from_secs(10), "the fit's gauges", async || {
        let m = control.metrics().await.unwrap();
        (http::metric_sum(&m, "infera_router_decode_request_weight_fit_samples", "worker=\"mixed-0\"") > 0.0)
            .then_some(m)
    })
    .await;
    assert_eq!(
        sample(&metrics, "infera_router_decode_request_weight{model=\"m\"}"),
        Some(500_000.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "infera_router_decode_request_weight_fit_trusted{model=\"m\",worker=\"mixed-0\"}"),
        Some(0.0)
    );

    // A decode pick's decision carries the W it used.
    let mut admin = control.admin().await;
    let watch = pb::WatchDecisionsRequest { kind: pb::PickKind::Decode as i32, model: String::new() };
    let mut decisions = admin.watch_decisions(watch).await.unwrap().into_inner();
    let mut router = control.router().await;
    let lease =
        router.open_lease(pb::OpenLeaseRequest { holder: "t".into(), ttl_ms: 0 }).await.unwrap().into_inner();
    router.pick_decode(pick(&lease.lease_id, "m", 1_000)).await.unwrap();
    let event = decisions.message().await.unwrap().unwrap();
    assert_eq!(event.request_weight, 500_000.0);
    assert!(event.candidates.iter().all(|c| c.request_weight == 500_000.0));

    // A number pins W again; auto comes back with its own fallback.
    let c = admin.set_decode_request_weight(set(1_000.0, false)).await.unwrap().into_inner();
    assert!(!c.decode_request_weight_auto);
    assert_eq!(c.decode_pool_weights[0].request_weight, 1_000.0, "pinned: every pool uses the number");
    let c = admin.set_decode_request_weight(set(0.0, true)).await.unwrap().into_inner();
    assert!(c.decode_request_weight_auto);
    assert_eq!((c.decode_request_weight, c.decode_pool_weights[0].request_weight), (0.0, 0.0));

    for l in lanes {
        l.await.unwrap();
    }
    control.stop().await.unwrap();
    sim.stop().await.unwrap();
}
