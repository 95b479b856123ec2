//! CGI/1.1 (RFC 3875): which path names a program, the meta-variables it
//! gets, starting it, and turning what it prints into the response.
//!
//! A program runs in its own process group (so a timeout or an abandoned
//! request kills everything it started), reads its request body from a
//! sealed in-memory file (no pipe to feed, no deadlock), writes its output to
//! a non-blocking pipe that the engine watches like a socket, and its
//! standard error goes straight to the error log. Processes are reaped
//! without blocking; anything that outlives its output is killed, and
//! when a request ends, what the program left in its group is too
//! (`cgi.kill_group`).
//!
//! A response is complete only when its program exited with status 0:
//! after the output ends, the last bytes (the chunked terminator, or the
//! last byte of a `Content-Length` body) wait for the exit status, read
//! without reaping through a pidfd the engine watches. A program that
//! crashed or failed after its head gets its response cut short and the
//! connection closed, so the client can tell.

pub mod config;

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::fs::FileType;
use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
use tern_http::host::without_port;
use tern_http::request::TargetForm;
use tern_http::response::field;
use tern_http::{Method, Request, Version};

use crate::body::OutQueue;
use crate::error_log::{log, Level};
use crate::privileges;
use crate::reply::{Framing, Params, Reply};
use crate::resolve::{ResolveError, Root};
use crate::spool::Spool;
use crate::sys;
use crate::values::Origin;
use crate::worker::Wait;
use config::Cgi;

/// Bytes kept in front of a chunk being read for its size line
/// (`0000ffff\r\n`).
const CHUNK_SIZE_ROOM: usize = 10;
/// Largest response head a program may print.
const MAX_HEAD: usize = 16 * 1024;
/// Response fields a program may not set: framing and connection
/// management belong to the server.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "date",
    "server",
];

/// The `[cgi]` configuration, prepared once.
pub struct Settings {
    /// Normalised (relative) directory prefixes, e.g. `cgi-bin`.
    prefixes: Vec<Vec<u8>>,
    /// Extensions without the dot.
    extensions: Vec<String>,
    interpreters: Vec<(String, PathBuf)>,
    /// Passed-through and fixed variables, before the meta-variables.
    pass_env: Vec<(OsString, OsString)>,
    pub timeout: Duration,
    pub max_processes: usize,
    /// The server is root and `cgi.allow_root` is off.
    as_root_refused: bool,
}

/// A program found for a request path.
pub struct Script {
    /// Length of the normalised path that names the program.
    name_len: usize,
    interpreter: Option<PathBuf>,
}

impl Script {
    /// The program's part of `rel`, the normalised path it was found for
    /// (the rest is `PATH_INFO`), and the interpreter it is run by, if
    /// any: what `tern route` shows.
    pub fn program<'r>(&self, rel: &'r [u8]) -> (&'r [u8], Option<&Path>) {
        (&rel[..self.name_len], self.interpreter.as_deref())
    }
}

/// What a start can know to be wrong before any program runs: a CGI
/// directory set in the configuration that is not a directory under the
/// root, an interpreter set there that is not an executable file. The
/// defaults (`/cgi-bin`, python3, perl, sh, php-cgi) may be absent: nothing
/// is run from a missing directory, and a program whose default
/// interpreter is missing is answered `500` alone.
pub fn check(c: &Cgi, root: &Root, origin: &Origin) -> std::io::Result<()> {
    let defaults = Cgi::default();
    let fail = |key: &str, what: String| std::io::Error::other(format!("{}: {what}", origin.at("cgi", key)));
    for dir in c.directories.iter().filter(|d| !defaults.directories.contains(d)) {
        match root.probe(dir.trim_matches('/').as_bytes()) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {}
            Ok(_) => return Err(fail("directories", format!("{dir} is not a directory under the document root"))),
            Err(ResolveError::NotFound) => {
                return Err(fail("directories", format!("{dir} does not exist under the document root")))
            }
            Err(e) => {
                return Err(fail("directories", format!("{dir} cannot be opened under the document root: {e:?}")))
            }
        }
    }
    for (ext, path) in c.interpreters.iter().filter(|(e, p)| defaults.interpreters.get(*e) != Some(*p)) {
        let usable = std::fs::metadata(path).and_then(|m| {
            if !m.is_file() {
                return Err(std::io::Error::other("not a file"));
            }
            rustix::fs::access(path, rustix::fs::Access::EXEC_OK).map_err(std::io::Error::from)
        });
        if let Err(e) = usable {
            return Err(fail("interpreters", format!("{ext} = {path}: {e}")));
        }
    }
    Ok(())
}

impl Settings {
    /// Are programs refused because the server is root? (A FastCGI
    /// backend started by the server asks the same.)
    pub fn refuses_as_root(&self) -> bool {
        self.as_root_refused
    }

    pub fn new(c: &Cgi) -> Settings {
        Settings {
            prefixes: c.directories.iter().map(|d| d.trim_matches('/').as_bytes().to_vec()).collect(),
            extensions: c.extensions.iter().map(|e| e.trim_start_matches('.').to_string()).collect(),
            interpreters: c
                .interpreters
                .iter()
                .map(|(e, i)| (e.trim_start_matches('.').to_string(), i.into()))
                .collect(),
            pass_env: c
                .pass_env
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
                .chain(c.env.iter().map(|(k, v)| (k.into(), v.into())))
                .collect(),
            timeout: c.timeout.0,
            max_processes: c.max_processes,
            as_root_refused: privileges::is_root() && !c.allow_root,
        }
    }

