//! The main job on the embedded default: builds the binaries, then runs the test kit's demo
//! (`testkit/examples/demo.rs`) — a 1P1D deployment on loopback, all real processes — which
//! streams a chat completion, shows the decode ledger under load and serves until Ctrl-C
//! (`--once`: stop at once). The demo lives in the kit because xtask must build before
//! `setup` has installed protoc, which every crate of the kit needs.

use std::path::Path;

use crate::{cargo, setup, status};

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let mut build = cargo(root);
    build.args(["build", "-q", "--locked", "-p", "infera-control", "-p", "infera-proxy", "-p", "infera-sim"]);
    status(build)?;
    let mut demo = cargo(root);
    demo.args(["run", "-q", "--locked", "-p", "infera-testkit", "--example", "demo", "--"]).args(args);
    demo.env("INFERA_BIN_DIR", root.join("target/debug")).env("INFERA_GRPCURL", setup::grpcurl(root));
    status(demo)
}
