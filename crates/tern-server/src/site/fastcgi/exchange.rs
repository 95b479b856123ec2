//! One request's exchange with a FastCGI backend, driven by readiness like
//! a CGI pipe: wait for a connection, connect, write the records, read the
//! reply. What the application prints on `STDOUT` goes through the CGI
//! response parser as it arrives; `STDERR` goes to the error log;
//! `END_REQUEST` ends the response.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_http::Request;

use super::backends::Backend;
use super::proto::{self, Decoder, Event, ID, MAX_CONTENT, REQUEST_COMPLETE, STDIN};
use super::reply::ReplyReader;
use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::reply::Params;
use crate::site::cgi::{Pump, Response};
use crate::site::upstream::pool::{Checkout, Grant, Link, Ticket};
use crate::sys;
use crate::worker::{Doorbell, Wait, Worker};

enum Stage {
    /// Waiting in the pool's queue (for the reactor's doorbell, or on the
    /// ticket's eventfd, the watched descriptor).
    Queued(Arc<Ticket>),
    /// A TCP connection in progress.
    Connecting,
    /// Writing the request, reading the reply.
    Talking,
    /// `END_REQUEST` arrived.
    Ended,
}

/// A request body spooled to a file, sent to `STDIN` a window at a time
/// after the records: never more than the window in memory, and the next
/// window is read only once the backend took the last one.
pub struct Upload {
    file: File,
    len: u64,
    /// Where the next window starts in the file.
    pos: u64,
    /// The window's records, and how much of them was written.
    chunk: Vec<u8>,
    sent: usize,
    window: usize,
}

impl Upload {
    pub fn new(file: File, len: u64, window: usize) -> Upload {
        Upload { file, len, pos: 0, chunk: Vec::new(), sent: 0, window: window.clamp(1, MAX_CONTENT) }
    }

    /// Whether every record (the closing empty one included) was written.
    fn done(&self) -> bool {
        self.pos == self.len && self.sent == self.chunk.len() && !self.chunk.is_empty()
    }

    /// The bytes to write next, reading the next window when the last one
    /// is out.
    fn pending(&mut self) -> io::Result<&[u8]> {
        if self.sent == self.chunk.len() && self.pos < self.len {
            let n = (self.len - self.pos).min(self.window as u64) as usize;
            self.chunk.clear();
            self.sent = 0;
            proto::header(&mut self.chunk, STDIN, ID, n);
            let at = self.chunk.len();
            self.chunk.resize(at + n, 0);
            self.file.read_exact_at(&mut self.chunk[at..], self.pos)?;
            self.pos += n as u64;
            if self.pos == self.len {
                proto::end_stream(&mut self.chunk, STDIN, ID);
            }
        }
        Ok(&self.chunk[self.sent..])
    }

    /// From the start again (the request is retried on a new connection).
    fn rewind(&mut self) {
        self.pos = 0;
        self.chunk.clear();
        self.sent = 0;
    }
}

pub struct Exchange {
    backend: Arc<Backend>,
    stage: Stage,
    link: Option<OwnedFd>,
    /// The link is in the reactor's epoll set already (watched for this
    /// request, or still for the one before it on the same reactor).
    registered: bool,
    /// It is watched for room to write too (only once a write would block,
    /// or while a TCP connect is in progress).
    watched_for_room: bool,
    /// The backend closed its side of the link: it serves no other request.
    hung_up: bool,
    /// The id of the pool's place this exchange holds (a connection open
    /// or being opened), if any.
    place: Option<usize>,
    /// The link came kept-alive from the pool.
    reused: bool,
    retried: bool,
    /// The request's records, and how many bytes of them were written.
    records: Vec<u8>,
    sent: usize,
    /// A spooled body, written after `records`.
    upload: Option<Upload>,
    input: Vec<u8>,
    reply: ReplyReader,
    decoder: Decoder,
    pub response: Response,
    /// Edge-triggered readiness of the watched descriptor.
    may_read: bool,
    may_write: bool,
    /// Bytes came back on the current link.
    received: bool,
    /// The request ended cleanly: the link may serve another.
    reusable: bool,
    /// Start of the current wait (queue, connect, or silence).
    since: Instant,
    /// The connection's key in its engine.
    key: usize,
    request_line: String,
}

