//! Per-thread measurements, merged exactly after the run.
//!
//! Each worker owns its [`Stats`] outright — no atomics, no locks on the hot
//! path — and the coordinator adds them up when the workers are done.
//! HdrHistograms merge without loss, which is why latencies are kept in them
//! rather than as running percentiles.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are recorded in microseconds, like wrk, up to one hour.
pub const HIGHEST_US: u64 = 3_600_000_000;

/// Three significant digits: 0.1% relative error at every magnitude.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Why a request got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// The TCP connection could not be established.
    Connect,
    /// Reading failed, the server closed mid-response or sent something that
    /// is not HTTP/1.x (with `--h2`: broke the HTTP/2 protocol).
    Read,
    /// Sending the request failed.
    Write,
    /// No complete response within `--timeout`.
    Timeout,
    /// HTTP/2: the server reset the request's stream (RST_STREAM).
    Reset,
    /// HTTP/2: the server ended the connection with an error code (GOAWAY)
    /// before answering. A graceful GOAWAY is no error: the requests it
    /// left unprocessed are sent again, as after `Connection: close`.
    GoAway,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 6] = [
        ErrorClass::Connect,
        ErrorClass::Read,
        ErrorClass::Write,
        ErrorClass::Timeout,
        ErrorClass::Reset,
        ErrorClass::GoAway,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Connect => "connect",
            ErrorClass::Read => "read",
            ErrorClass::Write => "write",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Reset => "reset",
            ErrorClass::GoAway => "goaway",
        }
    }
}

/// An empty latency histogram with the generator's bounds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_US, SIGNIFICANT_DIGITS).expect("constant histogram bounds are valid")
}

/// Duration in whole microseconds, for the histograms.
pub fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(HIGHEST_US)) as u64
}

/// What one worker (or, merged, the whole run) measured.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Actual send → complete response, µs.
    pub service: Histogram<u64>,
    /// Intended send → complete response, µs; open loop only.
    pub response: Option<Histogram<u64>>,
    /// Complete responses, whatever their status.
    pub responses: u64,
    /// Responses by status code (index = code).
    pub status: Box<[u64; 1000]>,
    /// Failed requests by [`ErrorClass`] (index = position in `ALL`).
    pub errors: [u64; ErrorClass::ALL.len()],
    /// Response payload bytes (de-chunked bodies).
    pub body_bytes: u64,
    /// Response bytes on the wire: heads, chunk framing and bodies (HTTP/2:
    /// every frame read, after TLS).
    pub wire_bytes: u64,
    /// Open loop: requests that left more than [`LATE_AFTER`] after their
    /// intended time, because no connection was free or the thread was busy.
    pub late: u64,
    /// TCP connections opened.
    pub connects: u64,
    /// Complete responses per planned request (the mix entries).
    pub per_request: Vec<u64>,
}

/// A request is late when it leaves this long after its intended time: the
/// timer's own jitter stays below it, a busy server or generator does not.
pub const LATE_AFTER: Duration = Duration::from_millis(1);

impl Stats {
    pub fn new(open_loop: bool, planned: usize) -> Stats {
        Stats {
            service: new_histogram(),
            response: open_loop.then(new_histogram),
            responses: 0,
            status: Box::new([0; 1000]),
            errors: [0; ErrorClass::ALL.len()],
            body_bytes: 0,
            wire_bytes: 0,
            late: 0,
            connects: 0,
            per_request: vec![0; planned],
        }
    }

    pub fn error(&mut self, class: ErrorClass, count: u64) {
        self.errors[class as usize] += count;
    }

    pub fn errors_of(&self, class: ErrorClass) -> u64 {
        self.errors[class as usize]
    }

    /// Responses whose status is not 2xx or 3xx: the "status" error class.
    pub fn status_errors(&self) -> u64 {
        self.status.iter().enumerate().filter(|&(code, _)| !(200..400).contains(&code)).map(|(_, n)| n).sum()
    }

    /// Responses with a 2xx or 3xx status.
    pub fn successes(&self) -> u64 {
        self.status[200..400].iter().sum()
    }

    /// Adds `other` into `self`; histograms merge exactly.
    pub fn merge(&mut self, other: &Stats) {
        self.service.add(&other.service).expect("histograms share bounds");
        if let (Some(mine), Some(theirs)) = (&mut self.response, &other.response) {
            mine.add(theirs).expect("histograms share bounds");
        }
        self.responses += other.responses;
        for (a, b) in self.status.iter_mut().zip(other.status.iter()) {
            *a += b;
        }
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
        self.body_bytes += other.body_bytes;
        self.wire_bytes += other.wire_bytes;
        self.late += other.late;
        self.connects += other.connects;
        for (a, b) in self.per_request.iter_mut().zip(&other.per_request) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_everything() {
        let mut a = Stats::new(true, 2);
        let mut b = Stats::new(true, 2);
        a.service.record(100).unwrap();
        b.service.record(300).unwrap();
        b.response.as_mut().unwrap().record(5000).unwrap();
        a.status[200] = 3;
        b.status[404] = 2;
        b.status[301] = 1;
        b.error(ErrorClass::Timeout, 4);
        b.per_request[1] = 7;
        a.merge(&b);
        assert_eq!(a.service.len(), 2);
        assert_eq!(a.service.max(), 300);
        assert_eq!(a.response.as_ref().unwrap().len(), 1);
        assert_eq!((a.successes(), a.status_errors()), (4, 2));
        assert_eq!(a.errors_of(ErrorClass::Timeout), 4);
        assert_eq!(a.per_request, [0, 7]);
    }

    #[test]
    fn micros_saturate_at_the_histogram_bound() {
        assert_eq!(micros(Duration::from_nanos(1_999)), 1);
        assert_eq!(micros(Duration::from_secs(10 * 3600)), HIGHEST_US);
    }
}
