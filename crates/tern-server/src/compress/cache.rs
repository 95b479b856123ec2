//! The compressed cache, shared by every worker and background thread.
//!
//! Keyed by file identity (device, inode) and coding. Each entry remembers
//! the full identity it was made from (size and mtime too), so a caller
//! that has just looked at the file can tell a fresh entry from a stale one.
//!
//! - **Locking**: 16 shards, each an `RwLock<HashMap>`. A hit takes one
//!   shard's read lock for the map lookup and an `Arc` clone, nothing else;
//!   the body is sent after the lock is released, straight from the `Arc`.
//! - **Budget**: every entry reserves its bytes before it is inserted and
//!   gives them back when its last reference goes (an evicted entry still
//!   being sent keeps counting). Reservation is a compare-and-swap that
//!   fails instead of passing the cap, so the cap is never exceeded.
//! - **When full** (`compression.when_full`): `refuse` caches nothing new
//!   past the cap (whatever came first stays). `evict`, the default, is a
//!   TinyLFU-style admission: every miss is counted in a small count-min
//!   sketch, every hit on its entry; a variant that does not fit is
//!   admitted only if it has been asked for more often than the least used
//!   entries of a sample of shards, which are then evicted to make room
//!   (least used first, then least recently). Counts are halved every
//!   [`AGE_EVERY`], so yesterday's hot pages do not stay forever. A hit
//!   pays one relaxed atomic add for this, on the line its `Arc` clone
//!   touches anyway.
//! - **Single flight**: the first miss on a key inserts a `Busy` slot and
//!   gets a [`Claim`]; later misses see `Busy` and do not compress. The
//!   claim fills the slot, or removes it when dropped unfilled (a failed
//!   read, a full queue, a panic), so a key is never stuck.
//! - **Eviction**: [`Cache::sweep`], run periodically by a background
//!   thread, drops entries unused for the idle interval; a stale entry is
//!   replaced by the next claim on its key.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tern_http::accept_encoding::Coding;

use super::config::WhenFull;
use crate::open_files::Identity;

const SHARDS: usize = 16;
/// Shards searched for entries to evict when a variant does not fit.
const VICTIM_SHARDS: usize = 4;
/// How often use counts are halved.
pub const AGE_EVERY: Duration = Duration::from_secs(10);
/// Count-min sketch: rows × counters per row (a power of two).
const SKETCH_ROWS: usize = 4;
const SKETCH_WIDTH: usize = 4096;
/// Bytes charged per entry beyond its body and head lines: the entry, the
/// map slot, the allocations' headers.
pub const ENTRY_OVERHEAD: u64 = 192;

/// Which variant of which file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub dev: u64,
    pub ino: u64,
    pub coding: Coding,
}

impl Key {
    pub fn new(identity: &Identity, coding: Coding) -> Key {
        Key { dev: identity.dev, ino: identity.ino, coding }
    }
}

/// A compressed variant, ready to send.
pub struct Entry {
    /// The file it was made from.
    pub identity: Identity,
    /// When it came from a precompressed sidecar: that file's path
    /// (relative to the root) and identity, checked before each use too.
    pub sidecar: Option<(Box<[u8]>, Identity)>,
    body: Box<[u8]>,
    /// `Content-Type`, `Last-Modified`, `ETag`, `Content-Encoding` and
    /// `Vary` lines, formatted once.
    pub headers: Box<[u8]>,
    /// The variant's strong entity tag, quotes included.
    pub etag: Box<[u8]>,
    pub last_modified: u64,
    /// Seconds since the cache's epoch at the last use.
    last_used: AtomicU64,
    /// Uses (the misses before it was made, then its hits), halved every
    /// [`AGE_EVERY`]: what eviction compares.
    uses: AtomicU32,
    /// Bytes reserved against the budget, given back on drop (none for an
    /// entry that could not be cached).
    reserved: Option<(Arc<Budget>, u64)>,
}

impl Entry {
    pub fn new(
        identity: Identity,
        sidecar: Option<(Box<[u8]>, Identity)>,
        body: Box<[u8]>,
        headers: Box<[u8]>,
        etag: Box<[u8]>,
        last_modified: u64,
    ) -> Entry {
        Entry {
            identity,
            sidecar,
            body,
            headers,
            etag,
            last_modified,
            last_used: AtomicU64::new(0),
            uses: AtomicU32::new(0),
            reserved: None,
        }
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The bytes this entry costs the budget.
    pub fn cost(&self) -> u64 {
        (self.body.len() + self.headers.len() + self.etag.len()) as u64
            + self.sidecar.as_ref().map_or(0, |(p, _)| p.len() as u64)
            + ENTRY_OVERHEAD
    }
}

impl AsRef<[u8]> for Entry {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some((budget, n)) = &self.reserved {
            budget.used.fetch_sub(*n, Relaxed);
        }
    }
}

