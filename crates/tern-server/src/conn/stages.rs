//! The hooks of an engine of stages (the staged engine): once it enters a
//! connection in a stage, the connection stops where its work moves to
//! another stage — reading (`Read`), answering a parsed request
//! (`Handle`), sending (`Send`), writing the sent responses' records and
//! going on (`Log`) — and its service records carry its time per stage.
//!
//! The code that runs is the same as under every engine; only the answer
//! to pipelined requests is not gathered into one write, as each is handed
//! from stage to stage. Nothing here runs a phase: it only says which
//! stage the work is in.

use std::time::{Duration, Instant};

use crate::service_records::Stage;

use super::state::{Conn, Phase};

impl Conn {
    /// An engine of stages runs the connection in `stage` from `now`,
    /// after `queued` in that stage's queue. From then on the connection
    /// stops where its work moves to another stage (returning
    /// [`Status::Next`](super::state::Status::Next)).
    pub fn enter_stage(&mut self, stage: Stage, queued: Duration, now: Instant) {
        self.stage = Some(stage);
        self.records.stages.enter(stage, queued, now);
    }

    /// The stage entered last is left at `now`.
    pub fn leave_stage(&mut self, now: Instant) {
        self.records.stages.leave(now);
    }

    /// The stage its work is in, when it is driven by stages: where the
    /// engine queues it once its socket is ready.
    pub fn stage(&self) -> Option<Stage> {
        self.stage.map(|current| self.work_stage(current))
    }

    /// Which stage the connection's work belongs to (`current` while it
    /// waits for the I/O pool).
    pub(super) fn work_stage(&self, current: Stage) -> Stage {
        if self.to_answer.is_some() {
            return Stage::Handle;
        }
        if self.to_log {
            return Stage::Log;
        }
        match self.phase {
            // An HTTP/2 session reads, answers and sends at once.
            Phase::Head | Phase::Body | Phase::Linger | Phase::Session => Stage::Read,
            Phase::Send | Phase::Backend => Stage::Send,
            Phase::Wait => current,
        }
    }
}