    fn is_program_name(&self, segment: &[u8]) -> bool {
        self.extensions.iter().any(|e| {
            segment.len() > e.len() + 1
                && segment.ends_with(e.as_bytes())
                && segment[segment.len() - e.len() - 1] == b'.'
        })
    }

    /// Splits a normalised path into a program and its `PATH_INFO`, asking
    /// the file system (through `root`) only for names that could be
    /// programs. `None`: not a CGI path, serve it as a file. Nothing under a
    /// CGI directory is ever served as a file (its source would leak).
    pub fn locate(&self, root: &Root, rel: &[u8]) -> Option<Result<Script, ResolveError>> {
        let prefix = self
            .prefixes
            .iter()
            .find(|p| rel == p.as_slice() || (rel.starts_with(p) && rel.get(p.len()) == Some(&b'/')));
        for end in memchr::memchr_iter(b'/', rel).chain(std::iter::once(rel.len())) {
            let candidate = &rel[..end];
            let name = candidate.rsplit(|&b| b == b'/').next().unwrap_or(candidate);
            let eligible = prefix.is_some_and(|p| end > p.len()) || self.is_program_name(name);
            if !eligible {
                continue;
            }
            return Some(match root.probe(candidate) {
                Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
                    FileType::Directory if prefix.is_some() => continue,
                    FileType::Directory => return None,
                    FileType::RegularFile => {
                        let ext = name.rsplit(|&b| b == b'.').next().unwrap_or_default();
                        let interpreter =
                            self.interpreters.iter().find(|(e, _)| e.as_bytes() == ext).map(|(_, i)| i.clone());
                        if interpreter.is_none() && stat.st_mode & 0o111 == 0 {
                            Err(ResolveError::Forbidden)
                        } else {
                            Ok(Script { name_len: end, interpreter })
                        }
                    }
                    _ => Err(ResolveError::Forbidden),
                },
                Err(e) => Err(e),
            });
        }
        prefix.map(|p| Err(if rel.len() == p.len() { ResolveError::Forbidden } else { ResolveError::NotFound }))
    }
}

/// What a request needs to start a program, beyond the request itself.
pub struct Launch<'a> {
    pub script: Script,
    /// The directory the request's location serves, as an absolute path:
    /// where the program is run from, `DOCUMENT_ROOT`.
    pub root: &'a Path,
    /// The normalised path (the program is its first `script.name_len`
    /// bytes) and whether it ended in `/`.
    pub rel: &'a [u8],
    pub trailing_slash: bool,
    pub body: Spool,
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// Why a program could not be started.
pub enum StartError {
    /// `403`: the server is root and `cgi.allow_root` is off.
    AsRoot,
    /// `503`: at `cgi.max_processes`.
    Busy,
    /// `500`: it could not be spawned.
    Failed(std::io::Error),
}

/// Starts the program for `req`.
pub fn start(
    settings: &Settings,
    running: &std::sync::atomic::AtomicUsize,
    req: &Request<'_>,
    l: &Launch<'_>,
) -> Result<Running, StartError> {
    if settings.as_root_refused {
        return Err(StartError::AsRoot);
    }
    if running.fetch_add(1, Ordering::AcqRel) >= settings.max_processes {
        running.fetch_sub(1, Ordering::AcqRel);
        return Err(StartError::Busy);
    }
    spawn(settings, req, l).map_err(|e| {
        running.fetch_sub(1, Ordering::AcqRel);
        StartError::Failed(e)
    })
}

fn spawn(settings: &Settings, req: &Request<'_>, l: &Launch<'_>) -> std::io::Result<Running> {
    let name = &l.rel[..l.script.name_len];
    let program = l.root.join(OsStr::from_bytes(name));
    let mut cmd = match &l.script.interpreter {
        Some(interpreter) => {
            let mut c = Command::new(interpreter);
            c.arg(&program);
            c
        }
        None => Command::new(&program),
    };
    cmd.env_clear().envs(settings.pass_env.iter().map(|(k, v)| (k, v)));
    let name_len = l.script.name_len;
    let meta = Meta {
        root: l.root.as_os_str().as_bytes(),
        script_name: &l.rel[..name_len],
        filename: program.as_os_str().as_bytes(),
        path_info: &l.rel[name_len..],
        trailing_slash: l.trailing_slash,
        body_len: (!l.body.is_empty() || req.has_body()).then_some(l.body.len()),
        peer: l.peer,
        local: l.local,
    };
    meta_variables(req, &meta, &mut |k, v| {
        cmd.env(OsStr::from_bytes(k), OsStr::from_bytes(v));
    });
    if let Some(dir) = program.parent() {
        cmd.current_dir(dir);
    }
    // Its own process group, so a timeout or an abandoned request kills
    // everything it started. (std spawns with posix_spawn here: no fork of
    // the server's address space.)
    cmd.process_group(0);
    cmd.stdin(body_stdin(&l.body)?).stdout(Stdio::piped()).stderr(crate::error_log::for_child());
    let mut child = sys::with_no_signals_blocked(|| cmd.spawn())?;
    let stdout: OwnedFd = child.stdout.take().expect("stdout was piped").into();
    rustix::io::ioctl_fionbio(&stdout, true)?;
    let pid = Pid::from_raw(child.id() as i32).expect("a child has a pid");
    let nph = name.rsplit(|&b| b == b'/').next().is_some_and(|n| n.starts_with(b"nph-"));
    Ok(Running {
        pid,
        stdout,
        may_read: false,
        eof_pending: false,
        response: Response::new(req, nph),
        exit_fd: None,
        started: Instant::now(),
        timeout: settings.timeout,
    })
}

