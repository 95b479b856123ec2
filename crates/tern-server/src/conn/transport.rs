//! The transport: the client's socket, its TLS session on an HTTPS
//! address, what the socket's readiness last said, and how fast its reader
//! takes bytes.
//!
//! Every read, write and option on the client's socket is made here:
//! reads (plain or through the session), writes of the output queue, the
//! interim answer written ahead of it, the unsent bound and the send
//! buffer's clamp, `shutdown` and the reset on close. It knows nothing of HTTP/1.1 — the
//! exchange hands it a buffer to fill or a queue to write — and must never
//! parse, answer or choose a phase: what it finds (the end of the stream,
//! plain HTTP on an HTTPS address) it reports for the exchange to act on.
//! The rest of `conn/` reads its readiness flags and takes the socket and
//! session whole when the connection moves or ends.
//!
//! Readiness is edge-triggered, so it remembers whether the socket may
//! still have bytes (`may_read`) or room (`may_write`) and touches it only
//! when it needs to — a keep-alive request costs one `read` and one
//! `sendmsg`.
//!
//! Under an engine with a ring (`uring`), a plain connection's bytes move
//! by completion instead ([`Ring`]): the engine receives into buffers of
//! its own and hands each one over ([`Transport::received`]), which a read
//! then takes; a write that a `sendmsg` can carry is left to the engine to
//! submit ([`Ring::send`]) and its outcome reported back
//! ([`Transport::sent`]). The rest — `sendfile` and `read` regions, the
//! interim answer, the options — is made here as on any engine; a write
//! of those that would block asks the engine to say when the socket has
//! room.

use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::body::{Flushed, OutQueue};
use crate::metrics::WorkerStats;
use crate::open_files::OpenFile;
use crate::sys;
use crate::tls::{Got, Session};
use crate::worker::{BufPool, Wait, Worker};

pub(super) struct Transport {
    pub(super) sock: TcpStream,
    /// The TLS session on an HTTPS address.
    pub(super) tls: Option<Box<Session>>,
    pub(super) may_read: bool,
    pub(super) may_write: bool,
    /// The peer's FIN was reported with the readiness: a short read does
    /// not mean the socket is drained, the end of stream is still to read.
    pub(super) eof_pending: bool,
    /// The end of the peer's stream was read.
    pub(super) peer_closed: bool,
    /// The send buffer was fixed small (a slow reader).
    send_clamped: bool,
    pace: Pace,
    /// Completion I/O through the engine's ring (plain connections under
    /// `uring`).
    pub(super) ring: Option<Ring>,
}

/// What the engine's ring does for a connection, and what it brought.
#[derive(Default)]
pub(super) struct Ring {
    /// What the last receive brought and no read has taken yet: the
    /// engine receives again only once it is taken (at most one buffer
    /// waits, so a client that sends while its answers wait is held back
    /// by TCP, as a socket nobody reads is). The end of the stream and a
    /// failure stay, as they would on the socket.
    staged: Option<Received>,
    pub(super) send: RingSend,
    /// What the last send ended with, for the next write to report.
    failed: Option<io::Error>,
    /// A write made here would block: the engine is to say when the
    /// socket has room.
    pub(super) writable: bool,
    /// A file region for the engine to read (the `uring` method), until it
    /// takes it; the connection writes nothing until the bytes are in.
    pub(super) fetch: Option<Fetch>,
}

/// A send through the ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum RingSend {
    #[default]
    Idle,
    /// The queue's front is ready for the engine to gather and submit.
    Wanted,
    /// Submitted; the queue's front stays until it completes.
    InFlight,
}

/// A file region for the engine's ring to read (the `uring` method).
pub struct Fetch {
    pub file: Arc<OpenFile>,
    pub offset: u64,
    pub len: usize,
    /// Known to be in the page cache: the read is made at once. Else it
    /// goes to the kernel's worker threads straight away, as a file system
    /// may block a read asked not to (FUSE's `direct_io` does).
    pub cached: bool,
}

