//! Engines decide who runs the connection code and how it waits, never
//! what it does: every engine drives the same `Conn` and site.
//!
//! An engine is handed the server's `Shared` and its listening sockets and
//! needs nothing else: each of its threads takes a `Worker` from
//! `Shared::worker` (lending its own `Watcher` for backend descriptors) and
//! calls `Conn` with `&Shared` and that `Worker`.
//!
//! - `event.rs`: a reactor (epoll) per worker thread; `busy_poll.rs`: how
//!   it polls again before it sleeps.
//! - `pool.rs`: fronts (epoll) accept and park idle connections; a fixed
//!   set of threads serves those with work (`blocking.rs`).
//! - `staged.rs`: the pool's fronts, and threads per stage (read, handle,
//!   send, log) with bounded queues between them.
//! - `per_request.rs`: a thread per connection (`blocking.rs`).
//! - `uring/`: a reactor per worker thread on io_uring (completion I/O).
//! - `watch.rs`: what a reactor's epoll set watches besides sockets
//!   (backend descriptors, file changes, the waker).
//! - `front.rs`: starting threads, admission and counts, shared by all.

pub mod blocking;
pub mod busy_poll;
pub mod event;
pub mod front;
pub mod per_request;
pub mod pool;
pub mod staged;
pub mod uring;
pub mod watch;

use std::io;
use std::net::TcpListener;
use std::sync::Arc;

use std::time::Duration;

use serde::Deserialize;

use crate::shared::Shared;
use staged::Staged;

pub use front::Started;

/// The concurrency model (SPEC 2.6): who runs the one connection state
/// machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// A reactor per worker thread (epoll).
    Event,
    /// Acceptors feed one queue; `server.threads` serve a connection while
    /// it has work, an idle one waits in its acceptor's epoll set.
    Pool,
    /// Threads per stage with bounded queues between them (`[staged]`).
    Staged,
    /// A thread per connection, blocking in `poll(2)`.
    PerRequest,
    /// A reactor per worker thread on io_uring: accepts, receives and
    /// sends through a ring, one submission per loop turn (Linux 6.1 or
    /// later; refused at start where io_uring is disabled).
    Uring,
}

impl Model {
    /// Every model there is, built or not: what the lab's E3 tries, each
    /// kept only when `Config::parse` accepts it.
    pub const ALL: [Model; 5] = [Model::Event, Model::Pool, Model::Staged, Model::PerRequest, Model::Uring];

    pub fn name(self) -> &'static str {
        match self {
            Model::Event => "event",
            Model::Pool => "pool",
            Model::Staged => "staged",
            Model::PerRequest => "per-request",
            Model::Uring => "uring",
        }
    }
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "event" => Ok(Model::Event),
            "pool" => Ok(Model::Pool),
            "staged" => Ok(Model::Staged),
            "per-request" => Ok(Model::PerRequest),
            "uring" => Ok(Model::Uring),
            _ => Err(format!("unknown model `{s}` (expected event, pool, staged, per-request or uring)")),
        }
    }
}

/// What the engines are told of the configuration (`Config::engine`):
/// `[server]`'s concurrency model and the keys that tune it, and
/// `[staged]`. `config/` sits above the engines, so they read this
/// instead of the sections.
#[derive(Clone, Debug)]
pub struct Plan {
    pub model: Model,
    /// `server.threads` (`pool`).
    pub threads: usize,
    /// `server.max_threads` (`per-request`).
    pub max_threads: usize,
    /// `server.busy_poll` (`event`).
    pub busy_poll: Duration,
    /// `server.batch_wait` (`uring`).
    pub batch_wait: Duration,
    /// `server.defer_accept`: a new connection comes with its first bytes.
    pub defer_accept: Duration,
    pub staged: Staged,
}

/// Statistics blocks the engine's threads need (each thread that serves
/// connections writes its own) with `workers` listener sets.
pub fn stat_blocks(plan: &Plan, workers: usize) -> usize {
    match plan.model {
        Model::Pool => pool::stat_blocks(workers, plan.threads),
        Model::PerRequest => per_request::stat_blocks(plan.max_threads),
        Model::Staged => staged::stat_blocks(workers, &plan.staged),
        Model::Event | Model::Uring => workers,
    }
}

/// Whether the planned engine can run here: `uring` needs io_uring (the
/// error names why not); the others run everywhere.
pub fn probe(plan: &Plan) -> io::Result<()> {
    match plan.model {
        Model::Uring => uring::probe(),
        _ => Ok(()),
    }
}

/// Starts the planned engine on the listener sets (one per worker).
pub fn start(shared: &Arc<Shared>, plan: &Plan, per_worker: Vec<Vec<TcpListener>>) -> io::Result<Started> {
    match plan.model {
        Model::Event => {
            let mut sets = per_worker.into_iter();
            let tuning = event::Tuning { busy_poll: plan.busy_poll, defer_accept: plan.defer_accept };
            front::fronts(shared, sets.len(), "tern-worker", |index| {
                let (shared, listeners) = (shared.clone(), sets.next().unwrap_or_default());
                move |inbox, ready| event::run(&shared, tuning, index, listeners, inbox, ready)
            })
        }
        Model::Uring => {
            let mut sets = per_worker.into_iter();
            let tuning = uring::Tuning { batch_wait: plan.batch_wait, defer_accept: plan.defer_accept };
            front::fronts(shared, sets.len(), "tern-worker", |index| {
                let (shared, listeners) = (shared.clone(), sets.next().unwrap_or_default());
                move |inbox, ready| uring::run(&shared, tuning, index, listeners, inbox, ready)
            })
        }
        Model::Pool => pool::start(shared, plan.threads, per_worker),
        Model::PerRequest => {
            // One acceptor for every listener.
            let listeners: Vec<TcpListener> = per_worker.into_iter().flatten().collect();
            let mut listeners = Some(listeners);
            let max_threads = plan.max_threads;
            front::fronts(shared, 1, "tern-acceptor", |_| {
                let (shared, listeners) = (shared.clone(), listeners.take().unwrap_or_default());
                move |inbox, ready| per_request::run(&shared, max_threads, listeners, inbox, ready)
            })
        }
        Model::Staged => staged::start(shared, &plan.staged, per_worker),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names() {
        assert_eq!("per-request".parse::<Model>(), Ok(Model::PerRequest));
        assert!("fork".parse::<Model>().unwrap_err().contains("expected event, pool, staged, per-request or uring"));
        assert!(Model::ALL.iter().all(|m| m.name().parse() == Ok(*m)));
    }
}