/// The request body as the program's standard input: the temporary file
/// it was spooled to, else an in-memory file, or `/dev/null` when there is
/// none.
fn body_stdin(body: &Spool) -> std::io::Result<Stdio> {
    if body.is_empty() {
        return Ok(Stdio::null());
    }
    let file = match &body.file {
        Some(spooled) => spooled.try_clone()?,
        None => {
            let fd = rustix::fs::memfd_create("tern-cgi-body", rustix::fs::MemfdFlags::CLOEXEC)?;
            let mut file = std::fs::File::from(fd);
            file.write_all(&body.mem)?;
            file
        }
    };
    rustix::fs::seek(&file, rustix::fs::SeekFrom::Start(0))?;
    Ok(Stdio::from(file))
}

/// What the meta-variables say about the script, beyond the request.
pub struct Meta<'a> {
    /// `DOCUMENT_ROOT`, and the base of `PATH_TRANSLATED`.
    pub root: &'a [u8],
    /// The script's normalised path, without the leading `/`.
    pub script_name: &'a [u8],
    /// `SCRIPT_FILENAME`.
    pub filename: &'a [u8],
    /// The rest of the path (`/…`, or empty), and whether the request
    /// path ended in `/`.
    pub path_info: &'a [u8],
    pub trailing_slash: bool,
    /// `CONTENT_LENGTH`, when the request has a body.
    pub body_len: Option<u64>,
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// RFC 3875 §4.1 meta-variables, plus the customary `REQUEST_URI`,
/// `SCRIPT_FILENAME`, `DOCUMENT_ROOT`, `REMOTE_PORT`, `SERVER_ADDR` and
/// `REDIRECT_STATUS` (which php-cgi requires), each handed to `set`: the
/// one builder for CGI (environment) and FastCGI (`PARAMS`).
pub fn meta_variables(req: &Request<'_>, m: &Meta<'_>, set: &mut dyn FnMut(&[u8], &[u8])) {
    let mut scratch = Vec::with_capacity(m.root.len() + m.script_name.len() + m.path_info.len() + 2);
    set(b"GATEWAY_INTERFACE", b"CGI/1.1");
    set(b"SERVER_SOFTWARE", concat!("tern/", env!("CARGO_PKG_VERSION")).as_bytes());
    set(b"SERVER_PROTOCOL", req.request_line.rsplit(' ').next().unwrap_or("HTTP/1.1").as_bytes());
    set(b"REQUEST_METHOD", req.method_token.as_bytes());
    let uri = match req.form {
        TargetForm::Absolute => {
            let after_scheme = req.target.split_once("://").map_or(req.target, |(_, r)| r);
            after_scheme.find('/').map_or("/", |i| &after_scheme[i..])
        }
        _ => req.target,
    };
    set(b"REQUEST_URI", uri.split('#').next().unwrap_or(uri).as_bytes());
    scratch.push(b'/');
    scratch.extend_from_slice(m.script_name);
    set(b"SCRIPT_NAME", &scratch);
    set(b"SCRIPT_FILENAME", m.filename);
    set(b"DOCUMENT_ROOT", m.root);
    if !m.path_info.is_empty() {
        scratch.clear();
        scratch.extend_from_slice(m.path_info);
        if m.trailing_slash {
            scratch.push(b'/');
        }
        set(b"PATH_INFO", &scratch);
        scratch.splice(0..0, m.root.iter().copied());
        set(b"PATH_TRANSLATED", &scratch);
    }
    set(b"QUERY_STRING", req.query.unwrap_or("").as_bytes());
    let mut text = [0u8; IP_TEXT];
    set(b"REMOTE_ADDR", ip_text(m.peer.ip(), &mut text));
    set(b"REMOTE_PORT", itoa::Buffer::new().format(m.peer.port()).as_bytes());
    let local = ip_text(m.local.ip(), &mut text);
    match req.host.filter(|h| !h.is_empty()) {
        Some(host) => set(b"SERVER_NAME", without_port(host.as_bytes())),
        None => set(b"SERVER_NAME", local),
    }
    set(b"SERVER_ADDR", local);
    set(b"SERVER_PORT", itoa::Buffer::new().format(m.local.port()).as_bytes());
    set(b"REDIRECT_STATUS", b"200");
    if let Some(n) = m.body_len {
        set(b"CONTENT_LENGTH", itoa::Buffer::new().format(n).as_bytes());
    }
    if let Some(ct) = req.fields.content_type {
        set(b"CONTENT_TYPE", ct);
    }
    // HTTP_* for each field, repeated fields joined in order. Never `Proxy`
    // (httpoxy: it would become HTTP_PROXY, which many clients read as
    // their proxy); never names with `_` (they would collide with the `-`
    // spelling); never credentials.
    let passed = |n: &str| {
        !(n.contains('_')
            || n.eq_ignore_ascii_case("proxy")
            || n.eq_ignore_ascii_case("content-length")
            || n.eq_ignore_ascii_case("content-type")
            || n.eq_ignore_ascii_case("authorization")
            || n.eq_ignore_ascii_case("proxy-authorization"))
    };
    let mut value = Vec::new();
    for (i, h) in req.headers.iter().enumerate() {
        let n = h.name;
        if !passed(n) || req.headers[..i].iter().any(|e| e.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        scratch.clear();
        scratch.extend_from_slice(b"HTTP_");
        scratch.extend(n.bytes().map(|b| if b == b'-' { b'_' } else { b.to_ascii_uppercase() }));
        value.clear();
        value.extend_from_slice(h.value.trim_ascii());
        for later in req.headers[i + 1..].iter().filter(|e| e.name.eq_ignore_ascii_case(n)) {
            value.extend_from_slice(if n.eq_ignore_ascii_case("cookie") { b"; " } else { b", " });
            value.extend_from_slice(later.value.trim_ascii());
        }
        set(&scratch, &value);
    }
}

/// Room for an IP address as text (an IPv4-mapped IPv6 address is the
/// longest, 45 bytes).
const IP_TEXT: usize = 48;

/// `ip` as text, formatted into `buf` (a meta-variable per request, so
/// no allocation).
fn ip_text(ip: std::net::IpAddr, buf: &mut [u8; IP_TEXT]) -> &[u8] {
    let mut rest = &mut buf[..];
    let _ = write!(rest, "{ip}");
    let len = IP_TEXT - rest.len();
    &buf[..len]
}

/// `n` in hex and CRLF: a chunk-size line, formatted into `buf`.
fn chunk_size_line(mut n: usize, buf: &mut [u8; 18]) -> &[u8] {
    buf[16..].copy_from_slice(b"\r\n");
    let mut start = 16;
    loop {
        start -= 1;
        buf[start] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &buf[start..];
        }
    }
}

