//! End to end on loopback: HTTP client → proxies → control → sim prefill + decode workers.

mod client;
mod harness;

mod admission;
mod anthropic;
mod api_keys;
mod chaos;
mod classes;
mod endpoints;
mod engine;
mod errors;
mod failover;
mod first_byte;
mod kv;
mod ledger;
mod load;
mod messages;
mod observability;
mod openai;
mod pairing;
mod parity;
mod pd;
mod prompt_logprobs;
mod rebuild;
mod router_auth;
mod slow_control;
mod timeout;
mod tls;
mod tokenizers;
mod trace;
mod worker_tls;
