//! How a master reaches its agents: the shared token, the CA that signed
//! their certificates, and the agent a probe run measures against.

use std::io;
use std::path::Path;

/// Reads a token file: its first line, trimmed. An empty token is refused.
pub fn read_token(path: &Path) -> io::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read the token file {}: {e}", path.display())))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the token file {} is empty", path.display())));
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
    pub fn read(token_file: &Path, ca_file: Option<&Path>) -> io::Result<Access> {
        Ok(Access {
            token: read_token(token_file)?,
            ca_pem: ca_file.map(|f| read_pem(f, "CA certificate")).transpose()?,
        })
    }
}

/// Reads a PEM file (`what` names it in errors); one without a PEM block
/// is refused here rather than by a handshake later.
pub fn read_pem(path: &Path, what: &str) -> io::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read the {what} {}: {e}", path.display())))?;
    if !text.contains("-----BEGIN ") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the {what} {} is not PEM (no -----BEGIN line)", path.display()),
        ));
    }
    Ok(text)
}

/// An agent to measure against.
#[derive(Debug, Clone)]
pub struct Remote {
    /// HOST:PORT.
    pub addr: String,
    pub access: Access,
}
