//! The access logs, in Combined Log Format or as JSON lines, buffered per
//! worker: the server's, and a site's own where it sets `[site.log]`.
//!
//! Each worker formats lines into its own buffer and writes it with one
//! `write(2)` when it fills or once a second; the file is opened `O_APPEND`,
//! so whole buffers from different workers never interleave within a line.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::Arc;

use serde::Deserialize;

use crate::error_log::Level;
use crate::values::Bytes;

/// `[log]`: where the logs go: the access log, the service records and the
/// error log.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Log {
    /// Access log: a path, `"-"` for stdout, or `"off"`. Default `"-"`.
    pub access: String,
    /// How access lines are written: `"combined"` (Apache's Combined Log
    /// Format) or `"json"` (one JSON object per line: time, site, client,
    /// request, status, bytes, referer, user agent). Default `"combined"`.
    pub access_format: AccessFormat,
    /// Access log bytes buffered per worker before a write; the buffer is
    /// also flushed every second and at exit. Default `"64KiB"`.
    pub access_buffer: Bytes,
    /// Per-request service records (CSV rows: accept, start and end
    /// times, status, bytes; see `service_records.rs`): a path or `"off"`; buffered per worker like the access log (by
    /// `access_buffer`). Default `"off"`.
    pub service_records: String,
    /// Error log: a path or `"-"` for stderr. Default `"-"`.
    pub error: String,
    /// Least severe level written: error, warn, info, debug. Default `"warn"`.
    pub level: Level,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            access: "-".into(),
            access_format: AccessFormat::Combined,
            access_buffer: Bytes(64 * 1024),
            service_records: "off".into(),
            error: "-".into(),
            level: Level::Warn,
        }
    }
}

impl Log {
    /// The keys a `[[site]]` may set in `[site.log]`: where its requests
    /// are logged.
    pub const SITE_KEYS: &'static [&'static str] = &["access", "access_format"];
}

/// `log.access_format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessFormat {
    Combined,
    Json,
}

/// Where access lines go: nowhere, or a shared append-only file, and in
/// which format.
#[derive(Clone)]
pub struct AccessTarget(Option<Arc<File>>, AccessFormat);

impl AccessTarget {
    /// `"off"`, `"-"` (standard output) or a path.
    pub fn open(spec: &str, format: AccessFormat) -> io::Result<AccessTarget> {
        let file = match spec {
            "off" => None,
            "-" => Some(Arc::new(File::from(io::stdout().as_fd().try_clone_to_owned()?))),
            path => Some(Arc::new(OpenOptions::new().create(true).append(true).open(path)?)),
        };
        Ok(AccessTarget(file, format))
    }
}

/// One worker's buffer.
pub struct AccessLog {
    target: Option<Arc<File>>,
    format: AccessFormat,
    buf: Vec<u8>,
    capacity: usize,
}

/// The fields of one line.
pub struct Entry<'a> {
    pub client: IpAddr,
    /// `10/Oct/2000:13:55:36 +0000`.
    pub time: &'a [u8],
    pub request_line: &'a [u8],
    pub status: u16,
    pub bytes: u64,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    /// The site that answered (`""` before routing: a request that could
    /// not be read).
    pub site: &'a str,
    /// Seconds since the epoch (the JSON line's time).
    pub epoch: u64,
}

impl AccessLog {
    pub fn new(target: &AccessTarget, capacity: usize) -> AccessLog {
        let capacity = capacity.max(1);
        AccessLog { target: target.0.clone(), format: target.1, buf: Vec::new(), capacity }
    }

    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Appends one line; writes the buffer out when it is full.
    pub fn record(&mut self, e: &Entry<'_>) {
        if self.target.is_none() {
            return;
        }
        match self.format {
            AccessFormat::Combined => self.combined(e),
            AccessFormat::Json => self.json(e),
        }
        if self.buf.len() >= self.capacity {
            self.flush();
        }
    }

