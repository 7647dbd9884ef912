//! Fleet admission in the shell (`crate::admission`): the class book in force, each model's one
//! queue, and the dispatcher that admits its waiters as ranks free up, sheds those whose TTFT
//! target can no longer be met (not even after a prefill as quick as the quickest tenth) and
//! forgets those whose caller left.
//!
//! Lock order: a model's queue, then the core (a direct pick looks at the queue and lets go of
//! it before it takes the core).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use infera_proto::types::{ModelName, PickKind, PickRequest, Release, ReleaseReason, ServiceClassName};
use tokio::sync::{Notify, oneshot};

use super::ControlState;
use crate::admission::AdmitLimit;
use crate::admission::queue::{AdmissionQueue, Waiter};
use crate::classes::{ClassBook, ServiceClass};
use crate::error::ControlError;
use crate::identity::Identity;
use crate::metrics::admission::Outcome;
use crate::routing::Picked;

/// How often waiters are looked at when nothing wakes the dispatcher (step predictions move
/// with the engines' readings, and deadlines pass on their own).
const DISPATCH_TICK: Duration = Duration::from_millis(20);

/// The admission state of a control.
#[derive(Debug, Default)]
pub struct AdmissionDesk {
    on: AtomicBool,
    classes: RwLock<Arc<ClassBook>>,
    queues: Mutex<HashMap<ModelName, AdmissionQueue<Parked>>>,
    wake: Notify,
    /// The dispatcher has stopped (control is stopping): nobody is parked any more.
    closed: AtomicBool,
}

/// A waiting decode pick.
#[derive(Debug)]
struct Parked {
    req: PickRequest,
    caller: Identity,
    class: ServiceClassName,
    limit: AdmitLimit,
    parked: Instant,
    answer: oneshot::Sender<Result<Picked, ControlError>>,
}

/// How many median prefill phases of its own TTFT slack a lower class keeps: with less left, it
/// no longer yields to the top class's first token.
const YIELD_SLACK_PHASES: u32 = 2;

/// A lower class yields to the top class's first token (the prefill guard,
/// [`AdmitLimit::protect_ttft_ms`]) only while it can afford to: once less than
/// [`YIELD_SLACK_PHASES`] median prefill phases (`prefill`) are left before its own `deadline`,
/// it is held to its ITL target alone. Without this, a prefill that stays saturated would hold
/// every lower-class request until it is shed.
fn yielding(limit: AdmitLimit, deadline: Instant, now: Instant, prefill: Duration) -> AdmitLimit {
    if limit.protect_ttft_ms.is_some() && now + prefill * YIELD_SLACK_PHASES >= deadline {
        AdmitLimit { protect_ttft_ms: None, ..limit }
    } else {
        limit
    }
}

/// What admission holds a decode pick to.
struct Admit {
    class: ServiceClass,
    deadline: Instant,
}

impl ControlState {
    /// Turns fleet admission on or off and sets the class book (at start).
    pub fn set_admission(&self, on: bool, classes: ClassBook) {
        self.admission.on.store(on, Ordering::Release);
        *self.admission.classes.write().expect("class book lock") = Arc::new(classes);
    }

    /// Puts `classes` in force (a SIGHUP read the file again): waiters keep the class they
    /// were parked under.
    pub fn replace_classes(&self, classes: ClassBook) {
        *self.admission.classes.write().expect("class book lock") = Arc::new(classes);
    }

    /// The class book in force.
    pub fn classes(&self) -> Arc<ClassBook> {
        self.admission.classes.read().expect("class book lock").clone()
    }

    /// Wakes the dispatcher: a rank may have room now.
    pub(super) fn admission_changed(&self) {
        self.admission.wake.notify_one();
    }

    /// Picks and books under `caller`'s lease; a decode pick under fleet admission is refused
    /// with `AdmissionQueued` when no rank admits it or others wait before it (it never waits
    /// here: [`ControlState::pick_waiting`] does). A class the book does not define is refused
    /// whether admission is on or not.
    pub fn pick(&self, kind: PickKind, req: &PickRequest, caller: &Identity) -> Result<Picked, ControlError> {
        match self.admit_terms(kind, req)? {
            Some(admit) => self.try_admit(kind, req, caller, &admit),
            None => self.pick_limited(kind, req, caller, None),
        }
    }

