//! The flags several commands share, so each is spelled once: how a
//! measuring command records its runs ([`Record`]) and how it reaches
//! agents ([`Reach`]). Below the commands: no command imports another.

use std::path::{Path, PathBuf};

use tern_lab::agent::access::Access;
use tern_lab::store;

/// How a measuring command (`tern bench`, `tern probe`, `tern lab run`)
/// records its runs.
#[derive(clap::Args, Clone, Debug)]
pub struct Record {
    /// The results store (SQLite) the run is recorded in
    /// [default: $XDG_DATA_HOME/tern/lab.sqlite, else ~/.local/share/tern/lab.sqlite].
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,
    /// Do not record the run.
    #[arg(long, conflicts_with = "store")]
    pub no_store: bool,
    /// A label for the run in the store (default: its target or suites).
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub label: String,
}

impl Record {
    /// The flags as the lab takes them.
    pub fn recording(&self) -> store::Recording {
        store::Recording { path: store_path(self.store.as_deref()), no_store: self.no_store, label: self.label.clone() }
    }
}

/// The store given, else the default one.
pub fn store_path(given: Option<&Path>) -> PathBuf {
    given.map_or_else(store::default_path, Path::to_path_buf)
}

/// How `tern bench` and `tern probe` reach their agents (`--agent`).
#[derive(clap::Args)]
pub struct Reach {
    /// The agents' shared token (first line of the file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) that signed the agents' certificates: talk to
    /// them over TLS only, refusing any other certificate.
    #[arg(long, value_name = "FILE", requires = "agent")]
    pub agent_ca: Option<PathBuf>,
}

impl Reach {
    pub fn access(&self) -> anyhow::Result<Access> {
        let token_file = self.token_file.as_ref().ok_or_else(|| anyhow::anyhow!("--agent needs --token-file"))?;
        Ok(Access::read(token_file, self.agent_ca.as_deref())?)
    }
}
