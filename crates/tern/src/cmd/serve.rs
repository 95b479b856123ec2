//! `tern serve`: run the server.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tern_server::config::{IoChoice, Listen, Model};
use tern_server::server::{Retiring, Signal};
use tern_server::tls::Role;
use tern_server::{sys, Config, Server};

#[derive(clap::Args)]
#[command(after_help = "\
EXAMPLES:
    tern serve site/                        serve ./site on http://127.0.0.1:8080/
    tern serve /srv/www --listen 0.0.0.0:80 --workers 4
    tern serve site/ --model pool --threads 64 --cpus 0,1
    tern serve --config /etc/tern/tern.toml
    tern serve site/ --io mmap --access-log off

Without --config every setting has a default (see docs/configuration.md);
command-line options override the file.

SIGNALS:
    SIGTERM, SIGINT   stop gracefully: in-flight responses finish (for at most
                      server.shutdown_timeout), idle connections close after a
                      second (a request arriving meanwhile is answered).
    SIGHUP            reload: the config file is read again and new workers take
                      over the listening sockets and every kept-alive connection
                      (once its response in flight is sent); the access log is
                      reopened. A config that does not load leaves the running
                      one serving.

LOGS:
    The access log (log.access, --access-log) is Combined Log Format, default
    stdout. The error log (log.error: a path or \"-\" for stderr, the default)
    gets startup problems, CGI programs' stderr and failures, at the level
    log.level and above: error, warn (the default), info or debug.")]
pub struct Args {
    /// Document root to serve (overrides `server.root`; default: the
    /// current directory).
    pub dir: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on (repeatable; overrides `server.listen`):
    /// IP:PORT or [IPv6]:PORT; localhost:PORT for both loopback addresses;
    /// PORT or :PORT for every IPv4 and IPv6 address. Port 0 picks a free
    /// port.
    #[arg(short, long, value_name = "ADDR")]
    pub listen: Vec<Listen>,
    /// How static files are sent: one method for all, or `auto` (per size
    /// class, measured on this host; overrides `static.io`).
    #[arg(long, value_name = "METHOD", value_parser = ["auto", "sendfile", "mmap", "read", "uring"])]
    pub io: Option<String>,
    /// Worker threads; 0 = one per usable CPU (overrides `server.workers`).
    #[arg(short, long, value_name = "N")]
    pub workers: Option<usize>,
    /// Concurrency model: event, pool, staged, per-request or uring (overrides
    /// `server.model`; the stages' threads are set in `[staged]`).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<Model>,
    /// `pool`: threads serving connections (overrides `server.threads`).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Pin the server's threads to these CPUs, e.g. `0,1` (overrides
    /// `server.cpus`; with no worker count given, one worker per CPU).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// Access log: a path, `-` for stdout, or `off` (overrides `log.access`).
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<String>,
    /// Check the configuration and exit: everything a start would open,
    /// bind and read is tried (document root, CGI settings, logs, free
    /// addresses), then let go.
    #[arg(long)]
    pub check: bool,
}

/// The configuration: the file (if any) with the command line's overrides.
fn configuration(args: &Args) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(dir) = &args.dir {
        config.server.root = dir.clone();
    }
    if !args.listen.is_empty() {
        config.server.listen = args.listen.clone();
    }
    if let Some(io) = &args.io {
        config.static_files.io = io.parse::<IoChoice>().map_err(anyhow::Error::msg)?;
    }
    if let Some(workers) = args.workers {
        config.server.workers = workers;
    }
    if let Some(model) = args.model {
        config.server.model = model;
    }
    if let Some(threads) = args.threads {
        config.server.threads = threads;
    }
    if let Some(cpus) = &args.cpus {
        config.server.cpus = cpus.clone();
    }
    if let Some(log) = &args.access_log {
        config.log.access = log.clone();
    }
    if let Some((section, key, message)) = config.broken_rule() {
        anyhow::bail!("{}: {message}", config.at(section, key));
    }
    Ok(config)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = configuration(&args)?;
    if args.check {
        // Everything a start opens and binds, let go again.
        Server::check(config).context("check failed")?;
        println!("configuration OK");
        return Ok(ExitCode::SUCCESS);
    }
    let mut server = Server::start(config).context("cannot start")?;
    // The whole process runs where its server does: this thread too (from
    // before it says it listens), and what it starts.
    let mut placed = place(&server);
    let c = server.config();
    for (addr, role) in server.local_addrs() {
        let scheme = role.scheme();
        let redirect = if *role == Role::Redirect { ", redirecting to https" } else { "" };
        let serves = match c.sites.len() {
            0 => format!("root {}", c.server.root.display()),
            n => format!("{n} sites"),
        };
        eprintln!(
            "tern: listening on {scheme}://{addr}/{redirect} ({serves}, io={}, workers={}, model={})",
            c.static_files.io.name(),
            server.workers(),
            c.server.model.name()
        );
    }
    report_static_io(&server);
    // Servers replaced by reloads that still finish responses.
    let mut retiring: Vec<Retiring> = Vec::new();
    while server.wait_for_signal() == Signal::Reload {
        retiring.retain(|r| !r.finished());
        // Back where it started, so a server without `server.cpus` runs there.
        drop(placed);
        server = reload(&args, server, &mut retiring);
        placed = place(&server);
        report_static_io(&server);
    }
    for r in &retiring {
        r.hurry();
    }
    server.stop();
    for r in retiring {
        r.wait();
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP: start a server with the configuration as it is now, taking over
/// the running one's listening sockets (so no connection waits in the queue
/// of a socket about to close), then retire the old one: it hands each
/// connection over once no request is in flight on it and finishes its
/// responses in the background (up to `server.reload_drain_timeout`), so
/// nothing is refused or cut. A configuration that does not load or start
/// leaves the running server as it was.
fn reload(args: &Args, running: Server, retiring: &mut Vec<Retiring>) -> Server {
    let started = configuration(args).and_then(|mut config| {
        // Port 0 was resolved at the first start: keep the ports in use.
        let lists = [
            (Role::Http, &mut config.server.listen),
            (Role::Https, &mut config.tls.listen),
            (Role::Redirect, &mut config.tls.redirect),
        ];
        for (role, list) in lists {
            for addr in list.iter_mut().flat_map(|l| l.addrs.iter_mut()) {
                if addr.port() == 0 {
                    if let Some((bound, _)) =
                        running.local_addrs().iter().find(|(a, r)| a.ip() == addr.ip() && *r == role)
                    {
                        *addr = *bound;
                    }
                }
            }
        }
        let inherited = running.inheritance().context("cannot hand the listening sockets over")?;
        Server::start_inheriting(config, inherited).context("cannot start")
    });
    match started {
        Ok(next) => {
            eprintln!("tern: configuration reloaded");
            retiring.push(running.retire(&next));
            next
        }
        Err(err) => {
            eprintln!("tern: reload failed, the running configuration stays: {err:#}");
            running
        }
    }
}

/// Pins this thread to the running server's `server.cpus` (none set: it
/// stays where it is) until the returned guard is dropped.
fn place(server: &Server) -> Option<sys::Pinned> {
    let cpus = &server.config().server.cpus;
    sys::Pinned::new(cpus).map_err(|e| eprintln!("tern: cannot run on server.cpus {cpus:?}: {e}")).ok()
}

/// Prints which I/O method sends which file size, once it is decided (a
/// start-up calibration takes a fraction of a second, in the background).
fn report_static_io(server: &Server) {
    let io = server.static_io().clone();
    let _ = std::thread::Builder::new().name("tern-io-report".into()).spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while io.needs_calibration() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("tern: {}", io.describe());
    });
}
