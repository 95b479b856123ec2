//! `tern bench`: an HTTP/1.1 and HTTP/2 load generator that is never the
//! bottleneck and never hides a stall.
//!
//! Every performance claim of the project is measured with it, side by side
//! with wrk, so it is built to be trustworthy first and fast second:
//!
//! - **Closed loop** (default): each connection sends its next request as soon
//!   as the previous response is complete, as ab and wrk do. This measures
//!   capacity, but a server stall also stalls the generator, so the stall
//!   shows up in only a few samples.
//! - **Open loop** (`rate`): requests are due at a constant total rate
//!   whatever the server does, and latency is *also* measured from each
//!   request's intended send time (as wrk2 does), so a stall shows in every
//!   request that should have been sent during it. Two histograms are kept:
//!   service time (actual send → response) and response time (intended send
//!   → response), plus a count of requests that left late.
//! - One mio (epoll) loop per thread, requests serialised before the run,
//!   a minimal sans-I/O response parser (Content-Length, chunked,
//!   close-delimited), an HdrHistogram per thread merged at the end, no lock
//!   between threads during the run. Each thread's CPU time is measured so a
//!   saturated generator is reported instead of silently measuring itself.
//! - HTTP/2 (`h2`): the same loop, schedule and histograms, each connection
//!   an `h2` client session carrying up to `pipeline` concurrent streams
//!   (module [`h2`]: why that crate, and how it runs without a runtime).
//!
//! # Mix files
//!
//! A mix spreads requests over several URLs of one server by weight, e.g.
//! 70% to a static file and 30% to a CGI program:
//!
//! ```text
//! # Lines: [WEIGHT] [METHOD] URL      (blank lines and # comments are ignored)
//! 70 /static/115k.bin
//! 30 POST /cgi-bin/form.cgi
//!     Content-Type: application/x-www-form-urlencoded
//!     @body name=tern&size=115k
//! 5 PUT http://127.0.0.1:8080/upload
//!     @body-file payload.bin
//! ```
//!
//! - `WEIGHT` is a positive integer (default 1); an entry gets
//!   weight/total of the requests. The order is precomputed (smooth weighted
//!   round robin), so the proportions are exact over each cycle of
//!   total/gcd requests, which must be at most [`plan::MAX_SCHEDULE`].
//! - `METHOD` defaults to GET (or the method given on the command line).
//! - `URL` is `http://host[:port]/path?query`, or a path starting with `/`
//!   that is resolved against the URL given on the command line. All entries
//!   must name the same host and port.
//! - Indented lines belong to the entry above: `Name: value` adds a header,
//!   `@body TEXT` sets the body to the rest of the line, `@body-file PATH`
//!   to a file's bytes (relative to the mix file's directory).
//!   `Content-Length` is computed; headers given on the command line apply
//!   to every entry unless the entry sets the same header.

pub mod h2;
pub mod plan;
pub mod report;
pub mod response;
pub mod stats;
pub mod timeline;
pub mod tls;
mod wait;
mod worker;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use plan::{Plan, PlanError, RequestSpec, Url};
pub use report::Report;
pub use stats::Stats;

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("invalid option: {0}")]
    Option(String),
    #[error("cannot resolve {host}: {error}")]
    Resolve { host: String, error: std::io::Error },
    #[error("cannot connect to {url} ({addr}): {error}")]
    Unreachable { url: String, addr: String, error: std::io::Error },
    #[error("HTTP/2: {0}")]
    Http2(String),
    #[error("cannot install the Ctrl-C handler: {0}")]
    Signal(std::io::Error),
    #[error("worker thread failed: {0}")]
    Worker(std::io::Error),
    #[error("cannot write the timeline {path}: {error}")]
    Timeline { path: PathBuf, error: std::io::Error },
}

/// When the measurement stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Measure for this long (after the warm-up), then wait for the requests
    /// in flight (at most `timeout`).
    Duration(Duration),
    /// Measure exactly this many requests (after the warm-up).
    Requests(u64),
}

/// How to load the server.
#[derive(Debug, Clone)]
pub struct Options {
    pub connections: usize,
    /// Worker threads, each with its own epoll loop (at most `connections`).
    pub threads: usize,
    pub stop: Stop,
    /// Load the server this long before measuring.
    pub warmup: Duration,
    pub keepalive: bool,
    /// Requests in flight per connection: HTTP/1.1 pipelining (1 = none),
    /// or with `h2`, concurrent streams.
    pub pipeline: usize,
    /// Speak HTTP/2: over TLS by ALPN for `https://`, by prior knowledge
    /// (h2c) for `http://`.
    pub h2: bool,
    /// Open loop: total requests per second. `None`: closed loop.
    pub rate: Option<f64>,
    /// A request with no complete response after this long fails.
    pub timeout: Duration,
    /// Write one CSV row per request here.
    pub timeline: Option<PathBuf>,
    /// Draw a live progress bar on stderr.
    pub progress: bool,
    /// The mix file the plan came from, named by the summary.
    pub mix_file: Option<PathBuf>,
    /// For `https://` URLs: trust and resumption.
    pub tls: tls::TlsOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connections: 10,
            threads: 2,
            stop: Stop::Duration(Duration::from_secs(10)),
            warmup: Duration::ZERO,
            keepalive: true,
            pipeline: 1,
            h2: false,
            rate: None,
            timeout: Duration::from_secs(10),
            timeline: None,
            progress: false,
            mix_file: None,
            tls: tls::TlsOptions::default(),
        }
    }
}

