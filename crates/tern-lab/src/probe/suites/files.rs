//! The server's three ways of sending a file, measured without HTTP: read
//! into a buffer and write it, mmap and write from the mapping, sendfile —
//! each into a loopback TCP connection drained by a thread, by file size. And
//! the cost of a page fault: mapping and touching pages minus mapping alone.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use super::ipc::size_label;
use super::scratch::{page_size, Mapping};
use crate::probe::ctx::Ctx;
use crate::probe::figure::Figure;
use crate::probe::stopwatch::Interval;

const SIZES: &[usize] = &[4096, 65536, 1 << 20, 8 << 20];
const QUICK_SIZES: &[usize] = &[4096, 1 << 20];
/// Pages mapped and touched per fault measurement.
const FAULT_PAGES: usize = 256;

fn os(ret: isize) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// A loopback TCP connection whose other end a thread drains; the thread
/// ends when the connection is closed.
fn drained_socket() -> io::Result<(TcpStream, std::thread::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let out = TcpStream::connect(listener.local_addr()?)?;
    let (mut sink, _) = listener.accept()?;
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(1..) = sink.read(&mut buf) {}
    });
    Ok((out, drain))
}

pub fn run(ctx: &Ctx) -> io::Result<Vec<Figure>> {
    let dir = super::scratch::tempdir(&ctx.opts.path)?;
    let sizes = if ctx.opts.quick { QUICK_SIZES } else { SIZES };
    let mut figures = Vec::new();
    let (mut out, drain) = drained_socket()?;
    let sock = out.as_raw_fd();
    let mut buf = vec![0u8; 64 * 1024];
    for &size in sizes {
        let path = dir.path().join(format!("file-{size}"));
        let data: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data)?;
        let file = File::open(&path)?;
        let label = size_label(size);
        figures.push(ctx.measure(&format!("read+write {label}"), Some(size as u64), |n| {
            Interval::looped(n, || {
                let mut off = 0;
                while off < size {
                    let got = file.read_at(&mut buf, off as u64)?;
                    out.write_all(&buf[..got])?;
                    off += got;
                }
                Ok(())
            })
        })?);
        figures.push(ctx.measure(&format!("mmap+write {label}"), Some(size as u64), |n| {
            Interval::looped(n, || {
                let map = Mapping::new(size, Some(&file))?;
                out.write_all(map.bytes())
            })
        })?);
        figures.push(ctx.measure(&format!("sendfile {label}"), Some(size as u64), |n| {
            Interval::looped(n, || {
                let mut off: libc::off_t = 0;
                while (off as usize) < size {
                    // SAFETY: both descriptors are open; `off` is ours.
                    os(unsafe { libc::sendfile(sock, file.as_raw_fd(), &mut off, size - off as usize) })?;
                }
                Ok(())
            })
        })?);
    }
    drop(out);
    drain.join().map_err(|_| io::Error::other("drain thread panicked"))?;

    let page = page_size();
    let len = FAULT_PAGES * page;
    let name = format!("page fault (anonymous, first write), per page of {FAULT_PAGES}");
    let map_only =
        ctx.measure("mmap+munmap, no touch", None, |n| Interval::looped(n, || Mapping::new(len, None).map(drop)))?;
    let mut fault = ctx.measure(&name, None, |n| {
        Interval::looped(n, || {
            let map = Mapping::new(len, None)?;
            // SAFETY: writing inside the mapping, one byte per page; no huge
            // pages, so each page faults once.
            unsafe {
                libc::madvise(map.0, len, libc::MADV_NOHUGEPAGE);
                for p in (0..len).step_by(page) {
                    std::ptr::write_volatile((map.0 as *mut u8).add(p), 1);
                }
            }
            Ok(())
        })
    })?;
    fault.subtract(map_only.corrected_ns.median);
    fault.per(FAULT_PAGES as u64);
    figures.push(map_only);
    figures.push(fault);
    Ok(figures)
}
