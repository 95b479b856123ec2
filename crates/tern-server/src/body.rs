//! Response bytes on their way to the socket, and the three static-file
//! I/O methods — the only place that knows how a file region is sent
//! (`static_io.rs` decides which method sends which file).
//!
//! A response is a queue of segments: bytes in the connection's buffer
//! (heads, small bodies, multipart boundaries), shared in-memory bodies
//! (cached compressed variants) and file regions. In-memory bytes and
//! mapped regions go out together in one `sendmsg` (a whole
//! keep-alive response in one system call); `sendfile` regions follow a head
//! sent with `MSG_MORE`; `read` regions are copied through a chunk buffer.
//!
//! Over TLS every segment is encrypted by the connection's session instead
//! (`flush_tls`): file regions, whatever their method, through the chunk
//! buffer (`pread`), never from a mapping, which user space must not read
//! (a file truncated under it would raise `SIGBUS`).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use crate::open_files::OpenFile;
use crate::static_io::IoMethod;
use crate::sys;
use crate::tls::{self, Session};

enum Segment {
    /// `OutQueue::buf[start..end]`.
    Buf { start: usize, end: usize },
    /// A region of a file, sent with `method`; with the I/O pool, only as
    /// far as `ready` (the end of what is known to be in the page cache).
    File { file: Arc<OpenFile>, offset: u64, len: u64, method: IoMethod, ready: u64 },
    /// Bytes held elsewhere (a cached compressed variant): `bytes[start..end]`,
    /// gathered into the same `sendmsg` as the head, like a mapping. The
    /// `Arc` keeps them alive, however the cache changes, until sent.
    Shared { bytes: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, end: usize },
}

/// The outcome of a flush attempt.
pub enum Flushed {
    /// Everything queued was written.
    All,
    /// The socket is full; wait until it is writable.
    Blocked,
    /// The socket has room, but this connection sent its
    /// `sendfile_max_chunk`: let the others have a turn, then flush again.
    Yield,
    /// The next bytes to send are in a file region whose pages are not in
    /// the page cache: read them in the I/O pool, then
    /// [`OutQueue::insert_read`] them.
    Cold { file: Arc<OpenFile>, offset: u64, len: usize },
    /// The next bytes to send are in a file region sent by the `uring`
    /// method: read them through the engine's ring, then
    /// [`OutQueue::insert_read`] them. `cached`: they are known to be in
    /// the page cache.
    Fetch { file: Arc<OpenFile>, offset: u64, len: usize, cached: bool },
}

/// Most bytes of a cold file region read by one pool task, and of a
/// region the `uring` method reads at once.
const COLD_READ: u64 = 256 * 1024;

/// Most segments gathered into one `sendmsg`.
const MAX_IOV: usize = 32;

/// One connection's pending output.
pub struct OutQueue {
    chunk_size: usize,
    /// Most bytes one flush sends by `sendfile` (`u64::MAX`: no limit).
    sendfile_max_chunk: u64,
    /// Heads and in-memory bodies.
    pub buf: Vec<u8>,
    segments: VecDeque<Segment>,
    /// The `read` method's chunk buffer and its unsent part.
    chunk: Vec<u8>,
    chunk_pos: usize,
    /// End of the part of `buf` already turned into segments.
    committed: usize,
    /// Bytes written since the queue was created (for send-rate timeouts).
    pub written: u64,
    /// File pages not in the page cache are read in the I/O pool, never
    /// here (the connection runs on a reactor).
    offload: bool,
    /// The bytes of a send through a ring in flight (gathered from the
    /// front, which stays until it completes); `None` also once the queue
    /// was cleared meanwhile.
    in_flight: Option<usize>,
}

/// See [`OutQueue::gather`].
struct Gathered<'q> {
    iov: [IoSlice<'q>; MAX_IOV],
    count: usize,
    want: usize,
    /// More follows what was gathered (`MSG_MORE`).
    more: bool,
    /// A mapped file among them: a fault is that file's shrinking.
    mapped: Option<&'q Arc<OpenFile>>,
}

impl<'q> Gathered<'q> {
    fn push(&mut self, bytes: &'q [u8]) {
        self.iov[self.count] = IoSlice::new(bytes);
        self.count += 1;
        self.want += bytes.len();
    }
}

