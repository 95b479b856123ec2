//! Reading a backend's replies off a kept-alive Unix socket without waking
//! the backend for nothing.
//!
//! Bytes read off a Unix stream socket free their buffers, and the kernel
//! then wakes whoever sleeps on the *sending* socket (`unix_write_space`),
//! whatever that sleeper waits for. A php-fpm child that has sent its reply
//! sleeps in `read()` on that very socket for the next request, so reading
//! the reply made it wake, find nothing and sleep again, often preempting
//! the worker that read: with 8 clients on PHP hello, two wake-ups in three
//! were of this kind. So the first read of a reply only peeks: its bytes
//! stay queued, and are read for good (paid) just after the next request is
//! written, when the child has been woken by that request anyway. A reply
//! longer than one read is paid at once: its sender may be waiting for room.
//!
//! TCP wakes a writer only once it ran out of room, so a TCP link (or one
//! not kept alive) reads as usual.

use std::io;
use std::os::fd::AsFd;

/// The reading side of one link, across the requests it carries.
#[derive(Debug, Default)]
pub struct ReplyReader {
    /// Peek at the first read of each reply.
    peek: bool,
    /// Bytes peeked at the head of the socket's queue, not read yet.
    owed: usize,
    /// The current reply's first read was made.
    started: bool,
}

impl ReplyReader {
    /// For a link that peeks (a kept-alive Unix socket) or not, still owing
    /// `owed` bytes of its last reply.
    pub fn new(peek: bool, owed: usize) -> ReplyReader {
        ReplyReader { peek, owed, started: false }
    }

    /// Bytes of the last reply still queued on the link.
    pub fn owed(&self) -> usize {
        self.owed
    }

    /// Reads what arrived into the spare capacity of `buf` (the first read
    /// of a reply peeks). The last reply's bytes, if still owed (a reply
    /// read while a request body is being written), are read off first.
    pub fn read(&mut self, fd: impl AsFd, buf: &mut Vec<u8>) -> io::Result<usize> {
        self.pay(&fd, buf)?;
        if self.started || !self.peek {
            return crate::sys::read_into(fd, buf);
        }
        let n = crate::sys::peek_into(fd, buf)?;
        if n > 0 {
            self.started = true;
            self.owed = n;
        }
        Ok(n)
    }

    /// Reads the peeked bytes off the link, into the spare capacity of
    /// `buf`, which is left as it was: after the next request is written,
    /// or at once when the reply goes on past them.
    pub fn pay(&mut self, fd: impl AsFd, buf: &mut Vec<u8>) -> io::Result<()> {
        let fd = fd.as_fd();
        while self.owed > 0 {
            buf.reserve(self.owed);
            let spare = &mut buf.spare_capacity_mut()[..self.owed];
            let (filled, _) = rustix::io::read(fd, spare)?;
            if filled.is_empty() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.owed -= filled.len();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    /// Bytes waiting in `sock`'s receive queue.
    fn queued(sock: &UnixStream) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through a valid pointer.
        assert_eq!(unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(sock), libc::FIONREAD, &mut n) }, 0);
        n as usize
    }

    fn pair() -> (UnixStream, UnixStream) {
        let (ours, backend) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (ours, backend)
    }

    /// A link whose last reply, `reply`, was peeked whole: the reader of
    /// its next request, and an empty buffer.
    fn owing(reply: &[u8]) -> (UnixStream, UnixStream, ReplyReader, Vec<u8>) {
        let (ours, mut backend) = pair();
        backend.write_all(reply).unwrap();
        let mut buf = Vec::with_capacity(64);
        let mut last = ReplyReader::new(true, 0);
        assert_eq!(last.read(&ours, &mut buf).unwrap(), reply.len());
        assert_eq!((&buf[..], last.owed(), queued(&ours)), (reply, reply.len(), reply.len()));
        buf.clear();
        (ours, backend, ReplyReader::new(true, last.owed()), buf)
    }

    #[test]
    fn a_whole_reply_stays_queued_until_paid_after_the_next_request() {
        let (ours, mut backend, mut r, mut buf) = owing(b"first reply");
        // The next request is written, then the old reply is paid.
        r.pay(&ours, &mut buf).unwrap();
        assert_eq!((buf.len(), r.owed(), queued(&ours)), (0, 0, 0));
        backend.write_all(b"second").unwrap();
        assert_eq!(r.read(&ours, &mut buf).unwrap(), 6);
        assert_eq!((&buf[..], r.owed(), queued(&ours)), (&b"second"[..], 6, 6));
    }

    #[test]
    fn a_reply_longer_than_one_read_is_paid_at_once_and_read_as_usual() {
        let (ours, mut backend) = pair();
        let mut buf = Vec::with_capacity(64);
        let mut r = ReplyReader::new(true, 0);
        // Nothing yet: the next read still peeks.
        assert_eq!(r.read(&ours, &mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        backend.write_all(b"head ").unwrap();
        assert_eq!(r.read(&ours, &mut buf).unwrap(), 5);
        backend.write_all(b"tail").unwrap();
        r.pay(&ours, &mut buf).unwrap();
        assert_eq!((&buf[..], r.owed(), queued(&ours)), (&b"head "[..], 0, 4));
        assert_eq!(r.read(&ours, &mut buf).unwrap(), 4);
        assert_eq!((&buf[..], r.owed(), queued(&ours)), (&b"head tail"[..], 0, 0));
    }

    #[test]
    fn a_read_before_the_request_is_written_skips_the_last_reply() {
        let (ours, mut backend, mut r, mut buf) = owing(b"old");
        // A long upload: the backend answers before it was all written.
        backend.write_all(b"new").unwrap();
        assert_eq!(r.read(&ours, &mut buf).unwrap(), 3);
        assert_eq!((&buf[..], r.owed(), queued(&ours)), (&b"new"[..], 3, 3));
    }

    #[test]
    fn without_peeking_every_read_takes_the_bytes() {
        let (ours, mut backend) = pair();
        let mut buf = Vec::with_capacity(64);
        backend.write_all(b"reply").unwrap();
        let mut r = ReplyReader::new(false, 0);
        assert_eq!(r.read(&ours, &mut buf).unwrap(), 5);
        assert_eq!((&buf[..], r.owed(), queued(&ours)), (&b"reply"[..], 0, 0));
    }

    #[test]
    fn a_link_closed_while_owing_ends_with_what_was_owed_then_eof() {
        let (ours, backend, mut r, mut buf) = owing(b"reply");
        // php-fpm recycles the child between requests.
        drop(backend);
        r.pay(&ours, &mut buf).unwrap();
        assert_eq!(r.read(&ours, &mut buf).unwrap(), 0);
    }
}
