//! Answering a complete request: handing it to the site (or redirecting it
//! to HTTPS, or refusing it), queueing the answer in the output queue,
//! logging it, and deciding what comes next — gathering the next
//! pipelined answer into the same write, sending, relaying a backend the
//! site started, or waiting for the I/O pool to open a file.
//!
//! Every answer the connection gives is logged here (`log_answer`), a
//! backend's too. Nothing here reads or writes the socket.

use tern_http::request::{parse_head, BodyFraming, Head, Request, Version, MAX_HEADERS};
use tern_http::Method;

use std::sync::Arc;

use crate::access_log::Entry;
use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::reply::{Dressing, Reply};
use crate::shared::Shared;
use crate::site::{Answer, Ends, Peers};
use crate::spool::Spool;
use crate::tls;
use crate::worker::Worker;

use super::send::MAX_GATHERED;
use super::state::{Awaited, Clock, Conn, Phase, Status};
use super::transport::Transport;

/// An answer as it is counted and logged.
pub(super) struct Answered<'a> {
    /// The site that answered (`None`: the request was not routed).
    pub(super) site: Option<u32>,
    /// Its request line.
    pub(super) line: &'a [u8],
    pub(super) status: u16,
    pub(super) bytes: u64,
    pub(super) referer: Option<&'a [u8]>,
    pub(super) user_agent: Option<&'a [u8]>,
}

/// What a request is answered through besides the site: the
/// connection's ends, the fields every response on it carries (HSTS), and
/// an address's redirect to HTTPS.
pub(super) struct Via<'a> {
    ends: Ends<'a>,
    fields: &'a [u8],
    redirect: Option<u16>,
}

/// The connection's [`Via`], for an HTTP/1.1 request and an HTTP/2
/// stream alike.
pub(super) fn via<'a>(peers: &'a Peers, io: &'a Transport, redirect: Option<u16>) -> Via<'a> {
    let ends = Ends { peers, sock: &io.sock, sni: io.server_name(), https: io.tls.is_some() };
    Via { ends, fields: io.fields(), redirect }
}

/// How far a request's exchange came: the site's answer, and what its
/// reply noted.
pub(super) struct Exchanged {
    pub(super) answer: Answer,
    pub(super) status: u16,
    pub(super) bytes: u64,
    pub(super) keep_alive: bool,
    pub(super) site: Option<u32>,
    /// The location's dressing, for a backend's head (`None` otherwise).
    pub(super) dressing: Option<Arc<Dressing>>,
}

/// The one exchange of every protocol: hands `req` to the site (or
/// redirects it to HTTPS, or refuses a body larger than allowed), building
/// its answer into `out` — the connection's queue for HTTP/1.1, a
/// stream's own for HTTP/2 — with `spool` as its body.
pub(super) fn exchange(
    shared: &Shared,
    w: &mut Worker<'_>,
    req: &Request<'_>,
    out: &mut OutQueue,
    spool: &mut Spool,
    via: Via<'_>,
    keep_alive: bool,
) -> Exchanged {
    let config = &w.config;
    let too_large = matches!(req.framing, BodyFraming::Length(n) if n > config.limits.max_body_bytes.0);
    let head_only = req.method == Method::Head;
    let http10 = req.version == Version::Http10;
    let mut reply = Reply::new(out, w.date.http(), &config.server_header, via.fields, head_only, http10, keep_alive);
    let answer = if too_large {
        reply.error(413);
        Answer::Done
    } else if let Some(port) = via.redirect {
        let location = tls::https_location(req.host, via.ends.local(), port, req.path, req.query);
        reply.redirect(308, location.as_bytes());
        Answer::Done
    } else {
        shared.site.respond(req, spool, via.ends, &mut reply, w)
    };
    if let Answer::Done = answer {
        reply.finish();
    }
    // Kept only by a backend, which dresses its head later (a shared
    // count not touched on every request).
    let dressing = if let Answer::Backend(_) = answer { reply.dressing.cloned() } else { None };
    Exchanged {
        answer,
        status: reply.status,
        bytes: reply.body_len,
        keep_alive: reply.keep_alive,
        site: reply.site,
        dressing,
    }
}

