//! The lab's results store: an embedded SQLite database of every `tern
//! bench`, `tern probe` and experiment run, with the host it ran on, the
//! command line and settings, the raw report and the HdrHistogram
//! snapshots, so runs made months apart can be charted side by side.
//!
//! A run is written in one transaction: a store holds whole runs or none
//! of a run. Its schema is built by migrations (`schema.rs`).

mod exchange;
pub mod record;
mod recording;
mod run;
mod schema;
mod sqlite;

pub use exchange::{csv, import_json, to_json};
pub use recording::Recording;
pub use run::{fingerprint, now, utc, Filter, Host, Measurement, Point, Run, RunData, RunSummary, Snapshot, Status};
pub use sqlite::{default_path, Error, Store};
