//! The `pool` engine (the thread-pool architecture, as Apache's event
//! MPM): front threads accept and watch idle connections in an epoll set;
//! a connection with something to do goes into one queue, from which
//! `server.threads` threads take it and serve it while it has work. Once
//! it waits on its socket alone (for the client's next request, or room to
//! send) it goes back to its front, so neither idle keep-alive clients nor
//! slow readers hold a thread; only a backend (a CGI program, a FastCGI
//! application) is waited for by the thread, blocking in `poll(2)`.
//!
//! A front keeps the count of its connections (parked or out in the
//! pool): a pool thread tells it when one it took closed. The server-wide
//! counts are given back by the pool thread before the socket closes, as
//! the event engine does. A front's worker counts the idle connections it
//! has parked (a connection leaves one thread's count and joins the
//! next's as it moves), which it publishes for room at the cap across
//! fronts, as an event worker does.
//!
//! The staged engine (`staged.rs`) runs on these fronts and threads too:
//! its fronts queue a connection into the queue of the stage its work is
//! in, and each of its stages is a set of these threads.

use std::io;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel as channel;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use slab::Slab;

use crate::conn::{Conn, Status};
use crate::error_log::Level;
use crate::error_log::{self, log};
use crate::handover::Moved;
use crate::metrics::Ending;
use crate::shared::Shared;
use crate::sys;
use crate::worker::{BufPool, Wait, Worker};

use super::blocking::{self, Asked, Left, TICK};
use super::front::{self, Listening, Started, WAKE};

/// Statistics blocks: one per front, then one per pool thread.
pub fn stat_blocks(fronts: usize, threads: usize) -> usize {
    fronts + threads
}

/// A connection with work, for a pool (or stage) thread.
pub(super) struct Work {
    pub conn: Conn,
    /// The front it returns to.
    pub front: usize,
    /// What epoll reported.
    pub ready: Ready,
    /// When it was queued (by the queuing thread's clock).
    pub since: Instant,
}

/// Readiness as the event engine passes it to the connection.
#[derive(Clone, Copy, Default)]
pub(super) struct Ready {
    readable: bool,
    writable: bool,
    read_closed: bool,
    hangup: bool,
}

/// What a thread tells a front about one of its connections. Moved by
/// value through the channel (boxing would allocate per park).
#[allow(clippy::large_enum_variant)]
pub(super) enum Back {
    /// Waiting on its socket: watch it again.
    Parked(Conn),
    /// Has work for an earlier stage (the staged engine's next request):
    /// queue it.
    Ready(Conn),
    /// Closed (and uncounted server-wide).
    Closed,
}

/// Each front's way back from the threads: its returns, and the waker
/// that makes it look at them.
pub(super) type Backs = Arc<Vec<(channel::Sender<Back>, Arc<Waker>)>>;

/// Starts a front per listener set, then the pool's `threads`.
pub fn start(shared: &Arc<Shared>, threads: usize, per_worker: Vec<Vec<TcpListener>>) -> io::Result<Started> {
    let fronts = per_worker.len();
    let (queue, work) = channel::unbounded::<Work>();
    let (mut started, backs) = start_fronts(shared, per_worker, vec![queue])?;
    for i in 0..threads {
        let (shared2, work, backs) = (shared.clone(), work.clone(), backs.clone());
        let thread = front::spawn(format!("tern-pool-{i}"), None, move || {
            run_thread(&shared2, fronts + i, &work, |w, Work { mut conn, front, ready, .. }| {
                let left = serve(&shared2, w, &mut conn, ready);
                hand_back(&shared2, w, &backs, front, conn, left);
            })
        })?;
        started.threads.push(thread);
    }
    Ok(started)
}

