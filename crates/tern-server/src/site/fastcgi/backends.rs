//! The configured FastCGI backends and which requests each answers: by
//! extension or URL prefix, the path split into script and `PATH_INFO`,
//! the script checked to exist.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::AsFd;
use std::time::Instant;

use rustix::fs::FileType;

use super::config::FastCgi;
use crate::open_files::OpenFileTable;
use crate::resolve::{ResolveError, Root};
use crate::site::upstream::address::Address;
use crate::site::upstream::pool::{Pool, Pools};

/// One configured backend as a site sees it: its routes, its pool (shared
/// by every site that inherits the backend) and its limits.
pub struct Backend {
    pub name: String,
    pub pool: Arc<Pool>,
    extensions: Vec<String>,
    /// Normalised (relative) prefixes, e.g. `app`.
    prefixes: Vec<Vec<u8>>,
    split: regex::bytes::Regex,
    check_file: bool,
    /// The document root as the application sees it, when set
    /// (`fastcgi.backends.NAME.root`); else the directory the request's
    /// location serves.
    pub root: Option<Vec<u8>>,
    pub keep_conn: bool,
    /// Replies are peeked, then read after the next request (a kept-alive
    /// Unix socket; see [`super::reply`]).
    pub peek_replies: bool,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub queue_timeout: Duration,
}

/// A site's `[fastcgi]` configuration, prepared once.
pub struct Settings {
    pub backends: Vec<Arc<Backend>>,
}

/// A request routed to a backend: the backend and the length of the
/// normalised path that names the script (the rest is `PATH_INFO`).
pub struct Route {
    pub backend: Arc<Backend>,
    pub script_len: usize,
}

impl Settings {
    /// The backends of site `site` (`""` for the top-level one), of which
    /// those named in `own` are the site's own, with their pools from
    /// `pools`.
    pub fn new(config: &FastCgi, site: &str, own: &[String], pools: &mut Pools) -> Settings {
        let mut backends = Vec::new();
        for (name, b) in &config.backends {
            let key = if own.contains(name) { format!("{site}/{name}") } else { name.clone() };
            backends.push(Arc::new(Backend {
                name: name.clone(),
                pool: pools.get(key, &b.address, b.max_connections.0),
                extensions: b.extensions.iter().map(|e| e.trim_start_matches('.').to_string()).collect(),
                prefixes: b.prefixes.iter().map(|p| p.0.trim_matches('/').as_bytes().to_vec()).collect(),
                split: b.split_path_info.0.clone(),
                check_file: b.check_file,
                root: b.root.as_ref().map(|r| r.as_os_str().as_bytes().to_vec()),
                keep_conn: b.keep_conn,
                peek_replies: b.keep_conn && matches!(b.address, Address::Unix(_)),
                connect_timeout: b.connect_timeout.0,
                read_timeout: b.read_timeout.0,
                queue_timeout: b.queue_timeout.0,
            }));
        }
        Settings { backends }
    }

    /// The backend for the normalised path `rel`, if any; `scratch` holds
    /// the path for the split pattern. With `check_file`, the script must
    /// be a regular file (else `404`): a script found is remembered in the
    /// worker's open-file table (`files`), watched and trusted as its
    /// entries are, so a hit costs no system call.
    pub fn locate(
        &self,
        root: &Root,
        rel: &[u8],
        scratch: &mut Vec<u8>,
        files: &mut OpenFileTable,
        now: Instant,
    ) -> Option<Result<Route, ResolveError>> {
        if self.backends.is_empty() {
            return None;
        }
        scratch.clear();
        scratch.push(b'/');
        scratch.extend_from_slice(rel);
        for backend in &self.backends {
            let script_len = backend.split_at(scratch).max(1) - 1;
            let script = &rel[..script_len];
            let by_prefix = backend
                .prefixes
                .iter()
                .any(|p| rel == p.as_slice() || (rel.starts_with(p) && rel.get(p.len()) == Some(&b'/')));
            let name = script.rsplit(|&b| b == b'/').next().unwrap_or(script);
            let by_extension = backend.extensions.iter().any(|e| {
                name.len() > e.len() + 1 && name.ends_with(e.as_bytes()) && name[name.len() - e.len() - 1] == b'.'
            });
            if !by_prefix && !by_extension {
                continue;
            }
            if backend.check_file && !files.known_regular(root.id(), script, now) {
                match root.probe_open(script) {
                    Ok((fd, stat)) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                        files.note_regular(root.id(), script, fd.as_fd(), now);
                    }
                    Ok(_) if script.is_empty() => return Some(Err(ResolveError::Forbidden)),
                    Ok(_) => return Some(Err(ResolveError::NotFound)),
                    Err(e) => return Some(Err(e)),
                }
            }
            return Some(Ok(Route { backend: backend.clone(), script_len }));
        }
        None
    }
}

impl Backend {
    /// Where the script ends in `path` (`/…`): after the split pattern's
    /// first capture, or the whole path. (The `regex` crate, not a
    /// lighter one: its literal prefilter and DFA answer the common
    /// no-`PATH_INFO` path; asked first whether it matches at all, it
    /// allocates no capture slots for that path either.)
    fn split_at(&self, path: &[u8]) -> usize {
        if !self.split.is_match(path) {
            return path.len();
        }
        match self.split.captures(path).and_then(|c| c.get(1).zip(c.get(2))) {
            Some((script, info)) if script.start() == 0 && script.end() == info.start() && info.end() == path.len() => {
                script.end()
            }
            _ => path.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::fastcgi::config::Pattern;

    fn backend(pattern: &str) -> Backend {
        Backend {
            name: "php".into(),
            pool: Pool::new(Address::Unix("/nonexistent/tern-test.sock".into()), 1).into(),
            extensions: vec!["php".into()],
            prefixes: Vec::new(),
            split: Pattern::parse(pattern).unwrap().0,
            check_file: false,
            root: Some(b"/srv".to_vec()),
            keep_conn: true,
            peek_replies: true,
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            queue_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_split_pattern_ends_the_script() {
        let b = backend(r"^(.+?\.php)(/.*)$");
        for (path, script) in [
            (&b"/hello.php"[..], &b"/hello.php"[..]),
            (b"/a/b.php/c/d.php/e", b"/a/b.php"),
            (b"/a.php/", b"/a.php"),
            (b"/.php/x", b"/.php"),
            (b"/a.phpx/y", b"/a.phpx/y"),
            (b"/a.php/x\ny", b"/a.php/x\ny"),
            (b"/a.php/\xff", b"/a.php/\xff"),
            (b"/caf\xc3\xa9.php/\xc3\xa9", b"/caf\xc3\xa9.php"),
        ] {
            assert_eq!(&path[..b.split_at(path)], script, "{:?}", String::from_utf8_lossy(path));
        }
        // Captures that do not cover the whole path split nothing.
        let partial = backend(r"(\.php)(/x)");
        assert_eq!(partial.split_at(b"/a.php/x"), 8);
    }
}
