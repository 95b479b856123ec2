//! `[limits]` and `[timeouts]`: what a client may take of a connection —
//! sizes and counts, and time with a minimum data rate. `conn.rs` enforces
//! them; they live here, below it, because every worker lends them to the
//! connections it runs (`worker.rs`), the site reads a few (`max_ranges`,
//! `body_buffer`), and the start-up calibration (`calibrate.rs`) mirrors
//! the unsent bound a connection settles at.

use std::time::Duration;

use serde::Deserialize;

use crate::values::{first_broken, Bytes, Seconds};

/// `[limits]`: sizes and counts a client may use.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest request line (`414` past it). Default `"8KiB"`.
    pub max_request_line: Bytes,
    /// Largest request head (`431` past it). Default `"16KiB"`.
    pub max_header_bytes: Bytes,
    /// Most header fields (`431` past it, at most 128). Default 100.
    pub max_headers: usize,
    /// Largest request body (`413` past it). Default `"1MiB"`.
    pub max_body_bytes: Bytes,
    /// Request body bytes held in memory (and the most a FastCGI
    /// exchange buffers of one); a larger body waits in an unnamed
    /// temporary file in `$TMPDIR`. Default `"64KiB"`.
    pub body_buffer: Bytes,
    /// Requests on one keep-alive connection; 0 = unlimited. An HTTP/2
    /// connection that served as many streams says `GOAWAY` (`NO_ERROR`)
    /// and finishes those open. Default 10000.
    pub keepalive_requests: u64,
    /// Ranges in one `Range` before it is ignored. Default 16.
    pub max_ranges: usize,
    /// Open connections from one client address; past it a new one gets
    /// `503` and is closed (as nginx's `limit_conn`). 0 = no limit.
    /// Default 0.
    pub max_connections_per_ip: u32,
    /// Response bytes a connection may hold in the kernel written but not
    /// yet sent, beyond what is in flight to the client
    /// (`TCP_NOTSENT_LOWAT`): a client that reads slowly cannot make the
    /// server park megabytes of kernel memory for it, and a fast one is not
    /// held back (what is in flight, its window, is not capped). 0 = no
    /// bound (the kernel's `net.ipv4.tcp_notsent_lowat`). Default `"128KiB"`.
    /// This is the bound of a new connection and of a slow reader; a
    /// client that proves to read fast gets `fast_unsent_bytes`.
    pub unsent_bytes: Bytes,
    /// Response bytes a client must take (acknowledge) at
    /// `fast_reader_rate` or faster, measured from a moment the
    /// `unsent_bytes` bound held its connection back, before the bound of
    /// its connection becomes `fast_unsent_bytes`; 0 = never. With the
    /// small bound the kernel sends each piece from inside the server's
    /// write, and on a fast path it then also runs the receiver's side on
    /// the server's CPU; with the large one it sends as the client's
    /// acknowledgements arrive. A fast reader that stops reading can then
    /// leave up to `fast_unsent_bytes` beyond what is in flight (with 0,
    /// up to the kernel's send-buffer limit, the last field of
    /// `net.ipv4.tcp_wmem`) in the kernel until it is cut off: only a
    /// client that first read this much. Plain HTTP only: over TLS the
    /// client's CPU decrypts, and a connection keeps `unsent_bytes`.
    /// Default `"1MiB"`.
    pub fast_reader_bytes: Bytes,
    /// Bytes per second a fast reader takes; a connection whose client
    /// takes less while a response waits for it (checked about once a
    /// second) gets `unsent_bytes` back and must prove itself again.
    /// 0 = any rate. Default `"4MiB"`.
    pub fast_reader_rate: Bytes,
    /// The unsent bound of a fast reader's connection; 0 = no bound (the
    /// kernel's). Default 0.
    pub fast_unsent_bytes: Bytes,
}

