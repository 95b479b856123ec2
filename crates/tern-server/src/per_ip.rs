//! Open connections per client address (`limits.max_connections_per_ip`,
//! as nginx's `limit_conn`), counted in one table all workers share with no
//! lock: a fixed array of atomic counters indexed by a keyed hash of the
//! address. Two addresses that share a slot share a count (they are
//! limited together, never more loosely); the key is random per process,
//! so a client cannot choose an address that lands on another's slot.

use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

/// Slots in the table: collisions stay rare up to tens of thousands of
/// client addresses, and the table is 256 KiB.
const SLOTS: usize = 1 << 16;

pub struct PerIp {
    limit: u32,
    key: std::collections::hash_map::RandomState,
    counts: Box<[AtomicU32]>,
}

impl PerIp {
    /// A table for `limit` connections per address; `None` when 0 (off).
    pub fn new(limit: u32) -> Option<PerIp> {
        (limit > 0).then(|| PerIp {
            limit,
            key: std::collections::hash_map::RandomState::new(),
            counts: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    fn slot(&self, ip: IpAddr) -> &AtomicU32 {
        // An IPv4-mapped IPv6 address is the same client as its IPv4 form.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let mut h = self.key.build_hasher();
        ip.hash(&mut h);
        &self.counts[std::hash::Hasher::finish(&h) as usize % SLOTS]
    }

    /// Counts a connection from `ip` if it is below the limit; `false`
    /// (and nothing counted) when it is not.
    pub fn admit(&self, ip: IpAddr) -> bool {
        let slot = self.slot(ip);
        if slot.fetch_add(1, Ordering::Relaxed) >= self.limit {
            slot.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Counts a connection from `ip` whatever the limit (one admitted
    /// before, handed over on reload).
    pub fn add(&self, ip: IpAddr) {
        self.slot(ip).fetch_add(1, Ordering::Relaxed);
    }

    /// Uncounts a connection from `ip` that was counted.
    pub fn remove(&self, ip: IpAddr) {
        self.slot(ip).fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_limit_and_a_close_makes_room() {
        let t = PerIp::new(2).unwrap();
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(t.admit(a) && t.admit(a));
        assert!(!t.admit(a), "third from the same address");
        assert!(t.admit(b), "another address is not limited by the first");
        t.remove(a);
        assert!(t.admit(a));
        assert!(!t.admit("::ffff:127.0.0.2".parse().unwrap()), "the mapped form is the same client");
        assert!(PerIp::new(0).is_none());
    }

    #[test]
    fn concurrent_admits_never_exceed_the_limit() {
        let t = PerIp::new(50).unwrap();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let admitted: u32 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| (0..1000).filter(|_| t.admit(ip)).count() as u32)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 50);
    }
}
