//! Polling again before sleeping (`server.busy_poll`): after a turn that
//! had work, a reactor asks epoll for more without blocking, yielding the
//! CPU between asks, for up to the budget before it goes to sleep. What
//! counts as work worth polling again for is the engine's call: the event
//! engine does not spin for a single connection, nor while a backend
//! (php-fpm, a CGI program) makes an answer on the same CPUs.
//!
//! Why: a reactor that sleeps must be woken by whoever sends it the next
//! request — a wake-up that costs the sender's CPU (on one machine, the
//! client's) and the reactor a context switch — and under load the next
//! request is usually microseconds away. Measured on the 2-CPU host, two
//! workers sharing CPU 0 and `wrk` on CPU 1 (1 KiB file, `wrk` the
//! bottleneck): without it wrk woke a sleeping worker every ~17 requests,
//! with it every ~30, and its rate rose 2–5 % (with 4 clients, 30 %).
//! `sched_yield` between asks hands the CPU to a sibling that has work (two
//! workers on one CPU) instead of spinning against it; alone on its CPU it
//! returns at once.
//!
//! Linux's own `net.core.busy_poll` does this for the sockets of a network
//! card's queues, not for loopback or an epoll set, so the reactor does it
//! itself. The CPU it burns is paid for by work done ([`BusyPoll`]): an
//! idle server sleeps, a steady 40,000 requests/s cost 7 % more CPU.

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

/// The share of its work a worker may spend spinning: 1/10. Measured with
/// 1/2, 1/4, 1/10 and 1/20: at 1/10 a 40,000 req/s open-loop load costs
/// 5–7 % more server CPU than without spinning (1/2: 25 %), and saturation
/// gains as much as with the larger shares.
const SHARE: u32 = 10;

/// The most credit saved up, in budgets: a worker back from a long quiet
/// spell does not spin for long on it.
const CREDIT_MAX: u32 = 4;

/// The longest back-off after spins that found nothing, in busy turns.
const BACKOFF_MAX: u32 = 1024;

/// When to spin and for how long: spinning is paid for by work. Each
/// turn's work (the time between two waits) earns a [`SHARE`] of itself as
/// credit; a spin spends what it lasts. So the CPU a worker burns spinning
/// is at most that share of the time it works, whatever the load: under a
/// sparse load it sleeps almost at once, near saturation it spins up to the
/// budget. And a spin that found nothing backs off: the next 1, 2, 4 …
/// busy turns do not spin, until one finds something (measured with two
/// workers on one CPU and 4 clients: 74,000 requests/s against 67,000
/// without the back-off and 57,000 without spinning).
#[derive(Debug)]
pub struct BusyPoll {
    budget: Duration,
    credit: Duration,
    /// Busy turns still to skip before spinning again.
    skip: u32,
    /// The back-off after the next spin that finds nothing.
    next_skip: u32,
}

impl BusyPoll {
    /// A budget of zero turns it off.
    pub fn new(budget: Duration) -> BusyPoll {
        BusyPoll { budget, credit: Duration::ZERO, skip: 0, next_skip: 1 }
    }

    /// Earns the credit of the turn from `woke` to `now`; returns how long
    /// the coming wait may spin: after a busy turn, unless backing off, the
    /// credit, at most the budget.
    fn spin_for(&mut self, woke: Instant, now: Instant, busy: bool) -> Duration {
        let worked = now.saturating_duration_since(woke);
        self.credit = (self.credit + worked / SHARE).min(self.budget * CREDIT_MAX);
        if !busy {
            return Duration::ZERO;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Duration::ZERO;
        }
        self.credit.min(self.budget)
    }

    /// A spin that found something ends the back-off; one that found
    /// nothing doubles it.
    fn record(&mut self, found: bool) {
        if found {
            self.next_skip = 1;
        } else {
            self.skip = self.next_skip;
            self.next_skip = (self.next_skip * 2).min(BACKOFF_MAX);
        }
    }

    /// Waits for events like `poll.poll(events, Some(timeout))`, spinning
    /// first when it may. `woke`: when the last wait ended (the worker's
    /// clock, read right after it), so the turn since is the work done.
    /// `busy`: the last turn had work worth polling again for (the
    /// caller's judgement).
    pub fn wait(
        &mut self,
        poll: &mut Poll,
        events: &mut Events,
        timeout: Duration,
        woke: Instant,
        busy: bool,
    ) -> io::Result<()> {
        if self.budget.is_zero() {
            return poll.poll(events, Some(timeout));
        }
        let start = Instant::now();
        let spin = if timeout.is_zero() { Duration::ZERO } else { self.spin_for(woke, start, busy) };
        if !self.spin(poll, events, start, spin)? {
            poll.poll(events, Some(timeout.saturating_sub(start.elapsed())))?;
        }
        Ok(())
    }

