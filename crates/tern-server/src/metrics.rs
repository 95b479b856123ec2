//! Counters. Each worker owns a cache-line-aligned block and is its only
//! writer, so counting is a plain load and store (no locked instruction, no
//! shared cache line); readers sum all blocks when a status page asks.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Static I/O methods counted (`static_io::METHODS`, which checks it).
pub const FILE_METHODS: usize = 4;

/// The reasons an HTTP/2 `GOAWAY` is counted by (RFC 9113 §7), as the
/// status page and `/metrics` name them: a graceful one (the server stops,
/// or a connection served `limits.keepalive_requests`), the client's
/// errors, a flood stopped, and any other.
pub const GOAWAY_REASONS: [&str; 6] =
    ["no_error", "protocol_error", "flow_control_error", "compression_error", "enhance_your_calm", "other"];

/// Who reset an HTTP/2 stream, as the status page and `/metrics` name
/// them: the client (`RST_STREAM` received) or the server (a backend
/// failing after its answer's head, a body that could not be read on).
pub const RESET_BY: [&str; 2] = ["client", "server"];

/// A counter with a single writing thread.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this.
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub fn incr(&self) {
        self.add(1);
    }

    /// Sets a gauge.
    pub fn set(&self, n: u64) {
        self.0.store(n, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// The index of a status's class (`2xx` is 1) in a `[Counter; 5]`;
/// out of range for a status that is not 1xx–5xx.
fn class(code: u16) -> usize {
    usize::from(code / 100).wrapping_sub(1)
}

/// Why a connection timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutKind {
    Idle,
    Header,
    Body,
    Send,
}

/// One worker's counters.
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct WorkerStats {
    pub accepted: Counter,
    /// Refused with `503` at the connection cap or the per-address limit.
    pub rejected: Counter,
    /// Idle keep-alive connections closed to make room at the cap.
    pub evicted: Counter,
    /// Connections given `limits.fast_unsent_bytes`: their client proved
    /// to read fast.
    pub fast_readers: Counter,
    /// Fast readers' connections given `limits.unsent_bytes` back: their
    /// client slowed down.
    pub fast_readers_slowed: Counter,
    /// Connections open in this worker (gauge).
    pub active: Counter,
    pub requests: Counter,
    /// Responses by status class: 1xx … 5xx.
    pub status: [Counter; 5],
    /// Bytes written to client sockets: every response by every I/O method
    /// and backend, counted where they are written (`Conn::flush`, the
    /// `100 Continue` and the `503` to a connection over the cap).
    pub bytes_sent: Counter,
    pub timeouts: [Counter; 4],
    pub open_file_hits: Counter,
    pub open_file_misses: Counter,
    /// Entries in this worker's open-file table (gauge).
    pub open_files: Counter,
    pub cgi_started: Counter,
    /// Refused with `503` at `cgi.max_processes`.
    pub cgi_rejected: Counter,
    /// Answered `502`: no valid response from the program.
    pub cgi_failed: Counter,
    /// Killed at `cgi.timeout`.
    pub cgi_timeouts: Counter,
    /// Requests that have arrived at this worker and are not answered
    /// yet: connection events of the current epoll batch still to handle
    /// (gauge; the load signal of `compress::load`).
    pub in_flight: Counter,
    /// Compressed responses sent from the cache.
    pub compress_hits: Counter,
    /// Requests for a compressed variant not in the cache.
    pub compress_misses: Counter,
    /// Misses answered uncompressed at once because the server was busy,
    /// and queued for the background threads.
    pub compress_deferred: Counter,
    /// Responses with a file body, by the I/O method that sends it
    /// (`static_io::METHODS` order).
    pub file_bodies: [Counter; FILE_METHODS],
    /// TLS handshakes completed in full.
    pub tls_full: Counter,
    /// TLS handshakes that resumed a session (ticket or cache).
    pub tls_resumed: Counter,
    /// TLS connections that ended before their handshake completed
    /// (refused, timed out, not TLS at all).
    pub tls_failed: Counter,
    /// Completed handshakes by version: TLS 1.2, TLS 1.3.
    pub tls_versions: [Counter; 2],
    /// TLS connections open in this worker (gauge).
    pub tls_active: Counter,
    /// Connections that spoke HTTP/2.
    pub h2_connections: Counter,
    /// HTTP/2 streams answered.
    pub h2_streams: Counter,
    /// HTTP/2 connections ended by an error, the client's or the limits'
    /// (a flood, too many resets): the `GOAWAY`s sent with an error code.
    pub h2_errors: Counter,
    /// `GOAWAY`s the server sent, by reason ([`GOAWAY_REASONS`]).
    pub h2_goaways: [Counter; GOAWAY_REASONS.len()],
    /// Streams reset, by whom ([`RESET_BY`]).
    pub h2_resets: [Counter; RESET_BY.len()],
    /// Milliseconds from the server's start to this worker's last
    /// once-a-second turn (`Worker::settle`), plus one (0: it never made
    /// one; a connection thread of the per-request engine never does): the
    /// watchdog's stamp, old when the worker is stuck.
    pub ticked_ms: Counter,
    /// Opens (open-file table misses) done by the I/O pool.
    pub offloaded_opens: Counter,
    /// File regions not in the page cache read by the I/O pool.
    pub offloaded_reads: Counter,
    /// Each site's answers, in the sites' order.
    pub sites: Box<[SiteCounters]>,
}

/// One site's answers, counted by one worker.
#[derive(Default, Debug)]
pub struct SiteCounters {
    /// Responses by status class: 1xx … 5xx.
    pub status: [Counter; 5],
    /// Body bytes announced (what the access log records).
    pub bytes: Counter,
}

impl SiteCounters {
    /// Sums site `i` over every worker: `(status classes, bytes)`.
    pub fn sum(workers: &[WorkerStats], i: usize) -> ([u64; 5], u64) {
        let (mut status, mut bytes) = ([0; 5], 0);
        for site in workers.iter().filter_map(|w| w.sites.get(i)) {
            for (t, c) in status.iter_mut().zip(&site.status) {
                *t += c.get();
            }
            bytes += site.bytes.get();
        }
        (status, bytes)
    }
}

impl WorkerStats {
    pub fn status(&self, code: u16) {
        if let Some(c) = self.status.get(class(code)) {
            c.incr();
        }
    }

    /// Counts an answer of site `site`.
    pub fn site(&self, site: usize, code: u16, bytes: u64) {
        if let Some(s) = self.sites.get(site) {
            if let Some(c) = s.status.get(class(code)) {
                c.incr();
            }
            s.bytes.add(bytes);
        }
    }

    pub fn timeout(&self, kind: TimeoutKind) {
        self.timeouts[kind as usize].incr();
    }
}

/// What all workers of one server count together, and what the status
/// pages read: below the site, so a worker can lend it without knowing
/// how the server was assembled.
pub struct ServerStats {
    /// One block per thread that serves connections (its only writer).
    pub workers: Box<[WorkerStats]>,
    /// The server's listener sets: event workers, pool fronts.
    pub worker_threads: usize,
    /// Open connections across workers (for `max_connections`).
    pub connections: AtomicUsize,
    /// CGI programs running across workers (for `cgi.max_processes`).
    pub cgi_running: AtomicUsize,
    /// The staged engine's stages (`service_records::STAGES` order); all
    /// zero under the other engines.
    pub stages: [StageStats; 4],
    /// An [`Ending`], as a number.
    ending: AtomicU8,
    /// When the workers give up on the connections still open, in
    /// milliseconds after `started`; `u64::MAX`: no limit.
    drain_until: AtomicU64,
    pub started: Instant,
}

/// One stage of the staged engine. All its threads write it (a stage has
/// no single writer), so these are shared atomics: one add per connection
/// a stage takes, beside the queue hand-off that costs more.
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct StageStats {
    /// Threads serving the stage.
    pub threads: AtomicU64,
    /// Connections waiting in its queue, as last seen when one entered or
    /// left it.
    pub queue: AtomicU64,
    /// Time its threads spent on connections, in microseconds.
    pub busy_us: AtomicU64,
    /// Connections it took from its queue.
    pub taken: AtomicU64,
}

impl StageStats {
    pub fn queued(&self, len: usize) {
        self.queue.store(len as u64, Relaxed);
    }

    /// A connection taken was worked on for `d`.
    pub fn worked(&self, d: Duration) {
        self.busy_us.fetch_add(d.as_micros() as u64, Relaxed);
        self.taken.fetch_add(1, Relaxed);
    }
}

/// How far a server is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ending {
    Running,
    /// Replaced on reload: accepts nothing, hands its connections over to
    /// its successor as they become idle.
    Reload,
    /// SIGTERM: accepts nothing, finishes what is in flight, closes.
    Stop,
}

