//! `[server]`: where and how to listen, and the keys of the composition
//! root (`server.rs`). Its readers are spread over every layer (the engines
//! take the model and its thread counts, the site the document root, the
//! connections the `Server` header), and its one owner, the composition
//! root, sits above this layer: so it lives here, and `Config` hands each
//! module the values it reads (`Config::engine`, `Config::site`,
//! `Config::lent`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::engine::front::{MAX_THREADS, THREADS_RANGE};
use crate::engine::Model;
use crate::listeners::Listen;
use crate::resolve::Symlinks;
use crate::values::{first_broken, Seconds};

/// `[server]`: where and how to listen.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Server {
    /// Addresses to listen on (see [`Listen`] for the forms); port 0 picks
    /// a free port. An entry may be a table that says whether its
    /// addresses speak h2c, in place of `http2.protocols`:
    /// `{ address = "127.0.0.1:8081", protocols = ["h2c"] }` (or `[]`).
    /// Default `["127.0.0.1:8080"]`.
    pub listen: Vec<Listen>,
    /// Document root; relative to the config file's directory. Default
    /// `"."`: that directory (the current one without a file).
    pub root: PathBuf,
    /// Worker threads (one reactor each); 0 = the CPUs this process may use
    /// (affinity mask and cgroup quota), at most 1024 ([`MAX_WORKERS`]).
    /// Default 0.
    pub workers: usize,
    /// Concurrency model: who runs the connection code (SPEC 2.6).
    /// Default `"event"`.
    pub model: Model,
    /// `pool`: the threads that serve connections while they have work
    /// (1–100000). Default 32.
    pub threads: usize,
    /// `per-request`: the most connection threads alive at once; past it a
    /// new connection gets `503` and is closed (1–100000). Default 5000.
    pub max_threads: usize,
    /// The CPUs the server's threads run on (`sched_setaffinity`); empty =
    /// wherever the process may run, e.g. `[0, 1]`. With `workers = 0`,
    /// one worker per CPU listed. Default `[]`.
    pub cpus: Vec<usize>,
    /// Open connections across all workers. At it, the longest-idle
    /// keep-alive connection (this worker's, else another's) is closed to
    /// make room for a new one; with none idle, the new connection gets
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
    /// The status answered to a request whose host no `[[site]]` lists
    /// when no site is `default`: 421 (Misdirected Request: this server
    /// does not serve that name) or 404. Default 421.
    pub unknown_host: u16,
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
            unknown_host: 421,
        }
    }
}

/// The most workers a configuration may ask for: far past any useful
/// count (one reactor per CPU), low enough that a typo such as 100000 is
/// refused rather than starting that many threads.
pub const MAX_WORKERS: usize = 1024;

/// CPU numbers `server.cpus` may name (the kernel's `cpu_set_t`).
pub const CPU_SETSIZE: usize = 1024;

impl Server {
    /// The first rule of `[server]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (self.workers > MAX_WORKERS, "workers", "must be at most 1024 (0 = one per usable CPU)"),
            (self.max_connections == 0, "max_connections", "must be at least 1"),
            (self.busy_poll.0 > Duration::from_millis(1), "busy_poll", "must be at most \"1ms\" (0 = off)"),
            (self.batch_wait.0 > Duration::from_millis(10), "batch_wait", "must be at most \"10ms\" (0 = off)"),
            (
                self.defer_accept.0.subsec_nanos() != 0 || self.defer_accept.0 > Duration::from_secs(60),
                "defer_accept",
                "must be whole seconds, at most \"60s\" (0 = off)",
            ),
            (!(1..=MAX_THREADS).contains(&self.threads), "threads", THREADS_RANGE),
            (!(1..=MAX_THREADS).contains(&self.max_threads), "max_threads", THREADS_RANGE),
            (self.cpus.iter().any(|&c| c >= CPU_SETSIZE), "cpus", "each must be a CPU number below 1024"),
            (self.user.is_empty() && !self.group.is_empty(), "group", "needs server.user"),
            (!matches!(self.unknown_host, 404 | 421), "unknown_host", "must be 421 or 404"),
        ])
    }
}
