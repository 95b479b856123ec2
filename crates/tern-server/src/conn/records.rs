//! What one connection notes for its service records
//! (`log.service_records`): when it was accepted; when the request being
//! read arrived (the readiness that brought its first bytes,
//! [`Worker::seen`]) and when the latest bytes did (what a pipelined
//! request behind the current one arrived with); when the current request
//! arrived and its service started; its time in the staged engine's
//! stages; and the answered requests whose responses are not all sent
//! yet, written as records once they are.
//!
//! The clock is read for them only when they are kept. It only notes:
//! nothing here may steer the exchange.

use std::time::Instant;

use crate::service_records::{Record, StageAccount};
use crate::worker::Worker;

pub(super) struct Records {
    accepted: Instant,
    arriving: Instant,
    read_at: Instant,
    started: Option<(Instant, Instant)>,
    unsent: Vec<Unsent>,
    /// When the queued responses were all sent, when their records are
    /// written later (in the staged engine's log stage).
    sent_at: Option<Instant>,
    /// Time in the staged engine's stages.
    pub(super) stages: StageAccount,
}

/// An answered request waiting for the end of its response.
struct Unsent {
    arrived: Instant,
    start: Instant,
    status: u16,
    bytes: u64,
}

impl Records {
    /// For a connection accepted now (the readiness `w.seen` brought it).
    pub(super) fn new(w: &Worker<'_>) -> Records {
        Records {
            accepted: if w.records.enabled() { Instant::now() } else { w.now },
            arriving: w.seen,
            read_at: w.seen,
            started: None,
            unsent: Vec::new(),
            sent_at: None,
            stages: StageAccount::default(),
        }
    }

    /// Bytes arrived with the readiness seen at `seen`; `new_request`:
    /// nothing was buffered, they start a request.
    pub(super) fn read(&mut self, seen: Instant, new_request: bool) {
        self.read_at = seen;
        if new_request {
            self.arriving = seen;
        }
    }

    /// A request's head is complete: its service starts now.
    pub(super) fn start(&mut self, w: &Worker<'_>) {
        if w.records.enabled() {
            self.started = Some((self.arriving, Instant::now()));
            // Bytes behind this head (a pipelined request) came with the
            // latest read at the latest.
            self.arriving = self.read_at;
        }
    }

    /// Notes an answered request for its service record, written once its
    /// response is sent.
    pub(super) fn answered(&mut self, w: &Worker<'_>, status: u16, bytes: u64) {
        if w.records.enabled() {
            let (arrived, start) = self.started.take().unwrap_or_else(|| (self.arriving, Instant::now()));
            self.unsent.push(Unsent { arrived, start, status, bytes });
        }
    }

    /// The queued responses are all sent, their records to be written
    /// later.
    pub(super) fn sent(&mut self, w: &Worker<'_>) {
        if w.records.enabled() {
            self.sent_at = Some(Instant::now());
        }
    }

    /// The responses queued so far are sent (or the connection ends):
    /// their service ends now.
    pub(super) fn write(&mut self, w: &mut Worker<'_>) {
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
}
