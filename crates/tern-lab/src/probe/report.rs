//! A probe run's results: a table per suite (units, which way is better,
//! raw, overhead and corrected side by side) and a JSON document carrying
//! the environment with every figure.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::env::Environment;
use super::figure::{Better, Figure};
use super::stopwatch::Overhead;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// "local", or the agent's address.
    pub host: String,
    pub environment: Environment,
    pub pinned_cpu: Option<usize>,
    pub samples: usize,
    pub interval_ns: u64,
    /// The stopwatch's cost, measured at the start of this run.
    pub overhead: Overhead,
    /// Timed from a master: the median null-RPC time subtracted from the
    /// master-side timings (`rpc_time(x) − rpc_time(null)`).
    pub rpc_null_ns: Option<f64>,
    pub suites: Vec<SuiteResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteResult {
    pub suite: String,
    pub figures: Vec<Figure>,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

impl ProbeReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises")
    }

    /// The figure `name` of `suite`, if measured.
    pub fn figure(&self, suite: &str, name: &str) -> Option<&Figure> {
        self.suites.iter().find(|s| s.suite == suite)?.figures.iter().find(|f| f.name == name)
    }
}

/// Three significant digits, the precision the samples carry.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "inf".into();
    }
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn better(b: Better) -> &'static str {
    match b {
        Better::Lower => "lower",
        Better::Higher => "higher",
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.environment;
        writeln!(f, "host {} — {} — {}", self.host, e.kernel, e.cpu_model)?;
        writeln!(
            f,
            "{} of {} CPUs usable{}, pinned to {}, governor {}, {}, load {:.2} {:.2} {:.2}",
            e.cores_usable,
            e.cores_online,
            e.cpu_quota.map(|q| format!(" (quota {q:.2})")).unwrap_or_default(),
            self.pinned_cpu.map(|c| format!("CPU {c}")).unwrap_or_else(|| "no CPU".into()),
            e.governor,
            e.virtualisation,
            e.load_average[0],
            e.load_average[1],
            e.load_average[2],
        )?;
        writeln!(
            f,
            "stopwatch: clock read {} ns, empty loop {} ns/iteration; {} samples of ~{} µs{}",
            num(self.overhead.clock_ns),
            num(self.overhead.loop_ns),
            self.samples,
            num(self.interval_ns as f64 / 1e3),
            self.rpc_null_ns.map(|n| format!("; null RPC {} µs subtracted", num(n / 1e3))).unwrap_or_default(),
        )?;
        for s in &self.suites {
            writeln!(f)?;
            write_suite(f, s)?;
        }
        Ok(())
    }
}

/// One suite's table. Raw, overhead and corrected are in the figure's unit
/// (overhead in ns for bandwidths, where it is a time).
fn write_suite(f: &mut fmt::Formatter<'_>, s: &SuiteResult) -> fmt::Result {
    let width = s.figures.iter().map(|x| x.name.chars().count()).max().unwrap_or(0).max(6);
    writeln!(f, "{} ({:.1} s)", s.suite, s.elapsed_s)?;
    writeln!(
        f,
        "  {:<width$} {:>9} {:<5} {:<6} {:>9} {:>9} {:>19} {:>9} {:>10}",
        "figure", "value", "unit", "better", "raw", "overhead", "q1–q3", "best", "samples"
    )?;
    for x in &s.figures {
        let c = &x.corrected_ns;
        // For bandwidths the best sample is the shortest time.
        let (lo, hi) = match x.better {
            Better::Lower => (x.in_unit(c.q1), x.in_unit(c.q3)),
            Better::Higher => (x.in_unit(c.q3), x.in_unit(c.q1)),
        };
        let over = match x.bytes_per_op {
            Some(_) => format!("{}ns", num(x.overhead_ns)),
            None => num(x.in_unit(x.overhead_ns)),
        };
        writeln!(
            f,
            "  {:<width$} {:>9} {:<5} {:<6} {:>9} {:>9} {:>19} {:>9} {:>10}{}",
            x.name,
            num(x.value),
            x.unit,
            better(x.better),
            num(x.in_unit(x.raw_ns.median)),
            over,
            format!("{}–{}", num(lo), num(hi)),
            num(x.in_unit(x.corrected_ns.min)),
            format!("{}×{}", x.samples, x.iterations),
            if x.noisy { "  noisy" } else { "" },
        )?;
    }
    for n in &s.notes {
        writeln!(f, "  note: {n}")?;
    }
    Ok(())
}

/// Several hosts' runs of the same suites, one column per host.
pub struct SideBySide<'a>(pub &'a [ProbeReport]);

impl fmt::Display for SideBySide<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(first) = self.0.first() else { return Ok(()) };
        for s in &first.suites {
            let width = s.figures.iter().map(|x| x.name.chars().count()).max().unwrap_or(0).max(6);
            write!(f, "{}\n  {:<width$} {:<5} {:<6}", s.suite, "figure", "unit", "better")?;
            for r in self.0 {
                write!(f, " {:>21}", r.host)?;
            }
            writeln!(f)?;
            for x in &s.figures {
                write!(f, "  {:<width$} {:<5} {:<6}", x.name, x.unit, better(x.better))?;
                for r in self.0 {
                    let cell = r.figure(&s.suite, &x.name).map(|y| num(x.in_unit(y.corrected_ns.median)));
                    write!(f, " {:>21}", cell.unwrap_or_else(|| "—".into()))?;
                }
                writeln!(f)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
