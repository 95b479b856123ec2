//! One worker thread: a mio (epoll) loop driving a share of the connections.
//!
//! The loop is built so that the generator costs the server's machine as
//! little as possible and never hides a stall:
//!
//! - requests are byte strings prepared before the run ([`Plan`]), written
//!   with one `writev` per connection and batch (pipelined requests go out
//!   together); responses are framed by the sans-I/O [`ResponseParser`] from a
//!   read buffer shared by all connections of the thread — nothing is
//!   allocated per request;
//! - a read that returns less than the buffer's room drained the socket, so
//!   the loop does not issue the extra `read` that would only say
//!   `EWOULDBLOCK` (mio is edge-triggered; a later arrival is a new edge);
//! - in open loop, request *k* is due at `first + k·interval` whatever
//!   happened before. A timerfd (nanosecond resolution, unlike epoll's
//!   milliseconds) wakes the loop for the next due request; a request that
//!   finds no free connection waits, and its latency still counts from the
//!   time it was due. That is how a server stall shows in the numbers instead
//!   of silently lowering the rate (coordinated omission);
//! - a request's "start" is when it was handed to a connection, so a fresh
//!   connection's TCP handshake is part of its first request's latency.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::h2;
use super::plan::Plan;
use super::response::{Response, ResponseParser, MAX_LINE};
use super::stats::{micros, ErrorClass, Stats, LATE_AFTER};
use super::timeline::Row;
use super::tls;
use super::wait::{Style, Waiter};

/// The open-loop timer's token; connections use their slot index.
const TIMER: Token = Token(usize::MAX);

/// How often in-flight requests are checked against `--timeout`, and the
/// longest the loop sleeps (so Ctrl-C and progress stay responsive).
const TICK: Duration = Duration::from_millis(10);
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// Pause before reconnecting after a refused connection, so a dead server
/// does not turn the generator into a connect-spinning loop.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Bytes read per `read` call; the read buffer also has room in front for a
/// head line carried over from the previous read. Small enough that a
/// large response is taken in several reads: each one that frees receive
/// buffer sends a window update, and the acknowledgement transmits the
/// server's queued data from this side (loopback runs both ends of TCP on
/// whichever CPU acts). Measured against `tern serve` (one worker, pinned
/// apart, 1 MiB responses, three rounds): 64 KiB reads 2,372 / 2,705 /
/// 3,213 responses/s with the server's CPU saturated (64 connections);
/// 16 KiB 2,719–4,534 (32 connections) and 2,442–4,053 (64) in one slot
/// where 8 KiB made 4,073–4,833 and 4,281–5,497, and `wrk` (8 KiB)
/// 4,469–4,924 and 4,529–4,817; in the next slot `wrk` made 4,727–6,943
/// and 8 KiB reads 4,338–4,878, a gap not explained yet (`bench/RESULTS.md`,
/// 2026-11-27). 40 KiB responses came 3 % slower in 8 KiB reads
/// (131–137k/s against 136–141k, `wrk` 104–106k, 64 connections); 1 KiB
/// responses never fill either.
const READ_CHUNK: usize = 8 * 1024;

/// Most requests gathered into one `writev`.
const MAX_IOV: usize = 64;

/// Constant-rate schedule of one thread: request k is due at
/// `first + k * interval`.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop {
    pub first: Instant,
    pub interval: Duration,
}

/// Everything one worker needs; built by the coordinator.
pub struct Setup<'a> {
    pub plan: &'a Plan,
    pub addr: SocketAddr,
    /// For `https://`: the client configuration all connections share.
    pub tls: Option<&'a std::sync::Arc<rustls::ClientConfig>>,
    /// HTTP/2: the requests as HTTP/2 heads and the client's settings.
    pub h2: Option<&'a h2::Client>,
    /// Connections of this thread, and the global number of the first one.
    pub connections: usize,
    pub conn_base: usize,
    /// Requests to measure (count mode), `None` in duration mode.
    pub budget: Option<u64>,
    /// Requests intended before this instant are warm-up, not measured.
    pub measure_from: Instant,
    /// Duration mode: no request is issued (intended) at or after this.
    pub end: Option<Instant>,
    pub open: Option<OpenLoop>,
    pub keepalive: bool,
    pub pipeline: usize,
    pub timeout: Duration,
    pub timeline: bool,
    /// Where this thread starts in the mix schedule, so threads interleave.
    pub schedule_offset: usize,
    pub interrupt: &'a AtomicBool,
    /// Requests this thread has resolved, for the progress line.
    pub progress: &'a AtomicU64,
}

