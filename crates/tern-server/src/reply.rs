//! Building one response into a connection's output queue.
//!
//! Handlers say what to answer; `Reply` adds what every response carries
//! (`Server`, `Date`, `Content-Length`, the `Connection` decision), leaves
//! the body out for `HEAD`, and records the status and size for the log.
//! A site's location may dress its responses ([`Dressing`]): header fields
//! set, added or removed, an expiry, its own pages for error statuses.

use std::sync::Arc;

use tern_http::response;

use crate::body::OutQueue;
use crate::open_files::OpenFile;
use crate::static_io::IoMethod;

/// How a response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    /// `Transfer-Encoding: chunked` (HTTP/1.1 only).
    Chunked,
    /// Until the connection closes.
    Close,
    /// By its HTTP/2 stream's end, the stream's `DATA` frames carrying it
    /// (a body of unknown length is neither chunked nor cut by a close).
    Stream,
}

/// What shapes every response on a connection, for code that builds a
/// response later than the request (a CGI program's output).
#[derive(Clone, Copy)]
pub struct Params<'a> {
    pub date: &'a [u8; 29],
    pub server: &'a str,
    /// Header lines every response on the connection carries (HSTS over
    /// HTTPS), each ending in CRLF.
    pub fields: &'a [u8],
    pub head_only: bool,
    pub http10: bool,
    pub keep_alive: bool,
    /// The response goes out on an HTTP/2 stream: its body is framed as
    /// [`Framing::Stream`], and no interim (`1xx`) head goes before it.
    pub stream: bool,
    /// The location's dressing, if it has one.
    pub dressing: Option<&'a Arc<Dressing>>,
}

/// What a location changes in every response it sends, prepared once from
/// its configuration. The framing fields (`Content-Length`,
/// `Transfer-Encoding`, `Connection`) are the server's and never changed.
#[derive(Debug, Default)]
pub struct Dressing {
    /// Lowercased names of the fields removed from a handler's head: those
    /// `remove`d and those `set` (an expiry replaces `Cache-Control` and
    /// `Expires` itself).
    pub removed: Vec<String>,
    /// Formatted `Name: value\r\n` lines appended (`set` and `add`).
    pub lines: Vec<u8>,
    /// `max-age` in seconds (`Cache-Control` and `Expires` are added).
    pub expires: Option<u64>,
    /// Pages sent for error statuses, with their `Content-Type`.
    pub pages: Vec<(u16, Box<str>, Arc<[u8]>)>,
}

/// `Cache-Control` or `Expires`: what an expiry replaces.
fn is_expiry(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"cache-control") || name.eq_ignore_ascii_case(b"expires")
}

impl Dressing {
    /// Does it change nothing?
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.lines.is_empty() && self.expires.is_none() && self.pages.is_empty()
    }

    /// Rewrites the header lines of `head` (from the end of its status line
    /// on): removes the fields it removes, then appends its own. An expiry
    /// dresses a response of `status` below 400 only (as nginx's
    /// `expires`): a cache must not keep an error for an hour.
    fn apply(&self, head: &mut Vec<u8>, from: usize, status: u16) {
        let expires = self.expires.filter(|_| status < 400);
        if !self.removed.is_empty() || expires.is_some() {
            let mut write = from;
            let mut read = from;
            while let Some(end) = head[read..].windows(2).position(|w| w == b"\r\n").map(|i| read + i + 2) {
                let name = head[read..end].split(|&b| b == b':').next().unwrap_or_default();
                let name = name.trim_ascii();
                let drop = (expires.is_some() && is_expiry(name))
                    || self.removed.iter().any(|r| r.as_bytes().eq_ignore_ascii_case(name));
                if !drop {
                    head.copy_within(read..end, write);
                    write += end - read;
                }
                read = end;
            }
            head.copy_within(read.., write);
            head.truncate(write + (head.len() - read));
        }
        head.extend_from_slice(&self.lines);
        if let Some(age) = expires {
            head.extend_from_slice(b"Cache-Control: max-age=");
            head.extend_from_slice(itoa::Buffer::new().format(age).as_bytes());
            head.extend_from_slice(b"\r\n");
            let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            response::header(head, "Expires", tern_http::date::format_http_date(at + age).as_bytes());
        }
    }

    fn page(&self, status: u16) -> Option<(&str, &[u8])> {
        self.pages.iter().find(|(s, _, _)| *s == status).map(|(_, ty, body)| (&**ty, &**body))
    }
}

pub struct Reply<'q> {
    out: &'q mut OutQueue,
    date: [u8; 29],
    server: &'q str,
    fields: &'q [u8],
    head_only: bool,
    http10: bool,
    /// On an HTTP/2 stream ([`Params::stream`]).
    stream: bool,
    /// Whether the connection stays open after this response; a handler
    /// may clear it.
    pub keep_alive: bool,
    pub status: u16,
    /// The body size announced (what the access log records).
    pub body_len: u64,
    /// The location's dressing, applied when the head ends.
    pub dressing: Option<&'q Arc<Dressing>>,
    /// The site that answers, once routing found it (its log and counters).
    pub site: Option<u32>,
    /// Where the current head's header lines start in the buffer.
    fields_at: usize,
}

