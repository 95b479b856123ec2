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
//! disk, ipc, net, files; the rpc suite, which calls an agent, is
//! `crate::remote::rpc`. What a suite is given and gives back is `ctx.rs`;
//! [`run`] runs suites with a dispatcher handed to it (`crate::remote`'s),
//! so nothing here knows the agent.

pub mod cpu;
pub mod ctx;
pub mod env;
pub mod figure;
pub mod report;
pub mod stopwatch;
pub mod suites;

use std::io;

pub use ctx::{Options, Pin, DEFAULT_SAMPLES};
pub use suites::Suite;

use ctx::{Ctx, Outcome};
use env::Environment;
use figure::Sampling;
use report::{ProbeReport, SuiteResult};
use stopwatch::Overhead;

/// Runs `suites` on this machine, each by `measure`, and reports them with
/// the environment.
///
/// On the calling thread, not a thread of its own: a single-threaded caller
/// (the `tern probe` command) then forks as a single-threaded process, which
/// is what "the cost of a fork" means in lmbench's lat_proc and in a C loop
/// (a second thread, even one blocked, adds about a quarter to every fork:
/// glibc's multi-threaded fork path). The caller's CPU affinity, narrowed by
/// the pinning, is restored at the end.
pub fn run(
    suites: &[Suite],
    opts: &Options,
    measure: impl Fn(Suite, &Ctx) -> io::Result<Outcome>,
) -> io::Result<ProbeReport> {
    let affinity = cpu::Affinity::current()?;
    let report = run_here(suites, opts, &affinity, measure);
    affinity.restore()?;
    report
}

fn run_here(
    suites: &[Suite],
    opts: &Options,
    affinity: &cpu::Affinity,
    measure: impl Fn(Suite, &Ctx) -> io::Result<Outcome>,
) -> io::Result<ProbeReport> {
    // Before pinning, which narrows the CPUs this process may use.
    let mut environment = Environment::capture(String::new());
    let pinned = match opts.pin {
        Pin::Current => Some(cpu::pin(None)?),
        Pin::Cpu(c) => Some(cpu::pin(Some(c))?),
        Pin::None => None,
    };
    environment.governor = cpu::governor(pinned.unwrap_or(0));
    let other_cpu = pinned.and_then(|p| affinity.other_than(p));
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
        let ctx = Ctx { opts, sampling, other_cpu, progress: bar.as_ref(), suite: suite.name() };
        let started = std::time::Instant::now();
        let outcome =
            measure(suite, &ctx).map_err(|e| io::Error::new(e.kind(), format!("suite {}: {e}", suite.name())))?;
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
