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
use std::sync::Arc;

use crate::config::IoMethod;
use crate::open_files::OpenFile;
use crate::sys;
use crate::tls::Session;

enum Segment {
    /// `OutQueue::buf[start..end]`.
    Buf { start: usize, end: usize },
    /// A region of a file, sent with `method`.
    File { file: Arc<OpenFile>, offset: u64, len: u64, method: IoMethod },
    /// Bytes held elsewhere (a cached compressed variant): `bytes[start..end]`,
    /// gathered into the same `sendmsg` as the head, like a mapping. The
    /// `Arc` keeps them alive, however the cache changes, until sent.
    Shared { bytes: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, end: usize },
}

/// The outcome of a flush attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Flushed {
    /// Everything queued was written.
    All,
    /// The socket is full; wait until it is writable.
    Blocked,
}

/// Most segments gathered into one `sendmsg`.
const MAX_IOV: usize = 32;

/// One connection's pending output.
pub struct OutQueue {
    chunk_size: usize,
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
}

impl OutQueue {
    pub fn new(chunk_size: usize) -> Self {
        OutQueue {
            chunk_size,
            buf: Vec::new(),
            segments: VecDeque::new(),
            chunk: Vec::new(),
            chunk_pos: 0,
            committed: 0,
            written: 0,
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
        if small_enough_to_copy {
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
        self.segments.push_back(Segment::File { file: file.clone(), offset, len, method });
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

    /// Encrypts and writes as much as the socket takes.
    pub fn flush_tls(&mut self, tls: &mut Session, sock: &std::net::TcpStream) -> io::Result<Flushed> {
        tls.start_flush();
        loop {
            if !tls.send_pending(sock)? {
                return Ok(Flushed::Blocked);
            }
            let Some(front) = self.segments.front() else {
                self.buf.clear();
                self.committed = 0;
                return Ok(Flushed::All);
            };
            let taken = match front {
                Segment::Buf { start, end } => tls.write_plain(&self.buf[*start..*end]),
                Segment::Shared { bytes, start, end } => tls.write_plain(&(**bytes).as_ref()[*start..*end]),
                Segment::File { file, offset, len, .. } => {
                    if self.chunk_pos == self.chunk.len() {
                        self.read_chunk(file.clone(), *offset, *len)?;
                    }
                    let n = tls.write_plain(&self.chunk[self.chunk_pos..]);
                    self.chunk_pos += n;
                    n
                }
            };
            if taken == 0 {
                // Nothing pending and nothing taken: the handshake is not
                // done, so nothing may be sent yet.
                return Err(io::Error::other("TLS session not ready for data"));
            }
            self.advance(taken);
        }
    }

    /// Reads the next chunk of a file region into the chunk buffer.
    fn read_chunk(&mut self, file: Arc<OpenFile>, offset: u64, len: u64) -> io::Result<()> {
        let want = len.min(self.chunk_size as u64) as usize;
        self.chunk.resize(want, 0);
        read_exact_at(file.file.as_fd(), &mut self.chunk, offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                shrank(&file)
            } else {
                e
            }
        })?;
        self.chunk_pos = 0;
        Ok(())
    }

    fn flush_once(&mut self, sock: BorrowedFd<'_>) -> io::Result<Flushed> {
        loop {
            let Some(front) = self.segments.front() else {
                self.buf.clear();
                self.committed = 0;
                return Ok(Flushed::All);
            };
            let (n, wanted) = match front {
                Segment::File { file, offset, len, method: IoMethod::Sendfile } => {
                    let want = (*len).min(1 << 30) as usize;
                    match sys::sendfile(sock, file.file.as_fd(), *offset, want) {
                        Ok(0) => return Err(shrank(file)),
                        Ok(n) => (n, want),
                        Err(e) if sys::would_block(&e) => return Ok(Flushed::Blocked),
                        Err(e) => return Err(e),
                    }
                }
                Segment::File { file, offset, len, method: IoMethod::Read } => {
                    if self.chunk_pos == self.chunk.len() {
                        self.read_chunk(file.clone(), *offset, *len)?;
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
                            Segment::File { file, offset, len, method } => match (method, &file.mapping) {
                                (IoMethod::Mmap, Some(map)) => {
                                    mapped.get_or_insert(file);
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
                                Some(file) if e.raw_os_error() == Some(libc::EFAULT) => shrank(file),
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

/// The error for a file that ended before its announced length: the
/// response cannot be completed, so the connection must close.
fn shrank(file: &OpenFile) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("file /{} shrank while sent: response cut short", String::from_utf8_lossy(&file.rel_path)),
    )
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
