//! The fit recovers the sim's own W. The sim's decode engine (`infera_sim::scheduler`, the pure
//! core `infera-sim` serves) runs a PD decode of 8 DP ranks in model time: requests arrive with
//! their KV, decode in lockstep at `31.2 + 1.55·x + 4.35·max(0, x − 8)` ms per step with
//! `x = requests + context / 1.05 M` on the busiest rank (`sim/src/timing.rs`), and each rank
//! keeps SGLang's `decode_moments`. Control's fit ([`infera_control::fit::WorkerFit`], with its
//! production half-life of 60 s) reads them as its poller would, every 100 ms of model time,
//! and must find 1,050,000 tokens per request — the sim's marginal cost ratio at every point —
//! with the busiest rank around each of the calibration points (6, 8 and 9 requests → 40.5 /
//! 43.6 / 49.5 ms). Model time makes the run exact and fast; `weight_fit.rs` drives the same
//! path over HTTP through a running control.
//!
//! Load: "base" lanes keep requests on rank 0 back to back; "flicker" lanes alternate between
//! rank 0 and rank 7, so rank 0's request count moves by one or two; prompts are drawn at random,
//! so its context moves apart from its count. Each phase keeps the busiest rank on one side of
//! the knee (x < 8 around 6 requests, x > 8 around 8–9), where the step time is linear in
//! (requests, context) and a linear fit can be exact.
//!
//! Each interval's step is also predicted as control predicts it (`infera_control::fit::predict`):
//! from what a ledger holds per rank (requests and their prompt tokens) under the fit so far,
//! and compared with what the engine measured.

use std::time::{Duration, Instant};

use infera_control::fit::predict::{RankLoad, relative_error};
use infera_control::fit::{Moments, RankReading, Verdict, WorkerFit, WorkerReading};
use infera_sim::params::TimingParams;
use infera_sim::scheduler::{Admission, Event, QueueOrder, ReqId, Scheduler, Work};
use rand::{Rng, SeedableRng, rngs::SmallRng};

/// The sim's marginal cost ratio: context tokens per request.
const TRUE_W: f64 = 1.05e6;
/// How far the fit (and W in force) may be from it. The sim's step times are exact (whole
/// microseconds of model time), so what is left is (a) how the fit reads context — at the ends
/// of each 100 ms interval only, weighed like the batch — and (b) the knee: above it, a request
/// replaced on the busiest rank leaves it one request short for a step, and with the flicker
/// lanes away that step can fall below the knee, where a request costs 1.55 ms, not 5.9; the
/// linear fit then carries a little of both slopes. Measured (printed below): the fit lands at
/// 1.040 M / 1.149 M / 0.980 M at 6 / 8 / 9 requests with a standard error of 4–6 %, and W in
/// force at 1.00 M / 1.08 M / 0.93 M (it moves only outside ±5 % of a trusted fit). With the
/// knee taken out (`step_ms_above_knee = 0`) all three fits are within 4 %. 15 % is about 2.5
/// standard errors at 8 and 9 requests, where the knee adds its bias.
const TOLERANCE: f64 = 0.15;
const HALF_LIFE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);

/// One phase of load.
struct Phase {
    name: &'static str,
    base: u32,
    flicker: u32,
    prompt: (u32, u32),
    /// Where the fit's mean busiest-rank requests must land.
    requests: (f64, f64),
}

struct Lane {
    ranks: [usize; 2],
    prompt: (u32, u32),
    sent: u32,
    current: Option<ReqId>,
    /// Where its request runs, and its prompt: what control's ledger books for it.
    booked: Option<(usize, u32)>,
    active: bool,
}

struct Run {
    sim: Scheduler,
    rng: SmallRng,
    lanes: Vec<Lane>,
    now: Duration,
    next_poll: Duration,
    t0: Instant,
    fit: WorkerFit,
    /// Per rank, what a ledger holds: requests and their prompt tokens.
    ledger: [RankLoad; 8],
    /// `predicted / measured − 1` of each interval's step, the prediction made from `ledger`
    /// with the fit of the interval before.
    errors: Vec<f64>,
}

impl Run {
    fn send(&mut self, lane: usize) {
        let l = &mut self.lanes[lane];
        let rank = l.ranks[(l.sent % 2) as usize];
        l.sent += 1;
        let prompt_tokens = self.rng.random_range(l.prompt.0..=l.prompt.1);
        l.booked = Some((rank, prompt_tokens));
        self.ledger[rank] = self.ledger[rank].with_request(u64::from(prompt_tokens));
        let a = Admission {
            rank,
            prompt_tokens,
            max_new_tokens: self.rng.random_range(1_000..=3_000),
            stall_after: None,
            work: Work::AwaitKv,
        };
        let id = self.sim.submit(self.now, a);
        l.current = Some(id);
        // The KV is there at once: the decode admits it from its next step.
        let events = self.sim.kv_arrived(self.now, id, 0);
        self.finished(events);
    }

    fn finished(&mut self, events: Vec<Event>) {
        for e in events {
            let Event::Finished { id } = e else { continue };
            if let Some(i) = self.lanes.iter().position(|l| l.current == Some(id)) {
                self.lanes[i].current = None;
                if let Some((rank, tokens)) = self.lanes[i].booked.take() {
                    let r = &mut self.ledger[rank];
                    r.requests -= 1.0;
                    r.context_tokens -= f64::from(tokens);
                }
                if self.lanes[i].active {
                    self.send(i);
                }
            }
        }
    }

    fn start(&mut self, phase: &Phase) {
        for l in &mut self.lanes {
            l.active = false;
        }
        for k in 0..phase.base + phase.flicker {
            let ranks = if k < phase.base { [0, 0] } else { [0, 7] };
            let lane =
                Lane { ranks, prompt: phase.prompt, sent: 0, current: None, booked: None, active: true };
            self.lanes.push(lane);
            self.send(self.lanes.len() - 1);
        }
    }

