//! A request's hold on one of a pool's connections: its wait in the pool's
//! queue, the connect, the connection's watch in the reactor and its
//! edge-triggered readiness, and its return to the pool. A FastCGI exchange
//! and a proxied one speak their protocols over a hold; neither repeats it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rustls::ClientConnection;

use super::pool::{Checkout, Grant, Link, Pool, Ticket};
use super::tls;
use crate::sys;
use crate::worker::{Doorbell, Wait, Worker};

/// Where the hold is.
enum Phase {
    /// Waiting in the pool's queue (for the reactor's doorbell, or on the
    /// ticket's eventfd, the watched descriptor).
    Queued(Arc<Ticket>),
    /// A TCP connection in progress.
    Connecting,
    /// Connected: the protocol's bytes go both ways.
    Open,
    /// No connection (it failed or was closed).
    Closed,
}

/// What a connection taken from the pool kept alive brings with it.
pub struct Kept {
    /// The buffer its replies were read into (maybe holding the start of
    /// the next).
    pub buf: Vec<u8>,
    /// Bytes of its last reply still queued on it (FastCGI's peeked reply).
    pub owed: usize,
}

/// How far [`Hold::advance`] took a hold that was not open.
pub enum Advance {
    /// Nothing yet: wait for readiness.
    Wait,
    /// A connection came: open (`Some`: kept alive, with what it brings) or
    /// connecting; watched now in place of what was.
    Taken(Option<Kept>),
    /// The connect completed.
    Connected,
}

/// Why no connection could be taken.
pub enum Untaken {
    /// This process is out of descriptors (or memory) for a connection or
    /// a place in the queue: full for now, `503` — not the peer's failure.
    Full(io::Error),
    /// No place in the queue could be made (an eventfd): the server's
    /// fault, `500`.
    Queue(io::Error),
    /// The connection could not even be started: the peer's failure.
    Connect(io::Error),
}

pub struct Hold {
    pool: Arc<Pool>,
    phase: Phase,
    fd: Option<OwnedFd>,
    /// The connection's TLS session (an HTTPS upstream's).
    pub tls: Option<Box<ClientConnection>>,
    /// The id of the pool's place held (a connection open or being opened).
    place: Option<usize>,
    /// The connection is in the reactor's epoll set already (watched for
    /// this request, or still for the one before it on the same reactor).
    registered: bool,
    /// It is watched for room to write too (only once a write would block,
    /// or while a TCP connect is in progress).
    watched_for_room: bool,
    /// The peer closed its side: the connection serves no other request.
    pub hung_up: bool,
    /// The connection came kept-alive from the pool.
    pub reused: bool,
    /// Edge-triggered readiness of the watched descriptor.
    pub may_read: bool,
    pub may_write: bool,
    /// The connection's key in its engine.
    key: usize,
    /// Counted in the pool's requests in flight.
    counted: bool,
}

impl Hold {
    /// Takes a connection from `pool`: a kept-alive one (`Some`), a place
    /// to open one (`tls`: its session, for an HTTPS upstream), or a place
    /// in the queue (`doorbell`: the reactor's, rung when a connection is
    /// granted after a wait).
    pub fn take(
        pool: Arc<Pool>,
        doorbell: Option<&Arc<Doorbell>>,
        tls: Option<&tls::Client>,
    ) -> Result<(Hold, Option<Kept>), Untaken> {
        pool.in_flight.fetch_add(1, Relaxed);
        let mut hold = Hold {
            pool,
            phase: Phase::Closed,
            fd: None,
            tls: None,
            place: None,
            registered: false,
            watched_for_room: false,
            hung_up: false,
            reused: false,
            may_read: false,
            may_write: false,
            // Set by [`Hold::watch`], before any use.
            key: 0,
            counted: true,
        };
        let full_or = |other: fn(io::Error) -> Untaken| {
            move |e: io::Error| if sys::out_of_resources(&e) { Untaken::Full(e) } else { other(e) }
        };
        let checkout = hold.pool.checkout(doorbell).map_err(full_or(Untaken::Queue))?;
        let kept = match checkout {
            Checkout::Idle(link) => Some(hold.adopt(link)),
            Checkout::Connect(id) => {
                hold.place = Some(id);
                hold.open(tls).map_err(full_or(Untaken::Connect))?;
                None
            }
            Checkout::Wait(ticket) => {
                hold.phase = Phase::Queued(ticket);
                None
            }
        };
        Ok((hold, kept))
    }

