//! The tenants bench's SMG arm: what SMG (`smg==1.13.0`) gives an operator facing a flooding
//! tenant, on each of `--proxies` replicas in front of the same sims (each replica counts on its
//! own: no mesh), at the settings an operator would size for this deployment:
//!
//! - each tenant its own API key (`--tenant-api-key steady:KEY`), so every request has its
//!   tenant (`auth:steady`);
//! - SMG's tenant rate limiter (`--tenant-rate-limit-enabled`): each tenant's tokens (input and
//!   output, SMG's unit) per minute are its weight's share of what the deployment serves at the
//!   ITL target (`--smg-tokens-per-minute`), divided among the replicas; no request limit;
//! - SMG's concurrency cap (`--max-concurrent-requests`): the per-proxy arm's
//!   `--per-proxy-inflight`, FIFO, waiting at most the class's TTFT target
//!   (`--queue-timeout-secs`);
//! - the decode policy `least_load`, DP-aware, overload protection at its default, the load
//!   monitor on a fair clock ([`load_monitor_interval_s`]).
//!
//! SMG 1.13 applies those tenant limits in its gRPC pipeline only (its rate-limit stage is one
//! of `routers::grpc`): in front of HTTP PD workers, SGLang's HTTP server and the sims alike,
//! they do not act. With every limit, the default's too, at 10 tokens and 10 requests a minute,
//! two replicas served 665 of one tenant's requests in 5 s (the test below asserts that they do
//! not limit, so that an SMG that starts to is noticed). The arm keeps them configured, as an
//! operator would; what shares the tenants then get is the per-replica FIFO cap's doing. Were
//! they to refuse, their 429s carry `Retry-After`, which the callers wait out.

use anyhow::Context as _;
use infera_testkit::{ApiKeys, Cluster};

use super::{MODEL, TenantsArgs};
use crate::study::smg::{self, Gateway, Launch, PrefillUrl, Smg, SmgArm, SmgPolicy, load_monitor_interval_s};

/// Tokens or requests per minute that never bind (SMG wants every limit above 0).
const UNBOUNDED: u64 = 4_000_000_000;

/// The running replicas and what they were started from.
pub(crate) struct Replicas {
    pub(crate) smgs: Vec<Smg>,
    /// The limits file and the replicas' logs.
    _dir: tempfile::TempDir,
}

impl Replicas {
    /// Each replica's base URL, for the callers.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.smgs.iter().map(|s| s.url.clone()).collect()
    }

    /// Stops every replica.
    ///
    /// # Errors
    /// When one does not exit.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        for smg in self.smgs {
            smg.stop().await?;
        }
        Ok(())
    }
}

/// Starts `args.proxies` SMG replicas in front of `cluster`'s sims (`prefill-0`, `decode-0`).
///
/// # Errors
/// When SMG is missing, refuses its flags or does not register the sims in time.
pub(crate) async fn start(args: &TenantsArgs, cluster: &Cluster, keys: &ApiKeys) -> anyhow::Result<Replicas> {
    let program = smg::binary(Gateway::Smg, args.smg.as_deref())?;
    let dir = tempfile::tempdir()?;
    let limits = dir.path().join("tenant-limits.yaml");
    std::fs::write(&limits, limits_yaml(args)).with_context(|| format!("writing {}", limits.display()))?;
    let prefill = cluster.sim("prefill-0");
    let prefills = vec![PrefillUrl {
        url: prefill.url.clone(),
        bootstrap_port: prefill.bootstrap_port().context("a prefill sim has a bootstrap port")?,
    }];
    let decodes = vec![cluster.sim("decode-0").url.clone()];
    let arm = SmgArm {
        gateway: Gateway::Smg,
        policy: SmgPolicy::LeastLoad,
        overload_protection: true,
        priority_scheduler: false,
    };
    // SMG guards its worker list with a control-plane key once it has serving keys.
    let control_key = format!("{:032x}", rand::random::<u128>());
    let mut smgs = Vec::new();
    for i in 0..args.proxies {
        let launch = Launch {
            arm,
            load_monitor_interval_s: load_monitor_interval_s(args.sim_speedup),
            prefills: prefills.clone(),
            decodes: decodes.clone(),
            port: 0,
            metrics_port: 0,
            extra: flags(args, keys, &limits.display().to_string(), &control_key),
            api_key: Some(keys.key("steady").to_owned()),
            control_key: Some(control_key.clone()),
        };
        let log = dir.path().join(format!("smg-{i}.log"));
        smgs.push(Smg::start(&program, launch, MODEL, args.decode_ranks, log).await?);
    }
    Ok(Replicas { smgs, _dir: dir })
}

