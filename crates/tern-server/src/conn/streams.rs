//! HTTP/2 on a connection (phase `Session`): starting the session, running
//! it between the transport and the output queue, and answering each
//! stream's request through the one exchange every request takes
//! (`answer.rs`).
//!
//! A stream's request is rendered as the HTTP/1.1 head it stands for
//! (RFC 9113 §8.3.1: `:authority` for `Host`, its body's length as
//! `Content-Length`) and parsed by the same parser, so the same limits,
//! host rules and site routing apply; the site builds its answer with the
//! same `Reply` into the stream's own queue, whose head is then taken off
//! as HTTP/2 fields (without HTTP/1.1's connection fields) and whose body
//! is framed into `DATA` by the session (`h2.rs`). The handlers never
//! know the protocol.
//!
//! A stream whose file is being opened in the I/O pool waits for it as a
//! request does (its ticket's signal watched as the connection's second
//! descriptor), while the others go on; so does a stream a backend (CGI,
//! FastCGI, proxy) answers, relayed by `stream_relay.rs`. Not over
//! HTTP/2: tunnels (WebSocket through the proxy) — RFC 8441's extended
//! `CONNECT` is not offered, and the crate refuses `Upgrade`.

use bytes::Bytes;
use tern_http::request::{parse_head, Head, Request, MAX_HEADERS};
use tern_http::response::{header, header_u64};

use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::offload::Done;
use crate::reply::Reply;
use crate::shared::Shared;
use crate::site::Answer;
use crate::sys;
use crate::worker::Worker;

use super::answer::{exchange, via, Answered};
use super::h2::{Body, Lent, Session, Stream, CONNECTION_FIELDS, PREFACE};
use super::h2c_upgrade::{upgrade_frame, SWITCHING};
use super::send::{Sent, MAX_GATHERED};
use super::state::{Clock, Conn, Phase, Status};
use super::transport::Fill;

/// Bytes a stream's queue holds from the start: most response heads.
const HEAD_ROOM: usize = 512;

/// Most response fields a head may have to be framed.
const MAX_RESPONSE_FIELDS: usize = 128;

impl Conn {
    /// Speaks HTTP/2 from now on: ALPN chose it, or a plain connection
    /// opened with the preface (which the session reads itself).
    pub(super) fn start_session(&mut self, w: &Worker<'_>) {
        w.stats.h2_connections.incr();
        self.h2 = Some(Box::new(Session::new(&w.config.http2)));
        self.phase = Phase::Session;
    }

    /// Answers an HTTP/1.1 request asking for `Upgrade: h2c` with `101` and
    /// goes on in HTTP/2, the request as stream 1 (`h2c_upgrade.rs`), when
    /// `http2.upgrade` is on and the address speaks h2c; whether it did.
    pub(super) fn upgrade_to_h2c(&mut self, w: &mut Worker<'_>, req: &Request<'_>) -> bool {
        if !(w.config.http2.upgrade && self.h2c && self.io.tls.is_none()) || w.closing() {
            return false;
        }
        let Some(frame) = upgrade_frame(req) else { return false };
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        self.out.buf.extend_from_slice(SWITCHING);
        self.out.commit_buf();
        w.stats.h2_connections.incr();
        self.h2 = Some(Box::new(Session::upgraded(&w.config.http2, frame)));
        self.phase = Phase::Session;
        true
    }

    /// Whether the connection speaks HTTP/2: ALPN chose it, or (on a plain
    /// address that speaks h2c) its first bytes are the preface.
    pub(super) fn chose_h2(&self) -> bool {
        match &self.io.tls {
            Some(tls) => tls.chose_h2(),
            None => self.h2c && self.rbuf.starts_with(PREFACE),
        }
    }

    /// Whether what arrived so far is the start of the preface, on an
    /// address that speaks h2c: it is not parsed as HTTP/1.1 (its first
    /// line and an empty one would make a request) until the rest arrives.
    pub(super) fn preface_pending(&self) -> bool {
        self.h2c && self.io.tls.is_none() && PREFACE.starts_with(&self.rbuf)
    }

    /// Runs the session until it must wait for its socket, or ends.
    pub(super) fn drive_session(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        let Some(mut session) = self.h2.take() else { return Status::Closed };
        let status = self.run_session(&mut session, shared, w);
        self.h2 = Some(session);
        status
    }

