//! System calls at their cheapest: the kernel entry and exit, plus the
//! little each call does. clock_gettime and gettimeofday go through the vDSO
//! and show what avoiding the kernel saves.

use std::ffi::CStr;
use std::io;
use std::os::fd::AsRawFd;

use crate::probe::ctx::Ctx;
use crate::probe::figure::Figure;
use crate::probe::stopwatch::Interval;

/// Fails with the OS error when a libc call returned -1.
fn check(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn run(ctx: &Ctx) -> io::Result<Vec<Figure>> {
    let zero = std::fs::File::open("/dev/zero")?;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    let (zfd, nfd) = (zero.as_raw_fd(), null.as_raw_fd());
    let path: &CStr = c"/dev/null";
    let mut byte = [0u8; 1];
    // SAFETY (all below): plain system calls on descriptors and buffers that
    // live for the whole loop; the stat buffers are plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    let mut figures = Vec::new();
    figures.push(ctx.measure("getppid", None, |n| Interval::looped(n, || check(unsafe { libc::getppid() }.into())))?);
    figures.push(ctx.measure("read 1 byte of /dev/zero", None, |n| {
        Interval::looped(n, || check(unsafe { libc::read(zfd, byte.as_mut_ptr().cast(), 1) } as libc::c_long))
    })?);
    figures.push(ctx.measure("write 1 byte to /dev/null", None, |n| {
        Interval::looped(n, || check(unsafe { libc::write(nfd, byte.as_ptr().cast(), 1) } as libc::c_long))
    })?);
    figures.push(ctx.measure("stat /dev/null", None, |n| {
        Interval::looped(n, || check(unsafe { libc::stat(path.as_ptr(), &mut st) }.into()))
    })?);
    figures.push(
        ctx.measure("fstat", None, |n| Interval::looped(n, || check(unsafe { libc::fstat(zfd, &mut st) }.into())))?,
    );
    figures.push(ctx.measure("open+close /dev/null", None, |n| {
        Interval::looped(n, || {
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            check(fd.into())?;
            check(unsafe { libc::close(fd) }.into())
        })
    })?);
    figures.push(ctx.measure("clock_gettime (vDSO)", None, |n| {
        Interval::looped(n, || check(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }.into()))
    })?);
    figures.push(ctx.measure("gettimeofday (vDSO)", None, |n| {
        Interval::looped(n, || check(unsafe { libc::gettimeofday(&mut tv, std::ptr::null_mut()) }.into()))
    })?);
    Ok(figures)
}
