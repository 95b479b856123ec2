//! `[http2]`: which forms of HTTP/2 the server speaks, and the limits of a
//! session. `tls.rs` reads `protocols` for the ALPN list it offers; the
//! connection (`conn/h2.rs`) reads the rest, lent by every worker like
//! `[limits]`.
//!
//! The defences against the 2023–2024 HTTP/2 attacks are the h2 crate's,
//! bounded here: rapid reset (CVE-2023-44487) by `max_pending_resets` and
//! `max_error_resets`, the CONTINUATION flood and the HPACK bomb by
//! `max_header_list_size` (the decoded list, however it is split into
//! frames), the streams one client may hold by `max_concurrent_streams`.

use serde::Deserialize;

pub use crate::listeners::Protocol;
use crate::values::{first_broken, Bytes};

/// `[http2]`: HTTP/2 beside HTTP/1.1.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http2 {
    /// The forms of HTTP/2 spoken besides HTTP/1.1: `"h2"` (HTTPS
    /// addresses offer it by ALPN before `http/1.1`) and `"h2c"` (a plain
    /// address answers a connection that starts with the HTTP/2 preface in
    /// HTTP/2). CGI, FastCGI and proxied locations are relayed on their
    /// streams as over HTTP/1.1; a WebSocket tunnel is not (RFC 8441 is
    /// not spoken). A `server.listen` or `tls.listen` entry with its own
    /// `protocols` speaks those instead. Default `[]` (HTTP/1.1 only).
    pub protocols: Vec<Protocol>,
    /// Whether an address that speaks h2c also answers an HTTP/1.1 request
    /// asking for `Upgrade: h2c` (RFC 7540 §3.2; one without a body) with
    /// `101` and goes on in HTTP/2. Browsers never ask; `curl --http2` on
    /// an `http://` URL does. Default false.
    pub upgrade: bool,
    /// Streams a client may have open at once on one connection
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`); more are refused. Default 128.
    pub max_concurrent_streams: u32,
    /// Largest request header list, decoded (`SETTINGS_MAX_HEADER_LIST_SIZE`:
    /// HPACK bombs and CONTINUATION floods end here). Default `"16KiB"`.
    pub max_header_list_size: Bytes,
    /// A stream's receive window: request body bytes a client may send
    /// ahead of the server reading them. Default `"256KiB"`.
    pub window: Bytes,
    /// The connection's receive window, over all its streams. Default
    /// `"1MiB"`.
    pub connection_window: Bytes,
    /// Streams a client opened and reset before the server saw them
    /// (rapid reset, CVE-2023-44487) held at once; past it the connection
    /// ends with `GOAWAY` (`ENHANCE_YOUR_CALM`). Default 20.
    pub max_pending_resets: usize,
    /// Streams the server reset for a client's errors on one connection;
    /// past it the connection ends with `GOAWAY`. Default 1024.
    pub max_error_resets: usize,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            protocols: Vec::new(),
            upgrade: false,
            max_concurrent_streams: 128,
            max_header_list_size: Bytes(16 * 1024),
            window: Bytes(256 * 1024),
            connection_window: Bytes(1024 * 1024),
            max_pending_resets: 20,
            max_error_resets: 1024,
        }
    }
}

/// The largest window HTTP/2 can announce (RFC 9113 §6.9.1).
const MAX_WINDOW: u64 = (1 << 31) - 1;

impl Http2 {
    /// The first rule of `[http2]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (self.max_concurrent_streams == 0, "max_concurrent_streams", "must be at least 1"),
            (self.max_header_list_size.0 > u64::from(u32::MAX), "max_header_list_size", "must be below 4GiB"),
            (self.window.0 > MAX_WINDOW, "window", "must be below 2GiB"),
            (self.connection_window.0 > MAX_WINDOW, "connection_window", "must be below 2GiB"),
            (self.connection_window.0 < self.window.0, "connection_window", "must be at least http2.window"),
        ])
    }

    /// Whether it speaks `protocol`.
    pub fn speaks(&self, protocol: Protocol) -> bool {
        self.protocols.contains(&protocol)
    }
}
