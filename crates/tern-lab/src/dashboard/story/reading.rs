//! Reading stored runs for a story: what it is drawn from ([`Ctx`]), a
//! run's measurements by metric and subject ([`Values`]), the names of runs
//! and the parts of a subject, and who leads and whether past the noise
//! ([`Spread`], [`lead`]).
//!
//! An experiment names each measurement's subject by every dimension that
//! varies, the series first (`event, 1 CPU, CGI 0 %`): the series is the
//! part before the first comma, the rest says where it was measured.

use crate::probe::figure::Better;
use crate::store::{Measurement, Run};

use super::page::Cell;

/// What a story is drawn from.
pub(super) struct Ctx<'a> {
    pub(super) runs: &'a [Run],
    pub(super) nav: bool,
}

impl Ctx<'_> {
    /// The series name of `name` in `run`: itself, or with the run (and its
    /// host) when the page overlays several runs.
    pub(super) fn series(&self, run: &Run, name: &str) -> String {
        if self.runs.len() > 1 {
            format!("{name} · {}", run_name(run))
        } else {
            name.to_string()
        }
    }

    /// Who a sentence is about when the page holds several runs.
    pub(super) fn whose(&self, run: &Run) -> String {
        if self.runs.len() > 1 {
            format!("{}: ", run_name(run))
        } else {
            String::new()
        }
    }

    /// A table cell for `m` of `run`, shown as `text`.
    pub(super) fn cell(&self, run: &Run, m: &Measurement, series: &str, x: &str, text: String, best: bool) -> Cell {
        Cell {
            text,
            value: Some(m.value),
            series: series.to_string(),
            x: x.to_string(),
            best,
            history: self.nav.then(|| history_link(run, m)),
        }
    }
}

/// A run as a column or a series calls it: "#12 vm", or for the run an
/// agent made, "#13 10.0.0.2:7700" (the agent as it was reached: two agents
/// may run on machines of one name).
pub fn run_name(run: &Run) -> String {
    match run.data.result["host"].as_str() {
        Some(agent) if agent != "local" => format!("#{} {agent}", run.id),
        _ => format!("#{} {}", run.id, run.host.hostname),
    }
}

/// The page of a measurement's history across the runs of its experiment
/// on its host.
pub fn history_link(run: &Run, m: &Measurement) -> String {
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    format!(
        "/chart?view=history&metric={}&subject={}&kind={}&host={}",
        enc(&m.metric),
        enc(&m.subject),
        enc(&run.data.kind),
        run.host.id
    )
}

/// The series of a subject: the part before the first comma.
pub fn series_of(subject: &str) -> &str {
    subject.split(',').next().unwrap_or(subject).trim()
}

/// Where a subject was measured: the parts after the first comma.
pub fn place_of(subject: &str) -> &str {
    subject.split_once(',').map_or("", |(_, rest)| rest.trim())
}

/// One run's measurements, looked up by metric and subject.
pub(super) struct Values<'a>(pub(super) &'a [Measurement]);

impl<'a> Values<'a> {
    pub(super) fn of(run: &'a Run) -> Values<'a> {
        Values(&run.data.measurements)
    }

    /// Every measurement of `metric`, in the order stored.
    pub(super) fn metric<'m>(&self, metric: &'m str) -> impl Iterator<Item = &'a Measurement> + 'm
    where
        'a: 'm,
    {
        self.0.iter().filter(move |m| m.metric == metric)
    }

    pub(super) fn get(&self, metric: &str, subject: &str) -> Option<&'a Measurement> {
        self.0.iter().find(|m| m.metric == metric && m.subject == subject)
    }

    /// `metric` of `subject` with its spread: the metrics `LOW` and `HIGH`
    /// suffixes name when stored, else the value ± [`NOISE`].
    pub(super) fn spread(&self, metric: &str, subject: &str, low: &str, high: &str) -> Option<Spread> {
        let m = self.get(metric, subject)?;
        let bound =
            |suffix: &str, default: f64| self.get(&format!("{metric}{suffix}"), subject).map_or(default, |b| b.value);
        Some(Spread {
            value: m.value,
            low: bound(low, m.value * (1.0 - NOISE)),
            high: bound(high, m.value * (1.0 + NOISE)),
        })
    }

    /// The distinct values of the `size` of `metric`'s measurements, in
    /// order.
    pub(super) fn sizes(&self, metric: &str) -> Vec<u64> {
        let mut sizes: Vec<u64> = self.metric(metric).filter_map(|m| m.size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// The distinct series of `metric`, in the order first stored.
    pub(super) fn series(&self, metric: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self.metric(metric) {
            let s = series_of(&m.subject);
            if !out.iter().any(|o| o == s) {
                out.push(s.to_string());
            }
        }
        out
    }

    /// The measurement of `metric` for `series` at `size`.
    pub(super) fn at(&self, metric: &str, series: &str, size: u64) -> Option<&'a Measurement> {
        self.0.iter().find(|m| m.metric == metric && series_of(&m.subject) == series && m.size == Some(size))
    }
}

