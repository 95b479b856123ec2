//! A `uring` worker's ring: set up (and refused with the reason) at
//! start, the operations the worker asks of it, each named by an [`Op`]
//! in its user data, and the one `io_uring_enter` per loop turn that
//! submits them all and waits.
//!
//! The ring is made by the worker's own thread and only ever used there
//! (`SINGLE_ISSUER`); completions are run only when the worker enters the
//! kernel to wait (`DEFER_TASKRUN`), so a burst of them is one batch and
//! never interrupts the worker mid-turn.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::squeue::{Entry, Flags};
use io_uring::types::{CancelBuilder, Fd, SubmitArgs, Timespec};
use io_uring::{opcode, IoUring};

/// Submission queue entries (a full queue is submitted mid-turn).
const ENTRIES: u32 = 1024;
/// Completion queue entries: several completions per submission (a
/// multishot accept's, a receive's and a send's for one request).
const CQ_ENTRIES: u32 = 8 * ENTRIES;

/// What a completion is for: the kind, and for a connection's socket the
/// connection's key and generation (a key is reused once its connection
/// is gone; a completion of the one before is told apart by the
/// generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Listener `i`'s multishot accept.
    Accept(usize),
    /// The worker's epoll set became readable (multishot poll).
    Epoll,
    Recv(Tag),
    Send(Tag),
    /// A socket has room again (its multishot poll, armed after a write
    /// the connection made itself would have blocked).
    Writable(Tag),
    /// A file region read for a connection (the `uring` method).
    Read(Tag),
    /// A cancellation that failed (the operation had ended).
    Cancel,
}

/// A connection's key and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub key: usize,
    pub gen: u32,
}

const KIND_SHIFT: u32 = 56;
const GEN_SHIFT: u32 = 32;
const GEN_MASK: u64 = (1 << (KIND_SHIFT - GEN_SHIFT)) - 1;

impl Op {
    fn encode(self) -> u64 {
        let (kind, low) = match self {
            Op::Accept(i) => (1, i as u64),
            Op::Epoll => (2, 0),
            Op::Recv(t) => (3, t.encode()),
            Op::Send(t) => (4, t.encode()),
            Op::Writable(t) => (5, t.encode()),
            Op::Cancel => (6, 0),
            Op::Read(t) => (7, t.encode()),
        };
        (kind << KIND_SHIFT) | low
    }

    pub fn decode(data: u64) -> Option<Op> {
        let low = data & ((1 << KIND_SHIFT) - 1);
        let tag = Tag { key: (low & u64::from(u32::MAX)) as usize, gen: (low >> GEN_SHIFT) as u32 };
        Some(match data >> KIND_SHIFT {
            1 => Op::Accept(low as usize),
            2 => Op::Epoll,
            3 => Op::Recv(tag),
            4 => Op::Send(tag),
            5 => Op::Writable(tag),
            6 => Op::Cancel,
            7 => Op::Read(tag),
            _ => return None,
        })
    }
}

impl Tag {
    fn encode(self) -> u64 {
        ((u64::from(self.gen) & GEN_MASK) << GEN_SHIFT) | (self.key as u64 & u64::from(u32::MAX))
    }

    /// The generation after `gen`, as [`Op`] keeps it.
    pub fn next_gen(gen: u32) -> u32 {
        ((u64::from(gen) + 1) & GEN_MASK) as u32
    }
}

/// One completion, copied out of the queue.
#[derive(Clone, Copy)]
pub struct Done {
    pub op: Op,
    pub result: i32,
    pub flags: u32,
}

/// Completions a batched wait gathers at most before it wakes early.
const BATCH: usize = 64;

pub struct Ring {
    ring: IoUring,
    /// The longest a wait after a busy turn lets completions gather
    /// (`server.batch_wait`; zero where the kernel cannot).
    batch: Duration,
}

