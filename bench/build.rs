//! Compiles the echo baseline proto.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&["proto/infera/bench/v1/echo.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