/// The byte budget: bytes held by cached entries (live ones included
/// after eviction, until their last response is sent).
#[derive(Debug)]
pub struct Budget {
    cap: u64,
    used: AtomicU64,
}

impl Budget {
    /// Reserves `n` bytes unless that would pass the cap.
    fn reserve(&self, n: u64) -> bool {
        self.used.fetch_update(Relaxed, Relaxed, |used| used.checked_add(n).filter(|&total| total <= self.cap)).is_ok()
    }

    fn would_fit(&self, n: u64) -> bool {
        self.used.load(Relaxed).saturating_add(n) <= self.cap
    }
}

enum Slot {
    Ready(Arc<Entry>),
    /// Being compressed (inline or queued for a background thread).
    Busy,
}

/// Counters shared by everything that fills or sweeps the cache; touched
/// on misses and sweeps only, never on a hit.
#[derive(Default, Debug)]
pub struct CacheStats {
    /// Per coding (gzip, br, zstd): compressions done, bytes in, bytes out,
    /// nanoseconds spent.
    pub compressions: [AtomicU64; 3],
    pub bytes_in: [AtomicU64; 3],
    pub bytes_out: [AtomicU64; 3],
    pub nanos: [AtomicU64; 3],
    /// Variants loaded from precompressed sidecar files.
    pub sidecars: AtomicU64,
    /// Entries dropped for idleness.
    pub evictions: AtomicU64,
    /// Entries replaced because their file changed.
    pub stale: AtomicU64,
    /// Variants not cached because the memory cap was reached.
    pub full: AtomicU64,
    /// Entries evicted to make room for more used ones (`when_full =
    /// "evict"`).
    pub displaced: AtomicU64,
    /// Ready entries in the map.
    pub entries: AtomicU64,
}

impl CacheStats {
    /// Records one compression.
    pub fn compressed(&self, coding: Coding, bytes_in: usize, bytes_out: usize, took: Duration) {
        if let Some(i) = coding_index(coding) {
            self.compressions[i].fetch_add(1, Relaxed);
            self.bytes_in[i].fetch_add(bytes_in as u64, Relaxed);
            self.bytes_out[i].fetch_add(bytes_out as u64, Relaxed);
            self.nanos[i].fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Relaxed);
        }
    }
}

/// Index of a compressed coding in the per-coding counters.
pub fn coding_index(coding: Coding) -> Option<usize> {
    match coding {
        Coding::Gzip => Some(0),
        Coding::Br => Some(1),
        Coding::Zstd => Some(2),
        Coding::Identity => None,
    }
}

/// The outcome of a lookup.
pub enum Lookup {
    /// A fresh entry.
    Hit(Arc<Entry>),
    /// Another request is compressing this variant right now.
    Busy,
    /// Nothing fresh: the caller now owns the compression of this variant.
    Claimed(Claim),
    /// Nothing fresh, and the cache has no room for it.
    Full,
}

/// How often each key was missed lately (a count-min sketch of 8-bit
/// saturating counters): the frequency of variants not in the cache.
struct Sketch(Box<[AtomicU8]>);

impl Sketch {
    fn new() -> Sketch {
        Sketch((0..SKETCH_ROWS * SKETCH_WIDTH).map(|_| AtomicU8::new(0)).collect())
    }

    fn slots(hash: u64) -> impl Iterator<Item = usize> {
        let step = (hash >> 32) | 1;
        (0..SKETCH_ROWS).map(move |row| {
            row * SKETCH_WIDTH + (hash.wrapping_add(step.wrapping_mul(row as u64)) as usize & (SKETCH_WIDTH - 1))
        })
    }

    /// Counts one more miss of `hash`; returns its estimated count.
    fn add(&self, hash: u64) -> u32 {
        Sketch::slots(hash)
            .map(|i| {
                let c = &self.0[i];
                let n = c.load(Relaxed).saturating_add(1);
                c.store(n, Relaxed);
                u32::from(n)
            })
            .min()
            .unwrap_or(0)
    }

    fn halve(&self) {
        for c in self.0.iter() {
            c.store(c.load(Relaxed) / 2, Relaxed);
        }
    }
}