/// A `sendmsg` submitted through an engine's ring: what the kernel reads
/// until it completes, held apart from the queue — the queue's own bytes
/// copied (heads, small bodies: a few hundred bytes, a few KiB at most),
/// shared bodies and mapped files kept alive — so nothing the connection
/// does meanwhile (another answer queued, the queue cleared, the
/// connection closed) moves or frees them. Boxed and reused by the engine.
pub struct Sending {
    bytes: Vec<u8>,
    shared: Vec<Arc<dyn AsRef<[u8]> + Send + Sync>>,
    files: Vec<Arc<OpenFile>>,
    iov: [libc::iovec; MAX_IOV],
    count: usize,
    msg: libc::msghdr,
    len: usize,
    more: bool,
    mapped: Option<Arc<OpenFile>>,
}

impl Sending {
    pub fn new() -> Box<Sending> {
        Box::new(Sending {
            bytes: Vec::new(),
            shared: Vec::new(),
            files: Vec::new(),
            iov: [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX_IOV],
            count: 0,
            // SAFETY: an all-zero msghdr is an empty one.
            msg: unsafe { std::mem::zeroed() },
            len: 0,
            more: false,
            mapped: None,
        })
    }

    /// The message to submit; it and what it points to stay valid while
    /// this is neither changed nor dropped.
    pub fn msghdr(&mut self) -> *const libc::msghdr {
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = self.count;
        &self.msg
    }

    /// The send's flags: `MSG_MORE` when a region sent otherwise follows.
    pub fn flags(&self) -> u32 {
        (libc::MSG_NOSIGNAL | if self.more { libc::MSG_MORE } else { 0 }) as u32
    }

    /// What a completion's `result` says: the bytes sent, or why none
    /// were (a fault in a mapped file is that file's shrinking).
    pub fn outcome(&self, result: i32) -> io::Result<usize> {
        match result {
            0 if self.len > 0 => Err(io::Error::new(io::ErrorKind::WriteZero, "socket took no bytes")),
            n if n >= 0 => Ok(n as usize),
            e => Err(fault(io::Error::from_raw_os_error(-e), self.mapped.as_ref())),
        }
    }

    /// Lets go of what the last send kept (its bytes' room stays).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.shared.clear();
        self.files.clear();
        self.mapped = None;
        self.count = 0;
        self.len = 0;
    }
}

/// A send's error: a fault with a mapped file among its bytes means the
/// kernel read past the file's new end (a mapping never faults in user
/// space).
fn fault(e: io::Error, mapped: Option<&Arc<OpenFile>>) -> io::Error {
    match mapped {
        Some(file) if e.raw_os_error() == Some(libc::EFAULT) => file.shrank(),
        _ => e,
    }
}

impl OutQueue {
    /// `sendfile_max_chunk`: 0 is no limit.
    pub fn new(chunk_size: usize, sendfile_max_chunk: u64, offload: bool) -> Self {
        OutQueue {
            chunk_size,
            sendfile_max_chunk: if sendfile_max_chunk == 0 { u64::MAX } else { sendfile_max_chunk },
            buf: Vec::new(),
            segments: VecDeque::new(),
            chunk: Vec::new(),
            chunk_pos: 0,
            committed: 0,
            written: 0,
            offload,
            in_flight: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Bytes queued, in memory and in files.
    pub fn queued(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Buf { start, end } => (end - start) as u64,
                Segment::File { len, .. } => *len,
                Segment::Shared { start, end, .. } => (end - start) as u64,
            })
            .sum()
    }

    /// Can another response be queued behind this one and leave in the same
    /// `sendmsg`? True while everything queued is in memory or mapped.
    pub fn gathers(&self) -> bool {
        self.segments.iter().all(|s| {
            matches!(s, Segment::Buf { .. } | Segment::Shared { .. } | Segment::File { method: IoMethod::Mmap, .. })
        })
    }

    /// The queue's first bytes, when they are in `buf` (a head written
    /// there): empty otherwise.
    pub fn front(&self) -> &[u8] {
        match self.segments.front() {
            Some(Segment::Buf { start, end }) => &self.buf[*start..*end],
            _ => &[],
        }
    }

    /// Marks everything appended to `buf` since the last call as queued.
    pub fn commit_buf(&mut self) {
        let (start, end) = (self.committed, self.buf.len());
        if end == start {
            return;
        }
        match self.segments.back_mut() {
            Some(Segment::Buf { end: last_end, .. }) if *last_end == start => *last_end = end,
            _ => self.segments.push_back(Segment::Buf { start, end }),
        }
        self.committed = end;
    }