    /// A pick under admission's `admit`, without waiting.
    fn try_admit(
        &self,
        kind: PickKind,
        req: &PickRequest,
        caller: &Identity,
        admit: &Admit,
    ) -> Result<Picked, ControlError> {
        // Nobody jumps a waiter of its own priority or above; lower ones it may pass.
        let waiting = self
            .admission
            .queues
            .lock()
            .expect("admission lock")
            .get(&req.model)
            .is_some_and(|q| q.waiting_at_or_above(admit.class.priority) > 0);
        let limit = self.classes().limit(&admit.class);
        let result = if waiting {
            Err(ControlError::AdmissionQueued { model: req.model.clone() })
        } else {
            self.pick_limited(kind, req, caller, Some(limit))
        };
        let class = admit.class.name.as_str();
        match &result {
            Ok(_) => self.admitted(req, class, Duration::ZERO, Outcome::Admitted),
            Err(ControlError::AdmissionQueued { .. }) if !req.admission.wait => {
                self.metrics.admission.outcome(req.model.as_str(), class, Outcome::Queued);
            }
            Err(_) => {}
        }
        result
    }

    /// [`ControlState::pick`], waiting in the model's admission queue when admission refuses it
    /// and the request asks to wait: until it is admitted, shed (`AdmissionShed`), or the caller
    /// goes away (the future is dropped; its place is given up).
    pub async fn pick_waiting(
        &self,
        kind: PickKind,
        req: &PickRequest,
        caller: &Identity,
    ) -> Result<Picked, ControlError> {
        let Some(admit) = self.admit_terms(kind, req)? else {
            return self.pick_limited(kind, req, caller, None);
        };
        match self.try_admit(kind, req, caller, &admit) {
            Err(ControlError::AdmissionQueued { .. }) if req.admission.wait => {}
            other => return other,
        }
        let (answer, answered) = oneshot::channel();
        let tenant = req.admission.tenant.clone();
        let book = self.classes();
        let waiter = Waiter {
            priority: admit.class.priority,
            weight: book.weight(tenant.as_ref()),
            tenant,
            cost: req.input_tokens.max(1) as f64,
            deadline: admit.deadline,
            item: Parked {
                req: req.clone(),
                caller: caller.clone(),
                class: admit.class.name.clone(),
                limit: book.limit(&admit.class),
                parked: Instant::now(),
                answer,
            },
        };
        {
            let mut queues = self.admission.queues.lock().expect("admission lock");
            if self.admission.closed.load(Ordering::Acquire) {
                return Err(ControlError::NotLeader { leader: None, lapsed: false });
            }
            queues.entry(req.model.clone()).or_default().push(waiter);
        }
        self.admission.wake.notify_one();
        // The dispatcher answers every waiter by its deadline; the margin covers a dispatcher
        // that is not running (a stopping control).
        let last = admit.deadline + DISPATCH_TICK * 10;
        match tokio::time::timeout_at(last.into(), answered).await {
            Ok(Ok(result)) => result,
            _ => Err(ControlError::AdmissionShed { model: req.model.clone(), class: admit.class.name }),
        }
    }

    /// Admits what the queues can admit now, sheds what can no longer meet its TTFT target and
    /// forgets what its caller left.
    pub fn dispatch_admissions(&self) {
        let book = self.classes();
        let mut queues = self.admission.queues.lock().expect("admission lock");
        for (model, queue) in queues.iter_mut() {
            let now = Instant::now();
            let (prefill, quick) = {
                let core = self.core();
                (core.prefill_phase_median(model), core.prefill_phase_quick(model))
            };
            let (prefill, quick) = (prefill.unwrap_or_default(), quick.unwrap_or_default());
            // Shed once the first token could no longer come in time even after a quick prefill:
            // the median would shed half of those that would have made it.
            for gone in queue.remove_where(|w| w.item.answer.is_closed() || now + quick >= w.deadline) {
                let Parked { class, answer, .. } = gone.item;
                if answer.is_closed() {
                    self.metrics.admission.outcome(model.as_str(), class.as_str(), Outcome::Cancelled);
                } else {
                    self.metrics.admission.outcome(model.as_str(), class.as_str(), Outcome::Shed);
                    let _ = answer.send(Err(ControlError::AdmissionShed { model: model.clone(), class }));
                }
            }
            while let Some(head) = queue.head() {
                let p = &head.item;
                let limit = yielding(p.limit, head.deadline, now, prefill);
                let result = self.pick_limited(PickKind::Decode, &p.req, &p.caller, Some(limit));
                if matches!(result, Err(ControlError::AdmissionQueued { .. })) {
                    break;
                }
                let Parked { req, caller, class, parked, answer, .. } = queue.pop().expect("a head").item;
                if result.is_ok() {
                    self.admitted(&req, class.as_str(), parked.elapsed(), Outcome::Waited);
                }
                // A caller that left in the meantime never learns of its booking: undo it.
                // Released as a proxy's cancellation is, so the load gauges follow.
                if let Err(Ok(picked)) = answer.send(result) {
                    let undone = Release::new(picked.reservation, ReleaseReason::Cancelled);
                    let _ = self.release(undone, &caller);
                }
            }
            let mut by_class: HashMap<&str, usize> = book.classes().map(|c| (c.name.as_str(), 0)).collect();
            for w in queue.iter() {
                *by_class.entry(w.item.class.as_str()).or_default() += 1;
            }
            for (class, n) in by_class {
                self.metrics.admission.waiting(model.as_str(), class, n);
            }
        }
        queues.retain(|_, q| !q.is_empty());
    }

