//! The PD rendezvous between two in-process sims: a prefill and a decode.

#[path = "../harness/mod.rs"]
mod harness;

mod capacity;
mod failures;
mod rendezvous;

use serde_json::{Value, json};

use harness::Sim;

/// A 1P1D pair at 100× speed; extra flags for each side.
async fn pair(prefill_flags: &[&str], decode_flags: &[&str]) -> (Sim, Sim) {
    let mut p = vec!["--disaggregation-mode", "prefill", "--sim-speedup", "100"];
    p.extend_from_slice(prefill_flags);
    let mut d = vec!["--disaggregation-mode", "decode", "--sim-speedup", "100"];
    d.extend_from_slice(decode_flags);
    (Sim::start(&p).await, Sim::start(&d).await)
}

/// A `/generate` body carrying the PD fields for `prefill`'s bootstrap listener.
fn pd_body(prefill: &Sim, room: u64, max_new_tokens: u32, stream: bool) -> Value {
    json!({
        "text": "the same prompt on both legs",
        "sampling_params": {"max_new_tokens": max_new_tokens},
        "stream": stream,
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": prefill.bootstrap.unwrap().port(),
        "bootstrap_room": room,
    })
}
