//! E4 compression: the four page sizes of SPEC E4 from tern's cache in
//! each coding, one connection and several, then the cold burst
//! (`burst.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_lab::probe::env::Environment;
use tern_lab::store::record;

use super::burst;
use super::coding::{compression_row, on_the_wire};
use super::outcome::{Outcome, Table};
use super::setup::Scratch;
use super::workload::{load, Lengths, QUIET_LOG};
use crate::content::page;
use crate::served::Served;

/// E4's steady state: one connection after the other (sequential) and
/// this many at once (concurrent).
const E4_CONNECTIONS: [usize; 2] = [1, 16];

/// E4: the four page sizes of SPEC E4, identity against gzip, br and zstd
/// from tern's cache, sequential and concurrent: bytes on the wire,
/// responses per second and time per request; then the cold burst.
pub(super) fn e4(quick: bool, interrupt: &AtomicBool, env: &Environment) -> anyhow::Result<Outcome> {
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
                let plural = if connections == 1 { "" } else { "s" };
                let subject = format!("{coding}, {s} B page, {connections} connection{plural}");
                let mut ms = record::load_measurements(&report, &subject, env);
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