enum Output {
    /// Collecting the response head the program prints.
    Head(Vec<u8>),
    /// Relaying the body.
    Body(Framing, u64),
    /// The output ended; waiting for the exit status to end the framing.
    Exiting(Framing, u64),
    /// Finished.
    Done,
}

/// What a gateway (a CGI program, a FastCGI application) prints, turned
/// into the response (RFC 3875 §6): its head checked and rewritten (Status,
/// Location, local redirects; an invalid field refuses the whole response),
/// its body framed for the client.
pub struct Response {
    /// `nph-` programs print the whole response, status line included.
    nph: bool,
    head_only: bool,
    http10: bool,
    output: Output,
    /// The status sent (0 until the head is sent).
    pub status: u16,
    /// Body bytes relayed.
    pub body_bytes: u64,
    /// The last byte of a `Content-Length` body, sent once the gateway
    /// ended cleanly.
    held: Option<u8>,
    /// Trailer fields the body ends with ([`Response::end_with_trailers`]).
    trailers: Option<Trailers>,
}

/// Trailer fields, as the response's framing carries them.
enum Trailers {
    /// A chunked body's: lines of its last chunk, which `finish` writes.
    Lines(Vec<u8>),
    /// An HTTP/2 stream's closing `HEADERS`, kept until the session takes
    /// them.
    Fields(http::HeaderMap),
}

/// A running program and the state of its output.
pub struct Running {
    pid: Pid,
    stdout: OwnedFd,
    /// Edge-triggered readiness of `stdout`, as for sockets in `conn/transport.rs`.
    may_read: bool,
    eof_pending: bool,
    pub response: Response,
    /// A pidfd, readable once the program exits (while waiting for it).
    exit_fd: Option<OwnedFd>,
    started: Instant,
    /// `cgi.timeout` of the site that started it.
    timeout: Duration,
}

/// What relaying found.
pub enum Pump {
    /// Nothing to read now: wait for the pipe.
    Wait,
    /// Response bytes were queued.
    Progress,
    /// The program's output ended but it has not exited yet: watch
    /// [`Running::exit_fd`] and pump again when it is readable.
    AwaitExit,
    /// The program's output ended; `keep_alive` says whether the response
    /// was complete and framed so the connection can be reused.
    Done { keep_alive: bool },
    /// A local redirect (RFC 3875 §6.2.2): answer `GET path` instead.
    Redirect(Vec<u8>),
    /// Nothing was sent yet and the program failed: answer this status.
    Fail(u16),
}

impl Running {
    pub fn stdout(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stdout.as_fd()
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Whether the output pipe may have bytes (or its end) to read.
    pub fn readable(&self) -> bool {
        self.may_read
    }

    /// The descriptor whose readiness moves the program's output on: the
    /// pidfd while waiting for the exit, else the pipe.
    pub fn watched(&self) -> std::os::fd::BorrowedFd<'_> {
        self.exit_fd.as_ref().map_or(self.stdout.as_fd(), |fd| fd.as_fd())
    }

    /// What a blocking engine waits on: the pidfd while waiting for the
    /// exit, else the pipe until it may be read.
    pub fn wait(&self) -> Option<(std::os::fd::BorrowedFd<'_>, Wait)> {
        let read = Wait { read: true, write: false };
        match &self.exit_fd {
            Some(fd) => Some((fd.as_fd(), read)),
            None => (!self.may_read).then(|| (self.stdout.as_fd(), read)),
        }
    }

    /// The pipe may have become readable (or closed).
    pub fn on_ready(&mut self, readable: bool, closed: bool) {
        self.may_read |= readable || closed;
        self.eof_pending |= closed;
    }

