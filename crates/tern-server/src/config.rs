//! Configuration: one TOML file, every setting optional.
//!
//! Each section is declared here with its documented default, next to the
//! type that parses it. Values are checked while they are deserialised, so
//! every error carries the key and line (`toml` reports both); unknown keys
//! are errors too, so a typo never silently falls back to a default.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: Server,
    #[serde(rename = "static")]
    pub static_files: StaticFiles,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub log: Log,
    pub status: Status,
    pub cgi: Cgi,
    pub fastcgi: FastCgi,
    pub compression: Compression,
    pub tls: Tls,
    pub staged: Staged,
    /// The file and text this was parsed from, so errors found later (at
    /// start) still name the line.
    #[serde(skip)]
    pub origin: Origin,
}

/// Where a configuration came from.
#[derive(Clone, Debug, Default)]
pub struct Origin {
    pub path: Option<PathBuf>,
    text: String,
}

/// `[server]`: where and how to listen.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Server {
    /// Addresses to listen on (see [`Listen`] for the forms). Default
    /// `["127.0.0.1:8080"]`.
    pub listen: Vec<Listen>,
    /// Document root; relative to the config file's directory.
    /// Default: the current directory.
    pub root: PathBuf,
    /// Worker threads (one reactor each); 0 = the CPUs this process may use
    /// (affinity mask and cgroup quota), at most [`MAX_WORKERS`]. Default 0.
    pub workers: usize,
    /// Concurrency model: who runs the connection code (SPEC 2.6).
    /// Default `"event"`.
    pub model: Model,
    /// `pool`: the threads that serve connections while they have work.
    /// Default 32.
    pub threads: usize,
    /// `per-request`: the most connection threads alive at once; past it a
    /// new connection gets `503`. Default 5000.
    pub max_threads: usize,
    /// The CPUs the server's threads run on (`sched_setaffinity`); empty =
    /// wherever the process may run. With `workers = 0`, one worker per
    /// CPU listed. Default `[]`.
    pub cpus: Vec<usize>,
    /// Open connections across all workers; past it a new connection gets
    /// `503` and is closed. Default 10000.
    pub max_connections: usize,
    /// Listen backlog. Default 1024.
    pub backlog: i32,
    /// Files tried, in order, for a request naming a directory.
    /// Default `["index.html", "index.htm"]`.
    pub index: Vec<String>,
    /// Which symlinks may be followed. Default `"inside-root"`.
    pub symlinks: Symlinks,
    /// The `Server` header; empty to omit it. Default `"tern"`.
    pub server_header: String,
    /// On SIGTERM, how long in-flight responses may take to finish.
    /// Default `"10s"`.
    pub shutdown_timeout: Seconds,
    /// Started as root: the user (name or number) to become for good once
    /// the listeners are bound and the logs opened. Default `""`: stay who
    /// started it.
    pub user: String,
    /// The group to become with `user`. Default `""`: the user's primary
    /// group.
    pub group: String,
    /// On SIGHUP, how long the replaced server may take to finish its
    /// in-flight responses; 0 = no limit (each response still keeps its
    /// send deadline). Separate from `shutdown_timeout`, so a reload never
    /// cuts a long download. Default 0.
    pub reload_drain_timeout: Seconds,
    /// `event`: after a turn with work, how long a worker polls again
    /// (yielding the CPU between polls) before it sleeps, so the next
    /// request usually finds it awake; backs off while polls find nothing.
    /// 0 = sleep at once; at most `"1ms"`. Default `"50us"`.
    pub busy_poll: Seconds,
    /// `uring`: after a turn with work, how long a worker lets completions
    /// gather before it wakes for them (io_uring's minimum wait, Linux
    /// 6.12 or later): at a steady rate, one wake-up serves several
    /// requests, for at most this much more time per response. Not while
    /// a worker holds a single connection (its client waits for each
    /// answer). 0 = wake at the first completion; at most `"10ms"`.
    /// Default 0.
    pub batch_wait: Seconds,
    /// How long the kernel holds a new connection before waking a worker
    /// for it while the client has sent nothing (`TCP_DEFER_ACCEPT`): a
    /// connection is accepted with its request (or TLS hello) in hand, one
    /// wake-up fewer per connection (the `event` model reads it in the
    /// accepting turn, before the socket joins epoll), and one that stays
    /// silent is held by the kernel, not a worker, until then. 0 = wake at
    /// the handshake; whole seconds, at most `"60s"`. Default `"1s"`.
    pub defer_accept: Seconds,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: vec![Listen::addr(SocketAddr::from(([127, 0, 0, 1], 8080)))],
            root: PathBuf::from("."),
            workers: 0,
            model: Model::Event,
            threads: 32,
            max_threads: 5000,
            cpus: Vec::new(),
            max_connections: 10_000,
            backlog: 1024,
            index: vec!["index.html".into(), "index.htm".into()],
            symlinks: Symlinks::InsideRoot,
            server_header: "tern".into(),
            shutdown_timeout: Seconds(Duration::from_secs(10)),
            user: String::new(),
            group: String::new(),
            reload_drain_timeout: Seconds(Duration::ZERO),
            busy_poll: Seconds(Duration::from_micros(50)),
            batch_wait: Seconds(Duration::ZERO),
            defer_accept: Seconds(Duration::from_secs(1)),
        }
    }
}

/// The most workers a configuration may ask for: far past any useful
/// count (one reactor per CPU), low enough that a typo such as 100000 is
/// refused rather than starting that many threads.
pub const MAX_WORKERS: usize = 1024;

/// CPU numbers `server.cpus` may name (the kernel's `cpu_set_t`).
pub const CPU_SETSIZE: usize = 1024;

/// One `server.listen` entry: the addresses it names, all on one port (with
/// port 0 the first address picks it and the others follow).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    pub addrs: Vec<SocketAddr>,
}

impl Listen {
    /// One address.
    pub fn addr(addr: SocketAddr) -> Listen {
        Listen { addrs: vec![addr] }
    }
}

/// An address as operators type it for nginx or Caddy: `8080`, `:8080` and
/// `*:8080` are every IPv4 and IPv6 address; `localhost:8080` is both
/// loopback addresses; `IP:PORT` and `[IPv6]:PORT` are that address. Other
/// host names are refused: a listen address must not depend on DNS.
impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Listen, String> {
        let both = |v4: std::net::Ipv4Addr, v6: std::net::Ipv6Addr, port: u16| Listen {
            addrs: vec![SocketAddr::from((v4, port)), SocketAddr::from((v6, port))],
        };
        let wrong = || {
            format!("`{s}` is not a listen address (PORT, :PORT, IP:PORT, [IPv6]:PORT or localhost:PORT; a port is 0-65535)")
        };
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Listen::addr(addr));
        }
        let (host, port) = s.rsplit_once(':').unwrap_or(("", s));
        let port: u16 = match port.parse() {
            Ok(p) if port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(wrong()),
        };
        match host {
            "" | "*" => Ok(both(std::net::Ipv4Addr::UNSPECIFIED, std::net::Ipv6Addr::UNSPECIFIED, port)),
            "localhost" => Ok(both(std::net::Ipv4Addr::LOCALHOST, std::net::Ipv6Addr::LOCALHOST, port)),
            _ => Err(wrong()),
        }
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// The concurrency model (SPEC 2.6): who runs the one connection state
/// machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// A reactor per worker thread (epoll).
    Event,
    /// Acceptors feed one queue; `server.threads` serve a connection while
    /// it has work, an idle one waits in its acceptor's epoll set.
    Pool,
    /// Threads per stage with bounded queues between them (`[staged]`).
    Staged,
    /// A thread per connection, blocking in `poll(2)`.
    PerRequest,
    /// A reactor per worker thread on io_uring: accepts, receives and
    /// sends through a ring, one submission per loop turn (Linux 6.1 or
    /// later; refused at start where io_uring is disabled).
    Uring,
}

impl Model {
    /// Every model there is, built or not: what the lab's E3 tries, each
    /// kept only when [`Config::parse`] accepts it.
    pub const ALL: [Model; 5] = [Model::Event, Model::Pool, Model::Staged, Model::PerRequest, Model::Uring];

