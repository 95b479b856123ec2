//! Network: TCP and UDP round trip by message size, TCP connect cost and TCP
//! bandwidth, against the [`Peer`] servers of this process on loopback or,
//! with `--agent`, of a peer the agent starts on its own address for the
//! run (and stops when the run ends; that part is `crate::remote::net`).
//!
//! On loopback the peer is threads of this process, pinned with it: a round
//! trip includes two switches between threads, not between address spaces
//! (an echo process costs about 10% more per round trip on one CPU), which
//! is what the C reference bench/probe.sh sets beside it does too. The
//! bandwidth figure reads 128 KiB at a time from a sender that leaves
//! Nagle's algorithm on, as a bulk sender such as iperf3 does.
//!
//! The connect figure is lmbench's `lat_connect`: a blocking `connect` and
//! a `close`, against a listener whose thread accepts and closes, nothing
//! else. Against the echo listener (a thread started per connection) the
//! connects outran the acceptor on a shared CPU, its queue overflowed, and
//! each dropped SYN came back after the kernel's 1 s retransmission timeout:
//! one per sample, read as milliseconds per connect.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use socket2::{Domain, Socket, Type};

use super::ipc::{round_trip, size_label};
use crate::probe::ctx::Ctx;
use crate::probe::figure::Figure;
use crate::probe::stopwatch::Interval;

const SIZES: &[usize] = &[1024, 4096, 16384, 32768];
const QUICK_SIZES: &[usize] = &[1024, 32768];
/// The 1 KiB round trip with the echo thread on another CPU.
pub const ACROSS_CPUS: &str = "TCP round trip, 1 KiB, across CPUs";
/// Bytes per operation of the bandwidth figure.
const STREAM_CHUNK: usize = 128 * 1024;
/// No peer answer within this long is an error, not a hang.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the measuring side finds the peer's three services.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PeerAddrs {
    /// Echoes every byte back (TCP).
    pub tcp_echo: SocketAddr,
    /// Accepts each connection and closes it, for the connect figure.
    pub tcp_accept: SocketAddr,
    /// Echoes every datagram back.
    pub udp_echo: SocketAddr,
    /// Sends bytes forever, for bandwidth.
    pub tcp_source: SocketAddr,
}

/// How many connections a peer's listener queues: more than a sample's
/// connects, so a connect never waits for a retransmitted SYN.
const BACKLOG: i32 = 1024;

