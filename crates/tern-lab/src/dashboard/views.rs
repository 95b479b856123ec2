//! What a chart shows, computed from stored points: the bars of a bar
//! chart, the series of an x-y chart, a metric's history with its
//! regressions, a latency percentile spectrum. No drawing here.

use std::collections::BTreeMap;

use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;

use crate::probe::figure::Better;
use crate::store::{Point, Run};

/// How points are laid out: bars grouped by something, or y against an x.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// One bar per run (and subject).
    BarRun,
    /// The mean per host.
    BarHost,
    /// The mean per run label (the configuration a run was made with).
    BarLabel,
    Xy(Axis),
    /// The metric run after run, regressions marked.
    History,
}

/// The x axis of an x-y chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Size,
    Load,
    Concurrency,
    Cpus,
    Time,
}

pub const VIEWS: [(&str, &str); 9] = [
    ("bar-run", "bar chart: one bar per run"),
    ("bar-host", "bar chart: mean per host"),
    ("bar-label", "bar chart: mean per configuration (run label)"),
    ("xy-size", "x-y: against size (bytes)"),
    ("xy-load", "x-y: against load average"),
    ("xy-concurrency", "x-y: against concurrency"),
    ("xy-cpus", "x-y: against CPU count"),
    ("xy-time", "x-y: against time"),
    ("history", "history with regression markers"),
];

impl View {
    pub fn parse(s: &str) -> Option<View> {
        Some(match s {
            "bar-run" => View::BarRun,
            "bar-host" => View::BarHost,
            "bar-label" => View::BarLabel,
            "xy-size" => View::Xy(Axis::Size),
            "xy-load" => View::Xy(Axis::Load),
            "xy-concurrency" => View::Xy(Axis::Concurrency),
            "xy-cpus" => View::Xy(Axis::Cpus),
            "xy-time" => View::Xy(Axis::Time),
            "history" => View::History,
            _ => return None,
        })
    }
}

impl Axis {
    pub fn name(self) -> &'static str {
        match self {
            Axis::Size => "size (bytes)",
            Axis::Load => "load average (1 min)",
            Axis::Concurrency => "concurrency",
            Axis::Cpus => "CPUs",
            Axis::Time => "hours since the first run shown",
        }
    }

    fn of(self, p: &Point, t0: f64) -> Option<f64> {
        match self {
            Axis::Size => p.m.size.map(|v| v as f64),
            Axis::Load => p.m.load,
            Axis::Concurrency => p.m.concurrency.map(|v| v as f64),
            Axis::Cpus => p.m.cpus.map(|v| v as f64),
            Axis::Time => Some((p.started_at - t0) / 3600.0),
        }
    }
}

/// A bar and the runs behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub runs: Vec<i64>,
}

/// A line of an x-y chart: (x, y, run) sorted by x.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, i64)>,
}

/// One run of a metric's history.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub run: i64,
    pub started_at: f64,
    pub value: f64,
    /// The median of up to [`BASELINE_RUNS`] previous runs.
    pub baseline: Option<f64>,
    pub regression: bool,
}

/// How many previous runs the regression baseline is the median of.
pub const BASELINE_RUNS: usize = 5;
/// Worse than this times the baseline is a regression.
pub const REGRESSION_RATIO: f64 = 1.25;

fn several_subjects(points: &[Point]) -> bool {
    points.iter().any(|p| p.m.subject != points[0].m.subject)
}

/// The bars of a bar view.
pub fn bars(points: &[Point], view: View) -> Vec<Bar> {
    if view == View::BarRun {
        let named = several_subjects(points);
        return points
            .iter()
            .map(|p| Bar {
                label: if named { format!("#{} {}", p.run, p.m.subject) } else { format!("#{}", p.run) },
                value: p.m.value,
                runs: vec![p.run],
            })
            .collect();
    }
    let mut groups: BTreeMap<String, (f64, usize, Vec<i64>)> = BTreeMap::new();
    for p in points {
        let key = if view == View::BarHost { p.host.hostname.clone() } else { p.label.clone() };
        let g = groups.entry(key).or_default();
        g.0 += p.m.value;
        g.1 += 1;
        if !g.2.contains(&p.run) {
            g.2.push(p.run);
        }
    }
    groups.into_iter().map(|(label, (sum, n, runs))| Bar { label, value: sum / n as f64, runs }).collect()
}

