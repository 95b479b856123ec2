//! Waiting for the I/O pool (phase `Wait`): a file the site asked to open,
//! or a cold file region the output queue needs read, is handed to the
//! pool; its ticket's signal becomes the connection's second descriptor,
//! and the connection resumes where it stopped once the pool is done —
//! answering the request again with what was opened, or putting the read
//! bytes in the queue.
//!
//! Only for a connection whose engine lends a pool (a reactor, which must
//! never wait for a disk). It never opens or reads a file itself.

use std::sync::Arc;

use tern_http::request::{parse_head, Head, MAX_HEADERS};

use crate::error_log::{log, Level};
use crate::offload::{Done, Ticket};
use crate::shared::Shared;
use crate::spool::Spool;
use crate::sys;
use crate::worker::Worker;

use super::state::{Awaited, Clock, Conn, Phase, Status, Timer, Waiting};

impl Conn {
    /// Hands `ticket`'s work to the I/O pool's care: its signal becomes the
    /// connection's second descriptor, and the connection waits.
    pub(super) fn wait(
        &mut self,
        shared: &Shared,
        w: &mut Worker<'_>,
        ticket: Arc<Ticket>,
        awaited: Awaited,
    ) -> Option<Status> {
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
    pub(super) fn resume(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<Status> {
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
}
