//! What a suite is given to measure with (the run's [`Options`], the
//! calibrated [`Sampling`]) and what it gives back ([`Outcome`]): the
//! interface between the runner (`mod.rs`) and the suites, below both.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::figure::{Figure, Op, Sampling};
use super::stopwatch::Interval;

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
    /// A CPU other than the pinned one this process may use, for the round
    /// trips whose two ends run on different CPUs (none when not pinned, or
    /// with one CPU).
    pub other_cpu: Option<usize>,
    pub(super) progress: Option<&'a indicatif::ProgressBar>,
    pub(super) suite: &'static str,
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
    pub fn measure_interleaved(&self, ops: &mut [Op<'_>]) -> io::Result<Vec<Figure>> {
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

/// What a suite measured.
#[derive(Debug, Default)]
pub struct Outcome {
    pub figures: Vec<Figure>,
    pub notes: Vec<String>,
    /// The null-RPC time subtracted from the suite's transfers.
    pub rpc_null_ns: Option<f64>,
}

impl From<Vec<Figure>> for Outcome {
    fn from(figures: Vec<Figure>) -> Outcome {
        Outcome { figures, ..Outcome::default() }
    }
}
