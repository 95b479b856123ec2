//! `[compression]`: what `compress/` is configured by (the section, its
//! defaults and its rules; `Compression::start` prepares it).

use std::time::Duration;

use serde::Deserialize;

use crate::values::{first_broken, Bytes, Seconds};

/// `[compression]`: real-time adaptive compression of static files
/// (SPEC 2.7). A compressed variant is made once per file and coding, kept
/// in a shared in-memory cache, and checked against the file before every
/// use; under load a cold file is sent uncompressed at once and compressed
/// by background threads instead.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Compression {
    /// False: every response is sent identity, without `Vary`. Default
    /// true.
    pub enabled: bool,
    /// Codings offered, in the order that breaks ties between equal
    /// q-values. Default `["br", "zstd", "gzip"]`.
    pub codings: Vec<CodingName>,
    /// libdeflate level, 1–12. Default 6.
    pub gzip_level: u32,
    /// Brotli quality, 0–11. Default 5 (past 5 it slows sharply).
    pub br_level: u32,
    /// zstd level, 1–19. Default 3.
    pub zstd_level: u32,
    /// Files smaller than this are never compressed. Default 256 bytes.
    pub min_size: Bytes,
    /// Files larger than this are not compressed on the fly (precompressed
    /// sidecars still are served). Default `"8MiB"`.
    pub max_size: Bytes,
    /// MIME types compressed (without parameters); `type/*` matches a whole
    /// family. Default `["text/*", "application/javascript",
    /// "application/json", "application/xml", "application/xhtml+xml",
    /// "application/rss+xml", "application/atom+xml",
    /// "application/manifest+json", "application/wasm", "image/svg+xml",
    /// "image/x-icon", "font/ttf", "font/otf"]`: text, JavaScript, JSON,
    /// XML, SVG, wasm and the fonts that are not compressed already.
    pub mime_types: Vec<String>,
    /// Hard cap on the compressed bytes held in memory. Default `"64MiB"`.
    pub cache_memory: Bytes,
    /// What happens to a new variant when the cache is full. Default
    /// `"evict"`.
    pub when_full: WhenFull,
    /// An entry unused this long is freed. Default `"5m"`.
    pub idle: Seconds,
    /// Whether to defer cold files under load; false compresses every cold
    /// file inline. Default true.
    pub adaptive: bool,
    /// Busy when a worker's listening socket has more connections waiting
    /// to be accepted than this. Default 8.
    pub busy_accept_queue: u64,
    /// Busy when more requests than this have arrived and are not yet
    /// answered, over all workers. Default 32.
    pub busy_in_flight: u64,
    /// Background compression threads (at nice 19). Default 1.
    pub background_threads: usize,
    /// Jobs waiting for the background threads; past it a deferred file is
    /// simply sent uncompressed again. Default 1024.
    pub background_queue: usize,
    /// Serve `file.gz`, `file.br`, `file.zst` when present and not older
    /// than the file. Default true.
    pub sidecars: bool,
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            enabled: true,
            codings: vec![CodingName::Br, CodingName::Zstd, CodingName::Gzip],
            gzip_level: 6,
            br_level: 5,
            zstd_level: 3,
            min_size: Bytes(256),
            max_size: Bytes(8 << 20),
            mime_types: [
                "text/*",
                "application/javascript",
                "application/json",
                "application/xml",
                "application/xhtml+xml",
                "application/rss+xml",
                "application/atom+xml",
                "application/manifest+json",
                "application/wasm",
                "image/svg+xml",
                "image/x-icon",
                "font/ttf",
                "font/otf",
            ]
            .map(String::from)
            .to_vec(),
            cache_memory: Bytes(64 << 20),
            when_full: WhenFull::Evict,
            idle: Seconds(Duration::from_secs(300)),
            adaptive: true,
            busy_accept_queue: 8,
            busy_in_flight: 32,
            background_threads: 1,
            background_queue: 1024,
            sidecars: true,
        }
    }
}

/// `compression.when_full`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenFull {
    /// Admit a variant asked for more often than the least used cached
    /// ones, evicting those (TinyLFU-style).
    Evict,
    /// Cache nothing new until entries go idle: whatever came first stays.
    Refuse,
}

/// A content coding tern can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodingName {
    Gzip,
    Br,
    Zstd,
}

impl Compression {
    /// The keys a `[[site]]` may set in `[site.compression]`: whether and
    /// what to compress; the levels, the cache and its threads are the
    /// whole server's.
    pub const SITE_KEYS: &'static [&'static str] = &["enabled", "codings", "min_size", "mime_types"];

    /// The first rule of `[compression]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (!(1..=12).contains(&self.gzip_level), "gzip_level", "must be between 1 and 12"),
            (self.br_level > 11, "br_level", "must be between 0 and 11"),
            (!(1..=19).contains(&self.zstd_level), "zstd_level", "must be between 1 and 19"),
            (self.max_size.0 < self.min_size.0, "max_size", "must be at least compression.min_size"),
            (self.background_threads == 0, "background_threads", "must be at least 1"),
            (self.background_queue == 0, "background_queue", "must be at least 1"),
            (self.idle.0.is_zero(), "idle", "must be more than 0"),
            (
                self.mime_types.iter().any(|m| !m.contains('/') || m.contains(';')),
                "mime_types",
                "each must be `type/subtype` or `type/*`, without parameters",
            ),
        ])
    }
}
