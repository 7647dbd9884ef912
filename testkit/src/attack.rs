//! The attack suite: a hardened deployment ([`Target`]: control with TLS and Router tokens,
//! proxies with API keys and their metrics apart, etcd with TLS, client certificates and roles,
//! every part but the sims a real process) and, against it, what an attacker on the same network
//! would send: unauthenticated and foreign Router calls, floods of leases, sessions and idle or
//! slow sockets, bodies built to cost memory (alone and many at once), a cross-tenant abort, hostile worker records and
//! writes to etcd without credentials. Each case sends its attack, reads what came back and
//! checks the safe outcome; [`run`] runs them in order and measures the peak RSS of control and
//! the proxies during each.
//!
//! The suite's test (`testkit/tests/attack.rs`) runs every case at [`Scale::suite`];
//! `cargo xtask bench attack` at [`Scale::bench`] and prints the reports.

use std::future::Future;
use std::pin::Pin;

mod bodies;
mod edge;
mod engines;
mod router;
mod target;
mod tenants;

pub use target::{Target, peak_rss_kib, reset_peak_rss};

/// How hard the floods push.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// Sockets per flood (slow-loris, idle): more than a proxy's `--max-connections`.
    pub sockets: usize,
    /// A proxy's `--max-connections`.
    pub max_connections: usize,
    /// Distinct session keys sent, against control's `--session-max`.
    pub sessions: usize,
    /// Control's `--session-max`.
    pub session_max: usize,
    /// Leases the rogue identity tries to open.
    pub leases: usize,
    /// `--max-leases-per-identity`.
    pub max_leases: usize,
    /// Reservation ids guessed.
    pub guesses: usize,
    /// Large bodies sent at once.
    pub bodies: usize,
    /// The proxies' `--max-body-bytes-in-flight`, in MiB.
    pub body_budget_mib: usize,
}

impl Scale {
    /// What the suite runs: every bound crossed, in seconds.
    pub fn suite() -> Self {
        Self {
            sockets: 300,
            max_connections: 200,
            sessions: 300,
            session_max: 100,
            leases: 40,
            max_leases: 8,
            guesses: 200,
            bodies: 8,
            body_budget_mib: 64,
        }
    }

    /// What the bench runs: the suite's floods `factor` times over, at the same bounds.
    pub fn bench(factor: usize) -> Self {
        let s = Self::suite();
        Self {
            sockets: s.max_connections + s.sockets * factor,
            sessions: s.sessions * factor,
            leases: s.leases * factor,
            guesses: s.guesses * factor,
            bodies: s.bodies * factor,
            ..s
        }
    }
}

/// What one case did and what it found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The case.
    pub case: &'static str,
    /// What was sent.
    pub sent: String,
    /// What came back.
    pub answered: String,
    /// Each outcome that was not the safe one (empty: the attack failed, as it must).
    pub breaches: Vec<String>,
    /// The peak RSS of each part during the case.
    pub peak_rss: Vec<PartRss>,
}

/// One part's peak resident memory over a stretch of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartRss {
    /// `control`, `proxy-0`, …
    pub part: String,
    /// Its peak RSS (`VmHWM`), in KiB.
    pub kib: u64,
}

impl PartRss {
    /// In MiB.
    pub fn mib(&self) -> f64 {
        self.kib as f64 / 1024.0
    }
}

impl Report {
    fn new(case: &'static str, sent: impl Into<String>) -> Self {
        Self { case, sent: sent.into(), answered: String::new(), breaches: Vec::new(), peak_rss: Vec::new() }
    }

    fn answered(mut self, answered: impl Into<String>) -> Self {
        self.answered = answered.into();
        self
    }

    /// Records a breach unless `safe`.
    fn expect(&mut self, safe: bool, breach: impl FnOnce() -> String) {
        if !safe {
            self.breaches.push(breach());
        }
    }

    /// Whether every outcome was safe.
    pub fn safe(&self) -> bool {
        self.breaches.is_empty()
    }
}

type CaseFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Report>> + 'a>>;

/// One attack.
pub struct Case {
    /// Its name.
    pub name: &'static str,
    run: for<'a> fn(&'a Target, &'a Scale) -> CaseFuture<'a>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish_non_exhaustive()
    }
}

macro_rules! cases {
    ($($name:literal => $f:path),* $(,)?) => {
        vec![$(Case { name: $name, run: |t, s| Box::pin($f(t, s)) }),*]
    };
}

/// Every case, in the order they run (the floods last, the deployment checked after each).
pub fn cases() -> Vec<Case> {
    cases![
        "router-without-credential" => router::without_credential,
        "router-foreign-ids" => router::foreign_ids,
        "router-forged-failures" => router::forged_failures,
        "router-lease-flood" => router::lease_flood,
        "router-phantom-redeclare" => router::phantom_redeclare,
        "proxy-key-file-broken" => edge::broken_key_file,
        "proxy-metrics-apart" => edge::metrics_apart,
        "proxy-oversized-body" => bodies::oversized,
        "proxy-deep-json" => bodies::deeply_nested,
        "proxy-number-array-30mib" => bodies::number_array,
        "proxy-body-flood" => bodies::body_flood,
        "proxy-long-ids" => bodies::long_ids,
        "proxy-session-key-flood" => bodies::session_flood,
        "proxy-cross-tenant-abort" => tenants::cross_tenant_abort,
        "proxy-error-hygiene" => tenants::error_hygiene,
        "worker-hostile-record" => engines::hostile_record,
        "worker-hostile-server-info" => engines::hostile_server_info,
        "etcd-without-credentials" => engines::etcd_intruders,
        "proxy-slow-loris" => edge::slow_loris,
        "proxy-idle-sockets" => edge::idle_sockets,
    ]
}

/// Runs `cases` against `target` in order, each followed by the check that the deployment still
/// serves and its ledger returns to zero (a breach of the case's otherwise); `each` sees every
/// report as it is made.
pub async fn run(
    target: &Target,
    scale: &Scale,
    cases: Vec<Case>,
    mut each: impl FnMut(&Report),
) -> Vec<Report> {
    let mut reports = Vec::new();
    for case in cases {
        let pids = target.pids();
        pids.iter().for_each(|(_, pid)| target::reset_peak_rss(*pid));
        let mut report = match (case.run)(target, scale).await {
            Ok(r) => r,
            Err(e) => {
                let mut r = Report::new(case.name, "(the attack could not be made)");
                r.breaches.push(format!("the case failed: {e:#}"));
                r
            }
        };
        report.peak_rss = pids
            .iter()
            .map(|(name, pid)| PartRss { part: name.clone(), kib: target::peak_rss_kib(*pid) })
            .collect();
        if let Err(e) = target.still_serves().await {
            report.breaches.push(format!("after the attack: {e:#}"));
        }
        each(&report);
        reports.push(report);
    }
    reports
}
