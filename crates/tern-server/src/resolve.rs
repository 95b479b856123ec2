//! The one route from a request path to an open file.
//!
//! Every file the server serves is opened here, relative to a descriptor of
//! the document root, with `openat2(2)` and `RESOLVE_BENEATH`, so the kernel
//! itself refuses `..` and symlinks that would leave the root; the path has
//! already been decoded and normalised once by `tern_http::path`.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{openat2, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use serde::Deserialize;

use crate::open_files::Identity;

/// Which symlinks a path may traverse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Symlinks {
    /// Symlinks whose target stays inside the root (`RESOLVE_BENEATH`).
    InsideRoot,
    /// No symlinks at all.
    Never,
    /// Any symlink, even out of the root: only for trusted trees.
    Any,
}

/// What a resolved path turned out to be.
pub enum Found {
    /// A regular file; `index` names the index file when the request named
    /// its directory.
    File { file: File, stat: rustix::fs::Stat, index: Option<usize> },
    /// A directory whose request had no trailing slash: redirect.
    DirectoryWithoutSlash,
    /// A directory with none of the index files.
    DirectoryWithoutIndex,
}

/// Why a path could not be served.
#[derive(Debug)]
pub enum ResolveError {
    NotFound,
    /// Refused: permissions, a symlink leaving the root, or not a regular
    /// file.
    Forbidden,
    /// Out of descriptors or similar: the server, not the request.
    Unavailable(io::Error),
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::NotFound => f.write_str("not found"),
            ResolveError::Forbidden => f.write_str("forbidden"),
            ResolveError::Unavailable(e) => write!(f, "unavailable: {e}"),
        }
    }
}

impl ResolveError {
    pub fn status(&self) -> u16 {
        match self {
            ResolveError::NotFound => 404,
            ResolveError::Forbidden => 403,
            ResolveError::Unavailable(_) => 503,
        }
    }
}

fn classify(err: rustix::io::Errno) -> ResolveError {
    use rustix::io::Errno;
    match err {
        Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG => ResolveError::NotFound,
        Errno::ACCESS | Errno::PERM | Errno::XDEV | Errno::LOOP => ResolveError::Forbidden,
        other => ResolveError::Unavailable(other.into()),
    }
}

/// A document root as an open directory. Each `Root` opened has an id of
/// its own, so tables keyed by path (the open-file table) keep the files of
/// two roots apart.
pub struct Root {
    dir: OwnedFd,
    resolve: ResolveFlags,
    index: Vec<String>,
    id: u32,
}

/// The id the next root opened gets.
static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Root {
    pub fn open(path: &Path, symlinks: Symlinks, index: Vec<String>) -> io::Result<Root> {
        let dir = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let resolve = match symlinks {
            Symlinks::InsideRoot => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            Symlinks::Never => ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
            Symlinks::Any => ResolveFlags::NO_MAGICLINKS,
        };
        Ok(Root { dir, resolve, index, id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed) })
    }

    /// This root's id (a clone has its original's).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The same root on a duplicated descriptor (for the I/O pool's
    /// threads, which open files for the workers).
    pub fn try_clone(&self) -> io::Result<Root> {
        Ok(Root { dir: self.dir.try_clone()?, resolve: self.resolve, index: self.index.clone(), id: self.id })
    }

    /// The name of index file number `i`.
    pub fn index_name(&self, i: usize) -> &str {
        &self.index[i]
    }

    /// The metadata of `rel`, opened through the same checks as a file to
    /// serve (`O_PATH`: nothing is read).
    pub fn probe(&self, rel: &[u8]) -> Result<rustix::fs::Stat, ResolveError> {
        self.probe_open(rel).map(|(_, stat)| stat)
    }

    /// [`Root::probe`], with the `O_PATH` descriptor it opened (to watch
    /// the inode it names).
    pub fn probe_open(&self, rel: &[u8]) -> Result<(OwnedFd, rustix::fs::Stat), ResolveError> {
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        let fd = openat2(&self.dir, rel, flags, Mode::empty(), self.resolve).map_err(classify)?;
        let stat = rustix::fs::fstat(&fd).map_err(classify)?;
        Ok((fd, stat))
    }

    fn open_at(&self, rel: &[u8]) -> Result<(OwnedFd, rustix::fs::Stat), ResolveError> {
        let rel = if rel.is_empty() { &b"."[..] } else { rel };
        // O_NONBLOCK: opening a FIFO must not block the worker.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = openat2(&self.dir, rel, flags, Mode::empty(), self.resolve).map_err(classify)?;
        let stat = rustix::fs::fstat(&fd).map_err(classify)?;
        Ok((fd, stat))
    }

    /// Opens the directory at `rel` to read its entries (a listing).
    pub fn open_dir(&self, rel: &[u8]) -> Result<OwnedFd, ResolveError> {
        let (fd, stat) = self.open_at(rel)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Ok(fd),
            _ => Err(ResolveError::NotFound),
        }
    }

    /// The identity of the file at `rel` now, with one `fstatat` and no
    /// open: the freshness check before a cached compressed variant is
    /// sent. It only compares; anything served is still opened by
    /// [`Root::find`].
    pub fn identity(&self, rel: &[u8]) -> Result<Identity, ResolveError> {
        let rel = if rel.is_empty() { &b"."[..] } else { rel };
        let stat = rustix::fs::statat(&self.dir, rel, AtFlags::empty()).map_err(classify)?;
        Ok(Identity::of(&stat))
    }

    /// Opens the normalised relative path `rel`; for a directory, its index
    /// file. `scratch` is reused to build index paths.
    pub fn find(&self, rel: &[u8], trailing_slash: bool, scratch: &mut Vec<u8>) -> Result<Found, ResolveError> {
        let (fd, stat) = self.open_at(rel)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile if trailing_slash && !rel.is_empty() => Err(ResolveError::NotFound),
            FileType::RegularFile => Ok(Found::File { file: File::from(fd), stat, index: None }),
            FileType::Directory if !trailing_slash => Ok(Found::DirectoryWithoutSlash),
            FileType::Directory => {
                drop(fd);
                for (i, name) in self.index.iter().enumerate() {
                    scratch.clear();
                    scratch.extend_from_slice(rel);
                    if !rel.is_empty() {
                        scratch.push(b'/');
                    }
                    scratch.extend_from_slice(name.as_bytes());
                    match self.open_at(scratch) {
                        Ok((fd, stat)) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                            return Ok(Found::File { file: File::from(fd), stat, index: Some(i) });
                        }
                        Ok(_) | Err(ResolveError::NotFound) => continue,
                        Err(other) => return Err(other),
                    }
                }
                Ok(Found::DirectoryWithoutIndex)
            }
            _ => Err(ResolveError::Forbidden),
        }
    }
}
