//! How a generator thread waits for its server when it has its CPU to
//! itself: polling (connection per request) or napping (kept-alive
//! connections, closed loop) instead of sleeping until woken.
//!
//! Why: a generator thread that sleeps between events must be woken by the
//! server's write, and a server that is the bottleneck pays for each
//! wake-up from its own CPU (on a virtual machine that idles its CPUs, an
//! inter-processor interrupt and an exit to the hypervisor). `wrk` is busy
//! enough that it is seldom asleep; tern bench, cheaper per request, would
//! be, and the server it measures would look slower under it.
//!
//! - **Connection per request** (`--no-keepalive`): four or five waits per
//!   request, each short. The thread polls epoll without blocking, yielding
//!   between polls, for up to [`POLL_BUDGET`] before it sleeps. Measured
//!   against nginx (one worker on CPU 0, resumed TLS 1.3 handshakes, 8
//!   connections, the generator on CPU 1, 41–47 % busy): nginx spent 226 µs
//!   of CPU per connection under a sleeping tern bench and 198 µs under
//!   `wrk`, and rated tern bench 0.94× `wrk`; polling for up to 1 ms,
//!   0.97–1.01×.
//! - **Kept-alive connections, closed loop**: responses come as a stream
//!   and polling would cost more CPU than `wrk` spends (measured:
//!   1.075–1.09× its CPU per request). With at least [`NAP_MIN_INFLIGHT`]
//!   requests in flight the thread naps instead, off the wait queue, so the
//!   server's writes wake nobody: a timer wakes it, on its own CPU, after
//!   the time the server takes to answer a quarter of them (at most
//!   [`NAP_MAX`], so no response is timed later than that), and it takes
//!   what arrived in one poll. Measured against nginx (one worker, 1 KiB,
//!   50 connections, pinned apart): wake-ups per response 0.08 → 0.003
//!   (`wrk` 0.02), requests/s +9 % (median of 5), CPU per request lower. Open loop never naps: a request due during a nap would
//!   leave late. Nor do responses larger than [`NAP_LARGEST_RESPONSE`]:
//!   one arrives over several waits, and a nap in the middle stalls it
//!   (measured: 1 MiB over TLS from `tern serve`, 1,649–1,796 responses/s
//!   napping against 1,902–2,056 without).
//!
//! Only while the thread has its CPU to itself: where it shares one with
//! the server (no pinning), the time it polls is taken from the server —
//! measured, 8 % fewer requests from nginx with two workers on two CPUs.
//! Naps follow the same rule; they were not measured on a shared CPU.

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

/// The longest a wait polls before it sleeps. Measured against nginx as
/// above: 100 µs covered too few of the gaps to change the rate, 300 µs
/// and 1 ms did as well as each other on resumed handshakes; on full RSA
/// handshakes (a ~550 µs signature per connection) only 1 ms and 3 ms
/// covered them (medians of 5: 300 µs 0.98×, 1 ms 1.03×, 3 ms 1.02×
/// `wrk`).
const POLL_BUDGET: Duration = Duration::from_millis(1);

/// The longest nap. Fixed naps against nginx (1 KiB, ~140k responses/s,
/// 50 connections): 10–80 µs all removed the wake-ups, 40 and 80 µs gave
/// the best rates, 160 µs left nginx idle (1.02 cores instead of 1.05).
const NAP_MAX: Duration = Duration::from_micros(64);

/// Fewer requests in flight than this and the thread sleeps as usual: a
/// nap would be shorter than the cost of taking it.
const NAP_MIN_INFLIGHT: usize = 8;

/// Responses larger than this on average (one loopback segment) and the
/// thread sleeps as usual (see the module's comment). 40 KiB over TLS
/// napped as fast as it slept or faster.
const NAP_LARGEST_RESPONSE: u64 = 64 * 1024;

/// The share of a check's interval the thread may have waited for a CPU
/// and still count as alone on it (1/20). Pinned beside the server it
/// waited 1–3 %; sharing two CPUs with it, 23–26 %.
const CROWDED: u32 = 20;

/// What a thread does before it sleeps, by the kind of run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Sleep until an event or the timeout (open loop).
    Sleep,
    /// Poll first (a connection per request).
    Poll,
    /// Nap, then poll (kept-alive connections, closed loop).
    Nap,
}

/// Whether, and how, a worker thread waits without being woken.
#[derive(Debug)]
pub struct Waiter {
    style: Style,
    /// The thread had its CPU to itself over the last interval.
    alone: bool,
    /// The mean time between the thread's responses over the last
    /// interval, if there were some and they were small enough to nap for.
    pace: Option<Duration>,
    /// The last check: when, the thread's run delay, responses and their
    /// bytes so far.
    last: Option<(Instant, Duration, u64, u64)>,
}

