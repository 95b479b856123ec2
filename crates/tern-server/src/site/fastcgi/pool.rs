//! One backend's connections, shared by all workers: idle kept-alive
//! connections, a count of open ones never past the cap, and a FIFO of
//! requests waiting for one.
//!
//! A waiting request holds a [`Ticket`] whose eventfd its worker watches
//! as the connection's backend descriptor; whoever frees a connection (on
//! any worker) hands it to the first ticket and signals the eventfd, so a
//! wait never blocks a reactor and no worker looks at another's
//! connections.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use socket2::{Domain, SockAddr, Socket, Type};

use crate::config::FastCgiAddress;

/// A kept-alive connection and the buffer its replies are read into,
/// which stays with it so an exchange on it allocates none.
pub struct Link {
    pub fd: OwnedFd,
    pub buf: Vec<u8>,
}

/// What a freed place in the pool becomes for a waiting request.
pub enum Grant {
    /// A kept-alive connection.
    Idle(Link),
    /// Room to open a new one.
    Permit,
}

/// A request waiting for a connection.
pub struct Ticket {
    grant: Mutex<Option<Grant>>,
    event: OwnedFd,
}

impl Ticket {
    /// What the waiting request's worker watches.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    /// The grant, once one was handed over.
    pub fn take(&self) -> Option<Grant> {
        self.grant.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What [`Pool::checkout`] found.
pub enum Checkout {
    Idle(Link),
    /// A place is reserved: open a connection ([`Pool::connect`]).
    Connect,
    Wait(Arc<Ticket>),
}

/// Counters for the status page.
#[derive(Default)]
pub struct Stats {
    /// Connections opened.
    pub connects: AtomicU64,
    /// Requests sent on a kept-alive connection.
    pub reused: AtomicU64,
    /// Requests retried on a fresh connection after a kept-alive one
    /// turned out closed.
    pub retried: AtomicU64,
    /// Requests answered `502`, `503` (waited too long), `504`.
    pub failed: AtomicU64,
    pub queue_timeouts: AtomicU64,
    pub timeouts: AtomicU64,
}

#[derive(Default)]
struct State {
    idle: Vec<Link>,
    /// Connections open or being opened (idle ones included).
    open: usize,
    waiting: VecDeque<Arc<Ticket>>,
}

pub struct Pool {
    address: FastCgiAddress,
    cap: usize,
    state: Mutex<State>,
    pub stats: Stats,
}

/// Open, idle and waiting, as the status page shows them.
pub struct Snapshot {
    pub open: usize,
    pub idle: usize,
    pub waiting: usize,
}

impl Pool {
    pub fn new(address: FastCgiAddress, cap: usize) -> Pool {
        Pool { address, cap, state: Mutex::new(State::default()), stats: Stats::default() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection, a place to open one, or a place in the queue.
    pub fn checkout(&self) -> io::Result<Checkout> {
        let mut s = self.state();
        if let Some(link) = s.idle.pop() {
            return Ok(Checkout::Idle(link));
        }
        if s.open < self.cap {
            s.open += 1;
            return Ok(Checkout::Connect);
        }
        let event =
            rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK)?;
        let ticket = Arc::new(Ticket { grant: Mutex::new(None), event });
        s.waiting.push_back(ticket.clone());
        Ok(Checkout::Wait(ticket))
    }

    /// A connection that stays usable: to the first waiting request, else
    /// idle.
    pub fn put_back(&self, link: Link) {
        let mut s = self.state();
        match s.waiting.pop_front() {
            Some(t) => hand(&t, Grant::Idle(link)),
            None => s.idle.push(link),
        }
    }

    /// A connection was closed (or a reserved place not used): its place
    /// goes to the first waiting request.
    pub fn release(&self) {
        let mut s = self.state();
        match s.waiting.pop_front() {
            Some(t) => hand(&t, Grant::Permit),
            None => s.open -= 1,
        }
    }

    /// A waiting request gives up; a grant that reached it meanwhile is
    /// passed on.
    pub fn cancel(&self, ticket: &Arc<Ticket>) {
        let mut s = self.state();
        s.waiting.retain(|t| !Arc::ptr_eq(t, ticket));
        drop(s);
        match ticket.take() {
            Some(Grant::Idle(link)) => self.put_back(link),
            Some(Grant::Permit) => self.release(),
            None => {}
        }
    }

    /// Opens a non-blocking connection: the socket and whether it is
    /// connected already (else in progress: wait until writable).
    pub fn connect(&self) -> io::Result<(OwnedFd, bool)> {
        self.stats.connects.fetch_add(1, Relaxed);
        let (domain, addr) = match &self.address {
            FastCgiAddress::Unix(path) => (Domain::UNIX, SockAddr::unix(path)?),
            FastCgiAddress::Tcp(a) => (Domain::for_address(*a), SockAddr::from(*a)),
        };
        let sock = Socket::new(domain, Type::STREAM.nonblocking().cloexec(), None)?;
        if domain != Domain::UNIX {
            sock.set_tcp_nodelay(true)?;
        }
        match sock.connect(&addr) {
            Ok(()) => Ok((sock.into(), true)),
            // A Unix socket whose backlog is full says EAGAIN: refused.
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) && domain != Domain::UNIX => Ok((sock.into(), false)),
            Err(e) => Err(e),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.state();
        Snapshot { open: s.open, idle: s.idle.len(), waiting: s.waiting.len() }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

/// Gives `grant` to a waiting request and wakes its worker.
fn hand(t: &Ticket, grant: Grant) {
    *t.grant.lock().unwrap_or_else(|e| e.into_inner()) = Some(grant);
    let _ = rustix::io::write(&t.event, &1u64.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(cap: usize) -> Pool {
        Pool::new(FastCgiAddress::Unix("/nonexistent/tern-test.sock".into()), cap)
    }

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut buf = [0u8; 8];
        rustix::io::read(fd, &mut buf).is_ok()
    }

    #[test]
    fn never_past_the_cap_and_first_come_first_served() {
        let p = pool(2);
        assert!(matches!(p.checkout().unwrap(), Checkout::Connect));
        assert!(matches!(p.checkout().unwrap(), Checkout::Connect));
        let Checkout::Wait(first) = p.checkout().unwrap() else { panic!("a third request must wait") };
        let Checkout::Wait(second) = p.checkout().unwrap() else { panic!("a fourth request must wait") };
        assert_eq!(p.snapshot().waiting, 2);
        assert!(!readable(first.fd()));

        // A kept-alive connection goes to the first waiter, woken.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        p.put_back(Link { fd: OwnedFd::from(a), buf: Vec::new() });
        assert!(readable(first.fd()));
        assert!(matches!(first.take(), Some(Grant::Idle(_))));
        assert!(!readable(second.fd()));
        // A closed one leaves a permit to the next; the count stays at 2.
        p.release();
        assert!(readable(second.fd()));
        assert!(matches!(second.take(), Some(Grant::Permit)));
        assert_eq!(p.snapshot().open, 2);
        p.release();
        p.release();
        assert_eq!(p.snapshot().open, 0);
    }

    #[test]
    fn a_cancelled_wait_passes_its_grant_on() {
        let p = pool(1);
        assert!(matches!(p.checkout().unwrap(), Checkout::Connect));
        let Checkout::Wait(gone) = p.checkout().unwrap() else { panic!() };
        let Checkout::Wait(next) = p.checkout().unwrap() else { panic!() };
        p.release(); // to `gone`, which gives up without using it
        p.cancel(&gone);
        assert!(matches!(next.take(), Some(Grant::Permit)));
        p.cancel(&next); // nothing to pass on
        assert_eq!(p.snapshot().waiting, 0);
        assert_eq!(p.snapshot().open, 1);
    }

    #[test]
    fn connect_fails_at_once_when_nothing_listens() {
        assert!(pool(1).connect().is_err());
    }
}