    /// Runs the dispatcher until `stop`: on every wake (a release) and every tick while anyone
    /// waits.
    pub async fn run_admissions(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => {
                    self.turn_waiters_away();
                    return;
                }
                _ = self.admission.wake.notified() => {}
                _ = tokio::time::sleep(DISPATCH_TICK) => {}
            }
            let waiting = !self.admission.queues.lock().expect("admission lock").is_empty();
            if waiting {
                self.dispatch_admissions();
            }
        }
    }

    /// A stopping control answers every waiter `NOT_LEADER` (no leader named): its proxy waits
    /// on at the replica that leads next, its deadline unchanged, and the stop is not held up
    /// by calls that could wait a minute.
    fn turn_waiters_away(&self) {
        let mut queues = self.admission.queues.lock().expect("admission lock");
        self.admission.closed.store(true, Ordering::Release);
        for (model, queue) in queues.iter_mut() {
            for w in queue.remove_where(|_| true) {
                let Parked { class, answer, .. } = w.item;
                self.metrics.admission.outcome(model.as_str(), class.as_str(), Outcome::Cancelled);
                let _ = answer.send(Err(ControlError::NotLeader { leader: None, lapsed: false }));
            }
        }
        queues.clear();
    }

    /// The class and deadline admission holds `req` to (`None`: not a decode pick, or admission
    /// is off); an unknown class is refused.
    fn admit_terms(&self, kind: PickKind, req: &PickRequest) -> Result<Option<Admit>, ControlError> {
        let book = self.classes();
        let class = book.class(req.admission.class.as_ref()).ok_or_else(|| {
            ControlError::UnknownServiceClass(
                req.admission.class.clone().unwrap_or_else(|| ServiceClassName::new("")),
            )
        })?;
        if kind != PickKind::Decode || !self.admission.on.load(Ordering::Acquire) {
            return Ok(None);
        }
        // The deadline counts from the request's arrival at its proxy (a time in the future is
        // taken as now): what it already waited elsewhere is not given again.
        let (now, wall) = (Instant::now(), SystemTime::now());
        let waited = req.admission.arrived.and_then(|a| wall.duration_since(a).ok()).unwrap_or_default();
        let deadline = (now + class.ttft).checked_sub(waited).unwrap_or(now);
        Ok(Some(Admit { class: class.clone(), deadline }))
    }

    /// Counts an admitted request (its tenant's tokens under its own label when the book names
    /// it).
    fn admitted(&self, req: &PickRequest, class: &str, waited: Duration, outcome: Outcome) {
        let model = req.model.as_str();
        self.metrics.admission.outcome(model, class, outcome);
        let tenant = match &req.admission.tenant {
            Some(t) if self.classes().names_tenant(t) => t.as_str(),
            Some(_) => "other",
            None => "anonymous",
        };
        self.metrics.admission.admitted(model, class, tenant, req.input_tokens, waited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_class_stops_yielding_when_its_own_slack_runs_short() {
        let (t0, phase) = (Instant::now(), Duration::from_secs(5));
        let guarded = AdmitLimit { itl_ms: 250, protect_ttft_ms: Some(2_000) };
        let deadline = t0 + Duration::from_secs(60);
        // 60 s of slack against two 5 s phases: it yields.
        assert_eq!(yielding(guarded, deadline, t0, phase), guarded);
        assert_eq!(yielding(guarded, deadline, deadline - Duration::from_secs(11), phase), guarded);
        // 10 s left: held to its ITL alone.
        let late = yielding(guarded, deadline, deadline - Duration::from_secs(10), phase);
        assert_eq!(late, AdmitLimit { itl_ms: 250, protect_ttft_ms: None });
        // The top class has nothing to yield.
        let top = AdmitLimit { itl_ms: 50, protect_ttft_ms: None };
        assert_eq!(yielding(top, deadline, deadline, phase), top);
    }
}
