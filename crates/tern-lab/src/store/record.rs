//! Turning a report into a stored run: which of its numbers become
//! measurements (what the dashboard charts), with the report itself kept
//! whole beside them.

use super::run::{now, Measurement, RunData, Snapshot, Status};
use crate::load::Report;
use crate::probe::env::Environment;
use crate::probe::figure::Better;
use crate::probe::report::ProbeReport;

/// What every run records about how it was made.
pub struct Context {
    pub command_line: Vec<String>,
    pub label: String,
    pub started_at: f64,
    pub finished_at: f64,
}

impl Context {
    /// This process's command line; the run started at `started_at`.
    pub fn here(label: String, started_at: f64) -> Context {
        Context { command_line: std::env::args().collect(), label, started_at, finished_at: now() }
    }
}

fn measurement(subject: &str, metric: &str, value: f64, unit: &str, better: Better) -> Measurement {
    Measurement {
        subject: subject.to_string(),
        metric: metric.to_string(),
        value,
        unit: unit.to_string(),
        better,
        size: None,
        concurrency: None,
        cpus: None,
        load: None,
    }
}

/// The measurements of one load run against `subject`: throughput, the
/// latency percentiles and the errors.
pub fn load_measurements(report: &Report, subject: &str, env: &Environment) -> Vec<Measurement> {
    let s = &report.latency.service;
    let mut out = vec![
        measurement(subject, "requests_per_s", report.requests_per_s, "req/s", Better::Higher),
        measurement(subject, "transfer_per_s", report.transfer_per_s, "B/s", Better::Higher),
        measurement(subject, "latency_p50", s.p50_us as f64, "us", Better::Lower),
        measurement(subject, "latency_p90", s.p90_us as f64, "us", Better::Lower),
        measurement(subject, "latency_p99", s.p99_us as f64, "us", Better::Lower),
        measurement(subject, "latency_p999", s.p999_us as f64, "us", Better::Lower),
        measurement(subject, "latency_max", s.max_us as f64, "us", Better::Lower),
        measurement(subject, "latency_mean", s.mean_us, "us", Better::Lower),
        measurement(subject, "errors", report.errors.total() as f64, "count", Better::Lower),
    ];
    let size = (report.successes > 0).then(|| report.body_bytes / report.successes);
    for m in &mut out {
        m.size = size;
        m.concurrency = Some(report.run.connections as u64);
        m.cpus = Some(env.cores_usable as u64);
        m.load = Some(env.load_average[0]);
    }
    out
}

/// The latency histograms of one load run against `subject`.
pub fn load_histograms(report: &Report, subject: &str) -> Vec<Snapshot> {
    let h = &report.histograms;
    let snap = |name: &str, snapshot: &String| Snapshot {
        subject: subject.to_string(),
        name: name.to_string(),
        encoding: h.encoding.to_string(),
        unit: h.unit.to_string(),
        snapshot: snapshot.clone(),
    };
    let mut out = vec![snap("service", &h.service)];
    if let Some(r) = &h.response {
        out.push(snap("response", r));
    }
    out
}

/// A `tern bench` run.
pub fn bench(report: &Report, env: Environment, ctx: Context) -> RunData {
    let subject = report.run.mix_file.clone().unwrap_or_else(|| report.run.target.clone());
    RunData {
        kind: "bench".into(),
        status: if report.run.interrupted { Status::Interrupted } else { Status::Complete },
        measurements: load_measurements(report, &subject, &env),
        histograms: load_histograms(report, &subject),
        config: serde_json::to_value(&report.run).unwrap_or_default(),
        result: serde_json::to_value(report).unwrap_or_default(),
        label: if ctx.label.is_empty() { subject } else { ctx.label },
        environment: env,
        tern_version: env!("CARGO_PKG_VERSION").into(),
        command_line: ctx.command_line,
        started_at: ctx.started_at,
        finished_at: ctx.finished_at,
    }
}

/// The measurements of a probe report: one per figure, its corrected
/// median in its unit, subject `suite/figure`.
pub fn probe_measurements(report: &ProbeReport) -> Vec<Measurement> {
    let env = &report.environment;
    let mut out = Vec::new();
    for suite in &report.suites {
        for f in &suite.figures {
            let mut m = measurement(&format!("{}/{}", suite.suite, f.name), "value", f.value, &f.unit, f.better);
            m.size = f.bytes_per_op;
            m.cpus = Some(env.cores_usable as u64);
            m.load = Some(env.load_average[0]);
            out.push(m);
        }
    }
    out
}

/// A `tern probe` run (one host's report).
pub fn probe(report: &ProbeReport, ctx: Context) -> RunData {
    let suites: Vec<&str> = report.suites.iter().map(|s| s.suite.as_str()).collect();
    RunData {
        kind: "probe".into(),
        status: Status::Complete,
        measurements: probe_measurements(report),
        histograms: Vec::new(),
        config: serde_json::json!({
            "host": report.host,
            "suites": suites,
            "samples": report.samples,
            "interval_ns": report.interval_ns,
            "pinned_cpu": report.pinned_cpu,
        }),
        result: serde_json::to_value(report).unwrap_or_default(),
        label: if ctx.label.is_empty() { format!("{} on {}", suites.join(" "), report.host) } else { ctx.label },
        environment: report.environment.clone(),
        tern_version: env!("CARGO_PKG_VERSION").into(),
        command_line: ctx.command_line,
        started_at: ctx.started_at,
        finished_at: ctx.finished_at,
    }
}