    /// Queues a file region to be sent with `method` (after committing the
    /// bytes before it); a file without a mapping goes by `sendfile`
    /// instead of `mmap`.
    pub fn push_file(&mut self, file: &Arc<OpenFile>, offset: u64, len: u64, method: IoMethod) {
        self.commit_buf();
        if len == 0 {
            return;
        }
        let method = if method == IoMethod::Mmap && file.mapping.is_none() { IoMethod::Sendfile } else { method };
        let small_enough_to_copy = method == IoMethod::Read && len <= self.chunk_size as u64;
        // Copied now only when that cannot wait for a disk.
        let ready = if self.offload && small_enough_to_copy {
            file.resident_until(offset, len).unwrap_or(offset)
        } else if file.resident.load(Relaxed) {
            offset + len
        } else {
            offset
        };
        if small_enough_to_copy && (!self.offload || ready == offset + len) {
            // The read method's common case: read the body right behind its
            // head, so both leave in one write.
            let at = self.buf.len();
            self.buf.resize(at + len as usize, 0);
            match read_exact_at(file.file.as_fd(), &mut self.buf[at..], offset) {
                Ok(()) => return self.commit_buf(),
                // The file shrank: queue the region instead, so sending
                // fails and the connection closes rather than lying.
                Err(_) => self.buf.truncate(at),
            }
        }
        self.segments.push_back(Segment::File { file: file.clone(), offset, len, method, ready });
    }

    /// Puts `bytes`, read in the I/O pool at `offset` of the region at the
    /// front ([`Flushed::Cold`]), in its place.
    pub fn insert_read(&mut self, offset: u64, bytes: Vec<u8>) {
        let n = bytes.len() as u64;
        let Some(Segment::File { offset: at, len, ready, .. }) = self.segments.front_mut() else { return };
        if *at != offset || n > *len || n == 0 {
            return;
        }
        *at += n;
        *len -= n;
        *ready = (*ready).max(*at);
        if *len == 0 {
            self.segments.pop_front();
        }
        let end = bytes.len();
        self.segments.push_front(Segment::Shared { bytes: Arc::new(bytes), start: 0, end });
    }

    /// With the I/O pool: finds how far the first file region queued is in
    /// the page cache; returns the region to read in the pool when its
    /// first page is not and nothing is queued before it.
    fn cold_region(&mut self) -> Option<(Arc<OpenFile>, u64, usize)> {
        let (i, seg) =
            self.segments.iter_mut().take(MAX_IOV).enumerate().find(|(_, s)| matches!(s, Segment::File { .. }))?;
        let Segment::File { file, offset, len, ready, method } = seg else { return None };
        // The ring reads a `uring` region: it never waits for a disk here.
        if *ready > *offset || *method == IoMethod::Uring {
            return None;
        }
        match file.resident_until(*offset, *len) {
            Some(until) => {
                *ready = until;
                None
            }
            None if i > 0 => None,
            None => Some((file.clone(), *offset, (*len).min(COLD_READ) as usize)),
        }
    }

    /// Queues in-memory bytes held by `bytes` (after committing the bytes
    /// before them); no copy, one reference count.
    pub fn push_shared(&mut self, bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) {
        self.commit_buf();
        let end = (*bytes).as_ref().len();
        if end > 0 {
            self.segments.push_back(Segment::Shared { bytes, start: 0, end });
        }
    }

    /// Takes up to `max` bytes off the front of the queue, copied — a
    /// file region read with `pread`, whatever its method — for a framing
    /// that carries the bytes itself (an HTTP/2 stream's `DATA` frames).
    /// A file that shrank is an error, as when it is sent.
    pub fn pull(&mut self, max: usize) -> io::Result<Vec<u8>> {
        self.commit_buf();
        let mut bytes = Vec::with_capacity(max.min(self.queued() as usize));
        while bytes.len() < max {
            let want = max - bytes.len();
            let at = bytes.len();
            match self.segments.front() {
                None => break,
                Some(Segment::Buf { start, end }) => {
                    bytes.extend_from_slice(&self.buf[*start..*end.min(&(start + want))]);
                }
                Some(Segment::Shared { bytes: held, start, end }) => {
                    bytes.extend_from_slice(&(**held).as_ref()[*start..*end.min(&(start + want))]);
                }
                Some(Segment::File { file, offset, len, .. }) => {
                    bytes.resize(at + want.min(*len as usize), 0);
                    read_exact_at(file.file.as_fd(), &mut bytes[at..], *offset).map_err(|e| {
                        if e.kind() == io::ErrorKind::UnexpectedEof {
                            file.shrank()
                        } else {
                            e
                        }
                    })?;
                }
            }
            self.advance(bytes.len() - at);
        }
        if self.segments.is_empty() {
            self.buf.clear();
            self.committed = 0;
        }
        Ok(bytes)
    }

