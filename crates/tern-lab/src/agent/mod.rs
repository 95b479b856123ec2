//! `tern agent`: a gRPC service (tonic; the .proto is compiled by protox in
//! build.rs, no protoc) that runs tern's built-in probes and load on another
//! host, and nothing else.
//!
//! - [`server`]: the agent. Every call must carry the shared token
//!   (`authorization: Bearer TOKEN`); anything else is refused.
//! - [`client`]: the master's side, synchronous, with a deadline on every
//!   call and errors that name the agent.
//! - [`distributed`]: `tern bench --agent A --agent B`: the same load from
//!   several agents at a coordinated start, histograms merged exactly.
//!
//! tokio lives here, in the lab's control plane only; the server core never
//! sees it.

pub mod client;
pub mod distributed;
pub mod server;

use std::time::Duration;

/// The generated messages and service stubs.
pub mod proto {
    tonic::include_proto!("tern.agent");
}

/// A connection to an agent not made within this long fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A small call (null, fetch, lazy piece) not answered within this long fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Probes and load runs get their expected length plus this much.
pub const SLACK: Duration = Duration::from_secs(30);
/// HTTP/2 pings on idle connections: an agent that vanished (no reset, host
/// down) is noticed within interval + timeout even during a long call.
pub const KEEPALIVE: Duration = Duration::from_secs(2);

/// Reads a token file: its first line, trimmed. An empty token is refused.
pub fn read_token(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read the token file {}: {e}", path.display())))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the token file {} is empty", path.display()),
        ));
    }
    Ok(token)
}

/// What a load run on an agent does: parse `tern bench` arguments and run
/// them, returning the report as JSON. Given by the CLI, which owns the
/// arguments' syntax.
pub type BenchRunner = std::sync::Arc<dyn Fn(Vec<String>) -> Result<String, String> + Send + Sync>;
