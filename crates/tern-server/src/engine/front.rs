//! What every engine's threads share: starting them (named, signals
//! blocked; they run on `server.cpus` as the thread that starts the
//! server does while it starts them, see `server.rs`), admitting an accepted connection
//! under the server's limits or refusing it with `503`, making room at the
//! cap (a front's own longest-idle connection, else another front's
//! through `room.rs`), handing a connection to the server replacing this
//! one, keeping the connection counts, and running connection code so a
//! panic closes only its connection.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::unix::SourceFd;
use mio::{Interest, Poll, Registry, Token, Waker};
use slab::Slab;

use crate::conn::{Conn, Status};
use crate::error_log::{log, Level};
use crate::handover::Moved;
use crate::metrics::Ending;
use crate::shared::Shared;
use crate::sys;
use crate::worker::Worker;

/// A started engine: its threads (joined when the server ends) and, per
/// front thread (the threads that accept), the way in for connections a
/// replaced server hands over: a queue and the waker that makes it look.
/// The wakers are also rung when the server's ending changes.
pub struct Started {
    pub threads: Vec<JoinHandle<()>>,
    pub doors: Vec<(Sender<Moved>, Arc<Waker>)>,
}

/// The most threads `server.threads`, `server.max_threads` and each
/// stage of `[staged]` may ask for.
pub const MAX_THREADS: usize = 100_000;

/// What a thread count must be (see [`MAX_THREADS`]).
pub const THREADS_RANGE: &str = "must be between 1 and 100000";

/// Connections accepted per listener per loop turn, so a flood of new
/// connections cannot starve the ones already open.
const ACCEPT_BATCH: usize = 64;

/// The waker's token in a front thread's epoll set.
pub const WAKE: Token = Token(usize::MAX);
/// Listener `i` has token `LISTENER_BASE - i`; the tokens below are the
/// engine's own.
pub const LISTENER_BASE: usize = usize::MAX - 2;

/// A front thread's epoll set with its waker and its listeners.
pub fn reactor(listeners: Vec<TcpListener>) -> io::Result<(Poll, Arc<Waker>, Vec<mio::net::TcpListener>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let mut mio_listeners = Vec::with_capacity(listeners.len());
    for (i, l) in listeners.into_iter().enumerate() {
        let mut l = mio::net::TcpListener::from_std(l);
        poll.registry().register(&mut l, Token(LISTENER_BASE - i), Interest::READABLE)?;
        mio_listeners.push(l);
    }
    Ok((poll, waker, mio_listeners))
}

/// A front's listening sockets while it accepts, and which of them may
/// still hold connections: readiness is edge-triggered, so after a full
/// batch no new event comes for the connections left in the accept queue.
pub struct Listening {
    listeners: Vec<mio::net::TcpListener>,
    backlog: Vec<bool>,
}

impl Listening {
    /// The listeners of [`reactor`]; `w` names them for the load signal.
    pub fn new(listeners: Vec<mio::net::TcpListener>, w: &mut Worker<'_>) -> Listening {
        w.listeners = listeners.iter().map(AsRawFd::as_raw_fd).collect();
        Listening { backlog: vec![false; listeners.len()], listeners }
    }

    /// Whether `token` is a listener's, which then has connections to
    /// accept (none once it stopped accepting).
    pub fn ready(&mut self, token: Token) -> bool {
        let Some(i) = LISTENER_BASE.checked_sub(token.0).filter(|&i| i < self.listeners.len()) else { return false };
        self.backlog[i] = true;
        true
    }

    /// Whether a listener may still hold connections: the next wait must
    /// not block.
    pub fn pending(&self) -> bool {
        self.backlog.contains(&true)
    }

