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
//!
//! On an HTTPS address the socket's bytes pass through the connection's
//! TLS session (`tls.rs`) on the way in (`fill`) and out (`flush`); the
//! rest of the state machine does not know. A redirecting address answers
//! every request with `308` to its HTTPS URL.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_http::request::{parse_head, BodyFraming, Head, Request, Version, MAX_HEADERS};
use tern_http::Method;

use crate::access_log::Entry;
use crate::body::{Flushed, OutQueue};
use crate::config::Level;
use crate::error_log::log;
use crate::handover::Moved;
use crate::metrics::TimeoutKind;
use crate::offload::{Done, Task, Ticket};
use crate::reaper;
use crate::reply::{Params, Reply};
use crate::service_records::{Record, Stage, StageAccount};
use crate::shared::Shared;
use crate::site::backend::Job;
use crate::site::cgi::Pump;
use crate::site::{Answer, Ends, Peers};
use crate::spool::Spool;
use crate::sys;
use crate::tls::{self, Got, Role, Session};
use crate::worker::{Wait, Worker};

mod request_body;

use request_body::{BodyError, BodyReader};

/// Whether the engine should keep the connection — or, for a connection
/// that stops at stage boundaries ([`Conn::enter_stage`]), that its work
/// has moved on to another stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Open,
    Closed,
    Next(Stage),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for, or parsing, a request head.
    Head,
    /// Writing queued responses.
    Send,
    /// Reading (and checking) a request body before answering.
    Body,
    /// Relaying a backend's (CGI program's, FastCGI application's) output
    /// as the response.
    Backend,
    /// After a final answer: output shut down, input drained until the
    /// peer closes, so a reset cannot destroy the answer in flight.
    Linger,
    /// Waiting for the I/O pool (a file being opened or read).
    Wait,
}

/// The clock a phase runs against (see `config::Timeouts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    Idle,
    Header,
    Body,
    Send,
    Backend,
    /// The program's output ended; waiting for it to exit.
    Exit,
    Linger,
    /// Waiting for the I/O pool (held to `timeouts.send`).
    Disk,
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

enum Sent {
    All,
    Wait,
    Failed,
}

enum Fill {
    Got,
    Wait,
    Eof,
    Failed,
}

/// A request being answered by a backend, with what its log line needs
/// (the request buffer is gone by the time the answer ends).
struct Backend {
    job: Job,
    request_line: String,
    referer: Option<Vec<u8>>,
    user_agent: Option<Vec<u8>>,
    host: String,
    head_only: bool,
    http10: bool,
}

/// Work in the I/O pool a connection waits for.
struct Waiting {
    ticket: Arc<Ticket>,
    awaited: Awaited,
    /// The phase and clock to go back to.
    phase: Phase,
    timer: Timer,
}

enum Awaited {
    /// A path being opened: the request (its head's bytes, and whether its
    /// body was read into `spool`) is answered again with the result.
    Open { head: Vec<u8>, body_read: bool },
    /// The file region at `offset` at the front of the output queue being
    /// read: the bytes go in its place.
    Read { offset: u64 },
}

/// How long an idle connection stays open once the server stops: a
/// request the client sent before it could see the close still arrives and
/// is answered.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The send buffer of a reader that takes less than twice the minimum send
/// rate: what the kernel holds for it stays small.
const SLOW_SEND_BUFFER: usize = 16 * 1024;

/// Local redirects (RFC 3875 §6.2.2) followed for one request.
const MAX_LOCAL_REDIRECTS: u8 = 10;

pub struct Conn {
    /// This connection's key in its engine (tokens for its descriptors).
    key: usize,
    sock: TcpStream,
    peers: Peers,
    rbuf: Vec<u8>,
    /// Start of the unprocessed part of `rbuf`.
    rpos: usize,
    out: OutQueue,
    phase: Phase,
    may_read: bool,
    may_write: bool,
    /// The peer's FIN was reported with the readiness: a short read does
    /// not mean the socket is drained, the end of stream is still to read.
    eof_pending: bool,
    peer_closed: bool,
    /// Whether the connection stays open after the queued responses.
    keep_alive: bool,
    requests: u64,
    /// The body being read, and the length of its head (kept in `rbuf`
    /// at `rpos` until the body is complete).
    body: Option<(BodyReader, usize)>,
    /// The request body read so far (handed to the site with its request).
    spool: Spool,
    backend: Option<Box<Backend>>,
    redirects: u8,
    timer: Timer,
    /// The send buffer was fixed small (a slow reader).
    send_clamped: bool,
    pace: Pace,
    /// For service records (`log.service_records`; the clock is read for
    /// them only when they are kept): when the connection was accepted;
    /// when the request being read arrived (the readiness that brought its
    /// first bytes, [`Worker::seen`]) and when the latest bytes did (what
    /// a pipelined request behind the current one arrived with); when the
    /// current request arrived and its service started; and the answered
    /// requests whose responses are not all sent yet.
    accepted: Instant,
    arriving: Instant,
    read_at: Instant,
    started: Option<(Instant, Instant)>,
    unsent: Vec<Unsent>,
    /// When the queued responses were all sent, when their records are
    /// written later (in the staged engine's log stage).
    sent_at: Option<Instant>,
    /// Time in the staged engine's stages.
    stages: StageAccount,
    /// The stage the connection is in, when an engine of stages drives it:
    /// it then stops where its work moves to another stage.
    stage: Option<Stage>,
    /// A complete request waits in `rbuf` at `rpos` for the handle stage
    /// (`true`: its body was read).
    to_answer: Option<bool>,
    /// Its responses are sent: their records and what follows (the next
    /// request, the close) are the log stage's.
    to_log: bool,
    /// Whether the listening address's role is still to be looked at
    /// (on the first readiness: `Conn::new` is not handed `Shared`).
    fresh: bool,
    /// The TLS session on an HTTPS address.
    tls: Option<Box<Session>>,
    /// On a redirecting address: the HTTPS port to send clients to.
    redirect: Option<u16>,
    waiting: Option<Box<Waiting>>,
}

/// Which unsent bound (`TCP_NOTSENT_LOWAT`) the connection has, and the
/// measure of its reader that decides it: `limits.unsent_bytes` while new
/// or slow, `limits.fast_unsent_bytes` once its client has taken
/// `limits.fast_reader_bytes` at `limits.fast_reader_rate` or faster. The
/// reader is measured only when the bound held a write back (a response
/// larger than the bound, never a small one: no system call on the small
/// files' path) and, once raised, on the once-a-second tick, whose
/// `SIOCOUTQ` read of a connection sending a response it shares.
#[derive(Default)]
struct Pace {
    /// The connection has the fast readers' bound.
    fast: bool,
    /// Since when the reader is measured, and the bytes it had
    /// acknowledged then.
    mark: Option<(Instant, u64)>,
}