    /// Runs the engine until `until`, reading it every [`POLL`].
    fn run_until(&mut self, until: Duration) {
        while self.now < until {
            let next = self.sim.next_deadline().map_or(self.next_poll, |d| d.min(self.next_poll));
            self.now = next;
            let events = self.sim.advance(next);
            if next == self.next_poll {
                let ranks = self
                    .sim
                    .snapshot()
                    .iter()
                    .enumerate()
                    .map(|(r, s)| RankReading {
                        rank: r as u32,
                        moments: s.decode_moments.map(Moments),
                        used_tokens: s.used_tokens,
                        running: u64::from(s.running),
                    })
                    .collect();
                // The prediction control makes as the interval ends: the ledger's load under the
                // fit so far.
                let report = self.fit.report();
                let trusted = report.solution.filter(|_| report.verdict == Verdict::Trusted);
                let predicted = trusted.and_then(|s| s.worker_step_ms(&self.ledger));
                self.fit.observe(WorkerReading { at: self.t0 + next, ranks });
                let measured = self.fit.report().interval.filter(|i| i.at == self.t0 + next);
                if let (Some(p), Some(m)) = (predicted, measured) {
                    self.errors.extend(relative_error(p, m.step_ms));
                }
                self.next_poll += POLL;
            }
            self.finished(events);
        }
    }
}

#[test]
fn the_fit_recovers_the_sims_w_at_its_calibration_points() {
    let mut run = Run {
        sim: Scheduler::new(TimingParams::default(), 8, 8192, 64, QueueOrder::Fcfs),
        rng: SmallRng::seed_from_u64(7),
        lanes: Vec::new(),
        now: Duration::ZERO,
        next_poll: POLL,
        t0: Instant::now(),
        fit: WorkerFit::new(HALF_LIFE),
        ledger: [RankLoad::default(); 8],
        errors: Vec::new(),
    };
    let phases = [
        // x = 5–7 requests + at most 0.77 M tokens / 1.05 M: below the knee.
        Phase { name: "6", base: 5, flicker: 2, prompt: (10_000, 110_000), requests: (5.5, 6.8) },
        // x ≥ 7 + 7 × 160 k / 1.05 M while the 7 base requests decode: above it.
        Phase { name: "8", base: 7, flicker: 2, prompt: (160_000, 300_000), requests: (7.5, 8.6) },
        // x ≥ 8 + 8 × 150 k / 1.05 M (7 + 7 × 150 k / 1.05 M while one is replaced): above it.
        Phase { name: "9", base: 8, flicker: 2, prompt: (150_000, 250_000), requests: (8.5, 9.6) },
    ];
    for phase in &phases {
        run.start(phase);
        // Ten half-lives: the previous phase weighs 0.1 % of the fit.
        run.run_until(run.now + HALF_LIFE * 10);
        let errors = std::mem::take(&mut run.errors);
        // The last half of the phase, once the fit has followed it.
        let mut settled: Vec<f64> = errors[errors.len() / 2..].to_vec();
        settled.sort_by(f64::total_cmp);
        let q = |p: f64| settled[((settled.len() - 1) as f64 * p).round() as usize];
        let mut abs: Vec<f64> = settled.iter().map(|e| e.abs()).collect();
        abs.sort_by(f64::total_cmp);
        eprintln!(
            "phase {}: step predicted from the ledger / measured − 1 over {} intervals: p10 {:+.3}, p50 {:+.3}, \
             p90 {:+.3}; |error| p50 {:.3}, p90 {:.3}",
            phase.name,
            settled.len(),
            q(0.1),
            q(0.5),
            q(0.9),
            abs[abs.len() / 2],
            abs[abs.len() * 9 / 10],
        );
        // The sim steps exactly linearly in each phase and generates little beside prompts of
        // 10 k–300 k tokens, so the ledger's input tokens are nearly its context: the prediction
        // is within a percent there (measured: |error| p50 ≤ 0.1 %, p90 ≤ 0.4 %).
        assert!(abs[abs.len() / 2] <= 0.02, "phase {}: |error| p50 {}", phase.name, abs[abs.len() / 2]);
        assert!(abs[abs.len() * 9 / 10] <= 0.05, "phase {}: |error| p90", phase.name);
        let r = run.fit.report();
        let s = r.solution.expect("a fit");
        eprintln!(
            "phase {}: W {:.0} (R² {:.5}, {:.0} samples, ±{:.2} %), busiest {:.2} requests / {:.0} tokens, \
             step {:.2} + {:.3}/request + {:.3}/M tokens ms; in force {:.0}",
            phase.name,
            s.weight_tokens,
            s.r_squared,
            s.samples,
            100.0 * s.weight_rel_se,
            s.mean_requests,
            s.mean_context_tokens,
            s.base_ms,
            s.ms_per_request,
            s.ms_per_mtoken,
            r.weight.unwrap_or(0.0),
        );
        assert_eq!(r.verdict, Verdict::Trusted, "phase {}", phase.name);
        assert!(
            (s.weight_tokens / TRUE_W - 1.0).abs() <= TOLERANCE,
            "phase {}: W {}",
            phase.name,
            s.weight_tokens
        );
        let w = r.weight.expect("W in force");
        assert!((w / TRUE_W - 1.0).abs() <= TOLERANCE, "phase {}: W in force {w}", phase.name);
        let (lo, hi) = phase.requests;
        assert!(
            (lo..=hi).contains(&s.mean_requests),
            "phase {}: busiest rank at {}",
            phase.name,
            s.mean_requests
        );
    }
}
