//! Connections handed from a server being replaced (on reload) to its
//! successor in the same process: the old server's workers pass each
//! connection on as soon as no request is in flight on it, with the bytes
//! already read, and the new server's workers take it like a new one. So a
//! reload closes no connection a client might be sending a request on.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::tls::Session;

/// A connection on its way to another worker.
pub struct Moved {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    /// Bytes read and not yet answered (the start of the next request).
    pub pending: Vec<u8>,
    /// The connection's TLS session, which moves with it.
    pub tls: Option<Box<Session>>,
}

/// The ways into one server's workers: a queue each, and the waker that
/// makes the worker look at it.
pub struct Doors {
    doors: Vec<(Sender<Moved>, Arc<mio::Waker>)>,
    next: AtomicUsize,
}

impl Doors {
    pub fn new(doors: Vec<(Sender<Moved>, Arc<mio::Waker>)>) -> Doors {
        Doors { doors, next: AtomicUsize::new(0) }
    }

    /// Hands `moved` to the next worker in turn (skipping any that has
    /// ended) and wakes it; gives it back when no worker takes it.
    pub fn send(&self, mut moved: Moved) -> Result<(), Moved> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.doors.len() {
            let (queue, waker) = &self.doors[(start + i) % self.doors.len()];
            match queue.send(moved) {
                Ok(()) => {
                    let _ = waker.wake();
                    return Ok(());
                }
                Err(back) => moved = back.0,
            }
        }
        Err(moved)
    }
}
