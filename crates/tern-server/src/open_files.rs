//! Each worker's open-file table: path → open descriptor, mapping and
//! pre-formatted validators, with a capacity (least recently used entries
//! are closed first) and revalidation after `open_file_valid`.
//!
//! One table per worker, so the hit path takes no lock and makes no system
//! call; the price is one descriptor (and mapping) per worker per file.
//!
//! A file changed in place keeps its inode, so the descriptor held here
//! reads the new bytes at once: the length and strong `ETag` formatted for
//! the old ones must not be sent with them. Each entry's inode is watched
//! with inotify (one instance per worker, its descriptor in the engine's
//! epoll set): a change marks the entry stale, and the next request
//! resolves the path again. Events are handled before the requests of the
//! same event-loop turn, so a change made before a request was sent is
//! seen by it. An entry that cannot be watched (no inotify instance or
//! watch left) is checked with an `fstat` of its descriptor on every use
//! instead. A path that comes to name another file (a rename over it)
//! marks the old inode too (its link count changes); renames of the
//! directories above are seen after `open_file_valid`, as before.
//!
//! Beside the open files, the table remembers paths known to be regular
//! files without holding them open (a FastCGI script's existence check):
//! watched and trusted the same way, so a hit costs no system call either.

use std::collections::HashMap;
use std::fs::File;
use std::mem::MaybeUninit;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;
use memmap2::Mmap;
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};

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
    /// All its pages were found in the page cache (see
    /// [`OpenFile::resident_until`]); cleared when the entry is
    /// revalidated, so pages evicted since are noticed then.
    pub resident: AtomicBool,
}

/// Pages looked at by one residency check (2 MiB of 4 KiB pages).
const RESIDENCY_WINDOW: usize = 512;

impl OpenFile {
    /// An unlinked temporary file of `size` bytes, opened and mapped as the
    /// open-file table would (the calibration sends it).
    pub fn temporary(size: u64) -> std::io::Result<Arc<OpenFile>> {
        let mut file = tempfile::tempfile()?;
        let pattern: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
        let mut left = size;
        while left > 0 {
            let n = left.min(pattern.len() as u64) as usize;
            std::io::Write::write_all(&mut file, &pattern[..n])?;
            left -= n as u64;
        }
        let stat = rustix::fs::fstat(&file)?;
        // SAFETY: only the kernel reads the mapping (see `OpenFile::mapping`).
        let mapping = Some(unsafe { Mmap::map(&file)? });
        Ok(Arc::new(OpenFile {
            file,
            size,
            identity: Identity::of(&stat),
            mapping,
            etag: Box::default(),
            last_modified: 0,
            last_modified_http: Box::default(),
            content_type: Box::default(),
            headers: Box::default(),
            rel_path: Box::default(),
            negotiable: false,
            resident: Default::default(),
        }))
    }

    /// The error for a file that ended before its announced length: the
    /// response cannot be completed, so the connection must close.
    pub fn shrank(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("file /{} shrank while sent: response cut short", String::from_utf8_lossy(&self.rel_path)),
        )
    }
    /// How far from `offset` (at most `len` bytes) the file's pages are
    /// known to be in the page cache, so sending them cannot wait for a
    /// disk; `None` when the page at `offset` is not (or it cannot be
    /// told: no mapping) and reading it belongs in the I/O pool.
    ///
    /// Once a check found the whole file resident, none is made again
    /// until the entry is revalidated: a hot file costs no system call.
    /// Otherwise one `mincore` of the mapping looks at up to
    /// [`RESIDENCY_WINDOW`] pages. (The kernel answers for files the
    /// server's user owns or may write; for others it says "resident".)
    pub fn resident_until(&self, offset: u64, len: u64) -> Option<u64> {
        let end = offset + len;
        if self.resident.load(Relaxed) {
            return Some(end);
        }
        let map = self.mapping.as_ref().filter(|m| offset < m.len() as u64)?;
        let page = crate::sys::page_size() as u64;
        let start = offset / page * page;
        let stop = end.min(start + RESIDENCY_WINDOW as u64 * page).min(map.len() as u64);
        let mut pages = [0u8; RESIDENCY_WINDOW];
        let count = (stop - start).div_ceil(page) as usize;
        crate::sys::mincore(map, start as usize, (stop - start) as usize, &mut pages).ok()?;
        let resident = pages[..count].iter().take_while(|p| *p & 1 == 1).count();
        if resident == count && start == 0 && stop == self.size {
            self.resident.store(true, Relaxed);
        }
        let until = if resident == count { stop } else { start + resident as u64 * page };
        (until > offset).then_some(until.min(end))
    }
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
    /// The inotify watch on the file's inode (shared by every entry for
    /// that inode); `None`: checked with `fstat` on each use.
    watch: Option<i32>,
    /// A change was reported: resolve the path again before use.
    changed: bool,
}

