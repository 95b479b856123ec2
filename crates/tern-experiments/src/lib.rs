//! tern's experiments (`tern lab run`, E1–E5) and its tuner (`tern tune`):
//! the server measured under the settings they compare.
//!
//! Both start the running binary's `tern serve` as child processes
//! (`served.rs`), so the server is measured through its public face, a
//! process and a socket, loaded in-process by tern-lab's load generator;
//! the tuner also reads tern-server's configuration and runs its
//! calibration in-process. They need both crates, so they sit above both,
//! and the lab itself (`tern-lab`) never depends on the server.
//!
//! - [`experiment`]: the experiments, each stored as one run.
//! - [`tune`]: the batteries and the configuration they write.
//! - `served.rs`, `content.rs`: the server child, and what it serves.

mod content;
pub mod experiment;
mod served;
pub mod tune;