/// What a receive through the ring brought.
pub enum Received {
    /// Bytes, in a buffer of the worker's pool.
    Data(Vec<u8>),
    Eof,
    Failed,
}

/// What a read found.
pub(super) enum Fill {
    Got,
    Wait,
    Eof,
    Failed,
}

/// A read found plain HTTP sent to an HTTPS address: the session is ended,
/// the exchange answers in plain text.
pub(super) struct PlainHttp;

/// The send buffer of a reader that takes less than twice the minimum send
/// rate: what the kernel holds for it stays small.
const SLOW_SEND_BUFFER: usize = 16 * 1024;

impl Transport {
    pub(super) fn new(sock: TcpStream) -> Transport {
        Transport {
            sock,
            tls: None,
            may_read: false,
            may_write: true,
            eof_pending: false,
            peer_closed: false,
            send_clamped: false,
            pace: Pace::default(),
            ring: None,
        }
    }

    /// Takes the bytes a receive through the engine's ring brought;
    /// whether it says the connection failed.
    pub(super) fn received(&mut self, got: Received) -> bool {
        let Some(ring) = self.ring.as_mut() else { return false };
        let failed = matches!(got, Received::Failed);
        self.eof_pending |= matches!(got, Received::Eof);
        self.may_read = true;
        ring.staged = Some(got);
        failed
    }

