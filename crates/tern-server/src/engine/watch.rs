//! What a reactor watches in its epoll set besides client sockets: the
//! backend descriptors its connections lend it through the worker's
//! [`Watcher`] (a CGI program's output pipe, a FastCGI socket, the
//! eventfd of a request waiting for a pooled FastCGI connection or for
//! the I/O pool), the open-file table's change reports, and the waker.
//!
//! Both reactors use it: `event.rs`, whose epoll set also holds the
//! sockets, and `uring/`, whose ring watches this set's descriptor (so a
//! backend descriptor closed by connection code leaves the set with its
//! close, as the `Watcher` contract says — an io_uring poll would hold
//! the file open until cancelled).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Interest, Poll, Token, Waker};

use crate::error_log::log;
use crate::error_log::Level;
use crate::worker::{Doorbell, Watcher, Worker};

/// Connection `k` has token `2k` for its socket and `2k + 1` for its
/// backend's descriptor (a CGI pipe, a FastCGI queue ticket); pooled
/// FastCGI connection `l` has `LINKS + l`, whichever connection uses it
/// (see [`Links`]); the waker and the listeners have `front`'s tokens.
pub const LINKS: usize = 1 << (usize::BITS - 2);
/// The open-file table's change reports (inotify).
pub const FILES: Token = Token(usize::MAX - 1);

/// What an event on a connection's descriptor says, for
/// `Conn::on_ready` (`backend` false) or `Conn::on_backend_ready`.
pub struct Ready {
    pub key: usize,
    pub backend: bool,
    pub readable: bool,
    pub writable: bool,
    pub read_closed: bool,
    pub hangup: bool,
}

impl Ready {
    /// The connection an event with a connection's token is for; none
    /// for a link that is nobody's.
    pub fn of(event: &Event, links: &Links) -> Option<Ready> {
        let t = event.token().0;
        let (key, backend) = match t.checked_sub(LINKS) {
            Some(link) => (links.report(link)?, true),
            None => (t / 2, t % 2 == 1),
        };
        let read_closed = event.is_read_closed();
        Some(Ready {
            key,
            backend,
            readable: event.is_readable() || event.is_error(),
            writable: event.is_writable() || event.is_write_closed() || event.is_error(),
            read_closed,
            hangup: event.is_error() || (read_closed && event.is_write_closed()),
        })
    }
}

/// Which connection each pooled FastCGI connection in the reactor's set
/// reports to, by link id: so a link passed from one request to the next
/// on the reactor stays registered as it is, where a token naming the
/// connection would cost an `epoll_ctl` per request (with more clients
/// than links, a link serves another connection almost every time).
/// Shared by the loop and its watcher, on one thread.
pub struct Links(Box<[AtomicUsize]>);

/// A link's entry when it is nobody's, and when something was reported
/// for it since.
const NOBODY: usize = usize::MAX;
const REPORTED: usize = usize::MAX - 1;

impl Links {
    pub fn new(count: usize) -> Links {
        Links((0..count).map(|_| AtomicUsize::new(NOBODY)).collect())
    }

    /// The connection link `link`'s event is for; none when it is nobody's
    /// (then remembered for the next to take it).
    fn report(&self, link: usize) -> Option<usize> {
        let entry = self.0.get(link)?;
        match entry.load(Relaxed) {
            NOBODY | REPORTED => {
                entry.store(REPORTED, Relaxed);
                None
            }
            key => Some(key),
        }
    }

    /// Link `link` reports to `conn` from now on (or to nobody): whether
    /// something was reported while it was nobody's.
    fn give(&self, link: usize, conn: usize) -> bool {
        self.0[link].swap(conn, Relaxed) == REPORTED
    }
}

/// A reactor's epoll set for what [`Watcher`] lends, with its doorbell
/// (rung through `waker`) and its links' table; the watcher for the
/// reactor's [`Worker`].
pub fn watcher(poll: &Poll, waker: &Arc<Waker>, links: usize) -> io::Result<(EpollWatcher, Arc<Doorbell>, Arc<Links>)> {
    let registry = poll.registry().try_clone()?;
    let forget = poll.registry().try_clone()?;
    let bell_waker = waker.clone();
    let doorbell = Arc::new(Doorbell::new(
        Box::new(move || _ = bell_waker.wake()),
        Box::new(move |fd| _ = forget.deregister(&mut SourceFd(&fd.as_raw_fd()))),
    ));
    let links = Arc::new(Links::new(links));
    let watcher = EpollWatcher { registry, doorbell: doorbell.clone(), links: links.clone() };
    Ok((watcher, doorbell, links))
}

/// Watches the open-file table's change reports in the set; without
/// them, open files are checked on each use.
pub fn watch_files(poll: &Poll, w: &mut Worker<'_>, index: usize) {
    let Some(fd) = w.files.changes_fd().map(|fd| fd.as_raw_fd()) else { return };
    if let Err(e) = poll.registry().register(&mut SourceFd(&fd), FILES, Interest::READABLE) {
        log!(Level::Warn, "worker {index}: file changes not watched ({e}); open files are checked on each use");
        w.files.stop_watching();
    }
}

/// Backend descriptors join the worker's epoll set next to its sockets.
pub struct EpollWatcher {
    registry: mio::Registry,
    doorbell: Arc<Doorbell>,
    links: Arc<Links>,
}

impl Watcher for EpollWatcher {
    fn watch(&self, conn: usize, fd: BorrowedFd<'_>) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        self.registry.register(&mut SourceFd(&raw), Token(conn * 2 + 1), Interest::READABLE | Interest::WRITABLE)
    }

    fn watch_link(&self, conn: usize, link: usize, fd: BorrowedFd<'_>, write: bool, again: bool) -> io::Result<bool> {
        if again && !write {
            return Ok(self.links.give(link, conn));
        }
        let raw = fd.as_raw_fd();
        let interest = if write { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        let token = Token(LINKS + link);
        if again {
            self.registry.reregister(&mut SourceFd(&raw), token, interest)?;
        } else {
            self.registry.register(&mut SourceFd(&raw), token, interest)?;
        }
        // Readiness is reported afresh by the change.
        self.links.give(link, conn);
        Ok(false)
    }

    fn leave_link(&self, link: usize) {
        self.links.give(link, NOBODY);
    }

    fn unwatch(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.registry.deregister(&mut SourceFd(&fd.as_raw_fd()))
    }

    fn doorbell(&self) -> Option<&Arc<Doorbell>> {
        Some(&self.doorbell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_reports_to_its_connection_and_keeps_what_came_while_it_was_nobodys() {
        let links = Links::new(2);
        // Nobody's at first: an event is kept for the next to take it.
        assert_eq!(links.report(1), None);
        assert!(links.give(1, 7), "the event while nobody's");
        assert_eq!(links.report(1), Some(7));
        // Left between requests, taken by another connection quietly.
        assert!(!links.give(1, NOBODY));
        assert!(!links.give(1, 9));
        assert_eq!(links.report(1), Some(9));
        // The other link is apart; an id past the table is nobody's.
        assert_eq!(links.report(0), None);
        assert_eq!(links.report(2), None);
        assert!(!links.give(1, NOBODY));
        assert!(links.give(0, 4));
    }
}
