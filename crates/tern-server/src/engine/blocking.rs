//! Driving one connection from a thread that blocks (the `per-request`,
//! `pool` and `staged` engines): `poll(2)` on the connection's socket and
//! its backend's descriptor, in the directions the connection says it
//! waits for ([`Conn::waits`]), and on the engine's [`Bell`]; deadlines
//! once a second. The same calls into `Conn` as the event engine makes, so the
//! connection behaves the same whoever drives it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::event::EventfdFlags;

use crate::conn::{Conn, Status};
use crate::error_log::Level;
use crate::error_log::{self, log};
use crate::metrics::Ending;
use crate::service_records::Stage;
use crate::shared::Shared;
use crate::sys::{self, Polled};
use crate::worker::{Watcher, Worker};

use super::front;

/// How often deadlines are checked (as in the event engine).
pub const TICK: Duration = Duration::from_secs(1);

/// Rung once when the server begins to end, so threads blocked on their
/// connections look at once: an eventfd that then stays readable (each
/// thread stops waiting on it once it has seen the ending).
pub struct Bell(OwnedFd);

impl Bell {
    pub fn new() -> io::Result<Bell> {
        Ok(Bell(rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?))
    }

    pub fn ring(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }
}

/// A blocking thread asks the connection which descriptors to wait on
/// before each wait ([`Conn::waits`]), so there is nothing to register.
pub struct Asked;

impl Watcher for Asked {
    fn watch(&self, _conn: usize, _fd: BorrowedFd<'_>) -> io::Result<()> {
        Ok(())
    }

    fn watch_link(
        &self,
        _conn: usize,
        _link: usize,
        _fd: BorrowedFd<'_>,
        _write: bool,
        _again: bool,
    ) -> io::Result<bool> {
        Ok(false)
    }

    fn unwatch(&self, _fd: BorrowedFd<'_>) -> io::Result<()> {
        Ok(())
    }
}

/// Where a thread shows since when its connection has been waiting for
/// its next request, so the thread that accepts can evict the
/// longest-idle one at the connection cap (by shutting its socket down:
/// the owner then reads its end and closes it).
pub struct Idle {
    /// Milliseconds after the server started, plus one; 0: not idle.
    since: AtomicU64,
    fd: RawFd,
}

impl Idle {
    pub fn new(conn: &Conn) -> Idle {
        Idle { since: AtomicU64::new(0), fd: conn.fd() }
    }

    fn mark(&self, shared: &Shared, conn: &Conn) {
        let since =
            conn.idle_since().map_or(0, |t| t.saturating_duration_since(shared.server.started).as_millis() as u64 + 1);
        self.since.store(since, Ordering::Relaxed);
    }

