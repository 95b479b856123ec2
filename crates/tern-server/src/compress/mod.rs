//! Real-time adaptive compression of static files (SPEC 2.7): which coding
//! a response gets, and where its bytes come from.
//!
//! For a GET or HEAD of a compressible file, [`Compression::select`]
//! negotiates a coding from `Accept-Encoding`, checks the file on disk
//! (one `stat`, so a changed file is never served stale), then:
//!
//! 1. a fresh cached variant: a **hit**, sent from memory;
//! 2. otherwise a **miss** on a cold variant: if the server is busy
//!    ([`load`]), the file is sent uncompressed at once and queued for the
//!    background threads ([`workers`]); if not, the variant is made inline.
//!    Made means ([`Maker::fill`]): loaded from a precompressed sidecar
//!    (`file.gz`, `.br`, `.zst`) not older than the file, else compressed.
//!
//! A variant someone else is already making, or one the cache has no room
//! for, is sent uncompressed: nothing waits and nothing is compressed twice.
//! Range requests get the identity representation (unless the client
//! refuses it). Files that are never compressed (type, size) are not
//! negotiated at all: `Accept-Encoding` is disregarded for them.

pub mod cache;
pub mod codec;
pub mod load;
pub mod workers;

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Instant;

use tern_http::accept_encoding::{Coding, Preferences};
use tern_http::{response, Request};

use self::cache::{Cache, CacheStats, Claim, Entry, Key, Lookup};
use self::codec::Levels;
use self::load::Thresholds;
use self::workers::{Background, Job};
use crate::config::{CodingName, Config, Level};
use crate::error_log::log;
use crate::open_files::{Identity, OpenFile};
use crate::resolve::{Found, Root};
use crate::worker::Worker;

/// The header line every response of a negotiated resource carries.
pub const VARY: &[u8] = b"Vary: Accept-Encoding\r\n";

/// What a response sends.
pub enum Choice {
    /// The file itself, with the configured I/O method.
    Identity,
    /// A compressed variant from memory.
    Compressed(Arc<Entry>),
    /// The client refuses identity and accepts no coding tern can make
    /// for this negotiated resource: `406` (RFC 9110 §12.5.3).
    NotAcceptable,
    /// The file on disk is no longer the one in the open-file table:
    /// resolve the path again and select anew.
    Changed,
}

/// `[compression]`, prepared once.
struct Settings {
    enabled: bool,
    offered: Vec<Coding>,
    min_size: u64,
    /// Exact types, and `type/` prefixes for `type/*`.
    mime_types: Vec<String>,
    adaptive: bool,
    thresholds: Thresholds,
}

/// The compression machinery one server shares: settings, cache and
/// background threads.
pub struct Compression {
    settings: Settings,
    pub cache: Arc<Cache>,
    maker: Arc<Maker>,
    pub background: Background,
}

/// How a variant is made, by a worker inline or by a background thread:
/// from its sidecar when there is one, else compressed.
pub struct Maker {
    levels: Levels,
    /// Larger files get sidecars only.
    max_size: u64,
    /// A descriptor of the document root of its own, so background threads
    /// can look for sidecars (through [`Root::find`], like every open);
    /// `None` when sidecars are off.
    root: Option<Root>,
    cache: Arc<Cache>,
}

