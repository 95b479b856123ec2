//! One battery of `tern tune`: candidate settings measured side by side.
//!
//! Each candidate is a `tern serve` child (the base configuration, what
//! earlier batteries chose, the battery's fixed settings and the
//! candidate's own) on a loopback port, loaded by tern-lab's load generator
//! in interleaved rounds: every round measures every candidate once per
//! workload, starting at a different candidate each round, so a slow
//! spell of the machine falls on all of them. A candidate's figure is the
//! median of its rounds; it replaces the default only when it is ahead by
//! more than the noise (the half-spread of the rounds of either, at least
//! [`MIN_NOISE`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_lab::load::{self, plan, Options, Plan, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::probe::figure::Better;
use tern_lab::store::{self, record, Measurement, RunData, Status};

use super::output::{self, Tuned};
use crate::cmd::experiment::Served;
use crate::cmd::lab::Recording;

/// The least difference taken for more than noise: 3%.
pub const MIN_NOISE: f64 = 0.03;

/// One key a server is started with.
#[derive(Clone, Debug)]
pub struct Setting {
    pub section: &'static str,
    pub key: &'static str,
    pub value: toml::Value,
}

pub fn setting(section: &'static str, key: &'static str, value: impl Into<toml::Value>) -> Setting {
    Setting { section, key, value: value.into() }
}

/// A candidate: its name as shown, and the keys that make it.
#[derive(Clone)]
pub struct Candidate {
    pub name: String,
    pub settings: Vec<Setting>,
}

/// What a sample repeats: GETs of `paths` in turn over `connections`.
pub struct Workload {
    pub name: String,
    pub paths: Vec<String>,
    pub headers: Vec<String>,
    pub connections: usize,
    pub size: Option<u64>,
    /// Scored in bytes saved per second against this identity size
    /// (compression) instead of responses per second.
    pub identity: Option<u64>,
}

/// How a battery turns its verdicts into settings.
pub enum Decides {
    /// One choice (one workload): the winner's keys are written.
    One,
    /// A choice per workload: workload `i` writes `keys[i]` with the value
    /// its winner sets for it.
    PerWorkload(Vec<(&'static str, &'static str)>),
    /// A method per workload, each a size class: `static.io_methods`.
    IoMethods,
}

pub struct Battery {
    pub name: &'static str,
    /// What it measures, for the comments.
    pub what: String,
    /// Keys every candidate's server gets (not written to the output).
    pub fixed: Vec<Setting>,
    pub candidates: Vec<Candidate>,
    pub workloads: Vec<Workload>,
    /// The default candidate per workload.
    pub defaults: Vec<usize>,
    pub decides: Decides,
    /// A new server per sample (cold caches), no warm-up.
    pub fresh: bool,
}

/// How every battery measures.
pub struct Lab<'a> {
    /// The base configuration (paths made absolute).
    pub base: toml::Table,
    /// Where the batteries' files live.
    pub root: &'a Path,
    pub rounds: usize,
    /// Each sample's length, and the warm-up before a server's first.
    pub sample: Duration,
    pub warmup: Duration,
    pub quick: bool,
    pub recording: &'a Recording,
    pub interrupt: &'a AtomicBool,
    /// The settings chosen so far: later batteries measure with them.
    pub tuned: Vec<Tuned>,
}

/// A candidate's standing on one workload.
pub struct Verdict {
    pub winner: usize,
    pub medians: Vec<f64>,
    pub noise: f64,
    /// Another candidate's median was ahead of the default's, within noise.
    pub kept: bool,
}

