//! The connection: one state machine for every engine.
//!
//! An engine tells a connection that its socket may be readable or writable
//! (or that a second has passed); the connection reads, asks the HTTP crate
//! to parse, hands complete requests to the site, and writes the answers,
//! until the socket would block. It never waits: whoever drives it decides
//! how to wait (epoll here; `poll(2)` on one socket in a thread model).
//!
//! Readiness is edge-triggered, so the connection remembers whether the
//! socket may still have bytes (`may_read`) or room (`may_write`) and only
//! touches it when it needs to — a keep-alive request costs one `read` and
//! one `sendmsg`.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use tern_http::request::{parse_head, BodyFraming, Head, Request, Version, MAX_HEADERS};
use tern_http::Method;

use crate::access_log::Entry;
use crate::body::{Flushed, OutQueue};
use crate::config::Level;
use crate::metrics::TimeoutKind;
use crate::reply::Reply;
use crate::request_body::BodyReader;
use crate::sys;
use crate::worker::Worker;

/// Whether the engine should keep the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Open,
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for, or parsing, a request head.
    Head,
    /// Writing queued responses.
    Send,
    /// Reading and dropping the body of a request answered without it.
    Discard,
    /// After a final answer: output shut down, input drained until the
    /// peer closes, so a reset cannot destroy the answer in flight.
    Linger,
}

/// The clock a phase runs against (see `config::Timeouts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    Idle,
    Header,
    Body,
    Send,
    Linger,
}

struct Timer {
    clock: Clock,
    start: Instant,
    /// Bytes moved since `start`: each extends the deadline by
    /// `1 / min_rate` seconds.
    bytes: u64,
}

/// Responses gathered into one write while pipelined requests keep coming.
const MAX_GATHERED: u64 = 64 * 1024;

enum Fill {
    Got,
    Wait,
    Eof,
    Failed,
}

pub struct Conn {
    sock: TcpStream,
    peer: SocketAddr,
    rbuf: Vec<u8>,
    /// Start of the unprocessed part of `rbuf`.
    rpos: usize,
    out: OutQueue,
    phase: Phase,
    may_read: bool,
    may_write: bool,
    peer_closed: bool,
    /// Whether the connection stays open after the queued responses.
    keep_alive: bool,
    requests: u64,
    /// The body of the last request, still to be read and dropped.
    body: Option<BodyReader>,
    timer: Timer,
}

