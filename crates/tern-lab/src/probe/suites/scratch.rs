//! What the suites that touch files and memory share: a scratch directory
//! removed on drop, and page-aligned mappings.

use std::io;
use std::path::{Path, PathBuf};

/// A scratch directory under `base` (the `--path` of the run), removed on drop.
pub(crate) struct ScratchDir(PathBuf);

pub(crate) fn tempdir(base: &Path) -> io::Result<ScratchDir> {
    let path = base.join(format!("tern-probe-{}-{}", std::process::id(), crate::probe::stopwatch::now_ns()));
    std::fs::create_dir_all(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(ScratchDir(path))
}

impl ScratchDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A page-aligned mapping of `len` bytes, unmapped on drop: a file's, read
/// only and shared, or anonymous memory, read-write and zero-filled.
pub(crate) struct Mapping(pub(crate) *mut libc::c_void, pub(crate) usize);

impl Mapping {
    pub(crate) fn new(len: usize, fd: Option<&std::fs::File>) -> io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        let (prot, flags, fd) = match fd {
            Some(f) => (libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd()),
            None => (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
        };
        // SAFETY: a fresh mapping chosen by the kernel; checked for failure.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping(p, len))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable for its length while it lives.
        unsafe { std::slice::from_raw_parts(self.0 as *const u8, self.1) }
    }

    /// The bytes of an anonymous mapping, to write into (a file's mapping
    /// is read-only: writing would fault).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is valid for its length while it lives and
        // borrowed mutably once; anonymous mappings are writable.
        unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u8, self.1) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anonymous_mapping_is_page_aligned_zeroed_and_writable() {
        // The disk suite reads into one: the kernel's copy is measured at its
        // best, not slowed by a misaligned destination.
        let mut m = Mapping::new(3 * page_size() + 1, None).unwrap();
        assert_eq!(m.0 as usize % page_size(), 0);
        assert!(m.bytes().iter().all(|&b| b == 0));
        m.bytes_mut().fill(7);
        assert_eq!((m.bytes().len(), m.bytes()[3 * page_size()]), (3 * page_size() + 1, 7));
    }
}
