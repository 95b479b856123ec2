//! What a handler is handed besides the request — the connection's two
//! ends — and what it hands back ([`Answer`]).

use std::cell::OnceCell;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use super::backend::Job;
use crate::offload::Ticket;

/// The two ends of a client connection. The local end is asked of the
/// kernel (`getsockname`) the first time something needs it (the TLS role
/// of the address, an HTTPS redirect, CGI and FastCGI variables) and kept:
/// a connection that only fetches files never pays that system call.
#[derive(Debug)]
pub struct Peers {
    pub peer: SocketAddr,
    local: OnceCell<SocketAddr>,
}

impl Peers {
    pub fn new(peer: SocketAddr) -> Peers {
        Peers { peer, local: OnceCell::new() }
    }

    /// The address `sock` (this connection's socket) was reached at; the
    /// peer's when the kernel cannot say.
    pub fn local(&self, sock: &TcpStream) -> SocketAddr {
        *self.local.get_or_init(|| sock.local_addr().unwrap_or(self.peer))
    }
}

/// A connection's ends as a handler sees them.
#[derive(Clone, Copy)]
pub struct Ends<'a> {
    pub peers: &'a Peers,
    pub sock: &'a TcpStream,
    /// The host name a TLS client asked for (SNI): the site its
    /// certificate was chosen for.
    pub sni: Option<&'a str>,
    /// The connection speaks HTTPS.
    pub https: bool,
}

impl Ends<'_> {
    pub fn peer(&self) -> SocketAddr {
        self.peers.peer
    }

    pub fn local(&self) -> SocketAddr {
        self.peers.local(self.sock)
    }
}

/// How a request was answered.
pub enum Answer {
    /// The whole response is queued.
    Done,
    /// A backend was started; its output becomes the response.
    Backend(Job),
    /// Nothing is answered yet: the file is being opened in the I/O pool.
    /// Once the ticket is done, its result goes to `Worker::resolved` and
    /// the request is answered again.
    Waiting(Arc<Ticket>),
}
