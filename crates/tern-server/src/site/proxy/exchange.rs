//! One request's exchange with an upstream group, driven by readiness like
//! a FastCGI exchange: choose a server, take a pooled connection (or wait
//! for one), connect, write the request head and body, read the response
//! head, relay the body in the client's framing, and give the connection
//! back when the response ended cleanly.
//!
//! Memory stays bounded both ways: a request body comes from its spool a
//! window at a time, and the connection reads the response only while its
//! output queue has room (the relay stops pumping when it is full), so a
//! slow client slows the upstream through TCP rather than filling memory.
//!
//! A failure is retried on another server only when no byte of the
//! response reached the client and either the method is idempotent or no
//! byte of the request reached the failed server — so no request an
//! application could see twice is sent twice. A kept-alive connection
//! found closed when reused is retried on a fresh one under the same rule.

use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use tern_http::chunked::{Chunk, ChunkedDecoder};
use tern_http::request::Limits;
use tern_http::response::field;
use tern_http::response_head::{parse_response, Framing, Parsed, RequestKind};
use tern_http::{Method, Request};

use super::group::Group;
use super::headers::{self, Client};
use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::reply::Params;
use crate::site::cgi::{Pump, Response};
use crate::site::upstream::hold::{Advance, Hold, Kept, Untaken};
use crate::site::upstream::tls;
use crate::spool::Spool;
use crate::sys;
use crate::worker::{Doorbell, Wait, Worker};

/// Most bytes of a response head (larger: 502).
const MAX_HEAD: usize = 64 * 1024;
/// Most fields in a response head.
const MAX_FIELDS: usize = 128;

/// What a complete response head leads to.
enum Next {
    /// An interim response: the final one follows.
    Interim,
    /// A `101`: bytes both ways from now on.
    Tunnel,
    /// The final response, its body framed so.
    Body(Framing),
}

/// Where the exchange is, once its connection is open.
enum Stage {
    /// Writing the request, reading the response.
    Talking,
    /// After `101 Switching Protocols`: bytes both ways, as they come.
    Tunnel,
    Ended,
}

/// How the rest of the response body is read.
enum Reading {
    Head,
    /// This many bytes remain.
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the server closes.
    Close,
}

/// The request body, sent after the head.
enum Body {
    None,
    Memory(Vec<u8>),
    /// A spooled body, read a window at a time.
    File {
        file: File,
        len: u64,
        pos: u64,
        window: Vec<u8>,
        size: usize,
    },
}

/// What starting an exchange needs besides the request.
pub struct Launch<'a> {
    pub group: Arc<Group>,
    /// The `Host` the upstream gets.
    pub host: &'a [u8],
    pub body: Spool,
    /// The most of a spooled body held in memory at once.
    pub window: usize,
    pub peer: std::net::IpAddr,
    pub https: bool,
    /// The client asks to switch protocols (`Upgrade`, `Connection:
    /// upgrade`): the fields go up, and a `101` opens a tunnel.
    pub upgrade: bool,
    pub doorbell: Option<&'a Arc<Doorbell>>,
}

pub struct Exchange {
    group: Arc<Group>,
    /// The server this try goes to, and every server tried.
    server: usize,
    tried: Vec<usize>,
    /// The connection to it (or the wait for one).
    hold: Hold,
    stage: Stage,
    /// The request head, and how much of head and body was written.
    head: Vec<u8>,
    body: Body,
    body_len: u64,
    sent: u64,
    idempotent: bool,
    head_request: bool,
    upgrade: bool,
    input: Vec<u8>,
    reading: Reading,
    pub response: Response,
    /// A byte of the response came on the current connection.
    received: bool,
    /// `out.written` when nothing but this response (and only since then)
    /// was queued for the client: while it has not moved, none of the
    /// response has reached the client, and a failure is still answered
    /// `502` in its place (the queue cleared) rather than cut short.
    unsent_since: Option<u64>,
    upstream_keep_alive: bool,
    reusable: bool,
    /// Start of the current wait, and of the whole exchange.
    since: Instant,
    started: Instant,
    request_line: String,
}

