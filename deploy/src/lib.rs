//! The deployment files' checks: what they share. The checks themselves are this crate's
//! tests (`deploy/tests/`); nothing here ships in a binary.

use std::path::{Path, PathBuf};

/// The `deploy/` folder.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}