pub struct Cache {
    shards: Box<[RwLock<HashMap<Key, Slot>>]>,
    hasher: RandomState,
    budget: Arc<Budget>,
    idle: Duration,
    epoch: Instant,
    when_full: WhenFull,
    sketch: Sketch,
    /// The next shard to look for victims in.
    cursor: AtomicUsize,
    /// Tick of the last halving of the use counts.
    aged: AtomicU64,
    pub stats: CacheStats,
}

impl Cache {
    pub fn new(cap: u64, idle: Duration, when_full: WhenFull) -> Cache {
        Cache {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            budget: Arc::new(Budget { cap, used: AtomicU64::new(0) }),
            idle,
            epoch: Instant::now(),
            when_full,
            sketch: Sketch::new(),
            cursor: AtomicUsize::new(0),
            aged: AtomicU64::new(0),
            stats: CacheStats::default(),
        }
    }

    fn shard(&self, key: &Key) -> &RwLock<HashMap<Key, Slot>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    fn tick(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs()
    }

    pub fn when_full(&self) -> WhenFull {
        self.when_full
    }

    /// Bytes held now, and the cap.
    pub fn memory(&self) -> (u64, u64) {
        (self.budget.used.load(Relaxed), self.budget.cap)
    }

    /// The entry for `key` if it was made from `identity`; otherwise
    /// claims the variant for the caller to make (`estimate`: bytes it
    /// may take, checked against the budget first).
    pub fn lookup(self: &Arc<Self>, key: Key, identity: &Identity, estimate: u64, now: Instant) -> Lookup {
        let shard = self.shard(&key);
        let tick = self.tick(now);
        let fresh = |slot: Option<&Slot>| match slot {
            Some(Slot::Ready(e)) if e.identity == *identity => {
                // One store a second at most: the line is shared.
                if e.last_used.load(Relaxed) != tick {
                    e.last_used.store(tick, Relaxed);
                }
                e.uses.fetch_add(1, Relaxed);
                Some(Lookup::Hit(e.clone()))
            }
            Some(Slot::Busy) => Some(Lookup::Busy),
            _ => None,
        };
        if let Some(found) = fresh(shard.read().unwrap_or_else(|e| e.into_inner()).get(&key)) {
            return found;
        }
        let mut map = shard.write().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = fresh(map.get(&key)) {
            return found;
        }
        let uses = self.sketch.add(self.hasher.hash_one(key));
        let needed = estimate + ENTRY_OVERHEAD;
        if !self.budget.would_fit(needed) {
            // Room is made with one shard locked at a time, never two.
            drop(map);
            if self.when_full == WhenFull::Refuse || !self.make_room(needed, uses) {
                self.stats.full.fetch_add(1, Relaxed);
                return Lookup::Full;
            }
            map = shard.write().unwrap_or_else(|e| e.into_inner());
            if let Some(found) = fresh(map.get(&key)) {
                return found;
            }
        }
        if let Some(Slot::Ready(_)) = map.insert(key, Slot::Busy) {
            self.stats.stale.fetch_add(1, Relaxed);
            self.stats.entries.fetch_sub(1, Relaxed);
        }
        Lookup::Claimed(Claim { cache: self.clone(), key, filled: false, uses })
    }

    /// Evicts entries used less than `uses` times, least used (then least
    /// recently used) first, from a few shards in turn, until `needed`
    /// bytes would fit; false if they still would not. Empty shards are
    /// passed over without counting: a small cache's entries may all sit in
    /// shards the first few tried would miss (with 19 entries in 16 shards,
    /// four shards hold none about once in 240 tries).
    fn make_room(&self, needed: u64, uses: u32) -> bool {
        let mut searched = 0;
        for _ in 0..SHARDS {
            if searched == VICTIM_SHARDS {
                break;
            }
            let i = self.cursor.fetch_add(1, Relaxed) % SHARDS;
            let mut map = self.shards[i].write().unwrap_or_else(|e| e.into_inner());
            if map.is_empty() {
                continue;
            }
            searched += 1;
            let mut victims: Vec<(u32, u64, Key)> = map
                .iter()
                .filter_map(|(k, slot)| match slot {
                    Slot::Ready(e) => {
                        let n = e.uses.load(Relaxed);
                        (n < uses).then(|| (n, e.last_used.load(Relaxed), *k))
                    }
                    Slot::Busy => None,
                })
                .collect();
            victims.sort_unstable_by_key(|&(n, last, _)| (n, last));
            for (_, _, key) in victims {
                if self.budget.would_fit(needed) {
                    return true;
                }
                map.remove(&key);
                self.stats.displaced.fetch_add(1, Relaxed);
                self.stats.entries.fetch_sub(1, Relaxed);
            }
            if self.budget.would_fit(needed) {
                return true;
            }
        }
        false
    }