    /// Since when it has been idle (comparable among one server's).
    pub fn since(&self) -> Option<u64> {
        Some(self.since.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    /// Ends the idle connection. The caller holds the list this entry is
    /// in, and the owner takes it out of the list before its socket
    /// closes, so `fd` is still the connection's.
    pub fn evict(&self) {
        self.since.store(0, Ordering::Relaxed);
        // SAFETY: a plain syscall on a descriptor that is open (see above).
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
    }
}

/// How a connection left [`serve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Done: the caller uncounts and recycles it.
    Closed,
    /// Waiting on its socket alone (only when asked to `park`).
    Parked,
    /// The server is being replaced and no request is in flight: the
    /// caller hands it to the successor.
    Handover,
    /// Its work has moved on to this stage (a connection driven by
    /// stages, see `Conn::enter_stage`).
    Next(Stage),
}

/// Serves `conn`, whose last call returned `status`, until it closes, can
/// be handed over, moves to another stage, or (with `park`) waits on its
/// socket alone (for the client's next request or bytes, or room to send).
pub fn serve(
    shared: &Shared,
    w: &mut Worker<'_>,
    conn: &mut Conn,
    mut status: Status,
    bell: Option<&Bell>,
    park: bool,
    idle: Option<&Idle>,
) -> Left {
    let mut next_tick = w.now + TICK;
    let mut seen = Ending::Running;
    // A reset or hang-up was reported: the socket is not waited on for it
    // again (poll reports it whatever is asked).
    let mut hung_up = false;
    loop {
        match status {
            Status::Closed => return Left::Closed,
            Status::Next(stage) => return Left::Next(stage),
            Status::Open => {}
        }
        let ending = shared.server.ending();
        if ending != seen {
            if ending == Ending::Stop {
                conn.begin_stop(w);
            }
            seen = ending;
        }
        if front::leaves(shared, conn, seen) {
            return Left::Handover;
        }
        if park && conn.waits_on_socket_only() {
            return Left::Parked;
        }
        if seen != Ending::Running && shared.server.drain_deadline().is_some_and(|d| w.now >= d) {
            return Left::Closed;
        }
        let mut timeout = next_tick.saturating_duration_since(w.now);
        if let Some(reap) = w.reaper.wake_in(w.now) {
            timeout = timeout.min(reap);
        }
        let bell = bell.filter(|_| seen == Ending::Running);
        if let Some(idle) = idle {
            idle.mark(shared, conn);
        }
        let (sock, backend) = match wait(conn, bell, hung_up, timeout) {
            Ok(ready) => ready,
            Err(e) => {
                log!(Level::Error, "{}: poll failed: {e}", conn.peer());
                return Left::Closed;
            }
        };
        if let Some(idle) = idle {
            // Busy until it is seen idle again.
            idle.since.store(0, Ordering::Relaxed);
        }
        w.tick_clock();
        // This thread's request in flight: its half of the compression
        // load signal, as an event worker counts its batch.
        w.stats.in_flight.set(1);
        if let Some(r) = sock {
            hung_up |= r.hangup;
            status =
                front::guarded(w, conn, |c, w| c.on_ready(shared, w, r.readable, r.writable, r.read_closed, r.hangup));
        }
        if let Some(r) = backend.filter(|_| status == Status::Open) {
            status =
                front::guarded(w, conn, |c, w| c.on_backend_ready(shared, w, r.readable, r.writable, r.read_closed));
        }
        w.stats.in_flight.set(0);
        if w.reaper.has_pending() {
            w.reaper.tick(w.now, &shared.server.cgi_running);
        }
        if w.now >= next_tick && status == Status::Open {
            next_tick = w.now + TICK;
            status = front::guarded(w, conn, |c, w| c.on_tick(shared, w));
            w.flush_logs();
            error_log::tick();
        }
    }
}

/// Waits (up to `timeout`) for what `conn` waits for, or the bell; returns
/// what the socket and the backends' descriptors reported (those of an
/// HTTP/2 connection's streams as one: the connection asks each again).
fn wait(
    conn: &Conn,
    bell: Option<&Bell>,
    hung_up: bool,
    timeout: Duration,
) -> io::Result<(Option<Polled>, Option<Polled>)> {
    let (sock, backends) = conn.waits();
    // An entry with descriptor -1 is skipped by poll(2).
    let entry = |fd: Option<RawFd>, events: libc::c_short| libc::pollfd { fd: fd.unwrap_or(-1), events, revents: 0 };
    let mut fds = vec![
        // The socket is watched for a reset (reported whatever is asked)
        // until one is reported.
        entry((sock.any() || !hung_up).then(|| conn.socket().as_raw_fd()), sock.poll_events()),
        entry(bell.map(|b| b.0.as_raw_fd()), libc::POLLIN),
    ];
    fds.extend(backends.map(|(fd, want)| entry(Some(fd.as_raw_fd()), want.poll_events())));
    let ms = libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` is a valid array of pollfd of the length passed.
    if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) } < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok((None, None)) } else { Err(e) };
    }
    let report = |fd: &libc::pollfd| (fd.revents != 0).then(|| sys::polled(fd.revents));
    let backend = fds[2..].iter().filter_map(report).reduce(Polled::or);
    Ok((report(&fds[0]), backend))
}