    pub fn name(self) -> &'static str {
        match self {
            Model::Event => "event",
            Model::Pool => "pool",
            Model::Staged => "staged",
            Model::PerRequest => "per-request",
            Model::Uring => "uring",
        }
    }
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "event" => Ok(Model::Event),
            "pool" => Ok(Model::Pool),
            "staged" => Ok(Model::Staged),
            "per-request" => Ok(Model::PerRequest),
            "uring" => Ok(Model::Uring),
            _ => Err(format!("unknown model `{s}` (expected event, pool, staged, per-request or uring)")),
        }
    }
}

/// The most threads `server.threads`, `server.max_threads` and each
/// stage of `[staged]` may ask for.
pub const MAX_THREADS: usize = 100_000;

/// The most connections a stage's queue may hold (the queue's slots are
/// allocated at start).
pub const MAX_STAGE_QUEUE: usize = 1_000_000;

/// `[staged]`: the staged engine (`server.model = "staged"`): each stage's
/// threads, and the bounded queue in front of each stage.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Staged {
    /// Threads reading and parsing requests (and their bodies, and
    /// lingering). Default 2.
    pub read_threads: usize,
    /// Threads answering requests: resolving and opening files, starting
    /// CGI programs and FastCGI requests. Default 2.
    pub handle_threads: usize,
    /// Threads sending answers; one relays a backend's output for as long
    /// as the program runs, so these bound the backends served at once.
    /// Default 16.
    pub send_threads: usize,
    /// Threads writing service records and passing a connection on to its
    /// next request or its close. Default 1.
    pub log_threads: usize,
    /// Connections each stage's queue holds; when one is full, the stage
    /// before it waits (nothing is dropped). Default 256.
    pub queue: usize,
}

impl Default for Staged {
    fn default() -> Self {
        Staged { read_threads: 2, handle_threads: 2, send_threads: 16, log_threads: 1, queue: 256 }
    }
}

impl Staged {
    /// Threads per stage, in the stages' order (read, handle, send, log).
    pub fn threads(&self) -> [usize; 4] {
        [self.read_threads, self.handle_threads, self.send_threads, self.log_threads]
    }
}

/// How static file bodies are sent (SPEC 2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMethod {
    /// `sendfile(2)`: zero-copy from the page cache.
    Sendfile,
    /// `mmap(2)` once per open file, write from the mapping.
    Mmap,
    /// `pread(2)` into a buffer of `read_chunk` bytes, `write(2)` it.
    Read,
    /// Read through the engine's ring, 256 KiB at a time, into a buffer
    /// that a send through the ring takes: a page-cache miss waits in the
    /// kernel, never in the worker. `server.model = "uring"` only.
    Uring,
}

impl IoMethod {
    pub fn name(self) -> &'static str {
        match self {
            IoMethod::Sendfile => "sendfile",
            IoMethod::Mmap => "mmap",
            IoMethod::Read => "read",
            IoMethod::Uring => "uring",
        }
    }
}

impl std::str::FromStr for IoMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sendfile" => Ok(IoMethod::Sendfile),
            "mmap" => Ok(IoMethod::Mmap),
            "read" => Ok(IoMethod::Read),
            "uring" => Ok(IoMethod::Uring),
            _ => Err(format!("unknown I/O method `{s}` (expected sendfile, mmap, read or uring)")),
        }
    }
}

/// `static.io`: one method for every file, or `"auto"`: per file-size class
/// the method measured fastest on this host (`static_io.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoChoice {
    Auto,
    Fixed(IoMethod),
}

impl IoChoice {
    pub fn name(self) -> &'static str {
        match self {
            IoChoice::Auto => "auto",
            IoChoice::Fixed(m) => m.name(),
        }
    }
}

impl std::str::FromStr for IoChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(IoChoice::Auto),
            _ => s
                .parse()
                .map(IoChoice::Fixed)
                .map_err(|_| format!("unknown I/O method `{s}` (expected auto, sendfile, mmap, read or uring)")),
        }
    }
}

impl<'de> Deserialize<'de> for IoChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// Which symlinks a path may traverse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Symlinks {
    /// Symlinks whose target stays inside the root (`RESOLVE_BENEATH`).
    InsideRoot,
    /// No symlinks at all.
    Never,
    /// Any symlink, even out of the root: only for trusted trees.
    Any,
}

/// `[static]`: static file serving.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaticFiles {
    /// `"auto"` (default), `"sendfile"`, `"mmap"`, `"read"` or `"uring"`
    /// (with `server.model = "uring"`).
    pub io: IoChoice,
    /// Upper bounds (inclusive) of the file-size classes `"auto"` chooses a
    /// method for; strictly ascending, at most 7. Default
    /// `["16KiB", "256KiB"]` (three classes: ≤ 16 KiB, ≤ 256 KiB, larger).
    pub io_classes: Vec<Bytes>,
    /// A profile written by `tern tune --io`: its per-class methods are used
    /// instead of measuring at start-up. Relative to the config file's
    /// directory. Default: none.
    pub io_profile: Option<PathBuf>,
    /// The method per size class, smallest first, as `tern tune` writes
    /// them: with `io = "auto"` they are used instead of measuring at
    /// start-up, except where an entry is `"auto"`: that class is measured
    /// as without them (so a tuned file pins only the classes where a method
    /// beat the calibration). One entry per class: one more than
    /// `io_classes`; not with `io_profile`. Default `[]`: measure.
    pub io_methods: Vec<IoChoice>,
    /// Buffer size of the `read` method. Default `"64KiB"`.
    pub read_chunk: Bytes,
    /// Most bytes one connection sends by `sendfile` before the others
    /// of its worker have a turn (nginx's `sendfile_max_chunk`, lighttpd's
    /// write limit per turn); 0 = no limit. Without it one `sendfile` call
    /// queues a whole large file in one client's socket before the next
    /// is served: on this project's machine the limit took 64 clients of a
    /// 1 MiB file from 3,041 to 4,386 req/s and halved the p99.
    /// Default `"256KiB"`.
    pub sendfile_max_chunk: Bytes,
    /// Entries in each worker's open-file table. Default 1024.
    pub open_file_cache: usize,
    /// Threads of the blocking I/O pool shared by the reactors' workers
    /// (`event`, `uring`): opens that miss the open-file table and reads of file pages
    /// not in the page cache run there, so a slow disk never stalls a
    /// reactor. 0 = off (the worker does them itself). Default 32, as
    /// nginx's `aio threads` pool: a thread blocked on a disk holds no
    /// CPU, and the count bounds how many slow opens and reads are under
    /// way at once (a disk's queue wants several); a sleeping thread costs
    /// a few KiB. Started under the reactor models only (see
    /// [`Config::io_pool_threads`]).
    pub io_threads: usize,
    /// How long an open file is trusted before it is looked up again
    /// (0 = before every request). Default `"1s"`.
    pub open_file_valid: Seconds,
    /// Charset appended to `text/*` types; empty for none. Default `"utf-8"`.
    pub charset: String,
    /// Extra or overriding MIME types by extension: `{ "md" = "text/markdown" }`.
    pub mime_types: BTreeMap<String, String>,
    /// Paths with a segment starting with `.` (`/.git/config`, `/a/.env`):
    /// `"deny"` answers them 404 (static files, CGI, FastCGI), `"allow"`
    /// serves them as any other. Default `"deny"`.
    pub hidden: Hidden,
    /// URL paths served even though hidden (with `hidden = "deny"`); hidden
    /// names below them are still refused. Default `["/.well-known"]`.
    pub hidden_allow: Vec<String>,
    /// Extensions of program sources never sent as static files (answered
    /// 403), so a `.php` page is not shown as source when no FastCGI
    /// backend claims it (lighttpd's `static-file.exclude-extensions`).
    /// Files that a CGI or FastCGI route claims never reach static files
    /// anyway. Default `[".php", ".pl", ".fcgi"]`.
    pub exclude_extensions: Vec<String>,
}