    /// Removes `entry` from the map if it is still the one under `key`
    /// (its sidecar changed on disk).
    pub fn invalidate(&self, key: Key, entry: &Arc<Entry>) {
        let mut map = self.shard(&key).write().unwrap_or_else(|e| e.into_inner());
        if matches!(map.get(&key), Some(Slot::Ready(e)) if Arc::ptr_eq(e, entry)) {
            map.remove(&key);
            self.stats.stale.fetch_add(1, Relaxed);
            self.stats.entries.fetch_sub(1, Relaxed);
        }
    }

    /// Drops the entries unused for the idle interval (and halves the use
    /// counts every [`AGE_EVERY`]); returns how many were dropped.
    pub fn sweep(&self, now: Instant) -> u64 {
        let tick = self.tick(now);
        let age = tick >= self.aged.load(Relaxed) + AGE_EVERY.as_secs();
        if age {
            self.aged.store(tick, Relaxed);
            self.sketch.halve();
        }
        let limit = tick.checked_sub(self.idle.as_secs().max(1));
        let mut evicted = 0;
        for shard in self.shards.iter() {
            let mut map = shard.write().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, slot| match slot {
                Slot::Ready(e) if limit.is_some_and(|limit| e.last_used.load(Relaxed) < limit) => {
                    evicted += 1;
                    false
                }
                Slot::Ready(e) => {
                    if age {
                        e.uses.store(e.uses.load(Relaxed) / 2, Relaxed);
                    }
                    true
                }
                Slot::Busy => true,
            });
        }
        self.stats.evictions.fetch_add(evicted, Relaxed);
        self.stats.entries.fetch_sub(evicted, Relaxed);
        evicted
    }

    /// How often [`Cache::sweep`] should run: often enough that an entry
    /// goes within about a second of its idle time.
    pub fn sweep_interval(&self) -> Duration {
        (self.idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(1))
    }
}

/// The right, and duty, to make one variant (see the module comment).
pub struct Claim {
    cache: Arc<Cache>,
    key: Key,
    filled: bool,
    /// The variant's misses so far: its entry starts with them.
    uses: u32,
}

impl Claim {
    pub fn key(&self) -> Key {
        self.key
    }