    /// Whether the program has run past `timeout`.
    pub fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.started) > self.timeout
    }

    /// Reads what the program printed and queues response bytes (reading at
    /// most `chunk` bytes at a time); `params` shape the response head.
    pub fn pump(&mut self, out: &mut OutQueue, params: &Params<'_>, chunk: usize) -> Pump {
        if !self.may_read {
            return Pump::Wait;
        }
        match &mut self.response.output {
            Output::Head(head) => {
                head.reserve(chunk.min(MAX_HEAD));
                let spare = head.capacity() - head.len();
                let n = match read(&self.stdout, head) {
                    Ok(n) => n,
                    Err(e) if sys::would_block(&e) => {
                        self.may_read = false;
                        return Pump::Wait;
                    }
                    Err(_) => return Pump::Fail(502),
                };
                if n < spare && !self.eof_pending {
                    self.may_read = false;
                }
                if n == 0 {
                    self.may_read = false;
                    return self.response.end(out);
                }
                self.response.on_head(out, params)
            }
            Output::Body(..) => self.relay(out, chunk),
            Output::Exiting(..) => self.ended(out),
            Output::Done => Pump::Done { keep_alive: false },
        }
    }

    /// Reads body bytes from the program straight into the output buffer
    /// and frames them there.
    fn relay(&mut self, out: &mut OutQueue, chunk: usize) -> Pump {
        let (at, room) = self.response.body_room(out);
        out.buf.reserve(chunk);
        let spare = out.buf.capacity() - out.buf.len();
        let n = match read(&self.stdout, &mut out.buf) {
            Ok(n) => n,
            Err(e) => {
                out.buf.truncate(at);
                if sys::would_block(&e) {
                    self.may_read = false;
                    return Pump::Wait;
                }
                return self.ended(out);
            }
        };
        if n < spare && !self.eof_pending {
            self.may_read = false;
        }
        if n == 0 {
            out.buf.truncate(at);
            return self.ended(out);
        }
        self.response.frame(out, at, room);
        out.commit_buf();
        Pump::Progress
    }

    /// The output ended: close the framing once the exit status is known.
    fn ended(&mut self, out: &mut OutQueue) -> Pump {
        let r = &self.response;
        let (framing, remaining) = match r.output {
            Output::Body(f, r) | Output::Exiting(f, r) => (f, r),
            _ => return Pump::Done { keep_alive: false },
        };
        let waits = !r.head_only
            && match framing {
                // A cut can still be told: no last chunk, a reset stream.
                Framing::Chunked | Framing::Stream => true,
                Framing::Length(_) => remaining == 0 && r.held.is_some(),
                Framing::Close => false,
            };
        if !waits {
            // Nothing left that could tell a client the response is cut.
            return self.finish(out, framing, remaining, true);
        }
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        match waitid(WaitId::Pid(self.pid), options) {
            Ok(Some(status)) => {
                let clean = status.exit_status() == Some(0);
                if !clean {
                    log!(Level::Warn, "CGI program {}; its response was cut short", describe(&status));
                }
                self.finish(out, framing, remaining, clean)
            }
            Ok(None) => {
                // From now on readiness is the pidfd's.
                self.may_read = false;
                self.response.output = Output::Exiting(framing, remaining);
                if self.exit_fd.is_none() {
                    match rustix::process::pidfd_open(self.pid, rustix::process::PidfdFlags::empty()) {
                        Ok(fd) => self.exit_fd = Some(fd),
                        // No pidfd: the output's end must do.
                        Err(_) => return self.finish(out, framing, remaining, true),
                    }
                    return Pump::AwaitExit;
                }
                Pump::Wait
            }
            // Already reaped, or not ours: nothing tells it went wrong.
            Err(_) => self.finish(out, framing, remaining, true),
        }
    }

    /// The descriptor to watch after [`Pump::AwaitExit`].
    pub fn exit_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.exit_fd.as_ref().map(|fd| fd.as_fd())
    }

    /// Closes the framing (see [`Response::finish`]); the pidfd is done.
    fn finish(&mut self, out: &mut OutQueue, framing: Framing, remaining: u64, clean: bool) -> Pump {
        self.exit_fd = None;
        self.response.finish(out, framing, remaining, clean)
    }
}

impl Response {
    pub fn new(req: &Request<'_>, nph: bool) -> Response {
        Response {
            nph,
            head_only: req.method == Method::Head,
            http10: req.version == Version::Http10,
            output: Output::Head(Vec::new()),
            status: 0,
            body_bytes: 0,
            held: None,
            trailers: None,
        }
    }

    /// Whether the response head has been queued.
    pub fn head_sent(&self) -> bool {
        self.status != 0
    }

    /// Takes bytes the gateway printed, copying them into `out`.
    pub fn feed(&mut self, out: &mut OutQueue, params: &Params<'_>, data: &[u8]) -> Pump {
        // A whole head in the first bytes (a FastCGI reply's first record,
        // as a rule) is answered from where it lies, not gathered first.
        if matches!(&self.output, Output::Head(head) if head.is_empty()) && !self.nph {
            if let Some(ends) = find_head_end(data) {
                return self.answer_head(out, params, data, ends);
            }
        }
        match &mut self.output {
            Output::Head(head) => {
                head.extend_from_slice(data);
                self.on_head(out, params)
            }
            Output::Body(..) => {
                let (at, room) = self.body_room(out);
                out.buf.extend_from_slice(data);
                self.frame(out, at, room);
                out.commit_buf();
                Pump::Progress
            }
            Output::Exiting(..) | Output::Done => Pump::Progress,
        }
    }

