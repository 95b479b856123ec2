//! `tern agent`: a gRPC service (tonic; the .proto is compiled by protox in
//! build.rs, no protoc) that runs tern's built-in probes and load on another
//! host, and nothing else.
//!
//! - [`server`]: the agent. Every call must carry the shared token
//!   (`authorization: Bearer TOKEN`); anything else is refused. Given a
//!   certificate pair it speaks TLS only (rustls).
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

/// How the master reaches its agents.
#[derive(Debug, Clone)]
pub struct Access {
    /// The shared token, sent on every call.
    pub token: String,
    /// PEM of the CA that signed the agents' certificates. With it the master
    /// speaks TLS only and refuses an agent whose certificate it did not sign.
    pub ca_pem: Option<String>,
}

impl Access {
    /// The token from `token_file` and, when given, the CA from `ca_file`.
    pub fn read(token_file: &std::path::Path, ca_file: Option<&std::path::Path>) -> std::io::Result<Access> {
        Ok(Access {
            token: read_token(token_file)?,
            ca_pem: ca_file.map(|f| read_pem(f, "CA certificate")).transpose()?,
        })
    }
}

/// Reads a PEM file (`what` names it in errors); one without a PEM block
/// is refused here rather than by a handshake later.
pub fn read_pem(path: &std::path::Path, what: &str) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read the {what} {}: {e}", path.display())))?;
    if !text.contains("-----BEGIN ") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the {what} {} is not PEM (no -----BEGIN line)", path.display()),
        ));
    }
    Ok(text)
}

/// What a load run on an agent does: parse `tern bench` arguments and run
/// them, returning the report as JSON. Given by the CLI, which owns the
/// arguments' syntax.
pub type BenchRunner = std::sync::Arc<dyn Fn(Vec<String>) -> Result<String, String> + Send + Sync>;
