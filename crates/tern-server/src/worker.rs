//! What one worker thread owns and lends to each connection it runs:
//! the clock reading, the date cache, the open-file table, the access-log
//! buffer, scratch buffers, a pool of I/O buffers, its engine's backend
//! [`Watcher`] and the CGI [`Reaper`] — with the settings it lends them
//! ([`Settings`]) and the server-wide counters it reads. Every engine builds one per worker; it
//! sits below the site and the engines, so neither reaches above itself.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Instant, SystemTime};

use tern_http::date::DateCache;

use crate::access_log::{AccessLog, AccessTarget};
use crate::htpasswd::AuthCache;
use crate::http2::Http2;
use crate::limits::{Limits, Timeouts};
use crate::metrics::{Ending, ServerStats, WorkerStats};
use crate::offload::Offload;
use crate::open_files::OpenFileTable;
use crate::reaper::Reaper;
use crate::resolve::{Found, ResolveError};
use crate::service_records::{RecordTarget, ServiceLog};
use crate::static_io::{StaticFiles, StaticIo};
use crate::sys;

/// How connection code asks its engine to watch a backend's descriptor (a
/// CGI program's output, a FastCGI socket) for reading and writing on
/// behalf of connection `conn`. Closing the descriptor stops the watch;
/// `unwatch` stops it for one that lives on (a pooled FastCGI connection).
pub trait Watcher: Send {
    fn watch(&self, conn: usize, fd: BorrowedFd<'_>) -> io::Result<()>;
    /// Watches pooled FastCGI connection `link` (its place's id, see
    /// [`pool`]) for connection `conn`: for reading, and for writing only
    /// when `write` (a request to a backend is written as soon as it
    /// starts: a watch for room all along would only report each time the
    /// backend reads). `again`: the link is in this watcher's set already
    /// (left there read-only between requests, or watched for this one); a
    /// read-only watch then only changes whom it reports to, with no
    /// system call. True when something was reported for the link while it
    /// was nobody's (the backend may have closed it).
    ///
    /// [`pool`]: crate::site::upstream::pool
    fn watch_link(&self, conn: usize, link: usize, fd: BorrowedFd<'_>, write: bool, again: bool) -> io::Result<bool>;
    /// Link `link` stays watched, read-only, for nobody until the next
    /// [`Watcher::watch_link`]: what is reported meanwhile is kept for it.
    fn leave_link(&self, _link: usize) {}
    fn unwatch(&self, fd: BorrowedFd<'_>) -> io::Result<()>;
    /// The reactor's doorbell, when the engine has one: connection code
    /// elsewhere rings it to have a connection driven, with no descriptor
    /// of its own to watch. Its identity is also the watcher's: a link
    /// another connection of the same reactor watched is still in the set,
    /// to be watched `again`.
    fn doorbell(&self) -> Option<&Arc<Doorbell>> {
        None
    }
}

/// A reactor's list of connections to drive because something happened
/// for them that no descriptor reports (a pooled FastCGI connection handed
/// to a request waiting for one), and how its thread is woken. A ring from
/// the reactor's own thread costs no system call: the reactor looks at the
/// list after each turn's events, before it waits again.
pub struct Doorbell {
    rung: Mutex<Vec<usize>>,
    /// Whether `rung` may hold keys, read without the lock each turn.
    pending: AtomicBool,
    wake: Box<dyn Fn() + Send + Sync>,
    /// Takes a descriptor out of the reactor's set, from any thread.
    forget: Box<dyn Fn(BorrowedFd<'_>) + Send + Sync>,
    owner: ThreadId,
}

impl Doorbell {
    /// A doorbell for the calling thread's reactor, which `wake` rouses;
    /// `forget` takes a descriptor out of its set.
    pub fn new(wake: Box<dyn Fn() + Send + Sync>, forget: Box<dyn Fn(BorrowedFd<'_>) + Send + Sync>) -> Doorbell {
        Doorbell {
            rung: Mutex::default(),
            pending: AtomicBool::new(false),
            wake,
            forget,
            owner: thread::current().id(),
        }
    }

    /// Takes `fd` out of the reactor's set. For a pooled FastCGI
    /// connection left idle in its reactor's set and taken by another
    /// worker: nobody on the reactor uses it any more, so an event the
    /// reactor fetched for it before is a spurious wake-up of the
    /// connection that used it last, which reads, finds nothing and waits.
    pub fn forget(&self, fd: BorrowedFd<'_>) {
        (self.forget)(fd)
    }

    /// Asks for connection `conn` to be driven.
    pub fn ring(&self, conn: usize) {
        let mut rung = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        let first = rung.is_empty();
        rung.push(conn);
        self.pending.store(true, Ordering::Release);
        drop(rung);
        // Woken once per batch: a later ring finds the reactor woken (or
        // running, when it rang itself) and the list not yet taken.
        if first && thread::current().id() != self.owner {
            (self.wake)();
        }
    }

    /// Whether a connection was rung for since the last [`Doorbell::take`].
    pub fn is_rung(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// The connections rung for since the last call, into `keys`
    /// (emptied first).
    pub fn take(&self, keys: &mut Vec<usize>) {
        keys.clear();
        if !self.pending.load(Ordering::Acquire) {
            return;
        }
        let mut rung = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut *rung, keys);
        self.pending.store(false, Ordering::Release);
    }
}

/// The directions a blocking engine waits for on a descriptor: those the
/// connection does not know to be ready. Readiness is remembered as for
/// edge-triggered epoll, so a level-triggered `poll(2)` on just these
/// directions wakes once per change, never spins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wait {
    pub read: bool,
    pub write: bool,
}

impl Wait {
    pub fn any(self) -> bool {
        self.read || self.write
    }

    /// The `poll(2)` events that say it is met.
    pub fn poll_events(self) -> libc::c_short {
        let mut events = 0;
        if self.read {
            events |= libc::POLLIN | libc::POLLRDHUP;
        }
        if self.write {
            events |= libc::POLLOUT;
        }
        events
    }
}

/// Size of a pooled receive or send buffer: a typical request head, or a
/// response head with a small body, fits.
pub const IO_BUFFER: usize = 8 * 1024;
/// Idle buffers kept per worker while it is busy.
const POOL_KEEP: usize = 256;
/// Idle buffers kept once a burst is over.
const POOL_SETTLED: usize = 32;
/// Connections a worker must have shed since its peak before it gives
/// memory back: a burst (an attack, a flood) has ended, not the ordinary
/// coming and going of clients.
const SETTLE_DROP: usize = 256;

/// When a worker gives memory back: once it has shed [`SETTLE_DROP`]
/// connections since its peak, then at every call while it keeps shedding
/// (a burst may drain over several seconds), and once more at the call
/// after it stopped: what the last connections freed after they were
/// counted gone (a connection thread's allocator cache, freed when the
/// thread exits) would otherwise stay resident.
#[derive(Default)]
struct Settling {
    /// Most connections open at once since memory was last given back.
    peak: usize,
    /// Connections open when memory was last given back, while the burst
    /// is still draining.
    draining: Option<usize>,
}

impl Settling {
    fn note(&mut self, open: usize) {
        self.peak = self.peak.max(open);
    }

    fn give_back(&mut self, open: usize) -> bool {
        self.note(open);
        if self.peak - open >= SETTLE_DROP || self.draining.is_some_and(|at| open < at) {
            self.peak = open;
            self.draining = Some(open);
            return true;
        }
        self.draining.take().is_some()
    }
}

/// Buffers taken by connections while they work and given back while they
/// idle, so thousands of idle keep-alive connections hold no buffers.
#[derive(Default)]
pub struct BufPool(Vec<Vec<u8>>);

impl BufPool {
    pub fn take(&mut self) -> Vec<u8> {
        self.0.pop().unwrap_or_else(|| Vec::with_capacity(IO_BUFFER))
    }

    /// Returns a buffer; oversized ones (grown for a large head) are freed.
    pub fn give(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() == IO_BUFFER && self.0.len() < POOL_KEEP {
            buf.clear();
            self.0.push(buf);
        }
    }

    fn shrink(&mut self) {
        self.0.truncate(POOL_SETTLED);
        self.0.shrink_to_fit();
    }
}

/// What the configuration tells the connection code, lent by every worker
/// (`Config::lent` builds it, `Shared` keeps it): the sections it reads on
/// every request, and the few values of others it needs. `config/` sits
/// above the connection code, so nothing here reads the whole.
pub struct Settings {
    /// `server.server_header`.
    pub server_header: String,
    /// `server.max_connections`: admission, and the status page.
    pub max_connections: usize,
    pub static_files: StaticFiles,
    pub limits: Limits,
    /// `[http2]`: a session's limits.
    pub http2: Http2,
    pub timeouts: Timeouts,
    /// `log.access_buffer`: each worker's access-log and service-record
    /// buffer.
    pub access_buffer: usize,
    /// `cgi.kill_group`, for the reaper.
    pub kill_group: bool,
    /// `cgi.pipe_buffer`: the most read from a backend at once.
    pub pipe_buffer: usize,
    /// Each site's name and access log (its number among the logs the
    /// server opened), in the sites' order.
    pub sites: Vec<SiteLog>,
}

/// What a worker records of a request a site answered.
#[derive(Clone, Debug)]
pub struct SiteLog {
    pub name: Box<str>,
    pub log: usize,
}

pub struct Worker<'s> {
    pub config: &'s Settings,
    pub server: &'s ServerStats,
    pub stats: &'s WorkerStats,
    /// Which I/O method sends a file's body.
    pub io: &'s StaticIo,
    /// Read once per event-loop turn.
    pub now: Instant,
    /// When the readiness being handled was seen: the engine's wait
    /// returned it ([`Worker::tick_clock`]), or, for a connection taken
    /// from a queue, its front saw it. A request arrives then (its service
    /// record's `arrive_us`), so time queued behind other work shows.
    pub seen: Instant,
    pub date: DateCache,
    pub files: OpenFileTable,
    /// The access logs, in the order the server opened them (the
    /// server's own first).
    pub logs: Vec<AccessLog>,
    /// Per-request service records (a no-op unless `log.service_records`).
    pub records: ServiceLog,
    pub pool: BufPool,
    /// The current request's normalised path.
    pub path: Vec<u8>,
    /// Scratch for handlers (index paths, multipart heads).
    pub scratch: Vec<u8>,
    pub watcher: Box<dyn Watcher>,
    pub reaper: Reaper,
    /// This worker's listening sockets, while it accepts (their accept
    /// queue is part of the load signal).
    pub listeners: Vec<RawFd>,
    /// Connections this worker holds that are kept alive and idle between
    /// requests (kept by `Conn` as its clock changes and as it moves between
    /// threads; a front publishes it for `room.rs`).
    pub idle: usize,
    /// Connections this worker holds whose answer a backend (FastCGI, CGI)
    /// is making: while any is, its reactor does not busy-poll.
    pub backend_jobs: usize,
    /// The I/O pool, lent only by an engine whose thread must never wait
    /// for a disk (a reactor); `None`: opens and reads happen in place.
    pub offload: Option<&'s Offload>,
    /// What the I/O pool found for the path of the request being answered
    /// again (taken by static files; cleared after the answer).
    pub resolved: Option<Result<Found, ResolveError>>,
    /// Credentials this worker recently let in (`htpasswd.rs`).
    pub auth: AuthCache,
    settling: Settling,
}

impl<'s> Worker<'s> {
    pub fn new(
        config: &'s Settings,
        server: &'s ServerStats,
        (access, records): (&'s [AccessTarget], &'s RecordTarget),
        io: &'s StaticIo,
        index: usize,
        watcher: Box<dyn Watcher>,
    ) -> Worker<'s> {
        Worker {
            config,
            server,
            stats: &server.workers[index],
            io,
            now: Instant::now(),
            seen: Instant::now(),
            date: DateCache::new(SystemTime::now()),
            files: OpenFileTable::new(config.static_files.open_file_cache, config.static_files.open_file_valid.0),
            logs: access.iter().map(|a| AccessLog::new(a, config.access_buffer)).collect(),
            records: ServiceLog::new(records, config.access_buffer),
            pool: BufPool::default(),
            path: Vec::with_capacity(256),
            scratch: Vec::with_capacity(256),
            watcher,
            reaper: Reaper::new(config.kill_group),
            listeners: Vec::new(),
            idle: 0,
            backend_jobs: 0,
            offload: None,
            resolved: None,
            auth: AuthCache::default(),
            settling: Settling::default(),
        }
    }

    /// Reads the clock; called once per event-loop turn.
    pub fn tick_clock(&mut self) {
        self.now = Instant::now();
        self.seen = self.now;
        self.date.update(SystemTime::now());
    }

    /// Records how many connections are open after new ones came in (a
    /// burst may begin and end between two calls of [`Worker::settle`]).
    pub fn note_open(&mut self, open: usize) {
        self.settling.note(open);
    }

    /// Called once a second with the connections this worker has open:
    /// once a burst has ended, the buffers it took are freed and the
    /// allocator's free memory returned to the system (else the resident
    /// size stays at the burst's peak). True when memory was given back, so
    /// the engine can shrink its own tables too. It also stamps the
    /// watchdog's tick (`WorkerStats::ticked_ms`): every engine's worker
    /// calls it once a second, however busy.
    pub fn settle(&mut self, open: usize) -> bool {
        self.stats.ticked_ms.set(self.now.saturating_duration_since(self.server.started).as_millis() as u64 + 1);
        if !self.settling.give_back(open) {
            return false;
        }
        self.pool.shrink();
        sys::release_free_memory();
        true
    }

    /// Writes out the buffered access-log lines and service records: once
    /// a second and when the worker ends.
    pub fn flush_logs(&mut self) {
        for log in &mut self.logs {
            log.flush();
        }
        self.records.flush();
    }

    /// Whether answers should close their connection: the server is
    /// stopping (a replaced server hands its connections over instead).
    pub fn closing(&self) -> bool {
        self.server.ending() == Ending::Stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_given_back_after_a_burst_and_while_it_drains() {
        let mut s = Settling::default();
        // Ordinary coming and going: nothing.
        assert!(!s.give_back(10));
        assert!(!s.give_back(300));
        assert!(!s.give_back(60));
        // A burst of 1,500 connections, seen between two calls.
        s.note(1500);
        assert!(s.give_back(900));
        // It drains over the next seconds: given back at each, though each
        // step is smaller than SETTLE_DROP.
        assert!(s.give_back(700));
        assert!(s.give_back(650));
        assert!(s.give_back(10));
        // It has stopped shrinking: once more, then nothing until the next
        // burst.
        assert!(s.give_back(10));
        assert!(!s.give_back(10));
        assert!(!s.give_back(5));
        assert!(!s.give_back(200));
        // 200 shed from there is not a burst.
        assert!(!s.give_back(0));
        s.note(2000);
        assert!(s.give_back(1000));
    }
}
