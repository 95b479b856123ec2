//! The stopwatch: `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds, the cost
//! of reading it and of an empty loop (measured in the same run, so they are
//! the costs of this machine now), and the calibration of iteration counts.
//!
//! Every interval a probe takes is an [`Interval`]: the elapsed time and how
//! many clock reads and loop iterations it contains, so the overhead
//! subtracted from it is exactly what it spent on measuring itself.

use std::hint::black_box;

/// Nanoseconds of `CLOCK_MONOTONIC`.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One measured interval and what in it was the stopwatch's own doing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Elapsed nanoseconds between the interval's two clock reads (summed
    /// when the interval is made of several timed pieces).
    pub ns: u64,
    /// Pairs of clock reads that bracket the timed pieces: each adds one
    /// clock read's cost.
    pub clock_pairs: u64,
    /// Iterations of the timing loop: each adds one empty-loop iteration.
    pub loop_iters: u64,
}

impl Interval {
    /// Times `op` run `n` times back to back in one interval.
    pub fn looped<E>(n: u64, mut op: impl FnMut() -> Result<(), E>) -> Result<Interval, E> {
        let t0 = now_ns();
        for _ in 0..n {
            op()?;
        }
        let t1 = now_ns();
        Ok(Interval { ns: t1 - t0, clock_pairs: 1, loop_iters: n })
    }
}

/// What the stopwatch costs on this machine, per clock read and per empty
/// loop iteration.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Overhead {
    pub clock_ns: f64,
    pub loop_ns: f64,
}

impl Overhead {
    /// Measures both costs: the median over `samples` intervals of back-to-back
    /// clock reads, and of an empty loop of the same shape as [`Interval::looped`].
    pub fn measure(samples: usize) -> Overhead {
        const READS: u64 = 1000;
        const ITERS: u64 = 100_000;
        let mut clock = Vec::with_capacity(samples);
        let mut empty = Vec::with_capacity(samples);
        for _ in 0..samples.max(1) {
            let t0 = now_ns();
            for _ in 0..READS {
                black_box(now_ns());
            }
            let t1 = now_ns();
            // READS reads plus the closing one span the interval.
            clock.push((t1 - t0) as f64 / (READS + 1) as f64);
            let t0 = now_ns();
            for i in 0..ITERS {
                black_box(i);
            }
            let t1 = now_ns();
            empty.push((t1 - t0) as f64 / ITERS as f64);
        }
        let clock_ns = quartiles(&mut clock).median;
        // The empty loop's own interval contains a clock read: take it out.
        let loop_ns = (quartiles(&mut empty).median - clock_ns / ITERS as f64).max(0.0);
        Overhead { clock_ns, loop_ns }
    }

    /// What an interval spent on the stopwatch itself.
    pub fn of(&self, i: &Interval) -> f64 {
        i.clock_pairs as f64 * self.clock_ns + i.loop_iters as f64 * self.loop_ns
    }

    /// The interval less its overhead, clamped at zero: an operation cheaper
    /// than the noise of the stopwatch reads as 0, never as negative.
    pub fn corrected(&self, i: &Interval) -> f64 {
        (i.ns as f64 - self.of(i)).max(0.0)
    }
}

/// Median and quartiles (linear interpolation between order statistics) and
/// the minimum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Quartiles {
    pub min: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
}

/// Sorts `values` and summarises them; all zeros for an empty set.
pub fn quartiles(values: &mut [f64]) -> Quartiles {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| -> f64 {
        if values.is_empty() {
            return 0.0;
        }
        let pos = q * (values.len() - 1) as f64;
        let (lo, frac) = (pos.floor() as usize, pos.fract());
        let hi = (lo + 1).min(values.len() - 1);
        values[lo] + (values[hi] - values[lo]) * frac
    };
    Quartiles { min: at(0.0), q1: at(0.25), median: at(0.5), q3: at(0.75) }
}

/// Intervals shorter than this are dominated by the clock's resolution and
/// the scheduler: the iteration count grows until an interval is longer.
pub const MIN_INTERVAL_NS: u64 = 150_000;

