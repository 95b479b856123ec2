//! The site: routes a request to the handler that answers it.

pub mod access;
pub mod app;
pub mod auth;
pub mod backend;
pub mod cgi;
pub mod fastcgi;
pub mod hidden;
pub mod hosts;
pub mod internal;
pub mod listing;
pub mod locations;
pub mod static_files;
pub mod template;
pub mod trace;

use std::cell::OnceCell;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

use tern_http::request::TargetForm;
use tern_http::{path, Request};

use crate::compress::Compression;
use crate::error_log::{log, Level};
use crate::limits::Limits;
use crate::offload::Ticket;
use crate::reply::Reply;
use crate::resolve::{Root, Symlinks};
use crate::spool::Spool;
use crate::static_io::StaticFiles;
use crate::values::Origin;
use crate::worker::Worker;
use backend::Job;
use cgi::config::Cgi;
use fastcgi::config::FastCgi;
use internal::Status;

/// What a site is built from (`Config::site`): its sections, and the
/// values of `[server]` it reads. `config/` sits above the site, so the
/// site reads this instead.
pub struct Sections<'a> {
    /// `server.root`, `server.index`, `server.symlinks`.
    pub root: &'a Path,
    pub index: &'a [String],
    pub symlinks: Symlinks,
    pub static_files: &'a StaticFiles,
    pub limits: &'a Limits,
    pub cgi: &'a Cgi,
    pub fastcgi: &'a FastCgi,
    pub status: &'a Status,
    /// `server.model`'s name, and whether it is the staged engine, for the
    /// status page.
    pub model: &'static str,
    pub staged: bool,
    /// Threads of the blocking I/O pool (`Config::io_pool_threads`).
    pub io_pool_threads: usize,
    /// Where the configuration came from: errors name key and line, and
    /// the file itself is never served.
    pub origin: &'a Origin,
}

pub struct Site {
    pub root: Root,
    pub static_files: static_files::Settings,
    pub cgi: cgi::Settings,
    pub hidden: hidden::Rule,
    pub fastcgi: fastcgi::Settings,
    pub compression: Compression,
    /// The status page and metrics (`[status]`).
    internal: internal::Settings,
    /// `limits.body_buffer`: the most of a spooled body a FastCGI exchange
    /// holds in memory at once.
    body_buffer: usize,
    /// Applications mounted by the composition root (none for `tern serve`).
    pub apps: app::Apps,
}

/// The two ends of a client connection. The local end is asked of the
/// kernel (`getsockname`) the first time something needs it (the TLS role
/// of the address, an HTTPS redirect, CGI and FastCGI variables) and kept:
/// a connection that only fetches files never pays that system call.
#[derive(Debug)]
pub struct Peers {
    pub peer: SocketAddr,
    local: OnceCell<SocketAddr>,
}

impl Peers {
    pub fn new(peer: SocketAddr) -> Peers {
        Peers { peer, local: OnceCell::new() }
    }

    /// The address `sock` (this connection's socket) was reached at; the
    /// peer's when the kernel cannot say.
    pub fn local(&self, sock: &TcpStream) -> SocketAddr {
        *self.local.get_or_init(|| sock.local_addr().unwrap_or(self.peer))
    }
}

/// A connection's ends as a handler sees them.
#[derive(Clone, Copy)]
pub struct Ends<'a> {
    pub peers: &'a Peers,
    pub sock: &'a TcpStream,
}

impl Ends<'_> {
    pub fn peer(&self) -> SocketAddr {
        self.peers.peer
    }

    pub fn local(&self) -> SocketAddr {
        self.peers.local(self.sock)
    }
}

/// How a request was answered.
pub enum Answer {
    /// The whole response is queued.
    Done,
    /// A backend was started; its output becomes the response.
    Backend(Job),
    /// Nothing is answered yet: the file is being opened in the I/O pool.
    /// Once the ticket is done, its result goes to `Worker::resolved` and
    /// the request is answered again.
    Waiting(Arc<Ticket>),
}