    fn run_session(&mut self, session: &mut Session, shared: &Shared, w: &mut Worker<'_>) -> Status {
        let config = w.config;
        let st = &config.static_files;
        // A stream's queue copies file regions into frames: no pool; room
        // for a head from the start, not grown to it field by field.
        let out = || {
            let mut q = OutQueue::new(st.read_chunk.usize(), st.sendfile_max_chunk.0, false);
            q.buf.reserve(HEAD_ROOM);
            q
        };
        let lent = Lent {
            max_body: config.limits.max_body_bytes.0,
            body_window: config.limits.body_buffer.usize(),
            out: &out,
        };
        let mut eof = false;
        let keepalive_requests = config.limits.keepalive_requests;
        loop {
            // The server stops, or the connection served its share.
            let served = keepalive_requests != 0 && self.requests >= keepalive_requests;
            if (w.closing() || served) && session.go_away() {
                w.stats.h2_goaways[goaway_reason(Some(h2::Reason::NO_ERROR))].incr();
            }
            if self.rpos < self.rbuf.len() {
                session.feed(&self.rbuf[self.rpos..]);
                self.rpos = self.rbuf.len();
            }
            if self.out.buf.capacity() == 0 {
                self.out.adopt(w.pool.take());
            }
            self.resume_streams(shared, w, session);
            let failed = loop {
                let relayed = self.relay_streams(w, session);
                let room = MAX_GATHERED.saturating_sub(self.out.queued()) as usize;
                let run = session.run(&lent, room);
                for (counter, n) in w.stats.h2_resets.iter().zip(session.take_resets()) {
                    counter.add(n);
                }
                self.end_abandoned(w, session);
                session.drain(&mut self.out.buf);
                self.out.commit_buf();
                match (run, session.next_ready()) {
                    (Err(e), _) => break Some(e),
                    // Every stream ready is answered before the session
                    // runs again: it then frames all their heads at once.
                    (Ok(()), Some(_)) => {
                        while let Some(i) = session.next_ready() {
                            self.answer_stream(shared, w, session, i);
                        }
                    }
                    // Their bytes sent, the jobs may have more room.
                    (Ok(()), None) if relayed => {}
                    (Ok(()), None) => break None,
                }
            };
            if let Some(e) = failed {
                log!(Level::Debug, "{}: HTTP/2 connection ended: {e}", self.peers.peer);
                w.stats.h2_errors.incr();
                if e.is_go_away() && !e.is_remote() {
                    w.stats.h2_goaways[goaway_reason(e.reason())].incr();
                }
            }
            // Idle between streams (`timeouts.keepalive`); waiting for
            // backends alone, their own deadlines (`stream_relay.rs`);
            // else data must move at `timeouts.send_min_rate` either way —
            // a client that never opens its window is a slow reader.
            let clock = match (session.idle(), session.awaits_backends()) {
                _ if !self.out.is_empty() => Clock::Send,
                (true, _) => Clock::Idle,
                (false, true) => Clock::Backend,
                (false, false) => Clock::Send,
            };
            if self.timer.clock != clock {
                self.set_clock(clock, w);
            }
            if !self.out.is_empty() {
                match self.flush(shared, w) {
                    // More of the streams' bodies may fit now.
                    Sent::All => {
                        self.records.write(w);
                        continue;
                    }
                    Sent::Wait => {}
                    Sent::Failed => return Status::Closed,
                }
            }
            if !self.out.is_empty() && (session.ended() || eof) {
                return Status::Open;
            }
            if eof {
                return Status::Closed;
            }
            if session.ended() {
                // Its last frames are sent: a frame of the client's
                // crossing them (after its own `GOAWAY`, say) must not
                // reset the connection before it read them.
                self.records.write(w);
                self.io.close_tls();
                return self.shut_and_linger(w);
            }
            if self.out.queued() >= MAX_GATHERED {
                // Nothing more is read while the client does not read what
                // it was sent: each PING, SETTINGS or request it could
                // send asks for more output (a client that never reads is
                // then cut at `timeouts.send_min_rate`).
                return Status::Open;
            }
            match self.fill(w) {
                Fill::Got => {}
                Fill::Wait => {
                    self.idle_buffers(w);
                    return Status::Open;
                }
                Fill::Eof => {
                    session.feed_eof();
                    eof = true;
                }
                Fill::Failed => return Status::Closed,
            }
        }
    }