impl Limits {
    /// The first rule of `[limits]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (self.unsent_bytes.0 > u64::from(u32::MAX), "unsent_bytes", "must be below 4GiB"),
            (self.fast_unsent_bytes.0 > u64::from(u32::MAX), "fast_unsent_bytes", "must be below 4GiB"),
            (
                self.max_headers == 0 || self.max_headers > tern_http::request::MAX_HEADERS,
                "max_headers",
                "must be between 1 and 128",
            ),
            (self.max_request_line.0 < 16, "max_request_line", "must be at least 16 bytes"),
            (
                self.max_header_bytes.0 < self.max_request_line.0,
                "max_header_bytes",
                "must be at least limits.max_request_line",
            ),
            (self.max_ranges == 0, "max_ranges", "must be at least 1"),
            (self.body_buffer.0 == 0, "body_buffer", "must be at least 1 byte"),
        ])
    }

    /// The unsent bound (`TCP_NOTSENT_LOWAT`, 0 = none) of a connection
    /// whose client reads as fast as it can: `fast_unsent_bytes` once it
    /// proved it, unless the bound is never raised.
    pub fn fast_reader_unsent(&self) -> u64 {
        if self.unsent_bytes.0 == 0 || self.fast_reader_bytes.0 == 0 {
            self.unsent_bytes.0
        } else {
            self.fast_unsent_bytes.0
        }
    }

    /// The unsent bound a connection that sends responses of `size` bytes
    /// to a client reading as fast as it can settles at: a response larger
    /// than `unsent_bytes` is held back by it, so the client proves itself
    /// and gets [`Limits::fast_reader_unsent`]; a smaller one never
    /// reaches the bound and keeps it.
    pub fn settled_unsent(&self, size: u64) -> u64 {
        if size > self.unsent_bytes.0 {
            self.fast_reader_unsent()
        } else {
            self.unsent_bytes.0
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: Bytes(8 * 1024),
            max_header_bytes: Bytes(16 * 1024),
            max_headers: 100,
            max_body_bytes: Bytes(1024 * 1024),
            body_buffer: Bytes(64 * 1024),
            keepalive_requests: 10_000,
            max_ranges: 16,
            max_connections_per_ip: 0,
            unsent_bytes: Bytes(128 * 1024),
            fast_reader_bytes: Bytes(1024 * 1024),
            fast_reader_rate: Bytes(4 * 1024 * 1024),
            fast_unsent_bytes: Bytes(0),
        }
    }
}

/// `[timeouts]`. The header, body and send phases each have a base time and
/// a minimum data rate (as Apache's mod_reqtimeout): the deadline is
/// `start + timeout + bytes / min_rate`, so a client that keeps up the rate
/// may take as long as its transfer needs, and a trickle is cut off.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Idle time allowed between keep-alive requests. Default `"15s"`.
    pub keepalive: Seconds,
    /// Time for a request head to arrive; more than 0. Default `"10s"`.
    pub header: Seconds,
    /// Bytes/s that extend `header`: 1 s more for every 500 bytes
    /// received at the default. Default 500.
    pub header_min_rate: u64,
    /// Time for a request body, extended as `header` is. Default `"10s"`.
    pub body: Seconds,
    /// Bytes/s that extend `body`. Default 500.
    pub body_min_rate: u64,
    /// Time for a response to be taken by a slow reader, extended as
    /// `header` is. Default `"10s"`.
    pub send: Seconds,
    /// Bytes/s that extend `send`. Default 500.
    pub send_min_rate: u64,
    /// After an error answer, how long to drain the client's input before
    /// closing (so the answer is not lost to a reset). Default `"2s"`.
    pub linger: Seconds,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = |n| Seconds(Duration::from_secs(n));
        Timeouts {
            keepalive: s(15),
            header: s(10),
            header_min_rate: 500,
            body: s(10),
            body_min_rate: 500,
            send: s(10),
            send_min_rate: 500,
            linger: s(2),
        }
    }
}

impl Timeouts {
    /// The first rule of `[timeouts]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([(self.header.0.is_zero(), "header", "must be more than 0")])
    }
}