/// When a measurement has no spread of its own, values within this
/// fraction of each other are taken as equal: the run-to-run spread of a
/// loopback measurement on a quiet machine.
pub const NOISE: f64 = 0.05;

/// A value and the range it was measured in (quartiles or the runs' range).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Spread {
    /// A value with no spread measured: ± [`NOISE`].
    pub fn bare(value: f64) -> Spread {
        Spread { value, low: value * (1.0 - NOISE), high: value * (1.0 + NOISE) }
    }
}

/// Who leads among `candidates` (name, spread): the best by `better`, and
/// whether its range stays clear of every other one's (past the noise).
pub fn lead<'a>(candidates: &[(&'a str, Spread)], better: Better) -> Option<Lead<'a>> {
    let ahead = |a: &Spread, b: &Spread| match better {
        Better::Lower => a.value < b.value,
        Better::Higher => a.value > b.value,
    };
    let (best, first) = candidates.iter().enumerate().reduce(|a, b| if ahead(&b.1 .1, &a.1 .1) { b } else { a })?;
    let runner = candidates.iter().enumerate().filter(|(i, _)| *i != best).map(|(_, c)| c).reduce(|a, b| {
        if ahead(&b.1, &a.1) {
            b
        } else {
            a
        }
    });
    let clear = runner.is_none_or(|(_, r)| match better {
        Better::Lower => first.1.high < r.low,
        Better::Higher => first.1.low > r.high,
    });
    Some(Lead { name: first.0, spread: first.1, runner_up: runner.map(|r| (r.0, r.1)), clear })
}

/// The best of some candidates and the next one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lead<'a> {
    pub name: &'a str,
    pub spread: Spread,
    pub runner_up: Option<(&'a str, Spread)>,
    /// Ahead past the noise: its range and the runner-up's do not overlap.
    pub clear: bool,
}

impl Lead<'_> {
    /// "by 12 %" over the runner-up, in the direction that is better.
    pub fn margin(&self) -> Option<f64> {
        let (_, r) = self.runner_up?;
        Some(100.0 * (self.spread.value - r.value).abs() / r.value)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::probe::env::Environment;
    use crate::store::{Host, RunData, Status};

    /// A stored run of `kind` with `measurements` (subject, metric, value,
    /// unit, size), as the dashboard reads it back.
    pub fn run(id: i64, kind: &str, measurements: &[(&str, &str, f64, &str, Option<u64>)]) -> Run {
        let better = |metric: &str, unit: &str| {
            if unit.contains("/s") || metric.contains("gain") || metric.contains("saturation") {
                Better::Higher
            } else {
                Better::Lower
            }
        };
        Run {
            id,
            host: Host { id: 1, hostname: "here".into(), fingerprint: "here".into() },
            data: RunData {
                kind: kind.into(),
                status: Status::Complete,
                environment: Environment::capture(String::new()),
                tern_version: "test".into(),
                command_line: Vec::new(),
                config: serde_json::Value::Null,
                label: String::new(),
                started_at: id as f64,
                finished_at: id as f64 + 1.0,
                result: serde_json::Value::Null,
                measurements: measurements
                    .iter()
                    .map(|&(subject, metric, value, unit, size)| Measurement {
                        subject: subject.into(),
                        metric: metric.into(),
                        value,
                        unit: unit.into(),
                        better: better(metric, unit),
                        size,
                        concurrency: None,
                        cpus: None,
                        load: None,
                    })
                    .collect(),
                histograms: Vec::new(),
            },
        }
    }

    #[test]
    fn a_lead_is_clear_only_when_the_ranges_do_not_overlap() {
        let a = Spread { value: 100.0, low: 95.0, high: 104.0 };
        let b = Spread { value: 110.0, low: 103.0, high: 120.0 };
        let l = lead(&[("b", b), ("a", a)], Better::Lower).unwrap();
        assert_eq!((l.name, l.clear), ("a", false), "104 overlaps 103");
        let b = Spread { value: 110.0, low: 105.0, high: 120.0 };
        let l = lead(&[("a", a), ("b", b)], Better::Lower).unwrap();
        assert_eq!((l.name, l.clear), ("a", true));
        assert!((l.margin().unwrap() - 100.0 / 11.0).abs() < 1e-9);
        let l = lead(&[("a", a), ("b", b)], Better::Higher).unwrap();
        assert_eq!((l.name, l.clear), ("b", true));
        assert!(lead(&[("a", a)], Better::Lower).unwrap().clear, "alone is ahead");
    }

    #[test]
    fn a_subject_is_its_series_then_where() {
        assert_eq!(series_of("event, 1 CPU, CGI 0 %"), "event");
        assert_eq!(place_of("event, 1 CPU, CGI 0 %"), "1 CPU, CGI 0 %");
    }
}
