//! Where a backend listens, as configured: the one address form FastCGI
//! backends and HTTP upstreams share.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::de::{self, Deserializer};
use serde::Deserialize;

/// Where a backend listens — a FastCGI application, an HTTP upstream:
/// `"unix:/absolute/path"` (a Unix socket) or `"IP:PORT"`. No host
/// names: where the server connects must not depend on DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.strip_prefix("unix:") {
            Some(path) if path.starts_with('/') => Ok(Address::Unix(path.into())),
            Some(_) => Err(de::Error::custom(format!("`{s}`: a Unix socket needs an absolute path"))),
            None => s
                .parse()
                .map(Address::Tcp)
                .map_err(|_| de::Error::custom(format!("`{s}` is neither `unix:/path` nor `IP:PORT`"))),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
            Address::Tcp(addr) => write!(f, "{addr}"),
        }
    }
}
