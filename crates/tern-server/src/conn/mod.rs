//! The connection: one state machine for every engine.
//!
//! An engine tells a connection that its socket may be readable or writable
//! (or that a second has passed); the connection reads, asks the HTTP crate
//! to parse, hands complete requests to the site, and writes the answers,
//! until the socket would block. It never waits: whoever drives it decides
//! how to wait (epoll here; `poll(2)` on one socket in a thread model).
//!
//! The transport — socket, TLS session (`tls.rs`), edge-triggered
//! readiness, the reader's pace — is apart from the HTTP/1.1 exchange that
//! runs over it; the receive buffer and the output queue are between them.
//! On an HTTPS address the bytes pass through the session on the way in
//! and out, and the exchange does not know. A redirecting address answers
//! every request with `308` to its HTTPS URL.
//!
//! The phases run `Head` → (`Body`) → (`Backend`) → `Send` → `Head` … →
//! `Linger`, with `Wait` while the I/O pool works. Each piece is an
//! `impl Conn` of one concern, or a part the connection holds:
//!
//! - `state.rs`: the [`Conn`] struct, its phases and clocks — the types
//!   the pieces share;
//! - `transport.rs`: the socket and its TLS session, readiness, the
//!   reader's pace — every read, write and option on the socket;
//! - `request.rs`: reading requests — the receive buffer, the head, the
//!   body (phases `Head`, `Body`); `request_body.rs`, the body's decoder;
//! - `answer.rs`: handing a request to the site and queueing its answer;
//! - `relay.rs`: a backend's output relayed as the response (`Backend`);
//!   `backend.rs`, what is kept of a request a backend answers;
//! - `h2.rs`, `streams.rs`, `stream_relay.rs`: HTTP/2 — the session, its
//!   streams answered through the exchange, their backends (`Session`);
//! - `send.rs`: writing the queue, what follows, the end (`Send`,
//!   `Linger`);
//! - `waiting.rs`: waiting for the I/O pool (`Wait`);
//! - `deadline.rs`: a clock per phase and the tick that enforces it;
//! - `stages.rs`: the staged engine's hooks;
//! - `records.rs`: what the connection notes for service records.
//!
//! This file composes them: the face the engines call (readiness, the
//! hand-over to another server, the end) and `drive`, the loop
//! that runs the phases. It does no reading, parsing or answering itself.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::body::{OutQueue, Sending};
use crate::handover::Moved;
use crate::http2::Protocol;
use crate::shared::Shared;
use crate::site::Peers;
use crate::spool::Spool;
use crate::tls::Role;
use crate::worker::{Wait, Worker};

mod answer;
mod backend;
mod deadline;
mod h2;
mod h2_frames;
mod h2c_upgrade;
mod records;
mod relay;
mod request;
mod request_body;
mod send;
mod stages;
mod state;
mod stream_relay;
mod streams;
mod transport;
mod waiting;

use records::Records;
use send::{Sent, MAX_GATHERED};
use state::{Clock, Phase, Timer};
use transport::{Fill, Ring, RingSend, Transport};

pub use state::{Conn, Status};
pub use transport::{Fetch, Received};

impl Conn {
    pub fn new(key: usize, sock: TcpStream, peer: SocketAddr, w: &Worker<'_>) -> Conn {
        // TCP_NODELAY comes with the socket, from its listener (`server.rs`).
        let st = &w.config.static_files;
        Conn {
            key,
            io: Transport::new(sock),
            peers: Peers::new(peer),
            rbuf: Vec::new(),
            rpos: 0,
            out: OutQueue::new(st.read_chunk.usize(), st.sendfile_max_chunk.0, w.offload.is_some()),
            phase: Phase::Head,
            keep_alive: true,
            requests: 0,
            body: None,
            spool: Spool::default(),
            backend: None,
            redirects: 0,
            timer: Timer { clock: Clock::Header, start: w.now, bytes: 0 },
            records: Records::new(w),
            stage: None,
            to_answer: None,
            to_log: false,
            fresh: true,
            redirect: None,
            h2c: false,
            waiting: None,
            h2: None,
        }
    }

