//! The attack suite against a hardened deployment of real processes (`infera_testkit::attack`):
//! every case's attack fails, and after each the deployment still serves and its ledger returns
//! to zero. `cargo xtask bench attack` runs the same cases with larger floods and prints what
//! each sent and got back, and the peak RSS of control and the proxies.

use infera_testkit::attack::{self, Scale, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_fails_and_the_deployment_serves_on() {
    let scale = Scale::suite();
    let target = Target::start(&scale).await.expect("the hardened deployment starts");
    let reports = attack::run(&target, &scale, attack::cases(), |r| {
        eprintln!(
            "{:<28} {} | sent: {} | got: {}",
            r.case,
            if r.safe() { "safe" } else { "BREACH" },
            r.sent,
            r.answered
        );
    })
    .await;
    let breaches: Vec<String> = reports
        .iter()
        .filter(|r| !r.safe())
        .map(|r| format!("{}: {}", r.case, r.breaches.join("; ")))
        .collect();
    assert!(
        breaches.is_empty(),
        "{} of {} cases breached:\n{}",
        breaches.len(),
        reports.len(),
        breaches.join("\n")
    );
    assert_eq!(reports.len(), attack::cases().len());
}