impl Conn {
    pub fn new(sock: TcpStream, peer: SocketAddr, w: &Worker<'_>) -> Conn {
        // Responses leave in whole writes; Nagle would only add latency to
        // a head sent ahead of a sendfile body.
        let _ = sock.set_nodelay(true);
        let st = &w.shared.config.static_files;
        Conn {
            sock,
            peer,
            rbuf: Vec::new(),
            rpos: 0,
            out: OutQueue::new(st.io, st.read_chunk.usize()),
            phase: Phase::Head,
            may_read: false,
            may_write: true,
            peer_closed: false,
            keep_alive: true,
            requests: 0,
            body: None,
            timer: Timer { clock: Clock::Header, start: w.now, bytes: 0 },
        }
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// The socket may have become readable and/or writable.
    pub fn on_ready(&mut self, w: &mut Worker<'_>, readable: bool, writable: bool) -> Status {
        self.may_read |= readable;
        self.may_write |= writable;
        self.drive(w)
    }

    fn set_clock(&mut self, clock: Clock, now: Instant) {
        self.timer = Timer { clock, start: now, bytes: 0 };
    }

    fn drive(&mut self, w: &mut Worker<'_>) -> Status {
        loop {
            match self.phase {
                Phase::Send => {
                    if !self.may_write {
                        return Status::Open;
                    }
                    let before = self.out.written;
                    let result = self.out.flush(self.sock.as_fd());
                    self.timer.bytes += self.out.written - before;
                    match result {
                        Ok(Flushed::All) => {
                            if let Some(status) = self.sent(w) {
                                return status;
                            }
                        }
                        Ok(Flushed::Blocked) => {
                            self.may_write = false;
                            return Status::Open;
                        }
                        Err(err) => {
                            crate::log!(Level::Debug, "{}: send failed: {err}", self.peer);
                            return Status::Closed;
                        }
                    }
                }
                Phase::Head => {
                    if self.rpos < self.rbuf.len() {
                        match self.parse(w) {
                            Some(true) => continue,
                            Some(false) => {}
                            None => return Status::Closed,
                        }
                    }
                    if !self.out.is_empty() {
                        self.phase = Phase::Send;
                        continue;
                    }
                    if self.peer_closed {
                        return self.closed_mid_head(w);
                    }
                    match self.fill(w) {
                        Fill::Got => {
                            if self.timer.clock == Clock::Idle {
                                let bytes = self.timer.bytes;
                                self.set_clock(Clock::Header, w.now);
                                self.timer.bytes = bytes;
                            }
                        }
                        Fill::Wait => {
                            self.idle_buffers(w);
                            return Status::Open;
                        }
                        Fill::Eof => self.peer_closed = true,
                        Fill::Failed => return Status::Closed,
                    }
                }
                Phase::Discard => {
                    if self.rpos < self.rbuf.len() {
                        let Some(reader) = self.body.as_mut() else { unreachable!("discarding without a body") };
                        match reader.feed(&self.rbuf[self.rpos..], |_| {}) {
                            Ok((n, done)) => {
                                self.rpos += n;
                                if done {
                                    self.body = None;
                                    self.phase = Phase::Head;
                                    self.set_clock(Clock::Idle, w.now);
                                    continue;
                                }
                            }
                            // The answer is already sent; a bad or
                            // oversized body just ends the connection.
                            Err(_) => return self.finish(w),
                        }
                    }
                    if self.peer_closed {
                        return Status::Closed;
                    }
                    match self.fill(w) {
                        Fill::Got => {}
                        Fill::Wait => return Status::Open,
                        Fill::Eof => self.peer_closed = true,
                        Fill::Failed => return Status::Closed,
                    }
                }
                Phase::Linger => return self.linger(w),
            }
        }
    }

    /// Parses and answers buffered requests. `Some(true)`: answered one,
    /// look again; `Some(false)`: incomplete, more bytes needed; `None`:
    /// close now without an answer.
    fn parse(&mut self, w: &mut Worker<'_>) -> Option<bool> {
        // Taken out so the request can borrow it while `self` answers.
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let result = match parse_head(&rbuf[self.rpos..], &w.shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                self.rpos += req.head_len;
                self.answer(w, &req);
                Some(true)
            }
            Ok(Head::Partial { .. }) => Some(false),
            Err(err) => {
                crate::log!(Level::Info, "{}: bad request: {}", self.peer, err.reason());
                w.stats.requests.incr();
                let line = first_line(&rbuf[self.rpos..]);
                self.rpos = rbuf.len();
                match err.status() {
                    Some(status) => {
                        self.answer_error(w, status, line);
                        Some(true)
                    }
                    None => None,
                }
            }
        };
        self.rbuf = rbuf;
        result
    }

    /// Answers a complete request, queueing the response.
    fn answer(&mut self, w: &mut Worker<'_>, req: &Request<'_>) {
        let config = &w.shared.config;
        let limits = &config.limits;
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        self.requests += 1;
        let mut keep_alive = req.keep_alive
            && !w.shutting_down()
            && (limits.keepalive_requests == 0 || self.requests < limits.keepalive_requests);
        let body = BodyReader::new(req.framing, limits.max_body_bytes.0);
        let too_large = matches!(req.framing, BodyFraming::Length(n) if n > limits.max_body_bytes.0);
        // A client waiting for `100 Continue` may never send the body we
        // do not ask for: close rather than guess.
        if too_large || (body.is_some() && req.expect_continue) {
            keep_alive = false;
        }
        let mut reply = Reply::new(
            &mut self.out,
            w.date.http(),
            &config.server.server_header,
            req.method == Method::Head,
            req.version == Version::Http10,
            keep_alive,
        );
        if too_large {
            reply.error(413);
        } else {
            w.shared.site.respond(req, self.peer, &mut reply, w);
        }
        reply.finish();
        let (status, body_len, queued) = (reply.status, reply.body_len, reply.queued);
        self.keep_alive = reply.keep_alive;
        w.stats.requests.incr();
        w.stats.status(status);
        w.stats.bytes_out.add(queued);
        w.log.record(&Entry {
            client: self.peer.ip(),
            time: w.date.clf(),
            request_line: req.request_line.as_bytes(),
            status,
            bytes: body_len,
            referer: req.fields.referer,
            user_agent: req.fields.user_agent,
        });
        self.body = if self.keep_alive { body } else { None };
        self.after_answer(w);
    }

