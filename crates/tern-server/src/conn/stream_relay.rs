//! Backends over HTTP/2 (phase `Session`): the CGI programs, FastCGI
//! exchanges and proxied requests the site started for streams, relayed
//! each into its own stream's queue while the session goes on.
//!
//! A stream keeps its job ([`Stream::backend`]); every job's descriptor is
//! watched as the connection's second one, as for HTTP/1.1, so a report on
//! it does not say whose it is: each job's descriptor is then asked
//! (`poll(2)`, not waiting). A job is pumped through the same
//! [`Backend::pump`] as HTTP/1.1's (`relay.rs`), with its response framed
//! for a stream (`Framing::Stream`: no chunks); once its head is complete
//! it is handed to the session, and its body follows as `DATA` as it
//! comes, then its trailer fields (a proxied chunked response's) as the
//! stream's last `HEADERS` — a job whose stream has [`MAX_GATHERED`]
//! queued is not pumped until the session has sent some (a fast backend
//! and a slow client buffer no more than that). A failure before the head
//! is its error page on that stream, after it a `RST_STREAM`; a local
//! redirect is answered again on the stream; a stream that is gone
//! (reset, the connection over) abandons its job.
//!
//! Deadlines are each job's own (`Job::expired`, looked at every tick);
//! the connection's clock runs `Backend` while it waits for jobs alone,
//! its send clock otherwise.

use std::os::fd::AsRawFd;

use crate::error_log::{log, Level};
use crate::shared::Shared;
use crate::site::cgi::Pump;
use crate::spool::Spool;
use crate::sys;
use crate::worker::Worker;

use super::backend::Backend;
use super::h2::{Body, Session, Stream};
use super::relay::may_redirect;
use super::send::MAX_GATHERED;
use super::state::{Conn, Status};
use super::streams::{framed_head, framed_interim};

impl Conn {
    /// Pumps every stream's job that has something to do and room in its
    /// stream's queue; whether any moved.
    pub(super) fn relay_streams(&mut self, w: &mut Worker<'_>, session: &mut Session) -> bool {
        let mut moved = false;
        for i in 0..session.streams.len() {
            loop {
                let s = &mut session.streams[i];
                let room = !s.done() && s.out.queued() < MAX_GATHERED;
                let Some(b) = s.backend.as_mut().filter(|b| room && b.job.ready()) else { break };
                let pump = b.pump(w, self.key, &mut s.out, self.io.fields(), true);
                if let Pump::Wait = pump {
                    break;
                }
                moved = true;
                if !self.relayed(w, session, i, pump) {
                    break;
                }
            }
        }
        moved
    }

    /// Acts on what pumping stream `i`'s job came to; whether the job
    /// still runs.
    fn relayed(&mut self, w: &mut Worker<'_>, session: &mut Session, i: usize, pump: Pump) -> bool {
        let s = &mut session.streams[i];
        match pump {
            Pump::Wait | Pump::Progress | Pump::AwaitExit => {}
            Pump::Done { keep_alive: complete } => {
                let mut b = s.backend.take().expect("a stream's backend");
                s.trailers = b.job.take_trailers();
                b.end(w, false);
                self.log_done(w, &b);
                if !complete {
                    // Cut short: only a reset can say so.
                    session.reset(i);
                    return false;
                }
            }
            Pump::Fail(status) => {
                let b = s.backend.take().expect("a stream's backend");
                self.stream_failed(w, session, i, b, status);
                return false;
            }
            Pump::Redirect(location) => {
                let mut b = s.backend.take().expect("a stream's backend");
                b.end(w, true);
                self.redirect_stream(w, session, i, b, &location);
                return false;
            }
        }
        // Interim heads (a proxied server's `103 Early Hints`) go first,
        // each a `HEADERS` frame of its own.
        while !session.streams[i].answered() {
            let Some(head) = framed_interim(&mut session.streams[i].out) else { break };
            session.inform(i, head);
        }
        let s = &mut session.streams[i];
        let head_out = s.backend.as_ref().is_none_or(|b| b.job.response().head_sent());
        if !s.answered() && head_out {
            match framed_head(&mut s.out) {
                Some(head) => session.respond(i, head),
                None => {
                    // (An `nph-` program's head not whole in its first read.)
                    if let Some(mut b) = s.backend.take() {
                        b.end(w, true);
                    }
                    session.reset(i);
                    return false;
                }
            }
        }
        session.streams[i].backend.is_some()
    }