/// What a worker hands back.
pub struct Outcome {
    pub stats: Stats,
    pub rows: Vec<Row>,
    /// CPU time the thread used while measuring.
    pub cpu: Duration,
    /// Time it was runnable but had no CPU while measuring, if known.
    pub waited: Option<Duration>,
    /// Wall time the thread spent measuring.
    pub wall: Duration,
    /// When the thread stopped.
    pub finished: Instant,
}

/// A request handed to a connection.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    intended: Instant,
    start: Instant,
    req: u32,
    measured: bool,
}

/// A request waiting for a connection.
#[derive(Debug, Clone, Copy)]
struct Pending {
    intended: Instant,
    req: u32,
    measured: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Connecting,
    Open,
}

struct Conn {
    stream: Option<TcpStream>,
    /// The TLS session over `stream` (`https://`).
    tls: Option<Box<rustls::ClientConnection>>,
    phase: Phase,
    inflight: VecDeque<InFlight>,
    /// `inflight[unsent..]` are not completely written; `unsent_off` bytes
    /// of `inflight[unsent]` are.
    unsent: usize,
    unsent_off: usize,
    parser: ResponseParser,
    /// An incomplete head line left over from the last read.
    carry: Vec<u8>,
    /// HTTP/2: the session, once connected (it then owns the socket and the
    /// TLS session). Its streams are `inflight[..unsent]`, in order.
    h2: Option<h2::Session>,
    /// Takes no more requests (no keep-alive): closes after the response.
    closing: bool,
    /// In the thread's free list.
    listed: bool,
    /// Reconnect no earlier than this (after a failed connect).
    retry_at: Option<Instant>,
}

/// Decides which request goes next and when.
struct Scheduler {
    open: Option<OpenLoop>,
    /// Open loop: the next request index (its due time derives from it).
    next_k: u64,
    end: Option<Instant>,
    measure_from: Instant,
    budget: Option<u64>,
    measured_issued: u64,
    /// Requests sent on a connection the server closed before answering
    /// them (after a `Connection: close` response): sent again first.
    retry: VecDeque<Pending>,
    cursor: usize,
}

impl Scheduler {
    fn due(&self, k: u64) -> Option<Instant> {
        self.open.map(|o| o.first + Duration::from_nanos((k as f64 * o.interval.as_nanos() as f64) as u64))
    }

    /// No fresh request will ever be issued.
    fn exhausted(&self, now: Instant) -> bool {
        if self.budget.is_some_and(|b| self.measured_issued >= b) {
            return true;
        }
        match (self.end, self.due(self.next_k)) {
            (Some(end), Some(due)) => due >= end,
            (Some(end), None) => now >= end,
            (None, _) => false,
        }
    }

    /// When the next fresh request is due (open loop, not exhausted).
    fn next_due(&self, now: Instant) -> Option<Instant> {
        if self.exhausted(now) {
            return None;
        }
        self.due(self.next_k)
    }

    fn next(&mut self, now: Instant, schedule: &[u32]) -> Option<Pending> {
        if let Some(p) = self.retry.pop_front() {
            return Some(p);
        }
        if self.exhausted(now) {
            return None;
        }
        let intended = match self.due(self.next_k) {
            Some(due) if due > now => return None,
            Some(due) => due,
            None => now,
        };
        self.next_k += 1;
        let measured = intended >= self.measure_from;
        if measured {
            self.measured_issued += 1;
        }
        let req = schedule[self.cursor];
        self.cursor = (self.cursor + 1) % schedule.len();
        Some(Pending { intended, req, measured })
    }

