//! How a measuring command records its runs: in which store, under which
//! label, or not at all. A store that cannot be written costs the run its
//! record, never its printed measurement.

use std::io::IsTerminal;
use std::path::PathBuf;

use super::run::RunData;
use super::sqlite::Store;

#[derive(Clone, Debug)]
pub struct Recording {
    /// The store ([`default_path`](super::sqlite::default_path) unless given).
    pub path: PathBuf,
    /// Record nothing.
    pub no_store: bool,
    /// The run's label (empty: the command makes one).
    pub label: String,
}

impl Recording {
    /// Records `run` and returns its id, saying where on stderr when it is
    /// a terminal (piped, stderr stays as the command always wrote it); a
    /// store that cannot be written is reported.
    pub fn save(&self, run: &RunData) -> Option<i64> {
        if self.no_store {
            return None;
        }
        match Store::open(&self.path).and_then(|mut s| s.insert(run)) {
            Ok(id) => {
                if std::io::stderr().is_terminal() {
                    eprintln!("tern: stored as run {id} ({}) in {}", run.status.name(), self.path.display());
                }
                Some(id)
            }
            Err(e) => {
                eprintln!("tern: the run was not stored: {e}");
                None
            }
        }
    }
}
