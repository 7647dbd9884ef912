//! When each request is sent: open loop by trace timestamp, or closed-loop lanes.
//!
//! - **Open loop** ([`OpenClock`], pure): request *i* goes out at
//!   Σ min(gap, idle cap) / speed-up after the first, where the gaps are between consecutive
//!   trace timestamps. Nothing waits for responses.
//! - **Closed loop** ([`closed_loop`]): `concurrency` lanes; a lane takes the next session from
//!   the trace, sends its turns one at a time, and before each turn after the first waits
//!   [`Shaping::think_delay`] after the previous response ended. So at most `concurrency`
//!   main-session requests are in flight. A session's sub-agents run before the turn they
//!   precede, each group concurrently (each sub-agent closed loop over its own turns), and the
//!   parent waits for the whole group: sub-agents add their requests to the lane's.
//! - **Time compression** ([`Shaping::compression`]): against an emulated engine running `c`
//!   times faster than the wall clock, every wait and `--duration-s` is divided by `c`, and
//!   the report multiplies measured times by `c`, so the run is stated in emulated time.
//!
//! The runners take the send as a function, so tests drive them with a fake under paused
//! tokio time. Both stop issuing at `--max-requests` (warm-up included) or `--duration-s`; what
//! is in flight then finishes, or with [`Shaping::cut_at_end`] is cut at the end of
//! `--duration-s` (dropped, so the server sees the client go away, and counted in
//! [`Ran::cut`]) and the measurement is a fixed window. Warm-up is the first requests of each
//! lane and, with [`Shaping::warmup_s`], every request sent in the run's first seconds.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::trace::{Session, TraceError};

/// Load shaping: every report states these.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shaping {
    /// Open loop: trace time ÷ speed-up.
    pub(crate) speedup: f64,
    /// Closed loop: think time × scale.
    pub(crate) think_time_scale: f64,
    /// `max_tokens` = round(trace output × scale), at least 1.
    pub(crate) output_scale: f64,
    /// Any trace gap (open-loop inter-arrival, closed-loop think time) is first capped at this
    /// many trace seconds.
    pub(crate) idle_gap_cap_s: f64,
    /// Closed loop: lanes.
    pub(crate) concurrency: usize,
    /// Requests per lane (open loop: the first requests of the one stream) left out of the report.
    pub(crate) warmup_per_lane: usize,
    /// Requests sent in the first this many (emulated) seconds are warm-up too.
    pub(crate) warmup_s: f64,
    /// Requests still in flight at the end of `duration_s` are cut instead of awaited.
    pub(crate) cut_at_end: bool,
    /// Stop issuing after this many requests (warm-up included).
    pub(crate) max_requests: Option<usize>,
    /// Stop issuing after this many (emulated) seconds.
    pub(crate) duration_s: Option<f64>,
    /// The emulated clock runs this many times faster than the wall clock (1: no emulation).
    pub(crate) compression: f64,
}

impl Shaping {
    /// Tokens asked for a turn with `output` trace tokens.
    pub(crate) fn max_tokens(&self, output: u32) -> u32 {
        (f64::from(output) * self.output_scale).round().clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// The wall-clock wait before a turn whose trace think time is `think_s`: capped, scaled,
    /// then compressed.
    pub(crate) fn think_delay(&self, think_s: f64) -> Duration {
        let emulated = think_s.max(0.0).min(self.idle_gap_cap_s) * self.think_time_scale;
        Duration::from_secs_f64((emulated / self.compression).max(0.0))
    }
}

/// Open-loop send offsets from trace timestamps, one request at a time (pure).
#[derive(Debug)]
pub(crate) struct OpenClock {
    speedup: f64,
    cap_ms: f64,
    last_ms: Option<f64>,
    at_ms: f64,
}

impl OpenClock {
    pub(crate) fn new(shaping: &Shaping) -> Self {
        let speedup = shaping.speedup * shaping.compression;
        Self { speedup, cap_ms: shaping.idle_gap_cap_s * 1e3, last_ms: None, at_ms: 0.0 }
    }

