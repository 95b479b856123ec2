//! One request's exchange with a FastCGI backend, driven by readiness like
//! a CGI pipe: wait for a connection, connect, write the records, read the
//! reply. What the application prints on `STDOUT` goes through the CGI
//! response parser as it arrives; `STDERR` goes to the error log;
//! `END_REQUEST` ends the response.

use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
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
use crate::site::upstream::hold::{Advance, Hold, Kept, Untaken};
use crate::sys;
use crate::worker::{Doorbell, Wait, Worker};

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
    /// The connection to the backend (or the wait for one).
    hold: Hold,
    /// `END_REQUEST` arrived (or the exchange failed).
    ended: bool,
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
    /// Bytes came back on the current connection.
    received: bool,
    /// The request ended cleanly: the connection may serve another.
    reusable: bool,
    /// Start of the current wait (queue, connect, or silence).
    since: Instant,
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
        let (hold, kept) = match Hold::take(backend.pool.clone(), doorbell, None) {
            Ok(taken) => taken,
            Err(Untaken::Full(e)) => {
                log!(Level::Error, "FastCGI backend {}: no connection for now: {e}", backend.name);
                return Err(503);
            }
            Err(Untaken::Queue(e)) => {
                log!(Level::Error, "FastCGI backend {}: cannot wait for a connection: {e}", backend.name);
                return Err(500);
            }
            Err(Untaken::Connect(e)) => {
                log!(Level::Error, "FastCGI backend {}: cannot connect: {e}", backend.name);
                backend.pool.stats.failed.fetch_add(1, Relaxed);
                return Err(502);
            }
        };
        let mut x = Exchange {
            backend,
            hold,
            ended: false,
            retried: false,
            records,
            sent: 0,
            upload,
            input: Vec::new(),
            reply: ReplyReader::default(),
            decoder: Decoder::new(ID),
            response: Response::new(req, false),
            received: false,
            reusable: false,
            since: Instant::now(),
            request_line: req.request_line.to_string(),
        };
        x.took(kept);
        Ok(x)
    }

    /// A connection came: a kept-alive one brings its buffer and what is
    /// still owed of its last reply.
    fn took(&mut self, kept: Option<Kept>) {
        self.received = false;
        let owed = match kept {
            Some(k) => {
                self.input = k.buf;
                k.owed
            }
            None => 0,
        };
        self.reply = ReplyReader::new(self.backend.peek_replies, owed);
    }

    /// Registers the descriptor this exchange waits on as connection
    /// `key`'s backend descriptor.
    pub fn watch(&mut self, key: usize, w: &Worker<'_>) -> io::Result<()> {
        self.hold.watch(key, w)
    }

    /// The descriptor [`Exchange::watch`] registers now.
    pub fn watched(&self) -> Option<BorrowedFd<'_>> {
        self.hold.watched()
    }

    /// What a blocking engine waits on: the descriptor [`Exchange::watch`]
    /// registers, in the directions not known to be ready that the
    /// exchange needs.
    pub fn wait(&self) -> Option<(BorrowedFd<'_>, Wait)> {
        self.hold.wait(self.writing())
    }

    pub fn on_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        self.hold.on_ready(readable, writable, closed);
    }

    /// Whether [`Exchange::pump`] has something to do.
    pub fn ready(&self) -> bool {
        let h = &self.hold;
        !self.ended && (h.can_advance() || (h.is_open() && (h.may_read || (h.may_write && self.writing()))))
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
        if self.ended {
            return Pump::Wait;
        }
        if self.hold.is_open() {
            return self.talk(out, params, chunk, w);
        }
        match self.hold.advance(w, None) {
            Ok(Advance::Wait) => Pump::Wait,
            Ok(Advance::Taken(kept)) => {
                self.took(kept);
                self.since = w.now;
                Pump::Progress
            }
            Ok(Advance::Connected) => {
                self.since = w.now;
                Pump::Progress
            }
            Err(e) => {
                log!(Level::Error, "FastCGI backend {}: cannot connect: {e}", self.backend.name);
                self.ended = true;
                Pump::Fail(502)
            }
        }
    }

    fn talk(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        let fd = self.hold.fd().expect("talking without a socket");
        if self.hold.may_write && self.writing() {
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
                    if let Err(e) = self.hold.wait_for_room(w) {
                        log!(Level::Error, "cannot watch a FastCGI connection: {e}");
                        return Pump::Fail(502);
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return self.broken(w, &io::Error::from(e)),
            }
            return Pump::Progress;
        }
        if !self.hold.may_read {
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
                    self.hold.may_read = false;
                }
            }
            Err(e) if sys::would_block(&e) => {
                self.hold.may_read = false;
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
                    self.ended = true;
                    return if self.response.head_sent() { self.response.abandon() } else { Pump::Fail(502) };
                }
            };
            pos += n;
            match event {
                None => break,
                Some(Event::Stdout(data)) => match self.response.feed(out, params, data) {
                    Pump::Progress => {}
                    other => {
                        self.ended = true;
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
                    self.ended = true;
                    self.reusable =
                        self.backend.keep_conn && protocol_status == REQUEST_COMPLETE && pos == self.input.len();
                    self.input.clear();
                    return self.response.end(out);
                }
            }
        }
        self.input.drain(..pos);
        // The reply goes on: what was peeked is read now.
        let fd = self.hold.fd().expect("talking without a socket");
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
        if self.hold.reused && !self.received && !self.retried {
            self.retried = true;
            self.backend.pool.stats.retried.fetch_add(1, Relaxed);
            self.sent = 0;
            if let Some(up) = &mut self.upload {
                up.rewind();
            }
            self.input.clear();
            self.decoder = Decoder::new(ID);
            self.took(None);
            self.since = w.now;
            return match self.hold.reopen(w, None) {
                Ok(()) => Pump::Progress,
                Err(e) => {
                    log!(Level::Error, "FastCGI backend {}: cannot connect: {e}", self.backend.name);
                    self.ended = true;
                    Pump::Fail(502)
                }
            };
        }
        self.hold.close();
        log!(
            Level::Warn,
            "FastCGI backend {}: connection lost answering {:?}: {err}",
            self.backend.name,
            self.request_line
        );
        self.ended = true;
        if self.response.head_sent() {
            return self.response.abandon();
        }
        Pump::Fail(502)
    }

    /// Whether request bytes remain to be written.
    fn writing(&self) -> bool {
        self.sent < self.records.len() || self.upload.as_ref().is_some_and(|up| !up.done())
    }

    /// The status to answer when the current wait has lasted too long:
    /// `503` in the queue, `502` connecting, `504` for a silent backend
    /// (not while the reply waits for a slow client: `client_blocked`).
    pub fn expired(&mut self, now: Instant, client_blocked: bool) -> Option<u16> {
        if self.ended {
            return None;
        }
        if client_blocked && self.hold.is_open() {
            self.since = now;
            return None;
        }
        let b = &self.backend;
        let waited = now.saturating_duration_since(self.since);
        let (limit, status): (Duration, u16) = if self.hold.is_queued() {
            (b.queue_timeout, 503)
        } else if self.hold.is_connecting() {
            (b.connect_timeout, 502)
        } else {
            (b.read_timeout, 504)
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

    /// Ends the exchange: a connection that finished its request cleanly
    /// goes back to the pool (unless `close`); anything else is closed
    /// (when the exchange is dropped), which also tells the backend to
    /// abandon the request.
    pub fn end(&mut self, w: &Worker<'_>, close: bool) {
        if !close && self.reusable {
            let owed = self.reply.owed();
            self.hold.give_back(w, std::mem::take(&mut self.input), owed);
        }
    }
}