    /// A new connection in the place held, the current one closed: a
    /// kept-alive connection found closed by its peer is retried on a fresh
    /// one (not another idle one, which may be as stale). `Err`: it could
    /// not be started (the place given back) or watched.
    pub fn reopen(&mut self, w: &Worker<'_>, tls: Option<&tls::Client>) -> io::Result<()> {
        self.fd = None;
        self.tls = None;
        self.watched_for_room = false;
        self.open(tls)?;
        self.rewatch(w)
    }

    /// Starts on a kept-alive connection.
    fn adopt(&mut self, link: Link) -> Kept {
        self.pool.stats.reused.fetch_add(1, Relaxed);
        self.fd = Some(link.fd);
        self.tls = link.tls;
        // Left by a request of this reactor, its watch is moved here.
        self.registered = link.home.is_some();
        self.place = Some(link.id);
        self.reused = true;
        self.hung_up = false;
        self.phase = Phase::Open;
        self.may_write = true;
        Kept { buf: link.buf, owed: link.owed }
    }

    /// Opens a new connection in the place held (given back when the peer
    /// cannot be reached).
    fn open(&mut self, tls: Option<&tls::Client>) -> io::Result<()> {
        self.reused = false;
        self.registered = false;
        self.hung_up = false;
        let session = tls.map(|c| c.session()).transpose();
        match session.and_then(|tls| self.pool.connect().map(|c| (c, tls))) {
            Ok(((fd, connected), tls)) => {
                self.fd = Some(fd);
                self.tls = tls;
                self.phase = if connected { Phase::Open } else { Phase::Connecting };
                self.may_write = connected;
                Ok(())
            }
            Err(e) => {
                if let Some(id) = self.place.take() {
                    self.pool.release(id);
                }
                self.phase = Phase::Closed;
                Err(e)
            }
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The connection, once there is one.
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// The connection and its TLS session, to send or receive on.
    pub fn parts(&mut self) -> Option<(&OwnedFd, &mut Option<Box<ClientConnection>>)> {
        Some((self.fd.as_ref()?, &mut self.tls))
    }

    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open)
    }

    pub fn is_queued(&self) -> bool {
        matches!(self.phase, Phase::Queued(_))
    }

    pub fn is_connecting(&self) -> bool {
        matches!(self.phase, Phase::Connecting)
    }

