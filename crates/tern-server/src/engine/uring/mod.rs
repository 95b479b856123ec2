//! The `uring` engine: a reactor per worker thread on io_uring, each with
//! its own `SO_REUSEPORT` listeners, driving the same connection as every
//! engine.
//!
//! A loop turn is one `io_uring_enter`: it submits everything the turn
//! asked for and waits for completions (`ring.rs`). Each listener has a
//! multishot accept. A plain connection's bytes move by completion: a
//! receive is kept waiting for it whenever nothing it received waits to be
//! read, into a buffer the kernel picks from the worker's provided-buffer
//! ring (`bufs.rs`: no buffer per idle connection, no copy into the
//! connection's receive buffer); what a `sendmsg` can carry of its output
//! (heads, in-memory and mapped bodies, gathered) is submitted as one and
//! stays the connection's until it completes. What the connection writes
//! itself (`sendfile` and `read` regions, the interim answer) it writes
//! as under `event`, and a write that would block has the ring report
//! when the socket has room.
//!
//! What the connection reads and writes itself all along — a TLS
//! connection, whose session does — and what a worker watches besides
//! sockets (backend descriptors through its `Watcher`, the open-file
//! table's changes, the waker) sit in an epoll set as under `event`
//! (`watch.rs`), which the ring watches: closing a descriptor there
//! removes it, where an io_uring poll would hold it open until cancelled.
//! A connection's own operations are cancelled when it closes, and what a
//! send in flight reads stays alive until its completion.
//!
//! Deadlines are the ticks' (a sweep once a second), as under `event`; the
//! hand-over on reload is too, a connection leaving once its receive is
//! cancelled (bytes it brought meanwhile are answered here first). It
//! does not poll busily before it sleeps: a wait is one system call for
//! every connection's completions; with `server.batch_wait`, a wait after
//! a busy turn lets them gather that long, so a steady load wakes the
//! worker once for several requests.

mod bufs;
mod ring;

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::cqueue;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::body::Sending;
use crate::conn::{Conn, Fetch, Received, Status};
use crate::error_log::Level;
use crate::error_log::{self, log};
use crate::handover::Moved;
use crate::metrics::Ending;
use crate::open_files::OpenFile;
use crate::shared::Shared;
use crate::worker::{BufPool, Worker};

use super::front::{self, WAKE};
use super::watch::{self, Links, Ready, FILES};
use bufs::{Buffers, GROUP};
use ring::{Done, Op, Ring, Tag};

const TICK: Duration = Duration::from_secs(1);
/// How long a worker that ends waits for the kernel to let go of what its
/// operations in flight use.
const DRAIN: Duration = Duration::from_secs(2);

/// What `[server]` tunes of the uring engine.
#[derive(Clone, Copy)]
pub struct Tuning {
    /// `server.batch_wait`.
    pub batch_wait: Duration,
    /// `server.defer_accept`.
    pub defer_accept: Duration,
}

/// A connection and what the ring does for it.
struct Entry {
    conn: Conn,
    gen: u32,
    /// Its bytes move through the ring (else its socket is in the epoll
    /// set: a TLS connection).
    ring: bool,
    /// A receive is in flight.
    recv: bool,
    /// The send in flight, and what it reads.
    send: Option<Box<Sending>>,
    /// Its socket's poll for room is armed (multishot, kept once armed).
    writable: bool,
    /// The file read in flight (the `uring` method): its buffer, the file
    /// and the offset.
    read: Option<Reading>,
    /// It moves to the successor once its receive is cancelled.
    leaving: bool,
}

/// Whether io_uring can be had here, as a worker needs it (the error
/// says why not: no io_uring, a sysctl or seccomp profile refusing it, a
/// kernel too old).
pub fn probe() -> io::Result<()> {
    Ring::new(Duration::ZERO).map(drop)
}

/// A file region being read through the ring into `buf`.
struct Reading {
    buf: Vec<u8>,
    file: Arc<OpenFile>,
    offset: u64,
}

/// What operation `op` of a closed connection still uses (a send's
/// message, a read's buffer), kept until its completion.
struct Held {
    op: Op,
    send: Option<Box<Sending>>,
    _read: Option<Reading>,
}

