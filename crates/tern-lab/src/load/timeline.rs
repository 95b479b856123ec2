//! `--timeline FILE`: one CSV row per request, for service-time analysis.
//!
//! Histograms answer "how slow"; the timeline answers "when, on which
//! connection, for which request" — what is needed to see a stall start and
//! end, or to fit a queueing model to the server's service times. Rows are
//! collected per thread in memory (only when asked for) and written, ordered
//! by start time, after the run, so the file costs the run nothing.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::plan::Plan;
use super::stats::ErrorClass;

/// One measured request. Times are nanoseconds since the measurement began
/// (the end of the warm-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// When the request was due (open loop), or handed to a connection.
    pub intended_ns: u64,
    /// When it was handed to a connection.
    pub start_ns: u64,
    /// When its response completed, or it failed.
    pub end_ns: u64,
    /// Status code; 0 when there was no response.
    pub status: u16,
    /// Response body bytes.
    pub bytes: u64,
    /// Global connection slot number (reconnections reuse the slot).
    pub connection: u32,
    /// Index of the planned request (mix entry).
    pub request: u32,
    pub error: Option<ErrorClass>,
}

/// The CSV header line.
pub const HEADER: &str = "start_us,end_us,intended_us,status,bytes,connection,request,error";

/// Writes `rows` (all threads' rows, in any order) to `path`, sorted by start.
pub fn write(path: &Path, mut rows: Vec<Row>, plan: &Plan) -> io::Result<()> {
    rows.sort_unstable_by_key(|r| (r.start_ns, r.connection));
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{HEADER}")?;
    let us = |ns: u64| ns as f64 / 1000.0;
    for r in &rows {
        let label = &plan.requests[r.request as usize].label;
        writeln!(
            out,
            "{:.3},{:.3},{:.3},{},{},{},{},{}",
            us(r.start_ns),
            us(r.end_ns),
            us(r.intended_ns),
            r.status,
            r.bytes,
            r.connection,
            csv_field(label),
            r.error.map_or("", ErrorClass::name),
        )?;
    }
    out.flush()
}

/// Quotes a field when it holds a comma or a quote (URLs may).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::plan::{RequestSpec, Url};

    #[test]
    fn rows_are_sorted_and_labelled() {
        let spec = RequestSpec::new("GET", Url::parse("http://h/a,b").unwrap());
        let plan = Plan::build(&[spec], &[], true).unwrap();
        let row = |start_ns, error: Option<ErrorClass>| Row {
            intended_ns: start_ns,
            start_ns,
            end_ns: start_ns + 1500,
            status: if error.is_some() { 0 } else { 200 },
            bytes: 10,
            connection: 3,
            request: 0,
            error,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        write(&path, vec![row(5000, Some(ErrorClass::Timeout)), row(1000, None)], &plan).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!(
                "{HEADER}\n1.000,2.500,1.000,200,10,3,\"GET http://h/a,b\",\n\
                 5.000,6.500,5.000,0,10,3,\"GET http://h/a,b\",timeout\n"
            )
        );
    }
}