    /// Writes as much as the socket takes.
    pub fn flush(&mut self, sock: BorrowedFd<'_>) -> io::Result<Flushed> {
        loop {
            match self.flush_once(sock) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Encrypts and writes as much as the socket takes. Each round hands
    /// the session what it encrypts whole ([`Session::room`]): in-memory
    /// segments and the next piece of a file region, gathered, so a head
    /// and its body share a record and records stay full across segments;
    /// then one write of all the records.
    pub fn flush_tls(&mut self, tls: &mut Session, sock: &std::net::TcpStream, now: Instant) -> io::Result<Flushed> {
        tls.start_flush(sock, now);
        loop {
            // Records held back (tickets) join this output's first write.
            let join = !self.segments.is_empty() && tls.take_held();
            if !join && !tls.send_pending(sock)? {
                return Ok(Flushed::Blocked);
            }
            if self.segments.is_empty() {
                self.buf.clear();
                self.committed = 0;
                return Ok(Flushed::All);
            }
            let room = tls.room();
            self.load_chunk(room)?;
            let mut iov = [IoSlice::new(&[]); tls::MAX_BUFS];
            let (mut count, mut total, mut before_file) = (0, 0, None);
            for seg in self.segments.iter().take(tls::MAX_BUFS) {
                let bytes: &[u8] = match seg {
                    Segment::Buf { start, end } => &self.buf[*start..*end],
                    Segment::Shared { bytes, start, end } => &(**bytes).as_ref()[*start..*end],
                    Segment::File { .. } => {
                        before_file = Some(total);
                        &self.chunk[self.chunk_pos..]
                    }
                };
                let piece = &bytes[..bytes.len().min(room - total)];
                iov[count] = IoSlice::new(piece);
                count += 1;
                total += piece.len();
                // One chunk buffer: nothing after the first file region.
                if total == room || before_file.is_some() {
                    break;
                }
            }
            let taken = tls.write_plain(&iov[..count]);
            if taken == 0 {
                // Nothing pending and nothing taken: the handshake is not
                // done, so nothing may be sent yet.
                return Err(io::Error::other("TLS session not ready for data"));
            }
            if let Some(before) = before_file {
                self.chunk_pos += taken.saturating_sub(before);
            }
            self.advance(taken);
        }
    }

    /// Over TLS: reads the next piece of the first file region queued into
    /// the chunk buffer, if it is used up and the region begins within
    /// `room` bytes; the piece ends where `room` does.
    fn load_chunk(&mut self, room: usize) -> io::Result<()> {
        if self.chunk_pos < self.chunk.len() {
            return Ok(());
        }
        let mut before = 0;
        for seg in self.segments.iter().take(tls::MAX_BUFS) {
            if before >= room {
                return Ok(());
            }
            match seg {
                Segment::Buf { start, end } | Segment::Shared { start, end, .. } => before += end - start,
                Segment::File { file, offset, len, .. } => {
                    let want = (*len).min((room - before) as u64) as usize;
                    return self.read_chunk(file.clone(), *offset, want);
                }
            }
        }
        Ok(())
    }

    /// Reads the `want` bytes at `offset` of a file region into the chunk
    /// buffer.
    fn read_chunk(&mut self, file: Arc<OpenFile>, offset: u64, want: usize) -> io::Result<()> {
        self.chunk.resize(want, 0);
        read_exact_at(file.file.as_fd(), &mut self.chunk, offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                file.shrank()
            } else {
                e
            }
        })?;
        self.chunk_pos = 0;
        Ok(())
    }