/// Whether hidden paths (a segment starting with `.`) are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hidden {
    Deny,
    Allow,
}

impl Default for StaticFiles {
    fn default() -> Self {
        StaticFiles {
            io: IoChoice::Auto,
            io_classes: vec![Bytes(16 * 1024), Bytes(256 * 1024)],
            io_profile: None,
            io_methods: Vec::new(),
            read_chunk: Bytes(64 * 1024),
            sendfile_max_chunk: Bytes(256 * 1024),
            open_file_cache: 1024,
            io_threads: 32,
            open_file_valid: Seconds(Duration::from_secs(1)),
            charset: "utf-8".into(),
            mime_types: BTreeMap::new(),
            hidden: Hidden::Deny,
            hidden_allow: vec!["/.well-known".into()],
            exclude_extensions: vec![".php".into(), ".pl".into(), ".fcgi".into()],
        }
    }
}

/// `[compression]`: real-time adaptive compression of static files
/// (SPEC 2.7). A compressed variant is made once per file and coding, kept
/// in a shared in-memory cache, and checked against the file before every
/// use; under load a cold file is sent uncompressed at once and compressed
/// by background threads instead.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Compression {
    /// Default true.
    pub enabled: bool,
    /// Codings offered, in the order that breaks ties between equal
    /// q-values. Default `["br", "zstd", "gzip"]`.
    pub codings: Vec<CodingName>,
    /// libdeflate level, 1–12. Default 6.
    pub gzip_level: u32,
    /// Brotli quality, 0–11. Default 5 (past 5 it slows sharply).
    pub br_level: u32,
    /// zstd level, 1–19. Default 3.
    pub zstd_level: u32,
    /// Files smaller than this are never compressed. Default 256 bytes.
    pub min_size: Bytes,
    /// Files larger than this are not compressed on the fly (precompressed
    /// sidecars still are served). Default `"8MiB"`.
    pub max_size: Bytes,
    /// MIME types compressed (without parameters); `type/*` matches a whole
    /// family. Default: text, JavaScript, JSON, XML, SVG, wasm and fonts
    /// that are not already compressed.
    pub mime_types: Vec<String>,
    /// Hard cap on the compressed bytes held in memory. Default `"64MiB"`.
    pub cache_memory: Bytes,
    /// What happens to a new variant when the cache is full. Default
    /// `"evict"`.
    pub when_full: WhenFull,
    /// An entry unused this long is freed. Default `"5m"`.
    pub idle: Seconds,
    /// Whether to defer cold files under load; false compresses every cold
    /// file inline. Default true.
    pub adaptive: bool,
    /// Busy when a worker's listening socket has more connections waiting
    /// to be accepted than this. Default 8.
    pub busy_accept_queue: u64,
    /// Busy when more requests than this have arrived and are not yet
    /// answered, over all workers. Default 32.
    pub busy_in_flight: u64,
    /// Background compression threads (at nice 19). Default 1.
    pub background_threads: usize,
    /// Jobs waiting for the background threads; past it a deferred file is
    /// simply sent uncompressed again. Default 1024.
    pub background_queue: usize,
    /// Serve `file.gz`, `file.br`, `file.zst` when present and not older
    /// than the file. Default true.
    pub sidecars: bool,
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            enabled: true,
            codings: vec![CodingName::Br, CodingName::Zstd, CodingName::Gzip],
            gzip_level: 6,
            br_level: 5,
            zstd_level: 3,
            min_size: Bytes(256),
            max_size: Bytes(8 << 20),
            mime_types: [
                "text/*",
                "application/javascript",
                "application/json",
                "application/xml",
                "application/xhtml+xml",
                "application/rss+xml",
                "application/atom+xml",
                "application/manifest+json",
                "application/wasm",
                "image/svg+xml",
                "image/x-icon",
                "font/ttf",
                "font/otf",
            ]
            .map(String::from)
            .to_vec(),
            cache_memory: Bytes(64 << 20),
            when_full: WhenFull::Evict,
            idle: Seconds(Duration::from_secs(300)),
            adaptive: true,
            busy_accept_queue: 8,
            busy_in_flight: 32,
            background_threads: 1,
            background_queue: 1024,
            sidecars: true,
        }
    }
}

/// `compression.when_full`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenFull {
    /// Admit a variant asked for more often than the least used cached
    /// ones, evicting those (TinyLFU-style).
    Evict,
    /// Cache nothing new until entries go idle: whatever came first stays.
    Refuse,
}

/// A content coding tern can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodingName {
    Gzip,
    Br,
    Zstd,
}

/// `[tls]`: HTTPS (rustls). Off until `listen` names an address.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tls {
    /// Addresses served over HTTPS, in the forms of `server.listen`.
    /// Default `[]`.
    pub listen: Vec<Listen>,
    /// Certificate chains with their keys (PEM files, relative to the
    /// config file's directory). The first is the default, sent to a
    /// client that names no host or one no entry lists. Default `[]`
    /// (needed when `listen` is set).
    pub certificates: Vec<TlsCertificate>,
    /// Addresses that answer every request with `308` to the same URL over
    /// HTTPS (on the first `listen` port). Default `[]`.
    pub redirect: Vec<Listen>,
    /// The `Strict-Transport-Security` value sent with every HTTPS
    /// response (`"max-age=63072000"`); empty for none. Default `""`.
    pub hsts: String,
    /// The oldest protocol accepted: `"1.2"` or `"1.3"`. Default `"1.2"`.
    pub min_version: TlsVersion,
    /// Sessions remembered for resumption, shared by all workers (0: none).
    /// Default 4096.
    pub session_cache: usize,
    /// Stateless session tickets (resumption without the cache; the keys
    /// change every 6 hours and on reload). Default true.
    pub tickets: bool,
    /// TLS 1.3 tickets sent after each handshake, full or resumed (1–16).
    /// One is enough for a client that resumes one connection after
    /// another (each resumption brings the next ticket), and every ticket
    /// costs an OpenSSL 3 client about 27 µs to take in (measured): OpenSSL servers
    /// send one after a resumed handshake (two after a full one, which
    /// rustls cannot tell apart here). Default 1.
    pub tickets_per_handshake: usize,
}

impl Default for Tls {
    fn default() -> Self {
        Tls {
            listen: Vec::new(),
            certificates: Vec::new(),
            redirect: Vec::new(),
            hsts: String::new(),
            min_version: TlsVersion::V1_2,
            session_cache: 4096,
            tickets: true,
            tickets_per_handshake: 1,
        }
    }
}

/// One `tls.certificates` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertificate {
    /// The chain: the server's certificate first, then intermediates.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Host names (SNI) this chain is sent for; `*.example.com` covers one
    /// label. Default `[]` (only as the default certificate).
    #[serde(default)]
    pub names: Vec<String>,
}

/// `tls.min_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