impl Exchange {
    /// Chooses a server and takes a connection to it for `req`. `Err`: the
    /// status to answer at once.
    pub fn start(req: &Request<'_>, l: Launch<'_>) -> Result<Exchange, u16> {
        let trusted = headers::trusted(l.peer, &l.group.trusted);
        let body_len = l.body.len();
        let client = Client {
            peer: l.peer,
            https: l.https,
            trusted,
            host: l.host,
            body: (body_len > 0 || req.has_body()).then_some(body_len),
            upgrade: l.upgrade,
        };
        let mut head = Vec::with_capacity(512 + req.head_len);
        headers::request_head(req, &client, &mut head);
        let body = match (l.body.file, body_len) {
            (_, 0) => Body::None,
            (Some(file), len) => Body::File { file, len, pos: 0, window: Vec::new(), size: l.window.max(4096) },
            (None, _) => Body::Memory(l.body.mem),
        };
        let now = Instant::now();
        let mut tried = Vec::new();
        let first = l.group.choose(req, l.peer, &[], now).ok_or(502u16)?;
        let next = |tried: &[usize]| l.group.choose(req, l.peer, tried, now);
        let (server, hold, kept) = connect(&l.group, first, &mut tried, l.doorbell, now, next)?;
        Ok(Exchange {
            group: l.group,
            server,
            tried,
            hold,
            stage: Stage::Talking,
            head,
            body,
            body_len,
            sent: 0,
            idempotent: matches!(req.method, Method::Get | Method::Head | Method::Options)
                || matches!(req.method_token, "PUT" | "DELETE" | "TRACE"),
            head_request: req.method == Method::Head,
            upgrade: l.upgrade,
            input: kept.map(|k| k.buf).unwrap_or_default(),
            reading: Reading::Head,
            response: Response::new(req, false),
            received: false,
            unsent_since: None,
            upstream_keep_alive: false,
            reusable: false,
            since: now,
            started: now,
            request_line: req.request_line.to_string(),
        })
    }

    /// Registers what this exchange waits on as connection `key`'s backend
    /// descriptor.
    pub fn watch(&mut self, key: usize, w: &Worker<'_>) -> io::Result<()> {
        self.hold.watch(key, w)
    }