/// Runs worker `index` until shutdown. Sends its waker (or the error that
/// kept it from starting: why io_uring is not to be had) on `ready`; the
/// waker is rung when the server's [`Ending`] changes or a connection
/// arrives in `inbox`.
pub fn run(
    shared: &Shared,
    tuning: Tuning,
    index: usize,
    listeners: Vec<TcpListener>,
    inbox: &Receiver<Moved>,
    ready: Sender<io::Result<Arc<Waker>>>,
) {
    let setup = || -> io::Result<_> {
        let ring = Ring::new(tuning.batch_wait)?;
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let watch = watch::watcher(&poll, &waker, shared.site.pools.links)?;
        // The ring's first buffers; the worker's pool replaces them.
        let bufs = Buffers::new(&ring, &mut BufPool::default())?;
        Ok((ring, bufs, poll, waker, watch))
    };
    let (ring, bufs, poll, waker, (watcher, doorbell, links)) = match setup() {
        Ok(parts) => parts,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut w = shared.worker(index, Box::new(watcher));
    let _ = ready.send(Ok(waker));
    // A reactor: what may wait for a disk goes to the I/O pool.
    w.offload = shared.offload.as_ref();
    watch::watch_files(&poll, &mut w, index);
    w.listeners = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    let mut r = Reactor {
        shared,
        index,
        ring,
        bufs,
        poll,
        links,
        conns: Slab::with_capacity(1024),
        spare: Vec::new(),
        orphans: Vec::new(),
        gen: 0,
        armed: vec![false; listeners.len()],
        listeners,
        epoll_armed: false,
        ops: 0,
        ending: Ending::Running,
        first_bytes_come_with_accept: !tuning.defer_accept.is_zero(),
    };
    r.arm_listeners();
    let mut events = Events::with_capacity(1024);
    let mut done = Vec::with_capacity(1024);
    let mut accepted = Vec::new();
    let mut rung = Vec::new();
    let mut next_tick = w.now + TICK;

    loop {
        // Connections rung for since the last wait (see `event.rs`).
        doorbell.take(&mut rung);
        for &key in &rung {
            if let Some(e) = r.conns.get_mut(key) {
                let status = front::guarded(&mut w, &mut e.conn, |c, w| c.on_rung(shared, w));
                r.settle(&mut w, key, status);
            }
        }
        if !r.epoll_armed {
            r.ring.poll_readable(r.poll.as_raw_fd(), Op::Epoll);
            r.epoll_armed = true;
            r.ops += 1;
        }
        let mut timeout = next_tick.saturating_duration_since(w.now);
        if let Some(reap) = w.reaper.wake_in(w.now) {
            timeout = timeout.min(reap);
        }
        if doorbell.is_rung() {
            timeout = Duration::ZERO;
        }
        // Completions may gather (`server.batch_wait`) after a turn with
        // work, unless the worker holds one connection: its client waits
        // for each answer before it sends again.
        let busy = !done.is_empty() && r.conns.len() > 1;
        if let Err(e) = r.ring.wait(timeout, busy) {
            log!(Level::Error, "worker {index}: io_uring wait failed: {e}");
            break;
        }
        w.tick_clock();
        r.ring.completions(&mut done);
        // The epoll set first: files changed before this turn's requests
        // were sent are forgotten before any is answered.
        events.clear();
        if done.iter().any(|d| d.op == Op::Epoll) {
            if let Err(e) = r.poll.poll(&mut events, Some(Duration::ZERO)) {
                log!(Level::Error, "worker {index}: epoll failed: {e}");
            }
            if events.iter().any(|e| e.token() == FILES) {
                w.files.on_changes();
            }
        }
        // Each completion and event still to handle is a request waiting
        // on this worker: the "in flight" half of the compression load
        // signal.
        let mut waiting = (done.len() + events.iter().count()) as u64;
        for d in &done {
            w.stats.in_flight.set(waiting);
            waiting = waiting.saturating_sub(1);
            r.complete(&mut w, *d, &mut accepted);
        }
        for event in events.iter() {
            w.stats.in_flight.set(waiting);
            waiting = waiting.saturating_sub(1);
            match event.token() {
                FILES => {}
                WAKE => {
                    for moved in inbox.try_iter() {
                        r.adopt(&mut w, moved);
                    }
                }
                _ => r.on_event(&mut w, event),
            }
        }
        w.stats.in_flight.set(0);
        // New connections after the turn's requests.
        for fd in accepted.drain(..) {
            r.accept(&mut w, fd);
        }
        w.note_open(r.conns.len());
        // Room another worker at the cap asked for (it rang the waker).
        front::give_room_by(shared, &mut w, index, |w| r.evict_idle(w));
        if w.reaper.has_pending() {
            w.reaper.tick(w.now, &shared.server.cgi_running);
        }
        let now_ending = shared.server.ending();
        if now_ending != r.ending {
            r.stop_accepting(&mut w);
            r.ending = now_ending;
            let keys: Vec<usize> = r.conns.iter().map(|(k, _)| k).collect();
            for key in keys {
                if r.ending == Ending::Stop {
                    r.conns[key].conn.begin_stop(&mut w);
                }
                r.settle(&mut w, key, Status::Open);
            }
        }
        if w.now >= next_tick {
            next_tick = w.now + TICK;
            let keys: Vec<usize> = r.conns.iter().map(|(k, _)| k).collect();
            for key in keys {
                let status = front::guarded(&mut w, &mut r.conns[key].conn, |c, w| c.on_tick(shared, w));
                r.settle(&mut w, key, status);
            }
            w.flush_logs();
            error_log::tick();
            if w.settle(r.conns.len()) {
                r.conns.shrink_to_fit();
            }
            // A listener whose accept ended (EMFILE and the like) tries
            // again a second later.
            r.arm_listeners();
        }
        if r.ending != Ending::Running
            && (r.conns.is_empty() || shared.server.drain_deadline().is_some_and(|d| w.now >= d))
        {
            break;
        }
    }
    r.end(&mut w);
}

/// A worker's ring and what it holds: the ring is declared before the
/// buffers it receives into, so it is dropped (and lets go of them) first.
struct Reactor<'s> {
    shared: &'s Shared,
    index: usize,
    ring: Ring,
    bufs: Buffers,
    /// The epoll set (`watch.rs`) the ring watches.
    poll: Poll,
    links: Arc<Links>,
    conns: Slab<Entry>,
    /// Sends' room, reused (the hit path allocates nothing); boxed, as a
    /// send in flight points into its own.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Sending>>,
    /// Sends and reads in flight of connections that closed: kept until
    /// their completion, the kernel may still use them.
    orphans: Vec<Held>,
    /// The generation of the last connection.
    gen: u32,
    listeners: Vec<TcpListener>,
    /// Whether listener `i` has an accept in flight.
    armed: Vec<bool>,
    epoll_armed: bool,
    /// Operations in flight (multishot ones until their last completion).
    ops: usize,
    ending: Ending,
    first_bytes_come_with_accept: bool,
}