/// The iteration count for intervals of about `target_ns`: grow ×8 from one
/// iteration until an interval takes more than [`MIN_INTERVAL_NS`], then scale
/// the count to the target from the last interval's time per iteration, as
/// lmbench does. `time(n)` runs `n` iterations and returns the nanoseconds.
/// The deciding interval is timed twice and the shorter kept, so one
/// preemption does not stop the growth early. An operation slower than the
/// target runs once per interval.
pub fn calibrate<E>(target_ns: u64, mut time: impl FnMut(u64) -> Result<u64, E>) -> Result<u64, E> {
    const MAX_ITERS: u64 = 1 << 40;
    let mut n = 1u64;
    loop {
        let mut ns = time(n)?;
        if ns > MIN_INTERVAL_NS {
            ns = ns.min(time(n)?);
        }
        if ns > MIN_INTERVAL_NS || n >= MAX_ITERS {
            let per_iter = ns.max(1) as f64 / n as f64;
            return Ok(((target_ns as f64 / per_iter) as u64).clamp(1, MAX_ITERS));
        }
        n *= 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_subtracted_per_clock_pair_and_per_iteration() {
        let o = Overhead { clock_ns: 20.0, loop_ns: 0.5 };
        let i = Interval { ns: 10_000, clock_pairs: 1, loop_iters: 100 };
        assert_eq!(o.of(&i), 70.0);
        assert_eq!(o.corrected(&i), 9_930.0);
        let pieces = Interval { ns: 10_000, clock_pairs: 10, loop_iters: 10 };
        assert_eq!(o.corrected(&pieces), 10_000.0 - 205.0);
    }

    #[test]
    fn a_correction_larger_than_the_interval_clamps_at_zero() {
        let o = Overhead { clock_ns: 30.0, loop_ns: 1.0 };
        assert_eq!(o.corrected(&Interval { ns: 50, clock_pairs: 1, loop_iters: 100 }), 0.0);
        assert_eq!(o.corrected(&Interval { ns: 130, clock_pairs: 1, loop_iters: 100 }), 0.0);
        assert_eq!(o.corrected(&Interval { ns: 131, clock_pairs: 1, loop_iters: 100 }), 1.0);
    }

    #[test]
    fn median_and_quartiles_of_odd_and_even_sets() {
        let mut eleven: Vec<f64> = [9.0, 1.0, 5.0, 3.0, 7.0, 11.0, 2.0, 10.0, 4.0, 8.0, 6.0].to_vec();
        assert_eq!(quartiles(&mut eleven), Quartiles { min: 1.0, q1: 3.5, median: 6.0, q3: 8.5 });
        let mut four = vec![40.0, 10.0, 30.0, 20.0];
        assert_eq!(quartiles(&mut four), Quartiles { min: 10.0, q1: 17.5, median: 25.0, q3: 32.5 });
        let mut one = vec![7.0];
        assert_eq!(quartiles(&mut one), Quartiles { min: 7.0, q1: 7.0, median: 7.0, q3: 7.0 });
        assert_eq!(quartiles(&mut []), Quartiles { min: 0.0, q1: 0.0, median: 0.0, q3: 0.0 });
    }

    #[test]
    fn calibration_grows_by_eight_then_scales_to_the_target() {
        // A synthetic operation of 100 ns: 1, 8, 64, 512 iterations take 0.1,
        // 0.8, 6.4, 51.2 µs; 4096 take 409.6 µs > 150 µs (twice), so the
        // count is scaled from there to the 1 ms target: 10 000 iterations.
        let mut asked = Vec::new();
        let n = calibrate::<()>(1_000_000, |n| {
            asked.push(n);
            Ok(n * 100)
        })
        .unwrap();
        assert_eq!(asked, [1, 8, 64, 512, 4096, 4096]);
        assert_eq!(n, 10_000);
    }

    #[test]
    fn a_slow_operation_runs_once_per_interval() {
        let mut asked = Vec::new();
        let n = calibrate::<()>(1_000_000, |n| {
            asked.push(n);
            Ok(n * 5_000_000)
        })
        .unwrap();
        assert_eq!((asked, n), (vec![1, 1], 1));
    }

    #[test]
    fn one_preempted_interval_does_not_stop_the_growth() {
        // 64 iterations of 100 ns are once preempted for 1 ms: the repeat
        // reads 6.4 µs, so the growth goes on.
        let mut preempted = false;
        let mut asked = Vec::new();
        let n = calibrate::<()>(1_000_000, |n| {
            asked.push(n);
            let extra = if n == 64 && !preempted {
                preempted = true;
                1_000_000
            } else {
                0
            };
            Ok(n * 100 + extra)
        })
        .unwrap();
        assert_eq!(asked, [1, 8, 64, 64, 512, 4096, 4096]);
        assert_eq!(n, 10_000);
    }

    #[test]
    fn errors_of_the_operation_stop_the_calibration() {
        assert_eq!(calibrate(1_000_000, |_| Err("boom")), Err("boom"));
    }

    #[test]
    fn the_real_clock_is_monotonic_and_cheap() {
        let o = Overhead::measure(5);
        assert!(o.clock_ns > 0.0 && o.clock_ns < 5_000.0, "{o:?}");
        assert!(o.loop_ns < 100.0, "{o:?}");
        let (a, b) = (now_ns(), now_ns());
        assert!(b >= a);
    }
}
