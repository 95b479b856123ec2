//! Making a compressed variant: from a precompressed sidecar when there is
//! one not older than the file, else by compressing it — by a worker
//! inline or by a background thread ([`super::workers`]).

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Instant;

use tern_http::accept_encoding::Coding;
use tern_http::response;

use super::cache::{Cache, CacheStats, Claim, Entry};
use super::codec::{self, Levels};
use crate::open_files::{Identity, OpenFile};
use crate::resolve::{Found, Root};

/// The header line every response of a negotiated resource carries.
pub const VARY: &[u8] = b"Vary: Accept-Encoding\r\n";

/// How a variant is made, by a worker inline or by a background thread:
/// from its sidecar when there is one, else compressed.
pub struct Maker {
    pub(super) levels: Levels,
    /// Larger files get sidecars only.
    pub(super) max_size: u64,
    /// Whether sidecars are looked for (under the file's own root, through
    /// [`Root::find`], like every open).
    pub(super) sidecars: bool,
    pub(super) cache: Arc<Cache>,
}

impl Maker {
    /// Makes the variant of `file` for `coding` and caches it through
    /// `claim`: its sidecar when there is one not older than the file, else
    /// compressed, unless the file is over `max_size` (`None`, the claim
    /// released).
    pub fn fill(
        &self,
        root: &Root,
        file: &OpenFile,
        coding: Coding,
        claim: Claim,
        now: Instant,
    ) -> io::Result<Option<Arc<Entry>>> {
        let claim = if self.sidecars {
            match self.sidecar(root, file, coding, claim, now) {
                Ok(entry) => return Ok(Some(entry)),
                Err(claim) => claim,
            }
        } else {
            claim
        };
        if file.size > self.max_size {
            return Ok(None);
        }
        make(self.levels, &self.cache.stats, file, coding, Some(claim), now).map(Some)
    }

    /// The cache this maker fills.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Loads `file`'s precompressed sidecar for `coding` into the cache,
    /// when there is one not older than the file; else gives the claim back.
    fn sidecar(
        &self,
        root: &Root,
        file: &OpenFile,
        coding: Coding,
        claim: Claim,
        now: Instant,
    ) -> Result<Arc<Entry>, Claim> {
        let mut path = Vec::with_capacity(file.rel_path.len() + 4);
        path.extend_from_slice(&file.rel_path);
        path.extend_from_slice(codec::sidecar_suffix(coding).as_bytes());
        let mut scratch = Vec::new();
        let Ok(Found::File { file: side, stat, .. }) = root.find(&path, false, &mut scratch) else { return Err(claim) };
        let id = Identity::of(&stat);
        let older = (id.mtime_sec, id.mtime_nsec) < (file.identity.mtime_sec, file.identity.mtime_nsec);
        if older || id.size > self.cache.memory().1 {
            return Err(claim);
        }
        let mut body = vec![0; id.size as usize];
        if side.read_exact_at(&mut body, 0).is_err() {
            return Err(claim);
        }
        self.cache.stats.sidecars.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(claim.fill(variant(file, coding, body.into(), Some((path.into(), id))), now))
    }
}

/// Reads `file` whole and compresses it; cached through `claim` when given
/// (and the budget allows). Runs inline on a worker or on a background
/// thread; reads the file with `pread` (never from a mapping, which user
/// space must not touch), and refuses the result if the file changed while
/// it was read.
pub(crate) fn make(
    levels: Levels,
    stats: &CacheStats,
    file: &OpenFile,
    coding: Coding,
    claim: Option<Claim>,
    now: Instant,
) -> io::Result<Arc<Entry>> {
    let start = Instant::now();
    let size = usize::try_from(file.size).map_err(io::Error::other)?;
    let body = codec::with_encoded(
        levels,
        coding,
        |buf| {
            buf.resize(size, 0);
            file.file.read_exact_at(buf, 0)
        },
        |_, out| Box::<[u8]>::from(out),
    )?;
    let now_on_disk = rustix::fs::fstat(&file.file).map(|st| Identity::of(&st))?;
    if now_on_disk != file.identity {
        return Err(io::Error::other("file changed while it was compressed"));
    }
    stats.compressed(coding, size, body.len(), start.elapsed());
    let entry = variant(file, coding, body, None);
    Ok(match claim {
        Some(claim) => claim.fill(entry, now),
        None => Arc::new(entry),
    })
}

/// A variant of `file` with its head lines formatted once: the file's type
/// and date, the variant's own ETag (the file's with `-gzip`, `-br` or
/// `-zstd` inside the quotes, and for a sidecar its own mtime and size, so
/// other sidecar bytes never share a strong tag), `Content-Encoding` and
/// `Vary`.
fn variant(file: &OpenFile, coding: Coding, body: Box<[u8]>, sidecar: Option<(Box<[u8]>, Identity)>) -> Entry {
    let inner = file.etag.strip_suffix(b"\"").unwrap_or(&file.etag);
    let mut etag = Vec::with_capacity(file.etag.len() + 40);
    etag.extend_from_slice(inner);
    etag.push(b'-');
    etag.extend_from_slice(coding.token().as_bytes());
    if let Some((_, side)) = &sidecar {
        etag.extend_from_slice(format!("-{:x}.{:x}-{:x}", side.mtime_sec, side.mtime_nsec, side.size).as_bytes());
    }
    etag.push(b'"');
    let mut headers = Vec::with_capacity(200);
    response::header(&mut headers, "Content-Type", file.content_type.as_bytes());
    response::header(&mut headers, "Last-Modified", file.last_modified_http.as_bytes());
    response::header(&mut headers, "ETag", &etag);
    response::header(&mut headers, "Content-Encoding", coding.token().as_bytes());
    headers.extend_from_slice(VARY);
    Entry::new(file.identity, sidecar, body, headers.into(), etag.into(), file.last_modified)
}