    /// Caches `entry` when the budget allows; either way returns it, ready
    /// to send (uncached, it lives as long as its responses).
    pub fn fill(mut self, mut entry: Entry, now: Instant) -> Arc<Entry> {
        let cache = &self.cache;
        let cost = entry.cost();
        let cached = cache.budget.reserve(cost);
        if cached {
            entry.reserved = Some((cache.budget.clone(), cost));
        } else {
            cache.stats.full.fetch_add(1, Relaxed);
        }
        entry.last_used.store(cache.tick(now), Relaxed);
        entry.uses.store(self.uses, Relaxed);
        let entry = Arc::new(entry);
        let mut map = cache.shard(&self.key).write().unwrap_or_else(|e| e.into_inner());
        if cached {
            map.insert(self.key, Slot::Ready(entry.clone()));
            cache.stats.entries.fetch_add(1, Relaxed);
        } else {
            map.remove(&self.key);
        }
        self.filled = true;
        entry
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.filled {
            let mut map = self.cache.shard(&self.key).write().unwrap_or_else(|e| e.into_inner());
            if let Some(Slot::Busy) = map.get(&self.key) {
                map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(ino: u64, size: u64, mtime: i64) -> Identity {
        Identity { dev: 1, ino, size, mtime_sec: mtime, mtime_nsec: 0 }
    }

    fn entry(id: Identity, body: usize) -> Entry {
        Entry::new(id, None, vec![7; body].into(), b"X: y\r\n"[..].into(), b"\"e\""[..].into(), 0)
    }

    fn claim(cache: &Arc<Cache>, id: &Identity, now: Instant) -> Claim {
        match cache.lookup(Key::new(id, Coding::Gzip), id, id.size, now) {
            Lookup::Claimed(c) => c,
            _ => panic!("expected a claim"),
        }
    }

    #[test]
    fn single_flight_then_hit_then_stale() {
        let cache = Arc::new(Cache::new(1 << 20, Duration::from_secs(60), WhenFull::Refuse));
        let now = Instant::now();
        let id = identity(5, 1000, 10);
        let key = Key::new(&id, Coding::Gzip);
        let c = claim(&cache, &id, now);
        assert!(matches!(cache.lookup(key, &id, 1000, now), Lookup::Busy));
        c.fill(entry(id, 300), now);
        assert!(matches!(cache.lookup(key, &id, 1000, now), Lookup::Hit(_)));
        // The same inode changed on disk: the old entry is not served.
        let changed = identity(5, 1001, 11);
        let c = claim(&cache, &changed, now);
        assert_eq!(cache.stats.stale.load(Relaxed), 1);
        assert!(matches!(cache.lookup(key, &id, 1000, now), Lookup::Busy));
        // A claim dropped unfilled frees the key.
        drop(c);
        assert!(matches!(cache.lookup(key, &changed, 1001, now), Lookup::Claimed(_)));
    }

    #[test]
    fn the_cap_is_never_exceeded() {
        let cap = 100_000;
        let cache = Arc::new(Cache::new(cap, Duration::from_secs(60), WhenFull::Refuse));
        let now = Instant::now();
        let (mut cached, mut refused) = (0, 0);
        for ino in 0..1000 {
            let id = identity(ino, 900, 1);
            match cache.lookup(Key::new(&id, Coding::Gzip), &id, 900, now) {
                Lookup::Claimed(c) => {
                    let e = c.fill(entry(id, 500), now);
                    if e.reserved.is_some() {
                        cached += 1;
                    }
                }
                Lookup::Full => refused += 1,
                _ => unreachable!(),
            }
            assert!(cache.memory().0 <= cap);
        }
        assert!(cached > 100 && refused > 500, "{cached} cached, {refused} refused");
        assert!(cache.memory().0 > cap - 2000);
        assert_eq!(cache.stats.entries.load(Relaxed), cached);
    }

    #[test]
    fn idle_entries_are_swept_and_memory_returns() {
        let cache = Arc::new(Cache::new(1 << 20, Duration::from_secs(2), WhenFull::Refuse));
        let start = Instant::now();
        let a = identity(1, 1000, 1);
        let b = identity(2, 1000, 1);
        claim(&cache, &a, start).fill(entry(a, 400), start);
        let held = claim(&cache, &b, start).fill(entry(b, 400), start);
        assert_eq!(cache.sweep(start + Duration::from_secs(2)), 0);
        // `a` is used again at 2 s; `b` is not.
        assert!(matches!(
            cache.lookup(Key::new(&a, Coding::Gzip), &a, 0, start + Duration::from_secs(2)),
            Lookup::Hit(_)
        ));
        assert_eq!(cache.sweep(start + Duration::from_secs(3)), 1);
        assert_eq!(cache.stats.evictions.load(Relaxed), 1);
        // An evicted entry still being sent keeps its bytes counted.
        let before = cache.memory().0;
        assert!(before >= 2 * 400);
        drop(held);
        assert_eq!(cache.memory().0, before - (400 + 6 + 3 + ENTRY_OVERHEAD));
    }

    #[test]
    fn evict_admits_what_is_asked_for_more_often_and_keeps_the_cap() {
        let cap = 20_000;
        let cache = Arc::new(Cache::new(cap, Duration::from_secs(60), WhenFull::Evict));
        let now = Instant::now();
        let fill = |ino: u64| {
            let id = identity(ino, 900, 1);
            match cache.lookup(Key::new(&id, Coding::Gzip), &id, 900, now) {
                Lookup::Claimed(c) => {
                    c.fill(entry(id, 800), now);
                    true
                }
                Lookup::Full => false,
                _ => unreachable!(),
            }
        };
        // Cold: each asked for once; past the cap they are refused, not
        // swapped for each other.
        let cold: Vec<bool> = (0..40).map(fill).collect();
        assert!(cold.iter().any(|&c| !c) && cache.memory().0 <= cap);
        let refused = cold.iter().position(|&c| !c).unwrap() as u64;
        let displaced = cache.stats.displaced.load(Relaxed);
        assert_eq!(displaced, 0);
        // Asked for again: more than any cached one, so it gets in.
        assert!(fill(refused));
        assert!(cache.stats.displaced.load(Relaxed) > 0 && cache.memory().0 <= cap);
        let id = identity(refused, 900, 1);
        assert!(matches!(cache.lookup(Key::new(&id, Coding::Gzip), &id, 900, now), Lookup::Hit(_)));
    }
}
