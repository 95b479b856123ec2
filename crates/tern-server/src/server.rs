//! Starting and stopping: listeners, worker threads, signals.
//!
//! A start is prepared while the process may still be root (`Prepared`):
//! the rules checked, the logs opened, every address bound through
//! `listeners.rs` (refused when another process listens on it) and each
//! listening socket, new or inherited, given the options every accepted
//! connection inherits (`TCP_NODELAY`, `limits.unsent_bytes`,
//! `server.defer_accept`). `tern serve --check` runs this preparation and
//! the site's, then drops them ([`Server::check`]). Then root is given up
//! (`privileges.rs`), `Shared` built and the engine started.
//!
//! A reload is a second `Server` in the same process (the CLI starts it on
//! SIGHUP): it takes over the first one's listening sockets
//! and the pools of the backends it keeps as they were
//! ([`Server::inheritance`]), then the first retires: `Shared::successor`
//! points at the new workers' inboxes (`handover.rs`), each old worker
//! passes a connection on — socket and unanswered bytes — as soon as no
//! request is in flight on it, and the old server ends in the background
//! once it holds none ([`Retiring`]).

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use tern_http::request::Limits as HttpLimits;

use crate::access_log::AccessTarget;
use crate::compress::Compression;
use crate::config::Config;
use crate::engine;
use crate::error_log::{log, Level};
use crate::handover::Doors;
use crate::limits::Limits;
use crate::listeners::Spoken;
use crate::metrics::{Ending, ServerStats};
use crate::offload::Offload;
use crate::per_ip::PerIp;
use crate::room::Room;
use crate::service_records::RecordTarget;
use crate::shared::Shared;
use crate::site::app::Apps;
use crate::site::upstream::pool::Inherited;
use crate::site::Sites;
use crate::static_io::{StaticFiles, StaticIo};
use crate::tls::{self, Role};
use crate::{calibrate, error_log, listeners, privileges, sys};

/// What a signal asks of a running server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM or SIGINT: stop gracefully.
    Stop,
    /// SIGHUP: load the configuration again and take over from this server.
    Reload,
}

/// A running server.
pub struct Server {
    config: Config,
    /// SIGTERM and SIGINT, caught from before the first connection can be
    /// accepted: a signal sent as soon as the server answers must stop it
    /// gracefully, not kill it with the default action.
    signals: signal_hook::iterator::Signals,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    wakers: Vec<Arc<mio::Waker>>,
    addrs: Vec<(SocketAddr, Role)>,
    /// Duplicates of the workers' listening sockets, for a successor.
    handover: Vec<std::net::TcpListener>,
    /// The workers' inboxes, for the server this one replaces.
    doors: Arc<Doors>,
}

/// What a server replacing this one takes over ([`Server::inheritance`]):
/// its listening sockets, and its backends' connection pools, which it
/// shares with its successor while it finishes its last requests
/// (`site/upstream/pool.rs` says why).
#[derive(Default)]
pub struct Inheritance {
    listeners: Vec<std::net::TcpListener>,
    pools: Inherited,
}