/// The flags beyond the study's: keys, tenant limits, the concurrency cap.
fn flags(args: &TenantsArgs, keys: &ApiKeys, limits: &str, control_key: &str) -> Vec<String> {
    let mut flags = vec!["--control-plane-api-keys".to_owned(), format!("bench:bench:user:{control_key}")];
    for tenant in ["steady", "flood"] {
        flags.extend(["--tenant-api-key".to_owned(), format!("{tenant}:{}", keys.key(tenant))]);
    }
    flags.extend(["--tenant-rate-limit-enabled".to_owned(), "--tenant-rate-limit-config".to_owned()]);
    flags.push(limits.to_owned());
    flags.extend(["--max-concurrent-requests".to_owned(), args.per_proxy_inflight.to_string()]);
    flags.extend(["--queue-timeout-secs".to_owned(), args.ttft_ms.div_ceil(1000).to_string()]);
    flags
}

/// Each replica's tokens per minute for one tenant: its weight's share of the deployment's,
/// divided among the replicas.
fn tenant_tokens_per_minute(args: &TenantsArgs, weight: f64) -> u64 {
    let share = weight / (args.steady_weight + args.flood_weight);
    (args.smg_tokens_per_minute as f64 * share / args.proxies as f64).round() as u64
}

/// The `--tenant-rate-limit-config` file.
fn limits_yaml(args: &TenantsArgs) -> String {
    let tenant = |name: &str, weight: f64| {
        format!(
            "  - tenant_key: \"auth:{name}\"\n    tokens_per_minute: {}\n    requests_per_minute: {UNBOUNDED}\n",
            tenant_tokens_per_minute(args, weight)
        )
    };
    format!(
        "default_policy:\n  tokens_per_minute: {UNBOUNDED}\n  requests_per_minute: {UNBOUNDED}\ntenants:\n{}{}",
        tenant("steady", args.steady_weight),
        tenant("flood", args.flood_weight)
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: TenantsArgs,
    }

    #[test]
    fn each_replica_limits_each_tenant_to_its_share_of_the_deployment() {
        let cli =
            Cli::try_parse_from(["t", "--smg-tokens-per-minute", "8000000", "--steady-weight", "3"]).unwrap();
        // 4 replicas: steady 3/4 of 8 M over 4 = 1.5 M, the flood 1/4 of 8 M over 4 = 0.5 M.
        assert_eq!(tenant_tokens_per_minute(&cli.args, 3.0), 1_500_000);
        let yaml = limits_yaml(&cli.args);
        assert!(yaml.starts_with("default_policy:\n  tokens_per_minute: 4000000000\n"), "{yaml}");
        assert!(yaml.contains("- tenant_key: \"auth:steady\"\n    tokens_per_minute: 1500000\n"), "{yaml}");
        assert!(yaml.contains("- tenant_key: \"auth:flood\"\n    tokens_per_minute: 500000\n"), "{yaml}");
        let keys = ApiKeys::new(&["steady", "flood"]);
        let flags = flags(&cli.args, &keys, "limits.yaml", "cp").join(" ");
        assert!(flags.starts_with("--control-plane-api-keys bench:bench:user:cp "), "{flags}");
        assert!(flags.contains(&format!("--tenant-api-key steady:{}", keys.key("steady"))), "{flags}");
        assert!(
            flags.ends_with(
                "--tenant-rate-limit-enabled --tenant-rate-limit-config limits.yaml \
                 --max-concurrent-requests 8 --queue-timeout-secs 30"
            ),
            "{flags}"
        );
    }
}