    /// The descriptor [`Exchange::watch`] registers now.
    pub fn watched(&self) -> Option<BorrowedFd<'_>> {
        self.hold.watched()
    }

    pub fn wait(&self) -> Option<(BorrowedFd<'_>, Wait)> {
        self.hold.wait(self.tunnel() || self.writing())
    }

    pub fn on_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        self.hold.on_ready(readable, writable, closed);
    }

    pub fn ready(&self) -> bool {
        let h = &self.hold;
        if !h.is_open() {
            return h.can_advance();
        }
        match self.stage {
            Stage::Talking => h.may_read || (h.may_write && self.writing()),
            Stage::Tunnel => h.may_read,
            Stage::Ended => false,
        }
    }

    /// Whether the exchange became a tunnel: the client's bytes go up
    /// through [`Exchange::upload`].
    pub fn tunnel(&self) -> bool {
        matches!(self.stage, Stage::Tunnel)
    }

    /// In a tunnel: sends what the client sent; returns how much the
    /// server took (0: none now, the exchange waits for room).
    pub fn upload(&mut self, data: &[u8], w: &Worker<'_>) -> io::Result<usize> {
        if !self.hold.may_write || data.is_empty() {
            return Ok(0);
        }
        match send_on(&mut self.hold, data) {
            Ok(n) => {
                self.since = w.now;
                Ok(n)
            }
            Err(e) if sys::would_block(&e) => {
                self.hold.wait_for_room(w)?;
                Ok(0)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Whether the tunnel can take client bytes now.
    pub fn can_upload(&self) -> bool {
        self.tunnel() && self.hold.may_write
    }

    /// The client closed its side of a tunnel: so does the server's.
    pub fn client_closed(&mut self) {
        if let Some(fd) = self.hold.fd() {
            let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Write);
        }
    }

    /// Moves the exchange on, relaying response bytes into `out`.
    pub fn pump(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        if !self.response.head_sent() && out.queued() == 0 {
            self.unsent_since = Some(out.written);
        } else if self.unsent_since != Some(out.written) {
            self.unsent_since = None;
        }
        if !self.hold.is_open() {
            return match self.hold.advance(w, self.group.servers[self.server].tls.as_ref()) {
                Ok(Advance::Wait) => Pump::Wait,
                Ok(Advance::Taken(kept)) => {
                    if let Some(k) = kept {
                        self.input = k.buf;
                    }
                    self.since = w.now;
                    Pump::Progress
                }
                Ok(Advance::Connected) => {
                    self.since = w.now;
                    Pump::Progress
                }
                Err(e) => {
                    log!(Level::Warn, "upstream {}: cannot connect: {e}", self.group.name);
                    self.failed(w, "connect", true)
                }
            };
        }
        match self.stage {
            Stage::Talking => self.talk(out, params, chunk, w),
            Stage::Tunnel => self.tunnel_down(out, chunk, w),
            Stage::Ended => Pump::Wait,
        }
    }

    /// Whether request bytes remain to be written.
    fn writing(&self) -> bool {
        self.sent < self.head.len() as u64 + self.body_len || self.hold.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    fn talk(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        if self.hold.may_write && self.writing() {
            let pending = match pending(&self.head, &mut self.body, self.sent) {
                Ok(bytes) => bytes,
                Err(e) => {
                    log!(Level::Error, "cannot read a spooled request body: {e}");
                    return Pump::Fail(500);
                }
            };
            match send_on(&mut self.hold, pending) {
                Ok(n) => {
                    self.sent += n as u64;
                    self.since = w.now;
                }
                Err(e) if sys::would_block(&e) => {
                    if let Err(e) = self.hold.wait_for_room(w) {
                        log!(Level::Error, "cannot watch an upstream connection: {e}");
                        return Pump::Fail(502);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.broken(w, &e),
            }
            return Pump::Progress;
        }
        if !self.hold.may_read {
            return Pump::Wait;
        }
        if self.input.capacity() - self.input.len() < 4096 {
            self.input.reserve(chunk.max(4096));
        }
        let spare = self.input.capacity() - self.input.len();
        match recv_on(&mut self.hold, &mut self.input) {
            Ok(0) => return self.ended_by_server(out, w),
            Ok(n) => {
                self.received = true;
                self.since = w.now;
                // A short read drained a plain socket, unless its end was
                // reported with the bytes (edge-triggered: no other edge
                // will say so); a TLS session may have read only part of
                // what waits (it stops at a record).
                if n < spare && self.hold.tls.is_none() && !self.hold.hung_up {
                    self.hold.may_read = false;
                }
            }
            Err(e) if sys::would_block(&e) => {
                self.hold.may_read = false;
                return Pump::Wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Pump::Progress,
            Err(e) => return self.broken(w, &e),
        }
        self.relay(out, params, w)
    }

    /// Relays what `input` holds: the head when it is complete, then body.
    fn relay(&mut self, out: &mut OutQueue, params: &Params<'_>, w: &Worker<'_>) -> Pump {
        loop {
            match &mut self.reading {
                Reading::Head => {
                    if let Some(p) = self.on_head(out, params, w) {
                        return p;
                    }
                }
                Reading::Length(0) => return self.complete(out, w),
                Reading::Length(left) => {
                    if self.input.is_empty() {
                        return Pump::Progress;
                    }
                    let n = (self.input.len() as u64).min(*left) as usize;
                    *left -= n as u64;
                    let pump = self.response.feed(out, params, &self.input[..n]);
                    self.input.drain(..n);
                    if !matches!(pump, Pump::Progress) {
                        return pump;
                    }
                }
                Reading::Chunked(decoder) => {
                    let (n, chunk) = match decoder.decode(&self.input) {
                        Ok(decoded) => decoded,
                        Err(e) => return self.refused(w, e.0),
                    };
                    match chunk {
                        Chunk::Data(data) => {
                            let pump = self.response.feed(out, params, data);
                            if !matches!(pump, Pump::Progress) {
                                return pump;
                            }
                            self.input.drain(..n);
                        }
                        Chunk::NeedMore => {
                            self.input.drain(..n);
                            return Pump::Progress;
                        }
                        Chunk::Done => {
                            self.input.drain(..n);
                            return self.complete(out, w);
                        }
                    }
                }
                Reading::Close => {
                    if self.input.is_empty() {
                        return Pump::Progress;
                    }
                    let pump = self.response.feed(out, params, &self.input);
                    self.input.clear();
                    return pump;
                }
            }
        }
    }

    /// Reads the response head once it is complete: an interim one is
    /// passed over (`100`) or relayed (`103`), a `101` to an upgrade opens
    /// the tunnel, a final one starts the client's response. `Some`: what to
    /// return now; `None`: go on with what follows the head.
    fn on_head(&mut self, out: &mut OutQueue, params: &Params<'_>, w: &Worker<'_>) -> Option<Pump> {
        let limits = Limits { max_request_line: 8 * 1024, max_head_bytes: MAX_HEAD, max_headers: MAX_FIELDS };
        let kind = match (self.head_request, self.upgrade) {
            (true, _) => RequestKind::Head,
            (false, true) => RequestKind::Upgrade,
            (false, false) => RequestKind::Plain,
        };
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        // What the head decides, taken while it borrows the input.
        let (len, next) = match parse_response(&self.input, &limits, &mut fields, kind) {
            Ok(Parsed::Partial) => return Some(Pump::Progress),
            Err(e) => return Some(self.refused(w, e.reason())),
            Ok(Parsed::Complete(head)) => {
                let connection = headers::connection_tokens(head.values("connection"));
                let relayed = |name: &[u8], upgrading: bool| {
                    !(headers::hop_by_hop(name, &connection) && !(upgrading && name.eq_ignore_ascii_case(b"upgrade")))
                        && !name.eq_ignore_ascii_case(b"content-length")
                };
                let next = if head.framing == Framing::Tunnel {
                    out.buf.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
                    for h in head.headers.iter().filter(|h| relayed(h.name.as_bytes(), true)) {
                        field(&mut out.buf, h.name.as_bytes(), h.value);
                    }
                    out.buf.extend_from_slice(b"Connection: upgrade\r\n\r\n");
                    Next::Tunnel
                } else if head.is_interim() {
                    if head.status == 103 && !params.http10 {
                        out.buf.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\n");
                        for h in head.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("link")) {
                            field(&mut out.buf, h.name.as_bytes(), h.value);
                        }
                        out.buf.extend_from_slice(b"\r\n");
                        out.commit_buf();
                    }
                    Next::Interim
                } else {
                    self.upstream_keep_alive = head.keep_alive;
                    let kept = head.headers.iter().map(|h| (h.name.as_bytes(), h.value)).filter(|(name, _)| {
                        relayed(name, false)
                            && !name.eq_ignore_ascii_case(b"date")
                            && !name.eq_ignore_ascii_case(b"server")
                    });
                    // A HEAD's answer keeps the length it announces.
                    let announced =
                        head.values("content-length").next().and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
                    let length = match head.framing {
                        Framing::Length(n) => Some(n),
                        Framing::None | Framing::Tunnel => Some(announced.unwrap_or(0)),
                        Framing::Chunked | Framing::Close => None,
                    };
                    self.response.start(out, params, head.status, kept, length);
                    out.commit_buf();
                    Next::Body(head.framing)
                };
                (head.head_len, next)
            }
        };
        self.input.drain(..len);
        match next {
            Next::Interim => None,
            Next::Tunnel => {
                out.buf.extend_from_slice(&self.input);
                self.input.clear();
                out.commit_buf();
                self.response.status = 101;
                self.stage = Stage::Tunnel;
                self.group.servers[self.server].health.succeeded();
                self.since = w.now;
                Some(Pump::Progress)
            }
            Next::Body(framing) => {
                self.reading = match framing {
                    Framing::None | Framing::Tunnel => Reading::Length(0),
                    Framing::Length(n) => Reading::Length(n),
                    Framing::Chunked => Reading::Chunked(ChunkedDecoder::new()),
                    Framing::Close => Reading::Close,
                };
                None
            }
        }
    }

    /// In a tunnel: what the server sent goes to the client as it is.
    fn tunnel_down(&mut self, out: &mut OutQueue, chunk: usize, w: &Worker<'_>) -> Pump {
        if !self.hold.may_read {
            return Pump::Wait;
        }
        let at = out.buf.len();
        out.buf.reserve(chunk.max(4096));
        let spare = out.buf.capacity() - at;
        match recv_on(&mut self.hold, &mut out.buf) {
            Ok(0) => {
                self.stage = Stage::Ended;
                Pump::Done { keep_alive: false }
            }
            Ok(n) => {
                self.since = w.now;
                self.response.body_bytes += n as u64;
                // A short read drained a plain socket, unless its end was
                // reported with the bytes (edge-triggered: no other edge
                // will say so); a TLS session may have read only part of
                // what waits (it stops at a record).
                if n < spare && self.hold.tls.is_none() && !self.hold.hung_up {
                    self.hold.may_read = false;
                }
                out.commit_buf();
                Pump::Progress
            }
            Err(e) if sys::would_block(&e) => {
                self.hold.may_read = false;
                Pump::Wait
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Pump::Progress,
            Err(_) => {
                self.stage = Stage::Ended;
                Pump::Done { keep_alive: false }
            }
        }
    }

    /// The response ended as framed: the server did well, and its
    /// connection goes back when nothing else came on it. A chunked one's
    /// trailer fields go on as the client's framing allows, but those no
    /// trailer may carry.
    fn complete(&mut self, out: &mut OutQueue, w: &Worker<'_>) -> Pump {
        self.stage = Stage::Ended;
        self.reusable = self.upstream_keep_alive && self.input.is_empty() && !self.hold.hung_up;
        self.group.servers[self.server].health.succeeded();
        let _ = w;
        let trailers: Vec<_> = match &self.reading {
            Reading::Chunked(decoder) => {
                decoder.trailers().filter(|(name, _)| headers::trailer_relayed(name)).collect()
            }
            _ => Vec::new(),
        };
        self.response.end_with_trailers(out, &trailers)
    }

    /// The server closed the connection.
    fn ended_by_server(&mut self, out: &mut OutQueue, w: &Worker<'_>) -> Pump {
        match self.reading {
            Reading::Close => {
                self.upstream_keep_alive = false;
                self.complete(out, w)
            }
            _ => self.broken(w, &io::ErrorKind::UnexpectedEof.into()),
        }
    }

    /// The server's response is not one to relay: nothing more of it goes
    /// out, the connection is closed, and the server counts a failure.
    fn refused(&mut self, w: &Worker<'_>, why: &str) -> Pump {
        log!(
            Level::Warn,
            "upstream {}: {} sent {why} (answering {:?})",
            self.group.name,
            self.group.servers[self.server].address,
            self.request_line
        );
        self.failed(w, why, true)
    }

    /// The connection failed before the response ended.
    fn broken(&mut self, w: &Worker<'_>, err: &io::Error) -> Pump {
        // A kept-alive connection the server closed between requests:
        // again on a fresh one (under the retry rule).
        if self.hold.reused && !self.received && self.may_retry() {
            self.hold.pool().stats.retried.fetch_add(1, Relaxed);
            self.restart_body();
            self.input.clear();
            return match self.hold.reopen(w, self.group.servers[self.server].tls.as_ref()) {
                Ok(()) => Pump::Progress,
                Err(e) => {
                    log!(Level::Warn, "upstream {}: cannot connect: {e}", self.group.name);
                    self.failed(w, "connect", true)
                }
            };
        }
        log!(
            Level::Warn,
            "upstream {}: connection to {} lost answering {:?}: {err}",
            self.group.name,
            self.group.servers[self.server].address,
            self.request_line
        );
        self.failed(w, "lost", true)
    }

    /// May this request go to a server again? Not once any of the response
    /// reached the client; and only when the method is idempotent or no
    /// byte of the request reached the server.
    fn may_retry(&self) -> bool {
        !self.response.head_sent() && (self.idempotent || self.sent == 0)
    }

    /// Counts a failure against the current server, which marks it down
    /// when it has failed often enough.
    fn count_failure(&self, now: Instant, why: &str) {
        count_failure(&self.group, self.server, now, why);
    }

    /// A try failed: counted against its server, then another server under
    /// the retry rule, else `502` (or a cut response once part of it
    /// reached the client).
    fn failed(&mut self, w: &Worker<'_>, why: &str, close: bool) -> Pump {
        self.count_failure(w.now, why);
        self.hold.pool().stats.failed.fetch_add(1, Relaxed);
        if close {
            self.hold.close();
        }
        let budget = self.tried.len() <= self.group.retries
            && w.now.saturating_duration_since(self.started) <= self.group.retry_within;
        if budget && self.may_retry() {
            // The request is not at hand any more: the choice is the
            // balancer's order without a key.
            let group = self.group.clone();
            let next = |tried: &[usize]| {
                (0..group.servers.len()).find(|i| !tried.contains(i) && group.servers[*i].health.usable(w.now))
            };
            if let Some(server) = next(&self.tried) {
                self.hold.close();
                self.restart_body();
                self.reading = Reading::Head;
                self.input.clear();
                if let Ok((server, hold, kept)) =
                    connect(&group, server, &mut self.tried, w.watcher.doorbell(), w.now, next)
                {
                    self.server = server;
                    self.received = false;
                    if let Some(k) = kept {
                        self.input = k.buf;
                    }
                    self.since = w.now;
                    return match self.hold.replace(hold, w) {
                        Ok(()) => Pump::Progress,
                        Err(e) => {
                            log!(Level::Error, "cannot watch an upstream connection: {e}");
                            Pump::Fail(502)
                        }
                    };
                }
            }
        }
        self.stage = Stage::Ended;
        if self.response.head_sent() && self.unsent_since.is_none() {
            return self.response.abandon();
        }
        Pump::Fail(502)
    }

    /// The request from its first byte again.
    fn restart_body(&mut self) {
        self.sent = 0;
        if let Body::File { pos, window, .. } = &mut self.body {
            *pos = 0;
            window.clear();
        }
    }

    /// The status to answer when the current wait has lasted too long. A
    /// connection not made in time fails its server as a refused one does:
    /// another server may take the request (then `None`, the exchange
    /// ready to go on).
    pub fn expired(&mut self, now: Instant, client_blocked: bool, w: &Worker<'_>) -> Option<u16> {
        let t = self.group.timeouts;
        if t.total.is_some_and(|total| now.saturating_duration_since(self.started) > total) {
            return Some(504);
        }
        if matches!(self.stage, Stage::Ended) {
            return None;
        }
        let open = self.hold.is_open();
        if client_blocked && open {
            self.since = now;
            return None;
        }
        let waited = now.saturating_duration_since(self.since);
        let (limit, status) = if self.hold.is_queued() {
            (t.queue, 503)
        } else if !open {
            (t.connect, 502)
        } else if matches!(self.stage, Stage::Talking) && self.writing() {
            (t.send, 504)
        } else {
            // Reading; an idle tunnel ends too (its response is out: the
            // connection closes).
            (t.read, 504)
        };
        if waited <= limit {
            return None;
        }
        let server = &self.group.servers[self.server];
        if self.hold.is_connecting() {
            log!(Level::Warn, "upstream {}: no connection to {} within {limit:?}", self.group.name, server.address);
            return match self.failed(w, "connect timeout", true) {
                Pump::Fail(status) => Some(status),
                _ => None,
            };
        }
        let counter = if status == 503 { &server.pool.stats.queue_timeouts } else { &server.pool.stats.timeouts };
        counter.fetch_add(1, Relaxed);
        if status != 503 {
            self.count_failure(now, "timeout");
        }
        log!(Level::Warn, "upstream {}: {status} after {limit:?} answering {:?}", self.group.name, self.request_line);
        Some(status)
    }

    /// Ends the exchange: a connection whose response ended cleanly goes
    /// back to its pool (unless `close`); anything else is closed.
    pub fn end(&mut self, w: &Worker<'_>, close: bool) {
        if !close && self.reusable {
            self.hold.give_back(w, std::mem::take(&mut self.input), 0);
        }
    }
}

/// Takes a connection to `server` of `group` (added to `tried`); a server
/// whose connection cannot even be started (a Unix socket that is not
/// there fails at once, before any readiness) fails, and the server `next`
/// names is tried instead while the retry budget lasts. `Err`: the status
/// to answer.
fn connect(
    group: &Group,
    mut server: usize,
    tried: &mut Vec<usize>,
    doorbell: Option<&Arc<Doorbell>>,
    now: Instant,
    next: impl Fn(&[usize]) -> Option<usize>,
) -> Result<(usize, Hold, Option<Kept>), u16> {
    loop {
        tried.push(server);
        let s = &group.servers[server];
        match Hold::take(s.pool.clone(), doorbell, s.tls.as_ref()) {
            Ok((hold, kept)) => return Ok((server, hold, kept)),
            Err(Untaken::Full(e)) => {
                log!(Level::Error, "upstream {}: no connection for now: {e}", group.name);
                return Err(503);
            }
            Err(Untaken::Queue(e)) => {
                log!(Level::Error, "upstream {}: cannot wait for a connection: {e}", group.name);
                return Err(500);
            }
            Err(Untaken::Connect(e)) => {
                log!(Level::Warn, "upstream {}: cannot connect to {}: {e}", group.name, s.address);
                s.pool.stats.failed.fetch_add(1, Relaxed);
                count_failure(group, server, now, "connect");
            }
        }
        server = next(tried).filter(|_| tried.len() <= group.retries).ok_or(502u16)?;
    }
}

/// Counts a failure against a server, which marks it down when it has
/// failed often enough.
fn count_failure(group: &Group, server: usize, now: Instant, why: &str) {
    let s = &group.servers[server];
    if s.health.failed(now) {
        log!(Level::Warn, "upstream {}: server {} marked down ({why})", group.name, s.address);
    }
}

/// Sends `data` on `fd`, through its TLS session when it has one: how
/// much was taken (`WouldBlock` when nothing could be).
fn send_on(hold: &mut Hold, data: &[u8]) -> io::Result<usize> {
    let (fd, tls) = hold.parts().ok_or(io::ErrorKind::NotConnected)?;
    match tls {
        None => rustix::net::send(fd, data, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from),
        Some(t) if data.is_empty() => match tls::flush(t, fd)? {
            true => Ok(0),
            false => Err(io::ErrorKind::WouldBlock.into()),
        },
        Some(t) => match tls::send(t, fd, data)? {
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        },
    }
}

/// Reads from `fd` into `buf`'s spare room, through its TLS session when
/// it has one.
fn recv_on(hold: &mut Hold, buf: &mut Vec<u8>) -> io::Result<usize> {
    let (fd, tls) = hold.parts().ok_or(io::ErrorKind::NotConnected)?;
    match tls {
        None => sys::read_into(fd, buf),
        Some(t) => tls::recv(t, fd, buf),
    }
}

/// The request bytes to write next, `sent` bytes in (a spooled body's
/// next window is read when the last one is out).
fn pending<'a>(head: &'a [u8], body: &'a mut Body, sent: u64) -> io::Result<&'a [u8]> {
    let head_len = head.len() as u64;
    if sent < head_len {
        return Ok(&head[sent as usize..]);
    }
    let at = sent - head_len;
    match body {
        Body::None => Ok(&[]),
        Body::Memory(bytes) => Ok(&bytes[at as usize..]),
        Body::File { file, len, pos, window, size } => {
            if at == *pos {
                let n = (*len - *pos).min(*size as u64) as usize;
                window.resize(n, 0);
                file.read_exact_at(window, *pos)?;
                *pos += n as u64;
            }
            let start = window.len() - (*pos - at) as usize;
            Ok(&window[start..])
        }
    }
}
