//! What the study shows: per scenario and load point the original study's two tables, what each SMG
//! did and what the scenario's events did (on stdout as each cell completes), every run as
//! `study.json`, and two plots per cell under `--out`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use rand::SeedableRng as _;
use rand::rngs::SmallRng;
use serde_json::{Value, json};

use super::arm::Arm;
use super::deploy::Routing;
use super::events::{self, CATCH_UP_SHARE};
use super::iso_throughput::{self, Sample};
use super::scenario::Change;
use super::table::Label;
use super::{ArmRun, DecodeWeightArgs, LoadRun, describe, goodput_versus, plot, stats, table};
use crate::replay::report::Report;

fn rows(cell: &LoadRun, runs: usize) -> Vec<(Label, &Report)> {
    cell.arms.iter().map(|a| (a.label(runs), &a.report)).collect()
}

/// A cell's tables, SMG lines and events on stdout.
pub(crate) fn print(args: &DecodeWeightArgs, cell: &LoadRun) {
    let rows = rows(cell, args.runs);
    println!("\n{}", table::results(&rows, cell.topology.gpus(args.prefill_gpus)));
    if let Some(goodput) = table::goodput(&rows, cell.topology.gpus(args.prefill_gpus)) {
        println!(
            "Goodput (interactive: TTFT ≤ 2 s, ITL ≤ 50 ms; batch: TTFT ≤ 60 s, ITL ≤ 250 ms; emulated):\n\n{goodput}"
        );
        if args.runs > 1
            && let Some(versus) = goodput_versus::versus(&rows, cell.topology.gpus(args.prefill_gpus))
        {
            println!("{versus}");
        }
    }
    // With several prefills the router's prefill pick decides how much of each conversation
    // a prefill recomputes.
    let hits: Vec<String> = cell
        .arms
        .iter()
        .map(|a| {
            let ratio = a.prefill_cache.hit_ratio();
            format!(
                "{} {}",
                a.label(args.runs),
                ratio.map_or_else(|| "–".to_owned(), |r| format!("{:.1} %", 100.0 * r))
            )
        })
        .collect();
    println!(
        "Prefill cache hits (prompt tokens a prefill's cache held, warm-up included): {}\n",
        hits.join(" · ")
    );
    println!(
        "Decode ranks over the measured window (/v1/loads every {} s emulated; every rank of the decodes in the pool):\n",
        args.sample_interval_s
    );
    println!("{}", table::ranks(&rows));
    println!(
        "{}",
        table::versus(&rows, cell.topology.gpus(args.prefill_gpus), args.recommended, args.speedup)
    );
    for a in &cell.arms {
        if let Routing::Smg { counters, .. } = &a.routing {
            println!("{}: {}", a.label(args.runs), counters.line());
        }
    }
    for a in &cell.arms {
        if let Some(line) = a.weights.line(a.arm == super::arm::Arm::Auto) {
            println!("{}: {line}", a.label(args.runs));
        }
    }
    for a in &cell.arms {
        let lines: Vec<String> = a
            .applied
            .iter()
            .map(|e| {
                let caught = match catch_up(a, e) {
                    Some(Some(s)) => {
                        format!(", its ranks carried {CATCH_UP_SHARE} × the mean rank {s:.0} s later")
                    }
                    Some(None) => ", its ranks never carried the mean rank".to_owned(),
                    None => String::new(),
                };
                format!("{} at {:.0} s (routers had it at {:.0} s){caught}", e.what, e.event.at_s, e.done_s)
            })
            .collect();
        if !lines.is_empty() {
            println!("{}: {}", a.label(args.runs), lines.join("; "));
        }
    }
}

/// For a join: the seconds until the decode carried the mean (inner `None`: never).
fn catch_up(a: &ArmRun, e: &events::Applied) -> Option<Option<f64>> {
    matches!(e.event.change, Change::Join(_))
        .then(|| events::catch_up_s(&a.report.rank_series, &e.url, e.done_s))
}

