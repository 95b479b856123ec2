//! The tern server: configuration, the connection state machine, the site
//! handlers and the engines that drive them.
//!
//! A request's path through the code, in file order: `engine/event.rs`
//! accepts and waits for readiness → `conn/` reads, parses (with
//! `tern_http`) and enforces limits and timeouts → `site/mod.rs` routes →
//! `site/static_files.rs` (via `open_files.rs` and `resolve.rs`) or
//! `site/internal.rs` answers into a `reply.rs` (`compress/` picks and
//! caches compressed variants) → `body.rs` sends it with the I/O method
//! `static_io.rs` chose → `access_log.rs` and `metrics.rs` record it.
//!
//! Imports run one way, top to bottom (ARCHITECTURE.md, "Layers"; checked
//! by `crates/tern/tests/layers.rs`): `server.rs` (composition root) →
//! `config/` (the sections assembled) → `engine/` → `conn/`, `shared.rs`,
//! `handover.rs`, `per_ip.rs` → `site/` → `compress/` → `worker.rs` (what
//! a worker lends), `reply.rs`, `body.rs`, `tls.rs`, `static_io.rs`,
//! `calibrate.rs`, `limits.rs`, `http2.rs` → files and records (`open_files.rs`,
//! `resolve.rs`, `offload.rs`, `reaper.rs`, `access_log.rs`,
//! `service_records.rs`, `metrics.rs`, `error_log.rs`, `values.rs`,
//! `privileges.rs`, `listeners.rs`, `spool.rs`, `sys.rs`). Nothing imports
//! this file.

pub mod access_log;
pub mod body;
pub mod calibrate;
pub mod compress;
pub mod config;
pub mod conn;
pub mod engine;
pub mod error_log;
pub mod handover;
pub mod htpasswd;
pub mod http2;
pub mod limits;
pub mod listeners;
pub mod metrics;
pub mod offload;
pub mod open_files;
pub mod per_ip;
pub mod privileges;
pub mod reaper;
pub mod reply;
pub mod resolve;
pub mod room;
pub mod server;
pub mod service_records;
pub mod shared;
pub mod site;
pub mod spool;
pub mod static_io;
pub mod sys;
pub mod tls;
pub mod values;
pub mod worker;

pub use config::Config;
pub use server::Server;
