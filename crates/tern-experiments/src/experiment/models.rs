//! E3 models: tern's concurrency models (`server.model`: each one the
//! config parser accepts, so a model joins as soon as it is built) × the
//! CGI share of the load × the CPUs the server runs on (`--cpus`), serving
//! a 115 KiB static file and the gateway's C hello CGI. As
//! `bench/models.sh` defines it, per configuration: a closed-loop probe
//! finds the capacity, then open-loop steps at fractions of it measure
//! throughput and the p99 response time, taken from each request's
//! intended send time (so a stall counts for every request it delays).
//! The saturation point is the highest throughput of a step carried:
//! at least 95 % of the rate asked, p99 within the SLO, no failed request.
//! With one CPU the server runs on one and the load generator on another;
//! with two they share both.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tern_lab::load::{self, Options, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::probe::figure::Better;
use tern_lab::store::Measurement;
use tern_server::config::{Config, Model};
use tern_server::engine;

use super::outcome::{Outcome, Table};
use super::setup::{gateway_program, Scratch};
use super::workload::{drive, QUIET_LOG};
use crate::content::pattern;
use crate::served::Served;

const STATIC: &str = "/static/115k.bin";
const STATIC_BYTES: u64 = 115 << 10;
const CGI: &str = "/cgi-bin/hello.cgi";
const CONNECTIONS: usize = 64;
/// The p99 response time a carried step stays within.
const SLO: Duration = Duration::from_millis(500);

/// The models this tern runs here: those of [`Model::ALL`] the config
/// parser accepts and this host can run (`uring` needs io_uring); the
/// others with the reason.
fn models() -> (Vec<Model>, Vec<String>) {
    let mut built = Vec::new();
    let mut left = Vec::new();
    for m in Model::ALL {
        let parsed = Config::parse(&format!("[server]\nmodel = \"{}\"\n", m.name()), Path::new("e3"));
        match parsed.map_err(|e| e.to_string()).and_then(|c| engine::probe(&c.engine()).map_err(|e| e.to_string())) {
            Ok(()) => built.push(m),
            Err(e) => left.push(format!("model {} left out: {e}", m.name())),
        }
    }
    (built, left)
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set that sched_getaffinity
    // fills; CPU_ISSET reads within it for numbers below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Runs `f` on a thread of its own pinned to `cpu` (the load generator's
/// threads, started from it, inherit the pinning), or unpinned.
fn pinned<T: Send>(cpu: Option<usize>, f: impl FnOnce() -> anyhow::Result<T> + Send) -> anyhow::Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(c) = cpu {
                    tern_lab::probe::cpu::pin(Some(c))?;
                }
                f()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the load generator's thread panicked"))?
    })
}

/// The requests of a CGI share (percent) of the load; the rest static.
fn mix(addr: &str, share: u32) -> anyhow::Result<Vec<RequestSpec>> {
    let spec = |path: &str, weight: u32| -> anyhow::Result<RequestSpec> {
        let mut r = RequestSpec::new("GET", Url::parse(&format!("http://{addr}{path}"))?);
        r.weight = weight;
        Ok(r)
    };
    let mut specs = Vec::new();
    if share < 100 {
        specs.push(spec(STATIC, 100 - share)?);
    }
    if share > 0 {
        specs.push(spec(CGI, share)?);
    }
    Ok(specs)
}

/// One open-loop step.
struct Step {
    fraction: f64,
    rate: f64,
    throughput: f64,
    /// From the intended send time: the median and the 99th percentile.
    p50_us: u64,
    p99_us: u64,
    failed: u64,
}

impl Step {
    fn of(fraction: f64, rate: f64, report: &load::Report) -> Step {
        let latency = report.latency.response.as_ref().unwrap_or(&report.latency.service);
        Step {
            fraction,
            rate,
            throughput: report.requests_per_s,
            p50_us: latency.p50_us,
            p99_us: latency.p99_us,
            failed: report.errors.total(),
        }
    }

    fn carried(&self) -> bool {
        self.throughput >= 0.95 * self.rate && self.p99_us <= SLO.as_micros() as u64 && self.failed == 0
    }
}

