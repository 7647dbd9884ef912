//! The deployment files' checks: what they share. The checks themselves are this crate's
//! tests (`deploy/tests/`); nothing here ships in a binary.
//!
//! - [`exposition`]: a `/metrics` answer read into the series and labels a query may name.
//! - [`promql`]: a query parsed and checked against them.
//! - [`dashboard`]: the Grafana dashboard's queries.
//! - [`rules`]: the Prometheus rules file and promtool's test files.

use std::path::{Path, PathBuf};

pub mod dashboard;
pub mod exposition;
pub mod promql;
pub mod rules;

/// The `deploy/` folder.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}
