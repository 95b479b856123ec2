//! The generated messages and service stubs (`proto/agent.proto`, compiled
//! by `build.rs`).

tonic::include_proto!("tern.agent");
