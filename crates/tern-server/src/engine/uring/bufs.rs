//! The buffers a `uring` worker receives into: a provided-buffer ring the
//! kernel picks one from for each receive that finds bytes, so an idle
//! connection holds no buffer of its own (a receive waits in the ring
//! with none), and the bytes come in a buffer of the worker's pool, which
//! becomes the connection's receive buffer as it is — no copy — while the
//! ring gets a fresh one in its place.

use std::io;

use io_uring::types::BufRingEntry;

use crate::worker::{BufPool, IO_BUFFER};

use super::ring::Ring;

/// The ring's buffer group.
pub const GROUP: u16 = 0;
/// Buffers in the ring: receives that find bytes in one turn before any
/// is replenished (more wait for the next turn, `ENOBUFS`).
const COUNT: u16 = 256;

pub struct Buffers {
    /// The entries the kernel reads (page-aligned, shared with it).
    entries: *mut BufRingEntry,
    /// The buffer each id stands for.
    held: Vec<Vec<u8>>,
    tail: u16,
}

impl Buffers {
    /// Registers a ring of [`COUNT`] buffers from `pool` with `ring`.
    pub fn new(ring: &Ring, pool: &mut BufPool) -> io::Result<Buffers> {
        let bytes = usize::from(COUNT) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: a fresh anonymous mapping, ours until unmapped.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut bufs = Buffers { entries: at.cast(), held: vec![Vec::new(); usize::from(COUNT)], tail: 0 };
        // SAFETY: the mapping lives as long as `bufs`, which the worker
        // drops only after its ring (see `Reactor`).
        unsafe { ring.submitter().register_buf_ring_with_flags(at as u64, COUNT, GROUP, 0) }
            .map_err(super::ring::unavailable)?;
        for id in 0..COUNT {
            bufs.provide(id, pool.take());
        }
        Ok(bufs)
    }

    /// Puts `buf` in the ring as buffer `id`.
    fn provide(&mut self, id: u16, buf: Vec<u8>) {
        let len = u32::try_from(buf.capacity().min(IO_BUFFER)).unwrap_or(u32::MAX);
        // SAFETY: `tail & (COUNT - 1)` indexes the mapping; the kernel
        // reads an entry only once the tail below has passed it.
        unsafe {
            let entry = &mut *self.entries.add(usize::from(self.tail & (COUNT - 1)));
            entry.set_addr(buf.as_ptr() as u64);
            entry.set_len(len);
            entry.set_bid(id);
        }
        self.held[usize::from(id)] = buf;
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the ring's tail overlays the first entry's last field;
        // it is published after the entry it makes visible.
        unsafe {
            let tail = BufRingEntry::tail(self.entries).cast_mut();
            std::sync::atomic::AtomicU16::from_ptr(tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    /// The `len` bytes a receive brought in buffer `id`; the ring gets a
    /// buffer from `pool` in its place.
    pub fn take(&mut self, id: u16, len: usize, pool: &mut BufPool) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held[usize::from(id)]);
        // SAFETY: the kernel wrote `len` bytes (at most the buffer's
        // length, which is within its capacity) at its start.
        unsafe { buf.set_len(len.min(buf.capacity())) };
        self.provide(id, pool.take());
        buf
    }

    /// Buffer `id` goes back into the ring as it is (its bytes were for a
    /// connection that is gone).
    pub fn give_back(&mut self, id: u16) {
        let buf = std::mem::take(&mut self.held[usize::from(id)]);
        self.provide(id, buf);
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        let bytes = usize::from(COUNT) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: the mapping made in `new`; the ring that used it is gone.
        unsafe { libc::munmap(self.entries.cast(), bytes) };
    }
}