impl Exchange {
    /// Takes a connection for the request (`doorbell`: the reactor's, to be
    /// rung when a connection is granted after a wait).
    pub fn start(
        backend: Arc<Backend>,
        req: &Request<'_>,
        records: Vec<u8>,
        upload: Option<Upload>,
        doorbell: Option<&Arc<Doorbell>>,
    ) -> Result<Exchange, u16> {
        let checkout = backend.pool.checkout(doorbell);
        let mut x = Exchange {
            backend,
            stage: Stage::Talking,
            link: None,
            registered: false,
            watched_for_room: false,
            hung_up: false,
            place: None,
            reused: false,
            retried: false,
            records,
            sent: 0,
            upload,
            input: Vec::new(),
            reply: ReplyReader::default(),
            decoder: Decoder::new(ID),
            response: Response::new(req, false),
            may_read: false,
            may_write: false,
            received: false,
            reusable: false,
            since: Instant::now(),
            // Set by [`Exchange::watch`], before any use.
            key: 0,
            request_line: req.request_line.to_string(),
        };
        match checkout {
            Ok(Checkout::Idle(link)) => x.adopt(link),
            Ok(Checkout::Connect(id)) => {
                x.place = Some(id);
                x.open()?;
            }
            Ok(Checkout::Wait(ticket)) => x.stage = Stage::Queued(ticket),
            Err(e) => {
                log!(Level::Error, "FastCGI backend {}: cannot wait for a connection: {e}", x.backend.name);
                return Err(500);
            }
        }
        Ok(x)
    }

    /// Starts talking on a kept-alive connection (reading into its buffer).
    fn adopt(&mut self, link: Link) {
        self.backend.pool.stats.reused.fetch_add(1, Relaxed);
        self.link = Some(link.fd);
        // Left by a request of this reactor, its watch is moved here.
        self.registered = link.home.is_some();
        self.input = link.buf;
        self.reply = ReplyReader::new(self.backend.peek_replies, link.owed);
        self.place = Some(link.id);
        self.reused = true;
        self.stage = Stage::Talking;
        self.may_write = true;
    }

    /// Opens a new connection in the place this exchange holds (given up
    /// when the backend cannot be reached: `502`).
    fn open(&mut self) -> Result<(), u16> {
        self.reused = false;
        self.reply = ReplyReader::new(self.backend.peek_replies, 0);
        self.received = false;
        self.registered = false;
        self.hung_up = false;
        match self.backend.pool.connect() {
            Ok((fd, connected)) => {
                self.link = Some(fd);
                self.stage = if connected { Stage::Talking } else { Stage::Connecting };
                self.may_write = connected;
                Ok(())
            }
            Err(e) => {
                log!(Level::Error, "FastCGI backend {}: cannot connect: {e}", self.backend.name);
                if let Some(id) = self.place.take() {
                    self.backend.pool.release(id);
                }
                self.backend.pool.stats.failed.fetch_add(1, Relaxed);
                Err(502)
            }
        }
    }

