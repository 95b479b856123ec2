//! The result of a run: a human summary and a JSON document.
//!
//! The JSON carries, besides the percentiles, each latency histogram in
//! HdrHistogram's V2 (deflate) serialisation, base64-encoded: results from
//! several generator machines can then be merged *exactly* (percentiles of
//! merged histograms, not averages of percentiles).

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::Serialize;

use super::stats::{ErrorClass, Stats, LATE_AFTER};

/// A thread above this share of one CPU is the bottleneck itself.
pub const SATURATED: f64 = 0.90;

/// A thread that waited for a CPU this share of the time or more did not
/// send and receive when it meant to.
pub const CONTENDED: f64 = 0.10;

/// How the histograms in the JSON are encoded.
pub const HISTOGRAM_ENCODING: &str = "hdrhistogram-v2-deflate-base64";

/// How the run was made: what was asked for, and how long it lasted.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The URL (with a mix: the first entry's).
    pub target: String,
    /// The mix file, when the requests came from one.
    pub mix_file: Option<String>,
    /// Requests per second asked for (open loop).
    pub rate: Option<f64>,
    pub threads: usize,
    pub connections: usize,
    pub keepalive: bool,
    /// "http/1.1", "h2" (HTTP/2 over TLS) or "h2c" (over TCP).
    pub protocol: &'static str,
    /// Requests in flight per connection: pipelined (HTTP/1.1) or
    /// concurrent streams (HTTP/2).
    pub pipeline: usize,
    /// Measurement length asked for (duration mode).
    pub duration_s: Option<f64>,
    /// Requests asked for (count mode).
    pub requested: Option<u64>,
    pub warmup_s: f64,
    pub timeout_s: f64,
    /// Stopped by Ctrl-C: the numbers cover what was measured until then.
    pub interrupted: bool,
    /// Wall time of the measurement.
    pub elapsed_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// "closed" (as fast as the connections carry) or "open" (fixed rate).
    pub mode: &'static str,
    #[serde(flatten)]
    pub run: Run,
    /// Complete responses, any status.
    pub requests: u64,
    /// Responses with a 2xx or 3xx status.
    pub successes: u64,
    pub requests_per_s: f64,
    /// Response bytes on the wire (heads and framing included).
    pub wire_bytes: u64,
    /// Response payload bytes.
    pub body_bytes: u64,
    pub transfer_per_s: f64,
    pub latency: Latency,
    pub errors: Errors,
    /// Responses by status code.
    pub status: BTreeMap<u16, u64>,
    /// Open loop: requests that left more than 1 ms after their intended time.
    pub late: Option<u64>,
    /// TCP connections opened during the measurement.
    pub connects: u64,
    /// Responses per mix entry.
    pub mix: Vec<MixCount>,
    pub generator: Generator,
    pub histograms: Histograms,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Actual send → complete response.
    pub service: Summary,
    /// Intended send → complete response (open loop): what a user arriving
    /// at the intended time would have waited.
    pub response: Option<Summary>,
}

/// Percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub count: u64,
    pub min_us: u64,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        Summary {
            count: h.len(),
            min_us: h.min(),
            mean_us: h.mean(),
            stdev_us: h.stdev(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    /// HTTP/2: streams the server reset (RST_STREAM).
    pub reset: u64,
    /// HTTP/2: requests lost to a GOAWAY with an error code.
    pub goaway: u64,
    /// Responses with a status other than 2xx/3xx.
    pub status: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.reset + self.goaway + self.status
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MixCount {
    pub request: String,
    pub weight: u32,
    pub responses: u64,
}

/// The generator's own load, to tell whether it measured the server or itself.
#[derive(Debug, Clone, Serialize)]
pub struct Generator {
    pub threads: Vec<ThreadLoad>,
    /// CPU time of all worker threads while measuring.
    pub cpu_s: f64,
    pub cpu_us_per_request: f64,
    /// Some thread was busy more than 90% of the time.
    pub saturated: bool,
    /// Some thread waited for a CPU more than 10% of the time: the machine
    /// is shared, and the generator's timing suffers from it.
    pub contended: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadLoad {
    pub cpu_s: f64,
    pub wall_s: f64,
    /// cpu / wall: 1.0 is one core fully busy.
    pub utilization: f64,
    /// Time runnable but without a CPU (another process had it).
    pub waited_s: Option<f64>,
    /// waited / wall.
    pub waiting: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Histograms {
    pub encoding: &'static str,
    pub unit: &'static str,
    pub service: String,
    pub response: Option<String>,
}

/// What the coordinator knows about the run, besides the merged stats.
pub struct RunFacts {
    pub run: Run,
    /// (label, weight) of each planned request.
    pub mix: Vec<(String, u32)>,
    pub thread_times: Vec<ThreadTimes>,
}

/// What one worker thread had from the scheduler while measuring.
pub struct ThreadTimes {
    pub cpu_s: f64,
    pub wall_s: f64,
    pub waited_s: Option<f64>,
}

fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut bytes).expect("serialising to memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Report {
    pub fn new(facts: RunFacts, stats: &Stats) -> Report {
        let threads: Vec<ThreadLoad> = facts
            .thread_times
            .iter()
            .map(|t| {
                let share = |s: f64| if t.wall_s > 0.0 { s / t.wall_s } else { 0.0 };
                ThreadLoad {
                    cpu_s: t.cpu_s,
                    wall_s: t.wall_s,
                    utilization: share(t.cpu_s),
                    waited_s: t.waited_s,
                    waiting: t.waited_s.map(share),
                }
            })
            .collect();
        let cpu_s: f64 = threads.iter().map(|t| t.cpu_s).sum();
        let resolved = stats.responses + stats.errors.iter().sum::<u64>();
        let per_s = |n: u64| if facts.run.elapsed_s > 0.0 { n as f64 / facts.run.elapsed_s } else { 0.0 };
        Report {
            mode: if facts.run.rate.is_some() { "open" } else { "closed" },
            requests: stats.responses,
            successes: stats.successes(),
            requests_per_s: per_s(stats.responses),
            wire_bytes: stats.wire_bytes,
            body_bytes: stats.body_bytes,
            transfer_per_s: per_s(stats.wire_bytes),
            latency: Latency {
                service: Summary::of(&stats.service),
                response: stats.response.as_ref().map(Summary::of),
            },
            errors: Errors {
                connect: stats.errors_of(ErrorClass::Connect),
                read: stats.errors_of(ErrorClass::Read),
                write: stats.errors_of(ErrorClass::Write),
                timeout: stats.errors_of(ErrorClass::Timeout),
                reset: stats.errors_of(ErrorClass::Reset),
                goaway: stats.errors_of(ErrorClass::GoAway),
                status: stats.status_errors(),
            },
            status: (0..stats.status.len())
                .filter(|&code| stats.status[code] > 0)
                .map(|code| (code as u16, stats.status[code]))
                .collect(),
            late: facts.run.rate.map(|_| stats.late),
            connects: stats.connects,
            mix: facts
                .mix
                .into_iter()
                .zip(&stats.per_request)
                .map(|((request, weight), &responses)| MixCount { request, weight, responses })
                .collect(),
            generator: Generator {
                saturated: threads.iter().any(|t| t.utilization >= SATURATED),
                contended: threads.iter().any(|t| t.waiting.is_some_and(|w| w >= CONTENDED)),
                threads,
                cpu_s,
                cpu_us_per_request: if resolved > 0 { cpu_s * 1e6 / resolved as f64 } else { 0.0 },
            },
            histograms: Histograms {
                encoding: HISTOGRAM_ENCODING,
                unit: "us",
                service: encode(&stats.service),
                response: stats.response.as_ref().map(encode),
            },
            run: facts.run,
        }
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises")
    }
}

/// 850us, 12.34ms, 1.234s: a latency in the unit that keeps it readable.
fn latency(us: u64) -> String {
    match us {
        0..=9_999 => format!("{us}us"),
        10_000..=9_999_999 => format!("{:.2}ms", us as f64 / 1e3),
        _ => format!("{:.3}s", us as f64 / 1e6),
    }
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// 1234567 → "1,234,567".
fn count(n: u64) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> =
        digits.as_bytes().rchunks(3).rev().map(|g| std::str::from_utf8(g).expect("ASCII digits")).collect();
    groups.join(",")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let loop_kind = match self.run.rate {
            Some(rate) => format!("open loop at {rate} req/s"),
            None => "closed loop".to_string(),
        };
        let what = match &self.run.mix_file {
            // The server (scheme and authority) and the file, not the
            // first entry's path, which is one request of many.
            Some(mix) => {
                let server = self.run.target.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
                format!("--mix {mix} ({} entries) {server}", self.mix.len())
            }
            None => self.run.target.clone(),
        };
        writeln!(
            f,
            "tern bench {what}: {loop_kind}, {} thread{}, {} connection{}, {}{}",
            self.run.threads,
            if self.run.threads == 1 { "" } else { "s" },
            self.run.connections,
            if self.run.connections == 1 { "" } else { "s" },
            if self.run.keepalive { "keep-alive" } else { "no keep-alive" },
            match (self.run.protocol, self.run.pipeline) {
                ("http/1.1", 1) => String::new(),
                ("http/1.1", depth) => format!(", pipeline {depth}"),
                (h2, streams) =>
                    format!(", {h2}, {streams} stream{} per connection", if streams == 1 { "" } else { "s" }),
            },
        )?;
        let warmup =
            if self.run.warmup_s > 0.0 { format!(" after {:.2}s warm-up", self.run.warmup_s) } else { String::new() };
        writeln!(
            f,
            "  measured {:.2}s{warmup}{}",
            self.run.elapsed_s,
            if self.run.interrupted { " (interrupted: partial results)" } else { "" }
        )?;
        writeln!(f)?;
        writeln!(f, "  requests  {:>14}   {:>12.1} req/s", count(self.requests), self.requests_per_s)?;
        writeln!(
            f,
            "  transfer  {:>14}   {:>12}/s   (bodies {})",
            bytes(self.wire_bytes as f64),
            bytes(self.transfer_per_s),
            bytes(self.body_bytes as f64)
        )?;
        writeln!(f)?;
        writeln!(f, "  latency        p50       p90       p99     p99.9       max      mean     stdev")?;
        let mut line = |name: &str, s: &Summary| {
            writeln!(
                f,
                "  {name:<9}{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                latency(s.p50_us),
                latency(s.p90_us),
                latency(s.p99_us),
                latency(s.p999_us),
                latency(s.max_us),
                latency(s.mean_us.round() as u64),
                latency(s.stdev_us.round() as u64),
            )
        };
        line("service", &self.latency.service)?;
        if let Some(response) = &self.latency.response {
            line("response", response)?;
            writeln!(f, "  (service: from actual send; response: from the intended send time)")?;
        }
        writeln!(f)?;
        if let Some(late) = self.late {
            writeln!(
                f,
                "  late      {} request{} left more than {} ms after their intended time",
                count(late),
                if late == 1 { "" } else { "s" },
                LATE_AFTER.as_millis()
            )?;
        }
        let e = &self.errors;
        if e.total() == 0 {
            writeln!(f, "  errors    none")?;
        } else {
            // The HTTP/2 kinds only where a run has them.
            let h2 = if e.reset + e.goaway > 0 {
                format!(", reset {}, goaway {}", count(e.reset), count(e.goaway))
            } else {
                String::new()
            };
            writeln!(
                f,
                "  errors    {} (connect {}, read {}, write {}, timeout {}{h2}, status {})",
                count(e.total()),
                count(e.connect),
                count(e.read),
                count(e.write),
                count(e.timeout),
                count(e.status)
            )?;
        }
        let non_2xx: Vec<String> = self
            .status
            .iter()
            .filter(|(code, _)| !(200..300).contains(*code))
            .map(|(code, n)| format!("{code} × {}", count(*n)))
            .collect();
        if !non_2xx.is_empty() {
            writeln!(f, "  non-2xx   {}", non_2xx.join(", "))?;
        }
        if self.successes == 0 {
            writeln!(
                f,
                "  FAILED    no successful (2xx or 3xx) response: the figures above measure failures, not the server"
            )?;
        }
        if self.mix.len() > 1 {
            writeln!(f, "  mix")?;
            let total: u64 = self.mix.iter().map(|m| m.responses).sum();
            let weights: u64 = self.mix.iter().map(|m| u64::from(m.weight)).sum();
            for m in &self.mix {
                writeln!(
                    f,
                    "    {:>6.2}% (weight {:>5.1}%)  {:>12}  {}",
                    if total > 0 { m.responses as f64 * 100.0 / total as f64 } else { 0.0 },
                    f64::from(m.weight) * 100.0 / weights as f64,
                    count(m.responses),
                    m.request
                )?;
            }
        }
        let g = &self.generator;
        let loads: Vec<String> = g.threads.iter().map(|t| format!("{:.0}%", t.utilization * 100.0)).collect();
        let waits: Vec<String> =
            g.threads.iter().filter_map(|t| t.waiting).map(|w| format!("{:.0}%", w * 100.0)).collect();
        let waited = if waits.is_empty() { String::new() } else { format!(" (waited for a CPU {})", waits.join(" ")) };
        writeln!(
            f,
            "  generator CPU {} per thread{waited}, {:.2} us per request; {} connects while measuring",
            loads.join(" "),
            g.cpu_us_per_request,
            count(self.connects)
        )?;
        if g.contended {
            writeln!(
                f,
                "  WARNING: generator threads waited for a CPU {} of the time: the machine is busy with \
                 other work, and both sending times and latencies are disturbed by it",
                waits.join(" ")
            )?;
        }
        if g.saturated {
            writeln!(
                f,
                "  WARNING: a generator thread was busy {:.0}% of the time or more: these numbers may \
                 describe tern bench, not the server (add threads with -t, or use another machine)",
                SATURATED * 100.0
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(latency(850), "850us");
        assert_eq!(latency(12_345), "12.35ms");
        assert_eq!(latency(1_234_567_000), "1234.567s");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.50 KiB");
        assert_eq!(count(0), "0");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(123), "123");
    }
}