impl Reactor<'_> {
    /// Gives every listener without one a multishot accept.
    fn arm_listeners(&mut self) {
        for (i, l) in self.listeners.iter().enumerate() {
            if !self.armed[i] {
                self.ring.accept(l.as_raw_fd(), i);
                self.armed[i] = true;
                self.ops += 1;
            }
        }
    }

    /// Stops accepting (a successor has the listening sockets, or the
    /// server stops).
    fn stop_accepting(&mut self, w: &mut Worker<'_>) {
        for (i, armed) in self.armed.iter().enumerate() {
            if *armed {
                self.ring.cancel(Op::Accept(i));
            }
        }
        self.listeners.clear();
        w.listeners.clear();
    }

    /// Handles one completion; accepted sockets go to `accepted`.
    fn complete(&mut self, w: &mut Worker<'_>, d: Done, accepted: &mut Vec<RawFd>) {
        let more = cqueue::more(d.flags);
        match d.op {
            Op::Accept(i) => {
                if !more {
                    self.ops -= 1;
                    if let Some(armed) = self.armed.get_mut(i) {
                        *armed = false;
                    }
                }
                match d.result {
                    fd if fd >= 0 => accepted.push(fd),
                    e if e == -libc::ECANCELED => {}
                    // EMFILE and the like: leave the rest in the backlog.
                    e => log!(Level::Error, "accept failed: {}", io::Error::from_raw_os_error(-e)),
                }
            }
            Op::Epoll => {
                if !more {
                    self.ops -= 1;
                    self.epoll_armed = false;
                }
            }
            Op::Recv(tag) => self.received(w, tag, d),
            Op::Send(tag) => self.sent(w, tag, d),
            Op::Writable(tag) => self.writable(w, tag, d),
            Op::Read(tag) => self.fetched(w, tag, d),
            Op::Cancel => {}
        }
    }

    /// The entry `tag` names, if its connection is still there.
    fn entry(&mut self, tag: Tag) -> Option<&mut Entry> {
        self.conns.get_mut(tag.key).filter(|e| e.gen == tag.gen)
    }

    fn received(&mut self, w: &mut Worker<'_>, tag: Tag, d: Done) {
        self.ops -= 1;
        let buffer = cqueue::buffer_select(d.flags);
        let live = self.entry(tag).is_some();
        let got = match (d.result, buffer) {
            (n, Some(id)) if n > 0 && live => Some(Received::Data(self.bufs.take(id, n as usize, &mut w.pool))),
            (_, Some(id)) => {
                self.bufs.give_back(id);
                (d.result == 0).then_some(Received::Eof)
            }
            (0, None) => Some(Received::Eof),
            // No buffer was free, nothing came after all, or the receive
            // was cancelled: received again (or handed over) by `settle`.
            (e, None) if [libc::ENOBUFS, libc::EAGAIN, libc::ECANCELED].contains(&-e) => None,
            (_, None) => Some(Received::Failed),
        };
        let shared = self.shared;
        let Some(e) = self.entry(tag) else { return };
        e.recv = false;
        e.leaving = false;
        let status = match got {
            Some(got) => front::guarded(w, &mut e.conn, |c, w| c.on_received(shared, w, got)),
            None => Status::Open,
        };
        self.settle(w, tag.key, status);
    }

    /// What a closed connection's operation `op` used, now free.
    fn orphan(&mut self, op: Op) -> bool {
        let Some(at) = self.orphans.iter().position(|h| h.op == op) else { return false };
        if let Some(s) = self.orphans.swap_remove(at).send {
            self.reuse(s);
        }
        true
    }

    fn sent(&mut self, w: &mut Worker<'_>, tag: Tag, d: Done) {
        self.ops -= 1;
        if self.orphan(Op::Send(tag)) {
            return;
        }
        let shared = self.shared;
        let Some(e) = self.entry(tag) else { return };
        let Some(s) = e.send.take() else { return };
        let outcome = s.outcome(d.result);
        let status = front::guarded(w, &mut e.conn, |c, w| c.on_sent(shared, w, outcome));
        self.reuse(s);
        self.settle(w, tag.key, status);
    }

    fn fetched(&mut self, w: &mut Worker<'_>, tag: Tag, d: Done) {
        self.ops -= 1;
        if self.orphan(Op::Read(tag)) {
            return;
        }
        let shared = self.shared;
        let Some(e) = self.entry(tag) else { return };
        let Some(Reading { mut buf, file, offset }) = e.read.take() else { return };
        let got = match usize::try_from(d.result) {
            // A regular file reads short only at its end: it shrank.
            Ok(n) if n == buf.capacity() => {
                // SAFETY: the kernel wrote `n` bytes, the buffer's capacity.
                unsafe { buf.set_len(n) };
                Ok(buf)
            }
            Ok(_) => Err(file.shrank()),
            Err(_) => Err(io::Error::from_raw_os_error(-d.result)),
        };
        let status = front::guarded(w, &mut e.conn, |c, w| c.on_fetched(shared, w, offset, got));
        self.settle(w, tag.key, status);
    }

    /// The socket's poll for room reported (room, an error, or its end):
    /// a connection waiting for room is told.
    fn writable(&mut self, w: &mut Worker<'_>, tag: Tag, d: Done) {
        let more = cqueue::more(d.flags);
        if !more {
            self.ops -= 1;
        }
        let shared = self.shared;
        let Some(e) = self.entry(tag) else { return };
        e.writable &= more;
        let status = if d.result >= 0 && e.conn.wants_writable() {
            let hangup = d.result & i32::from(libc::POLLERR | libc::POLLHUP) != 0;
            front::guarded(w, &mut e.conn, |c, w| c.on_ready(shared, w, false, true, false, hangup))
        } else {
            Status::Open
        };
        self.settle(w, tag.key, status);
    }

    /// An event of the epoll set for a connection: its backend's
    /// descriptor, or the socket of one that reads and writes it itself.
    fn on_event(&mut self, w: &mut Worker<'_>, event: &mio::event::Event) {
        let Some(r) = Ready::of(event, &self.links) else { return };
        let Some(e) = self.conns.get_mut(r.key) else { return };
        let status = if r.backend {
            front::guarded(w, &mut e.conn, |c, w| {
                c.on_backend_ready(self.shared, w, r.readable, r.writable, r.read_closed)
            })
        } else {
            front::guarded(w, &mut e.conn, |c, w| {
                c.on_ready(self.shared, w, r.readable, r.writable, r.read_closed, r.hangup)
            })
        };
        self.settle(w, r.key, status);
    }

    /// Reuses a completed send's room.
    fn reuse(&mut self, mut s: Box<Sending>) {
        s.clear();
        self.spare.push(s);
    }

    /// Puts `conn` (made with the slab's vacant key) in the slab.
    fn insert(&mut self, conn: Conn) -> usize {
        self.gen = Tag::next_gen(self.gen);
        let entry = Entry {
            conn,
            gen: self.gen,
            ring: false,
            recv: false,
            send: None,
            writable: false,
            read: None,
            leaving: false,
        };
        self.conns.insert(entry)
    }

    /// Takes a connection the ring accepted, under the limits.
    fn accept(&mut self, w: &mut Worker<'_>, fd: RawFd) {
        // SAFETY: a connected socket the ring just accepted, ours alone.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        let Ok(peer) = stream.peer_addr() else { return };
        let (shared, index) = (self.shared, self.index);
        let Some(stream) = front::admit(shared, w, stream, peer, |w| self.evict_idle(w) || shared.room.ask(index))
        else {
            return;
        };
        let key = self.conns.vacant_key();
        let conn = Conn::new(key, stream, peer, w);
        self.insert(conn);
        w.stats.active.add(1);
        let e = &mut self.conns[key];
        e.ring = e.conn.take_ring(shared, w);
        if e.ring {
            // Its first bytes come with the first receive.
            return self.arm(key);
        }
        // Read at once when its first bytes came with it (as `event.rs`).
        let status = if self.first_bytes_come_with_accept {
            if w.records.enabled() {
                w.seen = Instant::now();
            }
            front::guarded(w, &mut e.conn, |c, w| c.on_ready(shared, w, true, true, false, false))
        } else {
            Status::Open
        };
        if status == Status::Closed || !self.register(key) {
            return self.close(w, key);
        }
        self.settle(w, key, status);
    }

    /// Takes a connection handed over by a replaced server.
    fn adopt(&mut self, w: &mut Worker<'_>, moved: Moved) {
        front::count_adopted(self.shared, w, moved.peer);
        let key = self.conns.vacant_key();
        let conn = Conn::adopt(key, moved, w);
        self.insert(conn);
        w.stats.active.add(1);
        let e = &mut self.conns[key];
        e.ring = e.conn.take_ring(self.shared, w);
        if !e.ring && !self.register(key) {
            return self.close(w, key);
        }
        let e = &mut self.conns[key];
        if self.ending == Ending::Stop {
            e.conn.begin_stop(w);
        }
        let status = front::guarded(w, &mut e.conn, |c, w| c.on_ready(self.shared, w, true, true, false, false));
        self.settle(w, key, status);
    }

    /// Registers a connection that reads and writes its socket itself in
    /// the epoll set, for both directions; on failure (said in the error
    /// log) the caller closes it.
    fn register(&self, key: usize) -> bool {
        let fd = self.conns[key].conn.fd();
        let interest = Interest::READABLE | Interest::WRITABLE;
        match self.poll.registry().register(&mut SourceFd(&fd), Token(key * 2), interest) {
            Ok(()) => true,
            Err(e) => {
                log!(Level::Error, "cannot register connection: {e}");
                false
            }
        }
    }

    /// After connection code ran: closes the connection if it is done,
    /// hands it to the successor if this server is being replaced and no
    /// request is in flight on it (once the ring has let go of its
    /// socket), or gives the ring what the connection now waits for.
    fn settle(&mut self, w: &mut Worker<'_>, key: usize, status: Status) {
        if status == Status::Closed {
            return self.close(w, key);
        }
        let e = &mut self.conns[key];
        if front::leaves(self.shared, &e.conn, self.ending) {
            let tag = Tag { key, gen: e.gen };
            if e.recv || e.writable {
                if !e.leaving {
                    e.leaving = true;
                    if e.recv {
                        self.ring.cancel(Op::Recv(tag));
                    }
                    if e.writable {
                        self.ring.cancel(Op::Writable(tag));
                    }
                }
                return;
            }
            let e = self.conns.remove(key);
            if !e.ring {
                let _ = self.poll.registry().deregister(&mut SourceFd(&e.conn.fd()));
            }
            return front::hand_over(self.shared, w, e.conn);
        }
        self.arm(key);
    }

    /// Submits what connection `key` waits for through the ring: a
    /// receive while nothing received waits to be read, the send it asked
    /// for, a poll for room after a write that would have blocked.
    fn arm(&mut self, key: usize) {
        let e = &mut self.conns[key];
        if !e.ring || e.leaving {
            return;
        }
        let (fd, tag) = (e.conn.fd(), Tag { key, gen: e.gen });
        if e.send.is_none() {
            let mut s = self.spare.pop().unwrap_or_else(Sending::new);
            if e.conn.ring_send(&mut s) {
                // SAFETY: `s` is kept (in the entry, or with the orphans
                // once the connection closes) until the send completes.
                unsafe { self.ring.send(fd, s.msghdr(), s.flags(), tag) };
                e.send = Some(s);
                self.ops += 1;
            } else {
                self.spare.push(s);
            }
        }
        if !e.recv && e.conn.wants_data() {
            self.ring.recv(fd, GROUP, tag);
            e.recv = true;
            self.ops += 1;
        }
        if !e.writable && e.conn.wants_writable() {
            self.ring.poll_writable(fd, tag);
            e.writable = true;
            self.ops += 1;
        }
        if e.read.is_none() {
            if let Some(Fetch { file, offset, len, cached }) = e.conn.ring_fetch() {
                let mut reading = Reading { buf: Vec::with_capacity(len), file, offset };
                let (file, buf) = (reading.file.file.as_raw_fd(), reading.buf.as_mut_ptr());
                // SAFETY: the buffer (moved with its heap block in place)
                // is kept, in the entry or with the orphans, until the
                // read completes.
                unsafe { self.ring.read(file, buf, len, offset, cached, tag) };
                e.read = Some(reading);
                self.ops += 1;
            }
        }
    }

    /// At the connection cap: closes the longest-idle keep-alive
    /// connection (see `front::evict_idle`). Whether there was one.
    fn evict_idle(&mut self, w: &mut Worker<'_>) -> bool {
        let Some(key) = front::oldest_idle(self.conns.iter().map(|(k, e)| (k, &e.conn))) else { return false };
        w.stats.evicted.incr();
        self.close(w, key);
        true
    }

    /// Closes connection `key`: its operations are cancelled (the kernel
    /// lets go of its socket then, at the next submission), a send in
    /// flight kept with what it reads until its completion.
    fn close(&mut self, w: &mut Worker<'_>, key: usize) {
        let mut e = self.conns.remove(key);
        let tag = Tag { key, gen: e.gen };
        if e.recv {
            self.ring.cancel(Op::Recv(tag));
        }
        if e.writable {
            self.ring.cancel(Op::Writable(tag));
        }
        if let Some(s) = e.send.take() {
            self.ring.cancel(Op::Send(tag));
            self.orphans.push(Held { op: Op::Send(tag), send: Some(s), _read: None });
        }
        if let Some(fetch) = e.read.take() {
            self.ring.cancel(Op::Read(tag));
            self.orphans.push(Held { op: Op::Read(tag), send: None, _read: Some(fetch) });
        }
        // Counted as closed before the socket is: a client that sees the
        // close may ask the status page (another worker) at once.
        front::forget(self.shared, w, e.conn.peer());
        // Closing a descriptor in the epoll set also removes it.
        e.conn.recycle(w);
    }

    /// The worker ends: its connections close, and the kernel is given the
    /// time to let go of everything its operations use.
    fn end(&mut self, w: &mut Worker<'_>) {
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.close(w, key);
        }
        w.reaper.kill_all(&self.shared.server.cgi_running);
        w.flush_logs();
        self.ring.cancel_all();
        let deadline = Instant::now() + DRAIN;
        let (mut done, mut accepted) = (Vec::new(), Vec::new());
        while self.ops > 0 && Instant::now() < deadline {
            if self.ring.wait(Duration::from_millis(100), false).is_err() {
                break;
            }
            self.ring.completions(&mut done);
            for d in &done {
                self.complete(w, *d, &mut accepted);
            }
            for fd in accepted.drain(..) {
                // SAFETY: a socket accepted as the worker ended, ours alone.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
}
