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
}

/// Most bytes of a cold file region read by one pool task.
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
        self.segments.iter().all(|s| !matches!(s, Segment::File { method: IoMethod::Sendfile | IoMethod::Read, .. }))
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
        let Segment::File { file, offset, len, ready, .. } = seg else { return None };
        if *ready > *offset {
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

    fn flush_once(&mut self, sock: BorrowedFd<'_>) -> io::Result<Flushed> {
        let mut by_sendfile = 0;
        loop {
            if self.offload {
                if let Some((file, offset, len)) = self.cold_region() {
                    return Ok(Flushed::Cold { file, offset, len });
                }
            }
            let offload = self.offload;
            // How much of a file region may be sent now.
            let sendable =
                |offset: u64, len: u64, ready: u64| if offload { ready.saturating_sub(offset).min(len) } else { len };
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
                    let want = sendable(*offset, *len, *ready).min(turn).min(1 << 30) as usize;
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
                Segment::File { file, offset, len, method: IoMethod::Read, ready } => {
                    if self.chunk_pos == self.chunk.len() {
                        let want = sendable(*offset, *len, *ready).min(self.chunk_size as u64) as usize;
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
                    let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                    let mut count = 0;
                    let mut want = 0;
                    let mut more = false;
                    let mut mapped: Option<&OpenFile> = None;
                    for seg in &self.segments {
                        if count == MAX_IOV {
                            break;
                        }
                        let bytes: &[u8] = match seg {
                            Segment::Buf { start, end } => &self.buf[*start..*end],
                            Segment::Shared { bytes, start, end } => &(**bytes).as_ref()[*start..*end],
                            Segment::File { file, offset, len, method, ready } => match (method, &file.mapping) {
                                (IoMethod::Mmap, Some(map)) if sendable(*offset, *len, *ready) > 0 => {
                                    mapped.get_or_insert(file);
                                    let n = sendable(*offset, *len, *ready);
                                    if n < *len {
                                        // The rest waits for its pages.
                                        iov[count] = IoSlice::new(&map[*offset as usize..(*offset + n) as usize]);
                                        count += 1;
                                        want += n as usize;
                                        more = true;
                                        break;
                                    }
                                    &map[*offset as usize..(*offset + *len) as usize]
                                }
                                _ => {
                                    // Hold the rest back until the file
                                    // region that follows is sent.
                                    more = true;
                                    break;
                                }
                            },
                        };
                        iov[count] = IoSlice::new(bytes);
                        count += 1;
                        want += bytes.len();
                    }
                    match sys::send_vectored(sock, &iov[..count], more) {
                        Ok(n) => (n, want),
                        Err(e) if sys::would_block(&e) => return Ok(Flushed::Blocked),
                        // The kernel faulted on a page past the file's new
                        // end (a mapping never faults in user space).
                        Err(e) => {
                            return Err(match mapped {
                                Some(file) if e.raw_os_error() == Some(libc::EFAULT) => file.shrank(),
                                _ => e,
                            })
                        }
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

    /// Drops everything queued (the connection is going away).
    pub fn clear(&mut self) {
        self.segments.clear();
        self.buf.clear();
        self.committed = 0;
        self.chunk.clear();
        self.chunk_pos = 0;
    }

    /// Gives up the buffers' memory while the connection is idle.
    pub fn release(&mut self) -> (Vec<u8>, Vec<u8>) {
        debug_assert!(self.segments.is_empty());
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
                Flushed::Cold { .. } => unreachable!("no offload"),
            }
        }
        drop(server);
        (reader.join().unwrap(), file, most, yields)
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