    /// Answers the streams whose files the I/O pool has opened.
    fn resume_streams(&mut self, shared: &Shared, w: &mut Worker<'_>, session: &mut Session) {
        let done: Vec<(usize, Done)> = session.opening().filter_map(|(i, t)| Some((i, t.take()?))).collect();
        for (i, done) in done {
            if let Some(ticket) = &session.streams[i].opening {
                let _ = w.watcher.unwatch(ticket.fd());
            }
            if session.opened(i) {
                if let Done::Opened(found) = done {
                    w.resolved = Some(found);
                }
                self.answer_stream(shared, w, session, i);
            }
        }
    }

    /// Stops watching the tickets of streams waiting for the I/O pool (the
    /// connection ends; the pool finishes their tasks for nobody), and
    /// abandons the streams' backends.
    pub(super) fn forget_streams(&mut self, w: &mut Worker<'_>) {
        let Some(mut session) = self.h2.take() else { return };
        for (_, ticket) in session.opening() {
            let _ = w.watcher.unwatch(ticket.fd());
        }
        for s in &mut session.streams {
            if let Some(mut b) = s.backend.take() {
                b.end(w, true);
            }
        }
    }

    /// Answers stream `i`'s complete request through the exchange, and
    /// hands the answer to the session — unless it waits for the I/O pool
    /// to open its file, when it is answered again with what was opened.
    fn answer_stream(&mut self, shared: &Shared, w: &mut Worker<'_>, session: &mut Session, i: usize) {
        let s = &mut session.streams[i];
        let (head, line) = render(s);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let parsed = parse_head(&head, &shared.http_limits, &mut fields);
        let (mut referer, mut user_agent) = (None, None);
        let (status, bytes, site) = match parsed {
            Ok(Head::Complete(mut req)) if s.body != Body::Unstored => {
                // The line as the client's protocol says it: the access log,
                // and a gateway's `SERVER_PROTOCOL`, read `HTTP/2.0`.
                req.request_line = &line;
                (referer, user_agent) = (req.fields.referer, req.fields.user_agent);
                loop {
                    let via = via(&self.peers, &self.io, self.redirect);
                    let done = exchange(shared, w, &req, &mut s.out, &mut s.spool, via, true);
                    w.resolved = None;
                    match done.answer {
                        Answer::Done => break (done.status, done.bytes, done.site),
                        Answer::Waiting(ticket) => match w.watcher.watch(self.key, ticket.fd()) {
                            Ok(()) => {
                                s.opening = Some(ticket);
                                return;
                            }
                            Err(err) => {
                                // Cannot be told: wait here instead.
                                log!(Level::Error, "cannot watch the I/O pool's signal: {err}");
                                let _ = sys::wait_readable(ticket.fd());
                                if let Some(Done::Opened(found)) = ticket.take() {
                                    w.resolved = Some(found);
                                }
                            }
                        },
                        Answer::Backend(job) => {
                            // Answered as it comes (`stream_relay.rs`).
                            s.backend = Some(self.take_job(w, &req, job, (done.dressing, done.site), true));
                            self.count_stream(w);
                            return;
                        }
                    }
                }
            }
            Ok(Head::Complete(_)) => (stream_error(s, w, self.io.fields(), 500), 0, None),
            Ok(Head::Partial { .. }) => (stream_error(s, w, self.io.fields(), 400), 0, None),
            Err(err) => (stream_error(s, w, self.io.fields(), err.status().unwrap_or(400)), 0, None),
        };
        self.count_stream(w);
        let line = line.as_bytes();
        self.log_answer(w, Answered { site, line, status, bytes, referer, user_agent });
        match framed_head(&mut s.out) {
            Some(head) => session.respond(i, head),
            None => session.reset(i),
        }
    }
}

impl Conn {
    /// Counts a stream's request, as it is answered (or its backend
    /// starts).
    fn count_stream(&mut self, w: &mut Worker<'_>) {
        self.records.start(w);
        self.requests += 1;
        w.stats.requests.incr();
        w.stats.h2_streams.incr();
    }
}

/// Where a `GOAWAY` of `reason` is counted in `metrics::GOAWAY_REASONS`.
fn goaway_reason(reason: Option<h2::Reason>) -> usize {
    match reason {
        Some(h2::Reason::NO_ERROR) => 0,
        Some(h2::Reason::PROTOCOL_ERROR) => 1,
        Some(h2::Reason::FLOW_CONTROL_ERROR) => 2,
        Some(h2::Reason::COMPRESSION_ERROR) => 3,
        Some(h2::Reason::ENHANCE_YOUR_CALM) => 4,
        _ => 5,
    }
}

