//! The tenants bench's tables: per arm run, each tenant's share against its weight's, Jain's
//! index, the decode's predicted and measured step against the ITL target; then, over the runs,
//! each arm's mean and range.

use std::time::Instant;

use super::fairness::{jain, owed, shares};
use super::load::Answer;
use super::sample::StepSample;
use super::{Arm, ArmRun, TenantsArgs, allocations};
use crate::replay::percentile::percentile;

/// One tenant's answers within the window.
#[derive(Clone, Debug)]
pub(crate) struct TenantWindow {
    pub(crate) tenant: String,
    /// Answered 200.
    pub(crate) ok: u64,
    /// Their prompt tokens.
    pub(crate) tokens: u64,
    /// The tokens they answered.
    pub(crate) answered_tokens: u64,
    /// Shed by admission (503 `shed`).
    pub(crate) shed: u64,
    /// Refused by a rate limit (429).
    pub(crate) limited: u64,
    /// Anything else that did not answer 200.
    pub(crate) failed: u64,
    /// Whole-request latency of the answered ones, p50 and p90, s.
    pub(crate) latency_s: (f64, f64),
}

impl TenantWindow {
    /// `tenant`'s answers that ended in `[from, to)`.
    pub(crate) fn of(tenant: &str, answers: &[Answer], from: Instant, to: Instant) -> Self {
        let mine: Vec<&Answer> =
            answers.iter().filter(|a| a.tenant == tenant && a.ended >= from && a.ended < to).collect();
        let ok: Vec<&&Answer> = mine.iter().filter(|a| a.status == 200).collect();
        let shed =
            mine.iter().filter(|a| a.status == 503 && a.code.as_deref() == Some("shed")).count() as u64;
        let limited = mine.iter().filter(|a| a.status == 429).count() as u64;
        let latencies: Vec<f64> = ok.iter().map(|a| a.latency.as_secs_f64()).collect();
        let p = |q| percentile(&latencies, q).unwrap_or(f64::NAN);
        Self {
            tenant: tenant.to_owned(),
            ok: ok.len() as u64,
            tokens: ok.iter().map(|a| a.prompt_tokens).sum(),
            answered_tokens: ok.iter().map(|a| a.completion_tokens).sum(),
            shed,
            limited,
            failed: mine.len() as u64 - ok.len() as u64 - shed - limited,
            latency_s: (p(50.0), p(90.0)),
        }
    }
}

/// What the summary keeps of a run.
struct Figures {
    jain: f64,
    steady_share: f64,
    predicted_over: f64,
    /// The highest ITL predicted (NaN when control predicted nothing).
    predicted_itl_max: f64,
    measured_p90: f64,
}

fn figures(args: &TenantsArgs, run: &ArmRun) -> Figures {
    let tokens = [run.tenants[0].tokens as f64, run.tenants[1].tokens as f64];
    let a = allocations(args, tokens);
    let measured: Vec<f64> = run.steps.iter().map(|s| s.measured_ms).collect();
    Figures {
        jain: jain(&a).unwrap_or(f64::NAN),
        steady_share: shares(&a).map_or(f64::NAN, |s| s[0]),
        // Control's ledger predicts only what it routed: nothing in the SMG arm.
        predicted_over: if run.arm == Arm::Smg {
            f64::NAN
        } else {
            over(&run.steps, f64::from(args.itl_ms), |s| s.predicted_itl_ms)
        },
        predicted_itl_max: run.steps.iter().map(|s| s.predicted_itl_ms).fold(f64::NAN, f64::max),
        measured_p90: percentile(&measured, 90.0).unwrap_or(f64::NAN),
    }
}

/// The step the ITL target allows, as the engine's own tokens a step give it: the target per
/// token times the tokens a request gains per step.
fn step_limit_ms(args: &TenantsArgs, run: &ArmRun) -> f64 {
    f64::from(args.itl_ms) * run.tokens_per_step
}

/// The share of `steps` whose `what` is above `limit_ms` (NaN without samples).
fn over(steps: &[StepSample], limit_ms: f64, what: impl Fn(&StepSample) -> f64) -> f64 {
    steps.iter().filter(|s| what(s) > limit_ms).count() as f64 / steps.len() as f64
}

