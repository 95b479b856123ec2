//! The `per-request` engine (the request-based architecture): one acceptor
//! thread takes connections from every listener and starts a thread for
//! each, which blocks in `poll(2)` on its socket (and a backend's
//! descriptor) and drives the connection until it closes.
//!
//! At most `server.max_threads` connection threads live at once (past it a
//! new connection gets `503`), each with a [`STACK`]-sized stack. A
//! thread takes the `Worker` a finished one left (its open-file table and
//! buffers stay warm), so workers are made only up to the peak.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::Scope;

use mio::{Events, Token, Waker};
use slab::Slab;

use crate::conn::{Conn, Status};
use crate::error_log::Level;
use crate::error_log::{self, log};
use crate::handover::Moved;
use crate::metrics::Ending;
use crate::shared::Shared;
use crate::sys;
use crate::worker::{BufPool, Worker};

use super::blocking::{self, Asked, Bell, Idle, Left, TICK};
use super::front::{self, Refusal, LISTENER_BASE, WAKE};

/// A connection thread's stack: enough for the deepest handler path
/// (inline compression included), small enough that thousands fit.
pub const STACK: usize = 256 * 1024;

/// Workers kept for the next threads once a burst is over.
const SPARE_KEPT: usize = 16;

/// Statistics blocks: the acceptor's, then one per connection thread.
pub fn stat_blocks(max_threads: usize) -> usize {
    1 + max_threads
}

/// What the acceptor shares with its connection threads.
struct Threads<'s> {
    shared: &'s Shared,
    /// `server.max_threads`: connection threads alive at once.
    max: usize,
    /// Workers left by finished threads.
    spare: Mutex<Vec<Worker<'s>>>,
    /// Workers made so far (each has its own statistics block).
    made: AtomicUsize,
    /// Connection threads alive.
    live: AtomicUsize,
    /// Each thread's connection, for eviction at the connection cap.
    idle: Mutex<Slab<Arc<Idle>>>,
    bell: Bell,
}

/// A connection for a thread: accepted, or handed over by a replaced
/// server.
enum Arrival {
    Accepted(TcpStream, SocketAddr),
    Moved(Moved),
}

/// Runs the acceptor until shutdown and every connection thread has ended.
pub fn run(
    shared: &Shared,
    max_threads: usize,
    listeners: Vec<TcpListener>,
    inbox: &Receiver<Moved>,
    ready: Sender<io::Result<Arc<Waker>>>,
) {
    let started = front::reactor(listeners).and_then(|r| Ok((r, Bell::new()?)));
    let ((mut poll, waker, mut listeners), bell) = match started {
        Ok(parts) => parts,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(waker));
    let mut w = shared.worker(0, Box::new(Asked));
    w.files.stop_watching();
    let threads = Threads {
        shared,
        max: max_threads,
        spare: Mutex::new(Vec::new()),
        made: AtomicUsize::new(0),
        live: AtomicUsize::new(0),
        idle: Mutex::new(Slab::new()),
        bell,
    };
    let mut events = Events::with_capacity(256);
    let mut ending = Ending::Running;
    std::thread::scope(|scope| loop {
        if let Err(e) = poll.poll(&mut events, Some(TICK)) {
            if e.kind() != io::ErrorKind::Interrupted {
                log!(Level::Error, "acceptor: poll failed: {e}");
                break;
            }
        }
        w.tick_clock();
        for event in events.iter() {
            match event.token() {
                WAKE => {
                    for moved in inbox.try_iter() {
                        front::count_adopted(shared, &w, moved.peer);
                        start(scope, &threads, &w, Arrival::Moved(moved));
                    }
                }
                Token(t) if ending == Ending::Running => accept(scope, &threads, &mut w, &listeners[LISTENER_BASE - t]),
                Token(_) => {}
            }
        }
        let now_ending = shared.server.ending();
        if now_ending != ending {
            // Stop accepting (a successor has the listening sockets), and
            // tell the connection threads.
            for l in listeners.iter_mut() {
                let _ = poll.registry().deregister(l);
            }
            listeners.clear();
            ending = now_ending;
            threads.bell.ring();
        }
        error_log::tick();
        let live = threads.live.load(Ordering::Acquire);
        if w.settle(live) {
            // A burst has ended: the workers it made go too.
            if let Ok(mut spare) = threads.spare.lock() {
                spare.truncate(SPARE_KEPT);
            }
            sys::release_free_memory();
        }
        if ending != Ending::Running && live == 0 {
            break;
        }
    });
}

