//! E5's reference tools: where this host has them, the outside tools
//! `bench/probe.sh` sets beside tern's figures, run on the CPU the probe was
//! pinned to, right after it. Each gives one figure in that figure's unit;
//! a tool that is missing or fails gives none (the page then shows no
//! reference for it). bench/probe.sh remains the full comparison (its own C
//! loops, several rounds, the ratios).

use std::process::{Command, Stdio};

use tern_lab::probe::report::ProbeReport;

/// A reference figure: the probe figure it stands beside (`suite/name`),
/// the tool and its statistic, and its value in the figure's unit.
pub(super) struct Reference {
    pub(super) subject: String,
    pub(super) tool: String,
    pub(super) value: f64,
}

/// The figures the tools give, in nanoseconds: (subject, tool, value).
type Found = (&'static str, String, f64);

/// Runs the tools this host has, pinned where `report` was, and converts
/// each figure to the unit of the probe's.
pub(super) fn run(report: &ProbeReport, quick: bool) -> Vec<Reference> {
    let pin: Vec<String> = report.pinned_cpu.map(|c| vec!["-c".into(), c.to_string()]).unwrap_or_default();
    let found: Vec<Found> = [perf_pipe(&pin, quick), perf_getppid(&pin, quick), hyperfine_true(&pin, quick)]
        .into_iter()
        .flatten()
        .collect();
    found
        .into_iter()
        .filter_map(|(subject, tool, ns)| {
            let (suite, name) = subject.split_once('/')?;
            let figure = report.figure(suite, name)?;
            Some(Reference { subject: subject.into(), tool, value: figure.in_unit(ns) })
        })
        .collect()
}

/// `cmd` (pinned by taskset when `pin` says where), its standard output
/// when it succeeded.
fn output(pin: &[String], cmd: &[&str]) -> Option<String> {
    let mut c = if pin.is_empty() {
        Command::new(cmd[0])
    } else {
        let mut t = Command::new("taskset");
        t.args(pin).arg(cmd[0]);
        t
    };
    let out = c.args(&cmd[1..]).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// perf bench's "N usecs/op", in ns.
fn usecs_per_op(text: &str) -> Option<f64> {
    text.lines().find(|l| l.contains("usecs/op"))?.split_whitespace().next()?.parse::<f64>().ok().map(|us| us * 1e3)
}

/// The pipe round trip between two threads: `perf bench sched pipe -T`.
fn perf_pipe(pin: &[String], quick: bool) -> Option<Found> {
    let loops = if quick { "20000" } else { "200000" };
    let ns = usecs_per_op(&output(pin, &["perf", "bench", "sched", "pipe", "-T", "-l", loops])?)?;
    Some(("ipc/pipe round trip, 1 byte", "perf bench sched pipe -T (mean)".into(), ns))
}

/// A system call: `perf bench syscall basic` (getppid).
fn perf_getppid(pin: &[String], quick: bool) -> Option<Found> {
    let loops = if quick { "1000000" } else { "10000000" };
    let ns = usecs_per_op(&output(pin, &["perf", "bench", "syscall", "basic", "-l", loops])?)?;
    Some(("syscalls/getppid", "perf bench syscall basic (mean)".into(), ns))
}

/// `/bin/true` with the shell's start subtracted, tern's definition timed
/// by hyperfine: median(`sh -c /bin/true`) − median(`sh -c ''`).
fn hyperfine_true(pin: &[String], quick: bool) -> Option<Found> {
    let runs = if quick { "10" } else { "50" };
    let json = std::env::temp_dir().join(format!("tern-lab-e5-hyperfine-{}.json", std::process::id()));
    let done = output(
        pin,
        &[
            "hyperfine",
            "-N",
            "--style",
            "none",
            "--warmup",
            "3",
            "--runs",
            runs,
            "--export-json",
            json.to_str()?,
            "sh -c /bin/true",
            "sh -c ''",
        ],
    );
    let text = std::fs::read_to_string(&json).ok();
    let _ = std::fs::remove_file(&json);
    done?;
    let doc: serde_json::Value = serde_json::from_str(&text?).ok()?;
    let median = |i: usize| doc["results"][i]["median"].as_f64();
    let ns = (median(0)? - median(1)?) * 1e9;
    Some((
        "commands//bin/true",
        format!("hyperfine -N, {runs} runs each: median(sh -c /bin/true) − median(sh -c '')"),
        ns,
    ))
}