    /// A connection handed over by a replaced server: it continues here as
    /// if its pending bytes had just been read.
    pub fn adopt(key: usize, moved: Moved, w: &mut Worker<'_>) -> Conn {
        let mut conn = Conn::new(key, moved.stream, moved.peer, w);
        conn.io.may_read = true;
        if let Some(tls) = moved.tls {
            tls.join(w.stats);
            conn.io.tls = Some(tls);
            conn.fresh = false;
        }
        if moved.pending.is_empty() {
            conn.set_clock(Clock::Idle, w);
        } else {
            conn.rbuf = moved.pending;
        }
        conn
    }

    /// Looks up what the listening address is for: starts the TLS session
    /// on an HTTPS address, and notes whether it speaks HTTP/2. (Its own
    /// address is asked for only when some address says for itself.)
    fn open(&mut self, shared: &Shared, w: &Worker<'_>) {
        self.fresh = false;
        let spoken = match shared.http2.per_address() {
            true => shared.http2.at(self.peers.local(&self.io.sock)),
            false => &w.config.http2.protocols,
        };
        let Some(setup) = &shared.tls else {
            self.h2c = spoken.contains(&Protocol::H2c);
            return;
        };
        match setup.role(self.peers.local(&self.io.sock)) {
            Role::Http => self.h2c = spoken.contains(&Protocol::H2c),
            Role::Https => self.io.tls = setup.session(w.stats, spoken.contains(&Protocol::H2)),
            Role::Redirect => self.redirect = Some(setup.https_port()),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.io.sock.as_raw_fd()
    }

    /// The socket, for a blocking engine's `poll(2)`.
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.io.sock.as_fd()
    }

    pub fn peer(&self) -> SocketAddr {
        self.peers.peer
    }

