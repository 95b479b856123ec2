//! Reading requests (phases `Head` and `Body`): filling the receive buffer
//! from the transport, parsing the next head in it (with
//! `tern_http::parse_head`), sending `100 Continue`, and reading a request
//! body through its decoder (`request_body.rs`) into the spool before the
//! answer.
//!
//! A request is parsed here and handed to `answer.rs` whole; a refused one
//! (bad head, bad or too large body, truncated at close) gets its error
//! answer from there too. Nothing here answers a request itself or writes
//! the output queue.
//!
//! One refusal is silent: on an address that speaks h2c, a connection whose
//! first line is not HTTP/1.x at all (its version token unparseable) is a
//! client that meant HTTP/2 and sent a broken preface — a connection error
//! (RFC 9113 §3.4), so it is closed unanswered rather than told `400` in a
//! protocol it does not speak. Every other bad head keeps its status.

use tern_http::request::{parse_head, BodyFraming, Error, Head, MAX_HEADERS};

use crate::error_log::{log, Level};
use crate::http2::Protocol;
use crate::shared::Shared;
use crate::spool::Spool;
use crate::worker::Worker;

use super::request_body::{BodyError, BodyReader};
use super::state::{Clock, Conn, Phase, Status};
use super::transport::{Fill, PlainHttp};

impl Conn {
    /// Reads what the transport has into the receive buffer.
    pub(super) fn fill(&mut self, w: &mut Worker<'_>) -> Fill {
        if !self.io.readable() {
            return Fill::Wait;
        }
        if self.rbuf.capacity() == 0 {
            self.rbuf = w.pool.take();
            self.rpos = 0;
        }
        if self.rpos > 0 && (self.rpos == self.rbuf.len() || self.rbuf.len() == self.rbuf.capacity()) {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
        }
        if self.rbuf.len() == self.rbuf.capacity() {
            // A head larger than a pooled buffer: grow to the limit (plus a
            // little, so the parser sees when it is exceeded).
            let limit = w.config.limits.max_header_bytes.usize() + 1024;
            self.rbuf.reserve(limit.saturating_sub(self.rbuf.len()).max(1024));
        }
        match self.io.read(&mut self.rbuf, &mut self.timer.bytes, &mut w.pool, w.stats) {
            Ok(fill) => fill,
            Err(PlainHttp) => {
                self.answer_plain_http(w);
                Fill::Got
            }
        }
    }

    /// Parses and answers buffered requests. `Some(true)`: answered one,
    /// look again; `Some(false)`: incomplete, more bytes needed; `None`:
    /// close now without an answer.
    pub(super) fn parse(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<bool> {
        // Taken out so the request can borrow it while `self` answers.
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let result = match parse_head(&rbuf[self.rpos..], &shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                self.redirects = 0;
                self.records.start(w);
                let max = w.config.limits.max_body_bytes.0;
                match BodyReader::new(req.framing, max) {
                    // Earlier answers still queued go out first, so a
                    // `100 Continue` cannot overtake them.
                    Some(_) if !self.out.is_empty() => return self.restore(rbuf, Some(false)),
                    // The body is read (and its framing checked) before the
                    // answer; one larger than allowed is not read at all.
                    Some(reader) if !matches!(req.framing, BodyFraming::Length(n) if n > max) => {
                        if req.expect_continue && !self.send_continue(w) {
                            return self.restore(rbuf, None);
                        }
                        self.body = Some((reader, req.head_len));
                        self.phase = Phase::Body;
                        self.set_clock(Clock::Body, w);
                    }
                    // Answered in the handle stage (the head stays in place).
                    _ if self.stage.is_some() => self.to_answer = Some(false),
                    _ => {
                        let head = &rbuf[self.rpos..self.rpos + req.head_len];
                        self.rpos += req.head_len;
                        self.answer(shared, w, &req, head, false);
                    }
                }
                Some(true)
            }
            Ok(Head::Partial { .. }) => Some(false),
            Err(err) => {
                log!(Level::Info, "{}: bad request: {}", self.peers.peer, err.reason());
                let line = first_line(&rbuf[self.rpos..]);
                let broken_preface = err == Error::BadVersion && self.opens_h2c(w);
                self.rpos = rbuf.len();
                match err.status().filter(|_| !broken_preface) {
                    Some(status) => {
                        self.answer_error(w, status, line);
                        Some(true)
                    }
                    None => None,
                }
            }
        };
        self.restore(rbuf, result)
    }