    /// Measured requests that were due before `end` but never left.
    fn abandon(&mut self, end: Instant) -> u64 {
        let mut count = self.retry.drain(..).filter(|p| p.measured).count() as u64;
        while let Some(due) = self.due(self.next_k).filter(|&d| d < end) {
            if due >= self.measure_from {
                count += 1;
            }
            self.next_k += 1;
        }
        count
    }
}

/// A one-shot CLOCK_MONOTONIC timerfd: wakes epoll at a precise instant.
struct TimerFd {
    fd: OwnedFd,
    armed_for: Option<Instant>,
}

impl TimerFd {
    fn new() -> io::Result<TimerFd> {
        // SAFETY: plain syscall; the returned descriptor is owned below.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(TimerFd { fd: unsafe { OwnedFd::from_raw_fd(fd) }, armed_for: None })
    }

    /// Fires at `at`. Re-arming resets the expiry count, so an edge-triggered
    /// registration reports the next expiry without the fd being read.
    fn arm(&mut self, at: Instant, now: Instant) -> io::Result<()> {
        if self.armed_for == Some(at) {
            return Ok(());
        }
        let after = at.saturating_duration_since(now).max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: valid fd and a fully initialised itimerspec.
        if unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_for = Some(at);
        Ok(())
    }
}

/// What the calling thread has had from the scheduler so far.
#[derive(Debug, Clone, Copy)]
struct ThreadClock {
    /// CPU time used (CLOCK_THREAD_CPUTIME_ID).
    cpu: Duration,
    /// Time spent runnable but waiting for a CPU (schedstat), when the
    /// kernel reports it. On a shared machine this is what distorts the
    /// generator's timing even when its CPU use looks low.
    waited: Option<Duration>,
}

/// How long the calling thread has been runnable without a CPU, when the
/// kernel reports it (schedstat).
fn run_delay() -> Option<Duration> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .map(Duration::from_nanos)
}

impl ThreadClock {
    fn now() -> ThreadClock {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid pointer to a timespec; the clock id is a constant.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ThreadClock { cpu: Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32), waited: run_delay() }
    }

    /// CPU used and time waited for a CPU since `earlier`.
    fn since(self, earlier: ThreadClock) -> (Duration, Option<Duration>) {
        let waited = match (self.waited, earlier.waited) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            _ => None,
        };
        (self.cpu.saturating_sub(earlier.cpu), waited)
    }
}

pub struct Worker<'a> {
    setup: Setup<'a>,
    poll: Poll,
    waiter: Waiter,
    timer: Option<TimerFd>,
    conns: Vec<Conn>,
    free: Vec<usize>,
    sched: Scheduler,
    rbuf: Box<[u8]>,
    stats: Stats,
    rows: Vec<Row>,
    inflight_total: usize,
    /// Connections waiting out [`CONNECT_BACKOFF`].
    backoffs: usize,
    depth: usize,
}