/// Starts a front per listener set. A front queues a connection with work
/// into `queues[i]`, `i` the index of the stage its work is in (0 when it
/// is not driven by stages). The fronts hold the only senders they are
/// given: once they have ended, the threads that take from those queues
/// see them close.
pub(super) fn start_fronts(
    shared: &Arc<Shared>,
    per_worker: Vec<Vec<TcpListener>>,
    queues: Vec<channel::Sender<Work>>,
) -> io::Result<(Started, Backs)> {
    let fronts = per_worker.len();
    let mut backs = Vec::with_capacity(fronts);
    let mut listeners = per_worker.into_iter();
    let started = front::fronts(shared, fronts, "tern-front", |index| {
        let (back, returns) = channel::unbounded::<Back>();
        backs.push(back);
        let (shared, queues, listeners) = (shared.clone(), queues.clone(), listeners.next().unwrap_or_default());
        move |inbox, ready| run_front(&shared, index, listeners, inbox, ready, &queues, &returns)
    })?;
    let backs = Arc::new(backs.into_iter().zip(started.doors.iter().map(|(_, waker)| waker.clone())).collect());
    Ok((started, backs))
}

/// A front: accepts, parks idle connections, queues those with work.
fn run_front(
    shared: &Shared,
    index: usize,
    listeners: Vec<TcpListener>,
    inbox: &Receiver<Moved>,
    ready: Sender<io::Result<Arc<Waker>>>,
    queues: &[channel::Sender<Work>],
    returns: &channel::Receiver<Back>,
) {
    let (poll, waker, listeners) = match front::reactor(listeners) {
        Ok(parts) => parts,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(waker));
    let mut f = Front {
        shared,
        index,
        w: shared.worker(index, Box::new(Asked)),
        poll,
        parked: Slab::with_capacity(1024),
        out: 0,
        ending: Ending::Running,
        queues,
    };
    f.w.files.stop_watching();
    let mut listening = Listening::new(listeners, &mut f.w);
    let mut events = Events::with_capacity(1024);
    let mut next_tick = f.w.now + TICK;
    loop {
        let timeout =
            if listening.pending() { std::time::Duration::ZERO } else { next_tick.saturating_duration_since(f.w.now) };
        if let Err(e) = f.poll.poll(&mut events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                log!(Level::Error, "front {index}: poll failed: {e}");
                break;
            }
        }
        f.w.tick_clock();
        for event in events.iter() {
            match event.token() {
                WAKE => {
                    for moved in inbox.try_iter() {
                        f.adopt(moved);
                    }
                }
                token if listening.ready(token) => {}
                Token(key) => {
                    let read_closed = event.is_read_closed();
                    f.unpark(
                        key,
                        Ready {
                            readable: event.is_readable() || event.is_error(),
                            writable: event.is_writable() || event.is_write_closed() || event.is_error(),
                            read_closed,
                            hangup: event.is_error() || (read_closed && event.is_write_closed()),
                        },
                    );
                }
            }
        }
        // Returns are looked at every turn: the waker may have been rung
        // for them in a turn that ended before they were sent.
        for back in returns.try_iter() {
            f.out -= 1;
            match back {
                Back::Parked(conn) => {
                    conn.arrive(&mut f.w);
                    f.park(conn);
                }
                Back::Ready(conn) => {
                    conn.arrive(&mut f.w);
                    f.dispatch(conn, Ready::default());
                }
                Back::Closed => f.w.stats.active.set(f.w.stats.active.get().saturating_sub(1)),
            }
        }
        f.accept(&mut listening);
        // Room another front at the cap asked for (it rang the waker).
        front::give_room(shared, &mut f.w, index, f.poll.registry(), &mut f.parked);
        let now_ending = shared.server.ending();
        if now_ending != f.ending {
            listening.stop(f.poll.registry(), &mut f.w);
            f.ending = now_ending;
            let keys: Vec<usize> = f.parked.iter().map(|(k, _)| k).collect();
            for key in keys {
                if f.ending == Ending::Stop {
                    f.parked[key].begin_stop(&mut f.w);
                } else {
                    // Parking it again hands it over.
                    let conn = f.take(key);
                    f.park(conn);
                }
            }
        }
        if f.w.now >= next_tick {
            next_tick = f.w.now + TICK;
            let keys: Vec<usize> = f.parked.iter().map(|(k, _)| k).collect();
            for key in keys {
                let before = f.parked[key].waits().0;
                let status = front::guarded(&mut f.w, &mut f.parked[key], |c, w| c.on_tick(shared, w));
                if status == Status::Open && f.parked[key].waits().0 == before {
                    continue;
                }
                // Closed, or it answered (a `408`) and has that to send.
                let conn = f.take(key);
                if status == Status::Closed {
                    f.close(conn);
                } else {
                    f.dispatch(conn, Ready::default());
                }
            }
            error_log::tick();
            f.w.settle(f.parked.len() + f.out);
        }
        let drained = shared.server.drain_deadline().is_some_and(|d| f.w.now >= d);
        if f.ending != Ending::Running && ((f.parked.is_empty() && f.out == 0) || drained) {
            break;
        }
    }
    let keys: Vec<usize> = f.parked.iter().map(|(k, _)| k).collect();
    for key in keys {
        let conn = f.take(key);
        f.close(conn);
    }
}

