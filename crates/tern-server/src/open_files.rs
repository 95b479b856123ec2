//! Each worker's open-file table: path → open descriptor, mapping and
//! pre-formatted validators, with a capacity (least recently used entries
//! are closed first) and revalidation after `open_file_valid`.
//!
//! One table per worker, so the hit path takes no lock and makes no system
//! call; the price is one descriptor (and mapping) per worker per file.

use std::fs::File;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;
use memmap2::Mmap;

/// An open file with everything a response about it needs.
pub struct OpenFile {
    pub file: File,
    pub size: u64,
    /// Identity used to notice a change on disk.
    pub identity: Identity,
    /// The whole file mapped, for the `mmap` I/O method. User space never
    /// reads it (only `write` does, in the kernel), so a file truncated
    /// under the mapping makes a write fail with `EFAULT`, not a `SIGBUS`.
    pub mapping: Option<Mmap>,
    /// `"…"`: strong, from mtime (with nanoseconds) and size.
    pub etag: Box<[u8]>,
    pub last_modified: u64,
    /// `last_modified` as an IMF-fixdate, formatted once.
    pub last_modified_http: Box<str>,
    pub content_type: Box<str>,
    /// `Content-Type`, `Last-Modified`, `ETag` and `Accept-Ranges` lines
    /// (and `Vary` when negotiable), formatted once.
    pub headers: Box<[u8]>,
    /// The path of the file itself, relative to the root (an index file's
    /// name included): for freshness checks and sidecars.
    pub rel_path: Box<[u8]>,
    /// Whether responses depend on `Accept-Encoding` (see
    /// `Compression::negotiable`).
    pub negotiable: bool,
}

/// What makes two opens of a path "the same file".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
}

impl Identity {
    pub fn of(stat: &rustix::fs::Stat) -> Identity {
        Identity {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size as u64,
            mtime_sec: stat.st_mtime,
            mtime_nsec: stat.st_mtime_nsec as i64,
        }
    }
}

struct Entry {
    file: Arc<OpenFile>,
    checked: Instant,
}

pub struct OpenFileTable {
    entries: LruCache<Vec<u8>, Entry>,
    valid: Duration,
}

impl OpenFileTable {
    pub fn new(capacity: usize, valid: Duration) -> Self {
        OpenFileTable { entries: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)), valid }
    }

    /// The entry for `key`, and whether it is still within its validity
    /// period. A stale entry must be re-checked with [`Self::refresh`] (same
    /// file on disk) or replaced with [`Self::insert`].
    pub fn lookup(&mut self, key: &[u8], now: Instant) -> Option<(Arc<OpenFile>, bool)> {
        let entry = self.entries.get(key)?;
        Some((entry.file.clone(), now.saturating_duration_since(entry.checked) < self.valid))
    }

    /// The file behind a stale entry was found unchanged: trust it again.
    pub fn refresh(&mut self, key: &[u8], now: Instant) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.checked = now;
        }
    }

    pub fn insert(&mut self, key: &[u8], file: Arc<OpenFile>, now: Instant) {
        self.entries.put(key.to_vec(), Entry { file, checked: now });
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.entries.pop(key);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