/// Answers `status` with its error page into stream `s`'s queue
/// (whatever a handler had begun dropped); returns it.
fn stream_error(s: &mut Stream, w: &Worker<'_>, fields: &[u8], status: u16) -> u16 {
    s.out.clear();
    let head_only = s.head.method == http::Method::HEAD;
    let mut reply = Reply::new(&mut s.out, w.date.http(), &w.config.server_header, fields, head_only, false, true);
    reply.error(status);
    reply.finish();
    status
}

/// Stream `s`'s request as the HTTP/1.1 head it stands for, and its
/// request line as HTTP/2 has it (`… HTTP/2.0`).
fn render(s: &Stream) -> (Vec<u8>, String) {
    let h = &s.head;
    let target = h.uri.path_and_query().map_or("/", |p| p.as_str());
    let line = [h.method.as_str(), " ", target, " HTTP/2.0"].concat();
    let mut head = Vec::with_capacity(256);
    for part in [h.method.as_str(), " ", target, " HTTP/1.1\r\n"] {
        head.extend_from_slice(part.as_bytes());
    }
    let authority = h.uri.authority();
    if let Some(a) = authority {
        header(&mut head, "host", a.as_str().as_bytes());
    }
    for (name, value) in &h.headers {
        let skip = (name == http::header::HOST && authority.is_some())
            || name == http::header::CONTENT_LENGTH
            || name == http::header::COOKIE;
        if !skip {
            header(&mut head, name.as_str(), value.as_bytes());
        }
    }
    // Cookies may come split into fields; HTTP/1.1 has one (RFC 9113 §8.2.3).
    let cookies: Vec<&[u8]> = h.headers.get_all(http::header::COOKIE).iter().map(|v| v.as_bytes()).collect();
    if !cookies.is_empty() {
        header(&mut head, "cookie", &cookies.join(&b"; "[..]));
    }
    // The body's length: what arrived, or what was announced of one too
    // large to read (so the exchange refuses it).
    let announced = h.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let length = match s.body {
        Body::TooLarge => Some(announced.unwrap_or(s.received).max(s.received)),
        _ if s.received > 0 => Some(s.received),
        _ => announced.filter(|&n| n == 0),
    };
    if let Some(n) = length {
        header_u64(&mut head, "content-length", n);
    }
    head.extend_from_slice(b"\r\n");
    (head, line)
}

/// The head `Reply` wrote at the front of `out`, taken off it as an
/// HTTP/2 response: its status and fields, but HTTP/1.1's connection
/// fields. `None` when it is not a head (nothing was answered). The head
/// is copied once; each value is a slice of that copy, not a copy of its
/// own (a field a response costs an allocation otherwise).
pub(super) fn framed_head(out: &mut OutQueue) -> Option<http::Response<()>> {
    out.commit_buf();
    let front = out.front();
    let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_FIELDS];
    let mut parsed = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(len)) = parsed.parse(front) else { return None };
    let copy = Bytes::copy_from_slice(&front[..len]);
    let start = front.as_ptr() as usize;
    let mut head = http::Response::new(());
    *head.status_mut() = http::StatusCode::from_u16(parsed.code?).ok()?;
    let map = head.headers_mut();
    map.reserve(parsed.headers.len());
    for f in parsed.headers.iter().filter(|f| !CONNECTION_FIELDS.iter().any(|c| f.name.eq_ignore_ascii_case(c))) {
        let at = f.value.as_ptr() as usize - start;
        let value = http::HeaderValue::from_maybe_shared(copy.slice(at..at + f.value.len())).ok()?;
        map.append(http::HeaderName::from_bytes(f.name.as_bytes()).ok()?, value);
    }
    out.pull(len).ok()?;
    Some(head)
}

/// An interim head (`103 Early Hints` a proxied server sent) at the front
/// of `out`, taken off it as [`framed_head`] takes a head.
pub(super) fn framed_interim(out: &mut OutQueue) -> Option<http::Response<()>> {
    out.commit_buf();
    out.front().starts_with(b"HTTP/1.1 1").then(|| framed_head(out))?
}