/// The shortest time over which the tick judges a fast reader's rate
/// (ticks are about a second apart; a mark set just before one waits for
/// the next).
const PACE_LOOK: Duration = Duration::from_millis(500);

/// Whether `took` bytes in `elapsed` are at least `rate` bytes a second.
fn at_rate(took: u64, elapsed: Duration, rate: u64) -> bool {
    u128::from(took) * 1_000_000_000 >= u128::from(rate) * elapsed.as_nanos()
}

/// An answered request waiting for the end of its response.
struct Unsent {
    arrived: Instant,
    start: Instant,
    status: u16,
    bytes: u64,
}

impl Conn {
    pub fn new(key: usize, sock: TcpStream, peer: SocketAddr, w: &Worker<'_>) -> Conn {
        // TCP_NODELAY comes with the socket, from its listener (`server.rs`).
        let st = &w.config.static_files;
        Conn {
            key,
            sock,
            peers: Peers::new(peer),
            rbuf: Vec::new(),
            rpos: 0,
            out: OutQueue::new(st.read_chunk.usize(), st.sendfile_max_chunk.0, w.offload.is_some()),
            phase: Phase::Head,
            may_read: false,
            may_write: true,
            eof_pending: false,
            peer_closed: false,
            keep_alive: true,
            requests: 0,
            body: None,
            spool: Spool::default(),
            backend: None,
            redirects: 0,
            timer: Timer { clock: Clock::Header, start: w.now, bytes: 0 },
            send_clamped: false,
            pace: Pace::default(),
            accepted: if w.records.enabled() { Instant::now() } else { w.now },
            arriving: w.seen,
            read_at: w.seen,
            started: None,
            unsent: Vec::new(),
            sent_at: None,
            stages: StageAccount::default(),
            stage: None,
            to_answer: None,
            to_log: false,
            fresh: true,
            tls: None,
            redirect: None,
            waiting: None,
        }
    }

    /// Looks up what the listening address is for: starts the TLS session
    /// on an HTTPS address.
    fn open(&mut self, shared: &Shared, w: &Worker<'_>) {
        self.fresh = false;
        let Some(setup) = &shared.tls else { return };
        match setup.role(self.peers.local(&self.sock)) {
            Role::Http => {}
            Role::Https => self.tls = setup.session(w.stats),
            Role::Redirect => self.redirect = Some(setup.https_port()),
        }
    }