/// Everything as JSON.
pub(crate) fn json(args: &DecodeWeightArgs, cells: &[LoadRun]) -> Value {
    json!({
        "study": "decode-weight",
        "trace": args.trace.to_string(),
        "deployment": {
            "shape": "in process: prefill sims (1 rank, 8k chunks) + decode sims (TP = ranks, DP attention) + infera-control + infera-proxy per router; an SMG arm: the same sims behind `smg launch --pd-disaggregation --dp-aware` per router instead",
            "prefill_schedule_policy": args.prefill_schedule_policy,
            "decode_ranks": args.decode_ranks,
            "kv_pressure_tokens_per_rank": args.kv_pressure_tokens,
            "prefill_cache_tokens": args.prefill_cache_tokens,
            "prefill_gpus": args.prefill_gpus,
            "timing": "infera-sim defaults (the original study's step-time calibration)",
            "seed": args.seed,
            "time_compression": args.speedup,
            "sample_interval_s": args.sample_interval_s,
            "runs": args.runs,
            "window_stride_sessions": args.window_stride,
            "screen": args.screen,
            "recommended": args.recommended.to_string(),
        },
        "cells": cells.iter().map(|c| json!({
            "scenario": c.scenario.name(),
            "topology": c.topology.to_string(),
            "gpus": c.topology.gpus(args.prefill_gpus),
            "load": c.load.name(),
            "sessions": c.shaping.concurrency,
            "shaping": describe(&c.shaping),
            "match_seed_load": c.seed_load.as_ref().map(|m| json!({
                "sessions": m.sessions,
                "requests": m.requests,
                "mean_output_tokens": m.mean_output_tokens,
                "mean_think_s": m.mean_think_s,
                "output_scale": m.output_scale,
                "think_time_scale": m.think_time_scale,
            })),
            "arms": c.arms.iter().map(|a| arm_json(a, c.topology.gpus(args.prefill_gpus))).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn arm_json(a: &ArmRun, gpus: u32) -> Value {
    let mut v = json!({
        "arm": a.arm.to_string(),
        "key": a.arm.key(),
        "run": a.run,
        "seed": a.seed,
        "session_offset": a.session_offset,
        "load_view_age": a.arm.load_view(a.report.shaping.compression),
        "control_flags": a.arm.control_flags(),
        "tokens_per_s_per_gpu": a.report.total_tokens_per_s / f64::from(gpus),
        "wall_s": a.wall_s,
        "events": a.applied.iter().map(|e| e.json(catch_up(a, e).flatten())).collect::<Vec<_>>(),
        "decode_weight": a.weights.json(),
        "prefill_cache": a.prefill_cache.json(),
        "report": a.report.json(),
    });
    if a.arm.admits() {
        v["service_classes"] = json!(super::classes::file(a.report.shaping.compression));
    }
    match &a.routing {
        Routing::Control { picks_at_start, picks, fallback_picks } => {
            v["control_decode_picks_at_start"] = json!(picks_at_start);
            v["control_decode_picks"] = json!(picks);
            v["proxy_fallback_picks"] = json!(fallback_picks);
        }
        Routing::Smg { counters, argv } => {
            v["smg_argv"] = json!(argv);
            v["smg"] = counters.json();
        }
    }
    v
}

/// Writes `study.json` and two SVGs per cell under `--out`; the JSON's path.
pub(crate) fn write(args: &DecodeWeightArgs, cells: &[LoadRun]) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    for c in cells {
        let rows = rows(c, args.runs);
        let name = super::cell_name(args, c.scenario, c.load, &c.shaping);
        let gpus = c.topology.gpus(args.prefill_gpus);
        let svg =
            plot::interactivity_vs_throughput(&format!("Interactivity vs throughput, {name}"), &rows, gpus);
        std::fs::write(args.out.join(format!("{name}-interactivity.svg")), svg)?;
        let svg = plot::busiest_over_time(&format!("Decode ranks over time, {name}"), &rows);
        std::fs::write(args.out.join(format!("{name}-busiest-rank.svg")), svg)?;
    }
    if args.sweeps() {
        let goodput = |a: &ArmRun, c: &LoadRun| {
            let g = a.report.goodput.as_ref()?;
            Some(plot::Point { x: c.shaping.concurrency as f64, y: g.per_s() })
        };
        let frontier = |a: &ArmRun, c: &LoadRun| {
            sample(args, a, c).map(|s| plot::Point { x: s.tokens_per_gpu, y: s.p90 })
        };
        for (name, lines) in sweep_curves(cells, &frontier) {
            let svg = plot::curves(
                &format!("p90 interactivity over throughput, {name}"),
                plot::INTERACTIVITY,
                &lines,
            );
            std::fs::write(args.out.join(format!("{name}-frontier.svg")), svg)?;
        }
        if args.batch_share.is_some() {
            for (name, lines) in sweep_curves(cells, &goodput) {
                let svg = plot::curves(&format!("Goodput over offered load, {name}"), plot::GOODPUT, &lines);
                std::fs::write(args.out.join(format!("{name}-goodput.svg")), svg)?;
            }
        }
    }
    let path = args.out.join("study.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json(args, cells))? + "\n")?;
    Ok(path)
}

/// Per scenario and load point (`scenario-load`), each arm's point at each offered load of the
/// sweep (`point` of every run, x and y each the mean over the runs), in the order the cells ran
/// (a scenario's and load point's cells run one after another, and a cell's arms are sorted by
/// arm).
fn sweep_curves(
    cells: &[LoadRun],
    point: &dyn Fn(&ArmRun, &LoadRun) -> Option<plot::Point>,
) -> Vec<(String, Vec<plot::Curve>)> {
    sweeps(cells)
        .map(|(name, sweep)| {
            let mut curves: Vec<plot::Curve> = Vec::new();
            for c in sweep {
                let mut arms: Vec<Arm> = c.arms.iter().map(|a| a.arm).collect();
                arms.dedup();
                for arm in arms {
                    let runs: Vec<plot::Point> =
                        c.arms.iter().filter(|a| a.arm == arm).filter_map(|a| point(a, c)).collect();
                    if runs.is_empty() {
                        continue;
                    }
                    let (xs, ys): (Vec<f64>, Vec<f64>) = runs.iter().map(|p| (p.x, p.y)).unzip();
                    let point = plot::Point { x: stats::mean(&xs), y: stats::mean(&ys) };
                    let label = arm.to_string();
                    match curves.iter_mut().find(|k| k.arm == label) {
                        Some(k) => k.points.push(point),
                        None => curves.push(plot::Curve { arm: label, points: vec![point] }),
                    }
                }
            }
            (name, curves)
        })
        .collect()
}

/// A sweep's cells grouped by scenario and load point (`scenario-load`): they run one after
/// another, so each group is a run of neighbouring cells.
fn sweeps(cells: &[LoadRun]) -> impl Iterator<Item = (String, &[LoadRun])> {
    let base = |c: &LoadRun| super::cell_base(c.scenario, c.load);
    cells.chunk_by(move |a, b| base(a) == base(b)).map(move |sweep| (base(&sweep[0]), sweep))
}

/// An arm-run's point of the throughput–interactivity curve: its tok/s/GPU and p90
/// interactivity (`None` without a p90).
fn sample(args: &DecodeWeightArgs, a: &ArmRun, c: &LoadRun) -> Option<Sample> {
    Some(Sample {
        sessions: c.shaping.concurrency,
        run: a.run,
        tokens_per_gpu: a.report.total_tokens_per_s / f64::from(c.topology.gpus(args.prefill_gpus)),
        p90: a.report.interactivity.p90?,
    })
}

/// For a load sweep, per scenario and load point: the recommended arm's p90 interactivity at
/// each peer point's throughput ([`iso_throughput`]), as tables (empty without a sweep).
pub(crate) fn sweep_tables(args: &DecodeWeightArgs, cells: &[LoadRun]) -> String {
    let mut out = String::new();
    if !args.sweeps() {
        return out;
    }
    for (name, sweep) in sweeps(cells) {
        let of = |arm: Arm| -> Vec<Sample> {
            sweep
                .iter()
                .flat_map(|c| {
                    c.arms.iter().filter(move |a| a.arm == arm).filter_map(move |a| sample(args, a, c))
                })
                .collect()
        };
        let ours = of(args.recommended);
        if ours.is_empty() {
            continue;
        }
        let range = iso_throughput::curve(&ours, &[1]);
        let (lo, hi) = range
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), p| (l.min(p.tokens_per_gpu), h.max(p.tokens_per_gpu)));
        let _ = writeln!(
            out,
            "\nAt equal throughput, {name}: {}'s p90 interactivity read off its own sweep (linear between its loads, {lo:.0}–{hi:.0} tok/s/GPU in run 1) at each peer point's tok/s/GPU, against the peer's p90; only its efficient loads count (none of its other loads serves as much at a p90 as high), and where the peer serves less than the lowest of them, that load's p90 is a floor (≥); paired-bootstrap 95 % intervals over the runs:\n",
            args.recommended
        );
        let _ = writeln!(
            out,
            "| peer arm | sessions | its tok/s/GPU | its p90 | {} p90 there | × [95 % CI] | runs |",
            args.recommended
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        let mut rng = SmallRng::seed_from_u64(ISO_BOOTSTRAP_SEED);
        let mut peers: Vec<Arm> = args.arms.iter().copied().filter(Arm::is_peer).collect();
        peers.dedup();
        for peer in peers {
            for row in iso_throughput::versus(&ours, &of(peer), stats::RESAMPLES, &mut rng) {
                let sign = row.ours.map_or("", |o| o.bound.sign());
                let ratio = match (row.ratio, row.interval) {
                    (Some(r), Some(i)) => format!("{sign}{r:.3} [{:.3}, {:.3}]", i.low, i.high),
                    (Some(r), None) => format!("{sign}{r:.3}"),
                    (None, _) => "– (serves more than any of its loads)".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "| {peer} | {} | {:.0} | {:.1} | {} | {ratio} | {} |",
                    row.peer.sessions,
                    row.peer.tokens_per_gpu,
                    row.peer.p90,
                    row.ours.map_or_else(|| "–".to_owned(), |y| format!("{sign}{:.1}", y.p90)),
                    row.runs
                );
            }
        }
    }
    out
}

/// The equal-throughput intervals' bootstrap seed (fixed: the same runs give the same table).
const ISO_BOOTSTRAP_SEED: u64 = 0x150;
