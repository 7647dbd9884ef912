//! A tiny study end to end: two load points × three arms on fresh in-process deployments, over
//! a trace made here (two sessions, one with a sub-agent), at a high time compression.

use clap::Parser;

use super::deploy::Routing;
use super::{DecodeWeightArgs, decode_weight, output};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    study: DecodeWeightArgs,
}

/// The study's flags for the tiny trace: 2 lanes, no warm-up, 40× compression, quiet, plus
/// `arms` (the arms and load points of the test).
fn tiny_study(trace: &tempfile::NamedTempFile, out: &tempfile::TempDir, arms: &[&str]) -> Cli {
    tiny_study_for(trace, out, arms, 100_000.0)
}

/// [`tiny_study`] with a window of `duration_s` emulated seconds (the scenarios' events are
/// placed in it).
fn tiny_study_for(
    trace: &tempfile::NamedTempFile,
    out: &tempfile::TempDir,
    arms: &[&str],
    duration_s: f64,
) -> Cli {
    let mut argv = vec!["study", "--trace", trace.path().to_str().unwrap()];
    argv.extend_from_slice(arms);
    let duration = duration_s.to_string();
    argv.extend(["--concurrency", "2", "--warmup-s", "0", "--duration-s", &duration, "--speedup", "40"]);
    argv.extend(["--sample-interval-s", "0.05", "--out", out.path().to_str().unwrap(), "--quiet"]);
    Cli::try_parse_from(argv).unwrap()
}

