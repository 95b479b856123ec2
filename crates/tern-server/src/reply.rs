//! Building one response into a connection's output queue.
//!
//! Handlers say what to answer; `Reply` adds what every response carries
//! (`Server`, `Date`, `Content-Length`, the `Connection` decision), leaves
//! the body out for `HEAD`, and records the status and size for the log.

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
}

pub struct Reply<'q> {
    out: &'q mut OutQueue,
    date: [u8; 29],
    server: &'q str,
    fields: &'q [u8],
    head_only: bool,
    http10: bool,
    /// Whether the connection stays open after this response; a handler
    /// may clear it.
    pub keep_alive: bool,
    pub status: u16,
    /// The body size announced (what the access log records).
    pub body_len: u64,
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
        Reply { out, date: *date, server, fields, head_only, http10, keep_alive, status: 0, body_len: 0 }
    }

    pub fn with(out: &'q mut OutQueue, p: &Params<'q>) -> Self {
        Reply::new(out, p.date, p.server, p.fields, p.head_only, p.http10, p.keep_alive)
    }

    /// Starts the head: status line, `Server`, `Date`.
    pub fn head(&mut self, status: u16) {
        self.status = status;
        let buf = &mut self.out.buf;
        response::status_line(buf, status);
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
            Framing::Chunked if !self.http10 => {
                self.out.buf.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                self.end_head_unsized();
                Framing::Chunked
            }
            Framing::Chunked | Framing::Close => {
                self.keep_alive = false;
                self.end_head_unsized();
                Framing::Close
            }
        }
    }

    fn end_head_unsized(&mut self) {
        let buf = &mut self.out.buf;
        if !self.keep_alive {
            buf.extend_from_slice(b"Connection: close\r\n");
        } else if self.http10 {
            buf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        buf.extend_from_slice(b"\r\n");
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

    /// Ends the head with the status's small HTML page as body.
    pub fn page(&mut self, status: u16) {
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