/// A path found to be a regular file (not held open).
struct Known {
    checked: Instant,
    watch: i32,
    changed: bool,
}

/// A worker's inotify instance and its watches.
struct Changes {
    fd: OwnedFd,
    /// Watch descriptor → entries using it.
    users: HashMap<i32, u32>,
}

/// What a change to a served file looks like: its bytes, its metadata
/// (link count included), or its name going away.
const WATCHED: WatchFlags =
    WatchFlags::MODIFY.union(WatchFlags::ATTRIB).union(WatchFlags::MOVE_SELF).union(WatchFlags::DELETE_SELF);

pub struct OpenFileTable {
    entries: LruCache<Vec<u8>, Entry>,
    known: LruCache<Vec<u8>, Known>,
    valid: Duration,
    changes: Option<Changes>,
    /// Where a lookup's key is written.
    key: Vec<u8>,
}

impl OpenFileTable {
    pub fn new(capacity: usize, valid: Duration) -> Self {
        let changes = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .ok()
            .map(|fd| Changes { fd, users: HashMap::new() });
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        OpenFileTable {
            entries: LruCache::new(capacity),
            known: LruCache::new(capacity),
            valid,
            changes,
            key: Vec::new(),
        }
    }

    /// The descriptor that becomes readable when a watched file changes:
    /// the engine watches it and calls [`Self::on_changes`].
    pub fn changes_fd(&self) -> Option<BorrowedFd<'_>> {
        self.changes.as_ref().map(|c| c.fd.as_fd())
    }

    /// Stops watching (the engine cannot deliver the events): every entry
    /// is then checked with `fstat` on use.
    pub fn stop_watching(&mut self) {
        self.changes = None;
        for (_, entry) in self.entries.iter_mut() {
            entry.watch = None;
        }
        self.known.clear();
    }

    /// Reads the pending change reports and marks their entries stale.
    pub fn on_changes(&mut self) {
        let Some(changes) = self.changes.as_mut() else { return };
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(changes.fd.as_fd(), &mut buf);
        let mut changed: Vec<i32> = Vec::new();
        let mut everything = false;
        let mut gone: Vec<i32> = Vec::new();
        loop {
            match reader.next() {
                Ok(event) => {
                    let flags = event.events();
                    if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                        everything = true;
                    } else if flags.contains(ReadFlags::IGNORED) {
                        // The kernel dropped the watch (the inode is gone).
                        gone.push(event.wd());
                    } else {
                        changed.push(event.wd());
                    }
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        }
        for wd in &gone {
            changes.users.remove(wd);
        }
        for (_, entry) in self.entries.iter_mut() {
            let Some(wd) = entry.watch else { continue };
            if everything || changed.contains(&wd) || gone.contains(&wd) {
                entry.changed = true;
            }
            if gone.contains(&wd) {
                entry.watch = None;
            }
        }
        for (_, known) in self.known.iter_mut() {
            if everything || changed.contains(&known.watch) || gone.contains(&known.watch) {
                known.changed = true;
            }
        }
    }

    /// Whether `path` under the root `root` was found to be a regular file
    /// ([`Self::note_regular`]) within `open_file_valid`, and no change to
    /// it was reported since.
    pub fn known_regular(&mut self, root: u32, path: &[u8], now: Instant) -> bool {
        let key = keyed(&mut self.key, root, path);
        self.known.get(key).is_some_and(|k| !k.changed && now.saturating_duration_since(k.checked) < self.valid)
    }

    /// `path` under `root` was just found to be a regular file, through
    /// `fd` (any descriptor of it, `O_PATH` included): remembered with its
    /// inode watched. Without a watch nothing is remembered (it could not
    /// be trusted).
    pub fn note_regular(&mut self, root: u32, path: &[u8], fd: BorrowedFd<'_>, now: Instant) {
        if self.valid.is_zero() {
            return;
        }
        let Some(watch) = self.watch(fd) else { return };
        let known = Known { checked: now, watch, changed: false };
        if let Some((_, old)) = self.known.push(keyed(&mut self.key, root, path).to_vec(), known) {
            self.unwatch(Some(old.watch));
        }
    }

    /// The entry for `path` under `root`, and whether it is still within
    /// its validity period and unchanged. A stale entry must be re-checked
    /// with [`Self::refresh`] (same file on disk) or replaced with
    /// [`Self::insert`].
    pub fn lookup(&mut self, root: u32, path: &[u8], now: Instant) -> Option<(Arc<OpenFile>, bool)> {
        let entry = self.entries.get(keyed(&mut self.key, root, path))?;
        let fresh = !entry.changed
            && now.saturating_duration_since(entry.checked) < self.valid
            && (entry.watch.is_some()
                || rustix::fs::fstat(&entry.file.file).is_ok_and(|st| Identity::of(&st) == entry.file.identity));
        Some((entry.file.clone(), fresh))
    }

    /// The file behind a stale entry was found unchanged: trust it again.
    pub fn refresh(&mut self, root: u32, path: &[u8], now: Instant) {
        if let Some(entry) = self.entries.get_mut(keyed(&mut self.key, root, path)) {
            entry.checked = now;
            entry.changed = false;
            entry.file.resident.store(false, Relaxed);
        }
    }

    pub fn insert(&mut self, root: u32, path: &[u8], file: Arc<OpenFile>, now: Instant) {
        let watch = self.watch(file.file.as_fd());
        let entry = Entry { file, checked: now, watch, changed: false };
        if let Some((_, old)) = self.entries.push(keyed(&mut self.key, root, path).to_vec(), entry) {
            self.unwatch(old.watch);
        }
    }

    pub fn remove(&mut self, root: u32, path: &[u8]) {
        if let Some(old) = self.entries.pop(keyed(&mut self.key, root, path)) {
            self.unwatch(old.watch);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Watches the inode behind `fd` (through its `/proc/self/fd` link, so
    /// no path is looked up again).
    fn watch(&mut self, fd: BorrowedFd<'_>) -> Option<i32> {
        let changes = self.changes.as_mut()?;
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let wd = inotify::add_watch(&changes.fd, link.as_str(), WATCHED).ok()?;
        *changes.users.entry(wd).or_insert(0) += 1;
        Some(wd)
    }

    fn unwatch(&mut self, watch: Option<i32>) {
        let (Some(wd), Some(changes)) = (watch, self.changes.as_mut()) else { return };
        if let Some(users) = changes.users.get_mut(&wd) {
            *users -= 1;
            if *users == 0 {
                changes.users.remove(&wd);
                let _ = inotify::remove_watch(&changes.fd, wd);
            }
        }
    }
}

/// The table's key for `path` under the root `root`: the root's id, then
/// the path, written into `buf` (kept by the table, so a lookup allocates
/// nothing).
fn keyed<'b>(buf: &'b mut Vec<u8>, root: u32, path: &[u8]) -> &'b [u8] {
    buf.clear();
    buf.extend_from_slice(&root.to_le_bytes());
    buf.extend_from_slice(path);
    buf
}