/// Two sessions: A with 3 turns and a 2-turn sub-agent before its second, B with 2 turns.
fn trace() -> tempfile::NamedTempFile {
    let req = |t: f64, input: u32, out: u32, think: f64, ids: &[u32]| serde_json::json!({"t": t, "type": "s", "in": input, "out": out, "think_time": think, "hash_ids": ids});
    let a = serde_json::json!({"id": "trace_a", "block_size": 64, "hash_id_scope": "local", "requests": [
        req(0.0, 300, 24, 0.0, &[1, 2, 3, 4]),
        {"t": 30.0, "type": "subagent", "agent_id": "x", "duration_ms": 20_000, "requests": [
            req(0.0, 200, 16, 0.0, &[1, 9, 10]),
            req(5.0, 260, 20, 2.0, &[1, 9, 10, 11]),
        ]},
        req(35.0, 400, 30, 25.0, &[1, 2, 3, 4, 5, 6]),
        req(45.0, 500, 40, 3.0, &[1, 2, 3, 4, 5, 6, 7]),
    ]});
    let b = serde_json::json!({"id": "trace_b", "block_size": 64, "hash_id_scope": "local", "requests": [
        req(0.0, 700, 30, 0.0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
        req(8.0, 760, 12, 2.0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
    ]});
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{a}\n{b}\n")).unwrap();
    file
}

/// [`trace`] and a third session of three turns 30 s apart (the scenarios' events fall inside
/// its run).
fn long_trace() -> tempfile::NamedTempFile {
    let file = trace();
    let req = |t: f64, think: f64| serde_json::json!({"t": t, "type": "s", "in": 300, "out": 20, "think_time": think, "hash_ids": [40, 41, 42, 43]});
    let c = serde_json::json!({"id": "trace_c", "block_size": 64, "hash_id_scope": "local", "requests": [
        req(0.0, 0.0), req(30.0, 30.0), req(60.0, 30.0),
    ]});
    let text = std::fs::read_to_string(file.path()).unwrap();
    std::fs::write(file.path(), format!("{text}{c}\n")).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_arm_runs_on_a_fresh_deployment_and_the_tables_have_one_row_each() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let cli = tiny_study(&trace, &out, &["--arms", "0,1e6,round-robin"]);
    let loads = decode_weight(&cli.study).await.unwrap();
    assert_eq!(loads.len(), 2);
    // The seed load point scales the mean output (172 tokens over 7 requests) to 1,000.
    let seed = loads[1].seed_load.as_ref().unwrap();
    assert_eq!((seed.sessions, seed.requests), (2, 7));
    assert!((loads[1].shaping.output_scale * 172.0 / 7.0 - 1_000.0).abs() < 1e-6);
    for load in &loads {
        assert_eq!(load.arms.len(), 3, "one run per arm");
        for arm in &load.arms {
            let r = &arm.report;
            // Every main and sub-agent request of the trace, none failed.
            assert_eq!((r.completed, r.failed, r.warmup), (7, 0, 0), "{}: {r}", arm.arm);
            // A fresh control: no pick before the replay, one decode pick per request after.
            let Routing::Control { picks_at_start, picks, fallback_picks } = arm.routing else {
                panic!("{}: control routes", arm.arm)
            };
            assert_eq!((picks_at_start, picks, fallback_picks), (0.0, 7.0, 0.0), "{}", arm.arm);
            // The one prefill's log: a leg per request, and prompts that grow turn by turn
            // within a session, so its cache held some of them.
            assert_eq!(arm.prefill_cache.legs, 7, "{}", arm.arm);
            assert!(arm.prefill_cache.cached_tokens > 0, "{}: {:?}", arm.arm, arm.prefill_cache);
            assert!(
                r.rank_series.iter().any(|s| s.busiest() > 0),
                "{}: the decode was sampled busy",
                arm.arm
            );
            assert!(r.rank_series.iter().all(|s| s.running.len() == 8));
            assert!(r.ranks.is_some());
        }
        let rows: Vec<_> = load.arms.iter().map(|a| (a.label(1), &a.report)).collect();
        assert_eq!(super::table::results(&rows, 12).lines().count(), 2 + 3);
        assert_eq!(super::table::ranks(&rows).lines().count(), 2 + 3);
    }

    let path = output::write(&cli.study, &loads).unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["cells"].as_array().map(Vec::len), Some(2));
    for load in v["cells"].as_array().unwrap() {
        for arm in load["arms"].as_array().unwrap() {
            assert_eq!(arm["control_decode_picks_at_start"], 0.0);
            assert_eq!(arm["report"]["completed"], 7);
        }
    }
    assert_eq!(v["cells"][1]["load"], "seed");
    assert_eq!(v["cells"][0]["arms"][2]["control_flags"][3], "round-robin");
    assert!(
        v["cells"][0]["arms"][1]["report"]["decode_rank_series"]["running"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    );
    for name in [
        "steady-published-interactivity.svg",
        "steady-published-busiest-rank.svg",
        "steady-seed-interactivity.svg",
        "steady-seed-busiest-rank.svg",
    ] {
        assert!(std::fs::read_to_string(out.path().join(name)).unwrap().starts_with("<svg"));
    }
}

/// Paired runs: run r of every arm has seed `--seed` + r − 1 and starts `--window-stride` × (r − 1)
/// sessions into the trace (wrapping around, so every session still runs); the screen's first
/// run has every arm, and the later runs only the recommended arm and the strongest peer; the
/// verdict names the interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paired_runs_share_seed_and_window_and_the_screen_keeps_the_strongest_peer() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let arms =
        ["--loads", "published", "--arms", "1e6/age,round-robin,power-of-two", "--recommended", "1e6/age"];
    let mut argv: Vec<&str> = arms.to_vec();
    argv.extend(["--runs", "2", "--screen", "--screen-keep", "1", "--window-stride", "1", "--seed", "7"]);
    let cli = tiny_study(&trace, &out, &argv);
    let loads = decode_weight(&cli.study).await.unwrap();
    let cell = &loads[0];
    assert_eq!(cell.arms.len(), 3 + 2, "a screen of three arms, then two");
    for a in &cell.arms {
        assert_eq!((a.seed, a.session_offset), (6 + a.run as u64, a.run - 1), "{} run {}", a.arm, a.run);
        assert_eq!(
            (a.report.completed, a.report.failed),
            (7, 0),
            "{} run {}: every session, wrapped",
            a.arm,
            a.run
        );
    }
    let second: Vec<String> = cell.arms.iter().filter(|a| a.run == 2).map(|a| a.arm.to_string()).collect();
    assert!(second.iter().any(|a| a.starts_with("W = 1,000,000")), "{second:?}");
    let rows: Vec<_> = cell.arms.iter().map(|a| (a.label(2), &a.report)).collect();
    let v = super::table::versus(&rows, 12, cli.study.recommended, 40.0);
    assert!(v.contains("Verdict: W = 1,000,000, prefilling ×1, age-decayed at "), "{v}");
    assert!(v.contains("(2 runs) the best peer arm"), "{v}");
}

/// A load sweep (`--concurrency 1,2`, two runs): one cell per load, the curves drawn, and the
/// equal-throughput table has a row for each of the peer's loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_sweep_draws_its_curves_and_compares_at_equal_throughput() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let argv = ["--loads", "seed", "--arms", "1e6,round-robin", "--recommended", "1e6", "--runs", "2"];
    let mut cli = tiny_study(&trace, &out, &argv);
    cli.study.concurrency = vec![1, 2];
    cli.study.batch_share = Some(0.5);
    let loads = decode_weight(&cli.study).await.unwrap();
    assert_eq!(loads.iter().map(|c| c.shaping.concurrency).collect::<Vec<_>>(), [1, 2]);
    output::write(&cli.study, &loads).unwrap();
    for svg in ["steady-seed-frontier.svg", "steady-seed-goodput.svg"] {
        let text = std::fs::read_to_string(out.path().join(svg)).unwrap_or_else(|e| panic!("{svg}: {e}"));
        assert_eq!(text.matches("<polyline").count(), 2, "a line per arm: {svg}");
    }
    for cell in ["c1", "c2"] {
        assert!(out.path().join(format!("steady-seed-{cell}-interactivity.svg")).exists(), "{cell}");
    }
    let tables = output::sweep_tables(&cli.study, &loads);
    assert!(tables.contains("At equal throughput, steady-seed: W = 1,000,000's"), "{tables}");
    let rows: Vec<&str> = tables.lines().filter(|l| l.starts_with("| round-robin (legacy) |")).collect();
    assert_eq!(rows.len(), 2, "a row per load of the peer:\n{tables}");
    assert!(rows.iter().all(|r| r.ends_with("| 2 |")), "two paired runs each:\n{tables}");
}

