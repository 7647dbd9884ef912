//! End to end on loopback: HTTP client → proxies → control → sim prefill + decode workers.

mod harness;

mod errors;
mod kv;
mod ledger;
mod load;
mod openai;
mod pd;
