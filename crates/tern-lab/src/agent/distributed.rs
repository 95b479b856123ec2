//! Distributed load: the same `tern bench` run from several agents at once,
//! started together at a coordinated time, their latency histograms merged
//! exactly — percentiles of the merged histogram, never averages of
//! percentiles.

use std::fmt;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;

use super::client::Agent;
use crate::load::stats::new_histogram;

/// Agents are told to start this long after the master sends the order, so
/// every agent has it before the start.
pub const START_DELAY: Duration = Duration::from_secs(1);

#[derive(Debug, Serialize)]
pub struct AgentRun {
    pub agent: String,
    pub requests: u64,
    pub requests_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// The agent's own report, as `tern bench --json` prints it.
    pub report: Value,
}

#[derive(Debug, Serialize)]
pub struct Total {
    pub requests: u64,
    /// The agents ran at the same time: their rates add.
    pub requests_per_s: f64,
    pub errors: u64,
    pub latency: crate::load::report::Summary,
    /// The merged service-time histogram (HdrHistogram V2 deflate, base64).
    pub histogram: String,
}

#[derive(Debug, Serialize)]
pub struct DistributedReport {
    pub start_unix_ns: u64,
    pub agents: Vec<AgentRun>,
    pub total: Total,
}

/// Decodes a histogram as `tern bench --json` encodes it.
pub fn decode_histogram(b64: &str) -> io::Result<Histogram<u64>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("histogram is not base64: {e}")))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad histogram: {e:?}")))
}

fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut bytes).expect("serialising to memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn invalid(agent: &str, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("agent {agent}: report without {what}"))
}

/// Orders every agent to run `tern bench ARGS` at one start time, waits for
/// all (each call with a deadline of `expected` plus slack), and merges.
/// The first agent to fail fails the run at once, naming it: a partial total
/// would pass for a whole one, and the user learns of a dead agent without
/// waiting for the others' runs to end (they end on their own).
pub fn run(agents: Vec<Agent>, args: &[String], expected: Duration) -> io::Result<DistributedReport> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let start_unix_ns = (now + START_DELAY).as_nanos() as u64;
    let names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, mut agent) in agents.into_iter().enumerate() {
        let (tx, args) = (tx.clone(), args.to_vec());
        std::thread::Builder::new().name(format!("tern-agent-{i}")).spawn(move || {
            let _ = tx.send((i, agent.bench(args, start_unix_ns, expected + START_DELAY)));
        })?;
    }
    drop(tx);
    let mut jsons: Vec<Option<String>> = vec![None; names.len()];
    for (i, json) in rx {
        jsons[i] = Some(json?);
    }
    let mut merged = new_histogram();
    let mut runs = Vec::new();
    let (mut errors, mut rate) = (0, 0.0);
    for (agent, json) in names.into_iter().zip(jsons) {
        let json = json.ok_or_else(|| io::Error::other(format!("agent {agent}: load run: no result")))?;
        let report: Value = serde_json::from_str(&json)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("agent {agent}: bad report: {e}")))?;
        let h =
            decode_histogram(report["histograms"]["service"].as_str().ok_or_else(|| invalid(&agent, "histogram"))?)?;
        merged.add(&h).map_err(|e| io::Error::other(format!("agent {agent}: histogram does not merge: {e:?}")))?;
        let requests_per_s = report["requests_per_s"].as_f64().ok_or_else(|| invalid(&agent, "rate"))?;
        rate += requests_per_s;
        errors += report["errors"].as_object().map(|o| o.values().filter_map(Value::as_u64).sum()).unwrap_or(0);
        runs.push(AgentRun {
            agent,
            requests: report["requests"].as_u64().unwrap_or(0),
            requests_per_s,
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            report,
        });
    }
    Ok(DistributedReport {
        start_unix_ns,
        total: Total {
            requests: runs.iter().map(|r| r.requests).sum(),
            requests_per_s: rate,
            errors,
            latency: crate::load::report::Summary::of(&merged),
            histogram: encode(&merged),
        },
        agents: runs,
    })
}

impl fmt::Display for DistributedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<24} {:>10} {:>12} {:>9} {:>9}", "agent", "requests", "req/s", "p50 µs", "p99 µs")?;
        for r in &self.agents {
            writeln!(
                f,
                "{:<24} {:>10} {:>12.0} {:>9} {:>9}",
                r.agent, r.requests, r.requests_per_s, r.p50_us, r.p99_us
            )?;
        }
        let t = &self.total;
        writeln!(
            f,
            "{:<24} {:>10} {:>12.0} {:>9} {:>9}   (merged histogram: p90 {} µs, p99.9 {} µs, max {} µs; {} errors)",
            "total",
            t.requests,
            t.requests_per_s,
            t.latency.p50_us,
            t.latency.p99_us,
            t.latency.p90_us,
            t.latency.p999_us,
            t.latency.max_us,
            t.errors
        )
    }
}