impl Compression {
    /// Prepares the settings and starts the background threads.
    pub fn start(config: &Config) -> io::Result<Compression> {
        let c = &config.compression;
        let levels = Levels { gzip: c.gzip_level, br: c.br_level, zstd: c.zstd_level };
        let mut offered: Vec<Coding> = Vec::new();
        for name in &c.codings {
            let coding = match name {
                CodingName::Gzip => Coding::Gzip,
                CodingName::Br => Coding::Br,
                CodingName::Zstd => Coding::Zstd,
            };
            if !offered.contains(&coding) {
                offered.push(coding);
            }
        }
        let cache = Arc::new(Cache::new(c.cache_memory.0, c.idle.0));
        let s = &config.server;
        let root = if c.sidecars {
            Some(Root::open(&s.root, s.symlinks, s.index.clone()).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot open document root {}: {e}", s.root.display()))
            })?)
        } else {
            None
        };
        let maker = Arc::new(Maker { levels, max_size: c.max_size.0, root, cache: cache.clone() });
        let background = Background::start(c.background_threads, c.background_queue, maker.clone())?;
        let settings = Settings {
            enabled: c.enabled && !offered.is_empty(),
            offered,
            min_size: c.min_size.0,
            mime_types: c.mime_types.iter().map(|m| m.trim_end_matches('*').to_ascii_lowercase()).collect(),
            adaptive: c.adaptive,
            thresholds: Thresholds { accept_queue: c.busy_accept_queue, in_flight: c.busy_in_flight },
        };
        Ok(Compression { settings, cache, maker, background })
    }

    /// Whether any coding is offered at all.
    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// Stops the background threads.
    pub fn stop(&self) {
        self.background.stop();
    }

    /// Does a file of this type and size have compressed variants (and so
    /// carry `Vary: Accept-Encoding` on every response)? Files above
    /// `max_size` still do: they may have precompressed sidecars.
    pub fn negotiable(&self, content_type: &str, size: u64) -> bool {
        let base = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        self.settings.enabled
            && size >= self.settings.min_size
            && self.settings.mime_types.iter().any(|m| {
                if m.ends_with('/') {
                    base.starts_with(m.as_str())
                } else {
                    base == *m
                }
            })
    }

    /// Chooses what a GET or HEAD of `file` sends. `fresh`: the file was
    /// resolved by this request, so its identity needs no second look.
    pub fn select(
        &self,
        root: &Root,
        req: &Request<'_>,
        w: &mut Worker<'_>,
        file: &Arc<OpenFile>,
        fresh: bool,
    ) -> Choice {
        // A resource that is never compressed is not subject to
        // negotiation: `Accept-Encoding` is disregarded (RFC 9110 §12.1).
        if !file.negotiable {
            return Choice::Identity;
        }
        let prefs = Preferences::parse(req.values("accept-encoding"));
        // A range is served from the identity representation, unless the
        // client refuses that: then the range is ignored instead.
        if req.fields.range.is_some() && prefs.quality(Coding::Identity) > 0 {
            return Choice::Identity;
        }
        let coding = match prefs.choose(&self.settings.offered) {
            None => return Choice::NotAcceptable,
            Some(Coding::Identity) => return Choice::Identity,
            Some(c) => c,
        };
        if !fresh && root.identity(&file.rel_path).ok() != Some(file.identity) {
            return Choice::Changed;
        }
        // A client that refuses identity is never deferred.
        let identity_refused = prefs.quality(Coding::Identity) == 0;
        let key = Key::new(&file.identity, coding);
        let lookup = self.cache.lookup(key, &file.identity, file.size, w.now);
        let claim = match lookup {
            Lookup::Hit(entry) => {
                if let Some((path, id)) = &entry.sidecar {
                    if root.identity(path).ok() != Some(*id) {
                        // The sidecar changed or went: drop the variant.
                        self.cache.invalidate(key, &entry);
                        return self.uncached(w, file, coding, identity_refused);
                    }
                }
                w.stats.compress_hits.incr();
                return Choice::Compressed(entry);
            }
            Lookup::Busy | Lookup::Full => {
                w.stats.compress_misses.incr();
                return self.uncached(w, file, coding, identity_refused);
            }
            Lookup::Claimed(claim) => claim,
        };
        w.stats.compress_misses.incr();
        if self.settings.adaptive && !identity_refused {
            if let Some(why) = self.settings.thresholds.busy(&w.listeners, &w.shared.stats) {
                log!(Level::Debug, "compression of {:?} deferred: {why:?}", String::from_utf8_lossy(&file.rel_path));
                w.stats.compress_deferred.incr();
                // The job looks for a sidecar too: nothing but this
                // bookkeeping happens on the worker while it is busy.
                self.background.submit(Job { claim, file: file.clone(), coding });
                return Choice::Identity;
            }
        }
        match self.maker.fill(file, coding, claim, w.now) {
            Ok(Some(entry)) => Choice::Compressed(entry),
            // Too large to compress, and no sidecar.
            Ok(None) => self.uncached(w, file, coding, identity_refused),
            Err(e) => {
                log!(Level::Warn, "compression failed: {e}");
                Choice::Identity
            }
        }
    }

    /// No cached variant can be had: identity, unless the client refuses
    /// it — then the variant is made for this response alone.
    fn uncached(&self, w: &Worker<'_>, file: &OpenFile, coding: Coding, identity_refused: bool) -> Choice {
        if !identity_refused {
            return Choice::Identity;
        }
        match make(self.maker.levels, &self.cache.stats, file, coding, None, w.now) {
            Ok(entry) => Choice::Compressed(entry),
            Err(e) => {
                log!(Level::Warn, "compression failed: {e}");
                Choice::Identity
            }
        }
    }
}

impl Maker {
    /// Makes the variant of `file` for `coding` and caches it through
    /// `claim`: its sidecar when there is one not older than the file, else
    /// compressed, unless the file is over `max_size` (`None`, the claim
    /// released).
    pub fn fill(&self, file: &OpenFile, coding: Coding, claim: Claim, now: Instant) -> io::Result<Option<Arc<Entry>>> {
        let claim = match &self.root {
            Some(root) => match self.sidecar(root, file, coding, claim, now) {
                Ok(entry) => return Ok(Some(entry)),
                Err(claim) => claim,
            },
            None => claim,
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
