//! Room at the connection cap across workers. A worker at
//! `server.max_connections` closes its own longest-idle keep-alive
//! connection to admit a new one; when it has none, it asks a worker that
//! has one to close it, so the cap is server-wide in effect and a new
//! client is not refused while idle connections are held anywhere. A
//! "worker" here is a thread that accepts and holds connections in its
//! epoll set (an event worker, a pool front): `engine/front.rs` drives
//! this for every engine.
//!
//! No lock, and nothing per request: each worker publishes how many of its
//! connections are idle with a plain store once per event-loop turn, and
//! only a worker at the cap reads the others' counts. The one it asks
//! admits the new client at once; the server is over the cap by one for
//! the moment it takes the other worker to wake and close its idle
//! connection (asks are claimed against the published counts, so two
//! workers cannot both take the last idle one). A count is up to one
//! loop turn old: a connection that stopped being idle since may still be
//! asked for, and then the new client is admitted with nothing closed, so
//! the server can run over the cap by at most the idle counts it published.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// How an engine rouses one of its workers from its wait.
pub type Wake = Box<dyn Fn() + Send + Sync>;

pub struct Room {
    workers: Box<[Slot]>,
}

#[derive(Default)]
#[repr(align(64))]
struct Slot {
    /// Idle keep-alive connections, as its worker last published.
    idle: AtomicUsize,
    /// Idle connections other workers asked it to close.
    asked: AtomicUsize,
    wake: OnceLock<Wake>,
}

impl Room {
    pub fn new(workers: usize) -> Room {
        Room { workers: (0..workers).map(|_| Slot::default()).collect() }
    }

    /// How worker `index` is woken when another asks it for room (its
    /// engine's waker; an engine that lends none is never asked).
    pub fn lend_wake(&self, index: usize, wake: Wake) {
        if let Some(slot) = self.workers.get(index) {
            let _ = slot.wake.set(wake);
        }
    }

    /// Worker `index` has `idle` idle keep-alive connections.
    pub fn publish(&self, index: usize, idle: usize) {
        let slot = &self.workers[index];
        if slot.idle.load(Relaxed) != idle {
            slot.idle.store(idle, Relaxed);
        }
    }

    /// Worker `from`, at the cap with no idle connection of its own, asks
    /// another worker to close one; true when one was asked (and woken).
    pub fn ask(&self, from: usize) -> bool {
        let n = self.workers.len();
        for slot in (1..n).map(|i| &self.workers[(from + i) % n]) {
            let Some(wake) = slot.wake.get() else { continue };
            let idle = slot.idle.load(Relaxed);
            let claimed = slot.asked.fetch_update(Relaxed, Relaxed, |asked| (asked < idle).then_some(asked + 1));
            if claimed.is_ok() {
                wake();
                return true;
            }
        }
        false
    }

    /// How many idle connections worker `index` was asked to close since it
    /// last looked (the asks are taken).
    pub fn take_asked(&self, index: usize) -> usize {
        let slot = &self.workers[index];
        if slot.asked.load(Relaxed) == 0 {
            return 0;
        }
        slot.asked.swap(0, Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn asks_only_a_woken_worker_with_idle_connections_and_never_more_than_it_has() {
        let room = Room::new(3);
        let woken: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
        for i in 0..3 {
            let woken = woken.clone();
            room.lend_wake(i, Box::new(move || _ = woken[i].fetch_add(1, Relaxed)));
        }
        assert!(!room.ask(0), "nobody has idle connections");
        room.publish(2, 2);
        room.publish(0, 5);
        assert!(room.ask(0) && room.ask(0), "worker 2 has two");
        assert!(!room.ask(0), "both of worker 2's were claimed; a worker never asks itself");
        assert_eq!(woken[2].load(Relaxed), 2);
        assert_eq!(woken[0].load(Relaxed), 0);
        assert_eq!(room.take_asked(2), 2);
        assert_eq!(room.take_asked(2), 0);
        // Worker 2 closed both and says so; worker 0 still has idle ones.
        room.publish(2, 0);
        assert!(room.ask(1), "worker 1 may ask worker 0");
        assert_eq!(woken[0].load(Relaxed), 1);
        assert_eq!(room.take_asked(0), 1);
    }
}
