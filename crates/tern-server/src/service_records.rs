//! Per-request service records (`log.service_records`): one CSV row per
//! answered request with when its connection was accepted, when its service
//! started and ended, its status and body bytes, and — under the staged
//! engine — the time it spent queued for and working in each stage. The
//! data for an analysis of start/end time spreads across the models.
//!
//! Rows are formatted into a per-worker buffer and written with one
//! `write(2)` when it fills, once a second and at exit (as the access log);
//! the file is opened `O_APPEND`, so whole buffers never interleave within a
//! row. Times are microseconds on the system's monotonic clock
//! (`CLOCK_MONOTONIC`), so rows of every worker — and of the server that
//! replaces this one on reload — share one timeline.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The staged engine's stages, in a request's order (the columns' order).
pub const STAGES: [&str; 4] = ["read", "handle", "send", "log"];

/// One of the staged engine's stages (in [`STAGES`] order): where a
/// connection driven by it stops and is handed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Reading and parsing a request (and its body); lingering.
    Read,
    /// Answering it: the site resolves and opens, or starts a backend.
    Handle,
    /// Sending the answer, relaying a backend's output.
    Send,
    /// Its service record; on to the next request or the close.
    Log,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Read, Stage::Handle, Stage::Send, Stage::Log];

    pub fn name(self) -> &'static str {
        STAGES[self as usize]
    }
}

/// The first line of a records file.
const HEADER: &str = "accept_us,arrive_us,start_us,end_us,status,bytes,\
read_queued_us,read_working_us,handle_queued_us,handle_working_us,\
send_queued_us,send_working_us,log_queued_us,log_working_us\n";

/// Time a request spent waiting in a stage's queue and being worked on by
/// the stage's threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTime {
    pub queued: Duration,
    pub working: Duration,
}

/// Per stage (see [`STAGES`]); `None` under an engine without stages.
pub type Stages = Option<[StageTime; STAGES.len()]>;

/// The stage times of a connection's requests, kept by the connection for
/// its engine: the staged engine says when the connection enters a stage
/// (after how long in its queue) and leaves it; other engines never do, and
/// their rows have no stage times.
#[derive(Default)]
pub struct StageAccount {
    times: [StageTime; STAGES.len()],
    /// The stage the connection is in, and since when its time counts
    /// there.
    current: Option<(Stage, Instant)>,
    used: bool,
}

impl StageAccount {
    pub fn enter(&mut self, stage: Stage, queued: Duration, now: Instant) {
        self.times[stage as usize].queued += queued;
        self.current = Some((stage, now));
        self.used = true;
    }

    pub fn leave(&mut self, now: Instant) {
        if let Some((stage, since)) = self.current.take() {
            self.times[stage as usize].working += now.saturating_duration_since(since);
        }
    }

    /// The times since the last take, for a request whose service ended at
    /// `now`; the current stage's work after `now` counts for the next one.
    pub fn take(&mut self, now: Instant) -> Stages {
        if !self.used {
            return None;
        }
        let current = self.current.map(|(stage, _)| stage);
        self.leave(now);
        if let Some(stage) = current {
            self.current = Some((stage, now));
        }
        Some(std::mem::take(&mut self.times))
    }
}

/// Where rows go: nowhere (`"off"`, the default) or a shared append-only
/// file, with the clock reading that maps an `Instant` to the monotonic
/// clock.
#[derive(Clone)]
pub struct RecordTarget(Option<(Arc<File>, Instant, u64)>);

impl RecordTarget {
    /// `"off"` or a path; a new (empty) file gets the header row.
    pub fn open(spec: &str) -> io::Result<RecordTarget> {
        if spec == "off" {
            return Ok(RecordTarget(None));
        }
        let mut file = OpenOptions::new().create(true).append(true).open(spec)?;
        if file.metadata()?.len() == 0 {
            file.write_all(HEADER.as_bytes())?;
        }
        // Read together, so `base + (t - then)` is `t` on the monotonic
        // clock (`Instant` is that clock on Linux, with no public reading).
        let then = Instant::now();
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let base = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
        Ok(RecordTarget(Some((Arc::new(file), then, base))))
    }

    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }
}

