//! Relaying a backend (phase `Backend`): the CGI program or FastCGI
//! exchange the site started for a request, driven through the one
//! interface `site/backend.rs`'s `Job` offers — its output pumped into the
//! output queue as the response, its failure answered (`502`, `504`) while
//! no head is out, a local redirect answered in its place, its deadline
//! enforced, and the job ended (or abandoned) and logged.
//!
//! It never reads the client's socket, and it never knows which kind of
//! backend runs: that is the job's.

use tern_http::request::{parse_head, Head, Request, Version, MAX_HEADERS};
use tern_http::Method;

use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::reply::{Params, Reply};
use crate::shared::Shared;
use crate::site::backend::Job;
use crate::site::cgi::Pump;
use crate::spool::Spool;
use crate::worker::Worker;

use super::answer::Answered;
use super::backend::Backend;
use super::state::{Clock, Conn, Phase, Status};
use super::transport::Fill;

/// Who answers a backend's request: the location's dressing and the site.
pub(super) type Answerer = (Option<std::sync::Arc<crate::reply::Dressing>>, Option<u32>);

/// Local redirects (RFC 3875 §6.2.2) followed for one request.
const MAX_LOCAL_REDIRECTS: u8 = 10;

impl Backend {
    /// How the answer to this backend's request is framed on a connection
    /// with header lines `fields`.
    fn params<'a>(&'a self, w: &'a Worker<'_>, fields: &'a [u8], keep_alive: bool) -> Params<'a> {
        Params {
            date: w.date.http(),
            server: &w.config.server_header,
            fields,
            head_only: self.head_only,
            http10: self.http10,
            keep_alive,
            stream: self.stream,
            dressing: self.dressing.as_ref(),
        }
    }

    /// Moves the job on, queueing its response into `out` (the
    /// connection's queue, or its stream's); a CGI program that closed its
    /// output has its exit watched as connection `key`'s.
    pub(super) fn pump(
        &mut self,
        w: &Worker<'_>,
        key: usize,
        out: &mut OutQueue,
        fields: &[u8],
        keep_alive: bool,
    ) -> Pump {
        // The job apart from what shapes its head, borrowed side by side.
        let Backend { job, head_only, http10, stream, dressing, .. } = self;
        let params = Params {
            date: w.date.http(),
            server: &w.config.server_header,
            fields,
            head_only: *head_only,
            http10: *http10,
            keep_alive,
            stream: *stream,
            dressing: dressing.as_ref(),
        };
        let pump = job.pump(out, &params, w.config.pipe_buffer, w);
        if let Pump::AwaitExit = pump {
            if let Some(fd) = job.exit_fd() {
                if let Err(err) = w.watcher.watch(key, fd) {
                    log!(Level::Error, "cannot watch a CGI program's exit: {err}");
                }
            }
        }
        pump
    }

    /// Ends the job (`abandon`: kill the program, close the FastCGI
    /// connection), off the worker's count of running jobs.
    pub(super) fn end(&mut self, w: &mut Worker<'_>, abandon: bool) {
        // Saturating: a connection may end on another thread than the
        // one it started on (the count only steers busy polling).
        w.backend_jobs = w.backend_jobs.saturating_sub(1);
        self.job.end(w, abandon);
    }

    /// Queues the error page of `status` into `out` in place of whatever
    /// was queued of the response; returns its body's length.
    pub(super) fn error_page(
        &self,
        w: &Worker<'_>,
        out: &mut OutQueue,
        fields: &[u8],
        keep_alive: bool,
        status: u16,
    ) -> u64 {
        out.clear();
        let params = self.params(w, fields, keep_alive);
        let mut reply = Reply::with(out, &params);
        reply.error(status);
        reply.finish();
        reply.body_len
    }
}

impl Conn {
    /// Takes on `job`, started by the site for `req`: its descriptor
    /// watched as this connection's, counted; `stream`: answered on an
    /// HTTP/2 stream.
    pub(super) fn take_job(
        &self,
        w: &mut Worker<'_>,
        req: &Request<'_>,
        mut job: Job,
        answerer: Answerer,
        stream: bool,
    ) -> Box<Backend> {
        if let Err(err) = job.watch(self.key, w) {
            log!(Level::Error, "cannot watch a backend's descriptor: {err}");
        }
        let owned = |v: Option<&[u8]>| v.map(<[u8]>::to_vec);
        w.backend_jobs += 1;
        Box::new(Backend {
            job,
            request_line: req.request_line.to_string(),
            referer: owned(req.fields.referer),
            user_agent: owned(req.fields.user_agent),
            host: req.host.unwrap_or("localhost").to_string(),
            head_only: req.method == Method::Head,
            http10: req.version == Version::Http10,
            stream,
            dressing: answerer.0,
            site: answerer.1,
        })
    }

    /// Hands the rest of the answer to a started backend.
    pub(super) fn start_backend(&mut self, w: &mut Worker<'_>, req: &Request<'_>, job: Job, answerer: Answerer) {
        w.stats.requests.incr();
        self.backend = Some(self.take_job(w, req, job, answerer, false));
        self.phase = Phase::Backend;
        self.set_clock(Clock::Backend, w);
    }