/// The series of an x-y view: one per subject (and host, when there are
/// several); points without that x are left out.
pub fn series(points: &[Point], axis: Axis) -> Vec<Series> {
    let t0 = points.iter().map(|p| p.started_at).fold(f64::INFINITY, f64::min);
    let hosts = points.iter().any(|p| p.host.id != points[0].host.id);
    let mut by: BTreeMap<String, Vec<(f64, f64, i64)>> = BTreeMap::new();
    for p in points {
        if let Some(x) = axis.of(p, t0) {
            let name = if hosts { format!("{} @ {}", p.m.subject, p.host.hostname) } else { p.m.subject.clone() };
            by.entry(name).or_default().push((x, p.m.value, p.run));
        }
    }
    by.into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The history of one subject's metric, oldest first: each run against
/// the median of the runs before it.
pub fn history(points: &[Point]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for p in points {
        let previous: Vec<f64> = steps.iter().rev().take(BASELINE_RUNS).map(|s| s.value).collect();
        let baseline = (!previous.is_empty()).then(|| median(&previous));
        let regression = baseline.is_some_and(|b| match p.m.better {
            Better::Lower => p.m.value > b * REGRESSION_RATIO,
            Better::Higher => p.m.value * REGRESSION_RATIO < b,
        });
        steps.push(Step { run: p.run, started_at: p.started_at, value: p.m.value, baseline, regression });
    }
    steps
}

/// The x of percentile `p` on the spectrum's axis: log10(1 / (1 - p)), so
/// 90% is 1, 99% is 2, 99.9% is 3.
pub fn spectrum_x(p: f64) -> f64 {
    (1.0 / (1.0 - p)).log10()
}

/// The spectrum's x labels at whole decades: 0%, 90%, 99%, 99.9% …
pub fn percentile_label(x: f64) -> String {
    match x.round() as i32 {
        _ if (x - x.round()).abs() > 0.01 => String::new(),
        0 => "0%".into(),
        1 => "90%".into(),
        k => format!("{:.*}%", (k - 2).max(0) as usize, 100.0 * (1.0 - 10f64.powi(-k))),
    }
}

/// The percentiles a spectrum's table names.
pub const NAMED: [(f64, &str); 4] = [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")];

/// The latency percentile spectrum of every histogram of `runs` (µs
/// against [`spectrum_x`]), up to the percentile its count resolves.
pub fn spectra(runs: &[Run]) -> Vec<Series> {
    let mut out = Vec::new();
    for run in runs {
        for snap in &run.data.histograms {
            let Some(h) = decode(&snap.snapshot) else { continue };
            let limit = (h.len().max(1) as f64).log10();
            // A step of 0.05 decade, plus the named percentiles exactly.
            let mut xs: Vec<(f64, f64)> = (0..)
                .map(|i| f64::from(i) * 0.05)
                .take_while(|x| *x <= limit)
                .map(|x| (x, 1.0 - 10f64.powf(-x)))
                .collect();
            xs.extend(NAMED.iter().map(|&(q, _)| (spectrum_x(q), q)).filter(|(x, _)| *x <= limit));
            xs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut points: Vec<(f64, f64, i64)> =
                xs.into_iter().map(|(x, q)| (x, h.value_at_quantile(q) as f64, run.id)).collect();
            points.push((limit, h.max() as f64, run.id));
            out.push(Series { name: format!("#{} {} {}", run.id, snap.subject, snap.name), points });
        }
    }
    out
}

/// A histogram from its stored form (HdrHistogram V2 deflate, base64).
pub fn decode(snapshot: &str) -> Option<Histogram<u64>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD.decode(snapshot).ok()?;
    Deserializer::new().deserialize(&mut bytes.as_slice()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Host, Measurement, Status};

    fn point(run: i64, value: f64, better: Better) -> Point {
        Point {
            run,
            kind: "bench".into(),
            label: String::new(),
            started_at: run as f64,
            status: Status::Complete,
            host: Host { id: 1, hostname: "h".into(), fingerprint: "h".into() },
            m: Measurement {
                subject: "s".into(),
                metric: "m".into(),
                value,
                unit: "us".into(),
                better,
                size: None,
                concurrency: None,
                cpus: None,
                load: None,
            },
        }
    }

    #[test]
    fn a_regression_is_worse_than_125_percent_of_the_previous_median() {
        let lower: Vec<Point> = [100.0, 110.0, 90.0, 124.0, 137.0]
            .iter()
            .enumerate()
            .map(|(i, v)| point(i as i64, *v, Better::Lower))
            .collect();
        let h = history(&lower);
        assert_eq!(h[0].baseline, None);
        assert_eq!(h[3].baseline, Some(100.0));
        assert!(!h[3].regression, "124 is not above 125");
        assert_eq!(h[4].baseline, Some(105.0));
        assert!(h[4].regression, "137 > 1.25 × 105");
        let higher: Vec<Point> =
            [1000.0, 790.0, 801.0].iter().enumerate().map(|(i, v)| point(i as i64, *v, Better::Higher)).collect();
        let h = history(&higher);
        assert!(h[1].regression, "1000 / 790 > 1.25");
        assert!(!h[2].regression, "median 895 / 801 < 1.25");
    }

    #[test]
    fn spectrum_axis() {
        assert!((spectrum_x(0.9) - 1.0).abs() < 1e-9);
        assert!((spectrum_x(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(spectrum_x(0.0), 0.0);
        assert_eq!(percentile_label(3.0), "99.9%");
        assert_eq!(percentile_label(2.0), "99%");
    }
}
