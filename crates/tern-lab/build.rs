//! Compiles proto/agent.proto with protox (pure Rust, no protoc) and
//! generates the tonic service and prost messages.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/agent.proto");
    let fds = protox::compile(["agent.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
