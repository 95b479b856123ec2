//! Connections handed from a server being replaced (on reload) to its
//! successor in the same process: the old server's workers pass each
//! connection on as soon as no request is in flight on it, with the bytes
//! already read, and the new server's workers take it like a new one. So a
//! reload closes no connection a client might be sending a request on —
//! even when the successor has itself been replaced and has ended by then
//! (two reloads while a long request runs): the connection goes on down
//! the line of successors to the newest server.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};

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
/// makes the worker look at it; and the server that replaced it, once one
/// has.
pub struct Doors {
    doors: Vec<Door>,
    next: AtomicUsize,
    successor: OnceLock<Arc<Doors>>,
}

/// A worker's queue, closed (none) once the worker has ended: a
/// connection sent is then either taken by the worker or refused, never
/// left in a queue nobody reads.
struct Door {
    queue: Mutex<Option<Sender<Moved>>>,
    waker: Arc<mio::Waker>,
}

impl Doors {
    pub fn new(doors: Vec<(Sender<Moved>, Arc<mio::Waker>)>) -> Doors {
        let doors = doors.into_iter().map(|(queue, waker)| Door { queue: Mutex::new(Some(queue)), waker }).collect();
        Doors { doors, next: AtomicUsize::new(0), successor: OnceLock::new() }
    }

    /// Records the server that replaces this one.
    pub fn succeeded_by(&self, successor: Arc<Doors>) {
        let _ = self.successor.set(successor);
    }

    /// The server that replaced this one, if one has.
    pub fn successor(&self) -> Option<&Arc<Doors>> {
        self.successor.get()
    }

    /// Hands `moved` to the next worker in turn (skipping any that has
    /// ended) and wakes it; when every worker here has ended, to this
    /// server's successor, and so on; gives it back when none takes it.
    pub fn send(&self, mut moved: Moved) -> Result<(), Moved> {
        let mut server = self;
        loop {
            match server.send_here(moved) {
                Ok(()) => return Ok(()),
                Err(back) => moved = back,
            }
            match server.successor.get() {
                Some(next) => server = next,
                None => return Err(moved),
            }
        }
    }

    fn send_here(&self, mut moved: Moved) -> Result<(), Moved> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.doors.len() {
            let door = &self.doors[(start + i) % self.doors.len()];
            let queue = door.queue.lock().unwrap_or_else(|e| e.into_inner());
            let Some(queue) = queue.as_ref() else { continue };
            // (Refused when the worker died without closing its door.)
            match queue.send(moved) {
                Ok(()) => {
                    let _ = door.waker.wake();
                    return Ok(());
                }
                Err(back) => moved = back.0,
            }
        }
        Err(moved)
    }

    /// Closes worker `index`'s door, as it ends: whatever is sent from now
    /// on goes elsewhere, and what its queue holds is its to pass on.
    pub fn close(&self, index: usize) {
        if let Some(door) = self.doors.get(index) {
            *door.queue.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}
