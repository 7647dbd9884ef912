//! The sim held to SGLang 0.5.23's recorded answers: every case of
//! [`infera_testkit::conformance_cases`] sent to in-process sims started with the flags the real
//! workers had, each answer compared by shape with the real one recorded under
//! `sglang-0.5.23/` (same status, media type, member names, JSON types, presence; the values are
//! not compared), under the intended differences of the test kit's allow-list.
//!
//! Re-record against real workers (tiny model, CPU; see the kit's module doc for their flags):
//!
//! ```sh
//! INFERA_SGLANG_AGGREGATED=http://127.0.0.1:31000 INFERA_SGLANG_PREFILL=http://127.0.0.1:31001 \
//! INFERA_SGLANG_BOOTSTRAP_PORT=31101 INFERA_SGLANG_DECODE=http://127.0.0.1:31002 \
//! INFERA_SGLANG_DP2=http://127.0.0.1:31003 \
//!   cargo test -p infera-sim --test conformance -- --ignored record_sglang_answers
//! ```

use std::path::{Path, PathBuf};

use infera_sim::{DisaggregationMode, Listeners, SimConfig};
use infera_testkit::conformance_cases::{Answer, CASES, Case, Worker, send, send_pd, spec_for};
use infera_testkit::server::Server;
use infera_testkit::shape::compare;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The real workers' flags besides their role (SGLang on CPU; the sim drops what it does not
/// model and reports it in `/server_info`): the kit's CPU flags, and these.
const COMMON: &[&str] = &[
    "--served-model-name",
    "tiny",
    "--host",
    "127.0.0.1",
    "--disable-overlap-schedule",
    "--max-total-tokens",
    "20000",
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/sglang-0.5.23")
}

fn kind_dir(w: Worker) -> &'static str {
    match w {
        Worker::Aggregated => "aggregated",
        Worker::Prefill => "prefill",
        Worker::Decode => "decode",
        Worker::Pd => "pd",
        Worker::Dp2 => "dp2",
    }
}

fn write(path: &Path, answer: &Answer) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let v = json!({"status": answer.status, "media_type": answer.media_type, "body": answer.body});
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
}

fn read(path: &Path) -> Answer {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    Answer {
        status: v["status"].as_u64().unwrap() as u16,
        media_type: v["media_type"].as_str().map(str::to_owned),
        body: v["body"].as_str().unwrap().to_owned(),
    }
}

/// Where each worker kind listens, and the prefill's bootstrap port.
struct Workers {
    urls: Vec<(Worker, String)>,
    bootstrap_port: u16,
}

impl Workers {
    fn url(&self, w: Worker) -> Option<&str> {
        self.urls.iter().find(|(k, _)| *k == w).map(|(_, u)| u.as_str())
    }
}

/// Sends every case to those of `workers` that are there, each answer to
/// `sink(kind, case, leg, answer)`.
async fn run_cases(workers: &Workers, mut sink: impl FnMut(Worker, &Case, &str, Answer)) {
    for (room, case) in (1u64..).zip(CASES) {
        for &w in case.workers {
            if w == Worker::Pd {
                let (Some(prefill), Some(decode)) =
                    (workers.url(Worker::Prefill), workers.url(Worker::Decode))
                else {
                    continue;
                };
                let (p, d) =
                    send_pd(prefill, decode, "127.0.0.1", workers.bootstrap_port, room * 7_919, case)
                        .await
                        .unwrap();
                sink(w, case, "prefill", p);
                sink(w, case, "decode", d);
            } else if let Some(url) = workers.url(w) {
                let a = send(url, case, None).await.unwrap_or_else(|e| panic!("{}: {e}", case.name));
                sink(w, case, "", a);
            }
        }
    }
}

fn fixture_path(w: Worker, case: &Case, leg: &str) -> PathBuf {
    let file =
        if leg.is_empty() { format!("{}.json", case.name) } else { format!("{}.{leg}.json", case.name) };
    fixtures().join(kind_dir(w)).join(file)
}

#[tokio::test]
#[ignore = "records real SGLang answers; needs running workers (see the module doc)"]
async fn record_sglang_answers() {
    // Workers whose variable is unset are skipped (record in parts when few fit in memory).
    let kinds = [
        (Worker::Aggregated, "INFERA_SGLANG_AGGREGATED"),
        (Worker::Prefill, "INFERA_SGLANG_PREFILL"),
        (Worker::Decode, "INFERA_SGLANG_DECODE"),
        (Worker::Dp2, "INFERA_SGLANG_DP2"),
    ];
    let workers = Workers {
        urls: kinds.iter().filter_map(|(w, k)| std::env::var(k).ok().map(|u| (*w, u))).collect(),
        bootstrap_port: std::env::var("INFERA_SGLANG_BOOTSTRAP_PORT").map_or(0, |p| p.parse().unwrap()),
    };
    run_cases(&workers, |w, case, leg, a| write(&fixture_path(w, case, leg), &a)).await;
}

/// An in-process sim with the real worker's flags over a model directory holding the tiny
/// model's `config.json` (its context length), no tokenizer.
async fn start(model: &Path, role: &[&str]) -> (Server, String, Option<u16>) {
    let mut argv = vec!["infera-sim", "--model-path", model.to_str().unwrap(), "--sim-seed", "7"];
    argv.extend_from_slice(COMMON);
    argv.extend_from_slice(infera_testkit::engine::CPU_FLAGS);
    argv.extend_from_slice(role);
    let config = SimConfig::from_argv(argv).unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bootstrap = match config.mode {
        DisaggregationMode::Prefill => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
        _ => None,
    };
    let url = format!("http://{}", http.local_addr().unwrap());
    let bootstrap_port = bootstrap.as_ref().map(|l| l.local_addr().unwrap().port());
    let listeners = Listeners { http, bootstrap };
    (Server::spawn("infera-sim", move |stop| infera_sim::run(listeners, config, stop)), url, bootstrap_port)
}

#[tokio::test]
async fn the_sim_answers_like_sglang() {
    let model = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures().join("config.json"), model.path().join("config.json")).unwrap();
    let (agg, agg_url, _) = start(model.path(), &[]).await;
    let (pre, pre_url, bootstrap) =
        start(model.path(), &["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0"])
            .await;
    let decode_flags =
        ["--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup", "cpu_tensor"];
    let (dec, dec_url, _) = start(model.path(), &decode_flags).await;
    let (dp2, dp2_url, _) = start(model.path(), &["--dp-size", "2"]).await;
    let workers = Workers {
        urls: vec![
            (Worker::Aggregated, agg_url),
            (Worker::Prefill, pre_url),
            (Worker::Decode, dec_url),
            (Worker::Dp2, dp2_url),
        ],
        bootstrap_port: bootstrap.unwrap(),
    };
    let mut failures = Vec::new();
    let mut compared = 0;
    run_cases(&workers, |w, case, leg, sim| {
        let real = read(&fixture_path(w, case, leg));
        let report = compare(&real.shape(), &sim.shape(), &spec_for(case).unwrap());
        compared += 1;
        if !report.is_clean() {
            failures.push(format!("{} {} {leg}:\n{report}", kind_dir(w), case.name));
        }
    })
    .await;
    for s in [agg, pre, dec, dp2] {
        drop(s);
    }
    assert!(compared > 100, "{compared} answers compared");
    assert!(failures.is_empty(), "{} of {compared} answers differ:\n{}", failures.len(), failures.join("\n"));
}
