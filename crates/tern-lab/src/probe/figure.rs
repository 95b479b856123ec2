//! One reported figure: the samples of an operation turned into raw,
//! overhead and corrected statistics, side by side, in the figure's unit.

use std::io;

use serde::{Deserialize, Serialize};

use super::stopwatch::{calibrate, quartiles, Interval, Overhead, Quartiles};

/// Which way is better for a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
}

/// An interquartile spread wider than this share of the median flags the
/// figure as noisy: the machine was busy, or the operation varies.
pub const NOISY_IQR: f64 = 0.10;

/// The statistics of one operation. Times are nanoseconds per operation;
/// `value` is the corrected median in `unit` (a time, or a bandwidth when the
/// operation moves `bytes_per_op`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub better: Better,
    pub value: f64,
    /// Operations per sample interval (calibrated).
    pub iterations: u64,
    pub samples: usize,
    /// As timed, per operation.
    pub raw_ns: Stat,
    /// What the stopwatch itself cost per operation (clock reads, loop).
    pub overhead_ns: f64,
    /// Raw less overhead, clamped at zero, per operation.
    pub corrected_ns: Stat,
    pub bytes_per_op: Option<u64>,
    /// Interquartile spread wider than 10% of the median.
    pub noisy: bool,
}

/// Quartiles as serialised: plain fields, so the JSON reads well.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
}

impl From<Quartiles> for Stat {
    fn from(q: Quartiles) -> Stat {
        Stat { median: q.median, q1: q.q1, q3: q.q3, min: q.min }
    }
}

impl Figure {
    /// Builds a figure from sample intervals of `iterations` operations each.
    pub fn from_intervals(
        name: &str,
        iterations: u64,
        intervals: &[Interval],
        overhead: &Overhead,
        bytes_per_op: Option<u64>,
    ) -> Figure {
        let per_op = |v: f64| v / iterations.max(1) as f64;
        let mut raw: Vec<f64> = intervals.iter().map(|i| per_op(i.ns as f64)).collect();
        let mut corrected: Vec<f64> = intervals.iter().map(|i| per_op(overhead.corrected(i))).collect();
        let mut over: Vec<f64> = intervals.iter().map(|i| per_op(overhead.of(i))).collect();
        let mut figure = Figure {
            name: name.to_string(),
            unit: String::new(),
            better: Better::Lower,
            value: 0.0,
            iterations,
            samples: intervals.len(),
            raw_ns: quartiles(&mut raw).into(),
            overhead_ns: quartiles(&mut over).median,
            corrected_ns: quartiles(&mut corrected).into(),
            bytes_per_op,
            noisy: false,
        };
        figure.settle();
        figure
    }

    /// Derives the value, unit, direction and noise flag from the corrected
    /// statistics.
    fn settle(&mut self) {
        let c = self.corrected_ns;
        let (value, unit, better) = match self.bytes_per_op {
            Some(bytes) => (mb_per_s(bytes, c.median), "MB/s", Better::Higher),
            None => scaled_time(c.median),
        };
        (self.value, self.unit, self.better) = (value, unit.to_string(), better);
        self.noisy = c.median > 0.0 && (c.q3 - c.q1) / c.median > NOISY_IQR;
    }

    /// Subtracts a further fixed cost measured separately (a shell's start,
    /// a null RPC, the mapping without the touching) from every corrected
    /// statistic, clamped at zero, and counts it as overhead.
    pub fn subtract(&mut self, ns: f64) {
        let c = &mut self.corrected_ns;
        for v in [&mut c.median, &mut c.q1, &mut c.q3, &mut c.min] {
            *v = (*v - ns).max(0.0);
        }
        self.overhead_ns += ns;
        self.settle();
    }

    /// Turns a figure per operation into one per `parts` of it (per page of
    /// a mapping, per child of a batch).
    pub fn per(&mut self, parts: u64) {
        let k = parts.max(1) as f64;
        for s in [&mut self.raw_ns, &mut self.corrected_ns] {
            for v in [&mut s.median, &mut s.q1, &mut s.q3, &mut s.min] {
                *v /= k;
            }
        }
        self.overhead_ns /= k;
        self.iterations *= parts.max(1);
        self.settle();
    }