    /// Whether the engine is to receive for the connection: it takes
    /// completion I/O and nothing received waits to be read.
    pub(super) fn wants_data(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.staged.is_none())
    }

    /// A send through the ring completed with `result` (its bytes taken
    /// off `out`, counted into `moved` and the worker's `bytes_sent`). One
    /// the socket took only part of was held back by its bound, as a
    /// write that would block; one that found no room at all (the kernel
    /// may say so of a non-blocking socket rather than wait) waits for
    /// the engine to report room.
    pub(super) fn sent(&mut self, out: &mut OutQueue, result: io::Result<usize>, moved: &mut u64, w: &Worker<'_>) {
        let Some(ring) = self.ring.as_mut() else { return };
        ring.send = RingSend::Idle;
        let n = *result.as_ref().unwrap_or(&0);
        let all = out.ring_sent(n);
        *moved += n as u64;
        w.stats.bytes_sent.add(n as u64);
        self.may_write = true;
        match result {
            Ok(_) if all => return,
            Ok(_) => {}
            Err(e) if sys::would_block(&e) => {
                self.may_write = false;
                ring.writable = true;
            }
            Err(e) => return ring.failed = Some(e),
        }
        self.held_back(out.written, w);
    }

    /// Asks the engine's ring to read `len` bytes at `offset` of `file`
    /// (the `uring` method; `cached`: known to be in the page cache);
    /// false without a ring.
    pub(super) fn fetch(&mut self, file: &Arc<OpenFile>, offset: u64, len: usize, cached: bool) -> bool {
        let Some(ring) = self.ring.as_mut() else { return false };
        ring.fetch = Some(Fetch { file: file.clone(), offset, len, cached });
        self.may_write = false;
        true
    }

    /// What a receive brought and no read took (the connection moves to
    /// another server with it).
    pub(super) fn take_staged(&mut self) -> Option<Vec<u8>> {
        match self.ring.as_mut()?.staged.take() {
            Some(Received::Data(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// Notes the readiness an engine reported; `read_closed` when the peer
    /// has shut down its side.
    pub(super) fn ready(&mut self, readable: bool, writable: bool, read_closed: bool) {
        self.may_read |= readable || read_closed;
        self.eof_pending |= read_closed;
        self.may_write |= writable;
        if let Some(ring) = self.ring.as_mut().filter(|_| writable) {
            ring.writable = false;
        }
    }

    /// The directions not known to be ready, for a blocking engine.
    pub(super) fn waits(&self) -> Wait {
        Wait { read: !self.may_read, write: !self.may_write }
    }

    /// Whether a read may find bytes: the socket's edge says so (or a
    /// receive through the ring brought some), or a TLS session may hold
    /// decrypted bytes however the edge stands.
    pub(super) fn readable(&self) -> bool {
        self.may_read || self.tls.is_some()
    }

    /// Header lines for every response on the connection (HSTS over HTTPS).
    pub(super) fn fields(&self) -> &[u8] {
        self.tls.as_ref().map_or(&[], |t| t.fields())
    }

    /// The host name a TLS client asked for (SNI), if any.
    pub(super) fn server_name(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|t| t.server_name())
    }

    /// Reads what the socket has into `buf`'s spare capacity (or takes
    /// what the ring received, the buffer it came in going back to `pool`),
    /// counting the bytes into `moved`.
    pub(super) fn read(
        &mut self,
        buf: &mut Vec<u8>,
        moved: &mut u64,
        pool: &mut BufPool,
        stats: &WorkerStats,
    ) -> Result<Fill, PlainHttp> {
        if let Some(ring) = self.ring.as_mut() {
            self.may_read = false;
            let fill = take_received(ring, buf, moved, pool);
            self.peer_closed |= matches!(fill, Fill::Eof);
            return Ok(fill);
        }
        let fill = match self.tls.as_mut() {
            Some(tls) => match tls.fill(&self.sock, &mut self.may_read, self.eof_pending, buf, moved, stats) {
                Got::Data => Fill::Got,
                Got::Wait => Fill::Wait,
                Got::Eof => Fill::Eof,
                Got::Failed => Fill::Failed,
                Got::PlainHttp => {
                    if let Some(tls) = self.tls.take() {
                        tls.end(stats);
                    }
                    return Err(PlainHttp);
                }
            },
            None => self.read_plain(buf, moved),
        };
        if let Fill::Eof = fill {
            self.peer_closed = true;
        }
        Ok(fill)
    }

    fn read_plain(&mut self, buf: &mut Vec<u8>, moved: &mut u64) -> Fill {
        let spare = buf.capacity() - buf.len();
        loop {
            match sys::read_into(self.sock.as_fd(), buf) {
                Ok(0) => {
                    self.may_read = false;
                    return Fill::Eof;
                }
                Ok(n) => {
                    // A short read drained the socket: the next edge will
                    // say when more arrives.
                    if n < spare && !self.eof_pending {
                        self.may_read = false;
                    }
                    *moved += n as u64;
                    return Fill::Got;
                }
                Err(e) if sys::would_block(&e) => {
                    self.may_read = false;
                    return Fill::Wait;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Fill::Failed,
            }
        }
    }

    /// Writes `out` as far as the socket takes it, counting the bytes into
    /// `moved` and the worker's `bytes_sent`. A write the socket's bound
    /// held back waits for the next edge, and measures the reader. Through
    /// the ring, what a `sendmsg` carries is left to the engine (it waits
    /// like a write that would block, until [`Transport::sent`]).
    pub(super) fn write(&mut self, out: &mut OutQueue, moved: &mut u64, w: &Worker<'_>) -> io::Result<Flushed> {
        if let Some(ring) = self.ring.as_mut() {
            if let Some(e) = ring.failed.take() {
                return Err(e);
            }
            if out.ring_ready() {
                ring.send = RingSend::Wanted;
                self.may_write = false;
                return Ok(Flushed::Blocked);
            }
        }
        let before = out.written;
        let result = match self.tls.as_mut() {
            Some(tls) => out.flush_tls(tls, &self.sock, w.now),
            None => out.flush(self.sock.as_fd()),
        };
        let sent = out.written - before;
        *moved += sent;
        w.stats.bytes_sent.add(sent);
        if let Ok(Flushed::Blocked) = &result {
            self.may_write = false;
            if let Some(ring) = self.ring.as_mut() {
                ring.writable = true;
            }
            self.held_back(out.written, w);
        }
        result
    }

    /// Writes `bytes` at once, ahead of the output queue, which must be
    /// empty so they cannot overtake anything. Whether they all left.
    pub(super) fn write_now(&mut self, bytes: &[u8], stats: &WorkerStats) -> bool {
        if let Some(tls) = self.tls.as_mut() {
            // Encrypted and written now, or with the answer if the socket
            // is full.
            let n = tls.write_plain(&[IoSlice::new(bytes)]);
            stats.bytes_sent.add(n as u64);
            return n == bytes.len() && tls.send_pending(&self.sock).is_ok();
        }
        let sent = sys::send_vectored(self.sock.as_fd(), &[IoSlice::new(bytes)], false);
        if let Ok(n) = sent {
            stats.bytes_sent.add(n as u64);
        }
        matches!(sent, Ok(n) if n == bytes.len())
    }

    /// Tells a TLS peer that nothing more comes (`close_notify`).
    pub(super) fn close_tls(&mut self) {
        if let Some(tls) = self.tls.as_mut() {
            tls.close(&self.sock);
        }
    }

    pub(super) fn shutdown_write(&self) {
        sys::shutdown_write(self.sock.as_fd());
    }

    /// Drops what is still queued in the kernel when the socket closes.
    pub(super) fn reset_on_close(&self) {
        sys::reset_on_close(self.sock.as_fd());
    }

    /// Ends the TLS session with the connection.
    pub(super) fn end_tls(&mut self, stats: &WorkerStats) {
        if let Some(tls) = self.tls.take() {
            tls.end(stats);
        }
    }

    /// The once-a-second look at the reader of `bytes` moved in `elapsed`
    /// since the phase began; `sending`: a response is being sent (only
    /// then is the socket's queue read: no system call for an idle
    /// connection). Returns the bytes the reader took: only what the peer
    /// acknowledged was taken — bytes still in the socket's queue would
    /// otherwise pay for a reader that does not read (queued before this
    /// response, they count against it).
    pub(super) fn on_tick(
        &mut self,
        sending: bool,
        bytes: u64,
        elapsed: Duration,
        min_rate: u64,
        written: u64,
        w: &Worker<'_>,
    ) -> u64 {
        let unacked = sending.then(|| sys::unacked(self.sock.as_fd()).unwrap_or(0) as u64);
        if self.pace.fast {
            self.pace_tick(unacked, written, w);
        }
        let Some(unacked) = unacked else { return bytes };
        let taken = bytes.saturating_sub(unacked);
        if !self.send_clamped && taken < 2 * min_rate * elapsed.as_secs() {
            // A slow reader: the kernel is not to grow its buffer.
            sys::clamp_send_buffer(self.sock.as_fd(), SLOW_SEND_BUFFER);
            self.send_clamped = true;
        }
        taken
    }

    /// A write was held back (the socket took all the unsent bytes its
    /// bound allows; `written` bytes in all): measures the reader
    /// ([`Pace`]) and raises the bound once it has taken
    /// `limits.fast_reader_bytes` fast enough. Until the bytes written
    /// could hold that many, no system call.
    ///
    /// Never over TLS: with the bound raised, the kernel queues the
    /// encrypted rounds and the client's acknowledgements send them, on
    /// the client's CPU — which a client that decrypts needs. Measured
    /// (1 MiB, 32 connections, server and `wrk` on one CPU each): 1,543
    /// responses/s with the raise, 2,577 without (the client's CPU spent
    /// 21–31 % against 2–7 % in softirq); tern bench 2,616 and 2,690.
    fn held_back(&mut self, written: u64, w: &Worker<'_>) {
        let l = &w.config.limits;
        if self.pace.fast || self.send_clamped || self.tls.is_some() || l.fast_reader_unsent() == l.unsent_bytes.0 {
            return;
        }
        if self.pace.mark.is_some_and(|(_, taken)| written < taken + l.fast_reader_bytes.0) {
            return;
        }
        let Ok(unacked) = sys::unacked(self.sock.as_fd()) else { return };
        let acked = written.saturating_sub(unacked as u64);
        if let Some((since, taken)) = self.pace.mark {
            let took = acked.saturating_sub(taken);
            if took < l.fast_reader_bytes.0 {
                return;
            }
            if at_rate(took, w.now.saturating_duration_since(since), l.fast_reader_rate.0)
                && sys::limit_unsent(self.sock.as_fd(), l.fast_unsent_bytes.0).is_ok()
            {
                self.pace.fast = true;
                w.stats.fast_readers.incr();
            }
        }
        // Measured again from here: after the raise, for the tick; after
        // a reader too slow, afresh.
        self.pace.mark = Some((w.now, acked));
    }

    /// The tick's look at a fast reader's connection; `unacked`: the bytes
    /// its client has not acknowledged yet of the `written`, read while a
    /// response is being sent. One that left bytes waiting and took less
    /// than `limits.fast_reader_rate` since the last look gets
    /// `limits.unsent_bytes` back. Between responses nothing is read (no
    /// system call for an idle connection): what was written counts as
    /// taken, so a client that had not taken it is found out at the next
    /// look during a response.
    fn pace_tick(&mut self, unacked: Option<u64>, written: u64, w: &Worker<'_>) {
        let l = &w.config.limits;
        let acked = written.saturating_sub(unacked.unwrap_or(0));
        if let (Some(unacked), Some((since, taken))) = (unacked, self.pace.mark) {
            let elapsed = w.now.saturating_duration_since(since);
            if elapsed < PACE_LOOK {
                return;
            }
            if unacked > 0
                && !at_rate(acked.saturating_sub(taken), elapsed, l.fast_reader_rate.0)
                && sys::limit_unsent(self.sock.as_fd(), l.unsent_bytes.0).is_ok()
            {
                self.pace = Pace::default();
                w.stats.fast_readers_slowed.incr();
                return;
            }
        }
        self.pace.mark = Some((w.now, acked));
    }
}

/// A read through the ring: takes what the last receive brought into
/// `buf` — the buffer itself when `buf` holds nothing (no copy), else
/// appended — or says to wait for the next.
fn take_received(ring: &mut Ring, buf: &mut Vec<u8>, moved: &mut u64, pool: &mut BufPool) -> Fill {
    match ring.staged.take() {
        None => Fill::Wait,
        Some(Received::Data(mut got)) => {
            let n = got.len();
            if buf.is_empty() && got.capacity() >= buf.capacity() {
                std::mem::swap(buf, &mut got);
            } else {
                buf.extend_from_slice(&got);
            }
            pool.give(got);
            *moved += n as u64;
            Fill::Got
        }
        Some(end) => {
            let fill = if matches!(end, Received::Eof) { Fill::Eof } else { Fill::Failed };
            ring.staged = Some(end);
            fill
        }
    }
}

/// Which unsent bound (`TCP_NOTSENT_LOWAT`) the connection has, and the
/// measure of its reader that decides it: `limits.unsent_bytes` while new
/// or slow, `limits.fast_unsent_bytes` once its client has taken
/// `limits.fast_reader_bytes` at `limits.fast_reader_rate` or faster. The
/// reader is measured only when the bound held a write back (a response
/// larger than the bound, never a small one: no system call on the small
/// files' path) and, once raised, on the once-a-second tick, whose
/// `SIOCOUTQ` read of a connection sending a response it shares.
#[derive(Default)]
struct Pace {
    /// The connection has the fast readers' bound.
    fast: bool,
    /// Since when the reader is measured, and the bytes it had
    /// acknowledged then.
    mark: Option<(Instant, u64)>,
}

/// The shortest time over which the tick judges a fast reader's rate
/// (ticks are about a second apart; a mark set just before one waits for
/// the next).
const PACE_LOOK: Duration = Duration::from_millis(500);

/// Whether `took` bytes in `elapsed` are at least `rate` bytes a second.
fn at_rate(took: u64, elapsed: Duration, rate: u64) -> bool {
    u128::from(took) * 1_000_000_000 >= u128::from(rate) * elapsed.as_nanos()
}