    /// Registers the descriptor this exchange waits on as connection
    /// `key`'s backend descriptor.
    pub fn watch(&mut self, key: usize, w: &Worker<'_>) -> io::Result<()> {
        self.key = key;
        self.may_read = false;
        match (&self.stage, &self.link) {
            (Stage::Queued(t), _) => match t.fd() {
                Some(fd) => w.watcher.watch(key, fd),
                None => {
                    // The doorbell is rung for this connection from now;
                    // a grant that came first is taken at once.
                    self.may_read = t.ring_for(key);
                    Ok(())
                }
            },
            (stage, Some(fd)) => {
                let write = matches!(stage, Stage::Connecting);
                let id = self.place_id();
                // What the backend did while the link was idle (php-fpm
                // closes a recycled child's connection) is read at once.
                self.may_read = w.watcher.watch_link(key, id, fd.as_fd(), write, self.registered)?;
                self.registered = true;
                self.watched_for_room = write;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// What a blocking engine waits on: the descriptor [`Exchange::watch`]
    /// registers, in the directions not known to be ready that the stage
    /// needs.
    pub fn wait(&self) -> Option<(std::os::fd::BorrowedFd<'_>, Wait)> {
        let (fd, wait) = match (&self.stage, &self.link) {
            (Stage::Queued(t), _) => (t.fd()?, Wait { read: !self.may_read, write: false }),
            (Stage::Connecting, Some(fd)) => (fd.as_fd(), Wait { read: false, write: !self.may_write }),
            (Stage::Talking, Some(fd)) => {
                (fd.as_fd(), Wait { read: !self.may_read, write: !self.may_write && self.writing() })
            }
            _ => return None,
        };
        wait.any().then_some((fd, wait))
    }

    pub fn on_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        self.may_read |= readable || closed;
        self.may_write |= writable;
        // The backend shut its side down, maybe with the reply's last
        // bytes (php-fpm recycling a child): the link is not kept, as the
        // next request on it would hear of the shutdown no more.
        self.hung_up |= closed;
    }

    /// Whether [`Exchange::pump`] has something to do.
    pub fn ready(&self) -> bool {
        match self.stage {
            Stage::Queued(_) => self.may_read,
            Stage::Connecting => self.may_write,
            Stage::Talking => self.may_read || (self.may_write && self.writing()),
            Stage::Ended => false,
        }
    }

    /// Moves the exchange on: takes a granted connection, completes a
    /// connect, writes the records, relays the reply into `out`.
    pub fn pump(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        let pump = self.step(out, params, chunk, w);
        if let Pump::Fail(502) = pump {
            self.backend.pool.stats.failed.fetch_add(1, Relaxed);
        }
        pump
    }

    fn step(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        match &self.stage {
            Stage::Queued(ticket) => {
                let Some(grant) = ticket.take() else {
                    self.may_read = false;
                    return Pump::Wait;
                };
                // The ticket (and any eventfd, and so its watch) ends here.
                self.stage = Stage::Talking;
                match grant {
                    Grant::Idle(link) => self.adopt(link),
                    Grant::Permit(id) => {
                        self.place = Some(id);
                        if let Err(status) = self.open() {
                            return Pump::Fail(status);
                        }
                    }
                }
                self.since = w.now;
                self.rewatch(w)
            }
            Stage::Connecting => {
                if !self.may_write {
                    return Pump::Wait;
                }
                let fd = self.link.as_ref().expect("connecting without a socket");
                match socket2::SockRef::from(fd).take_error() {
                    Ok(None) => {
                        self.stage = Stage::Talking;
                        self.since = w.now;
                        Pump::Progress
                    }
                    Ok(Some(e)) | Err(e) => {
                        log!(Level::Error, "FastCGI backend {}: cannot connect: {e}", self.backend.name);
                        Pump::Fail(502)
                    }
                }
            }
            Stage::Talking => self.talk(out, params, chunk, w),
            Stage::Ended => Pump::Wait,
        }
    }

    /// Watches the (new) link in place of what was watched before.
    fn rewatch(&mut self, w: &Worker<'_>) -> Pump {
        match self.watch(self.key, w) {
            Ok(()) => {
                // Readiness is reported on registration; until then,
                // assume a connected socket takes the request.
                self.may_write = matches!(self.stage, Stage::Talking);
                Pump::Progress
            }
            Err(e) => {
                log!(Level::Error, "cannot watch a FastCGI connection: {e}");
                Pump::Fail(502)
            }
        }
    }

    fn talk(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        let fd = self.link.as_ref().expect("talking without a socket");
        if self.may_write && self.writing() {
            let pending = match &mut self.upload {
                Some(up) if self.sent == self.records.len() => match up.pending() {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        log!(Level::Error, "cannot read a spooled request body: {e}");
                        return Pump::Fail(500);
                    }
                },
                _ => &self.records[self.sent..],
            };
            match rustix::net::send(fd, pending, rustix::net::SendFlags::NOSIGNAL) {
                Ok(n) => {
                    match &mut self.upload {
                        Some(up) if self.sent == self.records.len() => up.sent += n,
                        _ => self.sent += n,
                    }
                    // The request woke the backend: the last reply's bytes
                    // are read now without waking it again.
                    if !self.writing() {
                        if let Err(e) = self.reply.pay(fd, &mut self.input) {
                            return self.broken(w, &e);
                        }
                    }
                }
                Err(rustix::io::Errno::AGAIN) => {
                    self.may_write = false;
                    if !self.watched_for_room {
                        // Told when there is room again from now on.
                        let id = self.place_id();
                        if let Err(e) = w.watcher.watch_link(self.key, id, fd.as_fd(), true, true) {
                            log!(Level::Error, "cannot watch a FastCGI connection: {e}");
                            return Pump::Fail(502);
                        }
                        self.watched_for_room = true;
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return self.broken(w, &io::Error::from(e)),
            }
            return Pump::Progress;
        }
        if !self.may_read {
            return Pump::Wait;
        }
        if self.input.capacity() == 0 {
            self.input.reserve(chunk);
        }
        let spare = self.input.capacity() - self.input.len();
        match self.reply.read(fd, &mut self.input) {
            Ok(0) => return self.broken(w, &io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                self.received = true;
                self.since = w.now;
                if n < spare {
                    self.may_read = false;
                }
            }
            Err(e) if sys::would_block(&e) => {
                self.may_read = false;
                return Pump::Wait;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Pump::Progress,
            Err(e) => return self.broken(w, &e),
        }
        let mut pos = 0;
        loop {
            let (n, event) = match self.decoder.decode(&self.input[pos..]) {
                Ok(decoded) => decoded,
                Err(v) => {
                    log!(
                        Level::Warn,
                        "FastCGI backend {}: {} (answering {:?})",
                        self.backend.name,
                        v.0,
                        self.request_line
                    );
                    self.stage = Stage::Ended;
                    return if self.response.head_sent() { self.response.abandon() } else { Pump::Fail(502) };
                }
            };
            pos += n;
            match event {
                None => break,
                Some(Event::Stdout(data)) => match self.response.feed(out, params, data) {
                    Pump::Progress => {}
                    other => {
                        self.stage = Stage::Ended;
                        return other;
                    }
                },
                Some(Event::Stderr(text)) => log!(
                    Level::Warn,
                    "FastCGI backend {} stderr for {:?}: {}",
                    self.backend.name,
                    self.request_line,
                    String::from_utf8_lossy(text).trim_end()
                ),
                Some(Event::End { protocol_status, .. }) => {
                    self.stage = Stage::Ended;
                    self.reusable =
                        self.backend.keep_conn && protocol_status == REQUEST_COMPLETE && pos == self.input.len();
                    self.input.clear();
                    return self.response.end(out);
                }
            }
        }
        self.input.drain(..pos);
        // The reply goes on: what was peeked is read now.
        if let Err(e) = self.reply.pay(fd, &mut self.input) {
            return self.broken(w, &e);
        }
        Pump::Progress
    }

    /// The link failed before `END_REQUEST`. A kept-alive link that gave
    /// nothing back was most likely closed by the backend between requests
    /// (php-fpm recycling a child): the request goes once more, on a fresh
    /// connection. Otherwise `502`, or a cut response when its head is out.
    fn broken(&mut self, w: &Worker<'_>, err: &io::Error) -> Pump {
        self.link = None;
        self.registered = false;
        if self.reused && !self.received && !self.retried {
            self.retried = true;
            self.backend.pool.stats.retried.fetch_add(1, Relaxed);
            self.sent = 0;
            if let Some(up) = &mut self.upload {
                up.rewind();
            }
            self.input.clear();
            self.decoder = Decoder::new(ID);
            if let Err(status) = self.open() {
                return Pump::Fail(status);
            }
            self.since = w.now;
            return self.rewatch(w);
        }
        log!(
            Level::Warn,
            "FastCGI backend {}: connection lost answering {:?}: {err}",
            self.backend.name,
            self.request_line
        );
        self.stage = Stage::Ended;
        if self.response.head_sent() {
            return self.response.abandon();
        }
        Pump::Fail(502)
    }

    /// The id of the place a link is held in (there is no link without one).
    fn place_id(&self) -> usize {
        self.place.expect("a link without its place")
    }

    /// Whether request bytes remain to be written.
    fn writing(&self) -> bool {
        self.sent < self.records.len() || self.upload.as_ref().is_some_and(|up| !up.done())
    }

    /// The status to answer when the current wait has lasted too long:
    /// `503` in the queue, `502` connecting, `504` for a silent backend
    /// (not while the reply waits for a slow client: `client_blocked`).
    pub fn expired(&mut self, now: Instant, client_blocked: bool) -> Option<u16> {
        if client_blocked && matches!(self.stage, Stage::Talking) {
            self.since = now;
            return None;
        }
        let b = &self.backend;
        let waited = now.saturating_duration_since(self.since);
        let (limit, status): (Duration, u16) = match self.stage {
            Stage::Queued(_) => (b.queue_timeout, 503),
            Stage::Connecting => (b.connect_timeout, 502),
            Stage::Talking => (b.read_timeout, 504),
            Stage::Ended => return None,
        };
        if waited <= limit {
            return None;
        }
        let counter = match status {
            503 => &b.pool.stats.queue_timeouts,
            502 => &b.pool.stats.failed,
            _ => &b.pool.stats.timeouts,
        };
        counter.fetch_add(1, Relaxed);
        log!(Level::Warn, "FastCGI backend {}: {status} after {limit:?} answering {:?}", b.name, self.request_line);
        Some(status)
    }

    /// Ends the exchange: a link that finished its request cleanly goes
    /// back to the pool (unless `close`); anything else is closed, which
    /// also tells the backend to abandon the request. A link that stays on
    /// this reactor (idle, or to a request waiting here) stays in its epoll
    /// set, watched for nobody until another request takes it.
    pub fn end(&mut self, w: &Worker<'_>, close: bool) {
        if close || !self.reusable || self.hung_up {
            return;
        }
        let Some(fd) = self.link.take() else { return };
        let id = self.place.take().expect("a link without its place");
        let buf = std::mem::take(&mut self.input);
        let pool = &self.backend.pool;
        // Kept in the set only as it is between requests: read-only.
        let home = w.watcher.doorbell().filter(|_| self.registered && !self.watched_for_room).cloned();
        if home.is_some() {
            w.watcher.leave_link(id);
        } else if self.registered {
            let _ = w.watcher.unwatch(fd.as_fd());
        }
        let owed = self.reply.owed();
        if let Some(link) = pool.give_back(Link { id, fd, buf, home, owed, tls: None }) {
            let _ = w.watcher.unwatch(link.fd.as_fd());
            pool.put_back(Link { home: None, ..link });
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if let Stage::Queued(ticket) = &self.stage {
            self.backend.pool.cancel(ticket);
        }
        // Closing the socket ends its watch too.
        self.link = None;
        if let Some(id) = self.place {
            self.backend.pool.release(id);
        }
    }
}
