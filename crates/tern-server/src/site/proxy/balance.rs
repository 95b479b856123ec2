//! Which server of an upstream group gets a request: weighted round robin
//! (a schedule spread by weight, walked by one atomic counter), least
//! connections (requests in flight per unit of weight), or a consistent
//! hash (a ring of points per server, so a server that leaves moves only
//! the keys that were its own). Servers a request may not use — marked
//! down, or tried already by this request — are passed over.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::config::Balance;

/// Points on the hash ring per unit of weight.
const POINTS: usize = 160;

pub struct Balancer {
    how: Balance,
    weights: Vec<usize>,
    /// Round robin: server numbers in the order they are served, each as
    /// often as its weight, spread out (smooth weighted round robin).
    schedule: Vec<usize>,
    next: AtomicUsize,
    /// Hash: `(point, server)`, sorted by point.
    ring: Vec<(u64, usize)>,
}

impl Balancer {
    /// For servers of these weights; `names` place them on the ring.
    pub fn new(how: Balance, weights: &[usize], names: &[String]) -> Balancer {
        let mut ring = Vec::new();
        if how == Balance::Hash {
            for (server, name) in names.iter().enumerate() {
                for i in 0..POINTS * weights[server] {
                    ring.push((hash(format!("{name}#{i}").as_bytes()), server));
                }
            }
            ring.sort_unstable();
        }
        Balancer { how, weights: weights.to_vec(), schedule: smooth(weights), next: AtomicUsize::new(0), ring }
    }

    /// The server for a request: `key` is its hash key (for `hash`),
    /// `active[i]` server i's requests in flight (for least connections),
    /// and `may(i)` whether it may use server i. `None`: none may be used.
    pub fn pick(&self, key: &[u8], active: impl Fn(usize) -> usize, may: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.weights.len();
        match self.how {
            Balance::RoundRobin => {
                let start = self.next.fetch_add(1, Relaxed);
                let len = self.schedule.len();
                (0..len).map(|k| self.schedule[(start + k) % len]).find(|&i| may(i))
            }
            Balance::LeastConnections => {
                // Ties go round, from a moving start.
                let start = self.next.fetch_add(1, Relaxed);
                (0..n)
                    .map(|k| (start + k) % n)
                    .filter(|&i| may(i))
                    .min_by(|&a, &b| (active(a) * self.weights[b]).cmp(&(active(b) * self.weights[a])))
            }
            Balance::Hash => {
                let h = hash(key);
                let at = self.ring.partition_point(|&(p, _)| p < h);
                let len = self.ring.len();
                (0..len).map(|k| self.ring[(at + k) % len].1).find(|&i| may(i))
            }
        }
    }
}

/// Server numbers spread by weight: each step, every server gains its
/// weight and the one ahead is served and pays the total back (nginx's
/// smooth weighted round robin), so `[5, 1, 1]` serves
/// `0 0 1 0 2 0 0`, not `0 0 0 0 0 1 2`.
fn smooth(weights: &[usize]) -> Vec<usize> {
    let total: usize = weights.iter().sum();
    let mut current = vec![0isize; weights.len()];
    (0..total)
        .map(|_| {
            for (c, &w) in current.iter_mut().zip(weights) {
                *c += w as isize;
            }
            let best = (0..weights.len()).max_by_key(|&i| (current[i], std::cmp::Reverse(i))).unwrap_or(0);
            current[best] -= total as isize;
            best
        })
        .collect()
}

/// FNV-1a, then a finaliser to spread the bits: stable from one run to
/// the next, so a key keeps its server across restarts too.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    #[test]
    fn round_robin_follows_the_weights_smoothly() {
        assert_eq!(smooth(&[5, 1, 1]), [0, 0, 1, 0, 2, 0, 0]);
        let b = Balancer::new(Balance::RoundRobin, &[2, 1], &names(2));
        let picks: Vec<_> = (0..6).map(|_| b.pick(b"", |_| 0, |_| true).unwrap()).collect();
        assert_eq!(picks, [0, 1, 0, 0, 1, 0]);
        // A server that may not be used is passed over.
        let picks: Vec<_> = (0..3).map(|_| b.pick(b"", |_| 0, |i| i == 1).unwrap()).collect();
        assert_eq!(picks, [1, 1, 1]);
        assert_eq!(b.pick(b"", |_| 0, |_| false), None);
    }

    #[test]
    fn least_connections_weighs_what_is_in_flight() {
        let b = Balancer::new(Balance::LeastConnections, &[1, 1, 2], &names(3));
        let active = [3, 1, 3];
        // 1 in flight at weight 1 beats 3 at weight 2 (1.5 per unit).
        assert_eq!(b.pick(b"", |i| active[i], |_| true), Some(1));
        assert_eq!(b.pick(b"", |i| active[i], |i| i != 1), Some(2));
    }

    #[test]
    fn a_server_that_leaves_moves_only_its_own_keys() {
        let b = Balancer::new(Balance::Hash, &[1, 1, 1, 1], &names(4));
        let keys: Vec<String> = (0..4000).map(|i| format!("client-{i}")).collect();
        let before: Vec<usize> = keys.iter().map(|k| b.pick(k.as_bytes(), |_| 0, |_| true).unwrap()).collect();
        for s in 0..4 {
            let share = before.iter().filter(|&&x| x == s).count();
            assert!((700..1300).contains(&share), "server {s} has {share} of 4000 keys");
        }
        // Server 2 leaves: its keys move, no other key does.
        let after: Vec<usize> = keys.iter().map(|k| b.pick(k.as_bytes(), |_| 0, |i| i != 2).unwrap()).collect();
        for (was, now) in before.iter().zip(&after) {
            if *was != 2 {
                assert_eq!(was, now);
            } else {
                assert_ne!(*now, 2);
            }
        }
    }
}