/// sglang-router 0.3.2 in PD mode, not DP-aware (its DP-aware PD path is broken), in front of
/// two prefills (its pool gauge counts one; the study waits on its worker list): every request
/// goes through it and its cache-aware decode policy chose each one; the engine spread them over
/// its ranks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sglang_router_arm_routes_pd_and_the_engine_picks_the_ranks() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let flags =
        ["--loads", "seed", "--scenarios", "unsaturated-prefill", "--arms", "sglang-router:cache_aware"];
    let cli = tiny_study(&trace, &out, &flags);
    let loads = decode_weight(&cli.study).await.unwrap();
    let arm = &loads[0].arms[0];
    let r = &arm.report;
    assert_eq!((r.completed, r.failed, r.warmup), (7, 0, 0), "{}: {r}", arm.arm);
    let Routing::Smg { counters, argv } = &arm.routing else { panic!("sglang-router routes") };
    assert!(!argv.iter().any(|a| a == "--dp-aware"), "{argv:?}");
    assert_eq!((counters.decode_policy.as_str(), counters.decode_selections), ("cache_aware", 7.0));
    let ranks_used = (0..8).filter(|&k| r.rank_series.iter().any(|s| s.running[k] > 0)).count();
    assert!(ranks_used >= 2, "the engine's DP controller spread the requests: {ranks_used} ranks");
}

/// SMG in front of the sims: every request of the trace streams through it, its decode policy
/// is the one that chose (one selection per request) and its counters reach `study.json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_smg_arm_routes_every_request_through_smg() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let cli = tiny_study(&trace, &out, &["--loads", "seed", "--arms", "smg:least_load:no-overload"]);
    let loads = decode_weight(&cli.study).await.unwrap();
    let arm = &loads[0].arms[0];
    let r = &arm.report;
    assert_eq!((r.completed, r.failed, r.warmup), (7, 0, 0), "{}: {r}", arm.arm);
    let Routing::Smg { counters, argv } = &arm.routing else { panic!("SMG routes") };
    assert!(argv.iter().any(|a| a == "--disable-worker-overload-protection"), "{argv:?}");
    assert_eq!((counters.decode_policy.as_str(), counters.decode_selections), ("least_load", 7.0));
    assert_eq!(counters.rank_dispatches.len(), 8);
    assert_eq!(counters.rank_dispatches.iter().sum::<f64>(), 7.0, "{}", counters.line());
    assert!(r.rank_series.iter().any(|s| s.busiest() > 0), "the decode was sampled busy");

    let path = output::write(&cli.study, &loads).unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["cells"][0]["arms"][0]["smg"]["decode_selections"], 7.0);
    assert!(out.path().join("smg-steady-seed-smg-least_load-no-overload-1-0.log").is_file());
}

