//! `tern route`: which site and location a request reaches, every rule
//! looked at on the way and why it matched or not, and what would be sent
//! — the same routing code the server runs, with a [`Trace`] that keeps
//! its notes, and the handler's choice looked up without answering.

use std::time::{Duration, Instant};

use tern_http::path;
use tern_http::request::{parse_head, Head, Limits, MAX_HEADERS};

use super::hosts::Hosts;
use super::location::{Action, Location, TryFile};
use super::template::Parts;
use super::vhost::{strip_alias, try_files, Site, Tried};
use crate::open_files::OpenFileTable;
use crate::resolve::Found;

/// What routing would do with a request.
pub struct Route {
    /// Each step, in order.
    pub notes: Vec<String>,
    /// The answer, in a line.
    pub answer: String,
}

/// The sites a request is routed among.
pub struct Table<'a> {
    pub hosts: &'a Hosts,
    pub sites: &'a [Site],
    pub unknown_host: u16,
}

impl Table<'_> {
    /// Explains the request whose head is `head` (a request line and its
    /// fields, as a client sends them); `https`: it came over TLS, asking
    /// for `sni`.
    pub fn explain(&self, head: &[u8], https: bool, sni: Option<&str>) -> Route {
        let limits = Limits { max_request_line: 64 * 1024, max_head_bytes: 64 * 1024, max_headers: MAX_HEADERS };
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let req = match parse_head(head, &limits, &mut fields) {
            Ok(Head::Complete(req)) => req,
            Ok(Head::Partial { .. }) => return Route::answer(Vec::new(), "the request head is incomplete".into()),
            Err(e) => {
                let status = e.status().map_or("no answer".to_string(), |s| s.to_string());
                return Route::answer(Vec::new(), format!("{status}: the request is refused ({})", e.reason()));
            }
        };
        let mut notes = Vec::new();
        let found = self.hosts.find(req.host.map(str::as_bytes), &mut notes);
        let Some(index) = found.site() else {
            return Route::answer(
                notes,
                format!("{}: no site answers this host (server.unknown_host)", self.unknown_host),
            );
        };
        let site = &self.sites[index];
        notes.push(format!("site `{}` answers", site.name));
        if let Some(sni) = sni {
            let by_sni = self.hosts.find(Some(sni.as_bytes()), &mut Vec::new()).site();
            if by_sni != Some(index) {
                let other = by_sni.map_or("no site".to_string(), |i| format!("site `{}`", self.sites[i].name));
                return Route::answer(notes, format!("421: the TLS name `{sni}` chose {other}, the host another"));
            }
        }
        let mut rel = Vec::new();
        let norm = match path::normalize(req.path, &mut rel) {
            Ok(n) => n,
            Err(e) => return Route::answer(notes, format!("400: the path is refused ({})", e.0)),
        };
        let slash = if norm.trailing_slash && !rel.is_empty() { "/" } else { "" };
        notes.push(format!("the path, decoded and normalised: /{}{slash}", String::from_utf8_lossy(&rel)));
        let loc = match site.index.find(&rel, norm.trailing_slash, &mut Vec::new(), &mut notes) {
            Some(i) => &site.locations[i],
            None => &site.base,
        };
        if site.hidden.refuses(&rel) {
            return Route::answer(notes, "404: a segment of the path starts with `.` (static.hidden)".into());
        }
        if loc.access.is_some() {
            notes.push("its access rules decide by the client's address (403 when refused)".into());
        }
        if loc.auth.is_some() {
            notes.push("it asks for HTTP Basic credentials (401 without valid ones)".into());
        }
        let scheme: &[u8] = if https { b"https" } else { b"http" };
        let answer = match &loc.action {
            Action::Redirect { to, status } => {
                let mut target = Vec::new();
                let rest = site.rest(loc, &rel, norm.trailing_slash);
                let parts = Parts {
                    scheme,
                    host: req.host.unwrap_or_default().as_bytes(),
                    path: req.path.as_bytes(),
                    query: req.query.map(str::as_bytes),
                    rest: &rest,
                };
                to.render(&parts, &mut target);
                format!("{status}: a redirect to {}", String::from_utf8_lossy(&target))
            }
            Action::Respond { status, content_type, body } => {
                format!("{status}: a fixed response of {} bytes ({content_type})", body.len())
            }
            Action::Files(_) => files(site, loc, rel, norm.trailing_slash, &mut notes),
            Action::Proxy { group, .. } => {
                let servers: Vec<String> = group.servers.iter().map(|s| s.address.to_string()).collect();
                format!("proxied to upstream `{}` ({})", group.name, servers.join(", "))
            }
        };
        Route::answer(notes, answer)
    }
}