    /// Accepts a batch from each listener that may hold connections, for
    /// front `index` holding `conns`: each is admitted under the limits
    /// ([`admit`], making room at the cap) or refused, and `take` gets the
    /// admitted ones.
    pub fn accept(
        &mut self,
        shared: &Shared,
        w: &mut Worker<'_>,
        index: usize,
        registry: &Registry,
        conns: &mut Slab<Conn>,
        mut take: impl FnMut(&mut Worker<'_>, &mut Slab<Conn>, TcpStream, SocketAddr),
    ) {
        for (listener, more) in self.listeners.iter().zip(self.backlog.iter_mut()) {
            if *more {
                *more = accept_batch(listener, |stream, peer| {
                    if let Some(stream) =
                        admit(shared, w, stream, peer, |w| make_room(shared, w, index, registry, conns))
                    {
                        take(w, conns, stream, peer);
                    }
                });
            }
        }
    }

    /// Stops accepting (a successor has the listening sockets).
    pub fn stop(&mut self, registry: &Registry, w: &mut Worker<'_>) {
        for l in &mut self.listeners {
            let _ = registry.deregister(l);
        }
        self.listeners.clear();
        self.backlog.clear();
        w.listeners.clear();
    }
}

/// Hands up to a batch of connections taken off `listener` to `each`;
/// returns whether more may be waiting (the batch was used up).
fn accept_batch(listener: &mio::net::TcpListener, mut each: impl FnMut(TcpStream, SocketAddr)) -> bool {
    for _ in 0..ACCEPT_BATCH {
        match accept(listener) {
            Ok(Some((stream, peer))) => each(stream, peer),
            Ok(None) => return false,
            Err(e) => {
                // EMFILE and the like: leave the rest in the backlog.
                log!(Level::Error, "accept failed: {e}");
                return false;
            }
        }
    }
    true
}

/// Starts `count` front threads, each once the one before it has reported
/// ready: `make(index)` gives thread `index` its work, which it runs with
/// its inbox, sending its waker (or why it could not start) on `ready`.
/// The waker is also how another front asks it for room ([`give_room`]).
pub fn fronts<F>(
    shared: &Arc<Shared>,
    count: usize,
    name: &str,
    mut make: impl FnMut(usize) -> F,
) -> io::Result<Started>
where
    F: FnOnce(&Receiver<Moved>, Sender<io::Result<Arc<Waker>>>) + Send + 'static,
{
    let mut started = Started { threads: Vec::new(), doors: Vec::new() };
    for index in 0..count {
        let run = make(index);
        let (waker_tx, waker_rx) = std::sync::mpsc::channel();
        let (queue, inbox) = std::sync::mpsc::channel();
        let owner = shared.clone();
        let thread = move || {
            run(&inbox, waker_tx);
            pass_on(&owner, index, &inbox);
        };
        started.threads.push(spawn(format!("{name}-{index}"), None, thread)?);
        match waker_rx.recv() {
            Ok(Ok(waker)) => {
                let ring = waker.clone();
                shared.room.lend_wake(index, Box::new(move || _ = ring.wake()));
                started.doors.push((queue, waker));
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("a worker failed to start")),
        }
    }
    Ok(started)
}

/// At front `index`'s end: its door closes, and the connections its inbox
/// still holds (handed over after its last look) go on to another worker
/// or the successor rather than closing unanswered with the inbox.
fn pass_on(shared: &Shared, index: usize, inbox: &Receiver<Moved>) {
    let Some(doors) = shared.doors.get() else { return };
    doors.close(index);
    for moved in inbox.try_iter() {
        let _ = doors.send(moved);
    }
}

/// Starts a server thread with the shutdown signals blocked (they reach
/// the thread that waits for them).
pub fn spawn(name: String, stack: Option<usize>, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    let mut builder = std::thread::Builder::new().name(name);
    if let Some(bytes) = stack {
        builder = builder.stack_size(bytes);
    }
    builder.spawn(move || {
        enter();
        f()
    })
}

/// What every server thread does first.
pub fn enter() {
    sys::block_signals(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
}

/// Takes the next connection off `listener` (`None`: none waiting), as a
/// non-blocking std stream.
pub fn accept(listener: &mio::net::TcpListener) -> io::Result<Option<(TcpStream, SocketAddr)>> {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                // SAFETY: the descriptor comes straight from the accepted mio stream.
                return Ok(Some((unsafe { TcpStream::from_raw_fd(stream.into_raw_fd()) }, peer)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Why a connection is refused.
#[derive(Clone, Copy)]
pub enum Refusal {
    Cap,
    PerIp,
    Threads,
}

const OVERLOADED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\nRetry-After: 1\r\n\r\ntoo many connections";

/// Counts a connection just accepted and checks the limits
/// (`limits.max_connections_per_ip`, then `server.max_connections`, where
/// `evict` may close an idle connection to make room). A refused one is
/// answered `503` and closed; an admitted one is counted (see [`forget`]).
pub fn admit(
    shared: &Shared,
    w: &mut Worker<'_>,
    stream: TcpStream,
    peer: SocketAddr,
    evict: impl FnOnce(&mut Worker<'_>) -> bool,
) -> Option<TcpStream> {
    w.stats.accepted.incr();
    if shared.per_ip.as_ref().is_some_and(|t| !t.admit(peer.ip())) {
        refuse(w, stream, peer, Refusal::PerIp);
        return None;
    }
    if w.server.connections.fetch_add(1, Ordering::Relaxed) >= w.config.max_connections && !evict(w) {
        uncount(shared, w, peer);
        refuse(w, stream, peer, Refusal::Cap);
        return None;
    }
    Some(stream)
}

/// Answers a connection over a limit with `503` (best effort, never
/// blocking) and closes it.
pub fn refuse(w: &Worker<'_>, stream: TcpStream, peer: SocketAddr, why: Refusal) {
    use std::io::Write;
    // An answer like any other: counted with its status class.
    w.stats.rejected.incr();
    w.stats.requests.incr();
    w.stats.status(503);
    if let Ok(n) = (&stream).write(OVERLOADED) {
        w.stats.bytes_sent.add(n as u64);
    }
    // One call site each: repeated lines are rate-limited per site.
    match why {
        Refusal::Cap => log!(Level::Warn, "{peer}: refused, server.max_connections reached"),
        Refusal::PerIp => log!(Level::Warn, "{peer}: refused, limits.max_connections_per_ip reached"),
        Refusal::Threads => log!(Level::Warn, "{peer}: refused, server.max_threads reached"),
    }
}

/// At the connection cap: closes the longest-idle keep-alive connection
/// a front holds in `conns` (as Apache's event MPM does), so idle clients
/// cannot keep new ones out. Returns whether there was one.
pub fn evict_idle(shared: &Shared, w: &mut Worker<'_>, registry: &Registry, conns: &mut Slab<Conn>) -> bool {
    let Some(key) = oldest_idle(conns.iter()) else { return false };
    w.stats.evicted.incr();
    let mut conn = take(registry, conns, key);
    // Uncounted before the socket closes: the new connection, counted
    // already, takes its place.
    forget(shared, w, conn.peer());
    conn.recycle(w);
    true
}

/// The longest-idle keep-alive connection among a front's.
pub fn oldest_idle<'c>(conns: impl Iterator<Item = (usize, &'c Conn)>) -> Option<usize> {
    conns.filter_map(|(k, c)| c.idle_since().map(|t| (t, k))).min().map(|(_, k)| k)
}

/// Room at the cap for front `index`: its own longest-idle connection,
/// else one another front is asked to close (`room.rs`; the new client is
/// admitted at once).
pub fn make_room(
    shared: &Shared,
    w: &mut Worker<'_>,
    index: usize,
    registry: &Registry,
    conns: &mut Slab<Conn>,
) -> bool {
    evict_idle(shared, w, registry, conns) || shared.room.ask(index)
}

/// Once per loop turn of front `index`: closes the idle connections other
/// fronts asked it for, then publishes how many it holds idle.
pub fn give_room(shared: &Shared, w: &mut Worker<'_>, index: usize, registry: &Registry, conns: &mut Slab<Conn>) {
    give_room_by(shared, w, index, |w| evict_idle(shared, w, registry, conns));
}

/// [`give_room`] for a front that closes its longest-idle connection with
/// `evict` (whether it had one).
pub fn give_room_by(shared: &Shared, w: &mut Worker<'_>, index: usize, mut evict: impl FnMut(&mut Worker<'_>) -> bool) {
    for _ in 0..shared.room.take_asked(index) {
        if !evict(w) {
            break;
        }
    }
    shared.room.publish(index, w.idle);
}

/// Takes connection `key` out of a front's slab and its epoll set.
pub fn take(registry: &Registry, conns: &mut Slab<Conn>, key: usize) -> Conn {
    let conn = conns.remove(key);
    let _ = registry.deregister(&mut SourceFd(&conn.fd()));
    conn
}

/// Whether `conn` goes to the server replacing this one: this one is
/// being replaced (`ending`) and no request is in flight on it.
pub fn leaves(shared: &Shared, conn: &Conn, ending: Ending) -> bool {
    ending == Ending::Reload && conn.between_requests() && shared.successor().is_some()
}

/// Hands a connection that [`leaves`] (watched by nobody any more) to the
/// successor, its socket and the bytes read and not answered (or to its
/// successor's, when that one has ended already).
pub fn hand_over(shared: &Shared, w: &mut Worker<'_>, conn: Conn) {
    forget(shared, w, conn.peer());
    let moved = conn.into_moved(w);
    if let Some(successor) = shared.successor() {
        let _ = successor.send(moved);
    }
}

/// Counts a connection handed over by a replaced server (admitted there
/// already: the limits do not apply again).
pub fn count_adopted(shared: &Shared, w: &Worker<'_>, peer: SocketAddr) {
    w.server.connections.fetch_add(1, Ordering::Relaxed);
    if let Some(per_ip) = &shared.per_ip {
        per_ip.add(peer.ip());
    }
}

/// Uncounts a connection that leaves worker `w` (counted in its `active`).
pub fn forget(shared: &Shared, w: &Worker<'_>, peer: SocketAddr) {
    uncount(shared, w, peer);
    w.stats.active.set(w.stats.active.get().saturating_sub(1));
}

/// Takes a connection off the server-wide counts.
pub fn uncount(shared: &Shared, w: &Worker<'_>, peer: SocketAddr) {
    w.server.connections.fetch_sub(1, Ordering::Relaxed);
    if let Some(per_ip) = &shared.per_ip {
        per_ip.remove(peer.ip());
    }
}

/// Runs connection code; a panic closes that connection instead of the
/// thread (and is logged), so one bad request cannot take the server down.
pub fn guarded(w: &mut Worker<'_>, conn: &mut Conn, f: impl FnOnce(&mut Conn, &mut Worker<'_>) -> Status) -> Status {
    match catch_unwind(AssertUnwindSafe(|| f(conn, w))) {
        Ok(status) => status,
        Err(_) => {
            log!(Level::Error, "connection handler panicked; connection closed");
            Status::Closed
        }
    }
}
