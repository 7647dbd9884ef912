use std::sync::{Arc, Mutex};

use infera_proto::types::ReleaseReason;

use super::*;

/// A control as the outbox sees it: what it was sent, and how it answers.
#[derive(Clone, Default)]
struct Control {
    inner: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    /// Older than ReleaseMany: answers it UNIMPLEMENTED.
    old: bool,
    /// Calls that fail (UNAVAILABLE, no reason of control's) before one gets through.
    failing: usize,
    /// Leases no longer held.
    ended: Vec<LeaseId>,
    batches: Vec<Vec<String>>,
    singles: Vec<String>,
    failures: usize,
}

impl ReleaseCalls for Control {
    async fn release_many(&mut self, m: pb::ReleaseManyRequest) -> Result<pb::ReleaseManyResponse, Status> {
        let mut seen = self.inner.lock().unwrap();
        if seen.old {
            return Err(Status::unimplemented("unknown method ReleaseMany"));
        }
        if seen.failing > 0 {
            seen.failing -= 1;
            return Err(Status::unavailable("connection refused"));
        }
        seen.batches.push(m.releases.iter().map(|r| r.reservation_id.clone()).collect());
        Ok(pb::ReleaseManyResponse { outcomes: vec![pb::ReleaseOutcome::Released as i32; m.releases.len()] })
    }

    async fn release(&mut self, m: pb::ReleaseRequest) -> Result<(), Status> {
        let mut seen = self.inner.lock().unwrap();
        if seen.failing > 0 {
            seen.failing -= 1;
            return Err(Status::unavailable("connection refused"));
        }
        seen.singles.push(m.reservation_id);
        Ok(())
    }
}

impl Destination for Control {
    type Calls = Self;
    fn calls(&self) -> Self {
        self.clone()
    }
    fn holds(&self, lease: LeaseId) -> bool {
        !self.inner.lock().unwrap().ended.contains(&lease)
    }
    fn failed(&self) {
        self.inner.lock().unwrap().failures += 1;
    }
}

fn lease(n: u64) -> LeaseId {
    format!("l-00000001-{n}").parse().unwrap()
}

fn queued(lease_n: u64, n: u64) -> Queued {
    Queued {
        lease: lease(lease_n),
        release: Release::new(format!("r-00000001-{n}").parse().unwrap(), ReleaseReason::Eof),
    }
}

fn ids(ns: &[u64]) -> Vec<String> {
    ns.iter().map(|n| format!("r-00000001-{n}")).collect()
}

#[tokio::test]
async fn releases_queued_together_go_out_in_one_call_in_order() {
    let control = Control::default();
    let (tx, rx) = mpsc::unbounded_channel();
    for n in 1..=5 {
        tx.send(queued(1, n)).unwrap();
    }
    drop(tx);
    run(rx, control.clone()).await;
    // The batch is sent by a task of its own; wait for it with a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while control.inner.lock().unwrap().batches.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the batch never went out");
        tokio::task::yield_now().await;
    }
    let seen = control.inner.lock().unwrap();
    assert_eq!(seen.batches, vec![ids(&[1, 2, 3, 4, 5])]);
    assert!(seen.singles.is_empty());
}

#[tokio::test]
async fn a_control_without_release_many_gets_one_release_each() {
    let control = Control::default();
    control.inner.lock().unwrap().old = true;
    send(vec![queued(1, 1), queued(1, 2), queued(1, 3)], control.clone()).await;
    let seen = control.inner.lock().unwrap();
    assert!(seen.batches.is_empty());
    assert_eq!(seen.singles, ids(&[1, 2, 3]));
    assert_eq!(seen.failures, 0);
}

#[tokio::test(start_paused = true)]
async fn a_failing_batch_is_retried_without_the_releases_of_ended_leases() {
    let control = Control::default();
    control.inner.lock().unwrap().failing = 2;
    let to = control.clone();
    let sending = tokio::spawn(send(vec![queued(1, 1), queued(2, 2), queued(1, 3)], to));
    // The first attempt has failed once the outbox counted it; lease 2 ends before the retry.
    while control.inner.lock().unwrap().failures == 0 {
        tokio::task::yield_now().await;
    }
    control.inner.lock().unwrap().ended.push(lease(2));
    sending.await.unwrap();
    let seen = control.inner.lock().unwrap();
    assert_eq!(seen.failures, 2);
    assert_eq!(seen.batches, vec![ids(&[1, 3])]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_whose_leases_all_ended_is_dropped() {
    let control = Control::default();
    {
        let mut seen = control.inner.lock().unwrap();
        seen.failing = usize::MAX;
        seen.ended.push(lease(1));
    }
    send(vec![queued(1, 1), queued(1, 2)], control.clone()).await;
    let seen = control.inner.lock().unwrap();
    assert!(seen.batches.is_empty());
    assert_eq!(seen.failures, 0, "nothing left to retry after the first failure");
}
