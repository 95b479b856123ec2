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
            Suite::Processes => processes::run(ctx),
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

/// A page-aligned mapping of `len` bytes, unmapped on drop: a file's, read
/// only and shared, or anonymous memory, read-write and zero-filled.
pub(crate) struct Mapping(pub(crate) *mut libc::c_void, pub(crate) usize);

impl Mapping {
    pub(crate) fn new(len: usize, fd: Option<&std::fs::File>) -> io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        let (prot, flags, fd) = match fd {
            Some(f) => (libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd()),
            None => (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
        };
        // SAFETY: a fresh mapping chosen by the kernel; checked for failure.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping(p, len))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable for its length while it lives.
        unsafe { std::slice::from_raw_parts(self.0 as *const u8, self.1) }
    }

    /// The bytes of an anonymous mapping, to write into (a file's mapping
    /// is read-only: writing would fault).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is valid for its length while it lives and
        // borrowed mutably once; anonymous mappings are writable.
        unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u8, self.1) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anonymous_mapping_is_page_aligned_zeroed_and_writable() {
        // The disk suite reads into one: the kernel's copy is measured at its
        // best, not slowed by a misaligned destination.
        let mut m = Mapping::new(3 * page_size() + 1, None).unwrap();
        assert_eq!(m.0 as usize % page_size(), 0);
        assert!(m.bytes().iter().all(|&b| b == 0));
        m.bytes_mut().fill(7);
        assert_eq!((m.bytes().len(), m.bytes()[3 * page_size()]), (3 * page_size() + 1, 7));
    }
}