impl Ring {
    /// A ring for the calling thread that lets completions gather for up
    /// to `batch` after a busy turn; an error says why io_uring cannot be
    /// had here ([`unavailable`]).
    pub fn new(batch: Duration) -> io::Result<Ring> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_submit_all()
            .setup_cqsize(CQ_ENTRIES)
            .build(ENTRIES)
            .map_err(unavailable)?;
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe).map_err(unavailable)?;
        let needed = [
            opcode::Accept::CODE,
            opcode::Recv::CODE,
            opcode::SendMsg::CODE,
            opcode::PollAdd::CODE,
            opcode::AsyncCancel::CODE,
            opcode::Read::CODE,
        ];
        if let Some(op) = needed.iter().find(|&&op| !probe.is_supported(op)) {
            return Err(io::Error::other(format!(
                "io_uring lacks operation {op} here: server.model = \"uring\" needs Linux 6.1 or later"
            )));
        }
        if !batch.is_zero() && !ring.params().is_feature_min_timeout() {
            crate::error_log::log!(
                crate::error_log::Level::Warn,
                "server.batch_wait: this kernel's io_uring cannot wait a minimum time (Linux 6.12 or later): off"
            );
        }
        let batch = if ring.params().is_feature_min_timeout() { batch } else { Duration::ZERO };
        Ok(Ring { ring, batch })
    }

    pub fn submitter(&self) -> io_uring::Submitter<'_> {
        self.ring.submitter()
    }

    /// Queues `entry` for the next submission (submitting what is queued
    /// first when the queue is full).
    fn push(&mut self, entry: Entry) {
        loop {
            // SAFETY: every entry's buffers are kept alive by the worker
            // until its completion (see the callers).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) && e.kind() != io::ErrorKind::Interrupted {
                    crate::error_log::log!(crate::error_log::Level::Error, "io_uring submission failed: {e}");
                }
            }
        }
    }

    pub fn accept(&mut self, listener: RawFd, index: usize) {
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        self.push(opcode::AcceptMulti::new(Fd(listener)).flags(flags).build().user_data(Op::Accept(index).encode()));
    }

    /// Watches `fd` for reading (multishot, edge-triggered).
    pub fn poll_readable(&mut self, fd: RawFd, op: Op) {
        self.push(opcode::PollAdd::new(Fd(fd), libc::POLLIN as u32).multi(true).build().user_data(op.encode()));
    }

    /// Reports each time `fd` gets room (or an error), edge-triggered,
    /// until cancelled: armed once, where a poll per wait would be armed
    /// and torn down for every write that blocks.
    pub fn poll_writable(&mut self, fd: RawFd, tag: Tag) {
        let mask = (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) as u32;
        self.push(opcode::PollAdd::new(Fd(fd), mask).multi(true).build().user_data(Op::Writable(tag).encode()));
    }

    /// Receives into a buffer of group `group`.
    pub fn recv(&mut self, fd: RawFd, group: u16, tag: Tag) {
        let entry = opcode::Recv::new(Fd(fd), std::ptr::null_mut(), 0).buf_group(group).build();
        self.push(entry.flags(Flags::BUFFER_SELECT).user_data(Op::Recv(tag).encode()));
    }

    /// Sends `msg` with `flags`.
    ///
    /// # Safety
    /// `msg` and every byte it points to stay valid and unchanged until
    /// the completion.
    pub unsafe fn send(&mut self, fd: RawFd, msg: *const libc::msghdr, flags: u32, tag: Tag) {
        self.push(opcode::SendMsg::new(Fd(fd), msg).flags(flags).build().user_data(Op::Send(tag).encode()));
    }

    /// Reads `len` bytes at `offset` of `file` into `buf`: at once when
    /// `cached`, else in the kernel's worker threads from the start (a
    /// read tried at once may block the worker on some file systems).
    ///
    /// # Safety
    /// `buf` stays valid, and holds `len` bytes, until the completion.
    pub unsafe fn read(&mut self, file: RawFd, buf: *mut u8, len: usize, offset: u64, cached: bool, tag: Tag) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let entry = opcode::Read::new(Fd(file), buf, len).offset(offset).build();
        let entry = if cached { entry } else { entry.flags(Flags::ASYNC) };
        self.push(entry.user_data(Op::Read(tag).encode()));
    }

    /// Cancels the operation `op` names (its completion still comes).
    pub fn cancel(&mut self, op: Op) {
        let entry = opcode::AsyncCancel::new(op.encode()).build();
        self.push(entry.flags(Flags::SKIP_SUCCESS).user_data(Op::Cancel.encode()));
    }

    /// Cancels every operation in flight (before the worker ends).
    pub fn cancel_all(&mut self) {
        let entry = opcode::AsyncCancel2::new(CancelBuilder::any()).build();
        self.push(entry.flags(Flags::SKIP_SUCCESS).user_data(Op::Cancel.encode()));
    }

    /// Submits what is queued and waits up to `timeout` for a completion:
    /// the loop turn's one system call. After a `busy` turn, completions
    /// may gather for the batch time first (up to [`BATCH`] of them).
    pub fn wait(&mut self, timeout: Duration, busy: bool) -> io::Result<()> {
        let ts = Timespec::from(timeout);
        let args = SubmitArgs::new().timespec(&ts);
        let gather = busy && !self.batch.is_zero() && timeout > self.batch;
        let (want, args) = match gather {
            true => (BATCH, args.min_wait_usec(u32::try_from(self.batch.as_micros()).unwrap_or(u32::MAX))),
            false => (1, args),
        };
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The completions that came, into `done` (emptied first).
    pub fn completions(&mut self, done: &mut Vec<Done>) {
        done.clear();
        for cqe in self.ring.completion() {
            if let Some(op) = Op::decode(cqe.user_data()) {
                done.push(Done { op, result: cqe.result(), flags: cqe.flags() });
            }
        }
    }
}

