//! `tern probe`: what the operating system costs, measured with honest
//! arithmetic.
//!
//! Every figure comes from the same [`stopwatch`]: `CLOCK_MONOTONIC` in
//! nanoseconds, whose own cost and the cost of an empty loop are measured in
//! the same run and subtracted from every interval (clamped at zero).
//! Iteration counts are calibrated so each interval is long enough to time
//! (×8 until above 150 µs, then scaled to the target, as lmbench does); each
//! figure is the median of several intervals (11 by default) with its
//! quartiles, minimum and the raw, overhead and corrected values side by
//! side, flagged as noisy when the interquartile spread is wide. The process
//! pins itself to one CPU and records the frequency governor and the rest of
//! the [`env::Environment`] beside the results.
//!
//! Suites (one file each under `suites/`): syscalls, processes, commands,
//! disk, ipc, net, rpc, files.

pub mod cpu;
pub mod env;
pub mod figure;
pub mod report;
pub mod stopwatch;
pub mod suites;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

pub use env::Environment;
pub use figure::{Better, Figure, Sampling};
pub use report::{ProbeReport, SuiteResult};
pub use suites::Suite;

use stopwatch::{Interval, Overhead};

/// Samples per figure unless told otherwise (`--samples`).
pub const DEFAULT_SAMPLES: usize = 11;

/// How a probe run is made.
#[derive(Debug, Clone)]
pub struct Options {
    pub samples: usize,
    /// Length each sample interval is calibrated to.
    pub interval: Duration,
    /// Few sizes, short intervals: for tests and a first look.
    pub quick: bool,
    /// Pin to this CPU (`None`: the one the process is on), or not at all.
    pub pin: Pin,
    /// Directory the disk and files suites write their scratch files in.
    pub path: PathBuf,
    /// Commands for the commands suite, each run by `/bin/sh -c`.
    pub commands: Vec<String>,
    /// Draw a progress line on stderr.
    pub progress: bool,
    /// The agent the rpc and net suites measure against from here (a local
    /// agent and loopback peer when `None`).
    pub agent: Option<Remote>,
}

/// An agent to measure against.
#[derive(Debug, Clone)]
pub struct Remote {
    /// HOST:PORT.
    pub addr: String,
    pub access: crate::agent::Access,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    Current,
    Cpu(usize),
    None,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            samples: DEFAULT_SAMPLES,
            interval: Duration::from_millis(5),
            quick: false,
            pin: Pin::Current,
            path: std::env::temp_dir(),
            commands: vec!["/bin/true".into()],
            progress: false,
            agent: None,
        }
    }
}

impl Options {
    /// The settings `--quick` stands for: 5 samples of 300 µs intervals.
    pub fn quick(mut self) -> Options {
        self.quick = true;
        self.samples = self.samples.min(5);
        self.interval = self.interval.min(Duration::from_micros(300));
        self
    }
}

/// What a suite gets to measure with.
pub struct Ctx<'a> {
    pub opts: &'a Options,
    pub sampling: Sampling,
    progress: Option<&'a indicatif::ProgressBar>,
    suite: &'static str,
}

impl Ctx<'_> {
    fn show(&self, name: &str) {
        if let Some(bar) = self.progress {
            bar.set_message(format!("{}: {name}", self.suite));
            bar.tick();
        }
    }

    /// A calibrated figure (see [`Sampling::measure`]).
    pub fn measure(
        &self,
        name: &str,
        bytes_per_op: Option<u64>,
        sample: impl FnMut(u64) -> io::Result<Interval>,
    ) -> io::Result<Figure> {
        self.show(name);
        self.sampling.measure(name, bytes_per_op, sample)
    }

    /// Figures sampled in turn (see [`Sampling::measure_interleaved`]).
    pub fn measure_interleaved(&self, ops: &mut [figure::Op<'_>]) -> io::Result<Vec<Figure>> {
        if let Some(op) = ops.first() {
            self.show(op.name);
        }
        self.sampling.measure_interleaved(ops)
    }

    /// A figure with a fixed iteration count (see [`Sampling::measure_fixed`]).
    pub fn measure_fixed(
        &self,
        name: &str,
        iterations: u64,
        bytes_per_op: Option<u64>,
        sample: impl FnMut(u64) -> io::Result<Interval>,
    ) -> io::Result<Figure> {
        self.show(name);
        self.sampling.measure_fixed(name, iterations, bytes_per_op, sample)
    }
}