pub(super) fn e3(
    quick: bool,
    gateway: Option<&Path>,
    interrupt: &AtomicBool,
    env: &Environment,
) -> anyhow::Result<Outcome> {
    let shares: &[u32] = if quick { &[0, 50, 100] } else { &[0, 25, 50, 75, 100] };
    let fractions: &[f64] = if quick { &[0.5, 1.0, 1.25] } else { &[0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25] };
    // Quick: no warm-up, so the probe measures the requests it starts with
    // and finds a capacity even when a busy machine stalls the server for
    // longer than the probe.
    let (probe, warmup, step) = if quick {
        (Duration::from_millis(250), Duration::ZERO, Duration::from_millis(250))
    } else {
        (Duration::from_secs(5), Duration::from_secs(1), Duration::from_secs(10))
    };
    let hello = gateway_program(gateway, "hello.cgi")?;
    let (models, mut notes) = models();
    let cpus = allowed_cpus();
    let counts: Vec<usize> = [1, 2].into_iter().filter(|&n| n <= cpus.len()).collect();
    if counts.len() < 2 {
        notes.push(format!("2 CPUs left out: this process may run on {} only", cpus.len()));
    }

    let dir = Scratch::new("e3")?;
    let www = dir.0.join("www");
    std::fs::create_dir_all(www.join("static"))?;
    std::fs::create_dir_all(www.join("cgi-bin"))?;
    std::fs::write(www.join(STATIC.trim_start_matches('/')), pattern(STATIC_BYTES))?;
    std::fs::copy(&hello, www.join(CGI.trim_start_matches('/')))
        .with_context(|| format!("cannot copy {}", hello.display()))?;
    // Root runs CGI programs only when allowed; the load keeps its
    // connections for the whole run.
    let config =
        format!("{QUIET_LOG}[cgi]\nmax_processes = 256\nallow_root = true\n[limits]\nkeepalive_requests = 0\n");

    let mut header = vec!["cpus".to_string(), "cgi".into(), "model".into(), "capacity".into()];
    header.extend(fractions.iter().map(|f| format!("{f}x")));
    header.push("saturation".into());
    let mut table = Table(vec![header]);
    let mut measurements = Vec::new();
    // The best saturation point per (CPUs, share): model, req/s.
    let mut best: BTreeMap<(usize, u32), (Model, f64)> = BTreeMap::new();
    let mut interrupted = false;
    'configs: for &n in &counts {
        let server_cpus = cpus[..n].iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        // One CPU: the load generator on the next one, if there is one.
        let generator = if n == 1 { cpus.get(1).copied() } else { None };
        notes.push(match generator {
            Some(g) => format!("{n} CPU: server on CPU {server_cpus}, load generator on CPU {g}"),
            None => format!("{n} CPUs: server on CPUs {server_cpus}, the load generator beside it"),
        });
        for &model in &models {
            let served = Served::start(&www, &config, &["--model", model.name(), "--cpus", &server_cpus])?;
            for &share in shares {
                let specs = mix(&served.addr, share)?;
                let subject = format!("{}, {n} CPU{}, CGI {share} %", model.name(), if n > 1 { "s" } else { "" });
                let closed = Options {
                    connections: CONNECTIONS,
                    threads: 2,
                    stop: Stop::Duration(probe),
                    warmup,
                    ..Options::default()
                };
                let report = pinned(generator, || drive(&specs, &[], &closed, interrupt))?;
                if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
                    interrupted = true;
                    break 'configs;
                }
                let capacity = report.requests_per_s;
                let mut steps = Vec::new();
                for &fraction in fractions {
                    let rate = (capacity * fraction).max(1.0).floor();
                    let open = Options {
                        rate: Some(rate),
                        stop: Stop::Duration(step),
                        warmup: Duration::ZERO,
                        ..closed.clone()
                    };
                    let report = pinned(generator, || drive(&specs, &[], &open, interrupt))?;
                    if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
                        interrupted = true;
                        break 'configs;
                    }
                    steps.push(Step::of(fraction, rate, &report));
                }
                let saturation = steps.iter().filter(|s| s.carried()).map(|s| s.throughput).fold(0.0, f64::max);
                let mut row = vec![n.to_string(), format!("{share}%"), model.name().into(), format!("{capacity:.0}")];
                row.extend(steps.iter().map(|s| {
                    let failed = if s.failed > 0 { format!(" [{}]", s.failed) } else { String::new() };
                    let mark = if s.carried() { "" } else { "*" };
                    format!("{:.0}->{:.0} {:.1}ms{failed}{mark}", s.rate, s.throughput, s.p99_us as f64 / 1000.0)
                }));
                row.push(format!("{saturation:.0}"));
                table.0.push(row);

                let m = |metric: String, value: f64, unit: &str, better: Better| Measurement {
                    subject: subject.clone(),
                    metric,
                    value,
                    unit: unit.into(),
                    better,
                    size: None,
                    concurrency: Some(CONNECTIONS as u64),
                    cpus: Some(n as u64),
                    load: Some(env.load_average[0]),
                };
                measurements.push(m("capacity".into(), capacity, "req/s", Better::Higher));
                measurements.push(m("saturation".into(), saturation, "req/s", Better::Higher));
                for s in &steps {
                    let at = format!("@{}x", s.fraction);
                    measurements.push(m(format!("rate{at}"), s.rate, "req/s", Better::Higher));
                    measurements.push(m(format!("requests_per_s{at}"), s.throughput, "req/s", Better::Higher));
                    measurements.push(m(format!("latency_p50{at}"), s.p50_us as f64, "us", Better::Lower));
                    measurements.push(m(format!("latency_p99{at}"), s.p99_us as f64, "us", Better::Lower));
                    measurements.push(m(format!("failed{at}"), s.failed as f64, "count", Better::Lower));
                }
                let b = best.entry((n, share)).or_insert((model, saturation));
                if b.1 < saturation {
                    *b = (model, saturation);
                }
            }
        }
    }
    notes.extend(best.iter().map(|((n, share), (model, v))| {
        let plural = if *n > 1 { "s" } else { "" };
        let winner = if *v > 0.0 { format!("{} ({v:.0} req/s)", model.name()) } else { "no step carried".into() };
        format!("highest saturation point on {n} CPU{plural}, CGI {share}%: {winner}")
    }));
    notes.push(format!(
        "steps: rate asked -> requests/s and p99 from the intended send time [failed]; *: not carried (under 95 % of \
         the rate, p99 over {} ms, or failed requests); {CONNECTIONS} connections",
        SLO.as_millis()
    ));
    let config = serde_json::json!({"models": models.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "shares": shares, "steps": fractions, "cpus": counts, "connections": CONNECTIONS, "threads": 2,
        "probe_s": probe.as_secs_f64(), "warmup_s": warmup.as_secs_f64(), "step_s": step.as_secs_f64(),
        "slo_ms": SLO.as_millis() as u64, "static": STATIC, "static_bytes": STATIC_BYTES, "cgi": CGI});
    Ok(Outcome { measurements, table, notes, config, interrupted })
}
