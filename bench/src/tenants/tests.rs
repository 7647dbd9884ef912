//! The SMG arm end to end, small: SMG replicas in front of the sims, the tenants' keys and
//! their rate limits set.

use clap::Parser as _;

use super::*;

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: TenantsArgs,
}

#[tokio::test(flavor = "multi_thread")]
async fn smg_replicas_serve_each_tenant_within_its_rate_limit() {
    // 1,000 tokens a minute for the deployment: 250 per tenant and replica, a handful of
    // requests, were SMG's limiter to act on HTTP PD routing.
    let cli = Cli::try_parse_from([
        "tenants",
        "--arms",
        "smg",
        "--proxies",
        "2",
        "--decode-ranks",
        "2",
        "--steady-callers",
        "2",
        "--flood-callers",
        "4",
        "--steady-words",
        "20",
        "--flood-words",
        "40",
        "--max-tokens",
        "8",
        "--ramp-s",
        "1",
        "--settle-s",
        "0",
        "--window-s",
        "5",
        "--sim-speedup",
        "20",
        "--smg-tokens-per-minute",
        "1000",
    ])
    .unwrap();
    let run = arm_run(&cli.args, Arm::Smg, 0).await.unwrap();
    assert_eq!(run.arm, Arm::Smg);
    assert_eq!(run.predicted_after_s, None, "control predicts nothing it did not route");
    assert!(run.steps.iter().all(|s| s.predicted_ms.is_nan()), "{:?}", run.steps);
    let tenants: Vec<&str> = run.tenants.iter().map(|t| t.tenant.as_str()).collect();
    assert_eq!(tenants, ["steady", "flood"]);
    // SMG 1.13 limits tenants on its gRPC path only: through HTTP PD workers each tenant is
    // served far past its limit, and nothing is refused. If this fails, SMG now limits here and
    // the manual's SMG row (`manual/features/service_classes.md`) must be measured again.
    for t in &run.tenants {
        assert!(t.ok > 0 && t.tokens > 0, "served through its key: {t:?}");
        assert_eq!((t.limited, t.failed), (0, 0), "nothing refused: {t:?}");
    }
    let steady = &run.tenants[0];
    let limit_per_window = 2.0 * 250.0 * run.window_s / 60.0;
    assert!(steady.tokens as f64 > 10.0 * limit_per_window, "far past its limit: {steady:?}");
}
