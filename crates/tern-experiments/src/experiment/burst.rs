//! E4's overload burst (SPEC 2.7, 6): compression off, inline and
//! adaptive, each on a fresh server hit at once by many connections, every
//! request (gzip asked) for a page the server has not compressed yet. Inline
//! compresses on the worker while the burst waits; adaptive sends identity
//! at once while it is busy and compresses in the background.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_lab::load::{Options, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::store::{record, Measurement};

use super::coding::{compression_row, on_the_wire};
use super::workload::{drive, QUIET_LOG};
use crate::served::Served;

/// The modes compared: name and `[compression]` settings.
const MODES: [(&str, &str); 3] =
    [("off", "[compression]\nenabled = false\n"), ("inline", "[compression]\nadaptive = false\n"), ("adaptive", "")];

/// What the burst measured: the table's rows (page, mode, conns, bytes,
/// gain, req/s, mean us, p99 us) and the measurements.
pub(super) struct Burst {
    pub rows: Vec<Vec<String>>,
    pub measurements: Vec<Measurement>,
    pub interrupted: bool,
    pub config: serde_json::Value,
}

/// Writes `copies` copies of each of `pages` (size, bytes) under
/// `root/burst`, then bursts each mode against them.
pub(super) fn burst(
    root: &Path,
    pages: &[(usize, Vec<u8>)],
    quick: bool,
    interrupt: &AtomicBool,
    env: &Environment,
) -> anyhow::Result<Burst> {
    let (copies, connections) = if quick { (250, 64) } else { (2000, 256) };
    std::fs::create_dir_all(root.join("burst"))?;
    let mut paths = Vec::new();
    for i in 0..copies {
        for (size, bytes) in pages {
            let path = format!("/burst/p{size}-{i}.html");
            std::fs::write(root.join(&path[1..]), bytes)?;
            paths.push(path);
        }
    }
    let identity = pages.iter().map(|(s, _)| *s as f64).sum::<f64>() / pages.len() as f64;
    let mut out = Burst {
        rows: Vec::new(),
        measurements: Vec::new(),
        interrupted: false,
        config: serde_json::json!({
        "pages": paths.len(), "copies": copies, "connections": connections, "threads": 1,
        "accept_encoding": "gzip", "modes": MODES.map(|(name, _)| name)}),
    };
    for (mode, settings) in MODES {
        let served = Served::start(root, &format!("{QUIET_LOG}{settings}"), &["--workers", "1"])?;
        let specs = paths
            .iter()
            .map(|p| Ok(RequestSpec::new("GET", Url::parse(&format!("http://{}{p}", served.addr))?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // One thread: the schedule is walked in order, so each page is
        // asked for exactly once.
        let opts = Options {
            connections,
            threads: 1,
            stop: Stop::Requests(paths.len() as u64),
            warmup: Duration::ZERO,
            ..Options::default()
        };
        let report = drive(&specs, &["Accept-Encoding: gzip"], &opts, interrupt)?;
        if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
            out.interrupted = true;
            break;
        }
        let bytes = if report.successes == 0 { 0.0 } else { report.body_bytes as f64 / report.successes as f64 };
        let gain = 1.0 - bytes / identity;
        let subject = format!("{mode}, cold burst");
        let mut ms = record::load_measurements(&report, &subject, env);
        ms.retain(|m| {
            ["requests_per_s", "latency_mean", "latency_p50", "latency_p99", "latency_max", "errors"]
                .contains(&m.metric.as_str())
        });
        // A mean over the four sizes: no one size.
        out.measurements.extend(on_the_wire(ms, bytes, gain, None));
        out.rows.push(compression_row("burst".into(), mode, connections, bytes, gain, &report));
    }
    Ok(out)
}
