//! Whether an upstream server may get requests: passive marks from the
//! failures requests meet (so many within a window mark it down for a
//! while, then one trial request decides), and an optional active check
//! (a thread asking each server a path at an interval).
//!
//! The per-request look ([`Health::usable`]) is two atomic loads; a
//! failure takes a small lock to count itself.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::Check;
use crate::error_log::{log, Level};
use crate::site::upstream::address::Address;

/// One server's health.
pub struct Health {
    /// When it was marked down, in nanoseconds after `epoch` plus one (0:
    /// not down).
    down_since: AtomicU64,
    /// A trial request was let through since the last mark.
    trial: AtomicBool,
    /// The active check's verdict.
    check_failed: AtomicBool,
    /// Recent failures, oldest first.
    failures: Mutex<VecDeque<Instant>>,
    epoch: Instant,
    fail_after: usize,
    fail_window: Duration,
    down_for: Duration,
}

impl Health {
    pub fn new(fail_after: usize, fail_window: Duration, down_for: Duration) -> Health {
        Health {
            down_since: AtomicU64::new(0),
            trial: AtomicBool::new(false),
            check_failed: AtomicBool::new(false),
            failures: Mutex::new(VecDeque::new()),
            epoch: Instant::now(),
            fail_after,
            fail_window,
            down_for,
        }
    }

    /// May a request go to it now? A server down for `down_for` already lets
    /// one trial request through (the first to ask).
    pub fn usable(&self, now: Instant) -> bool {
        if self.check_failed.load(Relaxed) {
            return false;
        }
        let since = self.down_since.load(Relaxed);
        if since == 0 {
            return true;
        }
        let down_at = self.epoch + Duration::from_nanos(since - 1);
        now.saturating_duration_since(down_at) >= self.down_for
            && self.trial.compare_exchange(false, true, Relaxed, Relaxed).is_ok()
    }

    /// Whether it is marked down now (for the status page).
    pub fn down(&self) -> bool {
        self.check_failed.load(Relaxed) || self.down_since.load(Relaxed) != 0
    }

    /// A request it served went well: a mark is lifted.
    pub fn succeeded(&self) {
        if self.down_since.load(Relaxed) != 0 {
            self.down_since.store(0, Relaxed);
            self.trial.store(false, Relaxed);
            self.failures.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// A request it served failed (refused, reset, timed out, malformed):
    /// counted; enough of them within the window mark it down. True when
    /// this failure marked it.
    pub fn failed(&self, now: Instant) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        while failures.front().is_some_and(|&t| now.saturating_duration_since(t) > self.fail_window) {
            failures.pop_front();
        }
        failures.push_back(now);
        let trial_failed = self.down_since.load(Relaxed) != 0;
        if failures.len() < self.fail_after && !trial_failed {
            return false;
        }
        let since = now.saturating_duration_since(self.epoch).as_nanos() as u64 + 1;
        self.down_since.store(since, Relaxed);
        self.trial.store(false, Relaxed);
        failures.clear();
        !trial_failed
    }
}

/// The active check of one upstream group: a thread that asks every server
/// `check.path` each `check.interval`, until dropped.
pub struct Checker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checker {
    /// Starts checking `servers` (their addresses and health) for group
    /// `name`.
    pub fn start(name: String, check: Check, servers: Vec<(Address, Arc<Health>)>) -> std::io::Result<Checker> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name(format!("tern-check-{name}")).spawn(move || loop {
            for (address, health) in &servers {
                let ok = probe(address, &check);
                let was = health.check_failed.swap(!ok, Relaxed);
                if was == ok {
                    let now = if ok { "passes" } else { "fails" };
                    log!(Level::Warn, "upstream {name}: server {address} {now} its check ({})", check.path);
                }
            }
            let (lock, cv) = &*stopped;
            let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
            let (guard, _) = cv.wait_timeout_while(guard, check.interval.0, |s| !*s).unwrap_or_else(|e| e.into_inner());
            if *guard {
                return;
            }
        })?;
        Ok(Checker { stop, thread: Some(thread) })
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One check: `GET path`, the expected status within the timeout.
fn probe(address: &Address, check: &Check) -> bool {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nUser-Agent: tern-check\r\n\r\n",
        check.path
    );
    let deadline = check.timeout.0;
    let answer = |mut s: Box<dyn ReadWrite>| -> std::io::Result<Vec<u8>> {
        s.write_all(request.as_bytes())?;
        let mut head = vec![0u8; 64];
        let mut n = 0;
        while n < 12 {
            match s.read(&mut head[n..])? {
                0 => break,
                k => n += k,
            }
        }
        head.truncate(n);
        Ok(head)
    };
    let stream: std::io::Result<Box<dyn ReadWrite>> = match address {
        Address::Tcp(addr) => std::net::TcpStream::connect_timeout(addr, deadline).and_then(|s| {
            s.set_read_timeout(Some(deadline))?;
            s.set_write_timeout(Some(deadline))?;
            Ok(Box::new(s) as Box<dyn ReadWrite>)
        }),
        Address::Unix(path) => std::os::unix::net::UnixStream::connect(path).and_then(|s| {
            s.set_read_timeout(Some(deadline))?;
            s.set_write_timeout(Some(deadline))?;
            Ok(Box::new(s) as Box<dyn ReadWrite>)
        }),
    };
    let expected = format!(" {} ", check.expect);
    match stream.and_then(answer) {
        Ok(head) => head.starts_with(b"HTTP/1.") && head.get(8..13) == Some(expected.as_bytes()),
        Err(_) => false,
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enough_failures_in_the_window_mark_a_server_down_then_one_trial_decides() {
        let h = Health::new(3, Duration::from_secs(10), Duration::from_secs(5));
        let t0 = Instant::now();
        assert!(h.usable(t0));
        assert!(!h.failed(t0));
        assert!(!h.failed(t0 + Duration::from_secs(1)));
        // The first failure left the window: still two.
        assert!(!h.failed(t0 + Duration::from_millis(10_500)));
        assert!(h.failed(t0 + Duration::from_secs(11)));
        assert!(h.down());
        assert!(!h.usable(t0 + Duration::from_secs(14)));
        // After `down_for`, one trial request, not two.
        let later = t0 + Duration::from_secs(16);
        assert!(h.usable(later));
        assert!(!h.usable(later));
        // A failed trial marks it again at once; a good one lifts the mark.
        assert!(!h.failed(later));
        assert!(!h.usable(later + Duration::from_secs(1)));
        let again = later + Duration::from_secs(6);
        assert!(h.usable(again));
        h.succeeded();
        assert!(!h.down());
        assert!(h.usable(again) && h.usable(again));
    }
}