impl ServerStats {
    /// Counters for `blocks` engine threads, each counting `sites` sites.
    pub fn new(worker_threads: usize, blocks: usize, sites: usize) -> ServerStats {
        let block =
            || WorkerStats { sites: (0..sites).map(|_| SiteCounters::default()).collect(), ..Default::default() };
        ServerStats {
            workers: (0..blocks).map(|_| block()).collect(),
            worker_threads,
            connections: AtomicUsize::new(0),
            cgi_running: AtomicUsize::new(0),
            stages: Default::default(),
            ending: AtomicU8::new(Ending::Running as u8),
            drain_until: AtomicU64::new(u64::MAX),
            started: Instant::now(),
        }
    }

    pub fn ending(&self) -> Ending {
        match self.ending.load(Relaxed) {
            0 => Ending::Running,
            1 => Ending::Reload,
            _ => Ending::Stop,
        }
    }

    /// Moves on to `how` (never back), with the connections still open
    /// given at most `limit` from now (`None`: no limit); an earlier limit
    /// already set stays.
    pub fn end(&self, how: Ending, limit: Option<Duration>) {
        if let Some(limit) = limit {
            let ms = (self.started.elapsed() + limit).as_millis().min(u128::from(u64::MAX - 1)) as u64;
            self.drain_until.fetch_min(ms, SeqCst);
        }
        self.ending.fetch_max(how as u8, SeqCst);
    }

