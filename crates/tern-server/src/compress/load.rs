//! The load signal that decides between compressing a cold file inline and
//! deferring it: the accept queue of the worker's listening sockets and the
//! requests in flight. Read on a cold miss only, never on a hit.
//!
//! - **Accept queue**: on Linux, `TCP_INFO` on a *listening* socket reports
//!   in `tcpi_unacked` the connections completed by the kernel and waiting
//!   for `accept(2)` (and `tcpi_sacked` the backlog limit). Each worker has
//!   its own `SO_REUSEPORT` listeners, so its queue holds exactly the
//!   connections that wait for *this* worker: the ones an inline
//!   compression would delay.
//! - **In flight**: requests that have arrived and are not answered yet —
//!   the connection events of each worker's current epoll batch not yet
//!   handled (each is a request waiting on that worker), summed over the
//!   workers from their single-writer gauges.

use std::os::fd::RawFd;

use crate::metrics::WorkerStats;

/// Why a cold file was deferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    AcceptQueue(u64),
    InFlight(u64),
}

/// The thresholds, from `[compression]`.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    pub accept_queue: u64,
    pub in_flight: u64,
}

impl Thresholds {
    /// `Some` when the server is too busy to compress inline now.
    /// `listeners`: this worker's listening sockets.
    pub fn busy(&self, listeners: &[RawFd], workers: &[WorkerStats]) -> Option<Busy> {
        let in_flight: u64 = workers.iter().map(|w| w.in_flight.get()).sum();
        if in_flight > self.in_flight {
            return Some(Busy::InFlight(in_flight));
        }
        let queued: u64 = listeners.iter().filter_map(|&fd| accept_queue(fd)).sum();
        (queued > self.accept_queue).then_some(Busy::AcceptQueue(queued))
    }
}

/// `TCP_LISTEN` of the kernel's TCP states (`include/net/tcp_states.h`),
/// which the libc crate does not export.
const TCP_LISTEN: u8 = 10;

/// Connections waiting to be accepted on listening socket `fd`, or `None`
/// when the kernel does not say.
pub fn accept_queue(fd: RawFd) -> Option<u64> {
    // SAFETY: `tcp_info` is plain old data; getsockopt writes at most `len`
    // bytes into it and reports how many.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut info).cast(), &mut len);
        (rc == 0 && info.tcpi_state == TCP_LISTEN).then_some(u64::from(info.tcpi_unacked))
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn tcp_info_reports_the_accept_queue() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert_eq!(accept_queue(listener.as_raw_fd()), Some(0));
        let clients: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
        assert_eq!(accept_queue(listener.as_raw_fd()), Some(5));
        let t = Thresholds { accept_queue: 4, in_flight: 100 };
        let stats = [WorkerStats::default()];
        assert_eq!(t.busy(&[listener.as_raw_fd()], &stats), Some(Busy::AcceptQueue(5)));
        let _ = listener.accept().unwrap();
        assert_eq!(t.busy(&[listener.as_raw_fd()], &stats), None);
        stats[0].in_flight.set(101);
        assert_eq!(t.busy(&[listener.as_raw_fd()], &stats), Some(Busy::InFlight(101)));
        // Not a listener: no answer rather than a wrong one.
        assert_eq!(accept_queue(clients[0].as_raw_fd()), None);
    }
}