/// A server replaced on reload, finishing in the background: it hands its
/// connections to its successor as they fall idle and ends when none is
/// left (or at `server.reload_drain_timeout`).
pub struct Retiring {
    /// Gone once it has ended.
    shared: Weak<Shared>,
    /// `server.shutdown_timeout`, for [`Retiring::hurry`].
    shutdown_timeout: std::time::Duration,
    wakers: Vec<Arc<mio::Waker>>,
    done: JoinHandle<()>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {addr}: {error}")]
    Listen { addr: SocketAddr, error: std::io::Error },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What a start opens and checks while it may still be root, before any
/// thread of the server runs: the rules, the logs, every address bound
/// (not yet listening) and found free. [`Server::check`] builds it (and
/// the site) and drops it, so a check runs the code a start runs.
struct Prepared {
    config: Config,
    /// The access logs (`Config::access_logs`).
    access: Vec<AccessTarget>,
    records: RecordTarget,
    /// Per worker, one socket per address.
    per_worker: Vec<Vec<socket2::Socket>>,
    addrs: Vec<(SocketAddr, Role)>,
    /// Certificates read, when some address serves HTTPS.
    tls: Option<tls::Setup>,
    /// Which forms of HTTP/2 each address speaks.
    http2: Spoken,
}

impl Prepared {
    fn new(config: Config, inherited: Vec<std::net::TcpListener>) -> Result<Prepared, StartError> {
        if let Some((section, key, message)) = config.broken_rule() {
            return Err(StartError::Config(format!("{}: {message}", config.at(section, key))));
        }
        let at = |key| config.at("log", key);
        error_log::init(&config.log.error, config.log.level)
            .map_err(|e| StartError::Config(format!("{}: cannot open {}: {e}", at("error"), config.log.error)))?;
        let access = config
            .access_logs()
            .0
            .iter()
            .map(|(path, format)| {
                AccessTarget::open(path, *format)
                    .map_err(|e| StartError::Config(format!("{}: cannot open {path}: {e}", at("access"))))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let records = RecordTarget::open(&config.log.service_records).map_err(|e| {
            StartError::Config(format!("{}: cannot open {}: {e}", at("service_records"), config.log.service_records))
        })?;
        let workers = match (config.server.workers, config.server.cpus.len()) {
            (0, 0) => sys::usable_cpus(),
            (0, cpus) => cpus,
            (n, _) => n,
        };
        if let Some(cpu) = sys::cpu_not_allowed(&config.server.cpus) {
            return Err(StartError::Config(format!(
                "{}: CPU {cpu} is not one this process may run on",
                config.at("server", "cpus")
            )));
        }
        let mut tls = tls::Setup::load(&config.tls).map_err(StartError::Config)?;
        engine::probe(&config.engine())?;

        // Each worker gets its own SO_REUSEPORT socket per address; the
        // first one fixes the port when the configuration asks for port 0.
        // Sockets handed over by a server being replaced are used first, so
        // no connection waits in the queue of a socket about to close.
        let mut per_worker: Vec<Vec<socket2::Socket>> = (0..workers).map(|_| Vec::new()).collect();
        let mut addrs = Vec::new();
        let mut spoken = Vec::new();
        let mut inherited = inherited;
        let roles = [
            (Role::Http, &config.server.listen),
            (Role::Https, &config.tls.listen),
            (Role::Redirect, &config.tls.redirect),
        ];
        for (role, listen) in roles.into_iter().flat_map(|(role, l)| l.iter().map(move |l| (role, l))) {
            // The addresses of one entry (`localhost:0`) share the port the
            // first one gets.
            let mut port = 0;
            for &named in &listen.addrs {
                let mut addr = named;
                if addr.port() == 0 {
                    addr.set_port(port);
                }
                let (mut mine, rest): (Vec<_>, Vec<_>) =
                    inherited.into_iter().partition(|l| l.local_addr().is_ok_and(|a| a == addr));
                inherited = rest;
                for sockets in per_worker.iter_mut() {
                    let s = match mine.pop() {
                        Some(l) => socket2::Socket::from(l),
                        None => listeners::bind(addr).map_err(|error| StartError::Listen { addr, error })?,
                    };
                    addr = s.local_addr()?.as_socket().unwrap_or(addr);
                    sockets.push(s);
                }
                // Fewer workers than before: every handed-over socket is
                // still watched by someone.
                for (i, l) in mine.into_iter().enumerate() {
                    per_worker[i % workers].push(socket2::Socket::from(l));
                }
                port = addr.port();
                addrs.push((addr, role));
                spoken.push((addr, listen.protocols.clone()));
            }
        }
        if let Some(tls) = tls.as_mut() {
            tls.bound(&addrs);
        }
        for s in per_worker.iter().flatten() {
            // Inherited by every accepted connection (Linux): responses leave
            // in whole writes, and Nagle would only delay a head sent ahead
            // of a sendfile body.
            s.set_tcp_nodelay(true)?;
            sys::limit_unsent(s.as_fd(), config.limits.unsent_bytes.0)?;
            sys::defer_accept(s.as_fd(), config.server.defer_accept.0)?;
        }
        let http2 = Spoken::new(&config.http2.protocols, spoken);
        let prepared = Prepared { config, access, records, per_worker, addrs, tls, http2 };
        prepared.refuse_taken()?;
        Ok(prepared)
    }

    /// An address another process listens on too is an error.
    fn refuse_taken(&self) -> Result<(), StartError> {
        let ours: Vec<&socket2::Socket> = self.per_worker.iter().flatten().collect();
        match listeners::taken(&ours) {
            Ok(None) => Ok(()),
            Ok(Some(addr)) => Err(StartError::Listen {
                addr,
                error: std::io::Error::new(std::io::ErrorKind::AddrInUse, "address already in use by another process"),
            }),
            Err(e) => Err(StartError::Config(format!("cannot read the listening sockets from /proc/net: {e}"))),
        }
    }

    /// The sites (document roots, locations, CGI settings) with the
    /// compression threads, and the static I/O choices (an `io_profile`
    /// read).
    fn site(&self, pools: Inherited) -> Result<(Sites, StaticIo), StartError> {
        // Dropped on any error, which also ends its threads.
        let compression = Compression::start(&self.config.compression)?;
        let site = Sites::new(self.config.sites(), compression, pools)?;
        let io = StaticIo::new(&self.config.static_files, self.config.sending_methods()).map_err(StartError::Config)?;
        Ok((site, io))
    }
}

impl Server {
    /// Binds, spawns the workers and returns; [`Server::run_until_signal`]
    /// or [`Server::stop`] ends it.
    pub fn start(config: Config) -> Result<Server, StartError> {
        Server::start_inheriting(config, Inheritance::default())
    }

    /// Tries everything a start would (rules, logs, every address bound and
    /// free, `server.user` known, document root, CGI settings), then lets it
    /// all go: nothing listens, no worker runs, no privilege is dropped.
    /// Returns the addresses it bound.
    pub fn check(config: Config) -> Result<Vec<(SocketAddr, Role)>, StartError> {
        let prepared = Prepared::new(config, Vec::new())?;
        let s = &prepared.config.server;
        if !s.user.is_empty() {
            privileges::lookup(&s.user, &s.group).map_err(|m| StartError::Config(format!("server.user: {m}")))?;
        }
        prepared.site(Inherited::default())?;
        Ok(prepared.addrs)
    }

    /// Starts a server that takes over from the server it replaces (its
    /// [`Server::inheritance`]) the listening sockets of the addresses it
    /// shares with it (those of other addresses are closed) and the pools
    /// of the backends it keeps with the same address and size.
    pub fn start_inheriting(config: Config, inherited: Inheritance) -> Result<Server, StartError> {
        Server::launch(config, inherited, Apps::default())
    }

    /// Starts a server whose site also answers with `apps` below their
    /// prefixes (before CGI, FastCGI and files): how a program built on
    /// tern serves its own pages, e.g. `tern lab serve`.
    pub fn start_with(config: Config, apps: Apps) -> Result<Server, StartError> {
        Server::launch(config, Inheritance::default(), apps)
    }

    fn launch(config: Config, inherited: Inheritance, apps: Apps) -> Result<Server, StartError> {
        sys::block_signals(&[libc::SIGCHLD]);
        sys::tune_allocator();
        let signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
        let prepared = Prepared::new(config, inherited.listeners)?;
        for socket in prepared.per_worker.iter().flatten() {
            socket.listen(prepared.config.server.backlog)?;
        }
        // Two servers that started at the same moment see each other only
        // now.
        prepared.refuse_taken()?;

        // Root's work is done (listeners bound, logs open): become
        // server.user before any thread of this server starts, then check
        // that the root is still readable by who the server now is.
        drop_privileges(&prepared.config)?;
        // Every thread this server starts (compression, I/O pool, engine,
        // calibration) runs on `server.cpus`: a thread starts with the set
        // of the one that starts it. The caller's own set comes back at the
        // end of the start.
        let cpus = &prepared.config.server.cpus;
        let _pinned = sys::Pinned::new(cpus).map_err(|e| {
            StartError::Config(format!("{}: cannot run on CPUs {cpus:?}: {e}", prepared.config.at("server", "cpus")))
        })?;
        let (mut site, io) = prepared.site(inherited.pools)?;
        site.apps = apps;
        let io = Arc::new(io);
        let Prepared { config, access, records, per_worker, addrs, tls, http2 } = prepared;
        if crate::privileges::is_root()
            && !config.cgi.allow_root
            && config.server.user.is_empty()
            && !(config.cgi.directories.is_empty() && config.cgi.extensions.is_empty())
        {
            log!(
                Level::Warn,
                "running as root without server.user: CGI programs will be refused (403); set server.user, \
                 or cgi.allow_root = true to run them as root"
            );
        }
        let workers = per_worker.len();
        let per_worker: Vec<Vec<std::net::TcpListener>> =
            per_worker.into_iter().map(|sockets| sockets.into_iter().map(Into::into).collect()).collect();
        let handover = per_worker.iter().flatten().map(std::net::TcpListener::try_clone).collect::<Result<_, _>>()?;

        let per_ip = PerIp::new(config.limits.max_connections_per_ip);
        let http_limits = HttpLimits {
            max_request_line: config.limits.max_request_line.usize(),
            max_head_bytes: config.limits.max_header_bytes.usize(),
            max_headers: config.limits.max_headers,
        };
        let (static_files, limits) = (config.static_files.clone(), config.limits.clone());
        let offload = match config.io_pool_threads() {
            0 => None,
            n => Some(Offload::start(n)?),
        };
        let plan = config.engine();
        let blocks = engine::stat_blocks(&plan, workers);
        let sites = site.sites.len();
        let shared = Arc::new(Shared {
            config: config.lent(),
            http_limits,
            site,
            server: ServerStats::new(workers, blocks, sites),
            access,
            records,
            io: io.clone(),
            offload,
            per_ip,
            tls,
            http2,
            room: Room::new(workers),
            doors: std::sync::OnceLock::new(),
        });
        let started = engine::start(&shared, &plan, per_worker)?;
        let wakers: Vec<Arc<mio::Waker>> = started.doors.iter().map(|(_, waker)| waker.clone()).collect();
        if io.needs_calibration() {
            std::thread::Builder::new()
                .name("tern-calibrate".into())
                .spawn(move || calibrate_in_background(&io, &static_files, &limits))?;
        } else {
            log!(Level::Info, "{}", io.describe());
        }
        let doors = Arc::new(Doors::new(started.doors));
        let _ = shared.doors.set(doors.clone());
        Ok(Server { config, signals, shared, workers: started.threads, wakers, addrs, handover, doors })
    }

    /// Which I/O method sends which file, and why.
    pub fn static_io(&self) -> &Arc<StaticIo> {
        &self.shared.io
    }

    /// What a server that takes over from this one inherits: the listening
    /// sockets (duplicated) and the backends' pools.
    pub fn inheritance(&self) -> std::io::Result<Inheritance> {
        let listeners = self.handover.iter().map(std::net::TcpListener::try_clone).collect::<Result<_, _>>()?;
        Ok(Inheritance { listeners, pools: self.shared.site.pools.to_inherit() })
    }

    /// The bound addresses (with real ports where port 0 was asked for)
    /// and what each serves.
    pub fn local_addrs(&self) -> &[(SocketAddr, Role)] {
        &self.addrs
    }

    /// Worker threads (event), fronts (pool, staged) or acceptors (per-request):
    /// one per listener set.
    pub fn workers(&self) -> usize {
        self.shared.server.worker_threads
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Waits for the next signal that concerns the server: SIGTERM or
    /// SIGINT (stop) or SIGHUP (reload).
    pub fn wait_for_signal(&mut self) -> Signal {
        match self.signals.forever().next() {
            Some(libc::SIGHUP) => Signal::Reload,
            _ => Signal::Stop,
        }
    }

    /// Stops accepting, lets in-flight responses finish (up to
    /// `server.shutdown_timeout`), joins the workers, then stops the
    /// background compression threads.
    pub fn stop(mut self) {
        // Only the workers' sockets may stay open while they stop accepting.
        self.handover.clear();
        let limit = self.config.server.shutdown_timeout.0;
        end(&self.shared, &self.wakers, Ending::Stop, Some(limit));
        finish(self.shared, self.workers);
    }

    /// Reload: `successor` has taken over the listening sockets; this
    /// server stops accepting, hands each connection over as soon as no
    /// request is in flight on it, and ends in the background.
    pub fn retire(mut self, successor: &Server) -> Retiring {
        self.handover.clear();
        self.doors.succeeded_by(successor.doors.clone());
        let limit = self.config.server.reload_drain_timeout.0;
        end(&self.shared, &self.wakers, Ending::Reload, (!limit.is_zero()).then_some(limit));
        self.shared.site.pools.retire(&successor.shared.site.pools);
        let shared = Arc::downgrade(&self.shared);
        let (strong, workers) = (self.shared, self.workers);
        let pinned = sys::Pinned::new(&self.config.server.cpus);
        let done = std::thread::spawn(move || finish(strong, workers));
        drop(pinned);
        Retiring { shared, shutdown_timeout: self.config.server.shutdown_timeout.0, wakers: self.wakers, done }
    }
}

/// Becomes `server.user`, when set (handing it the log files first, so a
/// reload can reopen them), and refuses a document root the server can no
/// longer read.
fn drop_privileges(config: &Config) -> Result<(), StartError> {
    let s = &config.server;
    let who = if s.user.is_empty() {
        format!("uid {}", rustix::process::geteuid().as_raw())
    } else {
        let account =
            privileges::lookup(&s.user, &s.group).map_err(|m| StartError::Config(format!("server.user: {m}")))?;
        if privileges::is_root() {
            let access = config.access_logs().0;
            let logs = access.iter().map(|(path, _)| path.as_str());
            let logs: Vec<&str> = logs.chain([config.log.service_records.as_str(), &config.log.error]).collect();
            privileges::hand_over_logs(&logs, &account).map_err(|e| StartError::Config(format!("server.user: {e}")))?;
        }
        privileges::become_user(&account)
            .map_err(|e| StartError::Config(format!("server.user: cannot become {}: {e}", s.user)))?;
        format!("user {}", s.user)
    };
    // A root that is missing or not a directory is the site's to report
    // (`cannot open document root …`), the same for a start and a check.
    if !s.root.is_dir() {
        return Ok(());
    }
    privileges::may_read_dir(&s.root)
        .map_err(|e| StartError::Config(format!("server.root: {} cannot be read by {who}: {e}", s.root.display())))
}

/// How long the start-up calibration may measure.
const CALIBRATION_BUDGET: std::time::Duration = std::time::Duration::from_millis(250);

/// Measures the I/O methods while the server already serves (with the
/// safe choices), then switches to the winners and logs them.
fn calibrate_in_background(io: &StaticIo, st: &StaticFiles, limits: &Limits) {
    let start = std::time::Instant::now();
    let outcome = calibrate::run(io.bounds(), io.choices(), io.methods(), CALIBRATION_BUDGET, st, limits)
        .map_err(|e| e.to_string());
    io.calibrated(outcome, start.elapsed().as_millis());
    log!(Level::Info, "{}", io.describe());
}

impl Retiring {
    /// Whether it has ended.
    pub fn finished(&self) -> bool {
        self.done.is_finished()
    }

    /// SIGTERM: what it still runs gets `server.shutdown_timeout` from now,
    /// as the running server's does, and is no longer handed over.
    pub fn hurry(&self) {
        if let Some(shared) = self.shared.upgrade() {
            end(&shared, &self.wakers, Ending::Stop, Some(self.shutdown_timeout));
        }
    }

    /// Waits until it has ended.
    pub fn wait(self) {
        let _ = self.done.join();
    }
}

/// Tells every worker how the server ends.
fn end(shared: &Shared, wakers: &[Arc<mio::Waker>], how: Ending, limit: Option<std::time::Duration>) {
    shared.server.end(how, limit);
    for waker in wakers {
        let _ = waker.wake();
    }
}

/// Joins the workers, then stops the background compression threads.
fn finish(shared: Arc<Shared>, workers: Vec<JoinHandle<()>>) {
    for worker in workers {
        let _ = worker.join();
    }
    shared.site.stop();
}
