//! E1 cgi-output: the gateway's output disciplines ①–⑥ × buffer sizes on
//! the bulletin-board pages, and its file methods (⑦ read/write, ⑧ mmap,
//! sendfile, splice) × file sizes, measured by the gateway's `gwbench`
//! (`make -C gateway`) the way the published study measured them: the
//! gateway's own CPU time (`getrusage`) writing into a pipe a server stub
//! passed it over a Unix socket. gwbench runs every configuration
//! round-robin and reports the median and quartiles over its runs; they
//! are stored as they are.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use tern_lab::probe::env::Environment;
use tern_lab::probe::figure::Better;
use tern_lab::probe::suites::ipc::size_label;
use tern_lab::store::Measurement;

use super::outcome::{Outcome, Table};
use super::setup::{gateway_program, Scratch};

/// The buffer stdio gets without trying (glibc's `BUFSIZ`): the baseline.
const STDIO_DEFAULT: u64 = 8192;

/// "①" … "⑧" for the study's numbers, nothing for sendfile and splice.
fn circled(n: u64) -> &'static str {
    ["", "①", "②", "③", "④", "⑤", "⑥", "⑦", "⑧"].get(n as usize).copied().unwrap_or("")
}

/// What one workload of gwbench's summary is: its JSON keys and ours.
struct Workload {
    /// gwbench's name of the workload, and the keys of its summary.
    name: &'static str,
    variant: &'static str,
    size: &'static str,
    /// The metric stored, and what a subject says its size is.
    metric: &'static str,
    size_is: &'static str,
}

const BOARD: Workload =
    Workload { name: "board", variant: "discipline", size: "bufsize", metric: "board_cpu", size_is: "buffer" };
const FILE: Workload =
    Workload { name: "file", variant: "method", size: "file_size", metric: "file_cpu", size_is: "file" };

pub(super) fn e1(quick: bool, gateway: Option<&Path>, env: &Environment) -> anyhow::Result<Outcome> {
    let gwbench = gateway_program(gateway, "gwbench")?;
    let dir = Scratch::new("e1")?;
    let json = dir.0.join("gwbench.json");
    let mut cmd = Command::new(&gwbench);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .arg("--json")
        .arg(&json)
        .arg("--tmpdir")
        .arg(&dir.0)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", gwbench.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", gwbench.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = std::fs::read_to_string(&json).with_context(|| format!("cannot read {}", json.display()))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not gwbench's JSON", json.display()))?;

    let mut measurements = Vec::new();
    let mut table = Table(vec![["workload", "variant", "size", "CPU us", "q1", "q3"].map(String::from).to_vec()]);
    for w in [BOARD, FILE] {
        // The names of the variants, from the samples.
        let name_of = |n: u64| {
            report["samples"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["workload"] == w.name && s[w.variant] == n)
                .and_then(|s| s["name"].as_str())
                .unwrap_or("?")
                .to_string()
        };
        for c in report["summary"][w.name].as_array().into_iter().flatten() {
            let (Some(n), Some(size)) = (c[w.variant].as_u64(), c[w.size].as_u64()) else {
                bail!("gwbench's summary lacks {} or {}: {c}", w.variant, w.size);
            };
            let variant = format!("{} {}", circled(n), name_of(n)).trim().to_string();
            let subject = format!("{variant}, {} {}", size_label(size as usize), w.size_is);
            for (suffix, key) in [("", "median"), ("_q1", "q1"), ("_q3", "q3")] {
                measurements.push(Measurement {
                    subject: subject.clone(),
                    metric: format!("{}{suffix}", w.metric),
                    value: c[key].as_f64().with_context(|| format!("gwbench's summary lacks {key}: {c}"))?,
                    unit: "µs".into(),
                    better: Better::Lower,
                    size: Some(size),
                    concurrency: None,
                    cpus: Some(env.cores_usable as u64),
                    load: Some(env.load_average[0]),
                });
            }
            let f = |key: &str| format!("{:.1}", c[key].as_f64().unwrap_or(0.0));
            table.0.push(vec![w.name.into(), variant, size_label(size as usize), f("median"), f("q1"), f("q3")]);
        }
    }
    let best = &report["summary"]["best_discipline"];
    let mut notes = vec![format!(
        "CPU us: the gateway's user + system CPU per repetition (board: the five pages, each one CGI run; file: \
         one file sent), the median and quartiles over {} runs; the study's Linux best: ① stdio 16K (+2.4 %); \
         the stdio default is ① {}",
        report["parameters"]["runs"],
        size_label(STDIO_DEFAULT as usize)
    )];
    if let (Some(d), Some(size)) = (best["discipline"].as_u64(), best["bufsize"].as_u64()) {
        notes.push(format!("least CPU on the board pages here: {} {}", circled(d), size_label(size as usize)));
    }
    let config = serde_json::json!({"gwbench": gwbench.display().to_string(), "parameters": report["parameters"],
        "host": report["host"], "published": {"board": "① 16K +2.4 %", "file_1m": "mmap 54 % faster"}});
    Ok(Outcome { measurements, table, notes, config, interrupted: false })
}