    /// When the connections still open are given up on.
    pub fn drain_deadline(&self) -> Option<Instant> {
        match self.drain_until.load(Relaxed) {
            u64::MAX => None,
            ms => Some(self.started + Duration::from_millis(ms)),
        }
    }
}

/// The sum over all workers.
#[derive(Default, Debug, Clone, Copy)]
pub struct Totals {
    pub accepted: u64,
    pub rejected: u64,
    pub evicted: u64,
    pub fast_readers: u64,
    pub fast_readers_slowed: u64,
    pub active: u64,
    pub requests: u64,
    pub status: [u64; 5],
    pub bytes_sent: u64,
    pub timeouts: [u64; 4],
    pub open_file_hits: u64,
    pub open_file_misses: u64,
    pub open_files: u64,
    pub cgi_started: u64,
    pub cgi_rejected: u64,
    pub cgi_failed: u64,
    pub cgi_timeouts: u64,
    pub in_flight: u64,
    pub compress_hits: u64,
    pub compress_misses: u64,
    pub compress_deferred: u64,
    pub file_bodies: [u64; FILE_METHODS],
    pub tls_full: u64,
    pub tls_resumed: u64,
    pub tls_failed: u64,
    pub tls_versions: [u64; 2],
    pub tls_active: u64,
    pub h2_connections: u64,
    pub h2_streams: u64,
    pub h2_errors: u64,
    pub h2_goaways: [u64; GOAWAY_REASONS.len()],
    pub h2_resets: [u64; RESET_BY.len()],
    pub offloaded_opens: u64,
    pub offloaded_reads: u64,
}

impl Totals {
    pub fn sum(workers: &[WorkerStats]) -> Totals {
        let mut t = Totals::default();
        for w in workers {
            t.accepted += w.accepted.get();
            t.rejected += w.rejected.get();
            t.evicted += w.evicted.get();
            t.fast_readers += w.fast_readers.get();
            t.fast_readers_slowed += w.fast_readers_slowed.get();
            t.active += w.active.get();
            t.requests += w.requests.get();
            for (sum, c) in t.status.iter_mut().zip(&w.status) {
                *sum += c.get();
            }
            t.bytes_sent += w.bytes_sent.get();
            for (sum, c) in t.timeouts.iter_mut().zip(&w.timeouts) {
                *sum += c.get();
            }
            t.open_file_hits += w.open_file_hits.get();
            t.open_file_misses += w.open_file_misses.get();
            t.open_files += w.open_files.get();
            t.cgi_started += w.cgi_started.get();
            t.cgi_rejected += w.cgi_rejected.get();
            t.cgi_failed += w.cgi_failed.get();
            t.cgi_timeouts += w.cgi_timeouts.get();
            t.in_flight += w.in_flight.get();
            t.compress_hits += w.compress_hits.get();
            t.compress_misses += w.compress_misses.get();
            t.compress_deferred += w.compress_deferred.get();
            for (sum, c) in t.file_bodies.iter_mut().zip(&w.file_bodies) {
                *sum += c.get();
            }
            t.tls_full += w.tls_full.get();
            t.tls_resumed += w.tls_resumed.get();
            t.tls_failed += w.tls_failed.get();
            for (sum, c) in t.tls_versions.iter_mut().zip(&w.tls_versions) {
                *sum += c.get();
            }
            t.tls_active += w.tls_active.get();
            t.h2_connections += w.h2_connections.get();
            t.h2_streams += w.h2_streams.get();
            t.h2_errors += w.h2_errors.get();
            for (sum, c) in t.h2_goaways.iter_mut().zip(&w.h2_goaways) {
                *sum += c.get();
            }
            for (sum, c) in t.h2_resets.iter_mut().zip(&w.h2_resets) {
                *sum += c.get();
            }
            t.offloaded_opens += w.offloaded_opens.get();
            t.offloaded_reads += w.offloaded_reads.get();
        }
        t
    }
}