/// Longest pipeline accepted: deeper ones only measure the server's buffers.
pub const MAX_PIPELINE: usize = 1024;

/// Parses "10s", "1.5s", "500ms", "250us", "2m", "1h", or a bare number of
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 10s or 500ms"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown unit {other:?} in {text:?} (use us, ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{text:?} is out of range"))
}

/// A flag set by the first Ctrl-C (SIGINT): workers stop and the run reports
/// what it measured. A second Ctrl-C exits at once with status 130.
pub fn interrupt_on_ctrl_c() -> Result<Arc<AtomicBool>, LoadError> {
    let flag = Arc::new(AtomicBool::new(false));
    let sig = signal_hook::consts::SIGINT;
    signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag)).map_err(LoadError::Signal)?;
    signal_hook::flag::register(sig, Arc::clone(&flag)).map_err(LoadError::Signal)?;
    Ok(flag)
}

/// Finds an address of the server that accepts a connection, so that a
/// wrong host or port is one clear error instead of a run full of failures.
fn reach(url: &Url, timeout: Duration) -> Result<SocketAddr, LoadError> {
    let host = url.host_for_lookup();
    let addrs: Vec<SocketAddr> = (host, url.port)
        .to_socket_addrs()
        .map_err(|error| LoadError::Resolve { host: host.to_string(), error })?
        .collect();
    let mut last = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, timeout.min(Duration::from_secs(5))) {
            Ok(_) => return Ok(*addr),
            Err(e) => last = Some((addr, e)),
        }
    }
    let (addr, error) = match last {
        Some((addr, e)) => (addr.to_string(), e),
        None => (String::new(), std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
    };
    Err(LoadError::Unreachable { url: url.to_string(), addr, error })
}

