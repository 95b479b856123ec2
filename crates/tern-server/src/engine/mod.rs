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

use crate::config::{Config, Model};
use crate::shared::Shared;

pub use front::Started;

/// Statistics blocks the engine's threads need (each thread that serves
/// connections writes its own) with `workers` listener sets.
pub fn stat_blocks(config: &Config, workers: usize) -> usize {
    match config.server.model {
        Model::Pool => pool::stat_blocks(workers, config.server.threads),
        Model::PerRequest => per_request::stat_blocks(config.server.max_threads),
        Model::Staged => staged::stat_blocks(workers, &config.staged),
        Model::Event | Model::Uring => workers,
    }
}

/// Whether the configured engine can run here: `uring` needs io_uring
/// (the error names why not); the others run everywhere.
pub fn probe(config: &Config) -> io::Result<()> {
    match config.server.model {
        Model::Uring => uring::probe(),
        _ => Ok(()),
    }
}

/// Starts the configured engine on the listener sets (one per worker).
pub fn start(shared: &Arc<Shared>, per_worker: Vec<Vec<TcpListener>>) -> io::Result<Started> {
    match shared.config.server.model {
        Model::Event => {
            let mut sets = per_worker.into_iter();
            front::fronts(shared, sets.len(), "tern-worker", |index| {
                let (shared, listeners) = (shared.clone(), sets.next().unwrap_or_default());
                move |inbox, ready| event::run(&shared, index, listeners, inbox, ready)
            })
        }
        Model::Uring => {
            let mut sets = per_worker.into_iter();
            front::fronts(shared, sets.len(), "tern-worker", |index| {
                let (shared, listeners) = (shared.clone(), sets.next().unwrap_or_default());
                move |inbox, ready| uring::run(&shared, index, listeners, inbox, ready)
            })
        }
        Model::Pool => pool::start(shared, per_worker),
        Model::PerRequest => {
            // One acceptor for every listener.
            let listeners: Vec<TcpListener> = per_worker.into_iter().flatten().collect();
            let mut listeners = Some(listeners);
            front::fronts(shared, 1, "tern-acceptor", |_| {
                let (shared, listeners) = (shared.clone(), listeners.take().unwrap_or_default());
                move |inbox, ready| per_request::run(&shared, listeners, inbox, ready)
            })
        }
        Model::Staged => staged::start(shared, per_worker),
    }
}