impl Route {
    fn answer(notes: Vec<String>, answer: String) -> Route {
        Route { notes, answer }
    }
}

/// What a location's directory would answer for `rel`.
fn files(site: &Site, loc: &Location, mut rel: Vec<u8>, mut slash: bool, notes: &mut Vec<String>) -> String {
    let Action::Files(dir) = &loc.action else { unreachable!("a location that serves files") };
    notes.push(format!("its directory: {}", dir.path.display()));
    if let Some(prefix) = &dir.alias {
        if !strip_alias(&mut rel, slash, prefix) {
            return "404: the path leaves the alias's prefix (a name that only starts like it)".into();
        }
        notes.push(format!("the alias replaces the prefix: /{}", String::from_utf8_lossy(&rel)));
    }
    if !dir.try_files.is_empty() {
        let shown: Vec<String> = dir.try_files.iter().map(describe_try).collect();
        let exists = |rel: &[u8], slash| matches!(dir.root.find(rel, slash, &mut Vec::new()), Ok(Found::File { .. }));
        match try_files(dir, &rel, exists) {
            Tried::Status(status) => {
                return format!("{status}: try_files {} found no file", shown.join(", "));
            }
            Tried::Path(path, norm) => {
                notes.push(format!("try_files {} chose /{}", shown.join(", "), String::from_utf8_lossy(&path)));
                rel = path;
                slash = norm.trailing_slash;
            }
        }
    }
    let mut table = OpenFileTable::new(1, Duration::ZERO);
    if loc.fastcgi {
        match site.fastcgi.locate(&dir.root, &rel, &mut Vec::new(), &mut table, Instant::now()) {
            Some(Ok(route)) => {
                let b = &route.backend;
                let script = String::from_utf8_lossy(&rel[..route.script_len]);
                let root = b.root.as_deref().unwrap_or(dir.path_bytes());
                return format!(
                    "FastCGI backend `{}` ({}), SCRIPT_FILENAME {}/{script}",
                    b.name,
                    b.pool.address(),
                    String::from_utf8_lossy(root)
                );
            }
            Some(Err(e)) => return format!("{}: the FastCGI script is not there ({e})", e.status()),
            None => {}
        }
    }
    match site.cgi.locate(&dir.root, &rel) {
        Some(Ok(_)) if !loc.cgi => return "403: a CGI program, and programs may not run here (cgi = false)".into(),
        Some(Ok(script)) => {
            let (name, interpreter) = script.program(&rel);
            let by = interpreter.map_or(String::new(), |i| format!(" by {}", i.display()));
            return format!(
                "the CGI program {}/{}, run{by} in {}",
                dir.path.display(),
                String::from_utf8_lossy(name),
                dir.path.display()
            );
        }
        Some(Err(e)) => return format!("{}: under a CGI directory, but no program ({e})", e.status()),
        None => {}
    }
    // The directory itself is shown without a `/` of its own: the index
    // file's name is joined to it.
    let shown = if rel.is_empty() {
        dir.path.display().to_string()
    } else {
        format!("{}/{}", dir.path.display(), String::from_utf8_lossy(&rel))
    };
    match dir.root.find(&rel, slash, &mut Vec::new()) {
        Ok(Found::File { index: None, .. }) => format!("200: the file {shown}"),
        Ok(Found::File { index: Some(i), .. }) => format!("200: the index file {shown}/{}", dir.root.index_name(i)),
        Ok(Found::DirectoryWithoutSlash) => "301: a directory, redirected to its path with a `/`".into(),
        Ok(Found::DirectoryWithoutIndex) if dir.list => format!("200: a listing of the directory {shown}"),
        Ok(Found::DirectoryWithoutIndex) => format!("403: the directory {shown} has no index file"),
        Err(e) => format!("{}: {shown} ({e})", e.status()),
    }
}

fn describe_try(t: &TryFile) -> String {
    match t {
        TryFile::Status(s) => format!("={s}"),
        TryFile::Path { before, with_path, after } => format!(
            "{}{}{}",
            String::from_utf8_lossy(before),
            if *with_path { "{path}" } else { "" },
            String::from_utf8_lossy(after)
        ),
    }
}