    /// Answers a request that could not be parsed (or timed out) and
    /// closes after it; `line` is what arrived of its request line.
    fn answer_error(&mut self, w: &mut Worker<'_>, status: u16, line: &[u8]) {
        let config = &w.shared.config;
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        let mut reply = Reply::new(&mut self.out, w.date.http(), &config.server.server_header, false, false, false);
        reply.error(status);
        reply.finish();
        w.stats.status(status);
        w.stats.bytes_out.add(reply.queued);
        w.log.record(&Entry {
            client: self.peer.ip(),
            time: w.date.clf(),
            request_line: line,
            status,
            bytes: reply.body_len,
            referer: None,
            user_agent: None,
        });
        self.keep_alive = false;
        self.body = None;
        self.phase = Phase::Send;
        self.set_clock(Clock::Send, w.now);
    }

    /// Decides whether to gather the next pipelined response into the same
    /// write or to start sending.
    fn after_answer(&mut self, w: &Worker<'_>) {
        let gather = self.keep_alive
            && self.body.is_none()
            && self.rpos < self.rbuf.len()
            && self.out.gathers()
            && self.out.queued() < MAX_GATHERED;
        if !gather {
            self.phase = Phase::Send;
            self.set_clock(Clock::Send, w.now);
        }
    }

    /// Everything queued was sent. Returns a status to return, or `None`
    /// to keep driving.
    fn sent(&mut self, w: &mut Worker<'_>) -> Option<Status> {
        if !self.keep_alive {
            return Some(self.finish(w));
        }
        if self.body.is_some() {
            self.phase = Phase::Discard;
            self.set_clock(Clock::Body, w.now);
        } else {
            self.phase = Phase::Head;
            let clock = if self.rpos < self.rbuf.len() { Clock::Header } else { Clock::Idle };
            self.set_clock(clock, w.now);
        }
        None
    }

    /// Ends the connection after its last answer: at once when nothing more
    /// can arrive, else by shutting down output and draining input.
    fn finish(&mut self, w: &mut Worker<'_>) -> Status {
        let unread = self.rpos < self.rbuf.len() || self.may_read || self.body.is_some();
        if self.peer_closed || !unread {
            return Status::Closed;
        }
        sys::shutdown_write(self.sock.as_fd());
        self.body = None;
        self.rpos = 0;
        self.rbuf.clear();
        self.phase = Phase::Linger;
        self.set_clock(Clock::Linger, w.now);
        self.linger(w)
    }

    fn linger(&mut self, w: &mut Worker<'_>) -> Status {
        loop {
            self.rbuf.clear();
            match self.fill(w) {
                Fill::Got => {}
                Fill::Wait => return Status::Open,
                Fill::Eof | Fill::Failed => return Status::Closed,
            }
        }
    }

    /// The peer closed while no complete request was buffered.
    fn closed_mid_head(&mut self, w: &mut Worker<'_>) -> Status {
        if self.rpos == self.rbuf.len() {
            return Status::Closed;
        }
        // A request line arrived but not the rest: a truncated request.
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let pending = &rbuf[self.rpos..];
        let truncated = matches!(
            parse_head(pending, &w.shared.http_limits, &mut fields),
            Ok(Head::Partial { line_complete: true })
        );
        if truncated {
            self.answer_error(w, 400, first_line(pending));
        }
        self.rpos = rbuf.len();
        self.rbuf = rbuf;
        if !truncated {
            return Status::Closed;
        }
        self.drive(w)
    }