impl<'a> Worker<'a> {
    pub fn new(setup: Setup<'a>) -> io::Result<Worker<'a>> {
        let poll = Poll::new()?;
        let timer = match setup.open {
            Some(_) => {
                let timer = TimerFd::new()?;
                poll.registry().register(&mut SourceFd(&timer.fd.as_raw_fd()), TIMER, Interest::READABLE)?;
                Some(timer)
            }
            None => None,
        };
        let depth = if setup.keepalive { setup.pipeline } else { 1 };
        let conns = (0..setup.connections)
            .map(|_| Conn {
                stream: None,
                tls: None,
                phase: Phase::Idle,
                inflight: VecDeque::with_capacity(depth),
                unsent: 0,
                unsent_off: 0,
                parser: ResponseParser::new(),
                carry: Vec::new(),
                h2: None,
                closing: false,
                listed: false,
                retry_at: None,
            })
            .collect();
        let sched = Scheduler {
            open: setup.open,
            next_k: 0,
            end: setup.end,
            measure_from: setup.measure_from,
            budget: setup.budget,
            measured_issued: 0,
            retry: VecDeque::new(),
            cursor: setup.schedule_offset % setup.plan.schedule.len(),
        };
        let rows = match (setup.timeline, setup.budget) {
            (true, Some(n)) => Vec::with_capacity(n as usize),
            _ => Vec::new(),
        };
        Ok(Worker {
            stats: Stats::new(setup.open.is_some(), setup.plan.requests.len()),
            free: Vec::with_capacity(setup.connections),
            waiter: Waiter::new(match (setup.keepalive, setup.open) {
                (false, _) => Style::Poll,
                (true, None) => Style::Nap,
                (true, Some(_)) => Style::Sleep,
            }),
            setup,
            poll,
            timer,
            conns,
            sched,
            rbuf: vec![0; READ_CHUNK + MAX_LINE + 1].into_boxed_slice(),
            rows,
            inflight_total: 0,
            backoffs: 0,
            depth,
        })
    }

    pub fn run(mut self) -> io::Result<Outcome> {
        let mut events = Events::with_capacity(1024);
        let started = Instant::now();
        let mut clock_mark = (started >= self.setup.measure_from).then(ThreadClock::now);
        let mut next_tick = started + TICK;
        let drain_deadline = self.setup.end.map(|end| end + self.setup.timeout);
        for slot in 0..self.conns.len() {
            self.mark_free(slot);
        }
        let finished = loop {
            let now = Instant::now();
            if clock_mark.is_none() && now >= self.setup.measure_from {
                clock_mark = Some(ThreadClock::now());
            }
            if self.setup.interrupt.load(Ordering::Relaxed) {
                break now;
            }
            if now >= next_tick {
                self.tick(now);
                self.waiter.check(now, run_delay(), self.resolved(), self.stats.wire_bytes);
                next_tick = now + TICK;
            }
            self.dispatch(now);
            self.setup.progress.store(self.resolved(), Ordering::Relaxed);
            if self.inflight_total == 0 && self.sched.retry.is_empty() && self.sched.exhausted(now) {
                break now;
            }
            if let Some(deadline) = drain_deadline.filter(|&d| now >= d) {
                self.abandon(deadline - self.setup.timeout, now);
                break now;
            }

            // The tick only matters while requests can time out or a
            // connection waits to reconnect; otherwise sleep longer.
            let mut wake = now + MAX_SLEEP;
            if self.inflight_total > 0 || self.backoffs > 0 {
                wake = wake.min(next_tick);
            }
            if let Some(end) = self.setup.end.filter(|&e| e > now) {
                wake = wake.min(end);
            }
            if let Some(d) = drain_deadline {
                wake = wake.min(d);
            }
            if !self.free.is_empty() {
                if let (Some(due), Some(timer)) = (self.sched.next_due(now), self.timer.as_mut()) {
                    if due < wake {
                        timer.arm(due, now)?;
                    }
                }
            }
            let sleep = wake.saturating_duration_since(now);
            match self.waiter.wait(&mut self.poll, &mut events, sleep, self.inflight_total) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                if event.token() == TIMER {
                    if let Some(timer) = self.timer.as_mut() {
                        timer.armed_for = None;
                    }
                    continue;
                }
                self.on_event(event.token().0, event.is_readable(), event.is_writable(), event.is_read_closed());
            }
        };
        self.setup.progress.store(self.resolved(), Ordering::Relaxed);
        let measured_from = self.setup.measure_from.max(started);
        let (cpu, waited) = clock_mark.map_or((Duration::ZERO, None), |mark| ThreadClock::now().since(mark));
        Ok(Outcome {
            stats: self.stats,
            rows: self.rows,
            cpu,
            waited,
            wall: finished.saturating_duration_since(measured_from),
            finished,
        })
    }

    fn resolved(&self) -> u64 {
        self.stats.responses + self.stats.errors.iter().sum::<u64>()
    }

    fn can_take(&self, slot: usize) -> bool {
        let c = &self.conns[slot];
        !c.closing && c.retry_at.is_none() && c.inflight.len() < self.depth
    }

    fn mark_free(&mut self, slot: usize) {
        if !self.conns[slot].listed && self.can_take(slot) {
            self.conns[slot].listed = true;
            self.free.push(slot);
        }
    }