/// Why io_uring cannot be had, from the error its set-up gave: the kernel
/// has none, a sysctl or a seccomp profile (as Docker's default) refuses
/// it, or it is older than the engine needs.
pub fn unavailable(e: io::Error) -> io::Error {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    let why = match (e.raw_os_error(), disabled.as_deref().map(str::trim)) {
        (Some(libc::ENOSYS), _) => "this kernel has no io_uring".to_string(),
        (Some(libc::EPERM), Some("2")) => "io_uring is disabled by the sysctl kernel.io_uring_disabled = 2".into(),
        (Some(libc::EPERM), Some("1")) => {
            "io_uring is restricted by the sysctl kernel.io_uring_disabled = 1 (to kernel.io_uring_group)".into()
        }
        (Some(libc::EPERM), _) => {
            "io_uring is refused (EPERM): a seccomp profile forbids it (as Docker's default does)".into()
        }
        (Some(libc::EINVAL), _) => "this kernel's io_uring is too old: it needs Linux 6.1 or later".into(),
        _ => format!("io_uring cannot be set up: {e}"),
    };
    io::Error::new(e.kind(), format!("server.model = \"uring\": {why}; use another model (\"event\")"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_names_the_operation_and_the_connection() {
        let tag = Tag { key: 123_456, gen: Tag::next_gen(GEN_MASK as u32 - 1) };
        for op in [Op::Accept(3), Op::Epoll, Op::Recv(tag), Op::Send(tag), Op::Writable(tag), Op::Cancel, Op::Read(tag)]
        {
            assert_eq!(Op::decode(op.encode()), Some(op));
        }
        assert_eq!(Tag::next_gen(GEN_MASK as u32), 0, "generations wrap within their bits");
        assert_eq!(Op::decode(0), None);
    }

    #[test]
    fn a_refusal_names_its_cause_and_the_way_out() {
        let said = |errno| unavailable(io::Error::from_raw_os_error(errno)).to_string();
        assert!(said(libc::ENOSYS).contains("this kernel has no io_uring"), "{}", said(libc::ENOSYS));
        assert!(said(libc::EINVAL).contains("needs Linux 6.1 or later"), "{}", said(libc::EINVAL));
        if std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").is_ok_and(|s| s.trim() == "0") {
            assert!(said(libc::EPERM).contains("a seccomp profile forbids it"), "{}", said(libc::EPERM));
        }
        for errno in [libc::ENOSYS, libc::EPERM, libc::EINVAL, libc::ENOMEM] {
            let e = said(errno);
            assert!(e.starts_with("server.model = \"uring\": ") && e.ends_with("use another model (\"event\")"), "{e}");
        }
    }

    /// Whether `IORING_OP_SEND_ZC` pays here against a plain send through
    /// the ring (issue 34): the process's CPU time per MiB sent over
    /// loopback to a reader thread, median of alternating rounds (the
    /// kernel's work dominates, so a debug build measures it). Kept out of
    /// the default run: `cargo test -p tern-server --lib send_zc --
    /// --ignored --nocapture`; its figures are in bench/RESULTS.md.
    #[test]
    #[ignore]
    fn send_zc_against_send_on_loopback() {
        use std::io::Read;
        use std::net::{TcpListener, TcpStream};
        use std::os::fd::AsRawFd;

        fn cpu_ns() -> u128 {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid timespec to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
        }
        // Sends `body` `times` times on `sock`, each whole before the next
        // (a zero-copy send's buffer is free once its notification came).
        fn send_all(ring: &mut IoUring, sock: RawFd, body: &[u8], times: usize, zc: bool) {
            for _ in 0..times {
                let mut at = 0;
                while at < body.len() {
                    let (ptr, len) = (body[at..].as_ptr(), (body.len() - at) as u32);
                    let entry = match zc {
                        true => opcode::SendZc::new(Fd(sock), ptr, len).build(),
                        false => opcode::Send::new(Fd(sock), ptr, len).build(),
                    };
                    // SAFETY: `body` outlives the send and its notification.
                    unsafe { ring.submission().push(&entry).unwrap() };
                    let (mut sent, mut pending) = (None, 1);
                    while pending > 0 {
                        ring.submit_and_wait(1).unwrap();
                        for cqe in ring.completion() {
                            if io_uring::cqueue::notif(cqe.flags()) {
                                pending -= 1;
                                continue;
                            }
                            assert!(cqe.result() > 0, "send failed: {}", cqe.result());
                            sent = Some(cqe.result() as usize);
                            pending += usize::from(io_uring::cqueue::more(cqe.flags()));
                            pending -= 1;
                        }
                    }
                    at += sent.unwrap();
                }
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 256 << 10];
            while s.read(&mut buf).unwrap() > 0 {}
        });
        let sock = TcpStream::connect(addr).unwrap();
        let mut ring = IoUring::new(8).unwrap();
        for size in [16 << 10, 256 << 10, 1 << 20] {
            let body = vec![7u8; size];
            let times = (256 << 20) / size;
            let mut rounds: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for round in 0..10 {
                let zc = round % 2 == 1;
                let start = cpu_ns();
                send_all(&mut ring, sock.as_raw_fd(), &body, times, zc);
                let per_mib = (cpu_ns() - start) as f64 / 1e3 / 256.0;
                rounds[usize::from(zc)].push(per_mib);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (send, zc) = (median(&mut rounds[0]), median(&mut rounds[1]));
            println!(
                "{} KiB sends: send {send:.0} µs CPU/MiB, send_zc {zc:.0} µs CPU/MiB, zc ÷ send {:.2}",
                size >> 10,
                zc / send
            );
        }
        drop(sock);
        reader.join().unwrap();
    }
}