    /// The gateway's output ended, cleanly: close the framing (or fail,
    /// when not even the head arrived).
    pub fn end(&mut self, out: &mut OutQueue) -> Pump {
        match self.output {
            Output::Head(_) => {
                log!(Level::Warn, "gateway output ended without a complete response head");
                Pump::Fail(502)
            }
            Output::Body(f, r) | Output::Exiting(f, r) => self.finish(out, f, r, true),
            Output::Done => Pump::Done { keep_alive: false },
        }
    }

    /// As [`Response::end`], with trailer fields (checked and filtered by
    /// the caller): written in the last chunk of a chunked body, or kept
    /// for the stream's closing `HEADERS` ([`Response::take_trailers`]);
    /// a body framed otherwise has no place for them, and they are
    /// dropped (RFC 9112 §7.1.2 allows it).
    pub fn end_with_trailers(&mut self, out: &mut OutQueue, trailers: &[Field<'_>]) -> Pump {
        let framing = match self.output {
            Output::Body(f, _) | Output::Exiting(f, _) if !self.head_only && !trailers.is_empty() => Some(f),
            _ => None,
        };
        self.trailers = match framing {
            Some(Framing::Chunked) => {
                let mut lines = Vec::new();
                for (name, value) in trailers {
                    field(&mut lines, name, value);
                }
                Some(Trailers::Lines(lines))
            }
            // Lower-cased as HTTP/2 wants (`HeaderName` does).
            Some(Framing::Stream) => Some(Trailers::Fields(
                trailers
                    .iter()
                    .filter_map(|(name, value)| {
                        Some((http::HeaderName::from_bytes(name).ok()?, http::HeaderValue::from_bytes(value).ok()?))
                    })
                    .collect(),
            )),
            _ => None,
        };
        self.end(out)
    }

    /// The trailer fields kept for an HTTP/2 stream, once.
    pub fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        match self.trailers.take() {
            Some(Trailers::Fields(fields)) if !fields.is_empty() => Some(fields),
            _ => None,
        }
    }

    /// The output broke off mid-body: the response cannot be completed,
    /// so the connection closes after what was relayed.
    pub fn abandon(&mut self) -> Pump {
        self.output = Output::Done;
        Pump::Done { keep_alive: false }
    }

    /// Handles the bytes collected so far of the head.
    fn on_head(&mut self, out: &mut OutQueue, params: &Params<'_>) -> Pump {
        let Output::Head(head) = &mut self.output else { unreachable!("on_head after the head") };
        let head = std::mem::take(head);
        if self.nph {
            // Relayed untouched; the program frames its own response, so
            // the connection ends with it.
            self.status = parse_nph_status(&head).unwrap_or(200);
            out.buf.extend_from_slice(&head);
            out.commit_buf();
            self.body_bytes += head.len() as u64;
            let framing = if params.stream { Framing::Stream } else { Framing::Close };
            self.output = Output::Body(framing, 0);
            return Pump::Progress;
        }
        let Some(ends) = find_head_end(&head) else {
            if head.len() > MAX_HEAD {
                log!(Level::Warn, "gateway response head larger than {MAX_HEAD} bytes");
                return Pump::Fail(502);
            }
            self.output = Output::Head(head);
            return Pump::Progress;
        };
        self.answer_head(out, params, &head, ends)
    }