    /// Renders a time of this figure (ns per operation) in its unit.
    pub fn in_unit(&self, ns: f64) -> f64 {
        match self.bytes_per_op {
            Some(bytes) => mb_per_s(bytes, ns),
            None => ns / unit_scale(&self.unit),
        }
    }
}

fn mb_per_s(bytes: u64, ns: f64) -> f64 {
    if ns > 0.0 {
        bytes as f64 / ns * 1000.0
    } else {
        f64::INFINITY
    }
}

fn unit_scale(unit: &str) -> f64 {
    match unit {
        "µs" => 1e3,
        "ms" => 1e6,
        _ => 1.0,
    }
}

/// A time per operation in the unit that reads best: ns below 10 µs, µs
/// below 10 ms, ms above.
fn scaled_time(ns: f64) -> (f64, &'static str, Better) {
    let unit = if ns < 10_000.0 {
        "ns"
    } else if ns < 10_000_000.0 {
        "µs"
    } else {
        "ms"
    };
    (ns / unit_scale(unit), unit, Better::Lower)
}

/// How long and how often operations are sampled.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub samples: usize,
    /// Calibrated length of one sample interval.
    pub target_ns: u64,
    pub overhead: Overhead,
}

impl Sampling {
    /// Calibrates the iteration count of `sample` (which runs `n` operations
    /// and returns the interval it timed), then takes the samples.
    pub fn measure(
        &self,
        name: &str,
        bytes_per_op: Option<u64>,
        mut sample: impl FnMut(u64) -> io::Result<Interval>,
    ) -> io::Result<Figure> {
        let iterations = calibrate(self.target_ns, |n| sample(n).map(|i| i.ns))?;
        self.measure_fixed(name, iterations, bytes_per_op, sample)
    }

    /// As [`Sampling::measure`] with a fixed iteration count, for operations
    /// whose cost is known to dwarf the clock (process creation, fsync).
    pub fn measure_fixed(
        &self,
        name: &str,
        iterations: u64,
        bytes_per_op: Option<u64>,
        mut sample: impl FnMut(u64) -> io::Result<Interval>,
    ) -> io::Result<Figure> {
        let intervals = (0..self.samples.max(1)).map(|_| sample(iterations)).collect::<io::Result<Vec<_>>>()?;
        Ok(Figure::from_intervals(name, iterations, &intervals, &self.overhead, bytes_per_op))
    }

    /// Figures of operations that are subtracted from one another (a
    /// command and the shell that starts it): each is calibrated, then their
    /// samples are taken in turn, one of each again and again, so a change in
    /// the machine's state during the run weighs on all of them alike rather
    /// than on whichever happened to be sampled then.
    pub fn measure_interleaved(&self, ops: &mut [Op<'_>]) -> io::Result<Vec<Figure>> {
        let iterations = ops
            .iter_mut()
            .map(|op| calibrate(self.target_ns, |n| (op.sample)(n).map(|i| i.ns)))
            .collect::<io::Result<Vec<u64>>>()?;
        let mut intervals = vec![Vec::with_capacity(self.samples); ops.len()];
        for _ in 0..self.samples.max(1) {
            for ((op, &n), taken) in ops.iter_mut().zip(&iterations).zip(&mut intervals) {
                taken.push((op.sample)(n)?);
            }
        }
        Ok(ops
            .iter()
            .zip(iterations)
            .zip(intervals)
            .map(|((op, n), taken)| Figure::from_intervals(op.name, n, &taken, &self.overhead, None))
            .collect())
    }
}

/// An operation to measure among others ([`Sampling::measure_interleaved`]):
/// its figure's name and what runs `n` of it and times them.
pub struct Op<'a> {
    pub name: &'a str,
    pub sample: &'a mut dyn FnMut(u64) -> io::Result<Interval>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: Overhead = Overhead { clock_ns: 20.0, loop_ns: 1.0 };

    fn interval(ns: u64, n: u64) -> Interval {
        Interval { ns, clock_pairs: 1, loop_iters: n }
    }

