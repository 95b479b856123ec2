//! One backend's connections (a FastCGI application's, an HTTP upstream
//! server's), shared by all workers: idle kept-alive
//! connections, places (by id) for at most the cap of them open, and a
//! queue of requests waiting for one.
//!
//! A waiting request holds a [`Ticket`]; whoever frees a connection (on
//! any worker) hands it to the first ticket and rings the waiting worker's
//! doorbell (a reactor's: no descriptor per wait, and no system call when
//! the worker rings itself) or signals the ticket's eventfd (a thread
//! that blocks waits on it as the connection's backend descriptor), so a
//! wait never blocks a reactor and no worker looks at another's
//! connections.
//!
//! Each place in a pool (a connection open or being opened) has an id,
//! unique in the process (servers replaced by a reload included), which
//! names its connection in a reactor's epoll set. A connection handed to a request of the same
//! reactor, or left idle, stays in that set: the next request of that
//! reactor takes it over with no system call. One that goes to another
//! worker's waiting request leaves the set first; an idle one another
//! worker takes is taken out by that worker (through the reactor's
//! doorbell). So a link given to a request is watched by that request's
//! reactor or by none.
//!
//! Crossing to another reactor costs both of them system calls and the
//! other a wake-up, so a connection freed on a reactor goes to the first
//! request waiting *on that reactor*, passing over the first of the queue
//! when it is another's — at most [`Pool::cap`] times in a row, so a
//! reactor that holds no connection waits at most one more round of the
//! pool. Measured with 32 clients, 2 workers and 8 php-fpm children: see
//! `bench/RESULTS.md`.
//!
//! A reload's new server takes over the pool of each backend whose
//! address and size it keeps ([`Pools::inheriting`]): the replaced server,
//! while it finishes its last requests, and the new one share the
//! backend's connections, their places and their queue. Two pools would
//! open up to twice the connections a backend was sized for, and a
//! php-fpm child serves one connection at a time: a last request of the
//! replaced server opened a connection no child was left for (the new
//! pool kept them all), and waited in php-fpm's backlog until its read
//! timeout.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use socket2::{Domain, SockAddr, Socket, Type};

use super::address::Address;
use crate::sys;
use crate::worker::Doorbell;

/// A kept-alive connection and the buffer its replies are read into,
/// which stays with it so an exchange on it allocates none.
pub struct Link {
    /// Its place's id (see the module's comment).
    pub id: usize,
    pub fd: OwnedFd,
    pub buf: Vec<u8>,
    /// The reactor whose epoll set still holds it (for the request that
    /// used it last), known by its doorbell.
    pub home: Option<Arc<Doorbell>>,
    /// Bytes of its last reply still queued on it (see [`ReplyReader`]).
    ///
    /// [`ReplyReader`]: crate::site::fastcgi::reply::ReplyReader
    pub owed: usize,
    /// Its TLS session, for an HTTPS upstream: kept with the connection, so
    /// reusing it costs no handshake.
    pub tls: Option<Box<rustls::ClientConnection>>,
}

/// What a freed place in the pool becomes for a waiting request.
pub enum Grant {
    /// A kept-alive connection.
    Idle(Link),
    /// Room to open a new one: a place, by its id.
    Permit(usize),
}

/// A request waiting for a connection.
pub struct Ticket {
    grant: Mutex<Option<Grant>>,
    notify: Notify,
}

/// How a waiting request learns of its grant.
enum Notify {
    /// An eventfd its thread waits on.
    Event(OwnedFd),
    /// Its reactor's doorbell, rung with its connection's key (set once
    /// the connection knows the ticket: [`Ticket::ring_for`]).
    Bell(Arc<Doorbell>, AtomicUsize),
}

/// The connection key of a ticket not yet claimed by its connection.
const NO_KEY: usize = usize::MAX;

