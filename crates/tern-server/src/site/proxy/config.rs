//! `[upstream.NAME]`: a group of HTTP servers a location's `proxy` sends
//! requests to (the section, its defaults and its rules; `site/proxy/`
//! runs it).

use std::time::Duration;

use serde::Deserialize;

use crate::site::upstream::address::Address;
use crate::values::{first_broken, Network, NonZero, Seconds};

/// `[upstream.NAME]`: HTTP/1.1 servers behind a location's `proxy`, reached
/// over pooled kept-alive connections (the pool FastCGI backends use),
/// balanced, watched for failures, and retried only where a request cannot
/// reach an application twice.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The servers, e.g. `[{ address = "127.0.0.1:9000" }, { address =
    /// "unix:/run/app.sock", weight = 2 }]`. Required (at least one).
    pub servers: Vec<UpstreamServer>,
    /// How a server is chosen: `"round-robin"` (weighted), `"least-connections"`
    /// (fewest requests in flight, weighted) or `"hash"` (by `hash`: a key
    /// keeps its server while the servers stay; one that leaves moves only
    /// its own keys). Default `"round-robin"`.
    #[serde(default)]
    pub balance: Balance,
    /// The key of `balance = "hash"`: `"client"` (the client's address),
    /// `"uri"` (path and query) or `"header:NAME"`. Default `"client"`.
    #[serde(default = "client")]
    pub hash: String,
    /// A request finding every server's connections busy waits this long
    /// for one, then `503`. Default `"5s"`.
    #[serde(default = "five_seconds")]
    pub queue_timeout: Seconds,
    /// A connection not made within this is a failure (`502`, or another
    /// server under the retry rule). Default `"2s"`.
    #[serde(default = "two_seconds")]
    pub connect_timeout: Seconds,
    /// The request not taken by the server within this (no byte of it
    /// accepted): `504`. Default `"30s"`.
    #[serde(default = "thirty_seconds")]
    pub send_timeout: Seconds,
    /// The server silent this long while the response is awaited or read:
    /// `504`. Default `"60s"`.
    #[serde(default = "sixty_seconds")]
    pub read_timeout: Seconds,
    /// The whole exchange, from the first try to the last response byte;
    /// 0 for no limit. Default 0.
    #[serde(default = "no_limit")]
    pub total_timeout: Seconds,
    /// Other servers tried after a failure — only when no byte of the
    /// response reached the client, and the method is idempotent or no byte
    /// of the request reached the failed server. Default 1.
    #[serde(default = "one")]
    pub retries: usize,
    /// No retry starts later than this after the first try. Default `"10s"`.
    #[serde(default = "ten_seconds")]
    pub retry_within: Seconds,
    /// Passive health: this many failures (refused, reset, timed out, a
    /// malformed response) within `fail_window` mark a server down. Default 3.
    #[serde(default = "three")]
    pub fail_after: NonZero,
    /// See `fail_after`. Default `"10s"`.
    #[serde(default = "ten_seconds")]
    pub fail_window: Seconds,
    /// A server marked down gets no request for this long, then one trial
    /// request: up again if it succeeds. Default `"10s"`.
    #[serde(default = "ten_seconds")]
    pub down_for: Seconds,
    /// An active check, e.g. `{ path = "/healthz", interval = "2s" }`: a
    /// server that fails it is down until it passes. Default: none.
    #[serde(default)]
    pub check: Option<Check>,
    /// Client addresses (proxies in front of tern) whose `X-Forwarded-For`,
    /// `X-Forwarded-Proto`, `X-Forwarded-Host` and `Forwarded` are kept and
    /// extended; from any other client they are replaced. Default `[]`.
    #[serde(default)]
    pub trusted_proxies: Vec<Network>,
}

/// One `servers` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamServer {
    /// `"IP:PORT"` or `"unix:/absolute/path"`. Required.
    pub address: Address,
    /// Its share of requests. Default 1.
    #[serde(default = "one_nonzero")]
    pub weight: NonZero,
    /// Connections open to it at once; past every server's cap a request
    /// waits (`queue_timeout`). Default 64.
    #[serde(default = "sixty_four")]
    pub max_connections: NonZero,
    /// Speak HTTPS to it (rustls; the session stays with its pooled
    /// connection). Default false.
    #[serde(default)]
    pub tls: bool,
    /// With `tls`: the name sent as SNI and checked against its
    /// certificate. Default: its IP address.
    #[serde(default)]
    pub tls_name: Option<String>,
    /// With `tls`: the CA certificates (PEM) its certificate is checked
    /// against, relative to the config file's directory. Default: the
    /// system's (`/etc/ssl/certs/ca-certificates.crt`).
    #[serde(default)]
    pub ca: Option<std::path::PathBuf>,
    /// With `tls`: false accepts any certificate (a lab's self-signed
    /// one). Default true.
    #[serde(default = "yes")]
    pub verify: bool,
}

fn yes() -> bool {
    true
}

/// `balance`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    #[default]
    RoundRobin,
    LeastConnections,
    Hash,
}

/// `check`: an active health check.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The path asked with `GET`. Required.
    pub path: String,
    /// How often. Default `"5s"`.
    #[serde(default = "five_seconds")]
    pub interval: Seconds,
    /// The status a healthy server answers. Default 200.
    #[serde(default = "ok")]
    pub expect: u16,
    /// An answer slower than this fails the check. Default `"2s"`.
    #[serde(default = "two_seconds")]
    pub timeout: Seconds,
}

impl Upstream {
    /// The rules a value's type alone cannot express: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        let hash_ok = matches!(self.hash.as_str(), "client" | "uri")
            || self
                .hash
                .strip_prefix("header:")
                .is_some_and(|h| !h.is_empty() && h.bytes().all(tern_http::request::is_tchar));
        first_broken([
            (self.servers.is_empty(), "servers", "needs at least one server"),
            (!hash_ok, "hash", "must be \"client\", \"uri\" or \"header:NAME\""),
            (self.check.as_ref().is_some_and(|c| !c.path.starts_with('/')), "check", "its path must start with /"),
            (
                self.check.as_ref().is_some_and(|c| c.interval.0 < Duration::from_millis(100)),
                "check",
                "its interval must be at least \"100ms\"",
            ),
        ])
    }
}

fn client() -> String {
    "client".into()
}
fn one() -> usize {
    1
}
fn one_nonzero() -> NonZero {
    NonZero(1)
}
fn three() -> NonZero {
    NonZero(3)
}
fn sixty_four() -> NonZero {
    NonZero(64)
}
fn ok() -> u16 {
    200
}
fn no_limit() -> Seconds {
    Seconds(Duration::ZERO)
}
fn two_seconds() -> Seconds {
    Seconds(Duration::from_secs(2))
}
fn five_seconds() -> Seconds {
    Seconds(Duration::from_secs(5))
}
fn ten_seconds() -> Seconds {
    Seconds(Duration::from_secs(10))
}
fn thirty_seconds() -> Seconds {
    Seconds(Duration::from_secs(30))
}
fn sixty_seconds() -> Seconds {
    Seconds(Duration::from_secs(60))
}
