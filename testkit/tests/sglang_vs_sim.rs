//! The sim held to SGLang 0.5.23, live: every case of [`infera_testkit::conformance_cases`]
//! sent to a real SGLang worker (the tiny model on CPU) and to an `infera-sim` started with the
//! same flags — aggregated, a PD prefill + decode pair driven leg by leg, and `--dp-size 2` — and
//! the two answers compared by shape: status, media type, member names, JSON types, presence,
//! numeric ranges (`token_usage` in [0, 1], a finite KV pool), under the kit's short allow-list
//! of intended differences, each with its reason. (`sim/tests/conformance` checks the sim
//! against answers recorded from these servers, without starting them.)

mod sglang;

use infera_proto::types::Role;
use infera_testkit::conformance_cases::{Answer, CASES, Case, MODEL, Worker, send, send_pd, spec_for};
use infera_testkit::shape::compare;
use infera_testkit::{Engine, EngineSpec, Sim};
use tokio::sync::OnceCell;

use sglang::run;

/// The cases' KV pool (`--max-total-tokens`), the same for SGLang and the sim.
const POOL: u64 = 20_000;

/// One kind of worker, real and emulated.
struct Pair {
    real: Engine,
    sim: Sim,
}

struct World {
    aggregated: Pair,
    prefill: Pair,
    decode: Pair,
    dp2: Pair,
}

async fn pair(spec: EngineSpec) -> Pair {
    let sim = spec.sim().start().await.expect("the sim starts with SGLang's flags");
    let real = spec.start().await.expect("SGLang starts");
    Pair { real, sim }
}

async fn world() -> &'static World {
    static WORLD: OnceCell<World> = OnceCell::const_new();
    WORLD
        .get_or_init(async || {
            let spec = |name: &str, role| EngineSpec::new(name, role, MODEL).max_total_tokens(POOL);
            let (aggregated, prefill, decode, dp2) = tokio::join!(
                pair(spec("aggregated", Role::Mixed)),
                pair(spec("prefill", Role::Prefill)),
                pair(spec("decode", Role::Decode)),
                pair(spec("dp2", Role::Mixed).dp(2)),
            );
            World { aggregated, prefill, decode, dp2 }
        })
        .await
}

impl World {
    fn of(&self, w: Worker) -> Option<&Pair> {
        match w {
            Worker::Aggregated => Some(&self.aggregated),
            Worker::Prefill => Some(&self.prefill),
            Worker::Decode => Some(&self.decode),
            Worker::Dp2 => Some(&self.dp2),
            Worker::Pd => None,
        }
    }
}

/// Both answers of `case` on worker kind `w` (a PD case: each leg), real first.
async fn answers(world: &World, w: Worker, case: &Case, room: u64) -> Vec<(&'static str, Answer, Answer)> {
    if w == Worker::Pd {
        let (p, d) = (&world.prefill, &world.decode);
        let port = |e: Option<u16>| e.expect("a prefill's bootstrap port");
        let real =
            send_pd(&p.real.url, &d.real.url, "127.0.0.1", port(p.real.record.bootstrap_port), room, case);
        let sim = send_pd(&p.sim.url, &d.sim.url, "127.0.0.1", port(p.sim.bootstrap_port()), room + 1, case);
        let ((rp, rd), (sp, sd)) = (real.await.expect("SGLang answers"), sim.await.expect("the sim answers"));
        return vec![("prefill", rp, sp), ("decode", rd, sd)];
    }
    let pair = world.of(w).expect("a single worker");
    let real = send(&pair.real.url, case, None).await.unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let sim = send(&pair.sim.url, case, None).await.unwrap_or_else(|e| panic!("{}: {e}", case.name));
    vec![("", real, sim)]
}

#[test]
fn the_sim_answers_every_case_as_sglang_does() {
    run(async {
        let w = world().await;
        let mut failures = Vec::new();
        let mut compared = 0;
        for (n, case) in (1u64..).zip(CASES) {
            for &kind in case.workers {
                for (leg, real, sim) in answers(w, kind, case, n * 7_919).await {
                    let report = compare(&real.shape(), &sim.shape(), &spec_for(case).unwrap());
                    compared += 1;
                    if !report.is_clean() {
                        failures.push(format!("{kind:?} {} {leg}:\n{report}", case.name));
                    }
                }
            }
        }
        assert!(compared > 100, "{compared} answers compared");
        assert!(
            failures.is_empty(),
            "{} of {compared} answers differ:\n{}",
            failures.len(),
            failures.join("\n")
        );
    });
}
