//! Deadlines: a clock per phase (idle, header, body, send, backend, exit,
//! linger, disk; `limits::Timeouts`), each with a minimum data rate that
//! extends it, and the once-a-second tick that enforces it — a `408` to a
//! client that stalled mid-request, a closed (and, while sending, reset)
//! connection otherwise. The clock also keeps the worker's count of idle
//! connections (`room.rs`), here and as a connection moves between
//! threads ([`Conn::depart`], [`Conn::arrive`]), and gives an idle
//! connection its grace when the server stops.
//!
//! It measures and decides; the answer to a stalled request is
//! `answer.rs`'s, the socket's reader is measured by the transport, and a
//! backend's deadline is its job's (`relay.rs`; an HTTP/2 stream's,
//! `stream_relay.rs`).

use std::time::{Duration, Instant};

use crate::error_log::{log, Level};
use crate::metrics::TimeoutKind;
use crate::reaper;
use crate::shared::Shared;
use crate::worker::Worker;

use super::request::first_line;
use super::state::{Clock, Conn, Phase, Status, Timer};

/// How long an idle connection stays open once the server stops: a
/// request the client sent before it could see the close still arrives and
/// is answered.
const STOP_GRACE: Duration = Duration::from_secs(1);

impl Conn {
    /// Starts `clock` now, keeping the worker's idle count.
    pub(super) fn set_clock(&mut self, clock: Clock, w: &mut Worker<'_>) {
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

    /// Called about once a second: enforces the phase's deadline.
    pub fn on_tick(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        let session = self.phase == Phase::Session;
        if session && self.stream_jobs_tick(shared, w) == Status::Closed {
            return Status::Closed;
        }
        if self.timer.clock == Clock::Backend && !session {
            return self.backend_tick(shared, w);
        }
        if w.closing() && self.phase == Phase::Session && self.drive(shared, w) == Status::Closed {
            // An HTTP/2 client is told (`GOAWAY`) before its idle
            // connection closes under it.
            return Status::Closed;
        }
        if self.timer.clock == Clock::Backend {
            // An HTTP/2 connection waiting for its streams' backends alone:
            // their deadlines are theirs (looked at above).
            return Status::Open;
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
        let sending = self.timer.clock == Clock::Send;
        let bytes = self.io.on_tick(sending, self.timer.bytes, elapsed, min_rate, self.out.written, w);
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
        if sending {
            // The reader did not take what is queued for it: drop it with
            // the connection rather than let the kernel keep trickling it.
            self.io.reset_on_close();
        }
        Status::Closed
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
}
