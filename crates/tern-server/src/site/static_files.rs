//! Static files: open-file table lookup, the coding (`compress/` decides),
//! conditional requests, ranges and `multipart/byteranges`, with the body
//! handed to the output queue as a file region (sent by the I/O method
//! `static_io.rs` chooses for its size, in `body.rs`) or, for a compressed variant, as shared memory.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use memmap2::Mmap;
use tern_http::conditional::{self, Outcome, Validators};
use tern_http::path::Normalized;
use tern_http::range::{self, ByteRange, RangeDecision};
use tern_http::{response, Method, Request};

use super::listing;
use crate::compress::cache::Entry;
use crate::compress::{Choice, Compression, Policy, VARY};
use crate::error_log::{log, Level};
use crate::limits::Limits;
use crate::offload::{Task, Ticket};
use crate::open_files::{Identity, OpenFile};
use crate::reply::Reply;
use crate::resolve::{Found, ResolveError, Root, Symlinks};
use crate::static_io::{self, IoChoice, IoMethod, StaticFiles};
use crate::values::Origin;
use crate::worker::Worker;

const ALLOW: &[u8] = b"GET, HEAD, OPTIONS";

/// What static serving reads from the site and location that answer.
#[derive(Clone, Copy)]
pub struct Files<'a> {
    pub root: &'a Arc<Root>,
    pub static_files: &'a Settings,
    pub compression: &'a Compression,
    /// What the location compresses.
    pub policy: &'a Policy,
    /// A directory without an index file is listed.
    pub list: bool,
}

/// What static serving needs from the configuration, prepared once.
pub struct Settings {
    /// Whether opened files are mapped: some size class may use `mmap`, or
    /// the I/O pool asks the mapping which pages are in memory.
    maps: bool,
    charset: String,
    mime_types: Vec<(String, String)>,
    max_ranges: usize,
    /// The `multipart/byteranges` boundary, fixed per process.
    boundary: String,
    /// `(st_dev, st_ino)` of the configuration file the server runs with,
    /// when the root could lead to it (same device, or any symlink
    /// followed): never served, whatever name reaches it.
    config_file: Option<(u64, u64)>,
    /// `static.exclude_extensions`, lower case, without the dot.
    excluded: Vec<String>,
}

impl Settings {
    /// `config_file`: [`running_config`]'s answer.
    pub fn new(st: &StaticFiles, limits: &Limits, io_pool_threads: usize, config_file: Option<(u64, u64)>) -> Settings {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Settings {
            maps: matches!(st.io, IoChoice::Auto | IoChoice::Fixed(IoMethod::Mmap)) || io_pool_threads > 0,
            charset: st.charset.clone(),
            mime_types: st
                .mime_types
                .iter()
                .map(|(ext, ty)| (ext.trim_start_matches('.').to_ascii_lowercase(), ty.clone()))
                .collect(),
            max_ranges: limits.max_ranges,
            boundary: format!("tern-{:016x}", (seed as u64) ^ u64::from(std::process::id()).rotate_left(32)),
            config_file,
            excluded: st.exclude_extensions.iter().map(|e| e[1..].to_ascii_lowercase()).collect(),
        }
    }

    /// Is `stat` the running configuration file?
    fn is_config_file(&self, stat: &rustix::fs::Stat) -> bool {
        self.config_file == Some((stat.st_dev, stat.st_ino))
    }

    /// Is `name` (a file name or path) the source of a program, never
    /// sent as a file (`static.exclude_extensions`)? Asked when a path is
    /// resolved, not on table hits: only files that passed are kept there.
    fn is_excluded(&self, name: &[u8]) -> bool {
        let ext = extension(name);
        self.excluded.iter().any(|e| e.as_bytes().eq_ignore_ascii_case(ext))
    }

