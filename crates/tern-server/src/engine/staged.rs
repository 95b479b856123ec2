//! The `staged` engine (the task-based architecture, as SEDA): a
//! connection with work passes through stages — read (and parse) → handle
//! (resolve and open, start a CGI program or FastCGI request) → send (and
//! relay a backend's output) → log (service records, on to the next
//! request or the close) — each served by threads of its own (`[staged]`),
//! with a bounded queue in front of each. A full queue pushes back: the
//! stage before waits to hand on; nothing is dropped.
//!
//! The fronts are the pool engine's (they accept, and watch connections
//! that wait on their socket in epoll), and each stage's threads are pool
//! threads with a queue of their own: a connection waiting for its client
//! (its next request, more of its body, room to send) goes back to its
//! front and, once its socket is ready, into the queue of the stage it
//! waited in, so no stage thread waits on a client. The queues run one way,
//! read → handle → send → log: a connection whose work moves back to an
//! earlier stage (the log stage's next request) goes through its front's
//! unbounded return, so the bounded queues form no circle and pushing back
//! cannot deadlock.
//!
//! `Conn` stops where its work moves to another stage (`Conn::enter_stage`)
//! and says which (`Status::Next`); the code that runs is the code every
//! engine runs.

use std::io;
use std::net::TcpListener;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel as channel;
use serde::Deserialize;

use crate::service_records::Stage;
use crate::shared::Shared;
use crate::values::first_broken;
use crate::worker::Worker;

use super::blocking::Left;
use super::front::{self, Started, MAX_THREADS, THREADS_RANGE};
use super::pool::{self, Backs, Ready, Work};

/// The most connections a stage's queue may hold (the queue's slots are
/// allocated at start).
pub const MAX_STAGE_QUEUE: usize = 1_000_000;

/// `[staged]`: the staged engine (`server.model = "staged"`): each stage's
/// threads, and the bounded queue in front of each stage.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Staged {
    /// Threads reading and parsing requests (and their bodies, and
    /// lingering), 1–100000. Default 2.
    pub read_threads: usize,
    /// Threads answering requests: resolving and opening files, starting
    /// CGI programs and FastCGI requests (1–100000). Default 2.
    pub handle_threads: usize,
    /// Threads sending answers; one relays a backend's output for as long
    /// as the program runs, so these bound the backends served at once
    /// (1–100000). Default 16.
    pub send_threads: usize,
    /// Threads writing service records and passing a connection on to its
    /// next request or its close (1–100000). Default 1.
    pub log_threads: usize,
    /// Connections each stage's queue holds; when one is full, the stage
    /// before it waits (nothing is dropped), 1–1000000. Default 256.
    pub queue: usize,
}

impl Default for Staged {
    fn default() -> Self {
        Staged { read_threads: 2, handle_threads: 2, send_threads: 16, log_threads: 1, queue: 256 }
    }
}

impl Staged {
    /// Threads per stage, in the stages' order (read, handle, send, log).
    pub fn threads(&self) -> [usize; 4] {
        [self.read_threads, self.handle_threads, self.send_threads, self.log_threads]
    }

    /// The first rule of `[staged]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        let threads = |n: usize| !(1..=MAX_THREADS).contains(&n);
        first_broken([
            (threads(self.read_threads), "read_threads", THREADS_RANGE),
            (threads(self.handle_threads), "handle_threads", THREADS_RANGE),
            (threads(self.send_threads), "send_threads", THREADS_RANGE),
            (threads(self.log_threads), "log_threads", THREADS_RANGE),
            (!(1..=MAX_STAGE_QUEUE).contains(&self.queue), "queue", "must be between 1 and 1000000"),
        ])
    }
}

/// Statistics blocks: one per front, then one per stage thread.
pub fn stat_blocks(fronts: usize, config: &Staged) -> usize {
    fronts + config.threads().iter().sum::<usize>()
}

/// Starts a front per listener set, then each stage's threads.
pub fn start(shared: &Arc<Shared>, config: &Staged, per_worker: Vec<Vec<TcpListener>>) -> io::Result<Started> {
    let fronts = per_worker.len();
    let (queues, inputs): (Vec<_>, Vec<_>) = Stage::ALL.iter().map(|_| channel::bounded::<Work>(config.queue)).unzip();
    let (mut started, backs) = pool::start_fronts(shared, per_worker, queues.clone())?;
    let mut block = fronts;
    for (stage, count) in Stage::ALL.into_iter().zip(config.threads()) {
        shared.server.stages[stage as usize].threads.store(count as u64, Relaxed);
        // A stage's threads hold the senders of the later stages only: once
        // the fronts have ended, each queue closes after the stages before
        // it have ended, and every stage thread ends.
        let later: Arc<[Option<channel::Sender<Work>>]> =
            queues.iter().enumerate().map(|(i, q)| (i > stage as usize).then(|| q.clone())).collect();
        for i in 0..count {
            let (shared2, later, backs) = (shared.clone(), later.clone(), backs.clone());
            let input = inputs[stage as usize].clone();
            let thread = front::spawn(format!("tern-{}-{i}", stage.name()), None, move || {
                let stats = &shared2.server.stages[stage as usize];
                pool::run_thread(&shared2, block, &input, |w, work| {
                    stats.queued(input.len());
                    pass(&shared2, w, stage, work, &later, &backs);
                })
            })?;
            started.threads.push(thread);
            block += 1;
        }
    }
    Ok(started)
}

/// Runs one connection through `stage`, then hands it on: into a later
/// stage's queue (waiting while that is full), else back to its front.
fn pass(
    shared: &Shared,
    w: &mut Worker<'_>,
    stage: Stage,
    work: Work,
    later: &[Option<channel::Sender<Work>>],
    backs: &Backs,
) {
    let Work { mut conn, front: home, ready, since } = work;
    let start = Instant::now();
    conn.enter_stage(stage, start.saturating_duration_since(since), start);
    let left = pool::serve(shared, w, &mut conn, ready);
    let end = Instant::now();
    conn.leave_stage(end);
    shared.server.stages[stage as usize].worked(end.saturating_duration_since(start));
    if let Left::Next(next) = left {
        if let Some(queue) = &later[next as usize] {
            // Off this thread's idle count, onto the next one's.
            conn.depart(w);
            let work = Work { conn, front: home, ready: Ready::default(), since: end };
            match queue.send(work) {
                Ok(()) => shared.server.stages[next as usize].queued(queue.len()),
                // That stage's threads are gone (the server is ending).
                Err(channel::SendError(work)) => {
                    work.conn.arrive(w);
                    pool::hand_back(shared, w, backs, home, work.conn, Left::Closed);
                }
            }
            return;
        }
    }
    // Waiting on its socket, closed, or with work for an earlier stage:
    // through the front.
    pool::hand_back(shared, w, backs, home, conn, left);
}
