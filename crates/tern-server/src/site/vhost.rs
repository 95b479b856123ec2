//! One site (virtual host): its locations and handler settings, and how it
//! answers a request routed to it — the location found, its access rules
//! and authentication checked, then its action: a redirect, a fixed
//! response, or its directory's FastCGI backends, CGI programs and files.

use std::time::Instant;

use tern_http::path::Normalized;
use tern_http::Request;

use super::backend::Job;
use super::location::{Action, Dir, Location, ProxyHost, TryFile};
use super::locations::Locations;
use super::proxy::exchange;
use super::request::{Answer, Ends};
use super::template::Parts;
use super::trace::Trace;
use super::{cgi, fastcgi, hidden, static_files};
use crate::compress::Compression;
use crate::error_log::{log, Level};
use crate::open_files::OpenFileTable;
use crate::reply::Reply;
use crate::resolve::{Found, Root};
use crate::spool::Spool;
use crate::sys;
use crate::worker::Worker;

/// A site, ready to answer.
pub struct Site {
    pub name: String,
    pub static_files: static_files::Settings,
    pub cgi: cgi::Settings,
    pub fastcgi: fastcgi::Settings,
    pub hidden: hidden::Rule,
    /// Which location a path reaches.
    pub index: Locations,
    pub locations: Vec<Location>,
    /// The site's own settings: what answers a path no location matches.
    pub base: Location,
}

/// What the server shares with every site for one request.
#[derive(Clone, Copy)]
pub struct Common<'a> {
    pub compression: &'a Compression,
    /// `limits.body_buffer`: the most of a spooled body a FastCGI exchange
    /// holds in memory at once.
    pub body_buffer: usize,
}

impl Site {
    /// The location answering the normalised path `w.path`.
    pub fn location(&self, slash: bool, w: &mut Worker<'_>, trace: &mut impl Trace) -> &Location {
        match self.index.find(&w.path, slash, &mut w.scratch, trace) {
            Some(i) => &self.locations[i],
            None => &self.base,
        }
    }