    /// Hands due requests to free connections (most recently freed first:
    /// its buffers are warm) and writes them.
    fn dispatch(&mut self, now: Instant) {
        while let Some(&slot) = self.free.last() {
            let mut issued = false;
            while self.can_take(slot) {
                let Some(p) = self.sched.next(now, &self.setup.plan.schedule) else { break };
                self.issue(slot, p, now);
                issued = true;
            }
            if issued && self.conns[slot].phase == Phase::Open {
                self.flush(slot);
            }
            if self.can_take(slot) {
                if !issued {
                    break;
                }
                continue;
            }
            self.free.pop();
            self.conns[slot].listed = false;
        }
    }

    fn issue(&mut self, slot: usize, p: Pending, now: Instant) {
        if self.conns[slot].phase == Phase::Idle && self.connect(slot, now).is_err() {
            if p.measured {
                self.stats.error(ErrorClass::Connect, 1);
                let f = InFlight { intended: p.intended, start: now, req: p.req, measured: true };
                self.row(slot, &f, now, Err(ErrorClass::Connect));
            }
            self.conns[slot].retry_at = Some(now + CONNECT_BACKOFF);
            self.backoffs += 1;
            return;
        }
        if p.measured && self.sched.open.is_some() && now.saturating_duration_since(p.intended) > LATE_AFTER {
            self.stats.late += 1;
        }
        let keepalive = self.setup.keepalive;
        let c = &mut self.conns[slot];
        c.inflight.push_back(InFlight { intended: p.intended, start: now, req: p.req, measured: p.measured });
        if !keepalive {
            c.closing = true;
        }
        self.inflight_total += 1;
    }

    fn connect(&mut self, slot: usize, now: Instant) -> io::Result<()> {
        let mut stream = TcpStream::connect(self.setup.addr)?;
        stream.set_nodelay(true)?;
        let tls = match self.setup.tls {
            Some(config) => Some(tls::session(config, self.setup.plan.url.host_for_lookup())?),
            None => None,
        };
        self.poll.registry().register(&mut stream, Token(slot), Interest::READABLE | Interest::WRITABLE)?;
        if now >= self.setup.measure_from {
            self.stats.connects += 1;
        }
        let c = &mut self.conns[slot];
        c.stream = Some(stream);
        c.tls = tls;
        c.phase = Phase::Connecting;
        Ok(())
    }

    fn on_event(&mut self, slot: usize, readable: bool, writable: bool, read_closed: bool) {
        if self.conns[slot].h2.is_some() {
            return self.drive_h2(slot);
        }
        if self.conns[slot].phase == Phase::Connecting {
            let Some(stream) = self.conns[slot].stream.as_ref() else { return };
            match stream.take_error() {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => return self.fail(slot, ErrorClass::Connect, Instant::now()),
            }
            match stream.peer_addr() {
                Ok(_) => self.conns[slot].phase = Phase::Open,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(_) => return self.fail(slot, ErrorClass::Connect, Instant::now()),
            }
            self.flush(slot);
        } else if writable && self.conns[slot].unsent < self.conns[slot].inflight.len() {
            self.flush(slot);
        } else if writable {
            // Records (a handshake flight, requests) held by a full socket.
            let c = &mut self.conns[slot];
            if let (Some(tls), Some(stream)) = (c.tls.as_mut(), c.stream.as_mut()) {
                if tls::send(tls, stream).is_err() {
                    return self.fail(slot, ErrorClass::Write, Instant::now());
                }
            }
        }
        if (readable || read_closed) && self.conns[slot].phase == Phase::Open {
            self.read(slot, read_closed);
        }
    }