/// `[limits]`: sizes and counts a client may use.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest request line (`414` past it). Default `"8KiB"`.
    pub max_request_line: Bytes,
    /// Largest request head (`431` past it). Default `"16KiB"`.
    pub max_header_bytes: Bytes,
    /// Most header fields (`431` past it, at most 128). Default 100.
    pub max_headers: usize,
    /// Largest request body (`413` past it). Default `"1MiB"`.
    pub max_body_bytes: Bytes,
    /// Request body bytes held in memory (and the most a FastCGI
    /// exchange buffers of one); a larger body waits in an unnamed
    /// temporary file in `$TMPDIR`. Default `"64KiB"`.
    pub body_buffer: Bytes,
    /// Requests on one keep-alive connection; 0 = unlimited. Default 10000.
    pub keepalive_requests: u64,
    /// Ranges in one `Range` before it is ignored. Default 16.
    pub max_ranges: usize,
    /// Open connections from one client address; past it a new one gets
    /// `503` and is closed (as nginx's `limit_conn`). 0 = no limit.
    /// Default 0.
    pub max_connections_per_ip: u32,
    /// Response bytes a connection may hold in the kernel written but not
    /// yet sent, beyond what is in flight to the client
    /// (`TCP_NOTSENT_LOWAT`): a client that reads slowly cannot make the
    /// server park megabytes of kernel memory for it, and a fast one is not
    /// held back (what is in flight, its window, is not capped). 0 = no
    /// bound (the kernel's `net.ipv4.tcp_notsent_lowat`). Default `"128KiB"`.
    /// This is the bound of a new connection and of a slow reader; a
    /// client that proves to read fast gets `fast_unsent_bytes`.
    pub unsent_bytes: Bytes,
    /// Response bytes a client must take (acknowledge) at
    /// `fast_reader_rate` or faster, measured from a moment the
    /// `unsent_bytes` bound held its connection back, before the bound of
    /// its connection becomes `fast_unsent_bytes`; 0 = never. With the
    /// small bound the kernel sends each piece from inside the server's
    /// write, and on a fast path it then also runs the receiver's side on
    /// the server's CPU; with the large one it sends as the client's
    /// acknowledgements arrive. A fast reader that stops reading can then
    /// leave up to `fast_unsent_bytes` beyond what is in flight (with 0,
    /// up to the kernel's send-buffer limit, the last field of
    /// `net.ipv4.tcp_wmem`) in the kernel until it is cut off: only a
    /// client that first read this much. Plain HTTP only: over TLS the
    /// client's CPU decrypts, and a connection keeps `unsent_bytes`.
    /// Default `"1MiB"`.
    pub fast_reader_bytes: Bytes,
    /// Bytes per second a fast reader takes; a connection whose client
    /// takes less while a response waits for it (checked about once a
    /// second) gets `unsent_bytes` back and must prove itself again.
    /// 0 = any rate. Default `"4MiB"`.
    pub fast_reader_rate: Bytes,
    /// The unsent bound of a fast reader's connection; 0 = no bound (the
    /// kernel's). Default 0.
    pub fast_unsent_bytes: Bytes,
}

impl Limits {
    /// The unsent bound (`TCP_NOTSENT_LOWAT`, 0 = none) of a connection
    /// whose client reads as fast as it can: `fast_unsent_bytes` once it
    /// proved it, unless the bound is never raised.
    pub fn fast_reader_unsent(&self) -> u64 {
        if self.unsent_bytes.0 == 0 || self.fast_reader_bytes.0 == 0 {
            self.unsent_bytes.0
        } else {
            self.fast_unsent_bytes.0
        }
    }

    /// The unsent bound a connection that sends responses of `size` bytes
    /// to a client reading as fast as it can settles at: a response larger
    /// than `unsent_bytes` is held back by it, so the client proves itself
    /// and gets [`Limits::fast_reader_unsent`]; a smaller one never
    /// reaches the bound and keeps it.
    pub fn settled_unsent(&self, size: u64) -> u64 {
        if size > self.unsent_bytes.0 {
            self.fast_reader_unsent()
        } else {
            self.unsent_bytes.0
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: Bytes(8 * 1024),
            max_header_bytes: Bytes(16 * 1024),
            max_headers: 100,
            max_body_bytes: Bytes(1024 * 1024),
            body_buffer: Bytes(64 * 1024),
            keepalive_requests: 10_000,
            max_ranges: 16,
            max_connections_per_ip: 0,
            unsent_bytes: Bytes(128 * 1024),
            fast_reader_bytes: Bytes(1024 * 1024),
            fast_reader_rate: Bytes(4 * 1024 * 1024),
            fast_unsent_bytes: Bytes(0),
        }
    }
}

/// `[timeouts]`. The header, body and send phases each have a base time and
/// a minimum data rate (as Apache's mod_reqtimeout): the deadline is
/// `start + timeout + bytes / min_rate`, so a client that keeps up the rate
/// may take as long as its transfer needs, and a trickle is cut off.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Idle time allowed between keep-alive requests. Default `"15s"`.
    pub keepalive: Seconds,
    /// Time for a request head to arrive. Default `"10s"`.
    pub header: Seconds,
    /// Bytes/s that extend `header`. Default 500.
    pub header_min_rate: u64,
    /// Time for a request body. Default `"10s"`.
    pub body: Seconds,
    /// Bytes/s that extend `body`. Default 500.
    pub body_min_rate: u64,
    /// Time for a response to be taken by a slow reader. Default `"10s"`.
    pub send: Seconds,
    /// Bytes/s that extend `send`. Default 500.
    pub send_min_rate: u64,
    /// After an error answer, how long to drain the client's input before
    /// closing (so the answer is not lost to a reset). Default `"2s"`.
    pub linger: Seconds,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = |n| Seconds(Duration::from_secs(n));
        Timeouts {
            keepalive: s(15),
            header: s(10),
            header_min_rate: 500,
            body: s(10),
            body_min_rate: 500,
            send: s(10),
            send_min_rate: 500,
            linger: s(2),
        }
    }
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Log {
    /// Access log (Combined Log Format): a path, `"-"` for stdout, or
    /// `"off"`. Default `"-"`.
    pub access: String,
    /// Access log bytes buffered per worker before a write; the buffer is
    /// also flushed every second. Default `"64KiB"`.
    pub access_buffer: Bytes,
    /// Per-request service records (CSV, see `service_records.rs`): a
    /// path or `"off"`; buffered per worker like the access log (by
    /// `access_buffer`). Default `"off"`.
    pub service_records: String,
    /// Error log: a path or `"-"` for stderr. Default `"-"`.
    pub error: String,
    /// Least severe level written: error, warn, info, debug. Default `"warn"`.
    pub level: Level,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            access: "-".into(),
            access_buffer: Bytes(64 * 1024),
            service_records: "off".into(),
            error: "-".into(),
            level: Level::Warn,
        }
    }
}

/// Error-log severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// `[cgi]`: programs run per request (RFC 3875).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cgi {
    /// URL path prefixes whose files are CGI programs, e.g. `["/cgi-bin"]`.
    /// Default `["/cgi-bin"]`.
    pub directories: Vec<String>,
    /// File extensions run as CGI anywhere under the root, e.g. `[".cgi"]`.
    /// Default `[".cgi"]`.
    pub extensions: Vec<String>,
    /// Interpreter per extension: `{ py = "/usr/bin/python3" }`. A program
    /// without one is executed directly and must be executable.
    /// Default: `.py` → python3, `.pl` → perl, `.sh` → sh, `.php` → php-cgi.
    pub interpreters: BTreeMap<String, String>,
    /// Wall-clock limit per request; past it the program's process group is
    /// killed and the client gets `504` (or, mid-body, a closed
    /// connection). Default `"30s"`.
    pub timeout: Seconds,
    /// Programs running at once across all workers; a request past the cap
    /// is answered `503` at once (with `Retry-After: 1`), never queued.
    /// Default 64.
    pub max_processes: usize,
    /// Environment variables passed through from tern's own environment.
    /// Default `["PATH", "LANG", "LC_ALL", "TZ"]`.
    pub pass_env: Vec<String>,
    /// Fixed variables for every program: `{ APP_MODE = "demo" }`
    /// (meta-variables win over them). Default none.
    pub env: BTreeMap<String, String>,
    /// Bytes read from a program's output per read. Default `"64KiB"`.
    pub pipe_buffer: Bytes,
    /// Run programs even when the server is root (no `server.user`);
    /// otherwise they are refused with `403`. Default false.
    pub allow_root: bool,
    /// When a request ends, send its program's process group `SIGTERM`,
    /// then `SIGKILL` a second later, so nothing it started outlives the
    /// request (a process that called `setsid` escapes). Default true.
    pub kill_group: bool,
}

impl Default for Cgi {
    fn default() -> Self {
        let interpreters =
            [("py", "/usr/bin/python3"), ("pl", "/usr/bin/perl"), ("sh", "/bin/sh"), ("php", "/usr/bin/php-cgi")];
        Cgi {
            directories: vec!["/cgi-bin".into()],
            extensions: vec![".cgi".into()],
            interpreters: interpreters.iter().map(|(e, i)| ((*e).to_string(), (*i).to_string())).collect(),
            timeout: Seconds(Duration::from_secs(30)),
            max_processes: 64,
            pass_env: ["PATH", "LANG", "LC_ALL", "TZ"].iter().map(|s| (*s).to_string()).collect(),
            env: BTreeMap::new(),
            pipe_buffer: Bytes(64 * 1024),
            allow_root: false,
            kill_group: true,
        }
    }
}