    pub fn content_type(&self, path: &[u8]) -> String {
        let ext = String::from_utf8_lossy(extension(path)).to_ascii_lowercase();
        let ty = self
            .mime_types
            .iter()
            .find(|(e, _)| *e == ext)
            .map(|(_, t)| t.as_str())
            .or_else(|| mime_guess::from_ext(&ext).first_raw())
            .unwrap_or("application/octet-stream");
        if ty.starts_with("text/") && !self.charset.is_empty() && !ty.contains("charset") {
            format!("{ty}; charset={}", self.charset)
        } else {
            ty.to_string()
        }
    }

    /// Builds the table entry for a freshly opened file; `rel_path` is
    /// its path relative to the root. A file that cannot be mapped (a FUSE
    /// file opened with `direct_io`, a special file system) is sent with
    /// `sendfile` instead of `mmap`.
    fn open_file(&self, file: File, stat: &rustix::fs::Stat, rel_path: Vec<u8>, policy: &Policy) -> OpenFile {
        let identity = Identity::of(stat);
        let mapping = if self.maps && identity.size > 0 {
            // SAFETY: the mapping is only ever read by the kernel (through
            // write/sendmsg, and `mincore` asks which pages are in memory),
            // never dereferenced in user space; a file truncated underneath
            // makes that write fail with EFAULT.
            unsafe { Mmap::map(&file) }.ok()
        } else {
            None
        };
        let etag = format!("\"{:x}.{:x}-{:x}\"", identity.mtime_sec, identity.mtime_nsec, identity.size);
        let last_modified = u64::try_from(identity.mtime_sec).unwrap_or(0);
        let content_type = self.content_type(&rel_path);
        let negotiable = policy.negotiable(&content_type, identity.size);
        let mut headers = Vec::with_capacity(160);
        response::header(&mut headers, "Content-Type", content_type.as_bytes());
        let last_modified_http = tern_http::date::format_http_date(last_modified);
        response::header(&mut headers, "Last-Modified", last_modified_http.as_bytes());
        response::header(&mut headers, "ETag", etag.as_bytes());
        headers.extend_from_slice(b"Accept-Ranges: bytes\r\n");
        if negotiable {
            headers.extend_from_slice(VARY);
        }
        OpenFile {
            file,
            size: identity.size,
            identity,
            mapping,
            etag: etag.into_bytes().into(),
            last_modified,
            last_modified_http: last_modified_http.into(),
            content_type: content_type.into(),
            headers: headers.into(),
            rel_path: rel_path.into(),
            negotiable,
            resident: AtomicBool::new(false),
        }
    }
}

/// Answers a request for a file under the document root; `w.path` holds
/// its normalised path. Returns the ticket to wait for when the path was
/// handed to the I/O pool to open (nothing is answered yet: the request is
/// answered again once `w.resolved` holds the result).
pub fn serve(
    site: Files<'_>,
    req: &Request<'_>,
    norm: Normalized,
    reply: &mut Reply<'_>,
    w: &mut Worker<'_>,
) -> Option<Arc<Ticket>> {
    // The key tells `dir/` (its index) from `dir` (a redirect).
    let rel_len = w.path.len();
    if norm.trailing_slash {
        w.path.push(b'/');
    }
    let mut revalidate = false;
    loop {
        let (file, fresh) = match open(site, req, reply, w, rel_len, norm.trailing_slash, revalidate) {
            Opened::File(file, fresh) => (file, fresh),
            Opened::Answered => return None,
            Opened::Waiting(ticket) => return Some(ticket),
        };
        match req.method {
            Method::Get | Method::Head => match site.compression.select(site.policy, site.root, req, w, &file, fresh) {
                // The table's entry is older than the file: look again.
                Choice::Changed if !revalidate => {
                    revalidate = true;
                    continue;
                }
                Choice::Changed | Choice::Identity => send_file(site, req, reply, w, &file),
                Choice::Compressed(entry) => send_variant(req, reply, &file, entry),
                Choice::NotAcceptable => not_acceptable(reply),
            },
            Method::Options => allow(reply, 200),
            _ => allow(reply, 405),
        }
        return None;
    }
}