impl Site {
    /// `compression` is started by the server (its background threads).
    pub fn new(s: Sections<'_>, compression: Compression) -> std::io::Result<Site> {
        let root = Root::open(s.root, s.symlinks, s.index.to_vec()).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot open document root {}: {e}", s.root.display()))
        })?;
        cgi::check(s.cgi, &root, s.origin)?;
        let config_file = static_files::running_config(s.origin, s.root, s.symlinks);
        Ok(Site {
            root,
            static_files: static_files::Settings::new(s.static_files, s.limits, s.io_pool_threads, config_file),
            cgi: cgi::Settings::new(s.cgi, s.root)?,
            hidden: hidden::Rule::new(s.static_files),
            fastcgi: fastcgi::Settings::new(s.fastcgi, s.root)?,
            compression,
            internal: internal::Settings {
                status: s.status.clone(),
                model: s.model,
                staged: s.staged,
                io_pool_threads: s.io_pool_threads,
            },
            body_buffer: s.limits.body_buffer.usize(),
            apps: app::Apps::default(),
        })
    }

    /// Answers `req` (whose body, if any, is `body`: a backend takes it)
    /// into `reply`.
    pub fn respond(
        &self,
        req: &Request<'_>,
        body: &mut Spool,
        ends: Ends<'_>,
        reply: &mut Reply<'_>,
        w: &mut Worker<'_>,
    ) -> Answer {
        let status = &self.internal.status;
        if status.enabled && (req.path == status.path || req.path == status.metrics_path) {
            internal::serve(req, ends.peer(), &self.internal, &self.compression, &self.fastcgi, reply, w);
            return Answer::Done;
        }
        if req.form == TargetForm::Asterisk || req.form == TargetForm::Authority {
            static_files::allow(reply, if req.form == TargetForm::Asterisk { 200 } else { 405 });
            return Answer::Done;
        }
        let norm = match path::normalize(req.path, &mut w.path) {
            Ok(n) => n,
            Err(err) => {
                log!(Level::Info, "refused path {:?}: {}", req.path, err.0);
                reply.error(400);
                return Answer::Done;
            }
        };
        if self.hidden.refuses(&w.path) {
            reply.error(404);
            return Answer::Done;
        }
        if let Some(app) = self.apps.find(&w.path) {
            app::answer(app, req, &w.path, reply);
            return Answer::Done;
        }
        match self.fastcgi.locate(&self.root, &w.path, &mut w.scratch, &mut w.files, w.now) {
            None => {}
            Some(Err(err)) => {
                reply.error(err.status());
                return Answer::Done;
            }
            Some(Ok(route)) => {
                let launch = fastcgi::Launch {
                    route,
                    rel: &w.path,
                    trailing_slash: norm.trailing_slash,
                    body: body.take(),
                    window: self.body_buffer,
                    peer: ends.peer(),
                    local: ends.local(),
                    doorbell: w.watcher.doorbell(),
                };
                return match fastcgi::start(req, launch) {
                    Ok(exchange) => Answer::Backend(Job::FastCgi(Box::new(exchange))),
                    Err(status) => {
                        reply.error(status);
                        Answer::Done
                    }
                };
            }
        }
        match self.cgi.locate(&self.root, &w.path) {
            None => {
                let files = static_files::Files {
                    root: &self.root,
                    static_files: &self.static_files,
                    compression: &self.compression,
                };
                match static_files::serve(files, req, norm, reply, w) {
                    Some(ticket) => Answer::Waiting(ticket),
                    None => Answer::Done,
                }
            }
            Some(Err(err)) => {
                reply.error(err.status());
                Answer::Done
            }
            Some(Ok(script)) => {
                let launch = cgi::Launch {
                    script,
                    rel: &w.path,
                    trailing_slash: norm.trailing_slash,
                    body: body.take(),
                    peer: ends.peer(),
                    local: ends.local(),
                };
                match cgi::start(&self.cgi, &w.server.cgi_running, req, &launch) {
                    Ok(running) => {
                        w.stats.cgi_started.incr();
                        Answer::Backend(Job::Cgi(running))
                    }
                    Err(cgi::StartError::AsRoot) => {
                        log!(Level::Warn, "refused to run {:?} as root (set server.user or cgi.allow_root)", req.path);
                        reply.error(403);
                        Answer::Done
                    }
                    Err(cgi::StartError::Busy) => {
                        w.stats.cgi_rejected.incr();
                        reply.head(503);
                        reply.header("Retry-After", b"1");
                        reply.page(503);
                        Answer::Done
                    }
                    Err(cgi::StartError::Failed(err)) => {
                        log!(Level::Error, "cannot start CGI program for {:?}: {err}", req.path);
                        reply.error(500);
                        Answer::Done
                    }
                }
            }
        }
    }
}