    /// Polls without blocking until something is ready or `spin` has
    /// passed, yielding the CPU between polls; the time spun is taken from
    /// the credit. Whether it found something.
    fn spin(&mut self, poll: &mut Poll, events: &mut Events, start: Instant, spin: Duration) -> io::Result<bool> {
        if spin.is_zero() {
            return Ok(false);
        }
        loop {
            poll.poll(events, Some(Duration::ZERO))?;
            let spun = start.elapsed();
            if !events.is_empty() || spun >= spin {
                self.credit = self.credit.saturating_sub(spun);
                let found = !events.is_empty();
                self.record(found);
                return Ok(found);
            }
            // SAFETY: no arguments; it only gives up the CPU.
            unsafe { libc::sched_yield() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_worker_spins_for_a_tenth_of_its_work_at_most_the_budget() {
        let budget = Duration::from_micros(50);
        let mut b = BusyPoll::new(budget);
        let t0 = Instant::now();
        let us = Duration::from_micros;
        // 100 µs of work earns 10 µs of spinning.
        assert_eq!(b.spin_for(t0, t0 + us(100), true), us(10));
        // A turn not busy earns but does not spin.
        assert_eq!(b.spin_for(t0 + us(100), t0 + us(200), false), Duration::ZERO);
        assert_eq!(b.credit, Duration::from_micros(20));
        // A long busy spell: at most the budget per wait, and at most four
        // budgets saved.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.spin_for(t0, t1, true), budget);
        assert_eq!(b.credit, budget * CREDIT_MAX);
        assert_eq!(BusyPoll::new(Duration::ZERO).spin_for(t0, t1, true), Duration::ZERO);
    }

    #[test]
    fn spins_that_find_nothing_back_off_until_one_finds_something() {
        let mut b = BusyPoll::new(Duration::from_micros(50));
        let woke = Instant::now();
        let t = woke + Duration::from_secs(1);
        // Misses: skip 1 busy turn, then 2, then 4; other turns do not count.
        for skip in [1, 2, 4] {
            b.record(false);
            assert_eq!(b.spin_for(woke, t, false), Duration::ZERO);
            for _ in 0..skip {
                assert_eq!(b.spin_for(woke, t, true), Duration::ZERO);
            }
            assert!(b.spin_for(woke, t, true) > Duration::ZERO);
        }
        b.record(true);
        assert!(b.spin_for(woke, t, true) > Duration::ZERO && b.spin_for(woke, t, true) > Duration::ZERO);
        for _ in 0..40 {
            b.record(false);
        }
        assert_eq!(b.skip, BACKOFF_MAX);
    }

    #[test]
    fn a_spin_finds_what_arrives_and_an_idle_one_still_sleeps_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut server = mio::net::TcpStream::from_std(server);
        let mut poll = Poll::new().unwrap();
        poll.registry().register(&mut server, mio::Token(7), mio::Interest::READABLE).unwrap();
        let mut events = Events::with_capacity(8);
        let mut b = BusyPoll::new(Duration::from_millis(20));

        // Nothing arrives: the spin spends its credit, then the wait
        // sleeps out the rest of the timeout.
        b.credit = Duration::from_millis(20);
        let start = Instant::now();
        b.wait(&mut poll, &mut events, Duration::from_millis(60), Instant::now(), true).unwrap();
        assert!(events.is_empty());
        assert!(start.elapsed() >= Duration::from_millis(59), "{:?}", start.elapsed());
        assert!(b.credit < Duration::from_millis(1), "{:?} left", b.credit);
        assert_eq!((b.skip, b.next_skip), (1, 2), "a miss backs off");

        // A request sent while the worker spins is found by the spin, which
        // takes from the credit only the time it lasted.
        b.credit = Duration::from_millis(80);
        b.skip = 0;
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            client
        });
        let start = Instant::now();
        b.wait(&mut poll, &mut events, Duration::from_secs(5), Instant::now(), true).unwrap();
        assert_eq!(events.iter().map(|e| e.token()).collect::<Vec<_>>(), [mio::Token(7)]);
        assert!(start.elapsed() < Duration::from_millis(20), "found by the spin, not after a sleep");
        assert!(b.credit > Duration::from_millis(60), "{:?} left", b.credit);
        assert_eq!((b.skip, b.next_skip), (0, 1), "a hit ends the back-off");
        drop(sender.join());
    }
}