    /// The offset from the run's start at which the request stamped `trace_ms` is sent.
    pub(crate) fn next(&mut self, trace_ms: f64) -> Duration {
        if let Some(last) = self.last_ms {
            self.at_ms += (trace_ms - last).clamp(0.0, self.cap_ms) / self.speedup;
        }
        self.last_ms = Some(trace_ms);
        Duration::from_secs_f64(self.at_ms / 1e3)
    }
}

/// One request to send.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub(crate) session: Arc<Session>,
    pub(crate) turn: usize,
    /// Left out of the report.
    pub(crate) warmup: bool,
}

/// What a run did: each job with its outcome, whether the trace failed to read, and how many
/// requests were cut at the end.
pub(crate) struct Ran<T> {
    pub(crate) done: Vec<(Job, T)>,
    pub(crate) trace_error: Option<TraceError>,
    pub(crate) cut: usize,
}

/// Limits shared by all lanes.
struct Budget {
    issued: AtomicUsize,
    max: Option<usize>,
    deadline: Option<Instant>,
    warmup_until: Instant,
    /// When in-flight requests are cut (the deadline, with `cut_at_end`).
    cut_at: Option<Instant>,
    cut: AtomicUsize,
}

impl Budget {
    fn new(shaping: &Shaping) -> Self {
        let now = Instant::now();
        let wall = |s: f64| Duration::from_secs_f64((s / shaping.compression).max(0.0));
        let deadline = shaping.duration_s.map(|s| now + wall(s));
        Self {
            issued: AtomicUsize::new(0),
            max: shaping.max_requests,
            deadline,
            warmup_until: now + wall(shaping.warmup_s),
            cut_at: deadline.filter(|_| shaping.cut_at_end),
            cut: AtomicUsize::new(0),
        }
    }

    /// Takes one request from the budget; false once it is spent.
    fn take(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        let n = self.issued.fetch_add(1, Ordering::SeqCst);
        self.max.is_none_or(|m| n < m)
    }

    /// Sleeps `delay`, but not past the deadline (a lane thinking at the end stops then).
    async fn think(&self, delay: Duration) {
        let until = Instant::now() + delay;
        tokio::time::sleep_until(self.deadline.map_or(until, |d| until.min(d))).await;
    }

    /// Whether a request sent now is warm-up by time.
    fn warming_up(&self) -> bool {
        Instant::now() < self.warmup_until
    }

    /// Awaits a request, or drops it at the cut (`None`, counted).
    async fn run<T>(&self, request: impl Future<Output = T>) -> Option<T> {
        let Some(at) = self.cut_at else { return Some(request.await) };
        let out = tokio::time::timeout_at(at, request).await.ok();
        if out.is_none() {
            self.cut.fetch_add(1, Ordering::SeqCst);
        }
        out
    }
}

type Sessions = Arc<Mutex<dyn Iterator<Item = Result<Session, TraceError>> + Send>>;

/// What every request of one lane shares.
struct Lane<F> {
    send: Arc<F>,
    budget: Arc<Budget>,
    shaping: Shaping,
    /// Requests this lane sent (warm-up is the first `warmup_per_lane`).
    sent: AtomicUsize,
}

impl<F> Lane<F> {
    /// Sends turn `turn` of `session` after its think time; `None` once the budget is spent.
    async fn turn<T, Fut>(&self, session: &Arc<Session>, turn: usize, think: bool) -> Option<(Job, T)>
    where
        F: Fn(Job) -> Fut,
        Fut: Future<Output = T>,
    {
        if think {
            self.budget.think(self.shaping.think_delay(session.turns[turn].think_s)).await;
        }
        if !self.budget.take() {
            return None;
        }
        let warmup = self.sent.fetch_add(1, Ordering::SeqCst) < self.shaping.warmup_per_lane
            || self.budget.warming_up();
        let job = Job { session: session.clone(), turn, warmup };
        let out = self.budget.run((self.send)(job.clone())).await?;
        Some((job, out))
    }