    /// Header lines for every response on a connection (HSTS over HTTPS).
    fn fields(tls: &Option<Box<Session>>) -> &[u8] {
        tls.as_ref().map_or(&[], |t| t.fields())
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// The socket, for a blocking engine's `poll(2)`.
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// What a blocking engine waits for: the socket's directions not known
    /// to be ready, and the backend's descriptor while one runs.
    pub fn waits(&self) -> (Wait, Option<(BorrowedFd<'_>, Wait)>) {
        let sock = Wait { read: !self.may_read, write: !self.may_write };
        (sock, self.backend.as_ref().and_then(|b| b.job.wait()))
    }

    /// Whether it waits on its socket alone (no backend runs): a
    /// thread-pool engine leaves such a connection to its epoll set rather
    /// than block a thread on it.
    pub fn waits_on_socket_only(&self) -> bool {
        self.backend.is_none()
    }

    /// The socket may have become readable and/or writable; `read_closed`
    /// when the peer has shut down its side, `hangup` when the connection
    /// is gone both ways (reset).
    pub fn on_ready(
        &mut self,
        shared: &Shared,
        w: &mut Worker<'_>,
        readable: bool,
        writable: bool,
        read_closed: bool,
        hangup: bool,
    ) -> Status {
        self.may_read |= readable || read_closed;
        self.eof_pending |= read_closed;
        self.may_write |= writable;
        if hangup && (self.backend.is_some() || self.waiting.is_some()) {
            // The client is gone: the program's work is abandoned. (A mere
            // half-close is not an abort: the client may still read.)
            self.abort_backend(w);
            return Status::Closed;
        }
        self.drive(shared, w)
    }

    /// The backend's descriptor (or the I/O pool's signal) may have become
    /// readable, writable (or closed).
    pub fn on_backend_ready(
        &mut self,
        shared: &Shared,
        w: &mut Worker<'_>,
        readable: bool,
        writable: bool,
        closed: bool,
    ) -> Status {
        if let Some(b) = self.backend.as_mut() {
            b.job.on_ready(readable, writable, closed);
        }
        self.proceed(shared, w)
    }

    /// Rung for on the reactor's doorbell: a pooled FastCGI connection
    /// granted to the request waiting for one, or this connection's own
    /// turn again after it sent its `sendfile_max_chunk`. Unlike an event
    /// on the second descriptor, it says nothing about a kept link.
    pub fn on_rung(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        if let Some(b) = self.backend.as_mut() {
            b.job.on_ready(true, false, false);
        }
        self.proceed(shared, w)
    }

    fn proceed(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        if self.waiting.is_some() {
            if let Some(status) = self.resume(shared, w) {
                return status;
            }
        }
        self.drive(shared, w)
    }

    /// Hands `ticket`'s work to the I/O pool's care: its signal becomes the
    /// connection's second descriptor, and the connection waits.
    fn wait(&mut self, shared: &Shared, w: &mut Worker<'_>, ticket: Arc<Ticket>, awaited: Awaited) -> Option<Status> {
        let watched = w.watcher.watch(self.key, ticket.fd());
        // Through `set_clock`, so a connection taken off the idle count
        // (`room.rs`) is put back on it exactly when it resumes.
        let clock = self.timer.clock;
        let timer = std::mem::replace(&mut self.timer, Timer { clock, start: w.now, bytes: 0 });
        self.set_clock(Clock::Disk, w);
        let phase = std::mem::replace(&mut self.phase, Phase::Wait);
        self.waiting = Some(Box::new(Waiting { ticket, awaited, phase, timer }));
        if let Err(err) = watched {
            // Cannot be told: wait here instead.
            log!(Level::Error, "cannot watch the I/O pool's signal: {err}");
            let _ = sys::wait_readable(self.waiting.as_ref().map(|x| x.ticket.fd())?);
            return self.resume(shared, w);
        }
        None
    }

    /// The I/O pool is done: the connection goes on where it stopped.
    /// Returns a status to return, or `None` to keep driving.
    fn resume(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<Status> {
        let waiting = self.waiting.take()?;
        let Some(done) = waiting.ticket.take() else {
            self.waiting = Some(waiting);
            return None;
        };
        let _ = w.watcher.unwatch(waiting.ticket.fd());
        let Waiting { awaited, phase, timer, .. } = *waiting;
        self.phase = phase;
        self.set_clock(timer.clock, w);
        self.timer = timer;
        match (awaited, done) {
            (Awaited::Read { offset }, Done::Read(Ok(bytes))) => self.out.insert_read(offset, bytes),
            (Awaited::Read { .. }, Done::Read(Err(err))) => {
                self.read_failed(&err);
                return Some(Status::Closed);
            }
            (Awaited::Open { head, body_read }, Done::Opened(found)) => {
                w.resolved = Some(found);
                let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let answered = match parse_head(&head, &shared.http_limits, &mut fields) {
                    Ok(Head::Complete(req)) => {
                        self.answer(shared, w, &req, &head, body_read);
                        true
                    }
                    _ => false,
                };
                w.resolved = None;
                if !answered {
                    return Some(Status::Closed);
                }
                if self.waiting.is_none() {
                    self.spool = Spool::default();
                }
            }
            _ => return Some(Status::Closed),
        }
        None
    }

    /// Logs a file that could not be sent: one that ended early is the
    /// server's fault, worth an error line; a peer that went away is not.
    fn read_failed(&self, err: &std::io::Error) {
        if err.kind() == std::io::ErrorKind::UnexpectedEof {
            log!(Level::Error, "{}: {err}", self.peers.peer);
        } else {
            log!(Level::Debug, "{}: send failed: {err}", self.peers.peer);
        }
    }

    fn set_clock(&mut self, clock: Clock, w: &mut Worker<'_>) {
        match (self.timer.clock == Clock::Idle, clock == Clock::Idle) {
            (false, true) => w.idle += 1,
            (true, false) => w.idle = w.idle.saturating_sub(1),
            _ => {}
        }
        self.timer = Timer { clock, start: w.now, bytes: 0 };
    }

    /// Takes the connection off worker `w`'s idle count as it leaves for
    /// another thread, whose worker it joins with [`Conn::arrive`]: an
    /// engine that passes connections between threads keeps each worker's
    /// count exact, so a front publishes its own for `room.rs`.
    pub fn depart(&self, w: &mut Worker<'_>) {
        if self.timer.clock == Clock::Idle {
            w.idle = w.idle.saturating_sub(1);
        }
    }

    /// Puts a connection that arrived from another thread on worker `w`'s
    /// idle count (see [`Conn::depart`]).
    pub fn arrive(&self, w: &mut Worker<'_>) {
        if self.timer.clock == Clock::Idle {
            w.idle += 1;
        }
    }

    fn drive(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        if self.fresh {
            self.open(shared, w);
        }
        loop {
            if let Some(stage) = self.stage {
                let next = self.work_stage(stage);
                if next != stage {
                    return Status::Next(next);
                }
            }
            if let Some(body_read) = self.to_answer.take() {
                if self.answer_buffered(shared, w, body_read).is_none() {
                    return Status::Closed;
                }
                continue;
            }
            if self.to_log {
                self.to_log = false;
                if let Some(status) = self.sent(w) {
                    return status;
                }
                if self.rpos == self.rbuf.len() && !self.may_read && !self.peer_closed && self.tls.is_none() {
                    // Nothing to read yet: it waits for its client (as
                    // `fill` would say), not for the read stage.
                    self.idle_buffers(w);
                    return Status::Open;
                }
                continue;
            }
            match self.phase {
                Phase::Send => match self.flush(shared, w) {
                    Sent::All if self.stage.is_some() => {
                        if w.records.enabled() {
                            self.sent_at = Some(Instant::now());
                        }
                        self.to_log = true;
                    }
                    Sent::All => {
                        if let Some(status) = self.sent(w) {
                            return status;
                        }
                    }
                    Sent::Wait => return Status::Open,
                    Sent::Failed => return Status::Closed,
                },
                Phase::Head => {
                    if self.rpos < self.rbuf.len() {
                        match self.parse(shared, w) {
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
                        return self.closed_mid_head(shared, w);
                    }
                    let new_request = self.rpos == self.rbuf.len();
                    match self.fill(w) {
                        Fill::Got => {
                            self.read_at = w.seen;
                            if new_request {
                                self.arriving = w.seen;
                            }
                            if self.timer.clock == Clock::Idle {
                                let bytes = self.timer.bytes;
                                self.set_clock(Clock::Header, w);
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
                Phase::Body => {
                    match self.read_body(shared, w) {
                        Some(true) => continue,
                        Some(false) => {}
                        None => return Status::Closed,
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
                Phase::Backend => {
                    // Read on while the program has more (so a short answer
                    // leaves in one write), then flush.
                    let ready = self.backend.as_ref().is_some_and(|b| b.job.ready());
                    if ready && self.out.queued() < MAX_GATHERED {
                        if let Some(status) = self.pump(shared, w) {
                            return status;
                        }
                        continue;
                    }
                    if self.out.is_empty() {
                        return Status::Open;
                    }
                    match self.flush(shared, w) {
                        Sent::All => {}
                        Sent::Wait => return Status::Open,
                        Sent::Failed => {
                            self.abort_backend(w);
                            return Status::Closed;
                        }
                    }
                }
                Phase::Linger => return self.linger(w),
                Phase::Wait => return Status::Open,
            }
        }
    }

    /// An engine of stages (the staged engine) runs the connection in
    /// `stage` from `now`, after `queued` in that stage's queue. From then
    /// on the connection stops where its work moves to another stage
    /// (returning [`Status::Next`]), and its service records carry its time
    /// per stage. The code that runs is the same as under every engine;
    /// only the answer to pipelined requests is not gathered into one
    /// write, as each is handed from stage to stage.
    pub fn enter_stage(&mut self, stage: Stage, queued: Duration, now: Instant) {
        self.stage = Some(stage);
        self.stages.enter(stage, queued, now);
    }

    /// The stage entered last is left at `now`.
    pub fn leave_stage(&mut self, now: Instant) {
        self.stages.leave(now);
    }

    /// The stage its work is in, when it is driven by stages: where the
    /// engine queues it once its socket is ready.
    pub fn stage(&self) -> Option<Stage> {
        self.stage.map(|current| self.work_stage(current))
    }

    /// Which stage the connection's work belongs to (`current` while it
    /// waits for the I/O pool).
    fn work_stage(&self, current: Stage) -> Stage {
        if self.to_answer.is_some() {
            return Stage::Handle;
        }
        if self.to_log {
            return Stage::Log;
        }
        match self.phase {
            Phase::Head | Phase::Body | Phase::Linger => Stage::Read,
            Phase::Send | Phase::Backend => Stage::Send,
            Phase::Wait => current,
        }
    }

    /// Writes queued output as far as the socket takes it. Every response
    /// byte (heads, files by any I/O method, compressed and CGI bodies —
    /// any backend's output relayed through the queue) leaves here, so
    /// this is where `bytes_sent` counts.
    fn flush(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Sent {
        loop {
            if !self.may_write {
                return Sent::Wait;
            }
            let before = self.out.written;
            let result = match self.tls.as_mut() {
                Some(tls) => self.out.flush_tls(tls, &self.sock, w.now),
                None => self.out.flush(self.sock.as_fd()),
            };
            let sent = self.out.written - before;
            self.timer.bytes += sent;
            w.stats.bytes_sent.add(sent);
            return match result {
                Ok(Flushed::All) => Sent::All,
                Ok(Flushed::Blocked) => {
                    self.may_write = false;
                    self.held_back(w);
                    Sent::Wait
                }
                // A reactor drives the others first and this one again
                // after them; a thread of its own writes on.
                Ok(Flushed::Yield) => match w.watcher.doorbell() {
                    Some(doorbell) => {
                        doorbell.ring(self.key);
                        Sent::Wait
                    }
                    None => continue,
                },
                // Pages not in memory: read in the I/O pool (only a queue
                // of a connection with a pool says this).
                Ok(Flushed::Cold { file, offset, len }) => {
                    let Some(pool) = w.offload else { return Sent::Failed };
                    let submitted = pool.submit(Task::Read { file: file.clone(), offset, len });
                    let Ok(ticket) = submitted else {
                        // No eventfd to wait on: read here.
                        let mut bytes = vec![0; len];
                        if let Err(err) = file.file.read_exact_at(&mut bytes, offset) {
                            let eof = err.kind() == std::io::ErrorKind::UnexpectedEof;
                            self.read_failed(&if eof { file.shrank() } else { err });
                            return Sent::Failed;
                        }
                        self.out.insert_read(offset, bytes);
                        continue;
                    };
                    w.stats.offloaded_reads.incr();
                    match self.wait(shared, w, ticket, Awaited::Read { offset }) {
                        Some(Status::Closed) => Sent::Failed,
                        // Done already (waited here): send on.
                        Some(Status::Open) | None if self.waiting.is_none() => continue,
                        _ => Sent::Wait,
                    }
                }
                Err(err) => {
                    self.read_failed(&err);
                    Sent::Failed
                }
            };
        }
    }

    /// A write was held back (the socket took all the unsent bytes its
    /// bound allows): measures the reader ([`Pace`]) and raises the bound
    /// once it has taken `limits.fast_reader_bytes` fast enough. Until the
    /// bytes written could hold that many, no system call.
    ///
    /// Never over TLS: with the bound raised, the kernel queues the
    /// encrypted rounds and the client's acknowledgements send them, on
    /// the client's CPU — which a client that decrypts needs. Measured
    /// (1 MiB, 32 connections, server and `wrk` on one CPU each): 1,543
    /// responses/s with the raise, 2,577 without (the client's CPU spent
    /// 21–31 % against 2–7 % in softirq); tern bench 2,616 and 2,690.
    fn held_back(&mut self, w: &Worker<'_>) {
        let l = &w.config.limits;
        if self.pace.fast || self.send_clamped || self.tls.is_some() || l.fast_reader_unsent() == l.unsent_bytes.0 {
            return;
        }
        let written = self.out.written;
        if self.pace.mark.is_some_and(|(_, taken)| written < taken + l.fast_reader_bytes.0) {
            return;
        }
        let Ok(unacked) = sys::unacked(self.sock.as_fd()) else { return };
        let acked = written.saturating_sub(unacked as u64);
        if let Some((since, taken)) = self.pace.mark {
            let took = acked.saturating_sub(taken);
            if took < l.fast_reader_bytes.0 {
                return;
            }
            if at_rate(took, w.now.saturating_duration_since(since), l.fast_reader_rate.0)
                && sys::limit_unsent(self.sock.as_fd(), l.fast_unsent_bytes.0).is_ok()
            {
                self.pace.fast = true;
                w.stats.fast_readers.incr();
            }
        }
        // Measured again from here: after the raise, for the tick; after
        // a reader too slow, afresh.
        self.pace.mark = Some((w.now, acked));
    }

    /// The tick's look at a fast reader's connection; `unacked`: the bytes
    /// its client has not acknowledged yet, read while a response is being
    /// sent. One that left bytes waiting and took less than
    /// `limits.fast_reader_rate` since the last look gets
    /// `limits.unsent_bytes` back. Between responses nothing is read (no
    /// system call for an idle connection): what was written counts as
    /// taken, so a client that had not taken it is found out at the next
    /// look during a response.
    fn pace_tick(&mut self, unacked: Option<u64>, w: &Worker<'_>) {
        let l = &w.config.limits;
        let acked = self.out.written.saturating_sub(unacked.unwrap_or(0));
        if let (Some(unacked), Some((since, taken))) = (unacked, self.pace.mark) {
            let elapsed = w.now.saturating_duration_since(since);
            if elapsed < PACE_LOOK {
                return;
            }
            if unacked > 0
                && !at_rate(acked.saturating_sub(taken), elapsed, l.fast_reader_rate.0)
                && sys::limit_unsent(self.sock.as_fd(), l.unsent_bytes.0).is_ok()
            {
                self.pace = Pace::default();
                w.stats.fast_readers_slowed.incr();
                return;
            }
        }
        self.pace.mark = Some((w.now, acked));
    }

    /// Relays the backend's output into the output queue. Returns a status
    /// to return, or `None` to keep driving.
    fn pump(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<Status> {
        let b = self.backend.as_mut().expect("backend phase without a backend");
        let params = Params {
            date: w.date.http(),
            server: &shared.config.server.server_header,
            fields: Conn::fields(&self.tls),
            head_only: b.head_only,
            http10: b.http10,
            keep_alive: self.keep_alive,
        };
        match b.job.pump(&mut self.out, &params, shared.site.cgi.pipe_buffer, w) {
            Pump::Wait => None,
            Pump::Progress => None,
            Pump::AwaitExit => {
                if let Some(fd) = b.job.exit_fd() {
                    if let Err(err) = w.watcher.watch(self.key, fd) {
                        log!(Level::Error, "cannot watch a CGI program's exit: {err}");
                    }
                }
                // A program that closed its output has a moment to exit.
                self.set_clock(Clock::Exit, w);
                None
            }
            Pump::Done { keep_alive } => {
                self.keep_alive &= keep_alive;
                let b = self.end_backend(w, false);
                let r = b.job.response();
                self.log_backend(w, &b, r.status, r.body_bytes);
                self.phase = Phase::Send;
                self.set_clock(Clock::Send, w);
                None
            }
            Pump::Fail(status) => {
                let b = self.end_backend(w, true);
                self.backend_error(w, &b, status);
                None
            }
            Pump::Redirect(location) => {
                let b = self.end_backend(w, true);
                self.local_redirect(shared, w, &b, &location);
                None
            }
        }
    }

    /// Detaches the backend and ends its job (`abandon`: kill the program,
    /// close the FastCGI connection).
    fn end_backend(&mut self, w: &mut Worker<'_>, abandon: bool) -> Box<Backend> {
        let mut b = self.backend.take().expect("a backend to end");
        // Saturating: a connection may end on another thread than the
        // one it started on (the count only steers busy polling).
        w.backend_jobs = w.backend_jobs.saturating_sub(1);
        b.job.end(w, abandon);
        b
    }

    /// Abandons the backend (timeout, client gone).
    fn abort_backend(&mut self, w: &mut Worker<'_>) {
        if self.backend.is_some() {
            self.end_backend(w, true);
        }
    }

    /// Answers `status` for a backend that failed before its head was sent.
    fn backend_error(&mut self, w: &mut Worker<'_>, b: &Backend, status: u16) {
        self.out.clear();
        let params = Params {
            date: w.date.http(),
            server: &w.config.server.server_header,
            fields: Conn::fields(&self.tls),
            head_only: b.head_only,
            http10: b.http10,
            keep_alive: self.keep_alive,
        };
        let mut reply = Reply::with(&mut self.out, &params);
        reply.error(status);
        reply.finish();
        let body_len = reply.body_len;
        self.log_backend(w, b, status, body_len);
        self.phase = Phase::Send;
        self.set_clock(Clock::Send, w);
    }

    fn log_backend(&mut self, w: &mut Worker<'_>, b: &Backend, status: u16, bytes: u64) {
        w.stats.status(status);
        w.log.record(&Entry {
            client: self.peers.peer.ip(),
            time: w.date.clf(),
            request_line: b.request_line.as_bytes(),
            status,
            bytes,
            referer: b.referer.as_deref(),
            user_agent: b.user_agent.as_deref(),
        });
        self.answered(w, status, bytes);
    }

    /// Notes an answered request for its service record, written once its
    /// response is sent.
    fn answered(&mut self, w: &Worker<'_>, status: u16, bytes: u64) {
        if w.records.enabled() {
            let (arrived, start) = self.started.take().unwrap_or_else(|| (self.arriving, Instant::now()));
            self.unsent.push(Unsent { arrived, start, status, bytes });
        }
    }

    /// The responses queued so far are sent (or the connection ends):
    /// their service ends now.
    fn write_records(&mut self, w: &mut Worker<'_>) {
        if self.unsent.is_empty() {
            return;
        }
        let now = Instant::now();
        let end = self.sent_at.take().unwrap_or(now);
        let last = self.unsent.len() - 1;
        for (i, u) in self.unsent.drain(..).enumerate() {
            // Responses sent in one write share the stage times (on the
            // last row).
            let stages = if i == last { self.stages.take(now) } else { None };
            w.records.record(&Record {
                accepted: self.accepted,
                arrived: u.arrived,
                start: u.start,
                end,
                status: u.status,
                bytes: u.bytes,
                stages,
            });
        }
    }

    /// Answers `GET location` in place of the program's response.
    fn local_redirect(&mut self, shared: &Shared, w: &mut Worker<'_>, b: &Backend, location: &[u8]) {
        self.redirects += 1;
        if self.redirects > MAX_LOCAL_REDIRECTS {
            log!(Level::Warn, "{}: more than {MAX_LOCAL_REDIRECTS} local redirects", self.peers.peer);
            return self.backend_error(w, b, 500);
        }
        let mut raw = Vec::with_capacity(location.len() + b.host.len() + 64);
        raw.extend_from_slice(b"GET ");
        raw.extend_from_slice(location);
        raw.extend_from_slice(if b.http10 { b" HTTP/1.0\r\nHost: " } else { b" HTTP/1.1\r\nHost: " });
        raw.extend_from_slice(b.host.as_bytes());
        raw.extend_from_slice(match (self.keep_alive, b.http10) {
            (false, _) => b"\r\nConnection: close\r\n\r\n".as_slice(),
            (true, true) => b"\r\nConnection: keep-alive\r\n\r\n",
            (true, false) => b"\r\n\r\n",
        });
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match parse_head(&raw, &shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                self.spool = Spool::default();
                self.answer(shared, w, &req, &raw, true);
            }
            _ => self.backend_error(w, b, 502),
        }
    }

    /// Parses and answers buffered requests. `Some(true)`: answered one,
    /// look again; `Some(false)`: incomplete, more bytes needed; `None`:
    /// close now without an answer.
    fn parse(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<bool> {
        // Taken out so the request can borrow it while `self` answers.
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let result = match parse_head(&rbuf[self.rpos..], &shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                self.redirects = 0;
                if w.records.enabled() {
                    self.started = Some((self.arriving, Instant::now()));
                    // Bytes behind this head (a pipelined request) came
                    // with the latest read at the latest.
                    self.arriving = self.read_at;
                }
                let max = w.config.limits.max_body_bytes.0;
                match BodyReader::new(req.framing, max) {
                    // Earlier answers still queued go out first, so a
                    // `100 Continue` cannot overtake them.
                    Some(_) if !self.out.is_empty() => return self.restore(rbuf, Some(false)),
                    // The body is read (and its framing checked) before the
                    // answer; one larger than allowed is not read at all.
                    Some(reader) if !matches!(req.framing, BodyFraming::Length(n) if n > max) => {
                        if req.expect_continue && !self.send_continue(w) {
                            return self.restore(rbuf, None);
                        }
                        self.body = Some((reader, req.head_len));
                        self.phase = Phase::Body;
                        self.set_clock(Clock::Body, w);
                    }
                    // Answered in the handle stage (the head stays in place).
                    _ if self.stage.is_some() => self.to_answer = Some(false),
                    _ => {
                        let head = &rbuf[self.rpos..self.rpos + req.head_len];
                        self.rpos += req.head_len;
                        self.answer(shared, w, &req, head, false);
                    }
                }
                Some(true)
            }
            Ok(Head::Partial { .. }) => Some(false),
            Err(err) => {
                log!(Level::Info, "{}: bad request: {}", self.peers.peer, err.reason());
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
        self.restore(rbuf, result)
    }

    /// Puts the receive buffer back after a parse that borrowed it.
    fn restore<T>(&mut self, rbuf: Vec<u8>, result: T) -> T {
        self.rbuf = rbuf;
        result
    }

    /// Sends the interim `100 Continue` (RFC 9110 §10.1.1) at once; the
    /// output queue is empty, so it cannot overtake anything.
    fn send_continue(&mut self, w: &Worker<'_>) -> bool {
        const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
        if let Some(tls) = self.tls.as_mut() {
            // Encrypted and written now, or with the answer if the socket
            // is full.
            let n = tls.write_plain(&[std::io::IoSlice::new(CONTINUE)]);
            w.stats.bytes_sent.add(n as u64);
            return n == CONTINUE.len() && tls.send_pending(&self.sock).is_ok();
        }
        let sent = sys::send_vectored(self.sock.as_fd(), &[std::io::IoSlice::new(CONTINUE)], false);
        if let Ok(n) = sent {
            w.stats.bytes_sent.add(n as u64);
        }
        matches!(sent, Ok(n) if n == CONTINUE.len())
    }

    /// Consumes buffered body bytes; answers the request once the body is
    /// complete. `Some(true)`: progress, look again; `Some(false)`: more
    /// bytes needed; `None`: close now.
    fn read_body(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<bool> {
        let Some((reader, head_len)) = self.body.as_mut() else { unreachable!("body phase without a body") };
        let start = self.rpos + *head_len;
        if start == self.rbuf.len() {
            return Some(false);
        }
        let (spool, window) = (&mut self.spool, w.config.limits.body_buffer.usize());
        let mut stored = Ok(());
        let fed = reader.feed(&self.rbuf[start..], |data| {
            if stored.is_ok() {
                stored = spool.push(data, window);
            }
        });
        if let (Ok((_, true)), Ok(())) = (&fed, &stored) {
            stored = self.spool.finish();
        }
        match (fed, stored) {
            (Ok((n, done)), Ok(())) => {
                self.rbuf.drain(start..start + n);
                if !done {
                    return Some(false);
                }
            }
            (fed, stored) => {
                let status = match (fed, stored) {
                    (Err(BodyError::Framing(why)), _) => {
                        log!(Level::Info, "{}: bad request body: {why}", self.peers.peer);
                        400
                    }
                    (Err(BodyError::TooLarge), _) => 413,
                    (_, Err(err)) => {
                        log!(Level::Error, "{}: cannot store a request body: {err}", self.peers.peer);
                        500
                    }
                    (Ok(_), Ok(())) => unreachable!("handled above"),
                };
                self.spool = Spool::default();
                let rbuf = std::mem::take(&mut self.rbuf);
                self.body = None;
                self.answer_error(w, status, first_line(&rbuf[self.rpos..]));
                self.rpos = rbuf.len();
                self.rbuf = rbuf;
                return Some(true);
            }
        }
        self.body = None;
        if self.stage.is_some() {
            // Answered in the handle stage.
            self.to_answer = Some(true);
            return Some(true);
        }
        self.answer_buffered(shared, w, true)
    }

    /// Answers the complete request at `rpos`, parsing its head again (it
    /// was kept in place while its body was read, or while it waited for
    /// the handle stage). `Some(true)`: answered; `None`: close now.
    fn answer_buffered(&mut self, shared: &Shared, w: &mut Worker<'_>, body_read: bool) -> Option<bool> {
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let answered = match parse_head(&rbuf[self.rpos..], &shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                let head = &rbuf[self.rpos..self.rpos + req.head_len];
                self.rpos += req.head_len;
                self.answer(shared, w, &req, head, body_read);
                Some(true)
            }
            _ => None,
        };
        self.rbuf = rbuf;
        if self.waiting.is_none() {
            // What the site did not take (kept for the request's second
            // answer while a file is opened).
            self.spool = Spool::default();
        }
        answered
    }

    /// Answers a complete request (parsed from `head`), queueing the
    /// response. `body_read`: its body (if any) has been read off the
    /// connection.
    fn answer(&mut self, shared: &Shared, w: &mut Worker<'_>, req: &Request<'_>, head: &[u8], body_read: bool) {
        let config = &w.config;
        let limits = &config.limits;
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        self.requests += 1;
        let mut keep_alive = req.keep_alive
            && !w.closing()
            && (limits.keepalive_requests == 0 || self.requests < limits.keepalive_requests);
        // A body not read by now is not read at all (too large): close
        // after the answer.
        let unread_body = req.has_body() && !body_read;
        let too_large = matches!(req.framing, BodyFraming::Length(n) if n > limits.max_body_bytes.0);
        if unread_body {
            keep_alive = false;
        }
        let mut reply = Reply::new(
            &mut self.out,
            w.date.http(),
            &config.server.server_header,
            Conn::fields(&self.tls),
            req.method == Method::Head,
            req.version == Version::Http10,
            keep_alive,
        );
        let answer = if too_large {
            reply.error(413);
            Answer::Done
        } else if let Some(port) = self.redirect {
            let location = tls::https_location(req.host, self.peers.local(&self.sock), port, req.path, req.query);
            reply.redirect(308, location.as_bytes());
            Answer::Done
        } else {
            shared.site.respond(req, &mut self.spool, Ends { peers: &self.peers, sock: &self.sock }, &mut reply, w)
        };
        let ticket = match answer {
            Answer::Backend(job) => {
                self.keep_alive = reply.keep_alive;
                return self.start_backend(w, req, job);
            }
            Answer::Waiting(ticket) => ticket,
            Answer::Done => {
                reply.finish();
                let (status, body_len, keep_alive) = (reply.status, reply.body_len, reply.keep_alive);
                return self.answered_whole(w, req, status, body_len, keep_alive);
            }
        };
        // Not answered yet: answered again once the file is open.
        self.requests -= 1;
        let awaited = Awaited::Open { head: head.to_vec(), body_read };
        if let Some(Status::Closed) = self.wait(shared, w, ticket, awaited) {
            self.answer_error(w, 500, req.request_line.as_bytes());
        }
    }

    /// Counts and logs an answer that is queued whole.
    fn answered_whole(&mut self, w: &mut Worker<'_>, req: &Request<'_>, status: u16, body_len: u64, keep_alive: bool) {
        self.keep_alive = keep_alive;
        w.stats.requests.incr();
        w.stats.status(status);
        w.log.record(&Entry {
            client: self.peers.peer.ip(),
            time: w.date.clf(),
            request_line: req.request_line.as_bytes(),
            status,
            bytes: body_len,
            referer: req.fields.referer,
            user_agent: req.fields.user_agent,
        });
        self.answered(w, status, body_len);
        self.after_answer(w);
    }

    /// Hands the rest of the answer to a started backend.
    fn start_backend(&mut self, w: &mut Worker<'_>, req: &Request<'_>, mut job: Job) {
        w.stats.requests.incr();
        if let Err(err) = job.watch(self.key, w) {
            log!(Level::Error, "cannot watch a backend's descriptor: {err}");
        }
        let owned = |v: Option<&[u8]>| v.map(<[u8]>::to_vec);
        w.backend_jobs += 1;
        self.backend = Some(Box::new(Backend {
            job,
            request_line: req.request_line.to_string(),
            referer: owned(req.fields.referer),
            user_agent: owned(req.fields.user_agent),
            host: req.host.unwrap_or("localhost").to_string(),
            head_only: req.method == Method::Head,
            http10: req.version == Version::Http10,
        }));
        self.phase = Phase::Backend;
        self.set_clock(Clock::Backend, w);
    }

    /// Answers a request that could not be parsed (or timed out) and
    /// closes after it; `line` is what arrived of its request line.
    fn answer_error(&mut self, w: &mut Worker<'_>, status: u16, line: &[u8]) {
        let config = &w.config;
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        let fields = Conn::fields(&self.tls);
        let mut reply =
            Reply::new(&mut self.out, w.date.http(), &config.server.server_header, fields, false, false, false);
        reply.error(status);
        reply.finish();
        // Every answer counts, 408 and a bad body's 400/413 included.
        w.stats.requests.incr();
        w.stats.status(status);
        w.log.record(&Entry {
            client: self.peers.peer.ip(),
            time: w.date.clf(),
            request_line: line,
            status,
            bytes: reply.body_len,
            referer: None,
            user_agent: None,
        });
        let bytes = reply.body_len;
        self.answered(w, status, bytes);
        self.keep_alive = false;
        self.body = None;
        self.phase = Phase::Send;
        self.set_clock(Clock::Send, w);
    }

    /// Decides whether to gather the next pipelined response into the same
    /// write or to start sending.
    fn after_answer(&mut self, w: &mut Worker<'_>) {
        // Not under stages: each answer is handed on to be sent by itself.
        let gather = self.stage.is_none()
            && self.keep_alive
            && self.rpos < self.rbuf.len()
            && self.out.gathers()
            && self.out.queued() < MAX_GATHERED;
        if gather {
            self.phase = Phase::Head;
        } else {
            self.phase = Phase::Send;
            self.set_clock(Clock::Send, w);
        }
    }

    /// Everything queued was sent. Returns a status to return, or `None`
    /// to keep driving.
    fn sent(&mut self, w: &mut Worker<'_>) -> Option<Status> {
        self.write_records(w);
        if !self.keep_alive {
            return Some(self.finish(w));
        }
        self.phase = Phase::Head;
        let clock = if self.rpos < self.rbuf.len() { Clock::Header } else { Clock::Idle };
        self.set_clock(clock, w);
        None
    }

    /// Ends the connection after its last answer: at once when nothing more
    /// can arrive, else by shutting down output and draining input.
    fn finish(&mut self, w: &mut Worker<'_>) -> Status {
        if self.eof_pending && !self.peer_closed {
            // The peer has shut down its side already: read up to its end
            // now and close outright, rather than shut down ours first and
            // linger - the peer would see the end of the response while the
            // connection still counted as open.
            loop {
                self.rbuf.clear();
                self.rpos = 0;
                match self.fill(w) {
                    Fill::Got => {}
                    Fill::Eof => {
                        self.peer_closed = true;
                        break;
                    }
                    Fill::Wait | Fill::Failed => break,
                }
            }
        }
        let unread = self.rpos < self.rbuf.len() || self.may_read || self.body.is_some();
        if let Some(tls) = self.tls.as_mut() {
            tls.close(&self.sock);
        }
        if self.peer_closed || !unread {
            return Status::Closed;
        }
        sys::shutdown_write(self.sock.as_fd());
        self.body = None;
        self.rpos = 0;
        self.rbuf.clear();
        self.phase = Phase::Linger;
        self.set_clock(Clock::Linger, w);
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
    fn closed_mid_head(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        if self.rpos == self.rbuf.len() {
            return Status::Closed;
        }
        // A request line arrived but not the rest: a truncated request.
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let pending = &rbuf[self.rpos..];
        let truncated =
            matches!(parse_head(pending, &shared.http_limits, &mut fields), Ok(Head::Partial { line_complete: true }));
        if truncated {
            self.answer_error(w, 400, first_line(pending));
        }
        self.rpos = rbuf.len();
        self.rbuf = rbuf;
        if !truncated {
            return Status::Closed;
        }
        self.drive(shared, w)
    }

    /// Reads what the socket has into the receive buffer.
    fn fill(&mut self, w: &mut Worker<'_>) -> Fill {
        if !self.may_read && self.tls.is_none() {
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
            let limit = w.config.limits.max_header_bytes.usize() + 1024;
            self.rbuf.reserve(limit.saturating_sub(self.rbuf.len()).max(1024));
        }
        if self.tls.is_some() {
            return self.fill_tls(w);
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
                    if n < spare && !self.eof_pending {
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

    /// `fill` through the TLS session (which may hold decrypted bytes
    /// however the socket's edge stands).
    fn fill_tls(&mut self, w: &mut Worker<'_>) -> Fill {
        let Some(tls) = self.tls.as_mut() else { return Fill::Failed };
        let got =
            tls.fill(&self.sock, &mut self.may_read, self.eof_pending, &mut self.rbuf, &mut self.timer.bytes, w.stats);
        match got {
            Got::Data => Fill::Got,
            Got::Wait => Fill::Wait,
            Got::Eof => Fill::Eof,
            Got::Failed => Fill::Failed,
            Got::PlainHttp => {
                // Answered in plain text, as the client speaks, then closed.
                if let Some(tls) = self.tls.take() {
                    tls.end(w.stats);
                }
                log!(Level::Info, "{}: plain HTTP sent to an HTTPS address", self.peers.peer);
                if self.out.buf.capacity() == 0 {
                    self.out.adopt(w.pool.take());
                }
                self.out.buf.extend_from_slice(tls::PLAIN_HTTP_ANSWER);
                self.out.commit_buf();
                w.stats.requests.incr();
                w.stats.status(400);
                self.keep_alive = false;
                self.phase = Phase::Send;
                self.set_clock(Clock::Send, w);
                Fill::Got
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
    pub fn on_tick(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        if self.timer.clock == Clock::Backend {
            return self.backend_tick(shared, w);
        }
        let t = &w.config.timeouts;
        let (base, min_rate) = match self.timer.clock {
            Clock::Idle if w.closing() => (t.keepalive.0.min(STOP_GRACE), 0),
            Clock::Idle => (t.keepalive.0, 0),
            Clock::Header => (t.header.0, t.header_min_rate),
            Clock::Body => (t.body.0, t.body_min_rate),
            Clock::Send => (t.send.0, t.send_min_rate),
            Clock::Backend => unreachable!("backend deadlines are the job's"),
            Clock::Exit => (reaper::EXIT_GRACE, 0),
            Clock::Linger => (t.linger.0, 0),
            Clock::Disk => (t.send.0, 0),
        };
        let elapsed = w.now.saturating_duration_since(self.timer.start);
        let mut bytes = self.timer.bytes;
        let unacked = (self.timer.clock == Clock::Send).then(|| sys::unacked(self.sock.as_fd()).unwrap_or(0) as u64);
        if self.pace.fast {
            self.pace_tick(unacked, w);
        }
        if let Some(unacked) = unacked {
            // Only what the peer acknowledged was taken: bytes still in the
            // socket's queue would otherwise pay for a reader that does not
            // read (queued before this response, they count against it).
            bytes = bytes.saturating_sub(unacked);
            if !self.send_clamped && bytes < 2 * min_rate * elapsed.as_secs() {
                // A slow reader: the kernel is not to grow its buffer.
                sys::clamp_send_buffer(self.sock.as_fd(), SLOW_SEND_BUFFER);
                self.send_clamped = true;
            }
        }
        if elapsed <= base {
            return Status::Open;
        }
        let earned = Duration::from_secs(bytes.checked_div(min_rate).unwrap_or(0));
        if elapsed <= base + earned {
            return Status::Open;
        }
        if self.timer.clock == Clock::Exit {
            log!(Level::Warn, "{}: CGI program closed its output but did not exit: killed", self.peers.peer);
            self.abort_backend(w);
            return Status::Closed;
        }
        let kind = match self.timer.clock {
            Clock::Idle => TimeoutKind::Idle,
            Clock::Header => TimeoutKind::Header,
            Clock::Body => TimeoutKind::Body,
            Clock::Send | Clock::Linger | Clock::Backend | Clock::Exit | Clock::Disk => TimeoutKind::Send,
        };
        if self.timer.clock != Clock::Linger && !w.closing() {
            w.stats.timeout(kind);
            log!(Level::Info, "{}: {kind:?} timeout", self.peers.peer);
        }
        let partial_head = self.timer.clock == Clock::Header && self.rpos < self.rbuf.len();
        if partial_head || self.timer.clock == Clock::Body {
            // Tell the client, once, then give it the linger time to read.
            self.out.clear();
            let rbuf = std::mem::take(&mut self.rbuf);
            self.answer_error(w, 408, first_line(&rbuf[self.rpos..]));
            self.rpos = rbuf.len();
            self.rbuf = rbuf;
            return self.drive(shared, w);
        }
        if self.timer.clock == Clock::Send {
            // The reader did not take what is queued for it: drop it with
            // the connection rather than let the kernel keep trickling it.
            sys::reset_on_close(self.sock.as_fd());
        }
        Status::Closed
    }

    /// A backend past its deadline is abandoned: `504` (or what the job
    /// says), or a closed connection when part of its response is out.
    fn backend_tick(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        let client_blocked = !self.out.is_empty();
        let Some(b) = self.backend.as_mut() else { return Status::Open };
        let Some(status) = b.job.expired(w.now, shared.site.cgi.timeout, client_blocked, w) else {
            return Status::Open;
        };
        let b = self.end_backend(w, true);
        if b.job.response().head_sent() {
            // Part of the response is out: only closing can say it is
            // incomplete.
            return Status::Closed;
        }
        self.keep_alive = false;
        self.backend_error(w, &b, status);
        self.drive(shared, w)
    }

    /// The server began to stop: an idle connection gets [`STOP_GRACE`]
    /// (a request already on its way is answered, with `Connection:
    /// close`); one with a request in flight finishes it first.
    pub fn begin_stop(&mut self, w: &mut Worker<'_>) {
        if self.timer.clock == Clock::Idle {
            self.set_clock(Clock::Idle, w);
        }
    }

    /// Since when it has been idle between requests (kept alive after an
    /// answer, waiting for the next request).
    pub fn idle_since(&self) -> Option<Instant> {
        (self.timer.clock == Clock::Idle && self.between_requests()).then_some(self.timer.start)
    }

    pub fn peer(&self) -> SocketAddr {
        self.peers.peer
    }

    /// Whether no request is in flight: nothing to answer or send, no
    /// backend; at most the start of the next request is buffered. Such a
    /// connection can move to another server.
    pub fn between_requests(&self) -> bool {
        self.phase == Phase::Head
            && self.out.is_empty()
            && self.backend.is_none()
            && self.body.is_none()
            && self.to_answer.is_none()
    }

    /// Takes the socket and the bytes read and not answered (the engine
    /// has taken the socket out of its set), returning the buffers.
    pub fn into_moved(mut self, w: &mut Worker<'_>) -> Moved {
        let mut pending = std::mem::take(&mut self.rbuf);
        pending.drain(..self.rpos);
        if pending.is_empty() {
            w.pool.give(pending);
            pending = Vec::new();
        }
        let tls = self.tls.take();
        if let Some(t) = &tls {
            t.leave(w.stats);
        }
        self.recycle(w);
        Moved { stream: self.sock, peer: self.peers.peer, pending, tls }
    }

    /// A connection handed over by a replaced server: it continues here as
    /// if its pending bytes had just been read.
    pub fn adopt(key: usize, moved: Moved, w: &mut Worker<'_>) -> Conn {
        let mut conn = Conn::new(key, moved.stream, moved.peer, w);
        conn.may_read = true;
        if let Some(tls) = moved.tls {
            tls.join(w.stats);
            conn.tls = Some(tls);
            conn.fresh = false;
        }
        if moved.pending.is_empty() {
            conn.set_clock(Clock::Idle, w);
        } else {
            conn.rbuf = moved.pending;
        }
        conn
    }

    /// Returns the connection's buffers to the pool (and abandons any
    /// backend) before it is dropped.
    pub fn recycle(&mut self, w: &mut Worker<'_>) {
        self.abort_backend(w);
        self.write_records(w);
        if let Some(tls) = self.tls.take() {
            tls.end(w.stats);
        }
        // Off the worker's idle count: it is ending.
        self.set_clock(Clock::Linger, w);
        if let Some(waiting) = self.waiting.take() {
            // The pool finishes the task; nobody waits for it.
            let _ = w.watcher.unwatch(waiting.ticket.fd());
        }
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