/// What [`open`] found.
enum Opened {
    /// The open file, and whether it was resolved just now.
    File(Arc<OpenFile>, bool),
    /// The request was answered (redirect, 403, 404, …).
    Answered,
    /// The path is being resolved in the I/O pool.
    Waiting(Arc<Ticket>),
}

/// The extension of the last segment of `path` (after its last `.`; empty
/// when it has none).
fn extension(path: &[u8]) -> &[u8] {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    name.iter().rposition(|&b| b == b'.').map_or(&[], |i| &name[i + 1..])
}

/// The running configuration file's identity, if a request could reach
/// it: decided once at start, so a server whose configuration lies elsewhere
/// pays nothing per request.
pub fn running_config(origin: &Origin, root: &std::path::Path, symlinks: Symlinks) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::metadata(origin.path.as_ref()?).ok()?;
    let root = std::fs::metadata(root).ok()?;
    let reachable = file.dev() == root.dev() || symlinks == Symlinks::Any;
    reachable.then(|| (file.dev(), file.ino()))
}

/// The open file for the request's path (`w.path`, its first `rel_len`
/// bytes relative to the root), from the open-file table or resolved anew
/// (always when `revalidate`): on a reactor, by the I/O pool (the result
/// comes back in `w.resolved`), else here.
fn open(
    site: Files<'_>,
    req: &Request<'_>,
    reply: &mut Reply<'_>,
    w: &mut Worker<'_>,
    rel_len: usize,
    trailing_slash: bool,
    revalidate: bool,
) -> Opened {
    let id = site.root.id();
    let cached = match w.files.lookup(id, &w.path, w.now) {
        Some((file, true)) if !revalidate => {
            w.stats.open_file_hits.incr();
            return Opened::File(file, false);
        }
        cached => cached,
    };
    let found = match (w.resolved.take(), w.offload) {
        // The pool's answer for this request, answered again.
        (Some(found), _) => found,
        (None, Some(pool)) => {
            w.stats.open_file_misses.incr();
            let task = Task::Open { root: site.root.clone(), path: w.path.clone(), rel_len, trailing_slash };
            match pool.submit(task) {
                Ok(ticket) => {
                    w.stats.offloaded_opens.incr();
                    return Opened::Waiting(ticket);
                }
                Err(_) => site.root.find(&w.path[..rel_len], trailing_slash, &mut w.scratch),
            }
        }
        (None, None) => {
            w.stats.open_file_misses.incr();
            site.root.find(&w.path[..rel_len], trailing_slash, &mut w.scratch)
        }
    };
    match found {
        Ok(Found::File { stat, .. }) if site.static_files.is_config_file(&stat) => {
            w.files.remove(id, &w.path);
            reply.error(404);
            Opened::Answered
        }
        Ok(Found::File { index, .. })
            if site
                .static_files
                .is_excluded(index.map_or(&w.path[..rel_len], |i| site.root.index_name(i).as_bytes())) =>
        {
            w.files.remove(id, &w.path);
            reply.error(403);
            Opened::Answered
        }
        Ok(Found::File { file, stat, index }) => match cached {
            Some((old, _)) if old.identity == Identity::of(&stat) => {
                w.files.refresh(id, &w.path, w.now);
                Opened::File(old, true)
            }
            _ => {
                let mut rel_path = w.path[..rel_len].to_vec();
                if let Some(i) = index {
                    if !rel_path.is_empty() {
                        rel_path.push(b'/');
                    }
                    rel_path.extend_from_slice(site.root.index_name(i).as_bytes());
                }
                let entry = Arc::new(site.static_files.open_file(file, &stat, rel_path, site.policy));
                w.files.insert(id, &w.path, entry.clone(), w.now);
                w.stats.open_files.set(w.files.len() as u64);
                Opened::File(entry, true)
            }
        },
        Ok(Found::DirectoryWithoutSlash) => {
            w.files.remove(id, &w.path);
            let mut location = Vec::with_capacity(req.path.len() + 2);
            location.extend_from_slice(req.path.as_bytes());
            location.push(b'/');
            if let Some(q) = req.query {
                location.push(b'?');
                location.extend_from_slice(q.as_bytes());
            }
            reply.redirect(301, &location);
            Opened::Answered
        }
        Ok(Found::DirectoryWithoutIndex) => {
            w.files.remove(id, &w.path);
            if site.list {
                list(site.root, req, &w.path[..rel_len], reply);
            } else {
                reply.error(403);
            }
            Opened::Answered
        }
        Err(err) => {
            w.files.remove(id, &w.path);
            if let ResolveError::Unavailable(e) = &err {
                log!(Level::Error, "cannot open {:?}: {e}", req.path);
            }
            reply.error(err.status());
            Opened::Answered
        }
    }
}