impl Ticket {
    /// What the waiting request's worker watches: the eventfd of a thread
    /// that blocks (a reactor's request waits for its doorbell instead).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.notify {
            Notify::Event(fd) => Some(fd.as_fd()),
            Notify::Bell(..) => None,
        }
    }

    /// Connection `key` waits on this ticket: a grant rings for it. True
    /// when a grant came before (nobody was rung for it).
    pub fn ring_for(&self, key: usize) -> bool {
        let Notify::Bell(_, k) = &self.notify else { return false };
        // Under the grant's lock, so a grant cannot slip between the store
        // and the look.
        let grant = self.grant.lock().unwrap_or_else(|e| e.into_inner());
        k.store(key, Relaxed);
        grant.is_some()
    }

    /// The grant, once one was handed over.
    pub fn take(&self) -> Option<Grant> {
        self.grant.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What [`Pool::checkout`] found.
pub enum Checkout {
    Idle(Link),
    /// A place (its id) is reserved: open a connection ([`Pool::connect`]).
    Connect(usize),
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
    /// The ids of the places not taken by a connection open or being
    /// opened (idle ones are taken).
    free: Vec<usize>,
    waiting: VecDeque<Arc<Ticket>>,
    /// How many times the first waiting request was passed over for a
    /// later one of the reactor that freed a connection.
    passed: usize,
    /// The pool's server was replaced ([`Pool::retire`]): no connection
    /// is kept idle any more.
    retired: bool,
}

/// How far down the queue a freed connection looks for a request of its
/// own reactor.
const LOOK_AHEAD: usize = 64;

impl State {
    fn pop_front(&mut self) -> Option<Arc<Ticket>> {
        self.passed = 0;
        self.waiting.pop_front()
    }
}

pub struct Pool {
    address: Address,
    cap: usize,
    /// Its places' ids, taken from [`PLACES`] and given back when the
    /// pool goes.
    places: Box<[usize]>,
    state: Mutex<State>,
    pub stats: Stats,
    /// Requests holding one of its connections or waiting for one (least
    /// connections balances on it).
    pub in_flight: AtomicUsize,
}

/// Open, idle and waiting, as the status page shows them.
pub struct Snapshot {
    pub open: usize,
    pub idle: usize,
    pub waiting: usize,
}

/// Which place ids are taken, in the whole process: a reactor's table of
/// links is indexed by them, so they stay small (the lowest free ones are
/// taken) and no two pools a reactor may use share one.
static PLACES: Mutex<Vec<bool>> = Mutex::new(Vec::new());

/// The `n` lowest free place ids, taken.
fn take_places(n: usize) -> Box<[usize]> {
    let mut taken = PLACES.lock().unwrap_or_else(|e| e.into_inner());
    let mut ids: Vec<usize> = taken.iter().enumerate().filter(|(_, t)| !**t).map(|(i, _)| i).take(n).collect();
    let (len, more) = (taken.len(), n - ids.len());
    ids.extend(len..len + more);
    taken.resize(len + more, true);
    for &i in &ids {
        taken[i] = true;
    }
    ids.into()
}

impl Pool {
    /// Where its backend listens, as configured.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// A pool of `cap` places.
    pub fn new(address: Address, cap: usize) -> Pool {
        let places = take_places(cap);
        let free = places.iter().rev().copied().collect();
        Pool {
            address,
            cap,
            places,
            state: Mutex::new(State { free, ..State::default() }),
            stats: Stats::default(),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// One past its highest place id.
    fn end(&self) -> usize {
        self.places.iter().max().map_or(0, |&i| i + 1)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection, a place to open one, or a place in the queue
    /// (told by `doorbell`, the waiting worker's when it is a reactor).
    pub fn checkout(&self, doorbell: Option<&Arc<Doorbell>>) -> io::Result<Checkout> {
        let mut s = self.state();
        // Best one this reactor watches already, then one nobody watches.
        let home = |l: &Link| match (&l.home, doorbell) {
            (Some(h), Some(d)) if Arc::ptr_eq(h, d) => 2,
            (None, _) => 1,
            _ => 0,
        };
        if let Some(i) = (0..s.idle.len()).max_by_key(|&i| home(&s.idle[i])) {
            let mut link = s.idle.swap_remove(i);
            drop(s);
            if home(&link) == 0 {
                if let Some(other) = link.home.take() {
                    other.forget(link.fd.as_fd());
                }
            }
            return Ok(Checkout::Idle(link));
        }
        if let Some(id) = s.free.pop() {
            return Ok(Checkout::Connect(id));
        }
        let notify = match doorbell {
            Some(bell) => Notify::Bell(bell.clone(), AtomicUsize::new(NO_KEY)),
            None => Notify::Event(sys::eventfd()?),
        };
        let ticket = Arc::new(Ticket { grant: Mutex::new(None), notify });
        s.waiting.push_back(ticket.clone());
        Ok(Checkout::Wait(ticket))
    }

    /// A connection that stays usable, watched by the reactor its `home`
    /// names (if any): to the first request waiting on that reactor (see
    /// the module's comment), else idle, still watched. `Some` when it
    /// must go to another reactor's request: to be unwatched and
    /// [`Pool::put_back`].
    pub fn give_back(&self, link: Link) -> Option<Link> {
        let mut s = self.state();
        let pick = match (&link.home, s.waiting.front()) {
            (_, None) if s.retired => {
                close(&mut s, link);
                return None;
            }
            (_, None) => {
                s.idle.push(link);
                return None;
            }
            (None, Some(_)) => 0,
            (Some(home), Some(first)) => {
                let mine = |t: &Arc<Ticket>| matches!(&t.notify, Notify::Bell(bell, _) if Arc::ptr_eq(bell, home));
                if mine(first) {
                    0
                } else if s.passed < self.cap {
                    match s.waiting.iter().take(LOOK_AHEAD).position(mine) {
                        Some(i) => i,
                        None => return Some(link),
                    }
                } else {
                    return Some(link);
                }
            }
        };
        let t = if pick == 0 {
            s.pop_front()
        } else {
            s.passed += 1;
            s.waiting.remove(pick)
        };
        hand(&t.expect("a waiting request"), Grant::Idle(link));
        None
    }

    /// A connection that stays usable (watched by no reactor): to the first
    /// waiting request, else idle.
    pub fn put_back(&self, link: Link) {
        debug_assert!(link.home.is_none(), "a pooled connection still watched");
        let mut s = self.state();
        match s.pop_front() {
            Some(t) => hand(&t, Grant::Idle(link)),
            None if s.retired => close(&mut s, link),
            None => s.idle.push(link),
        }
    }

    /// The pool's server was replaced (a reload) and lingers for its
    /// slowest clients: its idle connections are closed, and each one its
    /// last requests give back is closed unless one of them waits for it.
    /// A kept-alive connection holds one of the backend's workers (a
    /// php-fpm child serves one connection at a time), which the new
    /// server's pool would otherwise wait for, unanswered, for as long.
    pub fn retire(&self) {
        let mut s = self.state();
        s.retired = true;
        for link in std::mem::take(&mut s.idle) {
            close(&mut s, link);
        }
    }

    /// A connection was closed (or a reserved place not used): its place
    /// `id` goes to the first waiting request.
    pub fn release(&self, id: usize) {
        let mut s = self.state();
        match s.pop_front() {
            Some(t) => hand(&t, Grant::Permit(id)),
            None => s.free.push(id),
        }
    }

    /// A waiting request gives up; a grant that reached it meanwhile is
    /// passed on.
    pub fn cancel(&self, ticket: &Arc<Ticket>) {
        let mut s = self.state();
        if s.waiting.front().is_some_and(|t| Arc::ptr_eq(t, ticket)) {
            s.pop_front();
        } else {
            s.waiting.retain(|t| !Arc::ptr_eq(t, ticket));
        }
        drop(s);
        match ticket.take() {
            Some(Grant::Idle(link)) if link.home.is_none() => self.put_back(link),
            // One still in its reactor's epoll set, which only that reactor
            // may change: closed, and its place passed on.
            Some(Grant::Idle(Link { id, .. }) | Grant::Permit(id)) => self.release(id),
            None => {}
        }
    }

    /// Opens a non-blocking connection: the socket and whether it is
    /// connected already (else in progress: wait until writable).
    pub fn connect(&self) -> io::Result<(OwnedFd, bool)> {
        self.stats.connects.fetch_add(1, Relaxed);
        let (domain, addr) = match &self.address {
            Address::Unix(path) => (Domain::UNIX, SockAddr::unix(path)?),
            Address::Tcp(a) => (Domain::for_address(*a), SockAddr::from(*a)),
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
        Snapshot { open: self.cap - s.free.len(), idle: s.idle.len(), waiting: s.waiting.len() }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let mut taken = PLACES.lock().unwrap_or_else(|e| e.into_inner());
        for &i in self.places.iter() {
            taken[i] = false;
        }
    }
}

/// Every pool of a server, by a key its owner chooses: a FastCGI backend
/// of the top-level `[fastcgi]` has one pool whichever sites inherit it
/// (`NAME`), a backend a site defines its own (`SITE/NAME`), an upstream
/// server its own (`upstream NAME/N`).
#[derive(Default)]
pub struct Pools {
    /// `NAME` for a top-level backend, `SITE/NAME` for a site's own.
    pools: Vec<(String, Arc<Pool>)>,
    /// The pools of the server this one replaces, while it is built.
    inherited: Vec<(String, Arc<Pool>)>,
    /// One past the highest place id of its pools: the size of a
    /// reactor's table of links.
    pub links: usize,
}

/// A server's pools, as a server replacing it may take them over.
#[derive(Default)]
pub struct Inherited(Vec<(String, Arc<Pool>)>);

impl Pools {
    /// No pool yet; the pool of a key in `inherited` is taken over when it
    /// is asked for with the same address and size.
    pub fn inheriting(inherited: Inherited) -> Pools {
        Pools { inherited: inherited.0, ..Pools::default() }
    }

    /// Its pools, for the server that replaces this one.
    pub fn to_inherit(&self) -> Inherited {
        Inherited(self.pools.clone())
    }

    /// Lets go of the inherited pools not taken over (the server is built).
    pub fn settle(&mut self) {
        self.inherited = Vec::new();
    }

    /// Each pool once, with its backend's name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Pool)> {
        self.pools.iter().map(|(name, pool)| (name.as_str(), &**pool))
    }

    /// The server was replaced by one with pools `successor`: each pool it
    /// did not take over retires (see [`Pool::retire`]).
    pub fn retire(&self, successor: &Pools) {
        for (_, pool) in &self.pools {
            if !successor.pools.iter().any(|(_, p)| Arc::ptr_eq(p, pool)) {
                pool.retire();
            }
        }
    }

    /// The pool of `key`, made with `cap` places the first time — or taken
    /// over from the replaced server, when its pool of `key` has the same
    /// address and size.
    pub fn get(&mut self, key: String, address: &Address, cap: usize) -> Arc<Pool> {
        let kept = self.inherited.iter().find(|(k, p)| *k == key && p.address == *address && p.cap == cap);
        let kept = kept.map(|(_, p)| p.clone());
        self.made(key, kept, address, cap)
    }

    /// As [`Pools::get`], never taken over: for connections whose state
    /// came from settings beyond the address (an upstream's TLS sessions,
    /// verified under its old certificate settings).
    pub fn get_new(&mut self, key: String, address: &Address, cap: usize) -> Arc<Pool> {
        self.made(key, None, address, cap)
    }

    fn made(&mut self, key: String, kept: Option<Arc<Pool>>, address: &Address, cap: usize) -> Arc<Pool> {
        if let Some((_, pool)) = self.pools.iter().find(|(k, _)| *k == key) {
            return pool.clone();
        }
        let pool = kept.unwrap_or_else(|| Arc::new(Pool::new(address.clone(), cap)));
        self.links = self.links.max(pool.end());
        self.pools.push((key, pool.clone()));
        pool
    }
}

/// Closes a connection nobody waits for, taking it out of the epoll set
/// of the reactor that still watches it (as [`Pool::checkout`] does for
/// one another worker takes), and frees its place.
fn close(s: &mut State, link: Link) {
    if let Some(home) = &link.home {
        home.forget(link.fd.as_fd());
    }
    s.free.push(link.id);
}

/// Gives `grant` to a waiting request (taken off the queue) and wakes its
/// worker. Called under the pool's lock, so a request that gives up
/// ([`Pool::cancel`]) either is still queued or finds the grant.
fn hand(t: &Ticket, grant: Grant) {
    let mut slot = t.grant.lock().unwrap_or_else(|e| e.into_inner());
    *slot = Some(grant);
    match &t.notify {
        Notify::Event(fd) => sys::signal_eventfd(fd.as_fd()),
        Notify::Bell(bell, key) => {
            let key = key.load(Relaxed);
            drop(slot);
            // Not claimed yet: the connection looks when it claims it.
            if key != NO_KEY {
                bell.ring(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn pool(cap: usize) -> Pool {
        Pool::new(Address::Unix("/nonexistent/tern-test.sock".into()), cap)
    }

    fn link(home: Option<&Arc<Doorbell>>) -> Link {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        Link { id: 0, fd: OwnedFd::from(a), buf: Vec::new(), home: home.cloned(), owed: 0, tls: None }
    }

    fn rung(bell: &Doorbell) -> Vec<usize> {
        let mut keys = Vec::new();
        bell.take(&mut keys);
        keys
    }

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut buf = [0u8; 8];
        rustix::io::read(fd, &mut buf).is_ok()
    }

    #[test]
    fn never_past_the_cap_and_first_come_first_served() {
        let p = pool(2);
        let Checkout::Connect(a) = p.checkout(None).unwrap() else { panic!("a place") };
        let Checkout::Connect(b) = p.checkout(None).unwrap() else { panic!("a place") };
        assert!(a < b && p.places.contains(&a) && p.places.contains(&b));
        let Checkout::Wait(first) = p.checkout(None).unwrap() else { panic!("a third request must wait") };
        let Checkout::Wait(second) = p.checkout(None).unwrap() else { panic!("a fourth request must wait") };
        assert_eq!(p.snapshot().waiting, 2);
        assert!(!readable(first.fd().unwrap()));

        // A kept-alive connection goes to the first waiter, woken.
        p.put_back(Link { id: a, ..link(None) });
        assert!(readable(first.fd().unwrap()));
        assert!(matches!(first.take(), Some(Grant::Idle(Link { id, .. })) if id == a));
        assert!(!readable(second.fd().unwrap()));
        // A closed one leaves its place to the next; the count stays at 2.
        p.release(b);
        assert!(readable(second.fd().unwrap()));
        assert!(matches!(second.take(), Some(Grant::Permit(id)) if id == b));
        assert_eq!(p.snapshot().open, 2);
        p.release(a);
        p.release(b);
        assert_eq!(p.snapshot().open, 0);
        // Freed places are taken again.
        let ids: Vec<_> = (0..2)
            .map(|_| match p.checkout(None).unwrap() {
                Checkout::Connect(id) => id,
                _ => panic!("a free place"),
            })
            .collect();
        assert_eq!(ids, [b, a]);
    }

    #[test]
    fn a_reload_takes_over_the_pools_it_keeps_as_they_were_and_retires_the_others() {
        let unix = |p: &str| Address::Unix(p.into());
        let mut old = Pools::default();
        let kept = old.get("php".into(), &unix("/run/php.sock"), 2);
        let resized = old.get("other".into(), &unix("/run/other.sock"), 2);
        let moved = old.get("third".into(), &unix("/run/third.sock"), 1);
        let over_tls = old.get_new("upstream app/0".into(), &unix("/run/app.sock"), 1);
        let mut new = Pools::inheriting(old.to_inherit());
        assert!(Arc::ptr_eq(&new.get("php".into(), &unix("/run/php.sock"), 2), &kept));
        let bigger = new.get("other".into(), &unix("/run/other.sock"), 3);
        let elsewhere = new.get("third".into(), &unix("/run/moved.sock"), 1);
        let tls = new.get_new("upstream app/0".into(), &unix("/run/app.sock"), 1);
        new.settle();
        for fresh in [&bigger, &elsewhere, &tls] {
            assert!(!Arc::ptr_eq(fresh, &resized) && !Arc::ptr_eq(fresh, &moved) && !Arc::ptr_eq(fresh, &over_tls));
            // A place id names one pool's connection in every reactor's
            // set, the replaced server's too: no id is shared.
            assert!(fresh
                .places
                .iter()
                .all(|i| ![&kept, &resized, &moved, &over_tls].iter().any(|p| p.places.contains(i))));
        }
        assert!(new.links >= 7 && new.iter().all(|(_, p)| p.places.iter().all(|&i| i < new.links)));
        // The replaced server retires what it kept alone: its idle
        // connections close, the shared pool keeps its own.
        for p in [&kept, &resized] {
            let Checkout::Connect(id) = p.checkout(None).unwrap() else { panic!("a place") };
            assert!(p.give_back(Link { id, ..link(None) }).is_none());
        }
        old.retire(&new);
        assert_eq!((kept.snapshot().idle, resized.snapshot().idle), (1, 0));
    }

    #[test]
    fn a_cancelled_wait_passes_its_grant_on() {
        let p = pool(1);
        let Checkout::Connect(id) = p.checkout(None).unwrap() else { panic!("a place") };
        assert_eq!(id, p.places[0]);
        let Checkout::Wait(gone) = p.checkout(None).unwrap() else { panic!() };
        let Checkout::Wait(next) = p.checkout(None).unwrap() else { panic!() };
        p.release(id); // to `gone`, which gives up without using it
        p.cancel(&gone);
        assert!(matches!(next.take(), Some(Grant::Permit(i)) if i == id));
        p.cancel(&next); // nothing to pass on
        assert_eq!(p.snapshot().waiting, 0);
        assert_eq!(p.snapshot().open, 1);
    }

    /// A doorbell that records the descriptors taken out of its set.
    fn bell() -> (Arc<Doorbell>, Arc<Mutex<Vec<i32>>>) {
        let forgotten = Arc::new(Mutex::new(Vec::new()));
        let f = forgotten.clone();
        let forget = Box::new(move |fd: BorrowedFd<'_>| f.lock().unwrap().push(fd.as_raw_fd()));
        (Arc::new(Doorbell::new(Box::new(|| {}), forget)), forgotten)
    }

    #[test]
    fn a_reactor_waits_on_its_doorbell_and_keeps_what_it_watches() {
        let p = pool(1);
        let ((here, _), (there, _)) = (bell(), bell());
        let Checkout::Connect(id) = p.checkout(Some(&here)).unwrap() else { panic!("a place") };
        let Checkout::Wait(first) = p.checkout(Some(&here)).unwrap() else { panic!() };
        let Checkout::Wait(second) = p.checkout(Some(&there)).unwrap() else { panic!() };
        assert!(first.fd().is_none(), "no descriptor per wait on a reactor");
        assert!(!first.ring_for(7) && !second.ring_for(9));

        // Freed on the first waiter's reactor: handed over still watched,
        // the doorbell rung for its connection.
        assert!(p.give_back(link(Some(&here))).is_none());
        assert_eq!(rung(&here), [7]);
        let Some(Grant::Idle(l)) = first.take() else { panic!("the link") };
        assert!(l.home.is_some_and(|h| Arc::ptr_eq(&h, &here)));
        // The next waiter is another reactor's: given back, to be
        // unwatched, then handed on.
        let Some(mut l) = p.give_back(link(Some(&here))) else { panic!("not for another reactor") };
        assert!(rung(&there).is_empty());
        l.home = None;
        p.put_back(l);
        assert_eq!(rung(&there), [9]);
        assert!(matches!(second.take(), Some(Grant::Idle(_))));

        // A grant before the connection claimed its ticket rings nobody;
        // the claim says it came.
        let Checkout::Wait(late) = p.checkout(Some(&here)).unwrap() else { panic!() };
        p.release(id);
        assert!(rung(&here).is_empty());
        assert!(late.ring_for(3));
        // A waiter that gives up on a connection still watched closes it:
        // its place goes on.
        let Checkout::Wait(gone) = p.checkout(Some(&here)).unwrap() else { panic!() };
        let Checkout::Wait(next) = p.checkout(Some(&here)).unwrap() else { panic!() };
        assert!(!gone.ring_for(4) && !next.ring_for(5));
        assert!(p.give_back(link(Some(&here))).is_none());
        p.cancel(&gone);
        assert_eq!(rung(&here), [4, 5]);
        assert!(matches!(next.take(), Some(Grant::Permit(i)) if i == id));
    }

    #[test]
    fn a_freed_link_goes_to_its_reactors_first_waiter_passing_over_others_at_most_cap_times() {
        let p = pool(2);
        let ((here, _), (there, _)) = (bell(), bell());
        for _ in 0..2 {
            assert!(matches!(p.checkout(Some(&here)).unwrap(), Checkout::Connect(_)));
        }
        let wait = |bell: &Arc<Doorbell>, key: usize| {
            let Checkout::Wait(t) = p.checkout(Some(bell)).unwrap() else { panic!("past the cap") };
            assert!(!t.ring_for(key));
            t
        };
        let theirs = wait(&there, 1);
        let mine: Vec<_> = (2..6).map(|key| wait(&here, key)).collect();

        // Freed here: to the requests waiting here, passing over the first
        // of the queue (another reactor's) twice, the pool's size.
        for (i, key) in [(0, 2), (1, 3)] {
            assert!(p.give_back(link(Some(&here))).is_none());
            assert_eq!(rung(&here), [key]);
            assert!(matches!(mine[i].take(), Some(Grant::Idle(_))));
        }
        // The third time it crosses: given back, to be unwatched, then
        // handed on to the first of the queue.
        let Some(mut l) = p.give_back(link(Some(&here))) else { panic!("passed over a third time") };
        l.home = None;
        p.put_back(l);
        assert_eq!((rung(&there), rung(&here)), (vec![1], vec![]));
        assert!(matches!(theirs.take(), Some(Grant::Idle(_))));
        // The count starts again with the next first request (this
        // reactor's), and a link freed on the other reactor, which has
        // nobody waiting, crosses to this one.
        assert!(p.give_back(link(Some(&here))).is_none());
        assert_eq!(rung(&here), [4]);
        assert!(p.give_back(link(Some(&there))).is_some());
        assert_eq!(p.snapshot().waiting, 1);
    }

    #[test]
    fn an_idle_link_stays_watched_by_its_reactor_until_another_takes_it() {
        let p = pool(3);
        let ((here, here_forgot), (there, there_forgot)) = (bell(), bell());
        // Nobody waits: each goes idle, still in its reactor's set.
        let left = |home: &Arc<Doorbell>| {
            let l = link(Some(home));
            let fd = l.fd.as_raw_fd();
            assert!(p.give_back(l).is_none());
            fd
        };
        let (mine, theirs) = (left(&here), left(&there));
        assert_eq!(p.snapshot().idle, 2);
        // Each reactor gets back the one it watches, untouched.
        for (bell, fd) in [(&there, theirs), (&here, mine)] {
            let Checkout::Idle(l) = p.checkout(Some(bell)).unwrap() else { panic!("idle") };
            assert_eq!(l.fd.as_raw_fd(), fd);
            assert!(l.home.as_ref().is_some_and(|h| Arc::ptr_eq(h, bell)));
            assert!(p.give_back(l).is_none());
        }
        assert!(here_forgot.lock().unwrap().is_empty() && there_forgot.lock().unwrap().is_empty());
        // One watched elsewhere is taken out of that reactor's set first.
        let Checkout::Idle(a) = p.checkout(Some(&there)).unwrap() else { panic!("idle") };
        let Checkout::Idle(b) = p.checkout(Some(&there)).unwrap() else { panic!("idle") };
        assert_eq!(a.fd.as_raw_fd(), theirs);
        assert!(b.home.is_none());
        assert_eq!(*here_forgot.lock().unwrap(), [mine]);
        // An unwatched one is preferred to another reactor's.
        left(&here);
        p.put_back(b);
        let Checkout::Idle(l) = p.checkout(Some(&there)).unwrap() else { panic!("idle") };
        assert_eq!(l.fd.as_raw_fd(), mine);
        assert!(l.home.is_none());
        assert_eq!(here_forgot.lock().unwrap().len(), 1);
    }

    #[test]
    fn connect_fails_at_once_when_nothing_listens() {
        assert!(pool(1).connect().is_err());
    }
}
