//! The suites, one file each. A suite measures with the [`Ctx`] it is given
//! and returns its figures, plus notes (facts a figure depends on, such as
//! the filesystem type).

mod commands;
mod disk;
mod files;
pub mod ipc;
pub mod net;
pub mod processes;
mod rpc;
mod syscalls;

use std::io;
use std::path::{Path, PathBuf};

use super::{Ctx, Figure};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    Syscalls,
    Processes,
    Commands,
    Disk,
    Ipc,
    Net,
    Rpc,
    Files,
}

/// What a suite measured.
#[derive(Debug, Default)]
pub struct Outcome {
    pub figures: Vec<Figure>,
    pub notes: Vec<String>,
    /// The null-RPC time subtracted from the suite's transfers.
    pub rpc_null_ns: Option<f64>,
}

impl From<Vec<Figure>> for Outcome {
    fn from(figures: Vec<Figure>) -> Outcome {
        Outcome { figures, ..Outcome::default() }
    }
}

impl Suite {
    pub const ALL: &'static [Suite] = &[
        Suite::Syscalls,
        Suite::Processes,
        Suite::Commands,
        Suite::Disk,
        Suite::Ipc,
        Suite::Net,
        Suite::Rpc,
        Suite::Files,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Syscalls => "syscalls",
            Suite::Processes => "processes",
            Suite::Commands => "commands",
            Suite::Disk => "disk",
            Suite::Ipc => "ipc",
            Suite::Net => "net",
            Suite::Rpc => "rpc",
            Suite::Files => "files",
        }
    }

    /// The suite called `name`, or a message listing the known ones.
    pub fn parse(name: &str) -> Result<Suite, String> {
        Suite::ALL.iter().copied().find(|s| s.name() == name).ok_or_else(|| {
            let known: Vec<_> = Suite::ALL.iter().map(|s| s.name()).collect();
            format!("unknown suite {name:?} (known: all, {})", known.join(", "))
        })
    }

    pub fn run(self, ctx: &Ctx) -> io::Result<Outcome> {
        match self {
            Suite::Syscalls => syscalls::run(ctx).map(Outcome::from),
            Suite::Processes => processes::run(ctx).map(Outcome::from),
            Suite::Commands => commands::run(ctx),
            Suite::Disk => disk::run(ctx),
            Suite::Ipc => ipc::run(ctx).map(Outcome::from),
            Suite::Net => net::run(ctx),
            Suite::Rpc => rpc::run(ctx),
            Suite::Files => files::run(ctx).map(Outcome::from),
        }
    }
}

/// A scratch directory under `base` (the `--path` of the run), removed on drop.
pub(crate) struct ScratchDir(PathBuf);

pub(crate) fn tempdir(base: &Path) -> io::Result<ScratchDir> {
    let path = base.join(format!("tern-probe-{}-{}", std::process::id(), super::stopwatch::now_ns()));
    std::fs::create_dir_all(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(ScratchDir(path))
}

impl ScratchDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