    /// Relays the backend's output into the output queue. Returns a status
    /// to return, or `None` to keep driving.
    pub(super) fn pump(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Option<Status> {
        let b = self.backend.as_mut().expect("backend phase without a backend");
        match b.pump(w, self.key, &mut self.out, self.io.fields(), self.keep_alive) {
            Pump::Wait | Pump::Progress => None,
            Pump::AwaitExit => {
                // A program that closed its output has a moment to exit.
                self.set_clock(Clock::Exit, w);
                None
            }
            Pump::Done { keep_alive } => {
                self.keep_alive &= keep_alive;
                let b = self.end_backend(w, false);
                self.log_done(w, &b);
                self.phase = Phase::Send;
                self.set_clock(Clock::Send, w);
                None
            }
            Pump::Fail(status) => {
                let b = self.end_backend(w, true);
                self.backend_error(w, &b, status);
                None
            }
            Pump::Redirect(location) => {
                let b = self.end_backend(w, true);
                self.local_redirect(shared, w, &b, &location);
                None
            }
        }
    }

    /// In a tunnel, moves what the client sent up to the server (bytes read
    /// before the switch first). `Some(true)`: progress, look again;
    /// `Some(false)`: nothing to do now; `None`: close.
    pub(super) fn tunnel_up(&mut self, w: &mut Worker<'_>) -> Option<bool> {
        let Some(b) = self.backend.as_mut() else { return Some(false) };
        let Some(x) = b.job.tunnel() else { return Some(false) };
        if self.rpos < self.rbuf.len() {
            if !x.can_upload() {
                return Some(false);
            }
            return match x.upload(&self.rbuf[self.rpos..], w) {
                Ok(0) => Some(false),
                Ok(n) => {
                    self.rpos += n;
                    Some(true)
                }
                Err(_) => None,
            };
        }
        if self.io.peer_closed {
            x.client_closed();
            return Some(false);
        }
        match self.fill(w) {
            Fill::Got => Some(true),
            Fill::Wait => Some(false),
            Fill::Eof => {
                if let Some(x) = self.backend.as_mut().and_then(|b| b.job.tunnel()) {
                    x.client_closed();
                }
                Some(false)
            }
            Fill::Failed => None,
        }
    }

    /// Detaches the backend and ends its job ([`Backend::end`]).
    fn end_backend(&mut self, w: &mut Worker<'_>, abandon: bool) -> Box<Backend> {
        let mut b = self.backend.take().expect("a backend to end");
        b.end(w, abandon);
        b
    }

    /// Abandons the backend (timeout, client gone).
    pub(super) fn abort_backend(&mut self, w: &mut Worker<'_>) {
        if self.backend.is_some() {
            self.end_backend(w, true);
        }
    }

    /// Answers `status` for a backend that failed before its head was sent.
    fn backend_error(&mut self, w: &mut Worker<'_>, b: &Backend, status: u16) {
        let body_len = b.error_page(w, &mut self.out, self.io.fields(), self.keep_alive, status);
        self.log_backend(w, b, status, body_len);
        self.phase = Phase::Send;
        self.set_clock(Clock::Send, w);
    }

    /// Logs the response a backend completed.
    pub(super) fn log_done(&mut self, w: &mut Worker<'_>, b: &Backend) {
        let r = b.job.response();
        self.log_backend(w, b, r.status, r.body_bytes);
    }

    pub(super) fn log_backend(&mut self, w: &mut Worker<'_>, b: &Backend, status: u16, bytes: u64) {
        let (referer, user_agent) = (b.referer.as_deref(), b.user_agent.as_deref());
        let line = b.request_line.as_bytes();
        self.log_answer(w, Answered { site: b.site, line, status, bytes, referer, user_agent });
    }

    /// Answers `GET location` in place of the program's response.
    fn local_redirect(&mut self, shared: &Shared, w: &mut Worker<'_>, b: &Backend, location: &[u8]) {
        if !may_redirect(&mut self.redirects, self.peers.peer) {
            return self.backend_error(w, b, 500);
        }
        let mut raw = Vec::with_capacity(location.len() + b.host.len() + 64);
        raw.extend_from_slice(b"GET ");
        raw.extend_from_slice(location);
        raw.extend_from_slice(if b.http10 { b" HTTP/1.0\r\nHost: " } else { b" HTTP/1.1\r\nHost: " });
        raw.extend_from_slice(b.host.as_bytes());
        raw.extend_from_slice(match (self.keep_alive, b.http10) {
            (false, _) => b"\r\nConnection: close\r\n\r\n".as_slice(),
            (true, true) => b"\r\nConnection: keep-alive\r\n\r\n",
            (true, false) => b"\r\n\r\n",
        });
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match parse_head(&raw, &shared.http_limits, &mut fields) {
            Ok(Head::Complete(req)) => {
                self.spool = Spool::default();
                self.answer(shared, w, &req, &raw, true);
            }
            _ => self.backend_error(w, b, 502),
        }
    }

    /// A backend past its deadline is abandoned: `504` (or what the job
    /// says), or a closed connection when part of its response is out.
    pub(super) fn backend_tick(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        let client_blocked = !self.out.is_empty();
        let Some(b) = self.backend.as_mut() else { return Status::Open };
        let Some(status) = b.job.expired(w.now, client_blocked, w) else {
            // A job its deadline moved on (a proxy that tries another
            // server) may have work now, with no readiness to come for it.
            return if b.job.ready() { self.drive(shared, w) } else { Status::Open };
        };
        let b = self.end_backend(w, true);
        if b.job.response().head_sent() {
            // Part of the response is out: only closing can say it is
            // incomplete.
            return Status::Closed;
        }
        self.keep_alive = false;
        self.backend_error(w, &b, status);
        self.drive(shared, w)
    }
}

/// Counts a local redirect in `count` (those followed for the request, by
/// `peer`); whether it may be followed (else `500`).
pub(super) fn may_redirect(count: &mut u8, peer: std::net::SocketAddr) -> bool {
    *count += 1;
    if *count > MAX_LOCAL_REDIRECTS {
        log!(Level::Warn, "{peer}: more than {MAX_LOCAL_REDIRECTS} local redirects");
        return false;
    }
    true
}