/// A per-thread progress counter on its own cache line, so the coordinator
/// reading it never slows the worker writing it.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Runs the load described by `plan` and `opts` and reports what was measured.
///
/// Returns early with what was measured so far when `interrupt` becomes true.
pub fn run(plan: &Plan, opts: &Options, interrupt: &AtomicBool) -> Result<Report, LoadError> {
    if opts.connections == 0 {
        return Err(LoadError::Option("at least one connection is needed".into()));
    }
    if opts.pipeline == 0 || opts.pipeline > MAX_PIPELINE {
        return Err(LoadError::Option(format!("the pipeline depth must be 1 to {MAX_PIPELINE}")));
    }
    if let Some(rate) = opts.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(LoadError::Option("the rate must be a positive number of requests per second".into()));
        }
    }
    if opts.stop == Stop::Requests(0) {
        return Err(LoadError::Option("at least one request is needed".into()));
    }
    if opts.timeout.is_zero() {
        return Err(LoadError::Option("the timeout must be longer than zero".into()));
    }
    let threads = opts.threads.clamp(1, opts.connections);
    let addr = reach(&plan.url, opts.timeout)?;
    let alpn = if opts.h2 { h2::ALPN } else { b"http/1.1" };
    let tls_config =
        if plan.url.tls { Some(tls::client_config(&opts.tls, alpn).map_err(LoadError::Option)?) } else { None };
    let h2_client = if opts.h2 {
        h2::check_server(tls_config.as_ref(), plan.url.host_for_lookup(), addr, opts.timeout)
            .map_err(LoadError::Http2)?;
        Some(h2::Client::new(plan).map_err(LoadError::Http2)?)
    } else {
        None
    };

    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let (end, budget) = match opts.stop {
        Stop::Duration(d) => (Some(measure_from + d), None),
        Stop::Requests(n) => (None, Some(n)),
    };
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    let share = |total: u64, i: usize| total / threads as u64 + u64::from((i as u64) < total % threads as u64);

    let outcomes = std::thread::scope(|scope| {
        let mut conn_base = 0;
        let mut handles = Vec::with_capacity(threads);
        for (i, counter) in counters.iter().enumerate() {
            let connections = share(opts.connections as u64, i) as usize;
            let setup = worker::Setup {
                plan,
                addr,
                tls: tls_config.as_ref(),
                h2: h2_client.as_ref(),
                connections,
                conn_base,
                budget: budget.map(|n| share(n, i)),
                measure_from,
                end,
                open: opts.rate.map(|rate| worker::OpenLoop {
                    first: start + Duration::from_secs_f64(i as f64 / rate),
                    interval: Duration::from_secs_f64(threads as f64 / rate),
                }),
                keepalive: opts.keepalive,
                pipeline: opts.pipeline,
                timeout: opts.timeout,
                timeline: opts.timeline.is_some(),
                schedule_offset: i * plan.schedule.len() / threads,
                interrupt,
                progress: &counter.0,
            };
            conn_base += connections;
            let handle = std::thread::Builder::new()
                .name(format!("tern-bench-{i}"))
                .spawn_scoped(scope, move || worker::Worker::new(setup)?.run())
                .map_err(LoadError::Worker)?;
            handles.push(handle);
        }
        let progress = opts.progress.then(|| Progress::new(opts, start, measure_from));
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            if let Some(p) = &progress {
                p.update(counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum());
            }
        }
        if let Some(p) = progress {
            p.finish();
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("worker threads do not panic").map_err(LoadError::Worker))
            .collect::<Result<Vec<_>, _>>()
    })?;

    let mut stats = Stats::new(opts.rate.is_some(), plan.requests.len());
    let mut rows = Vec::new();
    let mut finished = measure_from;
    for outcome in &outcomes {
        stats.merge(&outcome.stats);
        finished = finished.max(outcome.finished);
    }
    let thread_times = outcomes
        .iter()
        .map(|o| report::ThreadTimes {
            cpu_s: o.cpu.as_secs_f64(),
            wall_s: o.wall.as_secs_f64(),
            waited_s: o.waited.map(|w| w.as_secs_f64()),
        })
        .collect();
    for outcome in outcomes {
        rows.extend(outcome.rows);
    }
    if let Some(path) = &opts.timeline {
        timeline::write(path, rows, plan).map_err(|error| LoadError::Timeline { path: path.clone(), error })?;
    }
    let facts = report::RunFacts {
        run: report::Run {
            target: plan.url.to_string(),
            mix_file: opts.mix_file.as_ref().map(|p| p.display().to_string()),
            rate: opts.rate,
            threads,
            connections: opts.connections,
            keepalive: opts.keepalive,
            protocol: match (opts.h2, plan.url.tls) {
                (false, _) => "http/1.1",
                (true, true) => "h2",
                (true, false) => "h2c",
            },
            pipeline: opts.pipeline,
            duration_s: match opts.stop {
                Stop::Duration(d) => Some(d.as_secs_f64()),
                Stop::Requests(_) => None,
            },
            requested: budget,
            warmup_s: opts.warmup.as_secs_f64(),
            timeout_s: opts.timeout.as_secs_f64(),
            interrupted: interrupt.load(Ordering::Relaxed),
            elapsed_s: finished.saturating_duration_since(measure_from).as_secs_f64(),
        },
        mix: plan.requests.iter().map(|r| (r.label.clone(), r.weight)).collect(),
        thread_times,
    };
    Ok(Report::new(facts, &stats))
}

/// The live progress bar: elapsed time against the duration, or requests
/// against the count, with the current rate.
struct Progress {
    bar: indicatif::ProgressBar,
    start: Instant,
    measure_from: Instant,
    by_count: bool,
    last: std::cell::Cell<(Instant, u64)>,
}

impl Progress {
    fn new(opts: &Options, start: Instant, measure_from: Instant) -> Progress {
        let (len, by_count, unit) = match opts.stop {
            Stop::Duration(d) => ((opts.warmup + d).as_millis() as u64, false, "{elapsed:>4}"),
            Stop::Requests(n) => (n, true, "{pos}/{len}"),
        };
        let template = format!("{unit} [{{bar:30}}] {{msg}}");
        let style = indicatif::ProgressStyle::with_template(&template)
            .expect("constant template is valid")
            .progress_chars("=> ");
        let bar = indicatif::ProgressBar::with_draw_target(Some(len), indicatif::ProgressDrawTarget::stderr())
            .with_style(style);
        Progress { bar, start, measure_from, by_count, last: std::cell::Cell::new((start, 0)) }
    }

    fn update(&self, resolved: u64) {
        let now = Instant::now();
        let (then, before) = self.last.get();
        let rate = resolved.saturating_sub(before) as f64 / (now - then).as_secs_f64().max(1e-3);
        self.last.set((now, resolved));
        if self.by_count {
            self.bar.set_position(resolved);
        } else {
            self.bar.set_position((now - self.start).as_millis() as u64);
        }
        let phase = if now < self.measure_from { "warm-up, " } else { "" };
        self.bar.set_message(format!("{phase}{resolved} requests, {rate:.0} req/s"));
    }

    fn finish(self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("40us"), Ok(Duration::from_micros(40)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
