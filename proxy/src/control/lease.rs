//! The proxy's lease with control: every reservation is booked under it. Opened at start and
//! renewed every TTL/3 with the current replica; closed at shutdown so that control releases what
//! it still holds.
//!
//! When control forgets the lease (it restarted, or it expired), or the replica does not lead
//! (`NOT_LEADER`: the lease goes to the leader it names), or the replica stops answering (twice
//! in a row: the lease goes to the next replica, in turn), a new lease is opened — and right
//! after, every leg this proxy has in flight that is not booked under it is re-declared
//! ([`super::redeclare`]). Each renewal re-declares whatever is still not booked under the lease
//! (a pick answered late by the previous replica, a local fallback pick), so the leader's ledger
//! equals what is in flight within one keep-alive interval.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use infera_proto::convert;
use infera_proto::error::{ErrorReason, StatusReason};
use infera_proto::pb;
use infera_proto::types::LeaseId;
use tonic::Status;

use super::controls::{Controls, Follow, ReplicaIndex};
use crate::metrics::ProxyMetrics;

/// Keep-alives that fail in a row before the lease is given up for the next replica.
const FAILURES_BEFORE_MOVING_ON: u32 = 2;
/// The shortest time between two keep-alives when picks report a failing control.
const SUSPECT_GAP: Duration = Duration::from_millis(100);
/// The longest a keep-alive is waited for.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_millis(500);

/// A lease and the replica that granted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) lease: LeaseId,
    pub(super) at: ReplicaIndex,
}

/// The lease held now, if any.
#[derive(Debug)]
pub(super) struct Lease {
    /// Who holds it, shown in control's `ListReservations`.
    holder: String,
    /// The TTL asked for.
    ttl: Duration,
    held: RwLock<Option<Held>>,
    /// The last lease whose legs in flight were re-declared once it was opened.
    declared: RwLock<Option<LeaseId>>,
    /// Wakes the loop when a pick found the lease forgotten.
    lost: tokio::sync::Notify,
}

impl Lease {
    /// No lease yet; [`Lease::run`] opens one.
    pub(super) fn new(holder: String, ttl: Duration) -> Self {
        Self {
            holder,
            ttl,
            held: RwLock::new(None),
            declared: RwLock::new(None),
            lost: tokio::sync::Notify::new(),
        }
    }

    /// The lease held now.
    pub(super) fn get(&self) -> Option<LeaseId> {
        self.held().map(|h| h.lease)
    }

    pub(super) fn held(&self) -> Option<Held> {
        *self.held.read().expect("lease lock")
    }

    /// The lease held now, once this proxy's legs in flight are booked under it (re-declared
    /// after it was opened): a pick that must see the ledger whole (one waiting for admission)
    /// waits for this rather than [`Lease::get`].
    pub(super) fn declared(&self) -> Option<LeaseId> {
        let declared = *self.declared.read().expect("lease lock");
        declared.filter(|l| self.holds(*l))
    }

    /// Whether `lease` is still the one held (a lease that ended took its reservations with it).
    pub(super) fn holds(&self, lease: LeaseId) -> bool {
        self.get() == Some(lease)
    }

    /// The lease is no good any more (control forgot it, or does not lead): drop it, if it is
    /// still the one held, and reopen now, not at the next keep-alive.
    pub(super) fn forget(&self, lease: LeaseId) {
        let mut held = self.held.write().expect("lease lock");
        if held.is_some_and(|h| h.lease == lease) {
            *held = None;
            self.lost.notify_one();
        }
    }

    /// A call to the lease's control failed in transport: renew now rather than at the next
    /// keep-alive, so that a dead control is given up within two quick failures.
    pub(super) fn suspect(&self) {
        self.lost.notify_one();
    }

    /// Closes the lease (best effort, one second at most).
    pub(super) async fn close(&self, controls: &Controls) {
        let held = self.held.write().expect("lease lock").take();
        if let Some(Held { lease, at }) = held {
            let req = pb::CloseLeaseRequest { lease_id: lease.to_string() };
            let _ = tokio::time::timeout(Duration::from_secs(1), controls.client(at).close_lease(req)).await;
        }
    }

