//! Disk: write+fsync and read of 1 KiB … 2 MiB in a file under `--path`,
//! reads warm (in the page cache) and cold (dropped from it with
//! `posix_fadvise(DONTNEED)` before each timed read), with the filesystem
//! type, since it decides what "cold" and "fsync" mean (on tmpfs a cold read
//! is still memory, and fsync does nothing).
//!
//! Warm reads read the pages the write+fsync just before them put in the
//! page cache, as a file just written (and sysbench's prepared file) has
//! them: the cache is dropped before each size's writes. Pages that cold
//! reads brought in through readahead are laid out otherwise, and a warm
//! 1 MiB read of them took ~30 % longer here (Linux 6.18, ext4).
//!
//! Reads land in a page-aligned buffer, as sysbench's, fio's and dd's do: the
//! kernel copies to a destination off a cache-line boundary markedly slower
//! (a heap buffer from malloc starts 16 bytes into a page), and that would be
//! the buffer's cost, not the file system's.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::scratch::Mapping;
use crate::probe::ctx::{Ctx, Outcome};
use crate::probe::stopwatch::{now_ns, Interval};

/// Sizes in KiB.
const SIZES: &[u64] = &[1, 4, 16, 64, 256, 1024, 2048];
const QUICK_SIZES: &[u64] = &[4, 1024];

/// The filesystem type of `path`, by statfs magic number.
pub fn filesystem_type(path: &Path) -> io::Result<String> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))?;
    // SAFETY: statfs writes into a zeroed plain-data struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let name = match st.f_type as u64 {
        0xEF53 => "ext2/3/4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlayfs",
        0x6969 => "nfs",
        0x2fc1_2fc1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x6573_5546 => "fuse",
        0x5346_544e => "ntfs",
        0x4d44 => "vfat",
        0x0102_1997 => "9p",
        0x6165_6d6d => "virtiofs",
        other => return Ok(format!("unknown (magic {other:#x})")),
    };
    Ok(name.to_string())
}

fn drop_cache(file: &File) -> io::Result<()> {
    // SAFETY: advice on our own open descriptor.
    match unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

pub fn run(ctx: &Ctx) -> io::Result<Outcome> {
    let dir = super::scratch::tempdir(&ctx.opts.path)?;
    let fs = filesystem_type(dir.path())?;
    let path = dir.path().join("data");
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
    let sizes = if ctx.opts.quick { QUICK_SIZES } else { SIZES };
    let max = *sizes.iter().max().expect("sizes") as usize * 1024;
    let data: Vec<u8> = (0..max).map(|i| (i % 251) as u8).collect();
    file.write_all_at(&data, 0)?;
    file.sync_all()?;
    let mut read_buf = Mapping::new(max, None)?;
    let buf = read_buf.bytes_mut();
    let mut figures = Vec::new();
    for &kib in sizes {
        let len = kib as usize * 1024;
        let label = if kib >= 1024 { format!("{} MiB", kib / 1024) } else { format!("{kib} KiB") };
        // The warm reads read what this write puts in the page cache, not
        // what the previous size's cold reads left there (see the module doc).
        drop_cache(&file)?;
        figures.push(ctx.measure(&format!("write+fsync {label}"), None, |n| {
            Interval::looped(n, || {
                file.write_all_at(&data[..len], 0)?;
                file.sync_data()
            })
        })?);
        figures.push(ctx.measure(&format!("read {label}, warm"), Some(len as u64), |n| {
            Interval::looped(n, || file.read_exact_at(&mut buf[..len], 0))
        })?);
        figures.push(ctx.measure(&format!("read {label}, cold"), Some(len as u64), |n| {
            // The cache is dropped before each read, outside the timed piece.
            let mut ns = 0;
            for _ in 0..n {
                drop_cache(&file)?;
                let t0 = now_ns();
                file.read_exact_at(&mut buf[..len], 0)?;
                ns += now_ns() - t0;
            }
            Ok(Interval { ns, clock_pairs: n, loop_iters: 0 })
        })?);
    }
    let mut notes = vec![format!("{} is on {fs}", ctx.opts.path.display())];
    if fs == "tmpfs" || fs == "overlayfs" {
        notes.push(format!("on {fs} a cold read may still be served from memory, and fsync may not reach a disk"));
    }
    Ok(Outcome { figures, notes, rpc_null_ns: None })
}