/// One request's row.
pub struct Record {
    pub accepted: Instant,
    /// The readiness that brought the request's first bytes was seen (by
    /// the thread that read them, or by the front that queued the
    /// connection): `start - arrived` is the time it waited to be served.
    pub arrived: Instant,
    pub start: Instant,
    pub end: Instant,
    pub status: u16,
    pub bytes: u64,
    pub stages: Stages,
}

/// One worker's buffer.
pub struct ServiceLog {
    target: RecordTarget,
    buf: Vec<u8>,
    capacity: usize,
}

impl ServiceLog {
    pub fn new(target: &RecordTarget, capacity: usize) -> ServiceLog {
        ServiceLog { target: target.clone(), buf: Vec::new(), capacity: capacity.max(1) }
    }

    /// Whether rows are kept: only then do connections read the clock for
    /// them.
    pub fn enabled(&self) -> bool {
        self.target.enabled()
    }

    /// Appends one row; writes the buffer out when it is full.
    pub fn record(&mut self, r: &Record) {
        let Some((_, then, base)) = &self.target.0 else { return };
        let us = |t: Instant| -> u64 {
            match t.checked_duration_since(*then) {
                Some(d) => base + d.as_micros() as u64,
                None => base.saturating_sub(then.duration_since(t).as_micros() as u64),
            }
        };
        let mut n = itoa::Buffer::new();
        let b = &mut self.buf;
        for v in [us(r.accepted), us(r.arrived), us(r.start), us(r.end), u64::from(r.status), r.bytes] {
            b.extend_from_slice(n.format(v).as_bytes());
            b.push(b',');
        }
        for stage in 0..STAGES.len() {
            let time = r.stages.map(|s| s[stage]);
            for part in [time.map(|t| t.queued), time.map(|t| t.working)] {
                if let Some(d) = part {
                    b.extend_from_slice(n.format(d.as_micros() as u64).as_bytes());
                }
                b.push(b',');
            }
        }
        // The last separator ends the row instead.
        b.pop();
        b.push(b'\n');
        if self.buf.len() >= self.capacity {
            self.flush();
        }
    }

    /// Writes out whatever is buffered.
    pub fn flush(&mut self) {
        if let (Some((file, _, _)), false) = (&self.target.0, self.buf.is_empty()) {
            if let Err(err) = (&**file).write_all(&self.buf) {
                crate::error_log::log!(crate::error_log::Level::Error, "service records write failed: {err}");
            }
            self.buf.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_with_and_without_stages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.csv");
        let target = RecordTarget::open(path.to_str().unwrap()).unwrap();
        let mut log = ServiceLog::new(&target, 1 << 20);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (arrived, start, end) = (t0 + ms(1), t0 + ms(2), t0 + ms(4));
        log.record(&Record { accepted: t0, arrived, start, end, status: 200, bytes: 5, stages: None });
        let mut stages = [StageTime::default(); STAGES.len()];
        stages[1] = StageTime { queued: Duration::from_micros(7), working: Duration::from_micros(40) };
        log.record(&Record {
            accepted: t0,
            arrived: t0,
            start: t0,
            end: t0,
            status: 404,
            bytes: 0,
            stages: Some(stages),
        });
        assert_eq!(std::fs::read_to_string(&path).unwrap(), HEADER, "buffered until flushed");
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
        let columns = HEADER.trim_end().split(',').count();
        assert_eq!(rows.len(), 2);
        let n = |s: &str| s.parse::<u64>().unwrap();
        let after_accept: Vec<u64> = (1..4).map(|i| n(rows[0][i]) - n(rows[0][0])).collect();
        assert_eq!(after_accept, [1000, 2000, 4000], "arrive, start, end");
        assert_eq!(&rows[0][4..], ["200", "5", "", "", "", "", "", "", "", ""]);
        assert_eq!(&rows[1][4..], ["404", "0", "0", "0", "7", "40", "0", "0", "0", "0"]);
        assert!(rows.iter().all(|r| r.len() == columns));
        // A second server appending to the same file adds no header.
        drop(RecordTarget::open(path.to_str().unwrap()).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}