/// `[fastcgi]`: FastCGI applications (php-fpm), each a named backend
/// reached over pooled, kept-alive connections. Default: none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FastCgi {
    /// `[fastcgi.backends.NAME]`, tried in name order for each request.
    pub backends: BTreeMap<String, FastCgiBackend>,
}

/// `[fastcgi.backends.NAME]`: one FastCGI application and what it answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastCgiBackend {
    /// `"unix:/run/php/php-fpm.sock"` or `"127.0.0.1:9000"`. Required.
    pub address: FastCgiAddress,
    /// Script extensions it runs, e.g. `[".php"]`. Default none.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// URL path prefixes it answers whatever the extension, e.g.
    /// `["/app"]`. Default none.
    #[serde(default)]
    pub prefixes: Vec<UrlPrefix>,
    /// Splits a path into the script and `PATH_INFO` (two captures, as
    /// nginx's `fastcgi_split_path_info`); a path it does not match is all
    /// script. Default `"^(.+?\\.php)(/.*)$"`.
    #[serde(default = "default_split_path_info")]
    pub split_path_info: Pattern,
    /// The script must be a regular file under the root (else `404`), so
    /// `/upload/x.jpg/y.php` never runs a non-PHP file. Default true.
    #[serde(default = "yes")]
    pub check_file: bool,
    /// The document root as the application sees it (`DOCUMENT_ROOT`,
    /// `SCRIPT_FILENAME`). Default: `server.root`.
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// Connections open at once (the pool's size); a request past it waits
    /// in a queue (`site/fastcgi/pool.rs`). Default 8.
    #[serde(default = "default_fastcgi_connections")]
    pub max_connections: NonZero,
    /// Keep connections open between requests (`FCGI_KEEP_CONN`).
    /// Default true.
    #[serde(default = "yes")]
    pub keep_conn: bool,
    /// Past it a connection attempt is answered `502`. Default `"2s"`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Seconds,
    /// Longest silence from the application while answering; past it
    /// `504`. Default `"60s"`.
    #[serde(default = "default_read_timeout")]
    pub read_timeout: Seconds,
    /// Longest wait for a free connection; past it `503`. Default `"5s"`.
    #[serde(default = "default_queue_timeout")]
    pub queue_timeout: Seconds,
}

fn yes() -> bool {
    true
}
fn default_split_path_info() -> Pattern {
    Pattern::parse(r"^(.+?\.php)(/.*)$").expect("valid literal")
}
fn default_fastcgi_connections() -> NonZero {
    NonZero(8)
}
fn default_connect_timeout() -> Seconds {
    Seconds(Duration::from_secs(2))
}
fn default_read_timeout() -> Seconds {
    Seconds(Duration::from_secs(60))
}
fn default_queue_timeout() -> Seconds {
    Seconds(Duration::from_secs(5))
}

/// Where a FastCGI application listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FastCgiAddress {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl<'de> Deserialize<'de> for FastCgiAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.strip_prefix("unix:") {
            Some(path) if path.starts_with('/') => Ok(FastCgiAddress::Unix(path.into())),
            Some(_) => Err(de::Error::custom(format!("`{s}`: a Unix socket needs an absolute path"))),
            None => s
                .parse()
                .map(FastCgiAddress::Tcp)
                .map_err(|_| de::Error::custom(format!("`{s}` is neither `unix:/path` nor `IP:PORT`"))),
        }
    }
}

/// A URL path prefix (starting with `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlPrefix(pub String);

impl<'de> Deserialize<'de> for UrlPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if !s.starts_with('/') {
            return Err(de::Error::custom(format!("`{s}` must be a URL path starting with /")));
        }
        Ok(UrlPrefix(s))
    }
}

/// A count of at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonZero(pub usize);

impl<'de> Deserialize<'de> for NonZero {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match usize::deserialize(d)? {
            0 => Err(de::Error::custom("must be at least 1")),
            n => Ok(NonZero(n)),
        }
    }
}

/// A regular expression with two captures (script, path info).
#[derive(Clone, Debug)]
pub struct Pattern(pub regex::bytes::Regex);

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let re = regex::bytes::Regex::new(s).map_err(|e| format!("`{s}` is not a valid pattern: {e}"))?;
        if re.captures_len() != 3 {
            return Err(format!("`{s}` needs exactly two captures: the script and the path info"));
        }
        Ok(Pattern(re))
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Pattern::parse(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// `[status]`: the internal JSON status page and Prometheus metrics.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Status {
    /// Default true.
    pub enabled: bool,
    /// Default `"/_tern/status"`.
    pub path: String,
    /// Default `"/metrics"`.
    pub metrics_path: String,
    /// Client networks allowed to read them. Default loopback only.
    pub allow: Vec<Network>,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            enabled: true,
            path: "/_tern/status".into(),
            metrics_path: "/metrics".into(),
            allow: vec![
                Network::parse("127.0.0.0/8").expect("valid literal"),
                Network::parse("::1/128").expect("valid literal"),
            ],
        }
    }
}

/// An IP network in CIDR notation (`10.0.0.0/8`); a bare address is a /32
/// or /128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl Network {
    pub fn parse(s: &str) -> Option<Network> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a.parse().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (s.parse().ok()?, None),
        };
        let max = if matches!(addr, std::net::IpAddr::V4(_)) { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Network { addr, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        let bits = |a: std::net::IpAddr| -> u128 {
            match a {
                std::net::IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
                std::net::IpAddr::V6(v6) => u128::from(v6),
            }
        };
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(self.prefix)) };
        (bits(ip) & mask) == (bits(self.addr) & mask)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Network::parse(&s).ok_or_else(|| de::Error::custom(format!("`{s}` is not an address or CIDR network")))
    }
}

