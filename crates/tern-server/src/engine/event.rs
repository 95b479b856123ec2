//! The event engine: one epoll reactor per worker thread, each with its own
//! `SO_REUSEPORT` listeners, non-blocking sockets, edge-triggered readiness.
//!
//! Sockets are registered once for both directions; the connection keeps
//! track of what it is waiting for, so no `epoll_ctl` is made per request.
//! A connection accepted with its first bytes (`server.defer_accept`) is
//! read in the turn that accepts it, and joins the epoll set only if that
//! read did not end it. Deadlines are checked by a sweep once a second (a
//! timeout is thus enforced within a second of its configured value).
//!
//! A connection's second descriptor — a CGI program's output pipe, the
//! eventfd of a request waiting for a pooled FastCGI connection or for the
//! I/O pool — has the token beside its socket's, registered through the
//! `Watcher` the worker lends (`watch.rs`). A pooled FastCGI connection is registered
//! by its place in the pool instead (`Links`), so passing it from one
//! request of the reactor to the next costs no `epoll_ctl`. What no
//! descriptor reports (a FastCGI connection handed to a request waiting
//! for one, a connection that sent its `static.sendfile_max_chunk` and lets
//! the others go first) rings the reactor's doorbell, whose connections
//! it drives once per turn, before it waits again.
//!
//! Besides its listeners, a worker takes connections from its inbox: those
//! a replaced server hands over on reload. A replaced server's worker
//! passes each of its connections on as soon as no request is in flight on
//! it, and ends when none is left.

use std::io;
use std::net::TcpListener;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::conn::{Conn, Status};
use crate::error_log::Level;
use crate::error_log::{self, log};
use crate::handover::Moved;
use crate::metrics::Ending;
use crate::shared::Shared;
use crate::worker::Worker;

use super::busy_poll::BusyPoll;
use super::front::{self, Listening, WAKE};
use super::watch::{self, Ready, FILES};

const TICK: Duration = Duration::from_secs(1);

/// What `[server]` tunes of the event engine.
#[derive(Clone, Copy)]
pub struct Tuning {
    /// `server.busy_poll`.
    pub busy_poll: Duration,
    /// `server.defer_accept`.
    pub defer_accept: Duration,
}

