//! A response produced by a backend — a CGI program or a FastCGI exchange
//! — that the connection relays: the one interface `conn/relay.rs` drives, its
//! descriptor watched by the engine beside the client socket.

use std::io;
use std::time::Instant;

use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::reaper;
use crate::reply::Params;
use crate::worker::{Wait, Worker};

use super::cgi::{self, Pump, Response};
use super::fastcgi::exchange::Exchange;
use super::proxy;

pub enum Job {
    Cgi(cgi::Running),
    FastCgi(Box<Exchange>),
    Proxy(Box<proxy::exchange::Exchange>),
}

impl Job {
    /// Registers the job's descriptor as connection `key`'s second one.
    pub fn watch(&mut self, key: usize, w: &Worker<'_>) -> io::Result<()> {
        match self {
            Job::Cgi(r) => w.watcher.watch(key, r.stdout()),
            Job::FastCgi(x) => x.watch(key, w),
            Job::Proxy(x) => x.watch(key, w),
        }
    }

    /// The descriptor the job's readiness comes from now (whether or not
    /// it is known to be ready).
    pub fn watched(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            Job::Cgi(r) => Some(r.watched()),
            Job::FastCgi(x) => x.watched(),
            Job::Proxy(x) => x.watched(),
        }
    }

    /// The descriptor a blocking engine waits on now, with the directions
    /// it waits for (none: nothing to wait for on the backend's side).
    pub fn wait(&self) -> Option<(std::os::fd::BorrowedFd<'_>, Wait)> {
        match self {
            Job::Cgi(r) => r.wait(),
            Job::FastCgi(x) => x.wait(),
            Job::Proxy(x) => x.wait(),
        }
    }

    /// The descriptor became readable, writable, or closed.
    pub fn on_ready(&mut self, readable: bool, writable: bool, closed: bool) {
        match self {
            Job::Cgi(r) => r.on_ready(readable, closed),
            Job::FastCgi(x) => x.on_ready(readable, writable, closed),
            Job::Proxy(x) => x.on_ready(readable, writable, closed),
        }
    }

    /// Whether [`Job::pump`] has something to do.
    pub fn ready(&self) -> bool {
        match self {
            Job::Cgi(r) => r.readable(),
            Job::FastCgi(x) => x.ready(),
            Job::Proxy(x) => x.ready(),
        }
    }

    /// Moves the job on, queueing response bytes into `out` (reading at
    /// most `chunk` bytes at a time).
    pub fn pump(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize, w: &Worker<'_>) -> Pump {
        match self {
            Job::Cgi(r) => {
                let pump = r.pump(out, params, chunk);
                if let Pump::Fail(_) = pump {
                    w.stats.cgi_failed.incr();
                }
                pump
            }
            Job::FastCgi(x) => x.pump(out, params, chunk, w),
            Job::Proxy(x) => x.pump(out, params, chunk, w),
        }
    }

    /// A tunnel (after `101`) that takes the client's bytes now, if the
    /// job is one.
    pub fn tunnel(&mut self) -> Option<&mut proxy::exchange::Exchange> {
        match self {
            Job::Proxy(x) if x.tunnel() => Some(x),
            _ => None,
        }
    }

    /// What to watch after [`Pump::AwaitExit`] (a CGI program's pidfd).
    pub fn exit_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            Job::Cgi(r) => r.exit_fd(),
            Job::FastCgi(_) | Job::Proxy(_) => None,
        }
    }

    pub fn response(&self) -> &Response {
        match self {
            Job::Cgi(r) => &r.response,
            Job::FastCgi(x) => &x.response,
            Job::Proxy(x) => &x.response,
        }
    }

    /// The trailer fields its response kept for an HTTP/2 stream (a
    /// proxied chunked response's), taken once it is done.
    pub fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        match self {
            Job::Cgi(r) => r.response.take_trailers(),
            Job::FastCgi(x) => x.response.take_trailers(),
            Job::Proxy(x) => x.response.take_trailers(),
        }
    }

    /// The status to answer when the job has run past its time (a CGI
    /// program past its site's `cgi.timeout`). While `client_blocked`
    /// (output waits for the client), a FastCGI backend is not the one
    /// being slow.
    pub fn expired(&mut self, now: Instant, client_blocked: bool, w: &Worker<'_>) -> Option<u16> {
        match self {
            Job::Cgi(r) => r.expired(now).then(|| {
                w.stats.cgi_timeouts.incr();
                log!(Level::Warn, "CGI program killed at cgi.timeout");
                504
            }),
            Job::FastCgi(x) => x.expired(now, client_blocked),
            Job::Proxy(x) => x.expired(now, client_blocked, w),
        }
    }

    /// Ends the job: `abandon` when its response is not wanted (failed,
    /// redirected, timed out, client gone) — the program is killed, the
    /// FastCGI connection closed. A CGI program is always reaped.
    pub fn end(&mut self, w: &mut Worker<'_>, abandon: bool) {
        match self {
            Job::Cgi(r) => {
                if abandon {
                    reaper::kill(r.pid());
                }
                w.reaper.collect(r.pid(), w.now, &w.server.cgi_running);
            }
            Job::FastCgi(x) => x.end(w, abandon),
            Job::Proxy(x) => x.end(w, abandon),
        }
    }
}
