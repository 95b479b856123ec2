//! What a run is: the data stored about it (its measurements, histograms,
//! host and status), how it is found again, and its times.

use serde::{Deserialize, Serialize};

use crate::probe::env::Environment;
use crate::probe::figure::Better;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Complete,
    /// Stopped early (Ctrl-C): what it measured is stored, marked so.
    Interrupted,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::Interrupted => "interrupted",
            Status::Failed => "failed",
        }
    }

    pub(super) fn parse(s: &str) -> Status {
        match s {
            "interrupted" => Status::Interrupted,
            "failed" => Status::Failed,
            _ => Status::Complete,
        }
    }
}

/// One number a run measured, with what the charts need to place it: the
/// subject (a URL, a probe figure, a workload), and the x-axis candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub subject: String,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    pub better: Better,
    /// Bytes: a file or response size, a transfer unit.
    pub size: Option<u64>,
    /// Connections, clients or threads of load.
    pub concurrency: Option<u64>,
    /// CPUs the measured thing could use.
    pub cpus: Option<u64>,
    /// The 1-minute load average when the run started.
    pub load: Option<f64>,
}

/// A latency histogram as `tern bench --json` writes it (HdrHistogram V2
/// deflate, base64), so runs can be merged and drawn exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub subject: String,
    /// `service` or `response` (from the intended send time).
    pub name: String,
    pub encoding: String,
    pub unit: String,
    pub snapshot: String,
}

/// Everything stored about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunData {
    /// `bench`, `probe`, `e1` … `e5`, `tune`.
    pub kind: String,
    pub status: Status,
    pub environment: Environment,
    pub tern_version: String,
    pub command_line: Vec<String>,
    pub config: serde_json::Value,
    pub label: String,
    /// Unix time, seconds.
    pub started_at: f64,
    pub finished_at: f64,
    pub result: serde_json::Value,
    pub measurements: Vec<Measurement>,
    pub histograms: Vec<Snapshot>,
}

/// A run read back, with its id and host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub id: i64,
    pub host: Host,
    #[serde(flatten)]
    pub data: RunData,
}

/// A machine runs were made on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub id: i64,
    pub hostname: String,
    pub fingerprint: String,
}

/// A line of `tern lab list`: enough to find a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub id: i64,
    pub kind: String,
    pub status: Status,
    pub host: Host,
    pub label: String,
    pub started_at: f64,
    pub finished_at: f64,
    pub measurements: u64,
}

/// Which runs to list; `None` matches all.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub kind: Option<String>,
    pub host: Option<i64>,
    pub status: Option<Status>,
    /// A substring of the label.
    pub text: Option<String>,
}

/// The identity of a host: runs with the same one are comparable.
pub fn fingerprint(e: &Environment) -> String {
    format!("{} | {} | {} | {} CPUs", e.hostname, e.kernel, e.cpu_model, e.cores_online)
}

/// A measurement with the run it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub run: i64,
    pub kind: String,
    pub label: String,
    pub started_at: f64,
    pub status: Status,
    pub host: Host,
    pub m: Measurement,
}

pub(super) fn better_name(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
    }
}

/// Unix seconds → "2026-11-24 22:40:05 UTC" (proleptic Gregorian, no
/// time-zone database needed).
pub fn utc(unix: f64) -> String {
    let secs = unix.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Now, as Unix seconds.
pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_566_005.0), "2026-11-25 00:20:05 UTC");
    }
}