impl Conn {
    /// Answers the complete request at `rpos`, parsing its head again (it
    /// was kept in place while its body was read, or while it waited for
    /// the handle stage). `Some(true)`: answered; `None`: close now.
    pub(super) fn answer_buffered(&mut self, shared: &Shared, w: &mut Worker<'_>, body_read: bool) -> Option<bool> {
        let rbuf = std::mem::take(&mut self.rbuf);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let answered = match parse_head(&rbuf[self.rpos..], &shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                let head = &rbuf[self.rpos..self.rpos + req.head_len];
                self.rpos += req.head_len;
                self.answer(shared, w, &req, head, body_read);
                Some(true)
            }
            _ => None,
        };
        self.rbuf = rbuf;
        if self.waiting.is_none() {
            // What the site did not take (kept for the request's second
            // answer while a file is opened).
            self.spool = Spool::default();
        }
        answered
    }

    /// Answers a complete request (parsed from `head`), queueing the
    /// response. `body_read`: its body (if any) has been read off the
    /// connection.
    pub(super) fn answer(
        &mut self,
        shared: &Shared,
        w: &mut Worker<'_>,
        req: &Request<'_>,
        head: &[u8],
        body_read: bool,
    ) {
        if self.upgrade_to_h2c(w, req) {
            return;
        }
        let limits = &w.config.limits;
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        self.requests += 1;
        // A body not read by now is not read at all (too large): close
        // after the answer.
        let keep_alive = req.keep_alive
            && !w.closing()
            && (limits.keepalive_requests == 0 || self.requests < limits.keepalive_requests)
            && (body_read || !req.has_body());
        let via = via(&self.peers, &self.io, self.redirect);
        let done = exchange(shared, w, req, &mut self.out, &mut self.spool, via, keep_alive);
        self.keep_alive = done.keep_alive;
        let ticket = match done.answer {
            Answer::Backend(job) => return self.start_backend(w, req, job, (done.dressing, done.site)),
            Answer::Waiting(ticket) => ticket,
            Answer::Done => {
                w.stats.requests.incr();
                self.log_exchanged(w, req, &done);
                return self.after_answer(w);
            }
        };
        // Not answered yet: answered again once the file is open.
        self.requests -= 1;
        let awaited = Awaited::Open { head: head.to_vec(), body_read };
        if let Some(Status::Closed) = self.wait(shared, w, ticket, awaited) {
            self.answer_error(w, 500, req.request_line.as_bytes());
        }
    }

    /// Logs a request the site answered whole.
    pub(super) fn log_exchanged(&mut self, w: &mut Worker<'_>, req: &Request<'_>, done: &Exchanged) {
        let line = req.request_line.as_bytes();
        let (referer, user_agent) = (req.fields.referer, req.fields.user_agent);
        let (site, status, bytes) = (done.site, done.status, done.bytes);
        self.log_answer(w, Answered { site, line, status, bytes, referer, user_agent });
    }

    /// Counts an answer's status (for its site too), logs it to its site's
    /// access log and notes it for its service record.
    pub(super) fn log_answer(&mut self, w: &mut Worker<'_>, a: Answered<'_>) {
        w.stats.status(a.status);
        let config = w.config;
        let (site, log) = match a.site.and_then(|i| config.sites.get(i as usize).map(|s| (i, s))) {
            Some((i, s)) => {
                w.stats.site(i as usize, a.status, a.bytes);
                (&*s.name, s.log)
            }
            None => ("", 0),
        };
        w.logs[log].record(&Entry {
            client: self.peers.peer.ip(),
            time: w.date.clf(),
            request_line: a.line,
            status: a.status,
            bytes: a.bytes,
            referer: a.referer,
            user_agent: a.user_agent,
            site,
            epoch: w.date.second(),
        });
        self.records.answered(w, a.status, a.bytes);
    }

    /// Answers a request that could not be parsed (or timed out) and
    /// closes after it; `line` is what arrived of its request line.
    pub(super) fn answer_error(&mut self, w: &mut Worker<'_>, status: u16, line: &[u8]) {
        let config = &w.config;
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        let fields = self.io.fields();
        let mut reply = Reply::new(&mut self.out, w.date.http(), &config.server_header, fields, false, false, false);
        reply.error(status);
        reply.finish();
        let bytes = reply.body_len;
        // Every answer counts, 408 and a bad body's 400/413 included.
        w.stats.requests.incr();
        self.log_answer(w, Answered { site: None, line, status, bytes, referer: None, user_agent: None });
        self.keep_alive = false;
        self.body = None;
        self.phase = Phase::Send;
        self.set_clock(Clock::Send, w);
    }

    /// Answers plain HTTP sent to an HTTPS address in plain text, as the
    /// client speaks, then closes (the transport has ended the session).
    pub(super) fn answer_plain_http(&mut self, w: &mut Worker<'_>) {
        log!(Level::Info, "{}: plain HTTP sent to an HTTPS address", self.peers.peer);
        if self.out.buf.capacity() == 0 {
            self.out.adopt(w.pool.take());
        }
        self.out.buf.extend_from_slice(tls::PLAIN_HTTP_ANSWER);
        self.out.commit_buf();
        w.stats.requests.incr();
        w.stats.status(400);
        self.keep_alive = false;
        self.phase = Phase::Send;
        self.set_clock(Clock::Send, w);
    }

    /// Decides whether to gather the next pipelined response into the same
    /// write or to start sending.
    fn after_answer(&mut self, w: &mut Worker<'_>) {
        // Not under stages: each answer is handed on to be sent by itself.
        let gather = self.stage.is_none()
            && self.keep_alive
            && self.rpos < self.rbuf.len()
            && self.out.gathers()
            && self.out.queued() < MAX_GATHERED;
        if gather {
            self.phase = Phase::Head;
        } else {
            self.phase = Phase::Send;
            self.set_clock(Clock::Send, w);
        }
    }
}