    /// What a blocking engine waits for: the socket's directions not known
    /// to be ready, and the backends' descriptors while they run (the
    /// connection's one, or its HTTP/2 streams').
    pub fn waits(&self) -> (Wait, impl Iterator<Item = (BorrowedFd<'_>, Wait)>) {
        let streams = self.h2.iter().flat_map(|s| s.streams.iter()).filter_map(|s| s.backend.as_ref());
        (self.io.waits(), self.backend.iter().chain(streams).filter_map(|b| b.job.wait()))
    }

    /// Whether it waits on its socket alone (no backend runs): a
    /// thread-pool engine leaves such a connection to its epoll set rather
    /// than block a thread on it.
    pub fn waits_on_socket_only(&self) -> bool {
        self.backend.is_none() && !self.h2.as_ref().is_some_and(|s| s.streams.iter().any(|s| s.backend.is_some()))
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
        self.io.ready(readable, writable, read_closed);
        if hangup && (self.backend.is_some() || self.waiting.is_some()) {
            // The client is gone: the program's work is abandoned. (A mere
            // half-close is not an abort: the client may still read.)
            self.abort_backend(w);
            return Status::Closed;
        }
        self.drive(shared, w)
    }

    /// Has the connection's bytes move through the engine's ring from now
    /// on (completion I/O), if it can: a plain connection can, one with a
    /// TLS session cannot (the session reads and writes its socket
    /// itself). Whether it does.
    pub fn take_ring(&mut self, shared: &Shared, w: &Worker<'_>) -> bool {
        if self.fresh {
            self.open(shared, w);
        }
        if self.io.tls.is_none() {
            self.io.ring = Some(Ring::default());
        }
        self.io.ring.is_some()
    }

    /// Whether the engine is to receive for it through the ring: nothing
    /// received waits to be read.
    pub fn wants_data(&self) -> bool {
        self.io.wants_data()
    }

    /// A receive through the ring brought `got`.
    pub fn on_received(&mut self, shared: &Shared, w: &mut Worker<'_>, got: Received) -> Status {
        let failed = self.io.received(got);
        self.on_ready(shared, w, false, false, false, failed)
    }

    /// Gathers the send the connection asked its engine for into `s` (the
    /// engine submits it and reports with [`Conn::on_sent`]); false when it
    /// asked for none.
    pub fn ring_send(&mut self, s: &mut Sending) -> bool {
        let Some(ring) = self.io.ring.as_mut() else { return false };
        if ring.send != RingSend::Wanted {
            return false;
        }
        let gathered = self.out.gather_into(s);
        debug_assert!(gathered, "a send asked for with nothing to gather");
        ring.send = if gathered { RingSend::InFlight } else { RingSend::Idle };
        self.io.may_write = !gathered;
        gathered
    }

    /// A send through the ring completed: the bytes it sent, or its error.
    pub fn on_sent(&mut self, shared: &Shared, w: &mut Worker<'_>, result: io::Result<usize>) -> Status {
        self.io.sent(&mut self.out, result, &mut self.timer.bytes, w);
        self.drive(shared, w)
    }

    /// The file region the connection asked its engine to read through
    /// the ring (the `uring` method), taken; the engine reports with
    /// [`Conn::on_fetched`].
    pub fn ring_fetch(&mut self) -> Option<Fetch> {
        self.io.ring.as_mut()?.fetch.take()
    }

    /// The ring read the bytes at `offset` asked for (or failed to: a read
    /// that came back short found the file shrunk).
    pub fn on_fetched(&mut self, shared: &Shared, w: &mut Worker<'_>, offset: u64, got: io::Result<Vec<u8>>) -> Status {
        self.io.may_write = true;
        match got {
            Ok(bytes) => self.out.insert_read(offset, bytes),
            Err(err) => {
                self.read_failed(&err);
                return Status::Closed;
            }
        }
        self.drive(shared, w)
    }

    /// Whether a write made by the connection itself blocked and it waits
    /// for room (the engine reports it with [`Conn::on_ready`], writable).
    pub fn wants_writable(&self) -> bool {
        self.io.ring.as_ref().is_some_and(|r| r.writable)
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
        } else if self.phase == Phase::Session {
            self.tell_stream_jobs();
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
        self.ring_stream_jobs();
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

    /// Runs the phases until the connection must wait (for its socket, its
    /// backend, the I/O pool or another stage) or ends.
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
                if self.rpos == self.rbuf.len() && !self.io.peer_closed && !self.io.readable() {
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
                        self.records.sent(w);
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
                    // HTTP/2 is chosen before the first request.
                    let opening = self.requests == 0 && self.rpos == 0;
                    if opening && self.chose_h2() {
                        self.start_session(w);
                        continue;
                    }
                    if self.rpos < self.rbuf.len() && !(opening && self.preface_pending()) {
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
                    if self.io.peer_closed {
                        return self.closed_mid_head(shared, w);
                    }
                    let new_request = self.rpos == self.rbuf.len();
                    match self.fill(w) {
                        Fill::Got => {
                            self.records.read(w.seen, new_request);
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
                        Fill::Eof => {}
                        Fill::Failed => return Status::Closed,
                    }
                }
                Phase::Body => {
                    match self.read_body(shared, w) {
                        Some(true) => continue,
                        Some(false) => {}
                        None => return Status::Closed,
                    }
                    if self.io.peer_closed {
                        return Status::Closed;
                    }
                    match self.fill(w) {
                        Fill::Got | Fill::Eof => {}
                        Fill::Wait => return Status::Open,
                        Fill::Failed => return Status::Closed,
                    }
                }
                Phase::Backend => {
                    // A tunnel (after `101`): the client's bytes go up too.
                    match self.tunnel_up(w) {
                        Some(true) => continue,
                        Some(false) => {}
                        None => return Status::Closed,
                    }
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
                Phase::Session => return self.drive_session(shared, w),
                Phase::Linger => return self.linger(w),
                Phase::Wait => return Status::Open,
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
        if let Some(staged) = self.io.take_staged() {
            pending.extend_from_slice(&staged);
            w.pool.give(staged);
        }
        if pending.is_empty() {
            w.pool.give(pending);
            pending = Vec::new();
        }
        let tls = self.io.tls.take();
        if let Some(t) = &tls {
            t.leave(w.stats);
        }
        self.recycle(w);
        Moved { stream: self.io.sock, peer: self.peers.peer, pending, tls }
    }

    /// Returns the connection's buffers to the pool (and abandons any
    /// backend) before it is dropped.
    pub fn recycle(&mut self, w: &mut Worker<'_>) {
        self.abort_backend(w);
        self.records.write(w);
        self.io.end_tls(w.stats);
        // Off the worker's idle count: it is ending.
        self.set_clock(Clock::Linger, w);
        if let Some(waiting) = self.waiting.take() {
            // The pool finishes the task; nobody waits for it.
            let _ = w.watcher.unwatch(waiting.ticket.fd());
        }
        self.forget_streams(w);
        w.pool.give(std::mem::take(&mut self.rbuf));
        if let Some(staged) = self.io.take_staged() {
            w.pool.give(staged);
        }
        self.out.clear();
        let (buf, _) = self.out.release();
        w.pool.give(buf);
    }
}