    /// Registers what the hold waits on as connection `key`'s backend
    /// descriptor.
    pub fn watch(&mut self, key: usize, w: &Worker<'_>) -> io::Result<()> {
        self.key = key;
        self.may_read = false;
        match (&self.phase, &self.fd) {
            (Phase::Queued(t), _) => match t.fd() {
                Some(fd) => w.watcher.watch(key, fd),
                None => {
                    // The doorbell is rung for this connection from now;
                    // a grant that came first is taken at once.
                    self.may_read = t.ring_for(key);
                    Ok(())
                }
            },
            (phase, Some(fd)) => {
                let write = matches!(phase, Phase::Connecting);
                let id = self.place.expect("a connection without its place");
                // What the peer did while the connection was idle (php-fpm
                // closes a recycled child's connection) is read at once.
                self.may_read = w.watcher.watch_link(key, id, fd.as_fd(), write, self.registered)?;
                self.registered = true;
                self.watched_for_room = write;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Watches the (new) connection in place of what was watched before.
    pub fn rewatch(&mut self, w: &Worker<'_>) -> io::Result<()> {
        self.watch(self.key, w)?;
        // Readiness is reported on registration; until then, assume a
        // connected socket takes the request.
        self.may_write = self.is_open();
        Ok(())
    }

    /// Another hold (on another server's pool) in place of this one, which
    /// is given up, watched for the same connection.
    pub fn replace(&mut self, mut next: Hold, w: &Worker<'_>) -> io::Result<()> {
        next.key = self.key;
        *self = next;
        self.rewatch(w)
    }

    /// The descriptor [`Hold::watch`] registers now, whatever is known of
    /// it (none once closed).
    pub fn watched(&self) -> Option<BorrowedFd<'_>> {
        match (&self.phase, &self.fd) {
            (Phase::Queued(t), _) => t.fd(),
            (Phase::Connecting | Phase::Open, Some(fd)) => Some(fd.as_fd()),
            _ => None,
        }
    }

    /// What a blocking engine waits on: the descriptor [`Hold::watch`]
    /// registers, in the directions not known to be ready that are wanted
    /// (`write`: the protocol has bytes to send).
    pub fn wait(&self, write: bool) -> Option<(BorrowedFd<'_>, Wait)> {
        let (fd, wait) = match (&self.phase, &self.fd) {
            (Phase::Queued(t), _) => (t.fd()?, Wait { read: !self.may_read, write: false }),
            (Phase::Connecting, Some(fd)) => (fd.as_fd(), Wait { read: false, write: !self.may_write }),
            (Phase::Open, Some(fd)) => (fd.as_fd(), Wait { read: !self.may_read, write: !self.may_write && write }),
            _ => return None,
        };
        wait.any().then_some((fd, wait))
    }

    pub fn on_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        self.may_read |= readable || closed;
        self.may_write |= writable;
        // The peer shut its side down, maybe with a reply's last bytes
        // (php-fpm recycling a child): the connection is not kept, as the
        // next request on it would hear of the shutdown no more.
        self.hung_up |= closed;
    }

    /// Whether a queued or connecting hold can move on
    /// ([`Hold::advance`]); an open one's readiness is the protocol's.
    pub fn can_advance(&self) -> bool {
        match self.phase {
            Phase::Queued(_) => self.may_read,
            Phase::Connecting => self.may_write,
            Phase::Open | Phase::Closed => false,
        }
    }

    /// Moves a queued or connecting hold on: takes a granted connection
    /// (`tls` as for [`Hold::take`]) or completes a connect. `Err`: the
    /// connection failed (its place given back when it could not start).
    pub fn advance(&mut self, w: &Worker<'_>, tls: Option<&tls::Client>) -> io::Result<Advance> {
        match &self.phase {
            Phase::Queued(ticket) => {
                let Some(grant) = ticket.take() else {
                    self.may_read = false;
                    return Ok(Advance::Wait);
                };
                // The ticket (and any eventfd, and so its watch) ends here.
                self.phase = Phase::Closed;
                let kept = match grant {
                    Grant::Idle(link) => Some(self.adopt(link)),
                    Grant::Permit(id) => {
                        self.place = Some(id);
                        self.open(tls)?;
                        None
                    }
                };
                self.rewatch(w)?;
                Ok(Advance::Taken(kept))
            }
            Phase::Connecting => {
                if !self.may_write {
                    return Ok(Advance::Wait);
                }
                let fd = self.fd.as_ref().expect("connecting without a socket");
                match socket2::SockRef::from(fd).take_error() {
                    Ok(None) => {
                        self.phase = Phase::Open;
                        Ok(Advance::Connected)
                    }
                    Ok(Some(e)) | Err(e) => Err(e),
                }
            }
            Phase::Open | Phase::Closed => Ok(Advance::Wait),
        }
    }

    /// A write would have blocked: wait for room, watched for it from now
    /// on.
    pub fn wait_for_room(&mut self, w: &Worker<'_>) -> io::Result<()> {
        self.may_write = false;
        if !self.watched_for_room {
            if let Some(fd) = &self.fd {
                let id = self.place.expect("a connection without its place");
                w.watcher.watch_link(self.key, id, fd.as_fd(), true, true)?;
                self.watched_for_room = true;
            }
        }
        Ok(())
    }

    /// Closes the connection (or leaves the queue); its place goes back to
    /// the pool, and the request no longer counts as in flight there.
    /// Closing the socket ends its watch too.
    pub fn close(&mut self) {
        if let Phase::Queued(ticket) = &self.phase {
            self.pool.cancel(ticket);
        }
        self.phase = Phase::Closed;
        self.fd = None;
        self.tls = None;
        self.registered = false;
        self.watched_for_room = false;
        if let Some(id) = self.place.take() {
            self.pool.release(id);
        }
        if std::mem::take(&mut self.counted) {
            self.pool.in_flight.fetch_sub(1, Relaxed);
        }
    }

    /// Gives a connection whose exchange ended cleanly back to the pool,
    /// with its buffer (`owed`: bytes of the reply still queued on it). A
    /// connection that stays on this reactor (idle, or to a request waiting
    /// here) stays in its epoll set, watched for nobody until another
    /// request takes it.
    pub fn give_back(&mut self, w: &Worker<'_>, buf: Vec<u8>, owed: usize) {
        if self.hung_up || !self.is_open() {
            return;
        }
        let Some(fd) = self.fd.take() else { return };
        let id = self.place.take().expect("a connection without its place");
        self.phase = Phase::Closed;
        // Kept in the set only as it is between requests: read-only.
        let home = w.watcher.doorbell().filter(|_| self.registered && !self.watched_for_room).cloned();
        if home.is_some() {
            w.watcher.leave_link(id);
        } else if self.registered {
            let _ = w.watcher.unwatch(fd.as_fd());
        }
        if let Some(link) = self.pool.give_back(Link { id, fd, buf, home, owed, tls: self.tls.take() }) {
            let _ = w.watcher.unwatch(link.fd.as_fd());
            self.pool.put_back(Link { home: None, ..link });
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.close();
    }
}