    /// Answers the complete head in `head[..end]` (checked, rewritten), and
    /// relays the body bytes from `body_start` on.
    fn answer_head(
        &mut self,
        out: &mut OutQueue,
        params: &Params<'_>,
        head: &[u8],
        (end, body_start): (usize, usize),
    ) -> Pump {
        let fields = match parse_fields(&head[..end]) {
            Ok(fields) => fields,
            Err(why) => {
                log!(Level::Warn, "gateway response refused: {why}");
                return Pump::Fail(502);
            }
        };
        let status_field = fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(b"status")).map(|(_, v)| *v);
        let location = fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(b"location")).map(|(_, v)| *v);
        if let (Some(loc), None, 1) = (location, status_field, fields.len()) {
            if loc.starts_with(b"/") {
                return Pump::Redirect(loc.to_vec());
            }
        }
        let status = match status_field {
            Some(v) => match parse_status(v) {
                Some(s) => s,
                None => {
                    log!(Level::Warn, "gateway printed an invalid Status: {:?}", String::from_utf8_lossy(v));
                    return Pump::Fail(502);
                }
            },
            None if location.is_some() => 302,
            None => 200,
        };
        let length = match fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(b"content-length")) {
            Some((_, v)) => match std::str::from_utf8(v).ok().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) => Some(n),
                None => return Pump::Fail(502),
            },
            None => None,
        };
        let relayed = fields.iter().copied().filter(|(name, _)| {
            let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
            !(is("status") || is("content-length") || HOP_BY_HOP.iter().any(|&h| is(h)))
        });
        self.start(out, params, status, relayed, length);
        if body_start < head.len() {
            let at = out.buf.len();
            out.buf.extend_from_slice(&head[body_start..]);
            self.frame(out, at, 0);
        }
        out.commit_buf();
        Pump::Progress
    }

    /// Queues the head of a response of `status` with `fields` (checked and
    /// filtered by the caller) and a body of `length` bytes (`None`:
    /// unknown, framed as chunks or by the close); the body follows through
    /// [`Response::feed`]. A gateway's head and a proxied one start here.
    pub fn start<'f>(
        &mut self,
        out: &mut OutQueue,
        params: &Params<'_>,
        status: u16,
        fields: impl Iterator<Item = Field<'f>>,
        length: Option<u64>,
    ) {
        let mut r = Reply::with(out, params);
        r.head(status);
        for (name, value) in fields {
            field(r.buf(), name, value);
        }
        let bodiless = self.head_only || status == 204 || status == 304;
        let framing = match (length, bodiless, self.http10) {
            (Some(n), _, _) => Framing::Length(n),
            (None, true, _) => Framing::Length(0),
            (None, false, false) => Framing::Chunked,
            (None, false, true) => Framing::Close,
        };
        let framing = r.end_head_framed(framing);
        self.status = status;
        let remaining = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        self.output = Output::Body(framing, remaining);
    }

    /// Where body bytes go in `out.buf`: after room for the chunk size,
    /// written once the length is known, so the data is never moved.
    fn body_room(&self, out: &mut OutQueue) -> (usize, usize) {
        let chunked = matches!(self.output, Output::Body(Framing::Chunked, _));
        let at = out.buf.len();
        let room = if chunked { CHUNK_SIZE_ROOM } else { 0 };
        out.buf.resize(at + room, b'0');
        (at, room)
    }

    /// Frames the body bytes appended to `out.buf` at `at + room` (after
    /// `room` bytes kept for a chunk size): cut to the announced length,
    /// dropped for `HEAD`, or made a chunk.
    fn frame(&mut self, out: &mut OutQueue, at: usize, room: usize) {
        let Output::Body(framing, remaining) = &mut self.output else { return };
        let data_at = at + room;
        if let Framing::Length(_) = framing {
            let keep = ((out.buf.len() - data_at) as u64).min(*remaining) as usize;
            out.buf.truncate(data_at + keep);
            *remaining -= keep as u64;
            if *remaining == 0 && keep > 0 && !self.head_only {
                // The body's last byte waits for a clean end.
                self.held = out.buf.pop();
            }
        }
        let n = out.buf.len() - data_at;
        if n == 0 || self.head_only {
            out.buf.truncate(at);
            return;
        }
        self.body_bytes += n as u64;
        if *framing == Framing::Chunked {
            let mut line = [0u8; 18];
            let size = chunk_size_line(n, &mut line);
            if room >= size.len() {
                // Leading zeros are valid in a chunk size.
                out.buf[data_at - size.len()..data_at].copy_from_slice(size);
            } else {
                out.buf.splice(at..data_at, size.iter().copied());
            }
            out.buf.extend_from_slice(b"\r\n");
        }
    }

    /// Closes the framing: completely when the program ended cleanly,
    /// else not at all (the connection closes, the client sees the cut).
    pub fn finish(&mut self, out: &mut OutQueue, framing: Framing, remaining: u64, clean: bool) -> Pump {
        self.output = Output::Done;
        let keep_alive = match framing {
            _ if self.head_only => framing != Framing::Close,
            _ if !clean => false,
            Framing::Chunked => {
                out.buf.extend_from_slice(b"0\r\n");
                if let Some(Trailers::Lines(lines)) = self.trailers.take() {
                    out.buf.extend_from_slice(&lines);
                }
                out.buf.extend_from_slice(b"\r\n");
                out.commit_buf();
                true
            }
            // A body shorter than announced cannot be completed: close.
            Framing::Length(_) => {
                if let Some(last) = self.held.take() {
                    out.buf.push(last);
                    out.commit_buf();
                    self.body_bytes += 1;
                }
                remaining == 0
            }
            // The stream ends cleanly; the connection stays.
            Framing::Stream => true,
            Framing::Close => false,
        };
        Pump::Done { keep_alive }
    }
}

/// How a program ended, for the error log.
fn describe(status: &rustix::process::WaitIdStatus) -> String {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "ended abnormally".to_string(),
    }
}