    /// Whether the head being parsed is the first bytes of a plain
    /// connection on an address that speaks h2c (where a broken HTTP/2
    /// preface may arrive instead of a request).
    fn opens_h2c(&self, w: &Worker<'_>) -> bool {
        self.requests == 0 && self.rpos == 0 && self.io.tls.is_none() && w.config.http2.speaks(Protocol::H2c)
    }

    /// Puts the receive buffer back after a parse that borrowed it.
    fn restore<T>(&mut self, rbuf: Vec<u8>, result: T) -> T {
        self.rbuf = rbuf;
        result
    }

    /// Sends the interim `100 Continue` (RFC 9110 §10.1.1) at once; the
    /// output queue is empty, so it cannot overtake anything.
    fn send_continue(&mut self, w: &Worker<'_>) -> bool {
        self.io.write_now(b"HTTP/1.1 100 Continue\r\n\r\n", w.stats)
    }

    /// Consumes buffered body bytes; answers the request once the body is
    /// complete. `Some(true)`: progress, look again; `Some(false)`: more
    /// bytes needed; `None`: close now.
    pub(super) fn read_body(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<bool> {
        let Some((reader, head_len)) = self.body.as_mut() else { unreachable!("body phase without a body") };
        let start = self.rpos + *head_len;
        if start == self.rbuf.len() {
            return Some(false);
        }
        let (spool, window) = (&mut self.spool, w.config.limits.body_buffer.usize());
        let mut stored = Ok(());
        let fed = reader.feed(&self.rbuf[start..], |data| {
            if stored.is_ok() {
                stored = spool.push(data, window);
            }
        });
        if let (Ok((_, true)), Ok(())) = (&fed, &stored) {
            stored = self.spool.finish();
        }
        match (fed, stored) {
            (Ok((n, done)), Ok(())) => {
                self.rbuf.drain(start..start + n);
                if !done {
                    return Some(false);
                }
            }
            (fed, stored) => {
                let status = match (fed, stored) {
                    (Err(BodyError::Framing(why)), _) => {
                        log!(Level::Info, "{}: bad request body: {why}", self.peers.peer);
                        400
                    }
                    (Err(BodyError::TooLarge), _) => 413,
                    (_, Err(err)) => {
                        log!(Level::Error, "{}: cannot store a request body: {err}", self.peers.peer);
                        500
                    }
                    (Ok(_), Ok(())) => unreachable!("handled above"),
                };
                self.spool = Spool::default();
                let rbuf = std::mem::take(&mut self.rbuf);
                self.body = None;
                self.answer_error(w, status, first_line(&rbuf[self.rpos..]));
                self.rpos = rbuf.len();
                self.rbuf = rbuf;
                return Some(true);
            }
        }
        self.body = None;
        if self.stage.is_some() {
            // Answered in the handle stage.
            self.to_answer = Some(true);
            return Some(true);
        }
        self.answer_buffered(shared, w, true)
    }

    /// The peer closed while no complete request was buffered.
    pub(super) fn closed_mid_head(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        if self.rpos == self.rbuf.len() {
            return Status::Closed;
        }
        // A request line arrived but not the rest: a truncated request.
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let pending = &rbuf[self.rpos..];
        let truncated =
            matches!(parse_head(pending, &shared.http_limits, &mut fields), Ok(Head::Partial { line_complete: true }));
        if truncated {
            self.answer_error(w, 400, first_line(pending));
        }
        self.rpos = rbuf.len();
        self.rbuf = rbuf;
        if !truncated {
            return Status::Closed;
        }
        self.drive(shared, w)
    }
}

/// What arrived of a request line (for the access log of a refused one).
pub(super) fn first_line(pending: &[u8]) -> &[u8] {
    let end = memchr::memchr2(b'\r', b'\n', pending).unwrap_or(pending.len());
    &pending[..end.min(1024)]
}