    #[test]
    fn raw_overhead_and_corrected_per_operation() {
        // 100 operations per interval; overhead 20 + 100 = 120 ns per interval.
        let intervals: Vec<_> = [10_120, 10_220, 10_320, 10_420, 10_520].iter().map(|&ns| interval(ns, 100)).collect();
        let f = Figure::from_intervals("op", 100, &intervals, &O, None);
        assert_eq!(f.raw_ns, Stat { median: 103.2, q1: 102.2, q3: 104.2, min: 101.2 });
        assert_eq!(f.overhead_ns, 1.2);
        assert_eq!(f.corrected_ns, Stat { median: 102.0, q1: 101.0, q3: 103.0, min: 100.0 });
        assert_eq!((f.value, f.unit.as_str(), f.better), (102.0, "ns", Better::Lower));
        assert!(!f.noisy);
        assert_eq!(f.samples, 5);
    }

    #[test]
    fn a_wide_spread_is_flagged() {
        let intervals: Vec<_> = [1_000, 2_000, 3_000, 4_000, 5_000].iter().map(|&ns| interval(ns, 1)).collect();
        let f = Figure::from_intervals("op", 1, &intervals, &O, None);
        assert!(f.noisy);
        assert_eq!(f.corrected_ns.median, 2_979.0);
    }

    #[test]
    fn sub_overhead_operations_read_zero() {
        let intervals = [interval(100, 100); 3];
        let f = Figure::from_intervals("nothing", 100, &intervals, &O, None);
        assert_eq!((f.corrected_ns.median, f.value, f.noisy), (0.0, 0.0, false));
    }

    #[test]
    fn bandwidth_is_bytes_over_corrected_time() {
        // 1 MB moved in 1 ms (+ 21 ns of stopwatch) = 1000 MB/s.
        let f = Figure::from_intervals("copy", 1, &[interval(1_000_021, 1); 3], &O, Some(1_000_000));
        assert_eq!((f.value, f.unit.as_str(), f.better), (1000.0, "MB/s", Better::Higher));
    }

    #[test]
    fn a_separately_measured_cost_is_subtracted_and_clamped() {
        let intervals: Vec<_> = [1_021, 2_021, 3_021].iter().map(|&ns| interval(ns, 1)).collect();
        let mut f = Figure::from_intervals("rpc", 1, &intervals, &O, None);
        f.subtract(1_500.0);
        assert_eq!(f.corrected_ns, Stat { median: 500.0, q1: 0.0, q3: 1_000.0, min: 0.0 });
        assert_eq!((f.overhead_ns, f.value), (1_521.0, 500.0));
        assert!(f.noisy);
    }

    #[test]
    fn a_figure_per_part() {
        let mut f = Figure::from_intervals("map 256 pages", 1, &[interval(256_021, 1); 3], &O, None);
        f.per(256);
        assert_eq!((f.corrected_ns.median, f.value, f.unit.as_str(), f.iterations), (1_000.0, 1_000.0, "ns", 256));
    }

    #[test]
    fn interleaved_operations_are_calibrated_each_then_sampled_in_turn() {
        let sampling = Sampling { samples: 3, target_ns: 1_000_000, overhead: O };
        let calls = std::cell::RefCell::new(Vec::new());
        // `a` takes 1 ms an operation, `b` 100 µs: 1 and 10 per interval.
        let mut a = |n: u64| {
            calls.borrow_mut().push(('a', n));
            Ok(interval(n * 1_000_000, n))
        };
        let mut b = |n: u64| {
            calls.borrow_mut().push(('b', n));
            Ok(interval(n * 100_000, n))
        };
        let figures = sampling
            .measure_interleaved(&mut [Op { name: "a", sample: &mut a }, Op { name: "b", sample: &mut b }])
            .unwrap();
        let calls = calls.into_inner();
        // Calibration: a at 1 (twice), b at 1, 8 (twice); then the samples alternate.
        assert_eq!(calls[..5], [('a', 1), ('a', 1), ('b', 1), ('b', 8), ('b', 8)]);
        assert_eq!(calls[5..], [('a', 1), ('b', 10), ('a', 1), ('b', 10), ('a', 1), ('b', 10)]);
        assert_eq!((figures[0].name.as_str(), figures[0].iterations, figures[0].samples), ("a", 1, 3));
        assert_eq!((figures[1].name.as_str(), figures[1].iterations, figures[1].samples), ("b", 10, 3));
    }

    #[test]
    fn times_take_a_readable_unit() {
        let f = Figure::from_intervals("fork", 1, &[interval(250_021, 1); 3], &O, None);
        assert_eq!((f.value, f.unit.as_str()), (250.0, "µs"));
        assert_eq!(f.in_unit(500_000.0), 500.0);
    }
}