    /// One JSON object; byte strings that are not UTF-8 are kept lossily.
    fn json(&mut self, e: &Entry<'_>) {
        fn text(v: Option<&[u8]>) -> Option<std::borrow::Cow<'_, str>> {
            v.map(String::from_utf8_lossy)
        }
        let line = serde_json::json!({
            "time": std::str::from_utf8(&tern_http::date::format_rfc3339(e.epoch)).unwrap_or_default(),
            "site": e.site,
            "client": e.client.to_string(),
            "request": String::from_utf8_lossy(e.request_line),
            "status": e.status,
            "bytes": e.bytes,
            "referer": text(e.referer),
            "user_agent": text(e.user_agent),
        });
        let _ = serde_json::to_writer(&mut self.buf, &line);
        self.buf.push(b'\n');
    }

    fn combined(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        let _ = write!(b, "{} - - [", e.client);
        b.extend_from_slice(e.time);
        b.extend_from_slice(b"] \"");
        escape(b, e.request_line);
        b.extend_from_slice(b"\" ");
        b.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
        b.push(b' ');
        if e.bytes == 0 {
            b.push(b'-');
        } else {
            b.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
        }
        for field in [e.referer, e.user_agent] {
            b.extend_from_slice(b" \"");
            match field {
                Some(v) => escape(b, v),
                None => b.push(b'-'),
            }
            b.push(b'"');
        }
        b.push(b'\n');
    }

    /// Writes out whatever is buffered.
    pub fn flush(&mut self) {
        if let (Some(file), false) = (&self.target, self.buf.is_empty()) {
            if let Err(err) = (&**file).write_all(&self.buf) {
                crate::error_log::log!(crate::error_log::Level::Error, "access log write failed: {err}");
            }
            self.buf.clear();
        }
    }
}

/// Escapes as Apache does: `"` and `\` with a backslash, other bytes
/// outside printable ASCII as `\xHH`, so a request cannot forge a line.
fn escape(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0x20..=0x7e => out.push(b),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[b'\\', b'x', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_format_with_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let target = AccessTarget::open(path.to_str().unwrap(), AccessFormat::Combined).unwrap();
        let mut log = AccessLog::new(&target, 1 << 20);
        log.record(&Entry {
            client: "127.0.0.1".parse().unwrap(),
            time: b"10/Oct/2000:13:55:36 +0000",
            request_line: b"GET /a\"b HTTP/1.1",
            status: 200,
            bytes: 2326,
            referer: Some(b"http://x/"),
            user_agent: None,
            site: "a",
            epoch: 971186136,
        });
        log.record(&Entry {
            client: "::1".parse().unwrap(),
            time: b"10/Oct/2000:13:55:37 +0000",
            request_line: b"GET /\x1b HTTP/1.1",
            status: 304,
            bytes: 0,
            referer: None,
            user_agent: Some(b"curl/8"),
            site: "a",
            epoch: 971186137,
        });
        assert!(std::fs::read(&path).unwrap().is_empty(), "buffered until flushed");
        log.flush();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] \"GET /a\\\"b HTTP/1.1\" 200 2326 \"http://x/\" \"-\"\n\
             ::1 - - [10/Oct/2000:13:55:37 +0000] \"GET /\\x1b HTTP/1.1\" 304 - \"-\" \"curl/8\"\n"
        );
    }

    #[test]
    fn json_lines_name_the_site() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.json");
        let target = AccessTarget::open(path.to_str().unwrap(), AccessFormat::Json).unwrap();
        let mut log = AccessLog::new(&target, 1 << 20);
        log.record(&Entry {
            client: "127.0.0.1".parse().unwrap(),
            time: b"10/Oct/2000:13:55:36 +0000",
            request_line: b"GET /\"\xff HTTP/1.1",
            status: 404,
            bytes: 9,
            referer: None,
            user_agent: Some(b"curl/8"),
            site: "shop",
            epoch: 971186136,
        });
        log.flush();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"bytes\":9,\"client\":\"127.0.0.1\",\"referer\":null,\"request\":\"GET /\\\"\u{fffd} HTTP/1.1\",\
             \"site\":\"shop\",\"status\":404,\"time\":\"2000-10-10T13:55:36Z\",\"user_agent\":\"curl/8\"}\n"
        );
    }
}