impl Waiter {
    pub fn new(style: Style) -> Waiter {
        if style == Style::Nap {
            // Timers of this thread fire within 1 µs of their time, not the
            // default 50 µs slack: a nap is shorter than that.
            // SAFETY: sets a property of the calling thread; no pointers.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        }
        Waiter { style, alone: false, pace: None, last: None }
    }

    /// Takes the thread's run delay (time runnable without a CPU, from
    /// schedstat; `None` when the kernel does not report it), its responses
    /// so far and their bytes at `now`, and decides whether the thread was
    /// alone on its CPU since the last check, and at what pace responses
    /// came.
    pub fn check(&mut self, now: Instant, run_delay: Option<Duration>, responses: u64, bytes: u64) {
        if self.style == Style::Sleep {
            return;
        }
        let Some(delay) = run_delay else {
            self.alone = false;
            return;
        };
        if let Some((then, delay_then, responses_then, bytes_then)) = self.last {
            let interval = now.saturating_duration_since(then);
            self.alone = delay.saturating_sub(delay_then) * CROWDED <= interval;
            let n = responses.saturating_sub(responses_then);
            let small = bytes.saturating_sub(bytes_then) <= n.saturating_mul(NAP_LARGEST_RESPONSE);
            self.pace = u32::try_from(n).ok().filter(|&n| n > 0 && small).map(|n| interval / n);
        }
        self.last = Some((now, delay, responses, bytes));
    }

    /// How long to nap with `inflight` requests in flight: while the server
    /// answers a quarter of them at the last pace, at most [`NAP_MAX`].
    fn nap(&self, inflight: usize) -> Option<Duration> {
        if inflight < NAP_MIN_INFLIGHT {
            return None;
        }
        let quarter = u32::try_from(inflight / 4).unwrap_or(u32::MAX);
        Some(self.pace?.saturating_mul(quarter).min(NAP_MAX))
    }

    /// Waits for events like `poll.poll(events, Some(timeout))` with
    /// `inflight` requests in flight; when the thread is alone on its CPU,
    /// first polls for up to [`POLL_BUDGET`] or naps, by its style.
    pub fn wait(&self, poll: &mut Poll, events: &mut Events, timeout: Duration, inflight: usize) -> io::Result<()> {
        if !self.alone || inflight == 0 || timeout.is_zero() {
            return poll.poll(events, Some(timeout));
        }
        match self.style {
            Style::Sleep => poll.poll(events, Some(timeout)),
            Style::Poll => poll_first(poll, events, timeout),
            Style::Nap => match self.nap(inflight) {
                Some(nap) => nap_first(poll, events, timeout, nap),
                None => poll.poll(events, Some(timeout)),
            },
        }
    }
}

/// Polls without blocking, yielding the CPU between polls, for up to
/// [`POLL_BUDGET`], then sleeps out the rest of `timeout`.
fn poll_first(poll: &mut Poll, events: &mut Events, timeout: Duration) -> io::Result<()> {
    let start = Instant::now();
    let spin = timeout.min(POLL_BUDGET);
    loop {
        poll.poll(events, Some(Duration::ZERO))?;
        if !events.is_empty() {
            return Ok(());
        }
        let spun = start.elapsed();
        if spun >= spin {
            return poll.poll(events, Some(timeout.saturating_sub(spun)));
        }
        // SAFETY: no arguments; it only gives up the CPU to whatever
        // else is runnable on it.
        unsafe { libc::sched_yield() };
    }
}

/// Takes what is there; else naps for `nap` (off epoll's wait queue) and
/// takes what arrived; else sleeps out the rest of `timeout`.
fn nap_first(poll: &mut Poll, events: &mut Events, timeout: Duration, nap: Duration) -> io::Result<()> {
    poll.poll(events, Some(Duration::ZERO))?;
    if !events.is_empty() {
        return Ok(());
    }
    let start = Instant::now();
    std::thread::sleep(nap.min(timeout));
    poll.poll(events, Some(Duration::ZERO))?;
    if !events.is_empty() {
        return Ok(());
    }
    poll.poll(events, Some(timeout.saturating_sub(start.elapsed())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const US: fn(u64) -> Duration = Duration::from_micros;

    #[test]
    fn a_thread_counts_as_alone_only_while_it_has_its_cpu_to_itself() {
        let t0 = Instant::now();
        let mut w = Waiter::new(Style::Poll);
        w.check(t0, Some(MS(100)), 0, 0);
        assert!(!w.alone, "no interval measured yet");
        // 0.4 ms waited in 10 ms: alone.
        w.check(t0 + MS(10), Some(MS(100) + US(400)), 0, 0);
        assert!(w.alone);
        // 2 ms waited in the next 10 ms: crowded.
        w.check(t0 + MS(20), Some(MS(102) + US(400)), 0, 0);
        assert!(!w.alone);
        w.check(t0 + MS(30), Some(MS(102) + US(400)), 0, 0);
        assert!(w.alone);
        // No schedstat: never.
        w.check(t0 + MS(40), None, 0, 0);
        assert!(!w.alone);
    }

    #[test]
    fn an_open_loop_run_never_counts_as_alone() {
        let t0 = Instant::now();
        let mut w = Waiter::new(Style::Sleep);
        w.check(t0, Some(MS(1)), 0, 0);
        w.check(t0 + MS(10), Some(MS(1)), 100, 0);
        assert!(!w.alone);
    }

    #[test]
    fn a_nap_lasts_while_a_quarter_of_the_requests_in_flight_are_answered() {
        let t0 = Instant::now();
        let mut w = Waiter::new(Style::Nap);
        w.check(t0, Some(MS(1)), 1_000, 0);
        assert_eq!(w.nap(50), None, "no pace measured yet");
        // 1,000 responses of 1 KiB in 10 ms: one per 10 µs.
        w.check(t0 + MS(10), Some(MS(1)), 2_000, 1_000 * 1024);
        assert_eq!(w.pace, Some(US(10)));
        assert_eq!(w.nap(16), Some(US(40)));
        assert_eq!(w.nap(50), Some(NAP_MAX), "at most NAP_MAX");
        assert_eq!(w.nap(NAP_MIN_INFLIGHT - 1), None, "too few in flight");
        // Nothing answered in the next 10 ms: no pace, no nap.
        w.check(t0 + MS(20), Some(MS(1)), 2_000, 1_000 * 1024);
        assert_eq!(w.nap(50), None);
        // 10 responses of 1 MiB: too large to nap between.
        w.check(t0 + MS(30), Some(MS(1)), 2_010, 1_000 * 1024 + 10 * 1024 * 1024);
        assert_eq!(w.nap(50), None);
        // 100 of 64 KiB: small enough.
        let bytes = 1_000 * 1024 + 10 * 1024 * 1024 + 100 * NAP_LARGEST_RESPONSE;
        w.check(t0 + MS(40), Some(MS(1)), 2_110, bytes);
        assert_eq!(w.nap(8), Some(NAP_MAX), "2 × 100 µs, capped");
    }

    /// A thread alone on its CPU with this style, and a pace of one
    /// response per 10 µs.
    fn alone(style: Style) -> Waiter {
        let t0 = Instant::now();
        let mut w = Waiter::new(style);
        w.check(t0, Some(Duration::ZERO), 0, 0);
        w.check(t0 + MS(10), Some(Duration::ZERO), 1_000, 0);
        assert!(w.alone);
        w
    }

    /// A connected pair: the client end, and the other end watched for
    /// reading by the returned `Poll`.
    fn watched_pair() -> (TcpStream, mio::net::TcpStream, Poll) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut server = mio::net::TcpStream::from_std(server);
        let poll = Poll::new().unwrap();
        poll.registry().register(&mut server, mio::Token(0), mio::Interest::READABLE).unwrap();
        (client, server, poll)
    }

    #[test]
    fn a_wait_returns_what_arrives_and_sleeps_out_the_rest() {
        for style in [Style::Poll, Style::Nap] {
            let (mut client, _server, mut poll) = watched_pair();
            let mut events = Events::with_capacity(4);
            let w = alone(style);

            // Nothing arrives: the wait lasts its timeout, past the polling
            // or the nap.
            let start = Instant::now();
            w.wait(&mut poll, &mut events, MS(20), 16).unwrap();
            assert!(events.is_empty(), "{style:?}");
            assert!(start.elapsed() >= MS(20), "{style:?}");

            // A timeout shorter than the polling or the nap: over when it is.
            let start = Instant::now();
            w.wait(&mut poll, &mut events, US(30), 16).unwrap();
            assert!(events.is_empty(), "{style:?}");
            assert!(start.elapsed() >= US(30), "{style:?}");

            // Something already there is found by the first poll.
            client.write_all(b"x").unwrap();
            let start = Instant::now();
            w.wait(&mut poll, &mut events, Duration::from_secs(5), 16).unwrap();
            assert_eq!(events.iter().count(), 1, "{style:?}");
            assert!(start.elapsed() < Duration::from_secs(1), "{style:?}");
        }
    }

    #[test]
    fn a_nap_that_finds_nothing_sleeps_until_something_arrives() {
        let (mut client, _server, mut poll) = watched_pair();
        let mut events = Events::with_capacity(4);
        let w = alone(Style::Nap);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(MS(100));
            client.write_all(b"x").unwrap();
            client
        });
        let start = Instant::now();
        w.wait(&mut poll, &mut events, Duration::from_secs(5), 16).unwrap();
        assert_eq!(events.iter().count(), 1);
        assert!(start.elapsed() >= MS(100) && start.elapsed() < Duration::from_secs(2));
        writer.join().unwrap();
    }
}