    /// Writes the connection's unsent requests, as many as the socket takes.
    fn flush(&mut self, slot: usize) {
        if let Some(client) = self.setup.h2 {
            let c = &mut self.conns[slot];
            if c.h2.is_none() {
                let Some(stream) = c.stream.take() else { return };
                c.h2 = Some(h2::Session::start(client, stream, c.tls.take()));
            }
            return self.drive_h2(slot);
        }
        let plan = self.setup.plan;
        loop {
            let c = &mut self.conns[slot];
            if c.unsent >= c.inflight.len() {
                return;
            }
            let Some(stream) = c.stream.as_mut() else { return };
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            for (i, f) in c.inflight.iter().skip(c.unsent).take(MAX_IOV).enumerate() {
                let bytes = &plan.requests[f.req as usize].bytes;
                iov[i] = IoSlice::new(if i == 0 { &bytes[c.unsent_off..] } else { bytes });
                n_iov = i + 1;
            }
            let result = match c.tls.as_mut() {
                Some(tls) => tls::write(tls, stream, &iov[..n_iov]),
                None if n_iov == 1 => stream.write(&iov[0]),
                None => stream.write_vectored(&iov[..n_iov]),
            };
            match result {
                Ok(0) => return self.fail(slot, ErrorClass::Write, Instant::now()),
                Ok(mut n) => {
                    while n > 0 {
                        let len = plan.requests[c.inflight[c.unsent].req as usize].bytes.len();
                        let left = len - c.unsent_off;
                        if n >= left {
                            n -= left;
                            c.unsent += 1;
                            c.unsent_off = 0;
                        } else {
                            c.unsent_off += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.fail(slot, ErrorClass::Write, Instant::now()),
            }
        }
    }

    /// Reads and accounts the connection's responses. The next requests
    /// leave after the whole batch of events is handled (the loop's
    /// `dispatch`), as wrk's do: written one by one as each response is
    /// read, they reach the server spread over the batch, and it wakes up
    /// more often for fewer requests each time — more work per request on
    /// the machine measured.
    fn read(&mut self, slot: usize, read_closed: bool) {
        let mut rbuf = std::mem::take(&mut self.rbuf);
        self.read_into(slot, read_closed, &mut rbuf);
        self.rbuf = rbuf;
    }

    fn read_into(&mut self, slot: usize, read_closed: bool, rbuf: &mut [u8]) {
        loop {
            let c = &mut self.conns[slot];
            let Some(stream) = c.stream.as_mut() else { return };
            let carried = c.carry.len();
            rbuf[..carried].copy_from_slice(&c.carry);
            let room = READ_CHUNK.min(rbuf.len() - carried);
            let buf = &mut rbuf[carried..carried + room];
            let read = match c.tls.as_mut() {
                Some(tls) => tls::read(tls, stream, buf),
                None => stream.read(buf),
            };
            let n = match read {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.fail(slot, ErrorClass::Read, Instant::now()),
            };
            let now = Instant::now();
            c.carry.clear();
            if n == 0 {
                if carried > 0 {
                    // Closed in the middle of a head line.
                    return self.fail(slot, ErrorClass::Read, now);
                }
                return self.eof(slot, now);
            }
            let data = &rbuf[..carried + n];
            let mut pos = 0;
            while pos < data.len() {
                let c = &mut self.conns[slot];
                let Some(front) = c.inflight.front() else {
                    // Bytes nobody asked for: not a server we can measure.
                    return self.fail(slot, ErrorClass::Read, now);
                };
                let head = self.setup.plan.requests[front.req as usize].head;
                match c.parser.parse(&data[pos..], head) {
                    Ok((used, Some(response))) => {
                        pos += used;
                        if !self.complete(slot, 0, response, now) {
                            return;
                        }
                    }
                    Ok((used, None)) => {
                        pos += used;
                        break;
                    }
                    Err(_) => return self.fail(slot, ErrorClass::Read, now),
                }
            }
            self.conns[slot].carry.extend_from_slice(&data[pos..]);
            // A short read drained the socket; through TLS only
            // `WouldBlock` says so.
            if n < room && !read_closed && self.conns[slot].tls.is_none() {
                return;
            }
        }
    }

    /// HTTP/2: hands the waiting requests to the session as streams, lets
    /// it read and write what the socket allows, and accounts the responses
    /// and stream errors it completed. Where HTTP/1.1 has `flush` and
    /// `read`, the session does both in one poll.
    fn drive_h2(&mut self, slot: usize) {
        let Some(client) = self.setup.h2 else { return };
        let mut alive = Ok(true);
        for _ in 0..2 {
            let c = &mut self.conns[slot];
            let Some(session) = c.h2.as_mut() else { return };
            let was_open = session.is_open();
            let mut refused = false;
            while c.unsent < c.inflight.len() && !session.going_away() {
                match session.send(client, c.inflight[c.unsent].req as usize) {
                    Ok(true) => c.unsent += 1,
                    Ok(false) => break,
                    Err(_) => {
                        // Refused by `h2` itself, not for a GOAWAY: it
                        // would refuse it again, so it fails as a write.
                        refused = !session.going_away();
                        break;
                    }
                }
            }
            alive = session.drive();
            let opened = !was_open && session.is_open();
            if refused {
                let unsent = self.conns[slot].unsent;
                self.stream_failed(slot, unsent, Some(ErrorClass::Write), Instant::now());
            }
            // Just through its handshake: send what waited for it.
            if !opened {
                break;
            }
        }
        let now = Instant::now();
        if let Some(session) = &self.conns[slot].h2 {
            let received = session.take_received();
            if now >= self.setup.measure_from {
                self.stats.wire_bytes += received;
            }
        }
        let mut i = 0;
        while let Some(session) = self.conns[slot].h2.as_mut() {
            if i >= session.in_flight() {
                break;
            }
            match session.poll_exchange(i) {
                std::task::Poll::Pending => i += 1,
                std::task::Poll::Ready(Ok(answer)) => {
                    let response =
                        Response { status: answer.status, body_bytes: answer.body_bytes, wire_bytes: 0, close: false };
                    self.complete(slot, i, response, now);
                }
                std::task::Poll::Ready(Err(e)) => self.stream_failed(slot, i, h2::verdict(&e), now),
            }
        }
        let c = &mut self.conns[slot];
        let Some(session) = c.h2.as_ref() else { return };
        if session.going_away() {
            c.closing = true;
        }
        match alive {
            Ok(true) if session.in_flight() > 0 || !c.closing => {}
            // Going away with nothing in flight: what was not sent yet
            // goes to another connection.
            Ok(true) => self.close(slot),
            // Ended, its streams failed above (`h2` hands the
            // connection's error to each): what was not sent yet goes to
            // another connection.
            Ok(_) | Err(_) if session.in_flight() == 0 => self.close(slot),
            Ok(_) => self.fail(slot, ErrorClass::Read, now),
            Err(e) => self.fail(slot, h2::verdict(&e).unwrap_or(ErrorClass::Read), now),
        }
    }

    /// HTTP/2: the `i`-th request in flight got no response. `None`: the
    /// server did not process it, and it is sent again elsewhere.
    fn stream_failed(&mut self, slot: usize, i: usize, class: Option<ErrorClass>, now: Instant) {
        let f = self.take(slot, i);
        match class {
            None => self.sched.retry.push_back(Pending { intended: f.intended, req: f.req, measured: f.measured }),
            Some(class) if f.measured => {
                self.stats.error(class, 1);
                self.row(slot, &f, now, Err(class));
            }
            Some(_) => {}
        }
        self.mark_free(slot);
    }

    /// The server closed the connection.
    fn eof(&mut self, slot: usize, now: Instant) {
        match self.conns[slot].parser.finish() {
            Ok(Some(response)) => {
                if self.complete(slot, 0, response, now) {
                    // Complete returned "still open", but the socket is done.
                    self.close(slot);
                }
            }
            Ok(None) if self.conns[slot].inflight.is_empty() => self.close(slot),
            Ok(None) | Err(_) => self.fail(slot, ErrorClass::Read, now),
        }
    }

    /// Takes the `i`-th request in flight off the connection.
    fn take(&mut self, slot: usize, i: usize) -> InFlight {
        let c = &mut self.conns[slot];
        let f = c.inflight.remove(i).expect("a response answers an in-flight request");
        if c.unsent > i {
            c.unsent -= 1;
        } else {
            // Answered before we finished sending it; the rest is moot.
            c.unsent_off = 0;
        }
        self.inflight_total -= 1;
        f
    }

    /// Accounts the response to the `i`-th request in flight (HTTP/1.1:
    /// always the first). Returns whether the connection stays open.
    fn complete(&mut self, slot: usize, i: usize, response: Response, now: Instant) -> bool {
        let f = self.take(slot, i);
        if f.measured {
            let s = &mut self.stats;
            let _ = s.service.record(micros(now - f.start));
            if let Some(h) = s.response.as_mut() {
                let _ = h.record(micros(now - f.intended));
            }
            s.responses += 1;
            s.status[usize::from(response.status).min(999)] += 1;
            s.body_bytes += response.body_bytes;
            s.wire_bytes += response.wire_bytes;
            s.per_request[f.req as usize] += 1;
            self.row(slot, &f, now, Ok((response.status, response.body_bytes)));
        }
        let c = &self.conns[slot];
        if response.close || (c.closing && c.inflight.is_empty()) {
            self.close(slot);
            return false;
        }
        self.mark_free(slot);
        true
    }

    fn row(&mut self, slot: usize, f: &InFlight, end: Instant, result: Result<(u16, u64), ErrorClass>) {
        if !self.setup.timeline {
            return;
        }
        let base = self.setup.measure_from;
        let ns = |t: Instant| t.saturating_duration_since(base).as_nanos() as u64;
        let (status, bytes, error) = match result {
            Ok((status, bytes)) => (status, bytes, None),
            Err(class) => (0, 0, Some(class)),
        };
        self.rows.push(Row {
            intended_ns: ns(f.intended),
            start_ns: ns(f.start),
            end_ns: ns(end),
            status,
            bytes,
            connection: (self.setup.conn_base + slot) as u32,
            request: f.req,
            error,
        });
    }

    /// Closes the connection; requests still in flight were not processed by
    /// the server (it announced the close) and are sent again elsewhere.
    fn close(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        for f in c.inflight.drain(..).rev() {
            self.sched.retry.push_front(Pending { intended: f.intended, req: f.req, measured: f.measured });
            self.inflight_total -= 1;
        }
        self.reset(slot);
    }

    /// Fails every request in flight on the connection and closes it.
    fn fail(&mut self, slot: usize, class: ErrorClass, now: Instant) {
        let inflight = std::mem::take(&mut self.conns[slot].inflight);
        for f in &inflight {
            if f.measured {
                self.stats.error(class, 1);
                self.row(slot, f, now, Err(class));
            }
        }
        self.inflight_total -= inflight.len();
        let mut inflight = inflight;
        inflight.clear();
        self.conns[slot].inflight = inflight;
        if class == ErrorClass::Connect {
            self.conns[slot].retry_at = Some(now + CONNECT_BACKOFF);
            self.backoffs += 1;
        }
        self.reset(slot);
    }

    fn reset(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        if let Some(mut stream) = c.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
        c.tls = None;
        c.phase = Phase::Idle;
        c.unsent = 0;
        c.unsent_off = 0;
        c.parser = ResponseParser::new();
        c.carry.clear();
        c.h2 = None;
        c.closing = false;
        self.mark_free(slot);
    }

    /// Periodic work: reconnect after back-off, time out slow requests.
    fn tick(&mut self, now: Instant) {
        for slot in 0..self.conns.len() {
            let c = &self.conns[slot];
            if c.retry_at.is_some_and(|at| at <= now) {
                self.conns[slot].retry_at = None;
                self.backoffs -= 1;
                self.mark_free(slot);
                continue;
            }
            if c.inflight.front().is_some_and(|f| now - f.start > self.setup.timeout) {
                self.fail(slot, ErrorClass::Timeout, now);
            }
        }
    }

    /// The drain after the end lasted `--timeout`: whatever is left is late
    /// beyond measure and counts as timed out.
    fn abandon(&mut self, end: Instant, now: Instant) {
        for slot in 0..self.conns.len() {
            if !self.conns[slot].inflight.is_empty() {
                self.fail(slot, ErrorClass::Timeout, now);
            }
        }
        let unsent = self.sched.abandon(end);
        self.stats.error(ErrorClass::Timeout, unsent);
    }
}
