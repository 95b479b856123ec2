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
pub mod config;
pub mod load;
pub mod maker;
pub mod workers;

pub use self::maker::VARY;

use std::io;
use std::sync::Arc;

use tern_http::accept_encoding::{Coding, Preferences};
use tern_http::Request;

use self::cache::{Cache, Entry, Key, Lookup};
use self::codec::Levels;
use self::config::CodingName;
use self::load::Thresholds;
use self::maker::{make, Maker};
use self::workers::{Background, Job};
use crate::error_log::{log, Level};
use crate::open_files::OpenFile;
use crate::resolve::Root;
use crate::worker::Worker;

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

/// What a site compresses (its keys of `[compression]`, prepared once):
/// whether, which codings, which files.
#[derive(Debug)]
pub struct Policy {
    enabled: bool,
    offered: Vec<Coding>,
    min_size: u64,
    /// Exact types, and `type/` prefixes for `type/*`.
    mime_types: Vec<String>,
}

impl Policy {
    pub fn new(c: &config::Compression) -> Policy {
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
        Policy {
            enabled: c.enabled && !offered.is_empty(),
            offered,
            min_size: c.min_size.0,
            mime_types: c.mime_types.iter().map(|m| m.trim_end_matches('*').to_ascii_lowercase()).collect(),
        }
    }

    /// Compresses nothing.
    pub fn off() -> Policy {
        Policy { enabled: false, offered: Vec::new(), min_size: 0, mime_types: Vec::new() }
    }

    /// Whether any coding is offered at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Does a file of this type and size have compressed variants (and so
    /// carry `Vary: Accept-Encoding` on every response)? Files above
    /// `max_size` still do: they may have precompressed sidecars.
    pub fn negotiable(&self, content_type: &str, size: u64) -> bool {
        let base = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        self.enabled
            && size >= self.min_size
            && self.mime_types.iter().any(|m| if m.ends_with('/') { base.starts_with(m.as_str()) } else { base == *m })
    }
}

/// The compression machinery one server shares: cache, makers and
/// background threads; each site brings its [`Policy`].
pub struct Compression {
    adaptive: bool,
    thresholds: Thresholds,
    pub cache: Arc<Cache>,
    maker: Arc<Maker>,
    pub background: Background,
}

impl Compression {
    /// Prepares the machinery and starts the background threads.
    pub fn start(c: &config::Compression) -> io::Result<Compression> {
        let levels = Levels { gzip: c.gzip_level, br: c.br_level, zstd: c.zstd_level };
        let cache = Arc::new(Cache::new(c.cache_memory.0, c.idle.0, c.when_full));
        let maker = Arc::new(Maker { levels, max_size: c.max_size.0, sidecars: c.sidecars, cache: cache.clone() });
        let background = Background::start(c.background_threads, c.background_queue, maker.clone())?;
        Ok(Compression {
            adaptive: c.adaptive,
            thresholds: Thresholds { accept_queue: c.busy_accept_queue, in_flight: c.busy_in_flight },
            cache,
            maker,
            background,
        })
    }

    /// Stops the background threads.
    pub fn stop(&self) {
        self.background.stop();
    }

    /// Chooses what a GET or HEAD of `file` (under `root`, negotiated by
    /// `policy`) sends. `fresh`: the file was resolved by this request, so
    /// its identity needs no second look.
    pub fn select(
        &self,
        policy: &Policy,
        root: &Arc<Root>,
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
        let coding = match prefs.choose(&policy.offered) {
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
        if self.adaptive && !identity_refused {
            if let Some(why) = self.thresholds.busy(&w.listeners, &w.server.workers) {
                log!(Level::Debug, "compression of {:?} deferred: {why:?}", String::from_utf8_lossy(&file.rel_path));
                w.stats.compress_deferred.incr();
                // The job looks for a sidecar too: nothing but this
                // bookkeeping happens on the worker while it is busy.
                self.background.submit(Job { claim, root: root.clone(), file: file.clone(), coding });
                return Choice::Identity;
            }
        }
        match self.maker.fill(root, file, coding, claim, w.now) {
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