/// Scale-out: the second decode joins and the first is drained at their times, for infera
/// (etcd registration, `Admin/DrainTarget`) and for SMG (its worker API); the sampled pool
/// follows, and every request still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_joins_and_drains_a_decode_under_every_router() {
    let trace = long_trace();
    let out = tempfile::tempdir().unwrap();
    let argv = ["--scenarios", "scale-out", "--loads", "published", "--arms", "1e6,smg:round_robin"];
    // The window is 0–40 s: decode-1 joins at 6 s, decode-0 is drained at 26 s, while
    // session C still runs (its second turn starts at 30 s).
    let cli = tiny_study_for(&trace, &out, &argv, 40.0);
    let cells = decode_weight(&cli.study).await.unwrap();
    assert_eq!(cells.len(), 1);
    for arm in &cells[0].arms {
        let r = &arm.report;
        assert_eq!(r.failed, 0, "{}: {r}", arm.arm);
        assert_eq!(r.completed + r.cut, 9, "{}: A's and B's 7, C's first two", arm.arm);
        let what: Vec<&str> = arm.applied.iter().map(|e| e.what.as_str()).collect();
        assert_eq!(what, ["decode-1 joins", "decode-0 is drained"], "{}", arm.arm);
        assert!(
            arm.applied[0].done_s >= 6.0 && arm.applied[1].done_s >= 26.0,
            "{}: {:?}",
            arm.arm,
            arm.applied
        );
        // The pool sampled: decode-0 alone, both, then decode-1 alone.
        let widths: Vec<usize> = r.rank_series.iter().map(|s| s.running.len()).collect();
        assert_eq!(widths.first(), Some(&8), "{}", arm.arm);
        assert!(widths.contains(&16), "{}: both decodes sampled once decode-1 joined", arm.arm);
        match &arm.routing {
            Routing::Control { fallback_picks, .. } => {
                assert_eq!(*fallback_picks, 0.0);
                // Control takes the drain at once; SMG lists a removed worker for seconds of
                // wall clock (its removal is a background job), past this tiny replay's end.
                let last = r.rank_series.last().unwrap();
                assert_eq!(last.workers.len(), 1, "{}", arm.arm);
                assert_eq!(&*last.workers[0].url, arm.applied[0].url, "{}: decode-1 is left", arm.arm);
            }
            Routing::Smg { counters, .. } => {
                assert_eq!(counters.rank_dispatches.len(), 16, "both decodes' ranks are counted");
                assert_eq!(counters.decode_selections as usize, r.completed + r.cut);
            }
        }
    }
}

/// Several routers: the sessions are spread over four proxies sharing one control (every
/// pick is control's) and over four SMG replicas (their selections add up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_proxy_spreads_the_sessions_over_every_router() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let argv = ["--scenarios", "multi-proxy", "--loads", "published", "--arms", "auto,smg:round_robin"];
    let cells = decode_weight(&tiny_study(&trace, &out, &argv).study).await.unwrap();
    for arm in &cells[0].arms {
        assert_eq!((arm.report.completed, arm.report.failed), (7, 0), "{}", arm.arm);
        match &arm.routing {
            Routing::Control { picks_at_start, picks, fallback_picks } => {
                assert_eq!((*picks - *picks_at_start, *fallback_picks), (7.0, 0.0));
                // Seven requests give no trusted fit: W in use is auto's fallback throughout.
                let last = arm.weights.last().expect("control's W was read");
                assert_eq!((last.in_use, last.fitted), (1e6, None), "{:?}", arm.weights);
            }
            Routing::Smg { counters, argv } => {
                assert!(arm.weights.0.is_empty(), "no control, no W");
                assert_eq!(counters.decode_selections, 7.0, "the four replicas' selections add up");
                assert!(argv.contains(&"round_robin".to_owned()));
            }
        }
    }
    for i in 0..4 {
        assert!(out.path().join(format!("smg-multi-proxy-published-smg-round_robin-1-{i}.log")).is_file());
    }
}

/// Mixed DP sizes (8 + 4 ranks) and KV pressure deploy as their tables say and serve the
/// trace under both routers: the samples have every rank of both decodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_dp_and_kv_pressure_deploy_their_decodes() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let argv = [
        "--scenarios",
        "mixed-dp,kv-pressure",
        "--loads",
        "published",
        "--arms",
        "1e6,smg:round_robin",
        "--kv-pressure-tokens",
        "50000",
    ];
    let cells = decode_weight(&tiny_study(&trace, &out, &argv).study).await.unwrap();
    assert_eq!(cells.len(), 2);
    for cell in &cells {
        for arm in &cell.arms {
            assert_eq!((arm.report.completed, arm.report.failed), (7, 0), "{}", arm.arm);
            let ranks = if cell.topology.decodes.len() == 2 { 12 } else { 8 };
            assert!(arm.report.rank_series.iter().all(|s| s.running.len() == ranks), "{}", arm.arm);
        }
    }
    assert_eq!(cells[1].topology.decodes[0].kv_tokens, Some(50_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arm_that_cannot_start_is_left_out_and_the_others_run() {
    let trace = trace();
    let out = tempfile::tempdir().unwrap();
    let missing = out.path().join("no-smg-here");
    let missing = missing.to_str().unwrap();
    let cli = tiny_study(
        &trace,
        &out,
        &["--arms", "1e6,smg:round_robin", "--loads", "seed", "--smg", missing, "--session-header"],
    );
    let loads = decode_weight(&cli.study).await.unwrap();
    let arms: Vec<String> = loads[0].arms.iter().map(|a| a.arm.to_string()).collect();
    assert_eq!(arms.len(), 1, "{arms:?}");
    assert_eq!(loads[0].arms[0].report.completed, 7, "the infera arm ran whole");
}
