//! Compiles the `infera.control.v1` protos (tonic + prost) and writes the descriptor set for reflection.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let protos = [
        "proto/infera/control/v1/types.proto",
        "proto/infera/control/v1/router.proto",
        "proto/infera/control/v1/admin.proto",
    ];
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("infera_control_v1.bin"))
        .compile_protos(&protos, &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
