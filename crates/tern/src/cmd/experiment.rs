//! `tern lab run NAME`: one command per experiment of the lab. Each starts
//! what it needs (this binary's `tern serve`, with the settings compared),
//! drives it with the load generator, stores the whole experiment as one
//! run (one measurement per workload) and prints its table.
//!
//! E1 static I/O methods by file size; E2 (`file_io.rs`) the same methods
//! against the gateway's FastCGI file server in its mmap and read modes;
//! E3 (`models.rs`) the concurrency models by CGI share and CPU count,
//! their saturation points from open-loop steps; E4 compression by page
//! size and coding; E5 the OS probes. E2 and E3 run the gateway's C
//! programs (`make -C gateway`), found beside this binary's repository or
//! in `--gateway DIR`.

mod burst;
mod file_io;
mod models;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use tern_lab::load::{self, plan, Options, Plan, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::probe::figure::Better;
use tern_lab::store::{self, record, Measurement, RunData, Status};

use super::lab::Recording;

pub const NAMES: [&str; 5] = ["e1", "e2", "e3", "e4", "e5"];

/// A `tern serve` child on an ephemeral loopback port, stopped on drop
/// (`tern tune` starts its candidates with it too).
pub(super) struct Served {
    child: Child,
    pub(super) addr: String,
    /// How it sends static files, as it reported once decided (`static.io
    /// auto: calibrated …`).
    pub(super) io: String,
}

impl Served {
    /// `tern serve ROOT` with `config` and the command-line `args`, once it
    /// listens and has decided how to send static files: a start-up
    /// calibration (a fraction of a second) is over before anything is
    /// measured, and never overlaps the next server's.
    pub(super) fn start(root: &Path, config: &str, args: &[&str]) -> anyhow::Result<Served> {
        let file = root.with_extension("toml");
        std::fs::write(&file, config).with_context(|| format!("cannot write {}", file.display()))?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("serve")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .arg("--config")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start tern serve")?;
        let mut lines = BufReader::new(child.stderr.take().context("no stderr")?).lines();
        let mut next = |what: &str| match lines.next() {
            Some(Ok(line)) => Ok(line),
            _ => {
                let _ = child.wait();
                bail!("tern serve exited before {what}");
            }
        };
        let addr = loop {
            if let Some(rest) = next("listening")?.split("listening on http://").nth(1) {
                break rest.split('/').next().unwrap_or_default().to_string();
            }
        };
        let io = loop {
            if let Some(rest) = next("saying how it sends files")?.strip_prefix("tern: static.io ") {
                break format!("static.io {rest}");
            }
        };
        // Keep reading, so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Served { child, addr, io })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // SIGTERM: the server's graceful stop.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The log settings of every server an experiment starts: no access log,
/// warnings only.
const QUIET_LOG: &str = "[log]\naccess = \"off\"\nlevel = \"warn\"\n";

/// The lengths of one workload's measurement.
#[derive(Clone, Copy)]
struct Lengths {
    warmup: Duration,
    measure: Duration,
}

/// E4's measurements of one load in one coding: the load's own, with the
/// bytes per response and the gain against identity beside them, at `size`
/// (`None`: a mix of sizes).
fn on_the_wire(mut ms: Vec<Measurement>, bytes: f64, gain: f64, size: Option<u64>) -> Vec<Measurement> {
    let mut wire = ms[0].clone();
    (wire.metric, wire.value, wire.unit, wire.better) = ("response_bytes".into(), bytes, "B".into(), Better::Lower);
    let mut gained = wire.clone();
    (gained.metric, gained.value, gained.unit, gained.better) =
        ("compression_gain".into(), gain * 100.0, "%".into(), Better::Higher);
    ms.extend([wire, gained]);
    for m in &mut ms {
        m.size = size;
    }
    ms
}

/// E4's table row: page, coding (or mode), conns, bytes, gain, req/s,
/// mean us, p99 us.
fn compression_row(
    page: String,
    coding: &str,
    connections: usize,
    bytes: f64,
    gain: f64,
    report: &load::Report,
) -> Vec<String> {
    vec![
        page,
        coding.into(),
        connections.to_string(),
        format!("{bytes:.0}"),
        format!("{:.1}%", gain * 100.0),
        format!("{:.0}", report.requests_per_s),
        format!("{:.0}", report.latency.service.mean_us),
        report.latency.service.p99_us.to_string(),
    ]
}

/// One closed-loop load run: `connections` on one thread.
fn load(
    url: &str,
    headers: &[&str],
    connections: usize,
    len: Lengths,
    interrupt: &AtomicBool,
) -> anyhow::Result<load::Report> {
    let opts = Options {
        connections,
        threads: 1,
        stop: Stop::Duration(len.measure),
        warmup: len.warmup,
        ..Options::default()
    };
    drive(&[RequestSpec::new("GET", Url::parse(url)?)], headers, &opts, interrupt)
}

/// One load run of `specs` (all to one server), `headers` on every request.
fn drive(
    specs: &[RequestSpec],
    headers: &[&str],
    opts: &Options,
    interrupt: &AtomicBool,
) -> anyhow::Result<load::Report> {
    let headers = headers.iter().map(|h| plan::parse_header(h)).collect::<Result<Vec<_>, _>>()?;
    let plan = Plan::build(specs, &headers, true)?;
    Ok(load::run(&plan, opts, interrupt)?)
}

/// A program the gateway builds (`make -C gateway`): in `dir` when given,
/// else in `gateway/build` of the repository this binary was built in (an
/// ancestor of its path) or of the current directory.
fn gateway_program(dir: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if let Some(dir) = dir {
        let path = dir.join(name);
        if !executable(&path) {
            bail!(
                "{} is not an executable: build it with `make -C gateway` (then --gateway gateway/build)",
                path.display()
            );
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().and_then(std::fs::canonicalize).unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_default();
    exe.ancestors()
        .chain(cwd.ancestors())
        .map(|a| a.join("gateway/build").join(name))
        .find(|p| executable(p))
        .with_context(|| {
            format!(
                "cannot find the gateway's {name}: build it with `make -C gateway` in tern's repository \
                 (fcgi-files needs libfcgi-dev), or name its directory with --gateway DIR"
            )
        })
}

/// A printed table: header, then rows of cells.
struct Table(Vec<Vec<String>>);

impl Table {
    fn print(&self) {
        let widths: Vec<usize> =
            (0..self.0[0].len()).map(|c| self.0.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
        for row in &self.0 {
            let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
            println!("{}", cells.join("  "));
        }
    }
}

/// A file's bytes: a pattern that is neither all zeros nor compressible
/// to nothing.
fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

/// A scratch directory of one experiment, removed with what is in it when
/// dropped (also when the experiment fails half-way).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("tern-lab-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sized(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

/// What an experiment measured, before it is stored.
struct Outcome {
    measurements: Vec<Measurement>,
    table: Table,
    /// Lines printed (and stored) after the table: conclusions, what was
    /// left out and why.
    notes: Vec<String>,
    config: serde_json::Value,
    interrupted: bool,
}

/// E1: tern's three static I/O methods by file size, one server per method.
fn e1(quick: bool, interrupt: &AtomicBool, env: &Environment) -> anyhow::Result<Outcome> {
    let sizes: &[u64] =
        if quick { &[4 << 10, 256 << 10, 4 << 20] } else { &[1 << 10, 16 << 10, 256 << 10, 1 << 20, 16 << 20] };
    let len = if quick {
        Lengths { warmup: Duration::from_millis(200), measure: Duration::from_millis(1500) }
    } else {
        Lengths { warmup: Duration::from_secs(1), measure: Duration::from_secs(5) }
    };
    let dir = std::env::temp_dir().join(format!("tern-lab-e1-{}", std::process::id()));
    let root = dir.join("www");
    std::fs::create_dir_all(&root)?;
    for &s in sizes {
        std::fs::write(root.join(format!("{s}.bin")), pattern(s))?;
    }
    let mut table = Table(vec![vec!["method".into(), "size".into(), "req/s".into(), "MiB/s".into(), "p99 us".into()]]);
    let mut measurements = Vec::new();
    let mut interrupted = false;
    'methods: for method in ["sendfile", "mmap", "read"] {
        let served = Served::start(&root, &format!("[static]\nio = \"{method}\"\n{QUIET_LOG}"), &["--workers", "1"])?;
        for &s in sizes {
            let report = load(&format!("http://{}/{s}.bin", served.addr), &[], 4, len, interrupt)?;
            let mut ms = record::load_measurements(&report, method, env);
            ms.retain(|m| ["requests_per_s", "transfer_per_s", "latency_p99"].contains(&m.metric.as_str()));
            for m in &mut ms {
                m.size = Some(s);
            }
            table.0.push(vec![
                method.into(),
                sized(s),
                format!("{:.0}", report.requests_per_s),
                format!("{:.1}", report.transfer_per_s / (1 << 20) as f64),
                report.latency.service.p99_us.to_string(),
            ]);
            measurements.extend(ms);
            if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
                interrupted = true;
                break 'methods;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let config = serde_json::json!({"sizes": sizes, "connections": 4, "threads": 1, "workers": 1,
        "warmup_s": len.warmup.as_secs_f64(), "measure_s": len.measure.as_secs_f64()});
    Ok(Outcome { measurements, table, notes: Vec::new(), config, interrupted })
}

/// An HTML page of exactly `size` bytes, varied enough that it compresses
/// like a real one rather than like a repeated line.
pub(super) fn page(size: usize) -> Vec<u8> {
    let words = ["server", "request", "latency", "buffer", "kernel", "socket", "tern", "static", "file", "chunk"];
    let mut out = String::from("<!DOCTYPE html><html><head><title>page</title></head><body>\n");
    let mut i = 0usize;
    while out.len() < size {
        let w = |k: usize| words[(i * 7 + k * 3 + i / 5) % words.len()];
        out.push_str(&format!("<p class=\"p{}\">{} {} {} {} #{}</p>\n", i % 13, w(1), w(2), w(3), w(4), i * 37 % 1009));
        i += 1;
    }
    let mut bytes = out.into_bytes();
    bytes.truncate(size);
    bytes
}

/// E4's steady state: one connection after the other (sequential) and
/// this many at once (concurrent).
const E4_CONNECTIONS: [usize; 2] = [1, 16];

/// E4: the four page sizes of SPEC E4, identity against gzip, br and zstd
/// from tern's cache, sequential and concurrent: bytes on the wire,
/// responses per second and time per request; then the cold burst.
fn e4(quick: bool, interrupt: &AtomicBool, env: &Environment) -> anyhow::Result<Outcome> {
    const SIZES: [usize; 4] = [6_040, 11_426, 22_132, 41_518];
    let len = if quick {
        Lengths { warmup: Duration::from_millis(100), measure: Duration::from_millis(500) }
    } else {
        Lengths { warmup: Duration::from_secs(1), measure: Duration::from_secs(5) }
    };
    let dir = Scratch::new("e4")?;
    let root = dir.0.join("www");
    std::fs::create_dir_all(&root)?;
    let pages: Vec<(usize, Vec<u8>)> = SIZES.iter().map(|&s| (s, page(s))).collect();
    for (s, bytes) in &pages {
        std::fs::write(root.join(format!("{s}.html")), bytes)?;
    }
    let served = Served::start(&root, QUIET_LOG, &["--workers", "1"])?;
    let mut table = Table(vec![["page", "coding", "conns", "bytes", "gain", "req/s", "mean us", "p99 us"]
        .map(String::from)
        .to_vec()]);
    let mut measurements = Vec::new();
    let mut interrupted = false;
    'pages: for s in SIZES {
        for connections in E4_CONNECTIONS {
            let mut identity = 0.0;
            for coding in ["identity", "gzip", "br", "zstd"] {
                let header = format!("Accept-Encoding: {coding}");
                let url = format!("http://{}/{s}.html", served.addr);
                let report = load(&url, &[&header], connections, len, interrupt)?;
                let bytes =
                    if report.successes == 0 { 0.0 } else { report.body_bytes as f64 / report.successes as f64 };
                if coding == "identity" {
                    identity = bytes;
                }
                let gain = if identity > 0.0 { 1.0 - bytes / identity } else { 0.0 };
                let mut ms = record::load_measurements(&report, coding, env);
                ms.retain(|m| ["requests_per_s", "latency_mean", "latency_p99"].contains(&m.metric.as_str()));
                measurements.extend(on_the_wire(ms, bytes, gain, Some(s as u64)));
                table.0.push(compression_row(s.to_string(), coding, connections, bytes, gain, &report));
                if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
                    interrupted = true;
                    break 'pages;
                }
            }
        }
    }
    drop(served);
    let mut notes = Vec::new();
    let mut burst_config = serde_json::Value::Null;
    if !interrupted {
        let b = burst::burst(&root, &pages, quick, interrupt, env)?;
        table.0.extend(b.rows);
        measurements.extend(b.measurements);
        interrupted = b.interrupted;
        notes.push(format!(
            "burst: on a fresh server each, {} connections at once ask for each of {} pages (4 sizes) once, gzip \
             accepted; bytes and gain: the mean response against the mean page; off: identity; inline: compressed \
             on the worker; adaptive (the default): identity while busy, compressed in the background",
            b.config["connections"], b.config["pages"]
        ));
        burst_config = b.config;
    }
    let config = serde_json::json!({"pages": SIZES, "codings": ["identity", "gzip", "br", "zstd"],
        "levels": "tern's defaults", "connections": E4_CONNECTIONS, "threads": 1, "workers": 1,
        "warmup_s": len.warmup.as_secs_f64(), "measure_s": len.measure.as_secs_f64(),
        "published_gain": "21-64%", "burst": burst_config});
    Ok(Outcome { measurements, table, notes, config, interrupted })
}

/// The agents E5 also probes (`--agent`, `--token-file`, `--agent-ca`).
pub struct Agents {
    pub addrs: Vec<String>,
    pub reach: super::agent::Reach,
}

/// What E5 measured: this host's report first, then each agent's that
/// answered, and the agents that failed (named).
struct Probed {
    outcome: Outcome,
    reports: Vec<tern_lab::probe::report::ProbeReport>,
    failures: Vec<String>,
}

/// E5: the probe suites on this host and on each agent in turn (one at a
/// time, so none disturbs another's figures), one column per host.
fn e5(quick: bool, agents: &Agents) -> anyhow::Result<Probed> {
    use tern_lab::agent::access::Remote;
    use tern_lab::probe::{Options, Suite};
    use tern_lab::remote;
    let mut opts = Options::default();
    if quick {
        opts = opts.quick();
    }
    // The token is read before anything is measured: a wrong path fails at once.
    let access = agents.addrs.first().map(|_| agents.reach.access()).transpose()?;
    let mut reports = vec![remote::run(Suite::ALL, &opts)?];
    let mut failures = Vec::new();
    for (addr, access) in agents.addrs.iter().zip(access.iter().cycle()) {
        let agent = Remote { addr: addr.clone(), access: access.clone() };
        match remote::run_on(&agent, Suite::ALL, &opts) {
            Ok(r) => reports.push(r),
            Err(e) => failures.push(format!("agent {addr}: {e}")),
        }
    }
    let mut header = vec!["figure".to_string(), "unit".into()];
    header.extend(reports.iter().map(|r| r.host.clone()));
    let mut table = Table(vec![header]);
    for s in &reports[0].suites {
        for f in &s.figures {
            let mut row = vec![format!("{}/{}", s.suite, f.name), f.unit.clone()];
            // In this host's unit, as `tern probe --agent` compares them.
            row.extend(reports.iter().map(|r| {
                r.figure(&s.suite, &f.name)
                    .map_or_else(|| "-".into(), |y| tern_lab::probe::report::num(f.in_unit(y.corrected_ns.median)))
            }));
            table.0.push(row);
        }
    }
    let outcome = Outcome {
        measurements: record::probe_measurements(&reports[0]),
        table,
        notes: Vec::new(),
        config: serde_json::json!({"suites": "all", "quick": quick, "samples": reports[0].samples,
            "hosts": reports.iter().map(|r| r.host.as_str()).collect::<Vec<_>>()}),
        interrupted: false,
    };
    Ok(Probed { outcome, reports, failures })
}

/// The stored run of an experiment: `outcome` measured on the host `env`
/// describes, with `result` (null: the table and notes).
fn run_data(
    name: &str,
    quick: bool,
    outcome: &Outcome,
    env: Environment,
    result: serde_json::Value,
    ctx: &record::Context,
) -> RunData {
    RunData {
        kind: name.into(),
        status: if outcome.interrupted { Status::Interrupted } else { Status::Complete },
        environment: env,
        tern_version: env!("CARGO_PKG_VERSION").into(),
        command_line: ctx.command_line.clone(),
        config: serde_json::json!({"experiment": name, "quick": quick, "settings": outcome.config}),
        label: if ctx.label.is_empty() {
            format!("{name}{}", if quick { " --quick" } else { "" })
        } else {
            ctx.label.clone()
        },
        started_at: ctx.started_at,
        finished_at: ctx.finished_at,
        result: if result.is_null() {
            serde_json::json!({ "table": outcome.table.0, "notes": outcome.notes })
        } else {
            result
        },
        measurements: outcome.measurements.clone(),
        histograms: Vec::new(),
    }
}

pub fn run(
    name: &str,
    quick: bool,
    gateway: Option<&Path>,
    agents: &Agents,
    recording: &Recording,
) -> anyhow::Result<ExitCode> {
    let started = store::now();
    let env = Environment::capture(tern_lab::probe::cpu::governor(0));
    let interrupt = load::interrupt_on_ctrl_c()?;
    let mut remote = Vec::new();
    let mut failures = Vec::new();
    let (outcome, result, env) = match name {
        "e1" => (e1(quick, &interrupt, &env)?, serde_json::Value::Null, env),
        "e2" => (file_io::e2(quick, gateway, &interrupt, &env)?, serde_json::Value::Null, env),
        "e3" => (models::e3(quick, gateway, &interrupt, &env)?, serde_json::Value::Null, env),
        "e4" => (e4(quick, &interrupt, &env)?, serde_json::Value::Null, env),
        "e5" => {
            let mut p = e5(quick, agents)?;
            failures = p.failures;
            let local = p.reports.remove(0);
            remote = p.reports;
            let result = serde_json::to_value(&local).unwrap_or_default();
            (p.outcome, result, local.environment)
        }
        other => bail!("no experiment {other:?}: choose one of {}", NAMES.join(", ")),
    };
    outcome.table.print();
    for note in &outcome.notes {
        println!("{note}");
    }
    let ctx = record::Context::here(recording.label.clone(), started);
    if let Some(id) = recording.save(&run_data(name, quick, &outcome, env, result, &ctx)) {
        println!("stored as run {id}; chart it with `tern lab serve` (http://127.0.0.1:8686/chart?run={id})");
    }
    // Each agent's suites as a run of its own host, so the dashboard
    // charts the hosts side by side.
    for r in remote {
        let mut data = run_data(name, quick, &outcome, r.environment.clone(), serde_json::Value::Null, &ctx);
        data.measurements = record::probe_measurements(&r);
        data.label = format!("{} on {}", data.label, r.host);
        data.result = serde_json::to_value(&r).unwrap_or_default();
        if let Some(id) = recording.save(&data) {
            println!("stored agent {}'s run as run {id}", r.host);
        }
    }
    if !failures.is_empty() {
        bail!("{} of {} agents failed: {}", failures.len(), agents.addrs.len(), failures.join("; "));
    }
    Ok(ExitCode::SUCCESS)
}
