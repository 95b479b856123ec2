//! One battery of `tern tune`: candidate settings measured side by side.
//!
//! Each candidate is a `tern serve` child (the base configuration, what
//! earlier batteries chose, the battery's fixed settings, the workload's
//! and the candidate's own) on a loopback port, loaded by tern-lab's load
//! generator. A battery makes one or more decisions (one setting, or one
//! per size class or coding); each is judged on every workload its setting
//! affects. The workloads are measured one after another, each in
//! interleaved rounds: every round measures every candidate still in the
//! running once, starting at a different one each round, so a slow spell
//! of the machine falls on all of them. A candidate's figure is the median
//! of its rounds; it is ahead of the default when that median beats the
//! default's by more than the noise (the half-spread of the rounds of
//! either, at least [`MIN_NOISE`]).
//!
//! A candidate replaces the default only when it is ahead on **every**
//! workload of its decision, so a setting that wins on small files but
//! loses on large ones or on CGI is never chosen: the choice is right by
//! construction, as far as the noise allows. A candidate that falls behind
//! or ties on one workload is out of that decision and not measured on
//! its later workloads (which keeps the full battery to minutes); a
//! workload where only the default is left is not measured at all.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_lab::load::{self, plan, Options, Plan, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::probe::figure::Better;
use tern_lab::store::{self, record, Measurement, Recording, RunData, Status};
pub use tern_server::calibrate::median;
use tern_server::Config;

use super::output::{self, Tuned};
use crate::served::Served;

/// The least difference taken for more than noise: 3%.
pub const MIN_NOISE: f64 = 0.03;

/// One key a server is started with.
#[derive(Clone, Debug, PartialEq)]
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
    /// Keys the servers measuring this workload get besides the battery's
    /// (e.g. no compression cache); servers are started anew when it
    /// differs from the previous workload's.
    pub setup: Vec<Setting>,
    /// The decision it is judged for (an index into `Battery::decisions`).
    pub decision: usize,
}

/// One choice a battery makes.
pub struct Decision {
    /// How the comments name it: a size class, a coding; empty when the
    /// battery makes only one.
    pub name: String,
    /// The default candidate: the base configuration's value.
    pub default: usize,
}

/// How a battery turns its decisions into settings.
pub enum Decides {
    /// One decision: the winner's keys are written.
    One,
    /// Decision `i` writes `keys[i]` with the value its winner sets.
    PerDecision(Vec<(&'static str, &'static str)>),
    /// A method per decision, each a size class: `static.io_methods`;
    /// `kept[i]` is what a class whose default stays is written as (its
    /// base value: "auto" when left to the start-up calibration), and
    /// `configured` the base's `static.io`, which stays when every class
    /// keeps its default.
    IoMethods { configured: toml::Value, kept: Vec<String> },
}

pub struct Battery {
    pub name: &'static str,
    /// What it measures, for the comments.
    pub what: String,
    /// Keys every candidate's server gets (not written to the output).
    pub fixed: Vec<Setting>,
    pub candidates: Vec<Candidate>,
    /// Measured in this order; each judged for its decision.
    pub workloads: Vec<Workload>,
    pub decisions: Vec<Decision>,
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
    /// Each sample's length, and the warm-up before a server's first
    /// sample of a workload.
    pub sample: Duration,
    pub warmup: Duration,
    pub quick: bool,
    pub recording: &'a Recording,
    pub interrupt: &'a AtomicBool,
    /// The settings chosen so far: later batteries measure with them.
    pub tuned: Vec<Tuned>,
}

/// The noise between two candidates' rounds on one workload: the larger
/// half-spread relative to its median, at least [`MIN_NOISE`].
pub fn noise(a: &[f64], b: &[f64]) -> f64 {
    let spread = |s: &[f64]| {
        let m = median(s);
        let (lo, hi) = s.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if m > 0.0 && !s.is_empty() {
            (hi - lo) / 2.0 / m
        } else {
            0.0
        }
    };
    MIN_NOISE.max(spread(a)).max(spread(b))
}

/// Whether rounds `c` are ahead of the default's rounds `d` by more than
/// the noise (a default that failed, median 0, is behind any measured
/// candidate).
pub fn ahead(c: &[f64], d: &[f64]) -> bool {
    let (mc, md) = (median(c), median(d));
    mc > 0.0 && mc > md * (1.0 + noise(c, d))
}