/// Runs `suites` on this machine and reports them with the environment.
///
/// On the calling thread, not a thread of its own: a single-threaded caller
/// (the `tern probe` command) then forks as a single-threaded process, which
/// is what "the cost of a fork" means in lmbench's lat_proc and in a C loop
/// (a second thread, even one blocked, adds about a quarter to every fork:
/// glibc's multi-threaded fork path). The caller's CPU affinity, narrowed by
/// the pinning, is restored at the end.
pub fn run(suites: &[Suite], opts: &Options) -> io::Result<ProbeReport> {
    let affinity = cpu::Affinity::current()?;
    let report = run_here(suites, opts);
    affinity.restore()?;
    report
}

fn run_here(suites: &[Suite], opts: &Options) -> io::Result<ProbeReport> {
    // Before pinning, which narrows the CPUs this process may use.
    let mut environment = Environment::capture(String::new());
    let pinned = match opts.pin {
        Pin::Current => Some(cpu::pin(None)?),
        Pin::Cpu(c) => Some(cpu::pin(Some(c))?),
        Pin::None => None,
    };
    environment.governor = cpu::governor(pinned.unwrap_or(0));
    let overhead = Overhead::measure(opts.samples);
    let sampling = Sampling { samples: opts.samples.max(1), target_ns: opts.interval.as_nanos() as u64, overhead };
    let bar = opts.progress.then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        bar
    });
    let mut results = Vec::new();
    let mut rpc_null_ns = None;
    for &suite in suites {
        let ctx = Ctx { opts, sampling, progress: bar.as_ref(), suite: suite.name() };
        let started = std::time::Instant::now();
        let outcome = suite.run(&ctx).map_err(|e| io::Error::new(e.kind(), format!("suite {}: {e}", suite.name())))?;
        rpc_null_ns = rpc_null_ns.or(outcome.rpc_null_ns);
        results.push(SuiteResult {
            suite: suite.name().to_string(),
            figures: outcome.figures,
            notes: outcome.notes,
            elapsed_s: started.elapsed().as_secs_f64(),
        });
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(ProbeReport {
        host: "local".into(),
        environment,
        pinned_cpu: pinned,
        samples: sampling.samples,
        interval_ns: sampling.target_ns,
        overhead,
        rpc_null_ns,
        suites: results,
    })
}

/// Runs `suites` for the agent `opts.agent`: the rpc and net suites from
/// here, timed here against the agent (null RPC subtracted; the net suite
/// against a peer the agent starts for it, across the network between the
/// two); every other suite on the agent itself, its report coming back
/// whole. The report's host is the agent.
pub fn run_remote(suites: &[Suite], opts: &Options) -> io::Result<ProbeReport> {
    let remote = opts.agent.as_ref().ok_or_else(|| io::Error::other("no agent given"))?;
    let from_here = |s: &Suite| matches!(s, Suite::Rpc | Suite::Net);
    let on_agent: Vec<String> = suites.iter().filter(|s| !from_here(s)).map(|s| s.name().to_string()).collect();
    let mut report = if on_agent.is_empty() {
        let mut here = run(&[], opts)?;
        here.host = remote.addr.clone();
        here
    } else {
        let mut agent = crate::agent::client::Agent::connect(&remote.addr, &remote.access)?;
        agent.probe(&on_agent, opts.samples, opts.interval, opts.quick)?
    };
    let here: Vec<Suite> = suites.iter().copied().filter(from_here).collect();
    if !here.is_empty() {
        let here = run(&here, opts)?;
        report.rpc_null_ns = here.rpc_null_ns;
        report.suites.extend(here.suites);
    }
    Ok(report)
}
