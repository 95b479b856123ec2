//! The few raw system calls the server makes, in one place.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// CPUs this process may run on: the affinity mask and any cgroup CPU quota
/// (std reads both on Linux), never the host's raw CPU count.
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The calling thread pinned to a set of CPUs until this is dropped, when
/// it runs where it did before. A thread starts with the set of the thread
/// that starts it, so what a pinned thread starts runs on the set too.
pub struct Pinned(Option<rustix::thread::CpuSet>);

impl Pinned {
    /// Pins the calling thread to `cpus`; none: it is left as it is.
    pub fn new(cpus: &[usize]) -> io::Result<Pinned> {
        if cpus.is_empty() {
            return Ok(Pinned(None));
        }
        let before = rustix::thread::sched_getaffinity(None)?;
        let mut set = rustix::thread::CpuSet::new();
        for &cpu in cpus {
            set.set(cpu);
        }
        rustix::thread::sched_setaffinity(None, &set)?;
        Ok(Pinned(Some(before)))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, before);
        }
    }
}

/// The first of `cpus` this process may not run on (its affinity mask).
pub fn cpu_not_allowed(cpus: &[usize]) -> Option<usize> {
    let allowed = rustix::thread::sched_getaffinity(None).ok()?;
    cpus.iter().copied().find(|&c| c >= rustix::thread::CpuSet::MAX_CPU || !allowed.is_set(c))
}

/// Writes `bufs` with one `sendmsg`; `more` sets `MSG_MORE` so a head is
/// coalesced with a `sendfile` body that follows.
pub fn send_vectored(fd: BorrowedFd<'_>, bufs: &[io::IoSlice<'_>], more: bool) -> io::Result<usize> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
    let mut flags = SendFlags::NOSIGNAL;
    if more {
        flags |= SendFlags::MORE;
    }
    Ok(sendmsg(fd, bufs, &mut SendAncillaryBuffer::default(), flags)?)
}

/// `sendfile(2)` of up to `len` bytes from `offset`; returns bytes sent.
pub fn sendfile(sock: BorrowedFd<'_>, file: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<usize> {
    let mut off = offset;
    Ok(rustix::fs::sendfile(sock, file, Some(&mut off), len)?)
}

/// Bounds to `bytes` what `sock` may hold written but not yet sent
/// (`TCP_NOTSENT_LOWAT`; beyond what is in flight). On a listening socket
/// it is the bound of every connection accepted from it (they inherit it:
/// no system call per connection); on a connection, its own. 0 restores
/// the kernel's default, also on a socket inherited from a reload.
pub fn limit_unsent(sock: BorrowedFd<'_>, bytes: u64) -> io::Result<()> {
    socket2::SockRef::from(&sock).set_tcp_notsent_lowat(u32::try_from(bytes).unwrap_or(u32::MAX))
}