/// Runs worker `index` until shutdown. Sends its waker (or the error that
/// kept it from starting) on `ready`; the waker is rung when the server's
/// [`Ending`] changes or a connection arrives in `inbox`.
pub fn run(
    shared: &Shared,
    tuning: Tuning,
    index: usize,
    listeners: Vec<TcpListener>,
    inbox: &Receiver<Moved>,
    ready: Sender<io::Result<Arc<Waker>>>,
) {
    let (mut poll, waker, listeners) = match front::reactor(listeners) {
        Ok(parts) => parts,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let (watcher, doorbell, links) = match watch::watcher(&poll, &waker, shared.site.pools.links) {
        Ok(parts) => parts,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(waker));
    let mut w = shared.worker(index, Box::new(watcher));
    let mut listening = Listening::new(listeners, &mut w);
    let first_bytes_come_with_accept = !tuning.defer_accept.is_zero();
    // A reactor: what may wait for a disk goes to the I/O pool.
    w.offload = shared.offload.as_ref();
    watch::watch_files(&poll, &mut w, index);
    let mut conns: Slab<Conn> = Slab::with_capacity(1024);
    let mut events = Events::with_capacity(1024);
    let mut next_tick = w.now + TICK;
    let mut ending = Ending::Running;
    let mut rung = Vec::new();
    let mut busy_poll = BusyPoll::new(tuning.busy_poll);

    loop {
        // Connections rung for since the last wait (by this worker's own
        // connections, which wake nobody, or by other workers). One that
        // rings again while driven (it sent its `sendfile_max_chunk`) is
        // driven after the next wait, which then does not block: the
        // others' events come first.
        doorbell.take(&mut rung);
        for &key in &rung {
            // A key rung for a connection that ended since may name a
            // new one: it is driven for nothing, which does no harm.
            if let Some(conn) = conns.get_mut(key) {
                let status = front::guarded(&mut w, conn, |c, w| c.on_rung(shared, w));
                settle(shared, &mut w, &poll, &mut conns, key, status, ending);
            }
        }
        // A program that closed its output usually exits a moment later:
        // look again soon rather than at the next tick; a listener with a
        // backlog is accepted from at once.
        let mut timeout = next_tick.saturating_duration_since(w.now);
        if let Some(reap) = w.reaper.wake_in(w.now) {
            timeout = timeout.min(reap);
        }
        if listening.pending() || doorbell.is_rung() {
            timeout = Duration::ZERO;
        }
        // Worth polling again for: the last turn had work, and clients other
        // than the one just answered may send next. A single client's next
        // request is a round trip away, so a worker holding one connection
        // sleeps at once (3 system calls per keep-alive request). Nor while
        // a backend makes an answer: the next event is likely its output,
        // from a process on this machine (php-fpm, a CGI program) that
        // needs the CPU a spin would take.
        let busy = !events.is_empty() && conns.len() > 1 && w.backend_jobs == 0;
        if let Err(e) = busy_poll.wait(&mut poll, &mut events, timeout, w.now, busy) {
            if e.kind() != io::ErrorKind::Interrupted {
                log!(Level::Error, "worker {index}: poll failed: {e}");
                break;
            }
        }
        w.tick_clock();
        // Files changed before this turn's requests were sent: forget
        // their cached lengths and validators before answering any.
        if events.iter().any(|e| e.token() == FILES) {
            w.files.on_changes();
        }
        // Each event still to handle is a request waiting on this worker:
        // the "in flight" half of the compression load signal.
        let mut waiting = events.iter().count() as u64;
        for event in events.iter() {
            w.stats.in_flight.set(waiting);
            waiting -= 1;
            match event.token() {
                FILES => {}
                WAKE => {
                    for moved in inbox.try_iter() {
                        adopt(shared, &mut w, &poll, &mut conns, moved, ending);
                    }
                }
                token if listening.ready(token) => {}
                _ => {
                    let Some(r) = Ready::of(event, &links) else { continue };
                    if let Some(conn) = conns.get_mut(r.key) {
                        let status = if r.backend {
                            front::guarded(&mut w, conn, |c, w| {
                                c.on_backend_ready(shared, w, r.readable, r.writable, r.read_closed)
                            })
                        } else {
                            front::guarded(&mut w, conn, |c, w| {
                                c.on_ready(shared, w, r.readable, r.writable, r.read_closed, r.hangup)
                            })
                        };
                        settle(shared, &mut w, &poll, &mut conns, r.key, status, ending);
                    }
                }
            }
        }
        w.stats.in_flight.set(0);
        // New connections after the turn's requests, a batch per listener.
        listening.accept(shared, &mut w, index, poll.registry(), &mut conns, |w, conns, stream, peer| {
            let key = conns.vacant_key();
            let conn = Conn::new(key, stream, peer, w);
            conns.insert(conn);
            w.stats.active.add(1);
            // Accepted once its first bytes came (deferred accept), a
            // connection is read at once: one whose request is answered and
            // closed in this turn never joins the epoll set (no epoll_ctl,
            // no wait for a first event). Registering after the read loses
            // nothing: the registration reports what is ready by then.
            let status = if first_bytes_come_with_accept {
                // Its bytes are seen now, after the accept (a service
                // record's arrival never precedes its accept).
                if w.records.enabled() {
                    w.seen = Instant::now();
                }
                front::guarded(w, &mut conns[key], |c, w| c.on_ready(shared, w, true, true, false, false))
            } else {
                Status::Open
            };
            if status == Status::Closed || !register(&poll, &conns[key], key) {
                return close(shared, w, conns, key);
            }
            settle(shared, w, &poll, conns, key, status, ending);
        });
        w.note_open(conns.len());
        // Room another worker at the cap asked for (it rang the waker).
        front::give_room(shared, &mut w, index, poll.registry(), &mut conns);
        if w.reaper.has_pending() {
            w.reaper.tick(w.now, &shared.server.cgi_running);
        }
        let now_ending = shared.server.ending();
        if now_ending != ending {
            listening.stop(poll.registry(), &mut w);
            ending = now_ending;
            let keys: Vec<usize> = conns.iter().map(|(k, _)| k).collect();
            for key in keys {
                if ending == Ending::Stop {
                    conns[key].begin_stop(&mut w);
                }
                settle(shared, &mut w, &poll, &mut conns, key, Status::Open, ending);
            }
        }
        if w.now >= next_tick {
            next_tick = w.now + TICK;
            let keys: Vec<usize> = conns.iter().map(|(k, _)| k).collect();
            for key in keys {
                let status = front::guarded(&mut w, &mut conns[key], |c, w| c.on_tick(shared, w));
                settle(shared, &mut w, &poll, &mut conns, key, status, ending);
            }
            w.flush_logs();
            error_log::tick();
            if w.settle(conns.len()) {
                conns.shrink_to_fit();
            }
        }
        if ending != Ending::Running && (conns.is_empty() || shared.server.drain_deadline().is_some_and(|d| w.now >= d))
        {
            break;
        }
    }
    let keys: Vec<usize> = conns.iter().map(|(k, _)| k).collect();
    for key in keys {
        close(shared, &mut w, &mut conns, key);
    }
    w.reaper.kill_all(&shared.server.cgi_running);
    w.flush_logs();
}

/// After connection code ran: closes the connection if it is done, or
/// hands it to the successor if this server is being replaced and no
/// request is in flight on it.
fn settle(
    shared: &Shared,
    w: &mut Worker<'_>,
    poll: &Poll,
    conns: &mut Slab<Conn>,
    key: usize,
    status: Status,
    ending: Ending,
) {
    if status == Status::Closed {
        return close(shared, w, conns, key);
    }
    if front::leaves(shared, &conns[key], ending) {
        // Out of this worker's set before another worker can register it.
        let conn = front::take(poll.registry(), conns, key);
        front::hand_over(shared, w, conn);
    }
}

/// Takes a connection handed over by a replaced server.
fn adopt(shared: &Shared, w: &mut Worker<'_>, poll: &Poll, conns: &mut Slab<Conn>, moved: Moved, ending: Ending) {
    front::count_adopted(shared, w, moved.peer);
    let key = conns.vacant_key();
    let conn = Conn::adopt(key, moved, w);
    conns.insert(conn);
    w.stats.active.add(1);
    if !register(poll, &conns[key], key) {
        return close(shared, w, conns, key);
    }
    if ending == Ending::Stop {
        conns[key].begin_stop(w);
    }
    let status = front::guarded(w, &mut conns[key], |c, w| c.on_ready(shared, w, true, true, false, false));
    settle(shared, w, poll, conns, key, status, ending);
}

/// Registers a connection's socket for both directions; on failure (said
/// in the error log) the caller closes it.
fn register(poll: &Poll, conn: &Conn, key: usize) -> bool {
    let fd = conn.fd();
    match poll.registry().register(&mut SourceFd(&fd), Token(key * 2), Interest::READABLE | Interest::WRITABLE) {
        Ok(()) => true,
        Err(e) => {
            log!(Level::Error, "cannot register connection: {e}");
            false
        }
    }
}

fn close(shared: &Shared, w: &mut Worker<'_>, conns: &mut Slab<Conn>, key: usize) {
    let mut conn = conns.remove(key);
    // Counted as closed before the socket is: a client that sees the close
    // may ask the status page (another worker) at once.
    front::forget(shared, w, conn.peer());
    // Closing the descriptor also removes it from the epoll set.
    conn.recycle(w);
}