/// The candidate a decision chooses from `samples[candidate][workload]`
/// over its workloads `ws`: among those ahead of the default on every one
/// of them, the one whose smallest ratio to the default is largest; else
/// the default. No workload, or one not measured: the default.
pub fn choose(samples: &[Vec<Vec<f64>>], ws: &[usize], default: usize) -> usize {
    let worst = |c: usize| {
        ws.iter()
            .map(|&w| {
                let (sc, sd) = (&samples[c][w], &samples[default][w]);
                if sc.is_empty() || !ahead(sc, sd) {
                    return 0.0;
                }
                let md = median(sd);
                if md > 0.0 {
                    median(sc) / md
                } else {
                    f64::MAX
                }
            })
            .fold(f64::MAX, f64::min)
    };
    if ws.is_empty() {
        return default;
    }
    (0..samples.len())
        .filter(|&c| c != default)
        .map(|c| (c, worst(c)))
        .filter(|&(_, r)| r > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(default, |(c, _)| c)
}

/// What a battery measured and stored.
pub struct Outcome {
    /// `samples[candidate][workload]`: one figure per round; empty when
    /// the candidate was not measured on that workload.
    pub samples: Vec<Vec<Vec<f64>>>,
    /// `bytes[candidate][workload]`: body bytes per response (the last
    /// sample's).
    pub bytes: Vec<Vec<f64>>,
    /// How each candidate's first server said it sends static files (its
    /// start-up calibration's choices), when one was started.
    pub io: Vec<Option<String>>,
    /// Why samples failed (an error, or responses that were not 2xx/3xx).
    pub failures: Vec<String>,
    pub run_id: Option<i64>,
    pub interrupted: bool,
}

impl Lab<'_> {
    /// The configuration the next battery starts from: the base with what
    /// earlier batteries chose (`path` names it in errors).
    pub fn config(&self, path: &Path) -> anyhow::Result<Config> {
        let mut t = self.base.clone();
        for tuned in &self.tuned {
            tuned.apply(&mut t);
        }
        Ok(Config::parse(&toml::to_string(&t)?, path)?)
    }

    /// The configuration a candidate's server is started with.
    fn child_config(&self, settings: &[&[Setting]]) -> anyhow::Result<String> {
        let mut t = self.base.clone();
        t.remove("tls");
        for t2 in &self.tuned {
            t2.apply(&mut t);
        }
        let own = [
            setting("log", "access", "off"),
            setting("log", "error", "-"),
            setting("log", "level", "warn"),
            setting("log", "service_records", "off"),
        ];
        for s in own.iter().chain(settings.iter().flat_map(|s| s.iter())) {
            output::set(&mut t, s.section, s.key, Some(s.value.clone()));
        }
        for key in ["user", "group"] {
            output::set(&mut t, "server", key, None);
        }
        Ok(toml::to_string(&t)?)
    }

    /// Measures `b`'s workloads in turn, its candidates in interleaved
    /// rounds on each (see the module), and stores the run.
    pub fn run(&self, b: &Battery) -> anyhow::Result<Outcome> {
        let started = store::now();
        let env = Environment::capture(tern_lab::probe::cpu::governor(0));
        let n = b.candidates.len();
        let mut samples = vec![vec![Vec::new(); b.workloads.len()]; n];
        let mut bytes = vec![vec![0.0; b.workloads.len()]; n];
        let mut io: Vec<Option<String>> = vec![None; n];
        let mut failures = Vec::new();
        let mut interrupted = false;
        // in_running[decision][candidate]: ahead on every workload of the
        // decision measured so far.
        let mut in_running = vec![vec![true; n]; b.decisions.len()];
        let mut servers: Vec<Option<Served>> = (0..n).map(|_| None).collect();
        let mut setup: Option<&[Setting]> = None;
        let start = |c: usize, wl: &Workload, io: &mut Vec<Option<String>>| -> anyhow::Result<Served> {
            // Each server reads its configuration (`ROOT.toml`) before it
            // says it listens, so the next one may overwrite the file.
            let config = self.child_config(&[&b.fixed, &wl.setup, &b.candidates[c].settings])?;
            let served = Served::start(self.root, &config, &[])?;
            io[c].get_or_insert_with(|| served.io.clone());
            Ok(served)
        };
        'workloads: for (w, wl) in b.workloads.iter().enumerate() {
            let d = wl.decision;
            let default = b.decisions[d].default;
            let running: Vec<usize> = (0..n).filter(|&c| in_running[d][c]).collect();
            if running.len() < 2 {
                continue;
            }
            if setup != Some(&wl.setup[..]) {
                servers.iter_mut().for_each(|s| *s = None);
                setup = Some(&wl.setup[..]);
            }
            for round in 0..self.rounds {
                for j in 0..running.len() {
                    let c = running[(j + round) % running.len()];
                    let fresh;
                    let served = if b.fresh {
                        fresh = start(c, wl, &mut io)?;
                        &fresh
                    } else {
                        if servers[c].is_none() {
                            servers[c] = Some(start(c, wl, &mut io)?);
                        }
                        servers[c].as_ref().expect("started")
                    };
                    let warmup = if round == 0 && !b.fresh { self.warmup } else { Duration::ZERO };
                    let report = self.measure(&served.addr, wl, warmup)?;
                    if report.run.interrupted || self.interrupt.load(Ordering::Relaxed) {
                        interrupted = true;
                        break 'workloads;
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
            for &c in running.iter().filter(|&&c| c != default) {
                in_running[d][c] = ahead(&samples[c][w], &samples[default][w]);
            }
        }
        drop(servers);
        let outcome = Outcome { samples, bytes, io, failures, run_id: None, interrupted };
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
    /// workload it was measured on (the median), every round's figure in
    /// its result.
    fn store(&self, b: &Battery, o: &Outcome, env: &Environment, started: f64) -> Option<i64> {
        let mut measurements = Vec::new();
        for (c, cand) in b.candidates.iter().enumerate() {
            for (w, wl) in b.workloads.iter().enumerate().filter(|&(w, _)| !o.samples[c][w].is_empty()) {
                let (metric, unit) = unit_of(wl);
                measurements.push(Measurement {
                    subject: format!("{} @ {}", cand.name, wl.name),
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
        let keys = |settings: &[Setting]| -> serde_json::Map<String, serde_json::Value> {
            settings
                .iter()
                .map(|s| (format!("{}.{}", s.section, s.key), serde_json::json!(s.value.to_string())))
                .collect()
        };
        let candidates: Vec<serde_json::Value> = b
            .candidates
            .iter()
            .zip(&o.io)
            .map(|(c, io)| serde_json::json!({"name": c.name, "settings": keys(&c.settings), "static_io": io}))
            .collect();
        let workloads: Vec<serde_json::Value> = b
            .workloads
            .iter()
            .map(|w| {
                serde_json::json!({"name": w.name, "paths": w.paths.len(), "headers": w.headers,
                "connections": w.connections, "size": w.size, "scored_by": unit_of(w).0,
                "setup": keys(&w.setup), "decision": b.decisions[w.decision].name})
            })
            .collect();
        let decisions: Vec<serde_json::Value> = b
            .decisions
            .iter()
            .enumerate()
            .map(|(d, dec)| {
                let ws: Vec<usize> = (0..b.workloads.len()).filter(|&w| b.workloads[w].decision == d).collect();
                serde_json::json!({"name": dec.name, "default": b.candidates[dec.default].name,
                "chosen": b.candidates[choose(&o.samples, &ws, dec.default)].name})
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
                "candidates": candidates, "workloads": workloads, "decisions": decisions}),
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
    fn ahead_only_past_the_noise() {
        // Ahead by 10% with rounds within ±1%.
        assert!(ahead(&[110.0, 111.0, 109.0], &[100.0, 101.0, 99.0]));
        // Ahead by 2%, under the 3% floor.
        assert!(!ahead(&[102.0; 3], &[100.0; 3]));
        // Ahead by 10%, but the default's rounds spread ±15%.
        assert!(!ahead(&[110.0; 3], &[85.0, 100.0, 115.0]));
        assert!((noise(&[110.0; 3], &[85.0, 100.0, 115.0]) - 0.15).abs() < 1e-12);
        assert!((noise(&[100.0; 3], &[100.0; 3]) - MIN_NOISE).abs() < 1e-12);
        // Behind, or nothing measured.
        assert!(!ahead(&[90.0; 3], &[100.0; 3]));
        assert!(!ahead(&[0.0; 3], &[0.0; 3]));
        // A default that failed is behind any measured candidate.
        assert!(ahead(&[5.0, 5.0], &[0.0, 0.0]));
    }

    #[test]
    fn a_candidate_replaces_the_default_only_when_ahead_on_every_workload() {
        let s = |v: f64| vec![v; 3];
        // samples[candidate][workload]; candidate 0 is the default.
        let samples = vec![
            vec![s(100.0), s(100.0), s(100.0)],
            // Far ahead on two workloads, behind on the third: never chosen.
            vec![s(200.0), s(200.0), s(90.0)],
            // Ahead on all three, by at least 1.10x.
            vec![s(110.0), s(120.0), s(115.0)],
            // Ahead on all three, by at least 1.05x.
            vec![s(150.0), s(105.0), s(150.0)],
        ];
        assert_eq!(choose(&samples, &[0, 1, 2], 0), 2, "the largest smallest ratio");
        assert_eq!(choose(&samples, &[0, 1], 0), 1, "judged on its decision's workloads only");
        assert_eq!(choose(&samples, &[2], 0), 3);
        assert_eq!(choose(&samples, &[], 0), 0, "no workload: the default");
        // Within the noise on one workload: the default stays.
        let samples = vec![vec![s(100.0), s(100.0)], vec![s(150.0), s(102.0)]];
        assert_eq!(choose(&samples, &[0, 1], 0), 0);
        // Not measured on a workload (out of the running): not chosen.
        let samples = vec![vec![s(100.0), s(100.0)], vec![s(150.0), Vec::new()]];
        assert_eq!(choose(&samples, &[0, 1], 0), 0);
        assert_eq!(choose(&samples, &[0], 0), 1);
        // The default need not be the first candidate.
        let samples = vec![vec![s(130.0)], vec![s(100.0)], vec![s(90.0)]];
        assert_eq!(choose(&samples, &[0], 1), 0);
        assert_eq!(choose(&samples, &[0], 2), 0);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