/// Lists the directory `rel` (HTML, or JSON for a client that prefers
/// it). Read on the worker: a listing is rare, and asked for.
fn list(root: &Root, req: &Request<'_>, rel: &[u8], reply: &mut Reply<'_>) {
    let entries = match root.open_dir(rel).map_err(|e| e.status()).and_then(|dir| listing::read(dir).map_err(|_| 500)) {
        Ok(entries) => entries,
        Err(status) => return reply.error(status),
    };
    let (content_type, body) = if listing::wants_json(req.values("accept")) {
        ("application/json", listing::json(&entries))
    } else {
        let mut url = Vec::with_capacity(rel.len() + 2);
        url.push(b'/');
        url.extend_from_slice(rel);
        if !rel.is_empty() {
            url.push(b'/');
        }
        ("text/html; charset=utf-8", listing::html(&url, &entries))
    };
    reply.head(200);
    reply.header("Content-Type", content_type.as_bytes());
    reply.header("Vary", b"Accept");
    reply.header("Cache-Control", b"no-cache");
    reply.end_head(body.len() as u64);
    reply.body(&body);
}

/// A compressed variant from memory: `200`, or `304`/`412` by its own
/// validators. (Range requests never get here: they get identity.)
fn send_variant(req: &Request<'_>, reply: &mut Reply<'_>, file: &OpenFile, entry: Arc<Entry>) {
    let validators = Validators { etag: &entry.etag, last_modified: entry.last_modified };
    match conditional::evaluate(req, &validators) {
        Outcome::Proceed => {}
        Outcome::NotModified => return not_modified(reply, &entry.etag, file),
        Outcome::PreconditionFailed => return reply.error(412),
    }
    reply.head(200);
    reply.raw(&entry.headers);
    reply.end_head(entry.body().len() as u64);
    reply.body_shared(entry);
}

/// `304` for the selected representation: its ETag, the file's date, and
/// `Vary` when the representation was negotiated (nginx drops it; a cache
/// needs it to know the 304 is about one variant).
fn not_modified(reply: &mut Reply<'_>, etag: &[u8], file: &OpenFile) {
    reply.head(304);
    reply.header("ETag", etag);
    reply.header("Last-Modified", file.last_modified_http.as_bytes());
    if file.negotiable {
        reply.raw(VARY);
    }
    reply.end_head(0);
}

/// `406`: the client refuses identity (`identity;q=0` or `*;q=0`) and
/// accepts no coding tern can make for this negotiated file.
fn not_acceptable(reply: &mut Reply<'_>) {
    reply.head(406);
    reply.raw(VARY);
    reply.header("Content-Type", b"text/html; charset=utf-8");
    reply.end_head(response::error_page_len(406) as u64);
    if reply.sends_body() {
        response::error_page(reply.buf(), 406);
    }
}

/// `200` to `OPTIONS`, or `405`: with the methods a file allows.
pub fn allow(reply: &mut Reply<'_>, status: u16) {
    reply.head(status);
    reply.header("Allow", ALLOW);
    if status == 405 {
        reply.header("Content-Type", b"text/html; charset=utf-8");
        reply.end_head(response::error_page_len(405) as u64);
        if reply.sends_body() {
            response::error_page(reply.buf(), 405);
        }
    } else {
        reply.end_head(0);
    }
}