fn read(fd: &OwnedFd, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    loop {
        match sys::read_into(fd, buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The end of a CGI head: `(end of fields, start of body)`. Lines may end
/// in LF (RFC 3875 §6.3) or CRLF.
fn find_head_end(head: &[u8]) -> Option<(usize, usize)> {
    let mut line_start = 0;
    for lf in memchr::memchr_iter(b'\n', head) {
        let line = &head[line_start..lf];
        if line.is_empty() || line == b"\r" {
            return Some((line_start, lf + 1));
        }
        line_start = lf + 1;
    }
    None
}

/// Parses the program's header lines; any invalid line refuses the whole
/// response (it must never reach the client).
/// A header field as printed by a program: name and value.
pub type Field<'a> = (&'a [u8], &'a [u8]);

fn parse_fields(block: &[u8]) -> Result<Vec<Field<'_>>, &'static str> {
    let mut fields = Vec::new();
    for line in block.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = memchr::memchr(b':', line).ok_or("a header line without a colon")?;
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.is_empty() || !name.iter().all(|&b| tern_http::request::is_tchar(b)) {
            return Err("an invalid header field name");
        }
        if !value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80) {
            return Err("an invalid byte in a header field value");
        }
        fields.push((name, value));
    }
    Ok(fields)
}

/// `Status: 404 Not Found` → 404 (a three-digit code 200–599).
fn parse_status(value: &[u8]) -> Option<u16> {
    let code = value.get(..3)?;
    if !code.iter().all(u8::is_ascii_digit) || value.get(3).is_some_and(|&b| b != b' ') {
        return None;
    }
    let n: u16 = std::str::from_utf8(code).ok()?.parse().ok()?;
    (200..=599).contains(&n).then_some(n)
}

fn parse_nph_status(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.")?.get(2..5)?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_parsing() {
        assert_eq!(find_head_end(b"A: b\n\nbody"), Some((5, 6)));
        assert_eq!(find_head_end(b"A: b\r\n\r\nbody"), Some((6, 8)));
        assert_eq!(find_head_end(b"A: b\r\n"), None);
        assert!(parse_fields(b"Foo: bar\nFoo:\n").is_ok());
        assert!(parse_fields(b"Foo: b\tar\n").is_ok());
        for bad in
            [&b": bar\n"[..], b"F\x00oo: bar\n", b"F\x01oo: bar\n", b"F\noo: bar\n", b"Foo: b\x01ar\n", b"garbage\n"]
        {
            assert!(parse_fields(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_status(b"404 Not Found"), Some(404));
        assert_eq!(parse_status(b"201"), Some(201));
        assert_eq!(parse_status(b"99 x"), None);
        assert_eq!(parse_status(b"1000"), None);
        assert_eq!(parse_status(b"100 Continue"), None);
        let mut text = [0u8; IP_TEXT];
        let mapped: std::net::IpAddr = "::ffff:255.255.255.255".parse().unwrap();
        assert_eq!(ip_text(mapped, &mut text), b"::ffff:255.255.255.255");
        let longest: std::net::IpAddr = "1111:2222:3333:4444:5555:6666:7777:8888".parse().unwrap();
        assert_eq!(ip_text(longest, &mut text), b"1111:2222:3333:4444:5555:6666:7777:8888");
        let mut line = [0u8; 18];
        assert_eq!(chunk_size_line(0, &mut line), b"0\r\n");
        assert_eq!(chunk_size_line(0xffff, &mut line), b"ffff\r\n");
        assert_eq!(chunk_size_line(usize::MAX, &mut line), b"ffffffffffffffff\r\n");
    }

    /// What a gateway prints, fed in the given pieces (for an HTTP/2
    /// stream when `stream`): the bytes queued for the client and the last
    /// answer.
    fn fed_to(pieces: &[&[u8]], stream: bool) -> (Vec<u8>, Pump) {
        let date = *b"Wed, 25 Nov 2026 05:00:00 GMT";
        let params = Params {
            date: &date,
            server: "tern",
            fields: b"",
            head_only: false,
            http10: false,
            keep_alive: true,
            stream,
            dressing: None,
        };
        let mut r = Response {
            nph: false,
            head_only: false,
            http10: false,
            output: Output::Head(Vec::new()),
            status: 0,
            body_bytes: 0,
            held: None,
            trailers: None,
        };
        let mut out = OutQueue::new(4096, 0, false);
        let mut last = Pump::Wait;
        for piece in pieces {
            last = r.feed(&mut out, &params, piece);
        }
        if matches!(last, Pump::Progress) {
            last = r.end(&mut out);
        }
        (out.buf, last)
    }

    fn fed(pieces: &[&[u8]]) -> (Vec<u8>, Pump) {
        fed_to(pieces, false)
    }

    #[test]
    fn a_body_of_unknown_length_on_a_stream_is_not_chunked() {
        let (got, last) = fed_to(&[b"Content-Type: text/plain\n\n", b"tea", b" for two"], true);
        assert!(matches!(last, Pump::Done { keep_alive: true }), "a clean end is a complete response");
        let text = String::from_utf8(got).unwrap();
        assert!(text.ends_with("Content-Type: text/plain\r\n\r\ntea for two"), "{text:?}");
        assert!(!text.contains("Transfer-Encoding") && !text.contains("Connection"), "{text:?}");
    }

    #[test]
    fn a_head_in_one_piece_or_many_gives_the_same_response() {
        let printed: &[u8] = b"Status: 418 Teapot\r\nX-Php: yes\r\nContent-Type: text/plain\r\n\r\ntea";
        let (whole, last) = fed(&[printed]);
        assert!(matches!(last, Pump::Done { keep_alive: true }));
        let text = String::from_utf8(whole.clone()).unwrap();
        assert!(text.starts_with("HTTP/1.1 418 "), "{text:?}");
        assert!(text.contains("\r\nX-Php: yes\r\nContent-Type: text/plain\r\n"), "{text:?}");
        assert!(text.ends_with("\r\n\r\n3\r\ntea\r\n0\r\n\r\n"), "{text:?}");
        assert!(!text.contains("Status:"), "{text:?}");
        // (The body each time with the head's last byte, as one piece: a
        // piece of body alone is a chunk of its own, framed otherwise.)
        let (head, rest) = printed.split_at(printed.len() - 4);
        let mut bytes: Vec<&[u8]> = head.chunks(1).collect();
        bytes.push(rest);
        for pieces in [bytes, vec![head, rest], vec![&printed[..10], &printed[10..]]] {
            let (got, last) = fed(&pieces);
            assert!(matches!(last, Pump::Done { keep_alive: true }));
            assert_eq!(String::from_utf8(got).unwrap(), text);
        }
        // An invalid head is refused whether whole or in pieces.
        for pieces in [&[&b"Bad Line\n\nx"[..]][..], &[b"Bad Li", b"ne\n\nx"]] {
            assert!(matches!(fed(pieces).1, Pump::Fail(502)));
        }
    }
}