/// Accepts what a listener has, a thread for each (or `503`).
fn accept<'scope, 's>(
    scope: &'scope Scope<'scope, 's>,
    threads: &'s Threads<'s>,
    w: &mut Worker<'s>,
    listener: &mio::net::TcpListener,
) {
    loop {
        let (stream, peer) = match front::accept(listener) {
            Ok(Some(accepted)) => accepted,
            Ok(None) => return,
            Err(e) => {
                log!(Level::Error, "accept failed: {e}");
                return;
            }
        };
        let Some(stream) = front::admit(threads.shared, w, stream, peer, |w| evict_idle(threads, w)) else { continue };
        if threads.live.load(Ordering::Acquire) >= threads.max {
            front::uncount(threads.shared, w, peer);
            front::refuse(w, stream, peer, Refusal::Threads);
            continue;
        }
        start(scope, threads, w, Arrival::Accepted(stream, peer));
        w.note_open(threads.live.load(Ordering::Relaxed));
    }
}

/// Starts a connection's thread (counted in `live` until it ends).
fn start<'scope, 's>(scope: &'scope Scope<'scope, 's>, threads: &'s Threads<'s>, w: &Worker<'s>, arrival: Arrival) {
    let peer = match &arrival {
        Arrival::Accepted(_, peer) => *peer,
        Arrival::Moved(m) => m.peer,
    };
    threads.live.fetch_add(1, Ordering::AcqRel);
    let spawned =
        std::thread::Builder::new().name("tern-conn".into()).stack_size(STACK).spawn_scoped(scope, move || {
            front::enter();
            connection(threads, arrival);
            threads.live.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        // The connection went down with the closure.
        log!(Level::Error, "{peer}: cannot start a thread: {e}");
        threads.live.fetch_sub(1, Ordering::AcqRel);
        front::uncount(threads.shared, w, peer);
    }
}

/// At the connection cap: ends the longest-idle connection to make room,
/// as the event engine does. Returns whether there was one.
fn evict_idle(threads: &Threads<'_>, w: &mut Worker<'_>) -> bool {
    let Ok(idle) = threads.idle.lock() else { return false };
    let Some((_, oldest)) = idle.iter().filter_map(|(_, i)| i.since().map(|t| (t, i))).min_by_key(|(t, _)| *t) else {
        return false;
    };
    oldest.evict();
    w.stats.evicted.incr();
    true
}

/// A connection thread: serves one connection to its end, then leaves its
/// worker for the next thread.
fn connection<'s>(threads: &'s Threads<'s>, arrival: Arrival) {
    let shared = threads.shared;
    let spare = threads.spare.lock().ok().and_then(|mut s| s.pop());
    let mut w = spare.unwrap_or_else(|| {
        let block = 1 + threads.made.fetch_add(1, Ordering::Relaxed);
        let mut w = shared.worker(block.min(shared.server.workers.len() - 1), Box::new(Asked));
        w.files.stop_watching();
        w
    });
    w.tick_clock();
    w.stats.active.add(1);
    let (mut conn, status) = match arrival {
        Arrival::Accepted(stream, peer) => (Conn::new(0, stream, peer, &w), Status::Open),
        Arrival::Moved(moved) => {
            let mut conn = Conn::adopt(0, moved, &mut w);
            let status = front::guarded(&mut w, &mut conn, |c, w| c.on_ready(shared, w, true, true, false, false));
            (conn, status)
        }
    };
    let idle = Arc::new(Idle::new(&conn));
    let listed = threads.idle.lock().map(|mut l| l.insert(idle.clone())).ok();
    let left = blocking::serve(shared, &mut w, &mut conn, status, Some(&threads.bell), false, Some(&idle));
    // Out of the list before the socket closes or moves on.
    if let (Some(key), Ok(mut list)) = (listed, threads.idle.lock()) {
        list.remove(key);
    }
    if left == Left::Handover {
        front::hand_over(shared, &mut w, conn);
    } else {
        front::forget(shared, &w, conn.peer());
        conn.recycle(&mut w);
    }
    // A program's group is killed and reaped before the thread ends.
    while w.reaper.has_pending() {
        let wait = w.reaper.wake_in(w.now).unwrap_or(TICK).min(TICK);
        std::thread::sleep(wait);
        w.tick_clock();
        w.reaper.tick(w.now, &shared.server.cgi_running);
    }
    w.flush_logs();
    // Its buffers served this connection only.
    w.pool = BufPool::default();
    if let Ok(mut spare) = threads.spare.lock() {
        spare.push(w);
    }
}
