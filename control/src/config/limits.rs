//! The flags of the replica set, outlier ejection, per-rank capacity and the bounds per identity.

use std::time::Duration;

use clap::Args as ClapArgs;

use crate::bounds::Bounds;
use crate::capacity::Capacity;
use crate::ejection::EjectionPolicy;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Replicas (with --etcd)")]
pub(super) struct ReplicaArgs {
    /// The URL proxies and the other replicas reach this control's gRPC at: written into the
    /// leader key, and named by followers in their NOT_LEADER answers. Default:
    /// `http://<bound --listen address>` (the host name for an unspecified address).
    #[arg(long, env = "INFERA_CONTROL_ADVERTISE_URL")]
    pub(super) advertise_url: Option<String>,
    /// With --admin-listen: the URL operators and the other replicas reach this control's
    /// Admin service at, written into the leader key beside --advertise-url (followers forward
    /// Admin calls there). Default: `http://<bound --admin-listen address>`, as for
    /// --advertise-url.
    #[arg(long, env = "INFERA_CONTROL_ADMIN_ADVERTISE_URL", value_name = "URL")]
    pub(super) admin_advertise_url: Option<String>,
    /// TTL of the leader's etcd lease (s): a leader that dies, hangs or loses etcd is replaced
    /// this long after its last renewal; it renews every TTL/4 and stops booking by itself
    /// before the TTL could have run out.
    #[arg(long, env = "INFERA_CONTROL_LEADER_LEASE_TTL_SECS", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    pub(super) leader_lease_ttl_secs: u64,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Outlier ejection")]
pub(super) struct EjectionArgs {
    /// Failed legs in a row (connect refused, timeout, 5xx, stream cut, as the proxies report
    /// them; or an engine whose `/v1/loads` stays unreadable) that eject a target: it takes no
    /// picks until its ejection ends and a probe succeeds. 0 turns ejection off.
    #[arg(long, env = "INFERA_EJECT_AFTER_FAILURES", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub(super) eject_after_failures: u32,
    /// How long the first ejection of a target lasts (ms); each failed probe doubles it.
    #[arg(long, env = "INFERA_EJECT_OPEN_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
    pub(super) eject_open_ms: u64,
    /// The longest an ejection lasts (ms).
    #[arg(long, env = "INFERA_EJECT_MAX_OPEN_MS", default_value_t = 600_000,
          value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
    pub(super) eject_max_open_ms: u64,
    /// Successful probes (one at a time) that make an ejected target healthy again.
    #[arg(long, env = "INFERA_EJECT_CLOSE_AFTER_SUCCESSES", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(super) eject_close_after_successes: u32,
    /// How long a proxy's leg that reached its end of stream on a target discounts the failures
    /// other identities report there (ms): a failure report counts towards an ejection only while
    /// no other identity has used the target without a failure that recently, so one credential's
    /// forged reports cannot eject a target others keep using. 0 counts every report.
    #[arg(long, env = "INFERA_EJECT_WITNESS_WINDOW_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub(super) eject_witness_window_ms: u64,
}

impl EjectionArgs {
    /// The thresholds these flags give.
    pub(super) fn policy(&self) -> EjectionPolicy {
        EjectionPolicy {
            failures: self.eject_after_failures,
            open: Duration::from_millis(self.eject_open_ms),
            max_open: Duration::from_millis(self.eject_max_open_ms.max(self.eject_open_ms)),
            successes: self.eject_close_after_successes,
            witness_window: Duration::from_millis(self.eject_witness_window_ms),
        }
    }
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Bounds per identity")]
pub(super) struct BoundArgs {
    /// Most leases one identity (a proxy's certificate or token) may hold open at once; one more
    /// OpenLease is refused with RESOURCE_EXHAUSTED (`too_many_leases`). A proxy holds one (two
    /// for a moment when it moves to another replica); proxies sharing a credential share it.
    #[arg(long, env = "INFERA_MAX_LEASES_PER_IDENTITY", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(super) max_leases_per_identity: u64,
    /// Largest Redeclare control takes in one call, as encoded (bytes); a larger one is refused
    /// with RESOURCE_EXHAUSTED (`redeclare_too_large`) and books nothing. Proxies send theirs in
    /// calls of at most 256 KiB.
    #[arg(long, env = "INFERA_MAX_REDECLARE_BYTES", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u64).range(262_144..=4_000_000))]
    pub(super) max_redeclare_bytes: u64,
}

impl BoundArgs {
    /// The bounds these flags give.
    pub(super) fn bounds(&self) -> Bounds {
        Bounds {
            leases_per_identity: usize::try_from(self.max_leases_per_identity).unwrap_or(usize::MAX),
            redeclare_bytes: usize::try_from(self.max_redeclare_bytes).unwrap_or(usize::MAX),
        }
    }
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Capacity")]
pub(super) struct CapacityArgs {
    /// Most requests a rank may hold (the ledger's held requests, which equal what its engine
    /// runs and queues): a rank at the cap takes no pick, and a pick whose every candidate is at
    /// it is refused with RESOURCE_EXHAUSTED (`at_capacity`), which the proxies queue on.
    /// 0 = no cap.
    #[arg(long, env = "INFERA_MAX_REQUESTS_PER_RANK", default_value_t = 0)]
    pub(super) max_requests_per_rank: u64,
    /// Highest KV use (used / total tokens, the engine's own reading) at which a rank still
    /// takes picks, 0–1; 1 = no cap.
    #[arg(long, env = "INFERA_MAX_KV_USAGE", default_value_t = 1.0, value_parser = kv_usage)]
    pub(super) max_kv_usage: f64,
}

fn kv_usage(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: a KV use between 0 and 1")),
    }
}

impl CapacityArgs {
    /// The caps these flags give.
    pub(super) fn caps(&self) -> Capacity {
        Capacity {
            max_requests: (self.max_requests_per_rank > 0).then_some(self.max_requests_per_rank),
            max_kv_usage: (self.max_kv_usage < 1.0).then_some(self.max_kv_usage),
        }
    }
}