/// A front's state.
struct Front<'s, 'q> {
    shared: &'s Shared,
    index: usize,
    w: Worker<'s>,
    poll: Poll,
    /// Connections waiting for their next request.
    parked: Slab<Conn>,
    /// Connections out in the pool.
    out: usize,
    ending: Ending,
    /// Where connections with work go (see [`start_fronts`]).
    queues: &'q [channel::Sender<Work>],
}

impl Front<'_, '_> {
    /// Accepts a batch per listener with connections waiting; each
    /// admitted one is parked until it has a request.
    fn accept(&mut self, listening: &mut Listening) {
        let (shared, ending, registry) = (self.shared, self.ending, self.poll.registry());
        listening.accept(shared, &mut self.w, self.index, registry, &mut self.parked, |w, parked, stream, peer| {
            w.stats.active.add(1);
            let conn = Conn::new(0, stream, peer, w);
            park(shared, w, registry, parked, ending, conn);
        });
    }

    /// Takes a connection handed over by a replaced server.
    fn adopt(&mut self, moved: Moved) {
        front::count_adopted(self.shared, &self.w, moved.peer);
        self.w.stats.active.add(1);
        let conn = Conn::adopt(0, moved, &mut self.w);
        // It may hold the start of a request already.
        self.dispatch(conn, Ready { readable: true, writable: true, ..Ready::default() });
    }

    /// Watches a connection's socket in the directions it waits for, or
    /// hands it over (a replaced server, no request in flight).
    fn park(&mut self, conn: Conn) {
        park(self.shared, &mut self.w, self.poll.registry(), &mut self.parked, self.ending, conn);
    }

    /// A parked connection became readable: off to the pool.
    fn unpark(&mut self, key: usize, ready: Ready) {
        if !self.parked.contains(key) {
            return;
        }
        let conn = self.take(key);
        self.dispatch(conn, ready);
    }

    /// Takes a parked connection out of the epoll set.
    fn take(&mut self, key: usize) -> Conn {
        front::take(self.poll.registry(), &mut self.parked, key)
    }

    /// Queues a connection with work. A full queue (the staged engine's
    /// are bounded) holds the front until there is room: push-back.
    fn dispatch(&mut self, conn: Conn, ready: Ready) {
        conn.depart(&mut self.w);
        let queue = &self.queues[conn.stage().map_or(0, |stage| stage as usize)];
        let work = Work { conn, front: self.index, ready, since: self.w.now };
        match queue.send(work) {
            Ok(()) => self.out += 1,
            Err(back) => {
                back.0.conn.arrive(&mut self.w);
                self.close(back.0.conn);
            }
        }
    }

    fn close(&mut self, mut conn: Conn) {
        front::forget(self.shared, &self.w, conn.peer());
        conn.recycle(&mut self.w);
    }
}