fn send_file(site: Files<'_>, req: &Request<'_>, reply: &mut Reply<'_>, w: &mut Worker<'_>, file: &Arc<OpenFile>) {
    let validators = Validators { etag: &file.etag, last_modified: file.last_modified };
    match conditional::evaluate(req, &validators) {
        Outcome::Proceed => {}
        Outcome::NotModified => return not_modified(reply, &file.etag, file),
        Outcome::PreconditionFailed => return reply.error(412),
    }
    let settings = &site.static_files;
    let method = w.io.method_for(file);
    let decision = match req.fields.range {
        Some(value) if conditional::range_applies(req, &validators) => {
            range::evaluate(value, file.size, settings.max_ranges)
        }
        _ => RangeDecision::Full,
    };
    match decision {
        RangeDecision::Full => {
            reply.head(200);
            reply.raw(&file.headers);
            reply.end_head(file.size);
            count_body(reply, w, method);
            reply.body_file(file, 0, file.size, method);
        }
        RangeDecision::Unsatisfiable => {
            reply.head(416);
            let buf = reply.buf();
            buf.extend_from_slice(b"Content-Range: bytes */");
            buf.extend_from_slice(itoa::Buffer::new().format(file.size).as_bytes());
            buf.extend_from_slice(b"\r\n");
            reply.header("Content-Type", b"text/html; charset=utf-8");
            reply.end_head(response::error_page_len(416) as u64);
            if reply.sends_body() {
                response::error_page(reply.buf(), 416);
            }
        }
        RangeDecision::Partial(ranges) if ranges.len() == 1 => {
            let r = ranges[0];
            reply.head(206);
            reply.raw(&file.headers);
            response::content_range(reply.buf(), r.start, r.end, file.size);
            reply.end_head(r.len());
            count_body(reply, w, method);
            reply.body_file(file, r.start, r.len(), method);
        }
        RangeDecision::Partial(ranges) => {
            count_body(reply, w, method);
            multipart(settings, reply, w, file, &ranges, method);
        }
    }
}

/// Counts a file body by the method that sends it.
fn count_body(reply: &Reply<'_>, w: &Worker<'_>, method: IoMethod) {
    if reply.sends_body() {
        w.stats.file_bodies[static_io::index(method)].incr();
    }
}

/// `206` with `multipart/byteranges` (RFC 9110 §14.6).
fn multipart(
    settings: &Settings,
    reply: &mut Reply<'_>,
    w: &mut Worker<'_>,
    file: &Arc<OpenFile>,
    ranges: &[ByteRange],
    method: IoMethod,
) {
    // Part heads are formatted first, so the total length is known.
    let heads = &mut w.scratch;
    heads.clear();
    let mut ends = Vec::with_capacity(ranges.len());
    for r in ranges {
        let _ = write!(heads, "\r\n--{}\r\nContent-Type: {}\r\n", settings.boundary, file.content_type);
        response::content_range(heads, r.start, r.end, file.size);
        heads.extend_from_slice(b"\r\n");
        ends.push(heads.len());
    }
    let closing = format!("\r\n--{}--\r\n", settings.boundary);
    let total = heads.len() as u64 + ranges.iter().map(ByteRange::len).sum::<u64>() + closing.len() as u64;
    reply.head(206);
    let content_type = format!("multipart/byteranges; boundary={}", settings.boundary);
    reply.header("Content-Type", content_type.as_bytes());
    reply.header("Last-Modified", file.last_modified_http.as_bytes());
    reply.header("ETag", &file.etag);
    reply.header("Accept-Ranges", b"bytes");
    if file.negotiable {
        reply.raw(VARY);
    }
    reply.end_head(total);
    let mut start = 0;
    for (r, end) in ranges.iter().zip(ends) {
        reply.body(&w.scratch[start..end]);
        reply.body_file(file, r.start, r.len(), method);
        start = end;
    }
    reply.body(closing.as_bytes());
}
