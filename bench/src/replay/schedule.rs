//! When each request is sent: open loop by trace timestamp, or closed-loop lanes.
//!
//! - **Open loop** ([`OpenClock`], pure): request *i* goes out at
//!   Σ min(gap, idle cap) / speed-up after the first, where the gaps are between consecutive
//!   trace timestamps. Nothing waits for responses.
//! - **Closed loop** ([`closed_loop`]): `concurrency` lanes; a lane takes the next session from
//!   the trace, sends its turns one at a time, and before each turn after the first waits
//!   [`Shaping::think_delay`] after the previous response ended. So at most `concurrency`
//!   requests are in flight.
//!
//! The runners take the send as a function, so tests drive them with a fake under paused
//! tokio time. Both stop issuing at `--max-requests` (warm-up included) or `--duration-s`; what
//! is in flight then finishes.

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
    /// Stop issuing after this many requests (warm-up included).
    pub(crate) max_requests: Option<usize>,
    /// Stop issuing after this many seconds.
    pub(crate) duration_s: Option<f64>,
}

impl Shaping {
    /// Tokens asked for a turn with `output` trace tokens.
    pub(crate) fn max_tokens(&self, output: u32) -> u32 {
        (f64::from(output) * self.output_scale).round().clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// The wait before a turn whose trace think time is `think_s`: capped, then scaled.
    pub(crate) fn think_delay(&self, think_s: f64) -> Duration {
        Duration::from_secs_f64((think_s.max(0.0).min(self.idle_gap_cap_s) * self.think_time_scale).max(0.0))
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
        Self { speedup: shaping.speedup, cap_ms: shaping.idle_gap_cap_s * 1e3, last_ms: None, at_ms: 0.0 }
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

/// What a run did: each job with its outcome, and whether the trace failed to read.
pub(crate) struct Ran<T> {
    pub(crate) done: Vec<(Job, T)>,
    pub(crate) trace_error: Option<TraceError>,
}

/// Limits shared by all lanes.
struct Budget {
    issued: AtomicUsize,
    max: Option<usize>,
    deadline: Option<Instant>,
}

impl Budget {
    fn new(shaping: &Shaping) -> Self {
        let deadline = shaping.duration_s.map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
        Self { issued: AtomicUsize::new(0), max: shaping.max_requests, deadline }
    }

    /// Takes one request from the budget; false once it is spent.
    fn take(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        let n = self.issued.fetch_add(1, Ordering::SeqCst);
        self.max.is_none_or(|m| n < m)
    }
}

type Sessions = Arc<Mutex<dyn Iterator<Item = Result<Session, TraceError>> + Send>>;

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
        let (sessions, budget, send, shaping) =
            (sessions.clone(), budget.clone(), send.clone(), shaping.clone());
        lanes.spawn(async move {
            let mut done = Vec::new();
            let mut sent = 0usize;
            loop {
                let next = sessions.lock().expect("trace lock").next();
                let session = match next {
                    None => return (done, None),
                    Some(Err(e)) => return (done, Some(e)),
                    Some(Ok(s)) => Arc::new(s),
                };
                for turn in 0..session.turns.len() {
                    if turn > 0 {
                        tokio::time::sleep(shaping.think_delay(session.turns[turn].think_s)).await;
                    }
                    if !budget.take() {
                        return (done, None);
                    }
                    let job = Job { session: session.clone(), turn, warmup: sent < shaping.warmup_per_lane };
                    sent += 1;
                    let out = send(job.clone()).await;
                    done.push((job, out));
                }
            }
        });
    }
    let mut ran = Ran { done: Vec::new(), trace_error: None };
    while let Some(lane) = lanes.join_next().await {
        let (done, err) = lane.expect("a lane panicked");
        ran.done.extend(done);
        ran.trace_error = ran.trace_error.or(err);
    }
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
    let budget = Budget::new(shaping);
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
            let job = Job { session: session.clone(), turn, warmup: sent < shaping.warmup_per_lane };
            sent += 1;
            let fut = send(job.clone());
            inflight.spawn(async move { (job, fut.await) });
        }
    }
    let mut done = Vec::new();
    while let Some(r) = inflight.join_next().await {
        done.push(r.expect("a request task panicked"));
    }
    Ran { done, trace_error }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::trace::Turn;
    use super::*;

    pub(crate) fn shaping() -> Shaping {
        Shaping {
            speedup: 1.0,
            think_time_scale: 1.0,
            output_scale: 1.0,
            idle_gap_cap_s: 300.0,
            concurrency: 2,
            warmup_per_lane: 0,
            max_requests: None,
            duration_s: None,
        }
    }

    fn sessions(n: u64, turns: usize, think_s: f64) -> Vec<Result<Session, TraceError>> {
        (0..n)
            .map(|index| {
                let turn = Turn { at_ms: 0.0, think_s, input_tokens: 1, output_tokens: 1, blocks: vec![] };
                Ok(Session { index, name: String::new(), block_tokens: 512, turns: vec![turn; turns] })
            })
            .collect()
    }

    #[test]
    fn open_clock_divides_by_speedup_and_caps_gaps() {
        let mut c = OpenClock::new(&Shaping { speedup: 10.0, idle_gap_cap_s: 60.0, ..shaping() });
        let at: Vec<_> = [1_000.0, 4_000.0, 4_000.0, 1_004_000.0, 1_005_000.0].map(|t| c.next(t)).into();
        let ms: Vec<_> = at.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, vec![0, 300, 300, 6_300, 6_400]);
    }

    #[test]
    fn think_delay_is_capped_then_scaled_and_tokens_scaled() {
        let s = Shaping { think_time_scale: 0.1, idle_gap_cap_s: 300.0, output_scale: 0.5, ..shaping() };
        assert_eq!(s.think_delay(20.0), Duration::from_secs(2));
        assert_eq!(s.think_delay(100_000.0), Duration::from_secs(30));
        assert_eq!((s.max_tokens(101), s.max_tokens(0)), (51, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn lanes_never_exceed_the_concurrency_and_respect_think_time() {
        let inflight = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (i, p) = (inflight.clone(), peak.clone());
        let s = Shaping { concurrency: 3, think_time_scale: 0.5, ..shaping() };
        let ran = closed_loop(sessions(7, 4, 10.0).into_iter(), &s, move |job: Job| {
            let (i, p) = (i.clone(), p.clone());
            async move {
                let sent = Instant::now();
                p.fetch_max(i.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                i.fetch_sub(1, Ordering::SeqCst);
                (job.session.index, job.turn, sent, Instant::now())
            }
        })
        .await;
        assert_eq!(ran.done.len(), 28);
        assert_eq!(peak.load(Ordering::SeqCst), 3);
        for (_, (session, turn, sent, _)) in &ran.done {
            if *turn > 0 {
                let (.., prev_end) =
                    ran.done.iter().map(|(_, o)| o).find(|o| o.0 == *session && o.1 == turn - 1).unwrap();
                assert_eq!(*sent - *prev_end, Duration::from_secs(5), "10 s think × 0.5");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn warmup_is_per_lane_and_bounds_stop_issuing() {
        let s = Shaping { concurrency: 2, warmup_per_lane: 2, max_requests: Some(9), ..shaping() };
        let ran =
            closed_loop(sessions(10, 3, 0.0).into_iter(), &s, |_| tokio::time::sleep(Duration::from_secs(1)))
                .await;
        assert_eq!(ran.done.len(), 9);
        assert_eq!(ran.done.iter().filter(|(j, _)| j.warmup).count(), 4);
        let s = Shaping { duration_s: Some(10.5), concurrency: 1, ..shaping() };
        let ran = closed_loop(sessions(100, 1, 0.0).into_iter(), &s, |_| {
            tokio::time::sleep(Duration::from_secs(1))
        })
        .await;
        assert_eq!(ran.done.len(), 11);
    }

    #[tokio::test(start_paused = true)]
    async fn open_loop_sends_on_the_compressed_clock() {
        let trace: Vec<_> = [0.0, 3_000.0, 3_000.0, 9_000.0]
            .iter()
            .enumerate()
            .map(|(i, &at_ms)| {
                let turn = Turn { at_ms, think_s: 0.0, input_tokens: 1, output_tokens: 1, blocks: vec![] };
                Ok(Session { index: i as u64, name: String::new(), block_tokens: 512, turns: vec![turn] })
            })
            .collect();
        let start = Instant::now();
        let s = Shaping { speedup: 3.0, warmup_per_lane: 1, ..shaping() };
        let ran = open_loop(trace.into_iter(), &s, |_| async move { Instant::now() - start }).await;
        let mut at: Vec<_> =
            ran.done.iter().map(|(j, d)| (j.session.index, j.warmup, d.as_millis())).collect();
        at.sort();
        assert_eq!(at, vec![(0, true, 0), (1, false, 1_000), (2, false, 1_000), (3, false, 3_000)]);
    }
}