/// Watches a connection's socket in `parked` (a front's) in the directions
/// it waits for, or hands it over (a replaced server, no request in
/// flight).
fn park(
    shared: &Shared,
    w: &mut Worker<'_>,
    registry: &Registry,
    parked: &mut Slab<Conn>,
    ending: Ending,
    mut conn: Conn,
) {
    if ending == Ending::Stop {
        conn.begin_stop(w);
    }
    if front::leaves(shared, &conn, ending) {
        return front::hand_over(shared, w, conn);
    }
    let entry = parked.vacant_entry();
    let fd = conn.fd();
    let interest = match conn.waits().0 {
        Wait { read: true, write: true } => Interest::READABLE | Interest::WRITABLE,
        Wait { write: true, .. } => Interest::WRITABLE,
        _ => Interest::READABLE,
    };
    match registry.register(&mut SourceFd(&fd), Token(entry.key()), interest) {
        Ok(()) => {
            entry.insert(conn);
        }
        Err(e) => {
            log!(Level::Error, "cannot watch an idle connection: {e}");
            front::forget(shared, w, conn.peer());
            conn.recycle(w);
        }
    }
}

/// A thread that serves connections taken from `work` (a pool thread, a
/// stage's thread) with `serve`, and keeps its worker: clock, reaper, logs,
/// memory after a burst.
pub(super) fn run_thread(
    shared: &Shared,
    block: usize,
    work: &channel::Receiver<Work>,
    mut serve: impl FnMut(&mut Worker<'_>, Work),
) {
    let mut w = shared.worker(block, Box::new(Asked));
    w.files.stop_watching();
    let mut next_tick = w.now + TICK;
    loop {
        let wait = w.reaper.wake_in(w.now).unwrap_or(TICK).min(TICK);
        let taken = work.recv_timeout(wait);
        w.tick_clock();
        match taken {
            Ok(taken) => {
                taken.conn.arrive(&mut w);
                w.seen = taken.since;
                w.note_open(shared.server.connections.load(Ordering::Relaxed));
                serve(&mut w, taken);
            }
            Err(channel::RecvTimeoutError::Timeout) => {}
            Err(channel::RecvTimeoutError::Disconnected) => break,
        }
        if w.reaper.has_pending() {
            w.reaper.tick(w.now, &shared.server.cgi_running);
        }
        if w.now >= next_tick {
            next_tick = w.now + TICK;
            w.flush_logs();
            // Buffers taken in a burst go back once it has ended: all of
            // them, as the next connections may come to any thread.
            if w.settle(shared.server.connections.load(Ordering::Relaxed)) {
                w.pool = BufPool::default();
                sys::release_free_memory();
            }
        }
    }
    w.reaper.kill_all(&shared.server.cgi_running);
    w.flush_logs();
}

/// Runs a connection taken from a queue with what epoll reported, then on
/// until it waits on its socket alone, closes, can be handed over, or
/// moves to another stage.
pub(super) fn serve(shared: &Shared, w: &mut Worker<'_>, conn: &mut Conn, r: Ready) -> Left {
    w.stats.in_flight.set(1);
    let status = front::guarded(w, conn, |c, w| c.on_ready(shared, w, r.readable, r.writable, r.read_closed, r.hangup));
    w.stats.in_flight.set(0);
    blocking::serve(shared, w, conn, status, None, true, None)
}

/// Tells `front` what became of one of its connections a thread served:
/// waiting on its socket (or to be handed over: the front parks it), with
/// work for an earlier stage (`Left::Next`: the staged engine's next
/// request, which the front queues), or closed here.
pub(super) fn hand_back(shared: &Shared, w: &mut Worker<'_>, backs: &Backs, front: usize, conn: Conn, left: Left) {
    let back = match left {
        Left::Parked | Left::Handover => {
            conn.depart(w);
            Back::Parked(conn)
        }
        Left::Next(_) => {
            conn.depart(w);
            Back::Ready(conn)
        }
        Left::Closed => {
            close(shared, w, conn);
            Back::Closed
        }
    };
    let (to, waker) = &backs[front];
    if let Err(channel::SendError(Back::Parked(conn) | Back::Ready(conn))) = to.send(back) {
        // The front has ended (its drain deadline passed).
        conn.arrive(w);
        close(shared, w, conn);
    }
    let _ = waker.wake();
}

/// Closes a connection a thread holds: uncounted before the socket
/// closes, as a client that sees the close may connect again at once.
fn close(shared: &Shared, w: &mut Worker<'_>, mut conn: Conn) {
    front::uncount(shared, w, conn.peer());
    conn.recycle(w);
}