impl<'q> Reply<'q> {
    pub fn new(
        out: &'q mut OutQueue,
        date: &[u8; 29],
        server: &'q str,
        fields: &'q [u8],
        head_only: bool,
        http10: bool,
        keep_alive: bool,
    ) -> Self {
        Reply {
            out,
            date: *date,
            server,
            fields,
            head_only,
            http10,
            stream: false,
            keep_alive,
            status: 0,
            body_len: 0,
            dressing: None,
            site: None,
            fields_at: 0,
        }
    }

    pub fn with(out: &'q mut OutQueue, p: &Params<'q>) -> Self {
        let mut reply = Reply::new(out, p.date, p.server, p.fields, p.head_only, p.http10, p.keep_alive);
        reply.dressing = p.dressing;
        reply.stream = p.stream;
        reply
    }

    /// Starts the head: status line, `Server`, `Date`.
    pub fn head(&mut self, status: u16) {
        self.status = status;
        let buf = &mut self.out.buf;
        response::status_line(buf, status);
        self.fields_at = buf.len();
        if !self.server.is_empty() {
            response::header(buf, "Server", self.server.as_bytes());
        }
        response::header(buf, "Date", &self.date);
        buf.extend_from_slice(self.fields);
    }

    pub fn header(&mut self, name: &str, value: &[u8]) {
        response::header(&mut self.out.buf, name, value);
    }

    /// Appends pre-formatted header lines (each ending in CRLF).
    pub fn raw(&mut self, lines: &[u8]) {
        self.out.buf.extend_from_slice(lines);
    }

    /// The buffer, for handlers that format header values in place.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.out.buf
    }

    /// Ends the head. `content_length` is omitted for statuses that have no
    /// content (1xx, 204, 304).
    pub fn end_head(&mut self, content_length: u64) {
        self.dress();
        let buf = &mut self.out.buf;
        let bodiless = self.status < 200 || self.status == 204 || self.status == 304;
        if !bodiless {
            response::header_u64(buf, "Content-Length", content_length);
            self.body_len = content_length;
        }
        if !self.keep_alive {
            buf.extend_from_slice(b"Connection: close\r\n");
        } else if self.http10 {
            buf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        buf.extend_from_slice(b"\r\n");
    }

    /// Ends the head of a response whose length may be unknown; returns the
    /// framing used (chunked needs HTTP/1.1; close-delimited ends the
    /// connection).
    pub fn end_head_framed(&mut self, framing: Framing) -> Framing {
        match framing {
            Framing::Length(n) => {
                self.end_head(n);
                framing
            }
            _ if self.stream => {
                self.end_head_unsized();
                Framing::Stream
            }
            Framing::Chunked if !self.http10 => {
                self.out.buf.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                self.end_head_unsized();
                Framing::Chunked
            }
            Framing::Chunked | Framing::Close | Framing::Stream => {
                self.keep_alive = false;
                self.end_head_unsized();
                Framing::Close
            }
        }
    }

    fn end_head_unsized(&mut self) {
        self.dress();
        let buf = &mut self.out.buf;
        if !self.keep_alive {
            buf.extend_from_slice(b"Connection: close\r\n");
        } else if self.http10 {
            buf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        buf.extend_from_slice(b"\r\n");
    }

    fn dress(&mut self) {
        if let Some(d) = self.dressing {
            d.apply(&mut self.out.buf, self.fields_at, self.status);
        }
    }

    /// Whether the body is sent (not for `HEAD`).
    pub fn sends_body(&self) -> bool {
        !self.head_only
    }

    /// Appends body bytes.
    pub fn body(&mut self, bytes: &[u8]) {
        if !self.head_only {
            self.out.buf.extend_from_slice(bytes);
        }
    }

    /// Queues a file region as body, sent with `method`.
    pub fn body_file(&mut self, file: &Arc<OpenFile>, offset: u64, len: u64, method: IoMethod) {
        if !self.head_only {
            self.out.push_file(file, offset, len, method);
        }
    }

    /// Queues a shared in-memory body (a cached compressed variant) without
    /// copying it.
    pub fn body_shared(&mut self, bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) {
        if !self.head_only {
            self.out.push_shared(bytes);
        }
    }

    /// A complete response with an in-memory body.
    pub fn bytes(&mut self, status: u16, content_type: &str, body: &[u8]) {
        self.head(status);
        self.header("Content-Type", content_type.as_bytes());
        self.end_head(body.len() as u64);
        self.body(body);
    }

    /// A small HTML error page.
    pub fn error(&mut self, status: u16) {
        self.head(status);
        self.page(status);
    }

    /// A redirect to `location`, with a small page.
    pub fn redirect(&mut self, status: u16, location: &[u8]) {
        self.head(status);
        self.header("Location", location);
        self.page(status);
    }

    /// Ends the head with the status's page as body: the location's own
    /// for an error status it has one for, else a small HTML page.
    pub fn page(&mut self, status: u16) {
        if let Some((content_type, body)) = self.dressing.and_then(|d| d.page(status)).filter(|_| status >= 400) {
            self.header("Content-Type", content_type.as_bytes());
            self.end_head(body.len() as u64);
            self.body(body);
            return;
        }
        self.header("Content-Type", b"text/html; charset=utf-8");
        self.end_head(response::error_page_len(status) as u64);
        if !self.head_only {
            response::error_page(&mut self.out.buf, status);
        }
    }

    /// Commits what was written to the queue.
    pub fn finish(&mut self) {
        self.out.commit_buf();
    }
}