/// One arm run's lines.
pub(crate) fn print_run(args: &TenantsArgs, run: &ArmRun) {
    let f = figures(args, run);
    let tokens = [run.tenants[0].tokens as f64, run.tenants[1].tokens as f64];
    let a = allocations(args, tokens);
    let owed = owed(&a);
    let predicted = match (run.arm, run.predicted_after_s) {
        (Arm::Smg, _) => "by no one: SMG routed".to_owned(),
        (_, None) => "not within the timeout".to_owned(),
        (_, Some(s)) => format!("after {s:.0} s"),
    };
    println!(
        "\n== {} · run {} (step predicted {predicted}; window {:.0} s) ==",
        run.arm.name(),
        run.run + 1,
        run.window_s
    );
    println!(
        "| tenant | answered (per s) | prompt tokens | share (owed) | output tokens | shed | rate-limited (429) | other failures | latency p50 / p90 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, t) in run.tenants.iter().enumerate() {
        let share = shares(&a).map_or(f64::NAN, |s| s[i]);
        println!(
            "| {} | {} ({:.1}) | {} | {:.3} ({:.3}) | {} | {} | {} | {} | {:.2} / {:.2} s |",
            t.tenant,
            t.ok,
            t.ok as f64 / run.window_s,
            t.tokens,
            share,
            owed[i],
            t.answered_tokens,
            t.shed,
            t.limited,
            t.failed,
            t.latency_s.0,
            t.latency_s.1
        );
    }
    let pick = |w: fn(&StepSample) -> f64| -> Vec<f64> { run.steps.iter().map(w).collect() };
    let (pred, meas) = (pick(|s| s.predicted_ms), pick(|s| s.measured_ms));
    let q = |v: &[f64], p| percentile(v, p).unwrap_or(f64::NAN);
    let errors: Vec<f64> = run.steps.iter().map(|s| (s.predicted_ms / s.measured_ms - 1.0).abs()).collect();
    let limit = step_limit_ms(args, run);
    // Control's ledger predicts only what it routed: nothing in the SMG arm.
    let predicted = if run.arm == Arm::Smg {
        String::new()
    } else {
        format!(
            "predicted p50 / p90 / max {:.1} / {:.1} / {:.1} ms, its ITL max {:.2} ms, over the target in {:.1} % of samples; ",
            q(&pred, 50.0),
            q(&pred, 90.0),
            pred.iter().copied().fold(f64::NAN, f64::max),
            f.predicted_itl_max,
            100.0 * f.predicted_over,
        )
    };
    let error = if run.arm == Arm::Smg {
        String::new()
    } else {
        format!("; |predicted / measured − 1| median {:.3}", q(&errors, 50.0))
    };
    println!(
        "Jain {:.3}; decode step (ITL target {} ms at {:.2} tokens a step: {limit:.1} ms), {} samples: {predicted}\
         measured p50 / p90 {:.1} / {:.1} ms, {:.1} % over{error}",
        f.jain,
        args.itl_ms,
        run.tokens_per_step,
        run.steps.len(),
        q(&meas, 50.0),
        f.measured_p90,
        100.0 * over(&run.steps, limit, |s| s.measured_ms),
    );
    if run.arm == Arm::Fleet {
        let control = allocations(args, [run.admitted[0], run.admitted[1]]);
        println!(
            "control's admitted tokens in the window: steady {:.0}, flood {:.0} (steady's share {:.3}, Jain {:.3})",
            run.admitted[0],
            run.admitted[1],
            shares(&control).map_or(f64::NAN, |s| s[0]),
            jain(&control).unwrap_or(f64::NAN)
        );
    }
}

/// Every arm over the runs: mean (min–max).
pub(crate) fn print_summary(args: &TenantsArgs, runs: &[ArmRun]) {
    println!(
        "\n| arm | runs | Jain, mean (min–max) | steady's token share (owed {:.3}) | predicted ITL over the target ({} ms a token), % of samples | predicted ITL max, ms | measured step p90, ms |",
        owed(&allocations(args, [1.0, 1.0]))[0],
        args.itl_ms
    );
    println!("|---|---|---|---|---|---|---|");
    let mut arms: Vec<Arm> = runs.iter().map(|r| r.arm).collect();
    arms.sort_by_key(|a| *a as u8);
    arms.dedup();
    for arm in arms {
        let f: Vec<Figures> = runs.iter().filter(|r| r.arm == arm).map(|r| figures(args, r)).collect();
        let cell = |v: Vec<f64>, scale: f64, digits: usize| {
            if v.iter().all(|x| x.is_nan()) {
                return "–".to_owned();
            }
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let (lo, hi) =
                v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| (l.min(*x), h.max(*x)));
            format!("{:.digits$} ({:.digits$}–{:.digits$})", mean * scale, lo * scale, hi * scale)
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            arm.name(),
            f.len(),
            cell(f.iter().map(|x| x.jain).collect(), 1.0, 3),
            cell(f.iter().map(|x| x.steady_share).collect(), 1.0, 3),
            cell(f.iter().map(|x| x.predicted_over).collect(), 100.0, 1),
            cell(f.iter().map(|x| x.predicted_itl_max).collect(), 1.0, 2),
            cell(f.iter().map(|x| x.measured_p90).collect(), 1.0, 1),
        );
    }
}
