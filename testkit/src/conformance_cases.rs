//! The requests the sim was held to SGLang 0.5.23 with, and what may differ. A conformance test
//! sends each [`Case`] to a real SGLang worker and to an `infera-sim` started with the same
//! flags, turns both answers into [`Answer::shape`]s and [`compare`](crate::shape::compare)s
//! them under [`spec`] ([`RANGES`] + [`INTENDED`]).
//!
//! The workers, all with `--model-path <tiny model> --served-model-name tiny` and, for real
//! SGLang on CPU, `--device cpu --attention-backend torch_native --sampling-backend pytorch
//! --disable-overlap-schedule --sleep-on-idle --max-total-tokens 20000` (see [`Worker`]). Cases
//! of [`Worker::Pd`] send the same body to the prefill and the decode (the prefill first), each
//! with `bootstrap_host`, `bootstrap_port` (the prefill's bootstrap port) and one
//! `bootstrap_room`, as a router does ([`Case::pd_body`]).

mod bodies;
mod intended;
mod send;
mod table;

use serde_json::{Value, json};

pub use intended::{CASE_INTENDED, INTENDED, RANGES, STREAM_INTENDED, spec, spec_for};
pub use send::{Answer, send, send_pd};
pub use table::CASES;

/// The model the cases name (`--served-model-name`).
pub const MODEL: &str = "tiny";

/// Where a case is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Worker {
    /// An aggregated worker (`--disaggregation-mode null`).
    Aggregated,
    /// A PD prefill (`--disaggregation-mode prefill --disaggregation-bootstrap-port P`).
    Prefill,
    /// A PD decode (`--disaggregation-mode decode`; real SGLang on CPU also needs
    /// `--disaggregation-decode-retraction-backup cpu_tensor`).
    Decode,
    /// A prefill + decode pair, both legs driven by the test.
    Pd,
    /// An aggregated worker with `--dp-size 2` (real SGLang on CPU needs
    /// `SGLANG_CPU_OMP_THREADS_BIND`).
    Dp2,
}

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// A unique name (fixture files, reports).
    pub name: &'static str,
    /// The HTTP method.
    pub method: &'static str,
    /// Path and query.
    pub path: &'static str,
    /// The body as sent: JSON text (or deliberately broken text); `$LONG` stands for a
    /// 6,000-word prompt ([`long_prompt`]).
    pub body: Option<&'static str>,
    /// The worker kinds it goes to.
    pub workers: &'static [Worker],
}

impl Case {
    /// The body's bytes, `$LONG` expanded.
    pub fn body_text(&self) -> Option<String> {
        self.body.map(|b| b.replace("$LONG", &long_prompt()))
    }

    /// The body as JSON, if it is JSON.
    pub fn json_body(&self) -> Option<Value> {
        self.body_text().and_then(|b| serde_json::from_str(&b).ok())
    }

    /// The body a PD leg gets: this one with `bootstrap_host`, `bootstrap_port` and
    /// `bootstrap_room` (chosen by the caller: a random integer below 2⁶³).
    pub fn pd_body(&self, bootstrap_host: &str, bootstrap_port: u16, room: u64) -> Option<Value> {
        let mut body = self.json_body()?;
        let fields = json!({"bootstrap_host": bootstrap_host, "bootstrap_port": bootstrap_port, "bootstrap_room": room});
        if let (Value::Object(b), Value::Object(f)) = (&mut body, fields) {
            b.extend(f);
        }
        Some(body)
    }

    /// Whether the answer is a stream.
    pub fn streams(&self) -> bool {
        self.json_body().and_then(|b| b.get("stream").and_then(Value::as_bool)).unwrap_or(false)
    }
}

/// A prompt longer than the tiny model's 4,096-token context: 6,000 × `"hello "`.
pub fn long_prompt() -> String {
    "hello ".repeat(6000)
}

#[cfg(test)]
mod tests {
    use super::bodies::BAD_JSON;
    use super::*;

    #[test]
    fn names_are_unique_and_bodies_parse_where_they_should() {
        let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len(), "duplicate case names");
        for c in CASES {
            assert!(!c.workers.is_empty(), "{}", c.name);
            if let Some(body) = c.body
                && body != BAD_JSON
            {
                assert!(c.json_body().is_some(), "{}: {body}", c.name);
            }
        }
        let long = CASES.iter().find(|c| c.name == "generate_too_long").unwrap();
        assert!(long.json_body().unwrap()["text"].as_str().unwrap().len() > 30_000);
    }

    #[test]
    fn pd_bodies_carry_the_bootstrap_fields() {
        let c = CASES.iter().find(|c| c.name == "pd_generate").unwrap();
        let body = c.pd_body("127.0.0.1", 8998, 42).unwrap();
        assert_eq!(body["bootstrap_room"], 42);
        assert_eq!(body["bootstrap_port"], 8998);
        assert_eq!(body["sampling_params"]["max_new_tokens"], 8);
        assert!(CASES.iter().find(|c| c.name == "pd_generate_stream").unwrap().streams());
    }
}