    /// Answers `req`, whose normalised path is `w.path`.
    #[allow(clippy::too_many_arguments)]
    pub fn serve<'s>(
        &'s self,
        req: &Request<'_>,
        norm: Normalized,
        body: &mut Spool,
        ends: Ends<'_>,
        reply: &mut Reply<'s>,
        w: &mut Worker<'_>,
        common: Common<'_>,
    ) -> Answer {
        let loc = self.location(norm.trailing_slash, w, &mut ());
        reply.dressing = loc.dressing.as_ref();
        if self.hidden.refuses(&w.path) {
            reply.error(404);
            return Answer::Done;
        }
        if loc.access.as_ref().is_some_and(|a| !a.permits(ends.peer().ip())) {
            reply.error(403);
            return Answer::Done;
        }
        if let Some(guard) = &loc.auth {
            let header = req.values("authorization").next();
            if w.auth.check(&guard.file, header, w.now).is_none() {
                reply.head(401);
                reply.header("WWW-Authenticate", guard.challenge.as_bytes());
                reply.page(401);
                return Answer::Done;
            }
        }
        match &loc.action {
            Action::Redirect { to, status } => {
                let mut target = Vec::with_capacity(128);
                let scheme: &[u8] = if ends.https { b"https" } else { b"http" };
                let rest = self.rest(loc, &w.path, norm.trailing_slash);
                let parts = Parts {
                    scheme,
                    host: req.host.unwrap_or_default().as_bytes(),
                    path: req.path.as_bytes(),
                    query: req.query.map(str::as_bytes),
                    rest: &rest,
                };
                to.render(&parts, &mut target);
                reply.redirect(*status, &target);
                Answer::Done
            }
            Action::Respond { status, content_type, body } => {
                reply.bytes(*status, content_type, body);
                Answer::Done
            }
            Action::Files(dir) => self.files(loc, dir, req, norm, body, ends, reply, w, common),
            Action::Proxy { group, host } => {
                let host = match host {
                    ProxyHost::Pass => req.host.unwrap_or_default().as_bytes(),
                    ProxyHost::Upstream => group.name.as_bytes(),
                    ProxyHost::Name(name) => name,
                };
                let launch = exchange::Launch {
                    group: group.clone(),
                    host,
                    body: body.take(),
                    window: common.body_buffer,
                    peer: ends.peer().ip(),
                    https: ends.https,
                    upgrade: req.method == tern_http::Method::Get
                        && req.values("upgrade").next().is_some()
                        && req
                            .values("connection")
                            .any(|v| v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"))),
                    doorbell: w.watcher.doorbell(),
                };
                match exchange::Exchange::start(req, launch) {
                    Ok(x) => Answer::Backend(Job::Proxy(Box::new(x))),
                    Err(status) => {
                        reply.error(status);
                        Answer::Done
                    }
                }
            }
        }
    }

    /// The path after a prefix location's prefix (`{rest}` of a redirect).
    pub(super) fn rest(&self, loc: &Location, rel: &[u8], slash: bool) -> Vec<u8> {
        let mut path = Vec::with_capacity(rel.len() + 2);
        path.push(b'/');
        path.extend_from_slice(rel);
        if slash && !rel.is_empty() {
            path.push(b'/');
        }
        let skip = loc.prefix_len.min(path.len());
        path.drain(..skip);
        path
    }

    /// Answers from the location's directory: FastCGI, else CGI, else a
    /// file.
    #[allow(clippy::too_many_arguments)]
    fn files(
        &self,
        loc: &Location,
        dir: &Dir,
        req: &Request<'_>,
        mut norm: Normalized,
        body: &mut Spool,
        ends: Ends<'_>,
        reply: &mut Reply<'_>,
        w: &mut Worker<'_>,
        common: Common<'_>,
    ) -> Answer {
        if let Some(prefix) = &dir.alias {
            if !strip_alias(&mut w.path, norm.trailing_slash, prefix) {
                reply.error(404);
                return Answer::Done;
            }
        }
        if !dir.try_files.is_empty() {
            let (files, now, scratch) = (&mut w.files, w.now, &mut w.scratch);
            match try_files(dir, &w.path, |rel, slash| is_file(&dir.root, rel, slash, files, now, scratch)) {
                Tried::Path(path, n) => {
                    w.path = path;
                    norm = n;
                }
                Tried::Status(status) => {
                    reply.error(status);
                    return Answer::Done;
                }
            }
        }
        if loc.fastcgi {
            match self.fastcgi.locate(&dir.root, &w.path, &mut w.scratch, &mut w.files, w.now) {
                None => {}
                Some(Err(err)) => {
                    reply.error(err.status());
                    return Answer::Done;
                }
                Some(Ok(route)) => {
                    let launch = fastcgi::Launch {
                        route,
                        doc_root: dir.path_bytes(),
                        rel: &w.path,
                        trailing_slash: norm.trailing_slash,
                        body: body.take(),
                        window: common.body_buffer,
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
        }
        let script = match self.cgi.locate(&dir.root, &w.path) {
            None => {
                let files = static_files::Files {
                    root: &dir.root,
                    static_files: &self.static_files,
                    compression: common.compression,
                    policy: &dir.policy,
                    list: dir.list,
                };
                return match static_files::serve(files, req, norm, reply, w) {
                    Some(ticket) => Answer::Waiting(ticket),
                    None => Answer::Done,
                };
            }
            Some(Err(err)) => {
                reply.error(err.status());
                return Answer::Done;
            }
            // A program where programs may not run is not sent as a file.
            Some(Ok(_)) if !loc.cgi => {
                reply.error(403);
                return Answer::Done;
            }
            Some(Ok(script)) => script,
        };
        let launch = cgi::Launch {
            script,
            root: &dir.path,
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
                full_for_now(reply);
                Answer::Done
            }
            Err(cgi::StartError::Failed(err)) => {
                log!(Level::Error, "cannot start CGI program for {:?}: {err}", req.path);
                // Out of descriptors or processes: the server is full for
                // now (as at the cap), not the program broken.
                if sys::out_of_resources(&err) {
                    full_for_now(reply);
                } else {
                    reply.error(500);
                }
                Answer::Done
            }
        }
    }
}

/// `503` with `Retry-After: 1`: no program can start now, one may soon.
fn full_for_now(reply: &mut Reply<'_>) {
    reply.head(503);
    reply.header("Retry-After", b"1");
    reply.page(503);
}

/// Rewrites `rel` (a normalised path under an alias location's prefix
/// `prefix`) to the path below the alias directory. With a prefix that
/// does not end in `/`, the rest must be empty or start with `/`: `false`
/// (answered 404) for `/img../secret` under `/img`, so no path can name
/// anything beside the directory.
pub fn strip_alias(rel: &mut Vec<u8>, slash: bool, prefix: &[u8]) -> bool {
    let cut = if prefix.ends_with(b"/") {
        // `rel` has no trailing slash: `/img/` itself is `img` plus `slash`.
        if rel.len() + 1 == prefix.len() && slash {
            rel.len()
        } else {
            prefix.len()
        }
    } else {
        match rel.get(prefix.len()) {
            None => prefix.len(),
            Some(b'/') => prefix.len() + 1,
            Some(_) => return false,
        }
    };
    if cut > rel.len() || !rel.starts_with(&prefix[..cut.min(prefix.len())]) {
        return false;
    }
    rel.drain(..cut);
    true
}

/// What `try_files` chose.
pub(super) enum Tried {
    /// This normalised path.
    Path(Vec<u8>, Normalized),
    Status(u16),
}

/// Tries the location's `try_files` entries in order for the normalised
/// path `rel`: the first that `exists` (a file, or a directory's index)
/// answers; the last answers whatever it names.
pub(super) fn try_files(dir: &Dir, rel: &[u8], mut exists: impl FnMut(&[u8], bool) -> bool) -> Tried {
    let mut candidate = Vec::with_capacity(rel.len() + 32);
    let mut tried = Vec::with_capacity(rel.len() + 32);
    for (i, entry) in dir.try_files.iter().enumerate() {
        let (before, with_path, after) = match entry {
            TryFile::Status(status) => return Tried::Status(*status),
            TryFile::Path { before, with_path, after } => (before, *with_path, after),
        };
        candidate.clear();
        candidate.extend_from_slice(before);
        if with_path {
            candidate.push(b'/');
            candidate.extend_from_slice(rel);
        }
        candidate.extend_from_slice(after);
        let Ok(text) = std::str::from_utf8(&candidate) else { continue };
        let Ok(norm) = tern_http::path::normalize(text, &mut tried) else { continue };
        if i + 1 == dir.try_files.len() || exists(&tried, norm.trailing_slash) {
            return Tried::Path(tried, norm);
        }
    }
    Tried::Status(404)
}

/// Does `rel` name a file (or, with `slash`, a directory with an index)
/// under `root`? The open-file table answers for files served before.
fn is_file(
    root: &Root,
    rel: &[u8],
    slash: bool,
    files: &mut OpenFileTable,
    now: Instant,
    scratch: &mut Vec<u8>,
) -> bool {
    if !slash && files.lookup(root.id(), rel, now).is_some_and(|(_, fresh)| fresh) {
        return true;
    }
    matches!(root.find(rel, slash, scratch), Ok(Found::File { .. }))
}

#[cfg(test)]
mod tests {
    use super::strip_alias;

    fn strip(rel: &str, slash: bool, prefix: &str) -> Option<String> {
        let mut rel = rel.as_bytes().to_vec();
        strip_alias(&mut rel, slash, prefix.as_bytes()).then(|| String::from_utf8(rel).unwrap())
    }

    #[test]
    fn an_alias_never_reaches_beside_its_directory() {
        // `alias` under `prefix = "/img"`.
        assert_eq!(strip("img/a.png", false, "img").as_deref(), Some("a.png"));
        assert_eq!(strip("img", true, "img").as_deref(), Some(""));
        assert_eq!(strip("img", false, "img").as_deref(), Some(""));
        assert_eq!(strip("img../secret", false, "img"), None);
        assert_eq!(strip("imgs/a.png", false, "img"), None);
        // Under `prefix = "/img/"`.
        assert_eq!(strip("img/a.png", false, "img/").as_deref(), Some("a.png"));
        assert_eq!(strip("img", true, "img/").as_deref(), Some(""));
        assert_eq!(strip("img/sub/x", false, "img/").as_deref(), Some("sub/x"));
    }
}