    /// A session's turns in order, each sub-agent group before the turn it precedes; false
    /// once the budget is spent.
    async fn session<T, Fut>(&self, session: &Arc<Session>, done: &mut Vec<(Job, T)>) -> bool
    where
        F: Fn(Job) -> Fut,
        Fut: Future<Output = T>,
    {
        for turn in 0..=session.turns.len() {
            let group: Vec<_> = session.subagents.iter().filter(|a| a.before_turn == turn).collect();
            let ran = futures_util::future::join_all(group.iter().map(|a| self.subagent(&a.session))).await;
            let mut spent = false;
            for (out, more) in ran {
                done.extend(out);
                spent |= !more;
            }
            if spent || turn == session.turns.len() {
                return !spent;
            }
            match self.turn(session, turn, turn > 0 || !group.is_empty()).await {
                Some(d) => done.push(d),
                None => return false,
            }
        }
        true
    }

    /// A sub-agent's turns in order (sub-agents have none of their own).
    async fn subagent<T, Fut>(&self, agent: &Arc<Session>) -> (Vec<(Job, T)>, bool)
    where
        F: Fn(Job) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut done = Vec::new();
        for turn in 0..agent.turns.len() {
            match self.turn(agent, turn, turn > 0).await {
                Some(d) => done.push(d),
                None => return (done, false),
            }
        }
        (done, true)
    }
}

/// Closed-loop lanes over `sessions`; `send` is awaited once per turn.
pub(crate) async fn closed_loop<T, F, Fut>(
    sessions: impl Iterator<Item = Result<Session, TraceError>> + Send + 'static,
    shaping: &Shaping,
    send: F,
) -> Ran<T>
where
    T: Send + 'static,
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send,
{
    let sessions: Sessions = Arc::new(Mutex::new(sessions));
    let budget = Arc::new(Budget::new(shaping));
    let send = Arc::new(send);
    let mut lanes = JoinSet::new();
    for _ in 0..shaping.concurrency.max(1) {
        let sessions = sessions.clone();
        let lane = Lane {
            send: send.clone(),
            budget: budget.clone(),
            shaping: shaping.clone(),
            sent: AtomicUsize::new(0),
        };
        lanes.spawn(async move {
            let mut done = Vec::new();
            loop {
                let next = sessions.lock().expect("trace lock").next();
                let session = match next {
                    None => return (done, None),
                    Some(Err(e)) => return (done, Some(e)),
                    Some(Ok(s)) => Arc::new(s),
                };
                if !lane.session(&session, &mut done).await {
                    return (done, None);
                }
            }
        });
    }
    let mut ran = Ran { done: Vec::new(), trace_error: None, cut: 0 };
    while let Some(lane) = lanes.join_next().await {
        let (done, err) = lane.expect("a lane panicked");
        ran.done.extend(done);
        ran.trace_error = ran.trace_error.or(err);
    }
    ran.cut = budget.cut.load(Ordering::SeqCst);
    ran
}

/// Open loop: every turn of every session at its [`OpenClock`] time, without waiting for
/// responses (meant for Mooncake, whose sessions are single requests).
pub(crate) async fn open_loop<T, F, Fut>(
    sessions: impl Iterator<Item = Result<Session, TraceError>>,
    shaping: &Shaping,
    send: F,
) -> Ran<T>
where
    T: Send + 'static,
    F: Fn(Job) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let start = Instant::now();
    let budget = Arc::new(Budget::new(shaping));
    let mut clock = OpenClock::new(shaping);
    let mut inflight = JoinSet::new();
    let mut trace_error = None;
    let mut sent = 0usize;
    'trace: for session in sessions {
        let session = match session {
            Ok(s) => Arc::new(s),
            Err(e) => {
                trace_error = Some(e);
                break;
            }
        };
        for turn in 0..session.turns.len() {
            tokio::time::sleep_until(start + clock.next(session.turns[turn].at_ms)).await;
            if !budget.take() {
                break 'trace;
            }
            let warmup = sent < shaping.warmup_per_lane || budget.warming_up();
            let job = Job { session: session.clone(), turn, warmup };
            sent += 1;
            let (fut, budget) = (send(job.clone()), budget.clone());
            inflight.spawn(async move { budget.run(fut).await.map(|out| (job, out)) });
        }
    }
    let mut done = Vec::new();
    while let Some(r) = inflight.join_next().await {
        done.extend(r.expect("a request task panicked"));
    }
    Ran { done, trace_error, cut: budget.cut.load(Ordering::SeqCst) }
}

#[cfg(test)]
pub(crate) mod tests;