    /// How much of a file region at `offset` may be sent now: with the I/O
    /// pool, only what is known to be in the page cache.
    fn sendable(&self, offset: u64, len: u64, ready: u64) -> u64 {
        if self.offload {
            ready.saturating_sub(offset).min(len)
        } else {
            len
        }
    }

    /// The queue's front as one `sendmsg` carries it: in-memory segments
    /// and mapped regions (as far as their pages are known to be ready),
    /// at most [`MAX_IOV`], stopping at a region another method sends.
    fn gather(&self) -> Gathered<'_> {
        let mut g = Gathered { iov: [IoSlice::new(&[]); MAX_IOV], count: 0, want: 0, more: false, mapped: None };
        for seg in &self.segments {
            if g.count == MAX_IOV {
                break;
            }
            let bytes: &[u8] = match seg {
                Segment::Buf { start, end } => &self.buf[*start..*end],
                Segment::Shared { bytes, start, end } => &(**bytes).as_ref()[*start..*end],
                Segment::File { file, offset, len, method, ready } => match (method, &file.mapping) {
                    (IoMethod::Mmap, Some(map)) if self.sendable(*offset, *len, *ready) > 0 => {
                        g.mapped.get_or_insert(file);
                        let n = self.sendable(*offset, *len, *ready);
                        if n < *len {
                            // The rest waits for its pages.
                            g.push(&map[*offset as usize..(*offset + n) as usize]);
                            g.more = true;
                            break;
                        }
                        &map[*offset as usize..(*offset + *len) as usize]
                    }
                    _ => {
                        // Hold the rest back until the file region that
                        // follows is sent.
                        g.more = true;
                        break;
                    }
                },
            };
            g.push(bytes);
        }
        g
    }

    /// Whether the queue's front is for a `sendmsg` through an engine's
    /// ring ([`OutQueue::gather_into`]); else it goes by
    /// [`OutQueue::flush`]: a `sendfile` or `read` region, a cold one,
    /// nothing — or a head a `sendfile` or `read` region follows, which
    /// leaves with it as under any engine (`MSG_MORE`, then the region at
    /// once, rather than a completion later).
    pub fn ring_ready(&mut self) -> bool {
        if self.offload && self.cold_region().is_some() {
            return false;
        }
        let gatherable = matches!(
            self.segments.front(),
            Some(Segment::Buf { .. } | Segment::Shared { .. } | Segment::File { method: IoMethod::Mmap, .. })
        );
        let g = self.gather();
        let written_here = |s: &Segment| matches!(s, Segment::File { method: IoMethod::Sendfile | IoMethod::Read, .. });
        gatherable && g.count > 0 && !self.segments.get(g.count).is_some_and(written_here)
    }

    /// Gathers the queue's front into `s` for a `sendmsg` through an
    /// engine's ring (after [`OutQueue::ring_ready`]); the front stays
    /// queued until [`OutQueue::ring_sent`]. False if there is nothing to
    /// gather.
    pub fn gather_into(&mut self, s: &mut Sending) -> bool {
        s.clear();
        let g = self.gather();
        let mut copied = [None; MAX_IOV];
        for (i, (seg, piece)) in self.segments.iter().zip(&g.iov[..g.count]).enumerate() {
            match seg {
                Segment::Buf { .. } => {
                    copied[i] = Some(s.bytes.len());
                    s.bytes.extend_from_slice(piece);
                }
                Segment::Shared { bytes, .. } => s.shared.push(bytes.clone()),
                Segment::File { file, .. } => s.files.push(file.clone()),
            }
            s.iov[i] = libc::iovec { iov_base: piece.as_ptr().cast_mut().cast(), iov_len: piece.len() };
        }
        // The copies' addresses, once `bytes` has stopped growing.
        for (slot, at) in s.iov.iter_mut().zip(copied).filter_map(|(v, at)| Some((v, at?))) {
            slot.iov_base = s.bytes[at..].as_ptr().cast_mut().cast();
        }
        (s.count, s.len, s.more, s.mapped) = (g.count, g.want, g.more, g.mapped.cloned());
        self.in_flight = (s.count > 0).then_some(s.len);
        s.count > 0
    }

    /// A send through a ring completed having sent `n` bytes: they leave
    /// the queue (unless it was cleared meanwhile). Whether it sent all it
    /// was given.
    pub fn ring_sent(&mut self, n: usize) -> bool {
        match self.in_flight.take() {
            Some(want) => {
                self.advance(n);
                self.compact();
                n == want
            }
            None => {
                self.written += n as u64;
                true
            }
        }
    }

    fn flush_once(&mut self, sock: BorrowedFd<'_>) -> io::Result<Flushed> {
        debug_assert!(self.in_flight.is_none(), "a send through a ring is in flight");
        let mut by_sendfile = 0;
        loop {
            if self.offload {
                if let Some((file, offset, len)) = self.cold_region() {
                    return Ok(Flushed::Cold { file, offset, len });
                }
            }
            let Some(front) = self.segments.front() else {
                self.buf.clear();
                self.committed = 0;
                return Ok(Flushed::All);
            };
            let (n, wanted) = match front {
                Segment::File { file, offset, len, method: IoMethod::Sendfile, ready } => {
                    let turn = self.sendfile_max_chunk - by_sendfile;
                    if turn == 0 {
                        return Ok(Flushed::Yield);
                    }
                    let want = self.sendable(*offset, *len, *ready).min(turn).min(1 << 30) as usize;
                    match sys::sendfile(sock, file.file.as_fd(), *offset, want) {
                        Ok(0) => return Err(file.shrank()),
                        Ok(n) => {
                            by_sendfile += n as u64;
                            (n, want)
                        }
                        Err(e) if sys::would_block(&e) => return Ok(Flushed::Blocked),
                        Err(e) => return Err(e),
                    }
                }
                Segment::File { file, offset, len, method: IoMethod::Uring, .. } => {
                    let len = (*len).min(COLD_READ);
                    let cached = file.resident_until(*offset, len) == Some(*offset + len);
                    let (file, offset, len) = (file.clone(), *offset, len as usize);
                    return Ok(Flushed::Fetch { file, offset, len, cached });
                }
                Segment::File { file, offset, len, method: IoMethod::Read, ready } => {
                    if self.chunk_pos == self.chunk.len() {
                        let want = self.sendable(*offset, *len, *ready).min(self.chunk_size as u64) as usize;
                        self.read_chunk(file.clone(), *offset, want)?;
                    }
                    let pending = &self.chunk[self.chunk_pos..];
                    let want = pending.len();
                    match sys::send_vectored(sock, &[IoSlice::new(pending)], false) {
                        Ok(n) => {
                            self.chunk_pos += n;
                            (n, want)
                        }
                        Err(e) if sys::would_block(&e) => return Ok(Flushed::Blocked),
                        Err(e) => return Err(e),
                    }
                }
                _ => {
                    let g = self.gather();
                    match sys::send_vectored(sock, &g.iov[..g.count], g.more) {
                        Ok(n) => (n, g.want),
                        Err(e) if sys::would_block(&e) => return Ok(Flushed::Blocked),
                        Err(e) => return Err(fault(e, g.mapped)),
                    }
                }
            };
            if n == 0 && wanted > 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "socket took no bytes"));
            }
            self.advance(n);
            // A short write is not proof of a full socket: a file that
            // shrank under its response ends early too, and no readiness
            // edge would ever follow. Only `EAGAIN` means "full"; the next
            // round tells the two apart (`0` or `EFAULT` at a file's end).
        }
    }

    /// Drops `n` written bytes from the front of the queue.
    fn advance(&mut self, mut n: usize) {
        self.written += n as u64;
        while n > 0 {
            let Some(front) = self.segments.front_mut() else { return };
            let (left, consumed) = match front {
                Segment::Buf { start, end } | Segment::Shared { start, end, .. } => {
                    let take = n.min(*end - *start);
                    *start += take;
                    (*end - *start, take)
                }
                Segment::File { offset, len, .. } => {
                    let take = (n as u64).min(*len);
                    *offset += take;
                    *len -= take;
                    (*len as usize, take as usize)
                }
            };
            n -= consumed;
            if left == 0 {
                if matches!(front, Segment::File { .. }) {
                    self.chunk.clear();
                    self.chunk_pos = 0;
                }
                self.segments.pop_front();
            }
        }
    }

    /// Drops the sent bytes from the start of `buf` once they are at
    /// least half of it. A flush that sends everything empties it; through
    /// a ring, a relay queues more while a send is in flight, so the queue
    /// may never be empty when a send completes and `buf` would grow by
    /// the whole response.
    fn compact(&mut self) {
        let low = self
            .segments
            .iter()
            .find_map(|s| match s {
                Segment::Buf { start, .. } => Some(*start),
                _ => None,
            })
            .unwrap_or(self.committed);
        if low == 0 || low < self.buf.len() / 2 {
            return;
        }
        self.buf.drain(..low);
        for seg in &mut self.segments {
            if let Segment::Buf { start, end } = seg {
                *start -= low;
                *end -= low;
            }
        }
        self.committed -= low;
    }

    /// Drops everything queued (the connection is going away).
    pub fn clear(&mut self) {
        self.in_flight = None;
        self.segments.clear();
        self.buf.clear();
        self.committed = 0;
        self.chunk.clear();
        self.chunk_pos = 0;
    }

    /// Gives up the buffers' memory while the connection is idle.
    pub fn release(&mut self) -> (Vec<u8>, Vec<u8>) {
        debug_assert!(self.segments.is_empty());
        // Sent bytes may still be in `buf` (a TLS flush that blocked on
        // its records left it as it was): none of them count any more.
        self.committed = 0;
        (std::mem::take(&mut self.buf), std::mem::take(&mut self.chunk))
    }

    /// Adopts a buffer for the next response.
    pub fn adopt(&mut self, buf: Vec<u8>) {
        debug_assert!(self.buf.is_empty() && self.segments.is_empty());
        self.buf = buf;
        self.buf.clear();
    }
}

