//! Polling instead of sleeping while a connection-per-request run
//! (`--no-keepalive`) waits for its server, when the thread has its CPU to
//! itself.
//!
//! Why: a generator thread that sleeps between events must be woken by the
//! server's every write, and a server that is the bottleneck pays for each
//! wake-up (on a virtual machine that idles its CPUs, an inter-processor
//! interrupt and an exit to the hypervisor). A connection per request makes
//! four or five such waits per request. Measured here against nginx (one
//! worker on CPU 0, resumed TLS 1.3 handshakes, 8 connections, the generator
//! on CPU 1, 41–47 % busy): nginx spent 226 µs of CPU per connection under
//! a sleeping tern bench and 198 µs under `wrk`, and rated tern bench 0.94×
//! `wrk`; polling for up to 1 ms, 0.97–1.01×.
//!
//! Only while the thread has its CPU to itself: where it shares one with
//! the server (no pinning), the time it polls is taken from the server —
//! measured, 8 % fewer requests from nginx with two workers on two CPUs. A
//! run that keeps its connections open is left alone too: there polling
//! took tern bench's CPU per request above `wrk`'s (1.075–1.09×, from
//! 0.86–0.93×) for a rate inside the noise.

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

/// The longest a wait polls before it sleeps. Measured against nginx as
/// above: 100 µs covered too few of the gaps to change the rate, 300 µs
/// and 1 ms did as well as each other on resumed handshakes; on full RSA
/// handshakes (a ~550 µs signature per connection) only 1 ms and 3 ms
/// covered them (medians of 5: 300 µs 0.98×, 1 ms 1.03×, 3 ms 1.02×
/// `wrk`).
const BUDGET: Duration = Duration::from_millis(1);

/// The share of a check's interval the thread may have waited for a CPU
/// and still count as alone on it (1/20). Pinned beside the server it
/// waited 1–3 %; sharing two CPUs with it, 23–26 %.
const CROWDED: u32 = 20;

/// Whether, and for how long, a worker thread polls before it sleeps.
#[derive(Debug)]
pub struct Spin {
    /// Polling is on for this run (connection per request).
    enabled: bool,
    /// The thread had its CPU to itself over the last interval.
    alone: bool,
    /// The last check: when, and the thread's run delay then.
    last: Option<(Instant, Duration)>,
}

impl Spin {
    pub fn new(enabled: bool) -> Spin {
        Spin { enabled, alone: false, last: None }
    }

    /// Takes the thread's run delay (time runnable without a CPU, from
    /// schedstat; `None` when the kernel does not report it) at `now`, and
    /// decides whether the thread was alone on its CPU since the last check.
    pub fn check(&mut self, now: Instant, run_delay: Option<Duration>) {
        if !self.enabled {
            return;
        }
        let Some(delay) = run_delay else {
            self.alone = false;
            return;
        };
        if let Some((then, delay_then)) = self.last {
            let interval = now.saturating_duration_since(then);
            self.alone = delay.saturating_sub(delay_then) * CROWDED <= interval;
        }
        self.last = Some((now, delay));
    }

    /// Waits for events like `poll.poll(events, Some(timeout))`; first polls
    /// without blocking, yielding the CPU between polls, for up to
    /// [`BUDGET`] when the thread is alone on its CPU and `waiting` (it has
    /// requests in flight).
    pub fn wait(&self, poll: &mut Poll, events: &mut Events, timeout: Duration, waiting: bool) -> io::Result<()> {
        if !(self.enabled && self.alone && waiting) || timeout.is_zero() {
            return poll.poll(events, Some(timeout));
        }
        let start = Instant::now();
        let spin = timeout.min(BUDGET);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_thread_polls_only_while_it_has_its_cpu_to_itself() {
        let t0 = Instant::now();
        let mut s = Spin::new(true);
        s.check(t0, Some(MS(100)));
        assert!(!s.alone, "no interval measured yet");
        // 0.4 ms waited in 10 ms: alone.
        s.check(t0 + MS(10), Some(MS(100) + Duration::from_micros(400)));
        assert!(s.alone);
        // 2 ms waited in the next 10 ms: crowded.
        s.check(t0 + MS(20), Some(MS(102) + Duration::from_micros(400)));
        assert!(!s.alone);
        s.check(t0 + MS(30), Some(MS(102) + Duration::from_micros(400)));
        assert!(s.alone);
        // No schedstat: never.
        s.check(t0 + MS(40), None);
        assert!(!s.alone);
    }

    #[test]
    fn a_keepalive_run_never_polls() {
        let t0 = Instant::now();
        let mut s = Spin::new(false);
        s.check(t0, Some(MS(1)));
        s.check(t0 + MS(10), Some(MS(1)));
        assert!(!s.alone);
    }

    #[test]
    fn a_wait_returns_what_arrives_and_sleeps_out_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut server = mio::net::TcpStream::from_std(server);
        let mut poll = Poll::new().unwrap();
        poll.registry().register(&mut server, mio::Token(0), mio::Interest::READABLE).unwrap();
        let mut events = Events::with_capacity(4);
        let t0 = Instant::now();
        let mut s = Spin::new(true);
        s.check(t0, Some(Duration::ZERO));
        s.check(t0 + MS(10), Some(Duration::ZERO));
        assert!(s.alone);

        // Nothing arrives: the wait lasts its timeout, past the polling.
        let start = Instant::now();
        s.wait(&mut poll, &mut events, MS(20), true).unwrap();
        assert!(events.is_empty());
        assert!(start.elapsed() >= MS(20));

        // A timeout shorter than the polling: over when it is.
        let start = Instant::now();
        s.wait(&mut poll, &mut events, Duration::from_micros(50), true).unwrap();
        assert!(events.is_empty());
        assert!(start.elapsed() >= Duration::from_micros(50));

        // Something already there is found by the first poll.
        client.write_all(b"x").unwrap();
        let start = Instant::now();
        s.wait(&mut poll, &mut events, Duration::from_secs(5), true).unwrap();
        assert_eq!(events.iter().count(), 1);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
