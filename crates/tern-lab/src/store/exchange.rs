//! Runs out of and into a store: JSON (whole runs, what `import` reads
//! back) and CSV (one row per measurement, for spreadsheets).

use serde::{Deserialize, Serialize};

use super::run::{better_name, Run, RunData};
use super::sqlite::{Error, Store};

/// Names the file format, so `import` refuses anything else clearly.
const FORMAT: &str = "tern-lab-runs";
const VERSION: u32 = 1;

#[derive(Serialize)]
struct Export<'a> {
    format: &'static str,
    version: u32,
    runs: &'a [Run],
}

#[derive(Deserialize)]
struct Import {
    format: String,
    version: u32,
    runs: Vec<ImportedRun>,
}

/// A run as exported; its id and host id belong to the store it came from.
#[derive(Deserialize)]
struct ImportedRun {
    #[serde(flatten)]
    data: RunData,
}

/// The runs as one JSON document.
pub fn to_json(runs: &[Run]) -> String {
    let mut text = serde_json::to_string_pretty(&Export { format: FORMAT, version: VERSION, runs })
        .expect("runs always serialise");
    text.push('\n');
    text
}

/// Stores the runs of an exported JSON document as new runs (new ids, hosts
/// matched by fingerprint), all or none, and returns their ids.
pub fn import_json(store: &mut Store, text: &str) -> Result<Vec<i64>, Error> {
    let doc: Import = serde_json::from_str(text).map_err(|e| Error::Format(format!("not a `tern lab export`: {e}")))?;
    if doc.format != FORMAT || doc.version > VERSION {
        return Err(Error::Format(format!(
            "format {:?} version {} is not {FORMAT:?} version {VERSION} or older",
            doc.format, doc.version
        )));
    }
    store.insert_all(doc.runs.iter().map(|r| &r.data))
}

/// A CSV field, quoted when it needs to be (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per measurement, with its run's identity.
pub fn csv(runs: &[Run]) -> String {
    let mut out = String::from(
        "run,kind,status,host,started_at,label,subject,metric,value,unit,better,size,concurrency,cpus,load\n",
    );
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in runs {
        for m in &r.data.measurements {
            let row = [
                r.id.to_string(),
                field(&r.data.kind),
                r.data.status.name().to_string(),
                field(&r.host.hostname),
                format!("{:.3}", r.data.started_at),
                field(&r.data.label),
                field(&m.subject),
                field(&m.metric),
                m.value.to_string(),
                field(&m.unit),
                better_name(m.better).to_string(),
                opt(m.size),
                opt(m.concurrency),
                opt(m.cpus),
                m.load.map(|v| v.to_string()).unwrap_or_default(),
            ];
            out.push_str(&row.join(","));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Values seen to come back one unit in the last place off when the
    /// JSON parser is not exact: `import` must give back what was exported.
    #[test]
    fn exported_values_read_back_bit_for_bit() {
        for v in [1168.0806708563425f64, 15437.603533735373, 0.1 + 0.2, 123456.78901234567, 5e-324] {
            let text = serde_json::to_string(&v).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{text}");
        }
    }
}
