//! Inter-process communication: round trip of one byte and bandwidth by
//! buffer size, through a pipe and a Unix stream socket. The peer is a thread
//! of this process; pinned, it shares the CPU, so a round trip includes two
//! context switches, as in lmbench's lat_pipe and `taskset -c N perf bench
//! sched pipe`. The pipe round trip is also timed with the peer on another
//! CPU: each end then wakes the other across CPUs (an inter-processor
//! interrupt, a CPU leaving idle), which is what two processes of a
//! loopback benchmark on two CPUs pay on every exchange.

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::probe::ctx::Ctx;
use crate::probe::figure::Figure;
use crate::probe::stopwatch::Interval;

/// Buffer sizes for bandwidth, bytes.
const SIZES: &[usize] = &[1024, 4096, 16384, 65536, 262144, 1 << 20];
const QUICK_SIZES: &[usize] = &[4096, 65536];

/// The pipe round trip with the echo thread on another CPU.
pub const ACROSS_CPUS: &str = "pipe round trip, 1 byte, across CPUs";

pub fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn pipe() -> io::Result<(std::fs::File, std::fs::File)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors, owned once each.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]).into(), OwnedFd::from_raw_fd(fds[1]).into())) }
}

/// A byte-stream endpoint pair: what this side reads from and writes to, and
/// the peer's.
type Duplex<R, W> = ((R, W), (R, W));

/// Round trips of `msg` bytes with an echo thread on the other ends, on
/// this CPU or pinned to `peer_cpu`: the thread ends when its reading end
/// reports end of file.
pub fn round_trip<R, W>(
    ctx: &Ctx,
    name: &str,
    msg: usize,
    ends: Duplex<R, W>,
    peer_cpu: Option<usize>,
) -> io::Result<Figure>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let ((mut rx, mut tx), (mut peer_rx, mut peer_tx)) = ends;
    let echo = std::thread::spawn(move || -> io::Result<()> {
        if let Some(cpu) = peer_cpu {
            crate::probe::cpu::pin(Some(cpu))?;
        }
        let mut buf = vec![0u8; msg];
        loop {
            match peer_rx.read_exact(&mut buf) {
                Ok(()) => peer_tx.write_all(&buf)?,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    });
    let mut buf = vec![1u8; msg];
    let figure = ctx.measure(name, None, |n| {
        Interval::looped(n, || {
            tx.write_all(&buf)?;
            rx.read_exact(&mut buf)
        })
    });
    // Both ends: a socket's two handles are one socket, closed with the last.
    drop((tx, rx));
    echo.join().map_err(|_| io::Error::other("echo thread panicked"))??;
    figure
}

/// Bandwidth: a writer thread sends `chunk`-byte writes until the reader
/// closes; one operation is reading one chunk's worth.
pub fn bandwidth<R, W>(ctx: &Ctx, name: &str, chunk: usize, mut rx: R, mut tx: W) -> io::Result<Figure>
where
    R: Read,
    W: Write + Send + 'static,
{
    let writer = std::thread::spawn(move || {
        let buf = vec![7u8; chunk];
        while tx.write_all(&buf).is_ok() {}
    });
    let mut buf = vec![0u8; chunk];
    let figure = ctx.measure(name, Some(chunk as u64), |n| Interval::looped(n, || rx.read_exact(&mut buf)));
    drop(rx);
    writer.join().map_err(|_| io::Error::other("writer thread panicked"))?;
    figure
}

pub fn run(ctx: &Ctx) -> io::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let pipes = || -> io::Result<Duplex<std::fs::File, std::fs::File>> {
        let (a_rx, b_tx) = pipe()?;
        let (b_rx, a_tx) = pipe()?;
        Ok(((a_rx, a_tx), (b_rx, b_tx)))
    };
    figures.push(round_trip(ctx, "pipe round trip, 1 byte", 1, pipes()?, None)?);
    if let Some(cpu) = ctx.other_cpu {
        figures.push(round_trip(ctx, ACROSS_CPUS, 1, pipes()?, Some(cpu))?);
    }
    let (a, b) = UnixStream::pair()?;
    let ends = ((a.try_clone()?, a), (b.try_clone()?, b));
    figures.push(round_trip(ctx, "unix socket round trip, 1 byte", 1, ends, None)?);
    for &size in if ctx.opts.quick { QUICK_SIZES } else { SIZES } {
        let (rx, tx) = pipe()?;
        figures.push(bandwidth(ctx, &format!("pipe bandwidth, {} buffers", size_label(size)), size, rx, tx)?);
        let (rx, tx) = UnixStream::pair()?;
        figures.push(bandwidth(ctx, &format!("unix socket bandwidth, {} buffers", size_label(size)), size, rx, tx)?);
    }
    Ok(figures)
}