fn read_exact_at(file: BorrowedFd<'_>, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match sys::pread(file, buf, offset)? {
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while read")),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::FileExt;
    use std::time::Duration;

    use super::*;

    /// Sends a head and a 1 MiB file by sendfile through a queue with
    /// `max_chunk` to a reader; returns the bytes it got, the most file
    /// bytes one flush sent, and the number of yields.
    fn send_with(max_chunk: u64) -> (Vec<u8>, Arc<OpenFile>, u64, usize) {
        let file = OpenFile::temporary(1 << 20).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            client.read_to_end(&mut got).unwrap();
            got
        });
        let mut q = OutQueue::new(64 * 1024, max_chunk, false);
        q.buf.extend_from_slice(b"head");
        q.push_file(&file, 0, file.size, IoMethod::Sendfile);
        let (mut most, mut yields) = (0, 0);
        loop {
            let before = q.written;
            let flushed = q.flush(server.as_fd()).unwrap();
            most = most.max(q.written - before);
            match flushed {
                Flushed::All => break,
                Flushed::Yield => yields += 1,
                Flushed::Blocked => sys::wait_writable(&[server.as_fd()], Duration::from_secs(5)).unwrap(),
                Flushed::Cold { .. } | Flushed::Fetch { .. } => unreachable!("no offload, no ring"),
            }
        }
        drop(server);
        (reader.join().unwrap(), file, most, yields)
    }

    /// A queue whose bytes were all taken (by TLS, its records still to
    /// be written) gives its buffer up while idle: the next buffer's bytes
    /// are queued from its start (an HTTP/2 session over TLS panicked, or
    /// would have sent stale bytes, with the old offset).
    #[test]
    fn a_buffer_given_up_after_its_bytes_were_taken_queues_the_next_from_its_start() {
        let mut q = OutQueue::new(64 * 1024, 1 << 20, false);
        q.buf.extend_from_slice(b"frames sent as records");
        q.commit_buf();
        q.advance(q.queued() as usize);
        assert!(q.is_empty());
        let (buf, _) = q.release();
        q.adopt(buf);
        q.buf.extend_from_slice(b"next");
        q.commit_buf();
        assert_eq!(q.pull(100).unwrap(), b"next");
    }

    #[test]
    fn sendfile_yields_after_its_chunk_and_sends_every_byte() {
        let (got, file, most, yields) = send_with(256 * 1024);
        let mut want = b"head".to_vec();
        want.resize(4 + file.size as usize, 0);
        file.file.read_exact_at(&mut want[4..], 0).unwrap();
        assert!(got == want, "{} bytes, not the {} sent", got.len(), want.len());
        assert!(most <= 4 + 256 * 1024, "one flush sent {most} bytes");
        assert!(yields >= 1);
        // 0: no limit, never a yield.
        let (got, _, _, yields) = send_with(0);
        assert!(got == want && yields == 0);
    }
}