/// A byte size: an integer, or a string with a unit (`"64KiB"`, `"1MiB"`,
/// `"16k"`, `"2M"`, `"1G"`; powers of 1024).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl Bytes {
    pub fn parse(s: &str) -> Option<Bytes> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().ok()?;
        let mult = match unit.trim() {
            "" | "B" => 1,
            "k" | "K" | "KiB" | "KB" => 1 << 10,
            "m" | "M" | "MiB" | "MB" => 1 << 20,
            "g" | "G" | "GiB" | "GB" => 1 << 30,
            _ => return None,
        };
        n.checked_mul(mult).map(Bytes)
    }

    pub fn usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte size such as 65536 or \"64KiB\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bytes, E> {
                u64::try_from(v).map(Bytes).map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
                Bytes::parse(v)
                    .ok_or_else(|| E::custom(format!("`{v}` is not a byte size (e.g. 65536, \"64KiB\", \"1MiB\")")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration: an integer number of seconds, or a string with a unit
/// (`"50us"`, `"500ms"`, `"10s"`, `"2m"`, `"1h"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl Seconds {
    pub fn parse(s: &str) -> Option<Seconds> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().ok()?;
        let d = match unit {
            "us" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "" | "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            _ => return None,
        };
        Some(Seconds(d))
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 10 or \"10s\", \"500ms\", \"2m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                u64::try_from(v)
                    .map(|s| Seconds(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seconds, E> {
                Seconds::parse(v)
                    .ok_or_else(|| E::custom(format!("`{v}` is not a duration (e.g. 10, \"10s\", \"500ms\")")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A broken rule, already placed by [`Config::at`].
    #[error("{0}")]
    Rule(String),
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: origin.to_path_buf(), message };
        let mut config: Config = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        config.origin = Origin { path: Some(origin.to_path_buf()), text: text.to_string() };
        if let Some((section, key, message)) = config.broken_rule() {
            return Err(ConfigError::Rule(format!("{}: {message}", config.at(section, key))));
        }
        if let Some(dir) = origin.parent() {
            if config.server.root.is_relative() {
                config.server.root = dir.join(&config.server.root);
            }
            if let Some(profile) = config.static_files.io_profile.as_mut().filter(|p| p.is_relative()) {
                *profile = dir.join(&*profile);
            }
            for c in &mut config.tls.certificates {
                for path in [&mut c.cert, &mut c.key] {
                    if path.is_relative() {
                        *path = dir.join(&*path);
                    }
                }
            }
        }
        Ok(config)
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text, path)
    }

    /// Names `section.key` for an error: `FILE: line N: section.key`, as
    /// far as the file and line are known.
    pub fn at(&self, section: &str, key: &str) -> String {
        let Some(path) = &self.origin.path else { return format!("{section}.{key}") };
        match line_of(&self.origin.text, section, key) {
            Some(n) => format!("{}: line {n}: {section}.{key}", path.display()),
            None => format!("{}: {section}.{key}", path.display()),
        }
    }

    /// Threads the blocking I/O pool gets: `static.io_threads` under the
    /// reactors (`event`, `uring`), 0 under the others, whose threads may
    /// block and so do their I/O themselves.
    pub fn io_pool_threads(&self) -> usize {
        if matches!(self.server.model, Model::Event | Model::Uring) {
            self.static_files.io_threads
        } else {
            0
        }
    }

    /// Checks the rules a value's type alone cannot express (also after
    /// command-line overrides): `(section, key, message)` of the first
    /// broken one.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str, &'static str)> {
        let c = &self.compression;
        let rules = [
            (
                self.server.listen.is_empty() && self.tls.listen.is_empty(),
                "server",
                "listen",
                "at least one address is needed (here or in tls.listen)",
            ),
            (
                !self.tls.listen.is_empty() && self.tls.certificates.is_empty(),
                "tls",
                "certificates",
                "tls.listen needs at least one certificate",
            ),
            (
                !self.tls.redirect.is_empty() && self.tls.listen.is_empty(),
                "tls",
                "redirect",
                "redirects to HTTPS need tls.listen",
            ),
            (
                self.tls.hsts.bytes().any(|b| b.is_ascii_control()),
                "tls",
                "hsts",
                "must be a header value without control characters",
            ),
            (
                !(1..=16).contains(&self.tls.tickets_per_handshake),
                "tls",
                "tickets_per_handshake",
                "must be between 1 and 16",
            ),
            (self.server.workers > MAX_WORKERS, "server", "workers", "must be at most 1024 (0 = one per usable CPU)"),
            (self.server.max_connections == 0, "server", "max_connections", "must be at least 1"),
            (
                self.server.busy_poll.0 > Duration::from_millis(1),
                "server",
                "busy_poll",
                "must be at most \"1ms\" (0 = off)",
            ),
            (
                self.server.batch_wait.0 > Duration::from_millis(10),
                "server",
                "batch_wait",
                "must be at most \"10ms\" (0 = off)",
            ),
            (
                self.server.defer_accept.0.subsec_nanos() != 0 || self.server.defer_accept.0 > Duration::from_secs(60),
                "server",
                "defer_accept",
                "must be whole seconds, at most \"60s\" (0 = off)",
            ),
            (!(1..=MAX_THREADS).contains(&self.server.threads), "server", "threads", THREADS_RANGE),
            (!(1..=MAX_THREADS).contains(&self.server.max_threads), "server", "max_threads", THREADS_RANGE),
            (!(1..=MAX_THREADS).contains(&self.staged.read_threads), "staged", "read_threads", THREADS_RANGE),
            (!(1..=MAX_THREADS).contains(&self.staged.handle_threads), "staged", "handle_threads", THREADS_RANGE),
            (!(1..=MAX_THREADS).contains(&self.staged.send_threads), "staged", "send_threads", THREADS_RANGE),
            (!(1..=MAX_THREADS).contains(&self.staged.log_threads), "staged", "log_threads", THREADS_RANGE),
            (!(1..=MAX_STAGE_QUEUE).contains(&self.staged.queue), "staged", "queue", "must be between 1 and 1000000"),
            (
                self.server.cpus.iter().any(|&c| c >= CPU_SETSIZE),
                "server",
                "cpus",
                "each must be a CPU number below 1024",
            ),
            (self.static_files.read_chunk.0 == 0, "static", "read_chunk", "must be at least 1 byte"),
            (
                self.server.model != Model::Uring && self.static_files.io == IoChoice::Fixed(IoMethod::Uring),
                "static",
                "io",
                "\"uring\" reads through the engine's ring: it needs server.model = \"uring\"",
            ),
            (
                self.server.model != Model::Uring
                    && self.static_files.io_methods.contains(&IoChoice::Fixed(IoMethod::Uring)),
                "static",
                "io_methods",
                "\"uring\" reads through the engine's ring: it needs server.model = \"uring\"",
            ),
            (self.limits.unsent_bytes.0 > u64::from(u32::MAX), "limits", "unsent_bytes", "must be below 4GiB"),
            (
                self.limits.fast_unsent_bytes.0 > u64::from(u32::MAX),
                "limits",
                "fast_unsent_bytes",
                "must be below 4GiB",
            ),
            (self.static_files.open_file_cache == 0, "static", "open_file_cache", "must be at least 1"),
            (self.static_files.io_threads > 1024, "static", "io_threads", "must be at most 1024"),
            (
                self.static_files.io_classes.len() > 7
                    || self.static_files.io_classes.first().is_some_and(|b| b.0 == 0)
                    || self.static_files.io_classes.windows(2).any(|w| w[0].0 >= w[1].0),
                "static",
                "io_classes",
                "must be at most 7 sizes above 0, strictly ascending",
            ),
            (
                !self.static_files.io_methods.is_empty()
                    && self.static_files.io_methods.len() != self.static_files.io_classes.len() + 1,
                "static",
                "io_methods",
                "needs one method per size class: one more than static.io_classes has sizes",
            ),
            (
                !self.static_files.io_methods.is_empty() && self.static_files.io_profile.is_some(),
                "static",
                "io_methods",
                "cannot be combined with static.io_profile (both say which method sends each class)",
            ),
            (
                self.limits.max_headers == 0 || self.limits.max_headers > tern_http::request::MAX_HEADERS,
                "limits",
                "max_headers",
                "must be between 1 and 128",
            ),
            (self.limits.max_request_line.0 < 16, "limits", "max_request_line", "must be at least 16 bytes"),
            (
                self.limits.max_header_bytes.0 < self.limits.max_request_line.0,
                "limits",
                "max_header_bytes",
                "must be at least limits.max_request_line",
            ),
            (
                self.static_files.hidden_allow.iter().any(|p| !p.starts_with('/')),
                "static",
                "hidden_allow",
                "each must be a URL path starting with /",
            ),
            (
                self.static_files.exclude_extensions.iter().any(|e| !e.starts_with('.') || e.len() < 2),
                "static",
                "exclude_extensions",
                "each must be an extension starting with . (\".php\")",
            ),
            (self.limits.max_ranges == 0, "limits", "max_ranges", "must be at least 1"),
            (self.limits.body_buffer.0 == 0, "limits", "body_buffer", "must be at least 1 byte"),
            (self.server.user.is_empty() && !self.server.group.is_empty(), "server", "group", "needs server.user"),
            (self.timeouts.header.0.is_zero(), "timeouts", "header", "must be more than 0"),
            (!self.status.path.starts_with('/'), "status", "path", "must be a URL path starting with /"),
            (
                !self.status.metrics_path.starts_with('/'),
                "status",
                "metrics_path",
                "must be a URL path starting with /",
            ),
            (self.cgi.max_processes == 0, "cgi", "max_processes", "must be at least 1"),
            (self.cgi.pipe_buffer.0 == 0, "cgi", "pipe_buffer", "must be at least 1 byte"),
            (
                self.cgi.directories.iter().any(|d| !d.starts_with('/')),
                "cgi",
                "directories",
                "each must be a URL path starting with /",
            ),
            (!(1..=12).contains(&c.gzip_level), "compression", "gzip_level", "must be between 1 and 12"),
            (c.br_level > 11, "compression", "br_level", "must be between 0 and 11"),
            (!(1..=19).contains(&c.zstd_level), "compression", "zstd_level", "must be between 1 and 19"),
            (c.max_size.0 < c.min_size.0, "compression", "max_size", "must be at least compression.min_size"),
            (c.background_threads == 0, "compression", "background_threads", "must be at least 1"),
            (c.background_queue == 0, "compression", "background_queue", "must be at least 1"),
            (c.idle.0.is_zero(), "compression", "idle", "must be more than 0"),
            (
                c.mime_types.iter().any(|m| !m.contains('/') || m.contains(';')),
                "compression",
                "mime_types",
                "each must be `type/subtype` or `type/*`, without parameters",
            ),
        ];
        rules.into_iter().find(|r| r.0).map(|(_, section, key, message)| (section, key, message))
    }
}

/// What a thread count must be (see [`MAX_THREADS`]).
const THREADS_RANGE: &str = "must be between 1 and 100000";

/// The 1-based line where `key` is set inside `[section]`, if written there.
fn line_of(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = "";
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.trim();
        } else if current == section && line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return Some(n + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/tern/tern.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_need_no_file() {
        let c = parse("").unwrap();
        assert_eq!(c.static_files.io, IoChoice::Auto);
        assert_eq!(c.static_files.io_classes, [Bytes(16384), Bytes(262144)]);
        assert_eq!(c.static_files.io_profile, None);
        assert_eq!((c.static_files.io_threads, c.io_pool_threads()), (32, 32));
        assert_eq!(c.limits.max_body_bytes, Bytes(1 << 20));
        assert_eq!(c.limits.body_buffer, Bytes(64 << 10));
        assert_eq!(c.timeouts.keepalive, Seconds(Duration::from_secs(15)));
        assert_eq!(c.server.root, PathBuf::from("/etc/tern/."));
    }

    #[test]
    fn models_and_their_thread_settings() {
        let c = parse("[server]\nmodel = \"pool\"\nthreads = 8\ncpus = [0]\n").unwrap();
        assert_eq!((c.server.model, c.server.threads, c.server.cpus.as_slice()), (Model::Pool, 8, &[0][..]));
        assert_eq!(c.io_pool_threads(), 0, "a pool thread may block: no I/O pool");
        let c = parse("[server]\nmodel = \"per-request\"\nmax_threads = 100\n").unwrap();
        assert_eq!((c.server.model, c.server.max_threads), (Model::PerRequest, 100));
        assert_eq!((Config::default().server.threads, Config::default().server.max_threads), (32, 5000));
        let c = parse("[server]\nmodel = \"staged\"\n[staged]\nsend_threads = 4\nqueue = 8\n").unwrap();
        assert_eq!((c.server.model, c.staged.threads(), c.staged.queue), (Model::Staged, [2, 2, 4, 1], 8));
        assert_eq!((Config::default().staged.threads(), Config::default().staged.queue), ([2, 2, 16, 1], 256));
        assert_eq!(Config::default().server.busy_poll.0, Duration::from_micros(50));
        assert_eq!(Config::default().server.defer_accept.0, Duration::from_secs(1));
        assert_eq!(parse("[server]\ndefer_accept = 0\n").unwrap().server.defer_accept.0, Duration::ZERO);
        assert_eq!(parse("[server]\nbusy_poll = \"200us\"\n").unwrap().server.busy_poll.0, Duration::from_micros(200));
        assert_eq!(parse("[server]\nbusy_poll = 0\n").unwrap().server.busy_poll.0, Duration::ZERO);
        assert_eq!(Config::default().server.batch_wait.0, Duration::ZERO);
        assert_eq!(
            parse("[server]\nbatch_wait = \"200us\"\n").unwrap().server.batch_wait.0,
            Duration::from_micros(200)
        );
        assert!(parse("[server]\nbatch_wait = \"11ms\"\n").unwrap_err().contains("server.batch_wait: must be at most"));
        for (text, wanted) in [
            ("[server]\nthreads = 0\n", "line 2: server.threads: must be between 1 and 100000"),
            ("[staged]\nread_threads = 1\nhandle_threads = 0\n", "line 3: staged.handle_threads: must be between 1"),
            ("[staged]\nlog_threads = 100001\n", "line 2: staged.log_threads: must be between 1 and 100000"),
            ("[staged]\nsend_threads = 0\n", "line 2: staged.send_threads: must be between 1"),
            ("[staged]\n\nqueue = 0\n", "line 3: staged.queue: must be between 1 and 1000000"),
            ("[server]\nmax_threads = 0\n", "line 2: server.max_threads: must be between 1 and 100000"),
            ("[server]\ncpus = [4096]\n", "line 2: server.cpus: each must be a CPU number below 1024"),
            ("[server]\n\nbusy_poll = \"2ms\"\n", "line 3: server.busy_poll: must be at most \"1ms\""),
            ("[server]\nbusy_poll = \"50 us\"\n", "line 2"),
            ("[server]\ndefer_accept = \"500ms\"\n", "line 2: server.defer_accept: must be whole seconds"),
            ("[tls]\ntickets_per_handshake = 0\n", "line 2: tls.tickets_per_handshake: must be between 1 and 16"),
            (
                "[server]\n\ndefer_accept = \"2m\"\n",
                "line 3: server.defer_accept: must be whole seconds, at most \"60s\"",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text:?}: {e}");
        }
        let e = parse("[server]\nmodel = \"threads\"\n").unwrap_err();
        assert!(e.contains("unknown variant `threads`") && e.contains("line 2"), "{e}");
        assert_eq!("per-request".parse::<Model>(), Ok(Model::PerRequest));
        assert!("fork".parse::<Model>().unwrap_err().contains("expected event, pool, staged, per-request or uring"));
    }

    #[test]
    fn values_with_units() {
        let c = parse("[static]\nio = \"mmap\"\nread_chunk = \"16KiB\"\n[timeouts]\nheader = \"500ms\"\nbody = 3\n")
            .unwrap();
        assert_eq!(c.static_files.io, IoChoice::Fixed(IoMethod::Mmap));
        assert_eq!(c.static_files.read_chunk, Bytes(16384));
        assert_eq!(c.timeouts.header, Seconds(Duration::from_millis(500)));
        assert_eq!(c.timeouts.body, Seconds(Duration::from_secs(3)));
    }

    #[test]
    fn io_classes_and_profile() {
        let c = parse("[static]\nio_classes = [\"4KiB\", 65536, \"1MiB\"]\nio_profile = \"io.toml\"\n").unwrap();
        assert_eq!(c.static_files.io_classes, [Bytes(4096), Bytes(65536), Bytes(1 << 20)]);
        assert_eq!(c.static_files.io_profile, Some(PathBuf::from("/etc/tern/io.toml")));
        let c = parse("[static]\nio = \"auto\"\nio_classes = []\n").unwrap();
        assert_eq!(c.static_files.io, IoChoice::Auto);
        assert!(c.static_files.io_classes.is_empty());
        for bad in ["[\"64KiB\", \"16KiB\"]", "[0]", "[\"1KiB\", \"1KiB\"]"] {
            let e = parse(&format!("[static]\nio = \"auto\"\nio_classes = {bad}\n")).unwrap_err();
            assert!(e.contains("line 3") && e.contains("static.io_classes") && e.contains("ascending"), "{bad}: {e}");
        }
        let e = parse("[static]\nio_classes = [\"lots\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("io_classes"), "{e}");
    }

    #[test]
    fn io_methods_one_per_class() {
        let c = parse("[static]\nio_methods = [\"mmap\", \"auto\", \"sendfile\"]\n").unwrap();
        assert_eq!(
            c.static_files.io_methods,
            [IoChoice::Fixed(IoMethod::Mmap), IoChoice::Auto, IoChoice::Fixed(IoMethod::Sendfile)]
        );
        assert!(parse("").unwrap().static_files.io_methods.is_empty());
        for (text, wanted) in [
            ("[static]\n\nio_methods = [\"mmap\"]\n", "line 3: static.io_methods: needs one method per size class"),
            (
                "[static]\nio_classes = [\"1MiB\"]\nio_methods = [\"mmap\", \"mmap\", \"read\"]\n",
                "line 3: static.io_methods: needs one method per size class",
            ),
            (
                "[static]\nio_profile = \"io.toml\"\nio_methods = [\"mmap\", \"mmap\", \"read\"]\n",
                "line 3: static.io_methods: cannot be combined with static.io_profile",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text:?}: {e}");
        }
        let e = parse("[static]\nio_methods = [\"mmap\", \"splice\", \"read\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("splice"), "{e}");
    }

    #[test]
    fn the_uring_method_needs_the_uring_model() {
        let c = parse("[server]\nmodel = \"uring\"\n[static]\nio = \"uring\"\n").unwrap();
        assert_eq!((c.server.model, c.static_files.io), (Model::Uring, IoChoice::Fixed(IoMethod::Uring)));
        assert!(parse("[server]\nmodel = \"uring\"\n[static]\nio_methods = [\"mmap\", \"uring\", \"uring\"]\n").is_ok());
        for (text, wanted) in [
            ("[static]\nio = \"uring\"\n", "line 2: static.io: \"uring\" reads through the engine's ring"),
            ("[static]\nio_methods = [\"mmap\", \"uring\", \"read\"]\n", "line 2: static.io_methods: \"uring\""),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted) && e.contains("server.model = \"uring\""), "{text:?}: {e}");
        }
    }

    #[test]
    fn errors_name_key_and_line() {
        let e = parse("[server]\nworkers = 2\n\n[static]\nio = \"splice\"\n").unwrap_err();
        assert!(e.contains("line 5") && e.contains("io") && e.contains("splice"), "{e}");
        let e = parse("[server]\nlisten = [\"localhost\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("listen") && e.contains("IP:PORT"), "{e}");
        let e = parse("[server]\nlisten = [\"example.com:80\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("`example.com:80` is not a listen address"), "{e}");
        let e = parse("[limits]\nmax_body = 5\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("max_body"), "{e}");
        let e = parse("[timeouts]\nsend = \"fast\"\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("send"), "{e}");
        let e = parse("[server]\nworkers = 1\n[limits]\nmax_headers = 500\n").unwrap_err();
        assert!(e.contains("line 4: limits.max_headers"), "{e}");
        let e = parse("[limits]\nmax_ranges = 3\nbody_buffer = 0\n").unwrap_err();
        assert!(e.contains("line 3: limits.body_buffer"), "{e}");
    }

    #[test]
    fn compression_section() {
        let c = parse("").unwrap().compression;
        assert!(c.enabled && c.adaptive);
        assert_eq!(c.codings, [CodingName::Br, CodingName::Zstd, CodingName::Gzip]);
        let c =
            parse("[compression]\ncodings = [\"gzip\"]\ncache_memory = \"1MiB\"\nidle = \"2s\"\n").unwrap().compression;
        assert_eq!(c.codings, [CodingName::Gzip]);
        assert_eq!(c.cache_memory, Bytes(1 << 20));
        assert_eq!(c.idle, Seconds(Duration::from_secs(2)));
        let e = parse("[compression]\nenabled = true\ncodings = [\"deflate\"]\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("codings") && e.contains("deflate"), "{e}");
        let e = parse("[compression]\n\ngzip_level = 13\n").unwrap_err();
        assert!(e.contains("line 3: compression.gzip_level"), "{e}");
        let e = parse("[compression]\nmime_types = [\"html\"]\n").unwrap_err();
        assert!(e.contains("line 2: compression.mime_types"), "{e}");
    }

    #[test]
    fn user_group_and_allow_root() {
        let c = parse("").unwrap();
        assert!(c.server.user.is_empty() && c.server.group.is_empty() && !c.cgi.allow_root);
        let c = parse("[server]\nuser = \"www-data\"\ngroup = \"adm\"\n[cgi]\nallow_root = true\n").unwrap();
        assert_eq!((c.server.user.as_str(), c.server.group.as_str(), c.cgi.allow_root), ("www-data", "adm", true));
        let e = parse("[server]\n\ngroup = \"adm\"\n").unwrap_err();
        assert!(e.contains("line 3: server.group: needs server.user"), "{e}");
    }

    #[test]
    fn listen_forms() {
        let addrs = |s: &str| s.parse::<Listen>().map(|l| l.addrs.iter().map(ToString::to_string).collect::<Vec<_>>());
        let all = Ok(vec!["0.0.0.0:8080".to_string(), "[::]:8080".to_string()]);
        assert_eq!(addrs("8080"), all);
        assert_eq!(addrs(":8080"), all);
        assert_eq!(addrs("*:8080"), all);
        assert_eq!(addrs("localhost:8080"), Ok(vec!["127.0.0.1:8080".into(), "[::1]:8080".into()]));
        assert_eq!(addrs("[::]:8080"), Ok(vec!["[::]:8080".into()]));
        assert_eq!(addrs("0.0.0.0:8080"), Ok(vec!["0.0.0.0:8080".into()]));
        assert_eq!(addrs("127.0.0.1:0"), Ok(vec!["127.0.0.1:0".into()]));
        assert_eq!(addrs("[::1]:443"), Ok(vec!["[::1]:443".into()]));
        for bad in
            ["", ":", "localhost", "localhost:", "8080x", "65536", ":-1", "+80", "example.com:80", "::1:80", "[::1]"]
        {
            assert!(addrs(bad).unwrap_err().contains("is not a listen address"), "{bad:?}");
        }
        let c = parse("[server]\nlisten = [\"localhost:8080\", \"9090\"]\n").unwrap();
        assert_eq!(c.server.listen.iter().map(|l| l.addrs.len()).collect::<Vec<_>>(), [2, 2]);
    }

    #[test]
    fn fastcgi_backends() {
        let c = parse(
            "[fastcgi.backends.php]\naddress = \"unix:/tmp/php.sock\"\nextensions = [\".php\"]\n\n[fastcgi.backends.app]\naddress = \"127.0.0.1:9000\"\nprefixes = [\"/app\"]\nmax_connections = 3\nread_timeout = \"500ms\"\n",
        )
        .unwrap();
        let php = &c.fastcgi.backends["php"];
        assert_eq!(php.address, FastCgiAddress::Unix("/tmp/php.sock".into()));
        assert_eq!((php.max_connections, php.keep_conn, php.check_file), (NonZero(8), true, true));
        assert_eq!(php.connect_timeout.0, Duration::from_secs(2));
        let app = &c.fastcgi.backends["app"];
        assert_eq!(app.address, FastCgiAddress::Tcp("127.0.0.1:9000".parse().unwrap()));
        assert_eq!((app.max_connections, app.read_timeout.0), (NonZero(3), Duration::from_millis(500)));
        assert_eq!(app.prefixes, [UrlPrefix("/app".into())]);
        for (text, needle) in [
            ("[fastcgi.backends.x]\nextensions = []\n", "line 1"),
            ("[fastcgi.backends.x]\naddress = \"unix:php.sock\"\n", "line 2"),
            ("[fastcgi.backends.x]\naddress = \"localhost\"\n", "neither"),
            ("[fastcgi.backends.x]\naddress = \"unix:/s\"\nmax_connections = 0\n", "line 3"),
            ("[fastcgi.backends.x]\naddress = \"unix:/s\"\nsplit_path_info = \"(a)\"\n", "two captures"),
            ("[fastcgi.backends.x]\naddress = \"unix:/s\"\nprefixes = [\"app\"]\n", "line 3"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn networks() {
        let n = Network::parse("127.0.0.0/8").unwrap();
        assert!(n.contains("127.1.2.3".parse().unwrap()));
        assert!(n.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!n.contains("10.0.0.1".parse().unwrap()));
        assert!(Network::parse("::1/128").unwrap().contains("::1".parse().unwrap()));
        assert!(Network::parse("10.0.0.0/33").is_none());
    }
}
