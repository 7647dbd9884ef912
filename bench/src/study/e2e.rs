//! A tiny study end to end: two load points × three arms on fresh in-process deployments, over
//! a trace made here (two sessions, one with a sub-agent), at a high time compression.

use clap::Parser;

use super::deploy::Routing;
use super::{DecodeWeightArgs, decode_weight, write_outputs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    study: DecodeWeightArgs,
}

/// The study's flags for the tiny trace: 2 lanes, no warm-up, 40× compression, quiet, plus
/// `arms` (the arms and load points of the test).
fn tiny_study(trace: &tempfile::NamedTempFile, out: &tempfile::TempDir, arms: &[&str]) -> Cli {
    let mut argv = vec!["study", "--trace", trace.path().to_str().unwrap()];
    argv.extend_from_slice(arms);
    argv.extend(["--concurrency", "2", "--warmup-s", "0", "--duration-s", "100000", "--speedup", "40"]);
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
            assert!(
                r.rank_series.iter().any(|s| s.busiest() > 0),
                "{}: the decode was sampled busy",
                arm.arm
            );
            assert!(r.rank_series.iter().all(|s| s.running.len() == 8));
            assert!(r.ranks.is_some());
        }
        let rows: Vec<_> = load.arms.iter().map(|a| (a.arm, &a.report)).collect();
        assert_eq!(super::table::results(&rows, 12).lines().count(), 2 + 3);
        assert_eq!(super::table::ranks(&rows).lines().count(), 2 + 3);
    }

    let path = write_outputs(&cli.study, &loads).unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["loads"].as_array().map(Vec::len), Some(2));
    for load in v["loads"].as_array().unwrap() {
        for arm in load["arms"].as_array().unwrap() {
            assert_eq!(arm["control_decode_picks_at_start"], 0.0);
            assert_eq!(arm["report"]["completed"], 7);
        }
    }
    assert_eq!(v["loads"][1]["load"], "seed");
    assert_eq!(v["loads"][0]["arms"][2]["control_flags"][3], "round-robin");
    assert!(
        v["loads"][0]["arms"][1]["report"]["decode_rank_series"]["running"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    );
    for name in [
        "published-interactivity.svg",
        "published-busiest-rank.svg",
        "seed-interactivity.svg",
        "seed-busiest-rank.svg",
    ] {
        assert!(std::fs::read_to_string(out.path().join(name)).unwrap().starts_with("<svg"));
    }
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

    let path = write_outputs(&cli.study, &loads).unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["loads"][0]["arms"][0]["smg"]["decode_selections"], 7.0);
    assert!(out.path().join("smg-seed-smg-least_load-no-overload.log").is_file());
}