/// The median of the rounds of each candidate; the winner (see the module).
pub fn choose(samples: &[Vec<f64>], default: usize) -> Verdict {
    let medians: Vec<f64> = samples.iter().map(|s| median(s)).collect();
    let spread = |i: usize| {
        let s = &samples[i];
        let (lo, hi) = s.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if medians[i] > 0.0 && !s.is_empty() {
            (hi - lo) / 2.0 / medians[i]
        } else {
            0.0
        }
    };
    let best = (0..medians.len()).max_by(|&a, &b| medians[a].total_cmp(&medians[b])).unwrap_or(default);
    let noise = MIN_NOISE.max(spread(default)).max(spread(best));
    if best == default || medians[best] <= 0.0 {
        return Verdict { winner: default, medians, noise, kept: false };
    }
    if medians[default] > 0.0 && medians[best] <= medians[default] * (1.0 + noise) {
        return Verdict { winner: default, medians, noise, kept: true };
    }
    Verdict { winner: best, medians, noise, kept: false }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What a battery measured and stored.
pub struct Outcome {
    /// `samples[candidate][workload]`: one figure per round.
    pub samples: Vec<Vec<Vec<f64>>>,
    /// `bytes[candidate][workload]`: body bytes per response (the last
    /// sample's).
    pub bytes: Vec<Vec<f64>>,
    /// Why samples failed (an error, or responses that were not 2xx/3xx).
    pub failures: Vec<String>,
    pub run_id: Option<i64>,
    pub interrupted: bool,
}

impl Lab<'_> {
    /// The configuration a candidate's server is started with.
    fn child_config(&self, fixed: &[Setting], candidate: &[Setting]) -> anyhow::Result<String> {
        let mut t = self.base.clone();
        t.remove("tls");
        for t2 in &self.tuned {
            output::set(&mut t, t2.section, t2.key, t2.value.clone());
        }
        let own = [
            setting("log", "access", "off"),
            setting("log", "error", "-"),
            setting("log", "level", "warn"),
            setting("log", "service_records", "off"),
        ];
        for s in own.iter().chain(fixed).chain(candidate) {
            output::set(&mut t, s.section, s.key, Some(s.value.clone()));
        }
        for key in ["user", "group"] {
            output::set(&mut t, "server", key, None);
        }
        Ok(toml::to_string(&t)?)
    }

    /// Measures `b`'s candidates in interleaved rounds and stores the run.
    pub fn run(&self, b: &Battery) -> anyhow::Result<Outcome> {
        let started = store::now();
        let env = Environment::capture(tern_lab::probe::cpu::governor(0));
        let configs = b
            .candidates
            .iter()
            .map(|c| self.child_config(&b.fixed, &c.settings))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Each server reads its configuration (`ROOT.toml`) before it says
        // it listens, so the next one may overwrite the file.
        let start = |i: usize| Served::start(self.root, &configs[i], &[]);
        let mut servers: Vec<Option<Served>> = Vec::new();
        if !b.fresh {
            for i in 0..b.candidates.len() {
                servers.push(Some(start(i)?));
            }
        }
        let n = b.candidates.len();
        let mut samples = vec![vec![Vec::new(); b.workloads.len()]; n];
        let mut bytes = vec![vec![0.0; b.workloads.len()]; n];
        let mut failures = Vec::new();
        let mut interrupted = false;
        'rounds: for round in 0..self.rounds {
            for j in 0..n {
                let c = (j + round) % n;
                let fresh;
                let served = if b.fresh {
                    fresh = start(c)?;
                    &fresh
                } else {
                    servers[c].as_ref().expect("started")
                };
                for (w, wl) in b.workloads.iter().enumerate() {
                    let warmup = if round == 0 && !b.fresh { self.warmup } else { Duration::ZERO };
                    let report = self.measure(&served.addr, wl, warmup)?;
                    if report.run.interrupted || self.interrupt.load(Ordering::Relaxed) {
                        interrupted = true;
                        break 'rounds;
                    }
                    let failed = report.errors.total();
                    let figure = if failed > 0 || report.successes == 0 {
                        failures.push(format!(
                            "{} on {}: {failed} of {} requests failed (status {:?})",
                            b.candidates[c].name, wl.name, report.requests, report.status
                        ));
                        0.0
                    } else {
                        let per = report.body_bytes as f64 / report.successes as f64;
                        bytes[c][w] = per;
                        match wl.identity {
                            Some(size) => report.requests_per_s * (size as f64 - per).max(0.0),
                            None => report.requests_per_s,
                        }
                    };
                    samples[c][w].push(figure);
                }
            }
        }
        drop(servers);
        let outcome = Outcome { samples, bytes, failures, run_id: None, interrupted };
        let run_id = self.store(b, &outcome, &env, started);
        Ok(Outcome { run_id, ..outcome })
    }

    /// One closed-loop sample of `wl` against the server at `addr` (one
    /// load thread).
    fn measure(&self, addr: &str, wl: &Workload, warmup: Duration) -> anyhow::Result<load::Report> {
        let specs = wl
            .paths
            .iter()
            .map(|p| Ok(RequestSpec::new("GET", Url::parse(&format!("http://{addr}{p}"))?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let headers = wl.headers.iter().map(|h| plan::parse_header(h)).collect::<Result<Vec<_>, _>>()?;
        let plan = Plan::build(&specs, &headers, true)?;
        let opts = Options {
            connections: wl.connections,
            threads: 1,
            stop: Stop::Duration(self.sample),
            warmup,
            ..Options::default()
        };
        Ok(load::run(&plan, &opts, self.interrupt)?)
    }

    /// Stores the battery as one run: a measurement per candidate and
    /// workload (the median), every round's figure in its result.
    fn store(&self, b: &Battery, o: &Outcome, env: &Environment, started: f64) -> Option<i64> {
        let mut measurements = Vec::new();
        for (c, cand) in b.candidates.iter().enumerate() {
            for (w, wl) in b.workloads.iter().enumerate() {
                let (metric, unit) = unit_of(wl);
                let subject =
                    if b.workloads.len() == 1 { cand.name.clone() } else { format!("{} @ {}", cand.name, wl.name) };
                measurements.push(Measurement {
                    subject,
                    metric: metric.into(),
                    value: median(&o.samples[c][w]),
                    unit: unit.into(),
                    better: Better::Higher,
                    size: wl.size,
                    concurrency: Some(wl.connections as u64),
                    cpus: Some(env.cores_usable as u64),
                    load: Some(env.load_average[0]),
                });
            }
        }
        let candidates: Vec<serde_json::Value> = b
            .candidates
            .iter()
            .map(|c| {
                let keys: serde_json::Map<String, serde_json::Value> = c
                    .settings
                    .iter()
                    .map(|s| (format!("{}.{}", s.section, s.key), serde_json::json!(s.value.to_string())))
                    .collect();
                serde_json::json!({"name": c.name, "settings": keys})
            })
            .collect();
        let workloads: Vec<serde_json::Value> = b
            .workloads
            .iter()
            .map(|w| {
                serde_json::json!({"name": w.name, "paths": w.paths.len(), "headers": w.headers,
                "connections": w.connections, "size": w.size, "scored_by": unit_of(w).0})
            })
            .collect();
        let ctx = record::Context::here(self.recording.label.clone(), started);
        let run = RunData {
            kind: "tune".into(),
            status: if o.interrupted { Status::Interrupted } else { Status::Complete },
            environment: env.clone(),
            tern_version: env!("CARGO_PKG_VERSION").into(),
            command_line: ctx.command_line,
            config: serde_json::json!({"battery": b.name, "what": b.what, "quick": self.quick,
                "rounds": self.rounds, "sample_s": self.sample.as_secs_f64(),
                "warmup_s": self.warmup.as_secs_f64(), "fresh_servers": b.fresh,
                "candidates": candidates, "workloads": workloads}),
            label: if ctx.label.is_empty() {
                format!("tune {}", b.name)
            } else {
                format!("{} ({})", ctx.label, b.name)
            },
            started_at: ctx.started_at,
            finished_at: ctx.finished_at,
            result: serde_json::json!({"samples": o.samples, "bytes_per_response": o.bytes, "failures": o.failures}),
            measurements,
            histograms: Vec::new(),
        };
        self.recording.save(&run)
    }
}

/// The metric a workload is scored by, and its unit.
pub fn unit_of(w: &Workload) -> (&'static str, &'static str) {
    match w.identity {
        Some(_) => ("saved_bytes_per_s", "B/s"),
        None => ("requests_per_s", "req/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_replaces_the_default_only_past_the_noise() {
        // Ahead by 10% with rounds within ±1%: chosen.
        let v = choose(&[vec![100.0, 101.0, 99.0], vec![110.0, 111.0, 109.0]], 0);
        assert_eq!((v.winner, v.kept), (1, false));
        assert_eq!(v.medians, [100.0, 110.0]);
        assert!((v.noise - MIN_NOISE).abs() < 1e-12);
        // Ahead by 2%, under the 3% floor: the default stays, and says so.
        let v = choose(&[vec![100.0, 100.0, 100.0], vec![102.0, 102.0, 102.0]], 0);
        assert_eq!((v.winner, v.kept), (0, true));
        // Ahead by 10%, but the default's rounds spread ±15%: noise.
        let v = choose(&[vec![85.0, 100.0, 115.0], vec![110.0, 110.0, 110.0]], 0);
        assert_eq!((v.winner, v.kept), (0, true));
        assert!((v.noise - 0.15).abs() < 1e-12);
        // The default ahead: kept, nothing to say.
        let v = choose(&[vec![90.0], vec![120.0], vec![80.0]], 1);
        assert_eq!((v.winner, v.kept), (1, false));
        // Nothing measured: the default.
        let v = choose(&[vec![0.0], vec![0.0]], 1);
        assert_eq!((v.winner, v.kept), (1, false));
        // A default that failed loses to any measured candidate.
        let v = choose(&[vec![0.0, 0.0], vec![5.0, 5.0]], 0);
        assert_eq!((v.winner, v.kept), (1, false));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