/// Has the listening socket `sock` report a new connection only once its
/// first bytes arrived or about `wait` (whole seconds) passed since its
/// handshake (`TCP_DEFER_ACCEPT`, a property of the listener: nothing to
/// do per connection). Zero reports it at the handshake, also on a socket
/// inherited from a reload.
pub fn defer_accept(sock: BorrowedFd<'_>, wait: std::time::Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let secs = libc::c_int::try_from(wait.as_secs()).unwrap_or(libc::c_int::MAX);
    // SAFETY: an int option read through a valid pointer of its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&secs).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes written to a socket that its peer has not acknowledged yet
/// (`SIOCOUTQ`).
pub fn unacked(sock: BorrowedFd<'_>) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int through a valid pointer.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The payload one TCP segment of the connection's path carries
/// (`TCP_MAXSEG`: the MSS less the options every segment bears); 0 if
/// unknown.
pub fn segment_size(sock: BorrowedFd<'_>) -> usize {
    socket2::SockRef::from(&sock).tcp_mss().map_or(0, |m| m as usize)
}

/// Lets the calling thread run on every online CPU (as far as the cgroup
/// allows), whatever affinity it inherited; best effort.
pub fn allow_every_cpu() {
    let mut set = rustix::thread::CpuSet::new();
    // The machine's CPUs, not the inherited mask's.
    // SAFETY: sysconf only reads a system value.
    let configured = usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }).unwrap_or(1);
    for cpu in 0..configured.clamp(1, rustix::thread::CpuSet::MAX_CPU) {
        set.set(cpu);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Waits (up to `timeout`) until one of `socks` is writable.
pub fn wait_writable(socks: &[BorrowedFd<'_>], timeout: std::time::Duration) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let timeout = Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    let mut fds: Vec<PollFd<'_>> = socks.iter().map(|s| PollFd::new(s, PollFlags::OUT)).collect();
    poll(&mut fds, Some(&timeout))?;
    Ok(())
}

/// `pread(2)` into `buf`.
pub fn pread(file: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    Ok(rustix::io::pread(file, buf, offset)?)
}

/// Reads into the spare capacity of `buf` (one `read(2)`), growing its
/// length by what arrived.
pub fn read_into(fd: impl AsFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    let (filled, _) = rustix::io::read(fd, buf.spare_capacity_mut())?;
    let n = filled.len();
    // SAFETY: `read` initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// As [`read_into`], but the bytes stay queued on the socket (`MSG_PEEK`).
pub fn peek_into(sock: impl AsFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    let ((filled, _), _) = rustix::net::recv(sock, buf.spare_capacity_mut(), rustix::net::RecvFlags::PEEK)?;
    let n = filled.len();
    // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Half-closes the sending side so the peer sees the end of the response.
pub fn shutdown_write(fd: BorrowedFd<'_>) {
    let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Write);
}

/// Fixes the socket's send buffer at `bytes`, which also ends the kernel's
/// growing of it.
pub fn clamp_send_buffer(fd: BorrowedFd<'_>, bytes: usize) {
    let _ = socket2::SockRef::from(&fd).set_send_buffer_size(bytes);
}

/// Makes closing the socket reset the connection: what is still queued is
/// dropped at once instead of being trickled to a peer that does not read.
pub fn reset_on_close(fd: BorrowedFd<'_>) {
    let _ = socket2::SockRef::from(&fd).set_linger(Some(std::time::Duration::ZERO));
}

/// Does `err` mean "try again when ready"?
pub fn would_block(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock
}

/// Runs `f` (a spawn) with no signal blocked in the calling thread, then
/// restores its mask, so the child starts with none blocked: a program
/// with `SIGTERM` blocked could not be stopped by it. A signal that arrives
/// meanwhile runs its handler here, as on any thread.
pub fn with_no_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: plain libc calls on local, initialised signal sets.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, &mut old);
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        out
    }
}

/// Blocks `signals` in the calling thread (and the threads it starts
/// afterwards). Used for the shutdown signals in workers, so they reach the
/// thread that waits for them and never interrupt a worker's system calls,
/// and for `SIGCHLD` everywhere: exited CGI programs are collected with
/// `waitpid`, the signal would only wake a thread for nothing. A child
/// inherits the mask of the thread that spawns it (std keeps it since
/// rust-lang/rust#101077): spawn through [`with_no_signals_blocked`].
pub fn block_signals(signals: &[libc::c_int]) {
    // SAFETY: plain libc calls on a local, initialised signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Sets glibc's allocator up for a long-running server. Called at start.
///
/// Every free beyond a thread's own cache merges with its free neighbours
/// at once (glibc's "fast bins" off; its per-thread cache still serves the
/// small blocks a request takes and gives back): a block left in a fast
/// bin next to an arena's unused top is merged into that top only by the
/// next `malloc_trim`, which never hands the top of a thread arena back —
/// after a burst of connection threads, megabytes of free memory stayed
/// resident in some runs.
///
/// And at most one arena per CPU (glibc's default is eight per CPU): each
/// reload starts a new server's threads, and threads that come and go
/// spread the heap over more arenas, each keeping the pages its freed
/// blocks leave scattered. In an hour's soak (`bench/soak.sh`: a reload
/// every 30 s) anonymous memory climbed from 26 to 42 MB and stayed there
/// after the load, while heaptrack saw at most 11 MB of live heap; with
/// two arenas it stayed at 15 MB.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: mallopt only sets one of the allocator's parameters.
        unsafe {
            libc::mallopt(libc::M_MXFAST, 0);
            libc::mallopt(libc::M_ARENA_MAX, cpus.min(i32::MAX as usize) as i32);
        }
    }
}

/// Whether `e` says this process is short of descriptors, processes or
/// memory for now, not that a peer or a program failed: what needed them
/// is answered `503` (full for now), as at a configured cap.
pub fn out_of_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM | libc::ENOBUFS))
}

/// Returns the allocator's free memory to the system: glibc keeps freed
/// small blocks in its heaps (one per thread arena) and only `malloc_trim`
/// gives back the pages between live ones. Elsewhere nothing is done.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A non-blocking eventfd: a completion another thread signals, watched by
/// a reactor.
pub fn eventfd() -> io::Result<std::os::fd::OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?)
}

/// Makes an eventfd readable.
pub fn signal_eventfd(fd: BorrowedFd<'_>) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// `mincore(2)`: one byte per page of `map[offset..offset + len]`
/// (`offset` page-aligned) into `pages`, bit 0 set for a page in memory.
pub fn mincore(map: &[u8], offset: usize, len: usize, pages: &mut [u8]) -> io::Result<()> {
    assert!(offset + len <= map.len() && len.div_ceil(page_size()) <= pages.len());
    // SAFETY: the range lies within the mapping (checked above) and
    // `pages` has a byte for each of its pages; nothing is dereferenced.
    let r = unsafe { libc::mincore(map.as_ptr().add(offset) as *mut libc::c_void, len, pages.as_mut_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The page size (from the auxiliary vector: no system call).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Blocks until `fd` is readable.
pub fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags};
    poll(&mut [PollFd::new(&fd, PollFlags::IN)], None)?;
    Ok(())
}

/// What `poll(2)` reported for one descriptor, as the event engine reads
/// it from epoll.
#[derive(Clone, Copy, Default)]
pub struct Polled {
    pub readable: bool,
    pub writable: bool,
    pub read_closed: bool,
    pub hangup: bool,
}

impl Polled {
    /// Both reports at once (descriptors reported under one name).
    pub fn or(self, other: Polled) -> Polled {
        Polled {
            readable: self.readable || other.readable,
            writable: self.writable || other.writable,
            read_closed: self.read_closed || other.read_closed,
            hangup: self.hangup || other.hangup,
        }
    }
}

/// The readiness `poll(2)`'s flags `r` report.
pub fn polled(r: libc::c_short) -> Polled {
    let error = r & (libc::POLLERR | libc::POLLNVAL) != 0;
    let hup = r & libc::POLLHUP != 0;
    let read_closed = hup || r & libc::POLLRDHUP != 0;
    let write_closed = hup || error;
    Polled {
        readable: r & (libc::POLLIN | libc::POLLPRI) != 0 || error,
        writable: r & libc::POLLOUT != 0 || write_closed,
        read_closed,
        hangup: error || hup,
    }
}