    /// Answers stream `i`'s failed job `b` (ended, abandoned here) with the
    /// error page of `status`, or a reset once its head is out.
    fn stream_failed(&mut self, w: &mut Worker<'_>, session: &mut Session, i: usize, mut b: Box<Backend>, status: u16) {
        b.end(w, true);
        let s = &mut session.streams[i];
        if s.answered() {
            return session.reset(i);
        }
        let bytes = b.error_page(w, &mut s.out, self.io.fields(), true, status);
        self.log_backend(w, &b, status, bytes);
        match framed_head(&mut s.out) {
            Some(head) => session.respond(i, head),
            None => session.reset(i),
        }
    }

    /// Has stream `i` ask for `GET location` in place of what its job
    /// answered (RFC 3875 §6.2.2): answered again as a request of its own
    /// (`answer_stream`), with the fields a redirect's request has.
    fn redirect_stream(
        &mut self,
        w: &mut Worker<'_>,
        session: &mut Session,
        i: usize,
        b: Box<Backend>,
        location: &[u8],
    ) {
        let s = &mut session.streams[i];
        if !may_redirect(&mut s.redirects, self.peers.peer) {
            return self.stream_failed(w, session, i, b, 500);
        }
        let mut uri = s.head.uri.clone().into_parts();
        uri.path_and_query = http::uri::PathAndQuery::try_from(location).ok();
        let Some(uri) = uri.path_and_query.is_some().then(|| http::Uri::from_parts(uri).ok()).flatten() else {
            return self.stream_failed(w, session, i, b, 502);
        };
        let mut headers = http::HeaderMap::new();
        if let Some(host) = s.head.headers.get(http::header::HOST) {
            headers.insert(http::header::HOST, host.clone());
        }
        s.head.method = http::Method::GET;
        s.head.uri = uri;
        s.head.headers = headers;
        s.body = Body::Read;
        s.spool = Spool::default();
        s.received = 0;
        s.out.clear();
    }

    /// Abandons the jobs of streams that are gone (reset by the client,
    /// or the connection over): a CGI program is killed and reaped, a
    /// FastCGI or upstream connection closed.
    pub(super) fn end_abandoned(&mut self, w: &mut Worker<'_>, session: &mut Session) {
        session.drop_gone(|mut b| b.end(w, true));
    }

    /// Tells the streams' jobs what their descriptors are ready for. The
    /// engine reports them all under the connection's one second token, so
    /// every job's descriptor is asked at once — each one, not only those
    /// waiting: the report is an edge, and one that says a job's pipe
    /// closed while the job was still reading would otherwise be lost
    /// (its reader takes a short read for "empty", not for "ended").
    pub(super) fn tell_stream_jobs(&mut self) {
        let Some(session) = self.h2.as_mut() else { return };
        let events = libc::POLLIN | libc::POLLOUT | libc::POLLRDHUP;
        let (jobs, mut fds): (Vec<usize>, Vec<libc::pollfd>) = session
            .streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let fd = s.backend.as_ref()?.job.watched()?;
                Some((i, libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 }))
            })
            .unzip();
        // SAFETY: `fds` is a valid array of pollfd of the length passed.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) } <= 0 {
            return;
        }
        for (i, fd) in jobs.iter().zip(&fds).filter(|(_, fd)| fd.revents != 0) {
            let r = sys::polled(fd.revents);
            if let Some(b) = session.streams[*i].backend.as_mut() {
                b.job.on_ready(r.readable, r.writable, r.read_closed);
            }
        }
    }

    /// The doorbell rang for the connection (a pooled connection granted
    /// to a job waiting for one): every job looks, as it cannot be told
    /// whose it was.
    pub(super) fn ring_stream_jobs(&mut self) {
        let jobs = self.h2.iter_mut().flat_map(|s| s.streams.iter_mut()).filter_map(|s| s.backend.as_mut());
        for b in jobs {
            b.job.on_ready(true, false, false);
        }
    }

    /// Enforces each stream's job's deadline: one past it is abandoned,
    /// its stream answered `504` (or what the job says), or reset once its
    /// head is out; the others go on.
    pub(super) fn stream_jobs_tick(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Status {
        let Some(mut session) = self.h2.take() else { return Status::Open };
        let mut moved = false;
        for i in 0..session.streams.len() {
            let s: &mut Stream = &mut session.streams[i];
            let client_blocked = !s.out.is_empty();
            let Some(b) = s.backend.as_mut() else { continue };
            match b.job.expired(w.now, client_blocked, w) {
                Some(status) => {
                    let b = s.backend.take().expect("a stream's backend");
                    log!(Level::Info, "{}: a stream's backend timed out", self.peers.peer);
                    self.stream_failed(w, &mut session, i, b, status);
                    moved = true;
                }
                // One its deadline moved on (a proxy trying another
                // server) may have work now, with no readiness to come.
                None => moved |= b.job.ready(),
            }
        }
        self.h2 = Some(session);
        if moved {
            self.drive_session(shared, w)
        } else {
            Status::Open
        }
    }
}
