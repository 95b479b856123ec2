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
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use tern_http::chunked::{Chunk, ChunkedDecoder};
use tern_http::request::Limits;
use tern_http::response_head::{parse_response, Framing, Parsed, RequestKind};
use tern_http::{Method, Request};

use super::group::Group;
use super::headers::{self, Client};
use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::reply::Params;
use crate::site::cgi::{Pump, Response};
use crate::site::upstream::pool::{Checkout, Grant, Link, Ticket};
use crate::site::upstream::tls;
use crate::spool::Spool;
use crate::sys;
use crate::worker::{Doorbell, Wait, Worker};
use rustls::ClientConnection;

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

enum Stage {
    /// Waiting in the chosen server's pool queue.
    Queued(Arc<Ticket>),
    Connecting,
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
    stage: Stage,
    link: Option<OwnedFd>,
    /// The link's TLS session, for an HTTPS server.
    tls: Option<Box<ClientConnection>>,
    registered: bool,
    watched_for_room: bool,
    hung_up: bool,
    place: Option<usize>,
    reused: bool,
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
    may_read: bool,
    may_write: bool,
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
    key: usize,
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
        let mut x = Exchange {
            group: l.group,
            server: 0,
            tried: Vec::new(),
            stage: Stage::Ended,
            link: None,
            tls: None,
            registered: false,
            watched_for_room: false,
            hung_up: false,
            place: None,
            reused: false,
            head,
            body,
            body_len,
            sent: 0,
            idempotent: matches!(req.method, Method::Get | Method::Head | Method::Options)
                || matches!(req.method_token, "PUT" | "DELETE" | "TRACE"),
            head_request: req.method == Method::Head,
            upgrade: l.upgrade,
            input: Vec::new(),
            reading: Reading::Head,
            response: Response::new(req, false),
            may_read: false,
            may_write: false,
            received: false,
            unsent_since: None,
            upstream_keep_alive: false,
            reusable: false,
            since: now,
            started: now,
            key: 0,
            request_line: req.request_line.to_string(),
        };
        let server = x.group.choose(req, l.peer, &[], now).ok_or(502u16)?;
        x.take_connection(server, l.doorbell, now, |x| x.group.choose(req, l.peer, &x.tried, now))?;
        Ok(x)
    }

    /// Takes a connection to `server`; one that cannot even be started (a
    /// Unix socket that is not there fails at once, before any readiness)
    /// is a failure of that server, and the server `next` names is tried
    /// instead while the retry budget lasts.
    fn take_connection(
        &mut self,
        mut server: usize,
        doorbell: Option<&Arc<Doorbell>>,
        now: Instant,
        next: impl Fn(&Exchange) -> Option<usize>,
    ) -> Result<(), u16> {
        loop {
            match self.checkout(server, doorbell) {
                Err(502) => self.count_failure(now, "connect"),
                done => return done,
            }
            match next(self).filter(|_| self.tried.len() <= self.group.retries) {
                Some(n) => {
                    self.release_server();
                    server = n;
                }
                None => return Err(502),
            }
        }
    }

    /// Takes a connection to `server`: an idle one, a place to open one, or
    /// a place in its queue. `Err(502)`: a connection could not be started.
    fn checkout(&mut self, server: usize, doorbell: Option<&Arc<Doorbell>>) -> Result<(), u16> {
        self.server = server;
        self.tried.push(server);
        self.group.servers[server].active.fetch_add(1, Relaxed);
        let pool = &self.group.servers[server].pool;
        match pool.checkout(doorbell) {
            Ok(Checkout::Idle(link)) => self.adopt(link),
            Ok(Checkout::Connect(id)) => {
                self.place = Some(id);
                self.open()?;
            }
            Ok(Checkout::Wait(ticket)) => self.stage = Stage::Queued(ticket),
            Err(e) => {
                log!(Level::Error, "upstream {}: cannot wait for a connection: {e}", self.group.name);
                return Err(500);
            }
        }
        Ok(())
    }

    fn adopt(&mut self, link: Link) {
        let pool = &self.group.servers[self.server].pool;
        pool.stats.reused.fetch_add(1, Relaxed);
        self.link = Some(link.fd);
        self.tls = link.tls;
        self.registered = link.home.is_some();
        self.input = link.buf;
        self.place = Some(link.id);
        self.reused = true;
        self.hung_up = false;
        self.stage = Stage::Talking;
        self.may_write = true;
    }

    /// Opens a connection in the place this exchange holds.
    fn open(&mut self) -> Result<(), u16> {
        self.reused = false;
        self.received = false;
        self.registered = false;
        self.hung_up = false;
        let server = &self.group.servers[self.server];
        let pool = &server.pool;
        let session = server.tls.as_ref().map(|c| c.session()).transpose();
        match session.and_then(|tls| pool.connect().map(|c| (c, tls))) {
            Ok(((fd, connected), tls)) => {
                self.link = Some(fd);
                self.tls = tls;
                self.stage = if connected { Stage::Talking } else { Stage::Connecting };
                self.may_write = connected;
                Ok(())
            }
            Err(e) => {
                log!(Level::Warn, "upstream {}: cannot connect to {}: {e}", self.group.name, pool.address());
                if let Some(id) = self.place.take() {
                    pool.release(id);
                }
                pool.stats.failed.fetch_add(1, Relaxed);
                Err(502)
            }
        }
    }

    /// Registers what this exchange waits on as connection `key`'s backend
    /// descriptor.
    pub fn watch(&mut self, key: usize, w: &Worker<'_>) -> io::Result<()> {
        self.key = key;
        self.may_read = false;
        match (&self.stage, &self.link) {
            (Stage::Queued(t), _) => match t.fd() {
                Some(fd) => w.watcher.watch(key, fd),
                None => {
                    self.may_read = t.ring_for(key);
                    Ok(())
                }
            },
            (stage, Some(fd)) => {
                let write = matches!(stage, Stage::Connecting);
                let id = self.place.expect("a link without its place");
                self.may_read = w.watcher.watch_link(key, id, fd.as_fd(), write, self.registered)?;
                self.registered = true;
                self.watched_for_room = write;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub fn wait(&self) -> Option<(std::os::fd::BorrowedFd<'_>, Wait)> {
        let (fd, wait) = match (&self.stage, &self.link) {
            (Stage::Queued(t), _) => (t.fd()?, Wait { read: !self.may_read, write: false }),
            (Stage::Connecting, Some(fd)) => (fd.as_fd(), Wait { read: false, write: !self.may_write }),
            (Stage::Talking, Some(fd)) => {
                (fd.as_fd(), Wait { read: !self.may_read, write: !self.may_write && self.writing() })
            }
            (Stage::Tunnel, Some(fd)) => (fd.as_fd(), Wait { read: !self.may_read, write: !self.may_write }),
            _ => return None,
        };
        wait.any().then_some((fd, wait))
    }

    pub fn on_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        self.may_read |= readable || closed;
        self.may_write |= writable;
        self.hung_up |= closed;
    }

    pub fn ready(&self) -> bool {
        match self.stage {
            Stage::Queued(_) => self.may_read,
            Stage::Connecting => self.may_write,
            Stage::Talking => self.may_read || (self.may_write && self.writing()),
            Stage::Tunnel => self.may_read,
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
        let Some(fd) = self.link.as_ref() else { return Err(io::ErrorKind::NotConnected.into()) };
        if !self.may_write || data.is_empty() {
            return Ok(0);
        }
        match send_on(&mut self.tls, fd, data) {
            Ok(n) => {
                self.since = w.now;
                Ok(n)
            }
            Err(e) if sys::would_block(&e) => {
                self.may_write = false;
                if !self.watched_for_room {
                    let id = self.place.expect("a link without its place");
                    w.watcher.watch_link(self.key, id, fd.as_fd(), true, true)?;
                    self.watched_for_room = true;
                }
                Ok(0)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Whether the tunnel can take client bytes now.
    pub fn can_upload(&self) -> bool {
        self.tunnel() && self.may_write
    }

    /// The client closed its side of a tunnel: so does the server's.
    pub fn client_closed(&mut self) {
        if let Some(fd) = &self.link {
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
        match &self.stage {
            Stage::Queued(ticket) => {
                let Some(grant) = ticket.take() else {
                    self.may_read = false;
                    return Pump::Wait;
                };
                self.stage = Stage::Talking;
                match grant {
                    Grant::Idle(link) => self.adopt(link),
                    Grant::Permit(id) => {
                        self.place = Some(id);
                        if self.open().is_err() {
                            return self.failed(w, "connect", false);
                        }
                    }
                }
                self.since = w.now;
                self.rewatch(w)
            }
            Stage::Connecting => {
                if !self.may_write {
                    return Pump::Wait;
                }
                let fd = self.link.as_ref().expect("connecting without a socket");
                match socket2::SockRef::from(fd).take_error() {
                    Ok(None) => {
                        self.stage = Stage::Talking;
                        self.since = w.now;
                        Pump::Progress
                    }
                    Ok(Some(e)) | Err(e) => {
                        log!(Level::Warn, "upstream {}: cannot connect: {e}", self.group.name);
                        self.failed(w, "connect", false)
                    }
                }
            }
            Stage::Talking => self.talk(out, params, chunk, w),
            Stage::Tunnel => self.tunnel_down(out, chunk, w),
            Stage::Ended => Pump::Wait,
        }
    }

    fn rewatch(&mut self, w: &Worker<'_>) -> Pump {
        match self.watch(self.key, w) {
            Ok(()) => {
                self.may_write = matches!(self.stage, Stage::Talking);
                Pump::Progress
            }
            Err(e) => {
                log!(Level::Error, "cannot watch an upstream connection: {e}");
                Pump::Fail(502)
            }
        }
    }

    /// Whether request bytes remain to be written.
    fn writing(&self) -> bool {
        self.sent < self.head.len() as u64 + self.body_len || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    fn talk(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        let fd = self.link.as_ref().expect("talking without a socket");
        if self.may_write && self.writing() {
            let pending = match pending(&self.head, &mut self.body, self.sent) {
                Ok(bytes) => bytes,
                Err(e) => {
                    log!(Level::Error, "cannot read a spooled request body: {e}");
                    return Pump::Fail(500);
                }
            };
            match send_on(&mut self.tls, fd, pending) {
                Ok(n) => {
                    self.sent += n as u64;
                    self.since = w.now;
                }
                Err(e) if sys::would_block(&e) => {
                    self.may_write = false;
                    if !self.watched_for_room {
                        let id = self.place.expect("a link without its place");
                        if let Err(e) = w.watcher.watch_link(self.key, id, fd.as_fd(), true, true) {
                            log!(Level::Error, "cannot watch an upstream connection: {e}");
                            return Pump::Fail(502);
                        }
                        self.watched_for_room = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.broken(w, &e),
            }
            return Pump::Progress;
        }
        if !self.may_read {
            return Pump::Wait;
        }
        if self.input.capacity() - self.input.len() < 4096 {
            self.input.reserve(chunk.max(4096));
        }
        let spare = self.input.capacity() - self.input.len();
        match recv_on(&mut self.tls, fd, &mut self.input) {
            Ok(0) => return self.ended_by_server(out, w),
            Ok(n) => {
                self.received = true;
                self.since = w.now;
                // A short read drained a plain socket, unless its end was
                // reported with the bytes (edge-triggered: no other edge
                // will say so); a TLS session may have read only part of
                // what waits (it stops at a record).
                if n < spare && self.tls.is_none() && !self.hung_up {
                    self.may_read = false;
                }
            }
            Err(e) if sys::would_block(&e) => {
                self.may_read = false;
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
        if !self.may_read {
            return Pump::Wait;
        }
        let fd = self.link.as_ref().expect("a tunnel without a socket");
        let at = out.buf.len();
        out.buf.reserve(chunk.max(4096));
        let spare = out.buf.capacity() - at;
        match recv_on(&mut self.tls, fd, &mut out.buf) {
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
                if n < spare && self.tls.is_none() && !self.hung_up {
                    self.may_read = false;
                }
                out.commit_buf();
                Pump::Progress
            }
            Err(e) if sys::would_block(&e) => {
                self.may_read = false;
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
    /// connection goes back when nothing else came on it.
    fn complete(&mut self, out: &mut OutQueue, w: &Worker<'_>) -> Pump {
        self.stage = Stage::Ended;
        self.reusable = self.upstream_keep_alive && self.input.is_empty() && !self.hung_up;
        self.group.servers[self.server].health.succeeded();
        let _ = w;
        self.response.end(out)
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
        if self.reused && !self.received && self.may_retry() {
            self.drop_link();
            self.group.servers[self.server].pool.stats.retried.fetch_add(1, Relaxed);
            self.restart_body();
            let pool = &self.group.servers[self.server].pool;
            return match pool.checkout(w.watcher.doorbell()) {
                Ok(Checkout::Connect(id)) => {
                    self.place = Some(id);
                    match self.open() {
                        Ok(()) => self.rewatch(w),
                        Err(_) => self.failed(w, "connect", false),
                    }
                }
                Ok(Checkout::Idle(link)) => {
                    self.adopt(link);
                    self.rewatch(w)
                }
                Ok(Checkout::Wait(ticket)) => {
                    self.stage = Stage::Queued(ticket);
                    self.rewatch(w)
                }
                Err(_) => Pump::Fail(502),
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
        let server = &self.group.servers[self.server];
        if server.health.failed(now) {
            log!(Level::Warn, "upstream {}: server {} marked down ({why})", self.group.name, server.address);
        }
    }

    /// A try failed: counted against its server, then another server under
    /// the retry rule, else `502` (or a cut response once part of it
    /// reached the client).
    fn failed(&mut self, w: &Worker<'_>, why: &str, close: bool) -> Pump {
        self.count_failure(w.now, why);
        if close {
            self.drop_link();
        }
        let budget = self.tried.len() <= self.group.retries
            && w.now.saturating_duration_since(self.started) <= self.group.retry_within;
        if budget && self.may_retry() {
            // The request is not at hand any more: the choice is the
            // balancer's order without a key.
            let next = |x: &Exchange| {
                (0..x.group.servers.len()).find(|i| !x.tried.contains(i) && x.group.servers[*i].health.usable(w.now))
            };
            if let Some(server) = next(self) {
                self.release_server();
                self.restart_body();
                self.reading = Reading::Head;
                self.input.clear();
                if self.take_connection(server, w.watcher.doorbell(), w.now, next).is_ok() {
                    self.since = w.now;
                    return self.rewatch(w);
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

    /// Closes the current connection; its place goes back to its pool.
    fn drop_link(&mut self) {
        self.link = None;
        self.tls = None;
        self.registered = false;
        self.watched_for_room = false;
        if let Some(id) = self.place.take() {
            self.group.servers[self.server].pool.release(id);
        }
    }

    /// This exchange no longer counts against its server.
    fn release_server(&mut self) {
        self.drop_link();
        if let Stage::Queued(ticket) = &self.stage {
            self.group.servers[self.server].pool.cancel(ticket);
        }
        self.group.servers[self.server].active.fetch_sub(1, Relaxed);
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
        if client_blocked && matches!(self.stage, Stage::Talking | Stage::Tunnel) {
            self.since = now;
            return None;
        }
        let waited = now.saturating_duration_since(self.since);
        let (limit, status) = match self.stage {
            Stage::Queued(_) => (t.queue, 503),
            Stage::Connecting => (t.connect, 502),
            Stage::Talking if self.writing() => (t.send, 504),
            Stage::Talking => (t.read, 504),
            // An idle tunnel ends (its response is out: the connection
            // closes).
            Stage::Tunnel => (t.read, 504),
            Stage::Ended => return None,
        };
        if waited <= limit {
            return None;
        }
        let server = &self.group.servers[self.server];
        if let Stage::Connecting = self.stage {
            server.pool.stats.failed.fetch_add(1, Relaxed);
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
        if close || !self.reusable || self.hung_up {
            return;
        }
        let Some(fd) = self.link.take() else { return };
        let id = self.place.take().expect("a link without its place");
        let buf = std::mem::take(&mut self.input);
        let pool = &self.group.servers[self.server].pool;
        let home = w.watcher.doorbell().filter(|_| self.registered && !self.watched_for_room).cloned();
        if home.is_some() {
            w.watcher.leave_link(id);
        } else if self.registered {
            let _ = w.watcher.unwatch(fd.as_fd());
        }
        if let Some(link) = pool.give_back(Link { id, fd, buf, home, owed: 0, tls: self.tls.take() }) {
            let _ = w.watcher.unwatch(link.fd.as_fd());
            pool.put_back(Link { home: None, ..link });
        }
    }
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Sends `data` on `fd`, through its TLS session when it has one: how
/// much was taken (`WouldBlock` when nothing could be).
fn send_on(tls: &mut Option<Box<ClientConnection>>, fd: &OwnedFd, data: &[u8]) -> io::Result<usize> {
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
fn recv_on(tls: &mut Option<Box<ClientConnection>>, fd: &OwnedFd, buf: &mut Vec<u8>) -> io::Result<usize> {
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

impl Drop for Exchange {
    fn drop(&mut self) {
        if !self.tried.is_empty() {
            self.release_server();
        }
    }
}