    /// Reads what the socket has into the receive buffer.
    fn fill(&mut self, w: &mut Worker<'_>) -> Fill {
        if !self.may_read {
            return Fill::Wait;
        }
        if self.rbuf.capacity() == 0 {
            self.rbuf = w.pool.take();
            self.rpos = 0;
        }
        if self.rpos > 0 && (self.rpos == self.rbuf.len() || self.rbuf.len() == self.rbuf.capacity()) {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
        }
        if self.rbuf.len() == self.rbuf.capacity() {
            // A head larger than a pooled buffer: grow to the limit (plus a
            // little, so the parser sees when it is exceeded).
            let limit = w.shared.config.limits.max_header_bytes.usize() + 1024;
            self.rbuf.reserve(limit.saturating_sub(self.rbuf.len()).max(1024));
        }
        let spare = self.rbuf.capacity() - self.rbuf.len();
        loop {
            match sys::read_into(self.sock.as_fd(), &mut self.rbuf) {
                Ok(0) => {
                    self.may_read = false;
                    return Fill::Eof;
                }
                Ok(n) => {
                    // A short read drained the socket: the next edge will
                    // say when more arrives.
                    if n < spare {
                        self.may_read = false;
                    }
                    self.timer.bytes += n as u64;
                    return Fill::Got;
                }
                Err(e) if sys::would_block(&e) => {
                    self.may_read = false;
                    return Fill::Wait;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Fill::Failed,
            }
        }
    }

    /// Gives the buffers back to the pool while nothing is pending.
    fn idle_buffers(&mut self, w: &mut Worker<'_>) {
        if self.rpos == self.rbuf.len() && self.rbuf.capacity() > 0 {
            self.rpos = 0;
            w.pool.give(std::mem::take(&mut self.rbuf));
        }
        if self.out.is_empty() && self.out.buf.capacity() > 0 {
            let (buf, _chunk) = self.out.release();
            w.pool.give(buf);
        }
    }

    /// Called about once a second: enforces the phase's deadline.
    pub fn on_tick(&mut self, w: &mut Worker<'_>) -> Status {
        let t = &w.shared.config.timeouts;
        let (base, min_rate) = match self.timer.clock {
            Clock::Idle => (t.keepalive.0, 0),
            Clock::Header => (t.header.0, t.header_min_rate),
            Clock::Body => (t.body.0, t.body_min_rate),
            Clock::Send => (t.send.0, t.send_min_rate),
            Clock::Linger => (t.linger.0, 0),
        };
        let earned = if min_rate == 0 { Duration::ZERO } else { Duration::from_secs(self.timer.bytes / min_rate) };
        if w.now.saturating_duration_since(self.timer.start) <= base + earned {
            return Status::Open;
        }
        let kind = match self.timer.clock {
            Clock::Idle => TimeoutKind::Idle,
            Clock::Header => TimeoutKind::Header,
            Clock::Body => TimeoutKind::Body,
            Clock::Send | Clock::Linger => TimeoutKind::Send,
        };
        if self.timer.clock != Clock::Linger {
            w.stats.timeout(kind);
            crate::log!(Level::Info, "{}: {kind:?} timeout", self.peer);
        }
        let partial_head = self.timer.clock == Clock::Header && self.rpos < self.rbuf.len();
        if partial_head || self.timer.clock == Clock::Body {
            // Tell the client, once, then give it the linger time to read.
            self.out.clear();
            let rbuf = std::mem::take(&mut self.rbuf);
            self.answer_error(w, 408, first_line(&rbuf[self.rpos..]));
            self.rpos = rbuf.len();
            self.rbuf = rbuf;
            return self.drive(w);
        }
        Status::Closed
    }

    /// Graceful shutdown: finish what is in flight, then close.
    pub fn begin_shutdown(&mut self, w: &mut Worker<'_>) -> Status {
        self.keep_alive = false;
        let idle = self.phase == Phase::Head && self.rpos == self.rbuf.len() && self.out.is_empty();
        if idle || self.phase == Phase::Discard {
            return Status::Closed;
        }
        self.drive(w)
    }

    /// Returns the connection's buffers to the pool before it is dropped.
    pub fn recycle(mut self, w: &mut Worker<'_>) {
        w.pool.give(std::mem::take(&mut self.rbuf));
        self.out.clear();
        let (buf, _) = self.out.release();
        w.pool.give(buf);
    }
}

/// What arrived of a request line (for the access log of a refused one).
fn first_line(pending: &[u8]) -> &[u8] {
    let end = memchr::memchr2(b'\r', b'\n', pending).unwrap_or(pending.len());
    &pending[..end.min(1024)]
}