/// The peer: echo, accept and source servers on threads, stopped when
/// dropped.
pub struct Peer {
    pub addrs: PeerAddrs,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Peer {
    pub fn start(ip: IpAddr) -> io::Result<Peer> {
        let echo = listen(ip)?;
        let accept = listen(ip)?;
        let source = listen(ip)?;
        let udp = UdpSocket::bind((ip, 0))?;
        udp.set_read_timeout(Some(Duration::from_millis(200)))?;
        let addrs = PeerAddrs {
            tcp_echo: echo.local_addr()?,
            tcp_accept: accept.local_addr()?,
            udp_echo: udp.local_addr()?,
            tcp_source: source.local_addr()?,
        };
        let stop = Arc::new(AtomicBool::new(false));
        // Each connection to `listener` handled by `handle` on the accepting
        // thread (`inline`) or on a thread of its own.
        let serve = |listener: TcpListener, handle: fn(TcpStream), inline: bool| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    match conn {
                        Ok(conn) if inline => handle(conn),
                        Ok(conn) => drop(std::thread::spawn(move || handle(conn))),
                        Err(_) => {}
                    }
                }
            })
        };
        let mut threads =
            vec![serve(echo, echo_stream, false), serve(accept, drop, true), serve(source, source_stream, false)];
        let udp_stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !udp_stop.load(Ordering::Relaxed) {
                if let Ok((len, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(&buf[..len], from);
                }
            }
        }));
        Ok(Peer { addrs, stop, threads })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loops; the UDP loop wakes on its read timeout.
        for addr in [self.addrs.tcp_echo, self.addrs.tcp_accept, self.addrs.tcp_source] {
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A TCP listener on `ip` (any port) with room for [`BACKLOG`] connections.
fn listen(ip: IpAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(SocketAddr::new(ip, 0)), Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Echoes until the client closes; every reply leaves at once (no Nagle
/// wait), as a round trip needs.
fn echo_stream(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut buf = vec![0u8; 65536];
    while let Ok(n @ 1..) = conn.read(&mut buf) {
        if conn.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// Sends until the client closes, Nagle's algorithm on, as a bulk sender
/// (iperf3, a file download) has it: with TCP_NODELAY each 128 KiB write's
/// tail past the last full segment would leave as a tiny segment of its own.
fn source_stream(mut conn: TcpStream) {
    let buf = vec![7u8; STREAM_CHUNK];
    while conn.write_all(&buf).is_ok() {}
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, PEER_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(PEER_TIMEOUT))?;
    s.set_write_timeout(Some(PEER_TIMEOUT))?;
    Ok(s)
}

/// Measures against a peer at `addrs`.
pub fn run_against(ctx: &Ctx, addrs: &PeerAddrs) -> io::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let sizes = if ctx.opts.quick { QUICK_SIZES } else { SIZES };
    let mut tcp = connect(addrs.tcp_echo)?;
    for &size in sizes {
        let mut buf = vec![1u8; size];
        figures.push(ctx.measure(&format!("TCP round trip, {}", size_label(size)), None, |n| {
            Interval::looped(n, || {
                tcp.write_all(&buf)?;
                tcp.read_exact(&mut buf)
            })
        })?);
    }
    drop(tcp);
    let udp = UdpSocket::bind((if addrs.udp_echo.is_ipv4() { "0.0.0.0" } else { "::" }, 0))?;
    udp.connect(addrs.udp_echo)?;
    udp.set_read_timeout(Some(PEER_TIMEOUT))?;
    for &size in sizes {
        let mut buf = vec![1u8; size];
        figures.push(ctx.measure(&format!("UDP round trip, {}", size_label(size)), None, |n| {
            Interval::looped(n, || {
                udp.send(&buf)?;
                match udp.recv(&mut buf)? {
                    len if len == size => Ok(()),
                    len => Err(io::Error::other(format!("UDP echo of {size} bytes returned {len}"))),
                }
            })
        })?);
    }
    let domain = Domain::for_address(addrs.tcp_accept);
    let to = addrs.tcp_accept.into();
    figures.push(ctx.measure("TCP connect+close", None, |n| {
        Interval::looped(n, || {
            // Blocking, as lat_connect's: a connect with a timeout of its
            // own would add a poll and two fcntl calls to each. The send
            // timeout bounds a blocking connect on Linux.
            let s = Socket::new(domain, Type::STREAM, None)?;
            s.set_write_timeout(Some(PEER_TIMEOUT))?;
            s.connect(&to)
        })
    })?);
    let mut source = connect(addrs.tcp_source)?;
    let mut buf = vec![0u8; STREAM_CHUNK];
    figures.push(ctx.measure("TCP bandwidth, 128 KiB reads", Some(STREAM_CHUNK as u64), |n| {
        Interval::looped(n, || source.read_exact(&mut buf))
    })?);
    Ok(figures)
}

/// Measures against a peer on threads of this process, on loopback; and,
/// with another CPU to use, the 1 KiB round trip with the echo thread on it.
pub fn run(ctx: &Ctx) -> io::Result<Vec<Figure>> {
    let peer = Peer::start(IpAddr::from([127, 0, 0, 1]))?;
    let mut figures = run_against(ctx, &peer.addrs)?;
    if let Some(cpu) = ctx.other_cpu {
        let listener = listen(IpAddr::from([127, 0, 0, 1]))?;
        let ours = connect(listener.local_addr()?)?;
        let (theirs, _) = listener.accept()?;
        theirs.set_nodelay(true)?;
        let ends = ((ours.try_clone()?, ours), (theirs.try_clone()?, theirs));
        figures.push(round_trip(ctx, ACROSS_CPUS, 1024, ends, Some(cpu))?);
    }
    Ok(figures)
}