    /// Opens, renews, moves and reopens the lease until `stop` fires; `reconcile` re-declares the
    /// legs not booked under the lease (after each open and each renewal) and says whether the
    /// lease is still good.
    pub(super) async fn run<F, Fut>(
        self: Arc<Self>,
        controls: Arc<Controls>,
        metrics: Arc<ProxyMetrics>,
        reconcile: F,
        mut stop: tokio::sync::watch::Receiver<()>,
    ) where
        F: Fn(Held, bool) -> Fut,
        Fut: Future<Output = Result<(), Status>>,
    {
        let mut backoff = Duration::from_millis(50);
        let mut failures = 0;
        loop {
            let called = tokio::time::Instant::now();
            let wait = match self.held() {
                None => match self.open(&controls).await {
                    Ok(held) => {
                        tracing::info!(lease = %held.lease, control = %controls.url(held.at), holder = %self.holder, "lease opened with control");
                        *self.held.write().expect("lease lock") = Some(held);
                        backoff = Duration::from_millis(50);
                        failures = 0;
                        self.settle(reconcile(held, true).await, held, &controls);
                        self.ttl / 3
                    }
                    Err((at, status)) => {
                        metrics.control_error("open_lease");
                        let wait = self.move_on(&controls, at, &status, backoff);
                        if wait == backoff {
                            backoff = (backoff * 2).min(Duration::from_millis(250));
                        }
                        wait
                    }
                },
                Some(held) => {
                    let req = pb::KeepAliveRequest { lease_id: held.lease.to_string() };
                    let timeout = KEEP_ALIVE_TIMEOUT.min(self.ttl / 3);
                    let mut client = controls.client(held.at);
                    let call = client.keep_alive(req);
                    match tokio::time::timeout(timeout, call).await {
                        Ok(Ok(_)) => {
                            failures = 0;
                            self.settle(reconcile(held, false).await, held, &controls);
                            self.ttl / 3
                        }
                        Ok(Err(s)) if StatusReason::of(&s).known() == Some(ErrorReason::UnknownLease) => {
                            tracing::warn!(lease = %held.lease, "control forgot this proxy's lease (expired or control restarted); reopening");
                            self.forget(held.lease);
                            Duration::ZERO
                        }
                        Ok(Err(s)) if StatusReason::of(&s).known() == Some(ErrorReason::NotLeader) => {
                            tracing::warn!(lease = %held.lease, "the lease's control no longer leads; moving to the leader");
                            self.forget(held.lease);
                            self.move_on(&controls, held.at, &s, Duration::ZERO)
                        }
                        _ => {
                            metrics.control_error("keep_alive");
                            failures += 1;
                            tracing::warn!(lease = %held.lease, failures, "keep-alive failed; control unreachable");
                            if failures >= FAILURES_BEFORE_MOVING_ON {
                                failures = 0;
                                self.abandon(held, &controls);
                                controls.next_after(held.at);
                                Duration::ZERO
                            } else {
                                Duration::from_millis(100)
                            }
                        }
                    }
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.lost.notified() => {
                    // A forgotten lease reopens at once; a suspected control is asked again no
                    // sooner than SUSPECT_GAP after the last call (picks may fail by the hundred).
                    if self.held().is_some() {
                        tokio::time::sleep_until(called + SUSPECT_GAP).await;
                    }
                }
            }
        }
    }

    /// A re-declare that failed costs the lease: the next one declares everything again (a
    /// declaration control may have booked without this proxy hearing of it would otherwise
    /// stay booked beside the one that follows).
    fn settle(&self, reconciled: Result<(), Status>, held: Held, controls: &Controls) {
        if reconciled.is_ok() {
            *self.declared.write().expect("lease lock") = Some(held.lease);
        }
        if let Err(status) = reconciled {
            tracing::warn!(lease = %held.lease, code = ?status.code(), error = %status.message(), "re-declaring legs failed; opening a new lease");
            if StatusReason::of(&status).known() == Some(ErrorReason::NotLeader) {
                self.forget(held.lease);
                let _ = self.move_on(controls, held.at, &status, Duration::ZERO);
            } else {
                self.abandon(held, controls);
            }
        }
    }

    /// Gives up `held`; it is closed in the background should its control answer again (what it
    /// still books there would otherwise count twice until it expires).
    fn abandon(&self, held: Held, controls: &Controls) {
        self.forget(held.lease);
        let client = controls.client(held.at);
        let ttl = self.ttl;
        tokio::spawn(async move {
            let req = pb::CloseLeaseRequest { lease_id: held.lease.to_string() };
            let _ = tokio::time::timeout(ttl, async {
                loop {
                    match client.clone().close_lease(req.clone()).await {
                        Err(s) if StatusReason::of(&s).known().is_none() => {
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        _ => return,
                    }
                }
            })
            .await;
        });
    }

    /// After replica `at` refused or failed with `status`: the leader it named becomes current
    /// (then no wait), else the next replica (then `wait`).
    fn move_on(&self, controls: &Controls, at: ReplicaIndex, status: &Status, wait: Duration) -> Duration {
        if let Some(leader) = StatusReason::leader(status)
            && controls.url(at) != leader.trim_end_matches('/')
            && controls.follow(&leader) == Follow::Followed
        {
            return Duration::ZERO;
        }
        controls.next_after(at);
        // A full turn over the replicas without a leader waits; within the turn, the next one
        // is tried at once.
        if controls.current().0 == ReplicaIndex::FIRST {
            wait.max(Duration::from_millis(50))
        } else {
            Duration::from_millis(10)
        }
    }

    async fn open(&self, controls: &Controls) -> Result<Held, (ReplicaIndex, Status)> {
        let (at, mut client) = controls.current();
        let ttl_ms = u32::try_from(self.ttl.as_millis()).unwrap_or(u32::MAX);
        let req = pb::OpenLeaseRequest { holder: self.holder.clone(), ttl_ms };
        let lease = tokio::time::timeout(Duration::from_secs(2), client.open_lease(req))
            .await
            .map_err(|_| (at, Status::deadline_exceeded("open lease timed out")))?
            .map_err(|s| (at, s))?;
        let lease = convert::lease_id("lease_id", &lease.into_inner().lease_id)
            .map_err(|e| (at, Status::internal(format!("control answered OpenLease with {e}"))))?;
        Ok(Held { lease, at })
    }
}
