//! An HTTP/2 session (RFC 9113) over the connection's transport: the h2
//! crate's server connection — framing, HPACK, flow control, and the
//! limits of `[http2]` against floods and resets — driven by hand, with no
//! async runtime.
//!
//! The crate's connection is generic over an async byte stream; here that
//! stream is a [`Pipe`]: the bytes the transport read, fed in, and a buffer
//! the frames are written to, which the connection moves to its output
//! queue. Nothing waits: a read with nothing fed is `Pending`, and the
//! waker every poll is handed only notes that something moved, so
//! [`Session::run`] polls again until nothing does. The engine's readiness
//! is the only wake-up there is.
//!
//! Why the `h2` crate: it is the implementation hyper, reqwest and tonic
//! use (tonic had it in the lock file already), kept up with the attacks
//! (rapid reset, CONTINUATION floods), and it owns what tern should not
//! write — frames, HPACK, the stream states, both windows, the reset and
//! header-list limits. The alternative, a frame and HPACK crate under a
//! session of tern's own, would make all of that tern's to write and keep;
//! the sans-I/O HTTP/2 crates there are are young and little used. Its
//! async interface is paid here: a pipe and a flag, no runtime.
//!
//! What it costs, `bench/h2_floor.sh` measures (1 KiB over h2c, `h2load
//! -c32 -m10`, each server alone on a CPU): the crate with nothing around
//! it — one body in memory, frames gathered as here — spends 3.7 µs of
//! CPU a response, more than h2o's whole answer (2.1) or libnghttp2's
//! with nothing around it (2.0); tern, 5.8. Its HPACK encoding, header
//! maps and stream store are the difference: no server on this crate
//! answers small files as cheaply as h2o. libnghttp2 (C, sans-I/O,
//! Debian's, curl's and h2load's) would take 1.7 µs off a response; what
//! tern adds (the exchange HTTP/1.1 shares, the heads rendered and parsed
//! as HTTP/1.1's, a `pread` a body: about 2 µs) would still keep it
//! behind h2o at 1 KiB.
//!
//! What the session keeps of a stream is here: its request while its body
//! arrives (into a spool, its window given back as it is stored), then its
//! response body, metered out as the client's windows allow and as long
//! as the connection's output is below the room it is given. What a
//! request is answered with is the exchange's (`streams.rs`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use h2::server::{Builder, Connection, Handshake, SendResponse};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::body::OutQueue;
use crate::http2::Http2;
use crate::metrics::RESET_BY;
use crate::offload::Ticket;
use crate::spool::Spool;

use super::backend::Backend;
use super::h2_frames::FrameScan;

/// Fields of HTTP/1.1's connection, which HTTP/2 forbids (RFC 9113
/// §8.2.2): a response head's are left out of its HTTP/2 fields.
pub(super) const CONNECTION_FIELDS: [&str; 5] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];

/// The preface a client opens an HTTP/2 connection with (RFC 9113 §3.4).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Most response bytes handed to a stream at once.
const DATA_CHUNK: usize = 64 * 1024;

/// The bytes between the transport and the h2 crate's connection.
#[derive(Default)]
struct Pipes {
    input: Vec<u8>,
    /// Start of the part of `input` not yet read.
    pos: usize,
    /// The peer closed its side: a read past `input` is the end.
    eof: bool,
    output: Vec<u8>,
}

/// The h2 crate's view of the socket. Shared with the session, which feeds
/// and drains it between polls (uncontended: one thread polls).
#[derive(Clone, Default)]
struct Pipe(Arc<Mutex<Pipes>>);

impl Pipe {
    fn lock(&self) -> MutexGuard<'_, Pipes> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl AsyncRead for Pipe {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut p = self.lock();
        let n = (p.input.len() - p.pos).min(buf.remaining());
        if n == 0 && !p.eof {
            // The session polls again once the transport read more.
            return Poll::Pending;
        }
        buf.put_slice(&p.input[p.pos..p.pos + n]);
        p.pos += n;
        if p.pos == p.input.len() {
            p.input.clear();
            p.pos = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        self.lock().output.extend_from_slice(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The waker handed to every poll: "something moved, poll again".
#[derive(Default)]
struct Moved(AtomicBool);

impl Wake for Moved {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Relaxed);
    }
}

enum State {
    /// Reading the client's preface and settings.
    Handshake(Box<Handshake<Pipe, Bytes>>),
    /// Accepting streams (`accepting`) or, after a `GOAWAY` either way,
    /// finishing the open ones.
    Open { conn: Box<Connection<Pipe, Bytes>>, accepting: bool },
    /// The connection is over (its last frames may still be in the pipe).
    Ended,
}

/// Why a stream's request is answered as it is (besides its head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Body {
    /// Still arriving.
    Arriving,
    /// Complete (none at all, or all of it spooled).
    Read,
    /// Larger than `limits.max_body_bytes`: no more of it is read.
    TooLarge,
    /// It could not be stored: a `500`.
    Unstored,
}

/// One stream of the session.
pub(super) struct Stream {
    /// The request's pseudo-header fields and fields.
    pub(super) head: http::request::Parts,
    recv: Option<RecvStream>,
    pub(super) body: Body,
    /// The request body received.
    pub(super) spool: Spool,
    pub(super) received: u64,
    respond: Option<SendResponse<Bytes>>,
    send: Option<SendStream<Bytes>>,
    /// The response (its head first, until it is answered; then its body
    /// still to send).
    pub(super) out: OutQueue,
    /// The file its answer needs, being opened in the I/O pool.
    pub(super) opening: Option<Arc<Ticket>>,
    /// The backend (CGI program, FastCGI exchange, proxied request)
    /// answering it, while it runs: its body is still to come.
    pub(super) backend: Option<Box<Backend>>,
    /// The trailer fields its backend ended with (a proxied response's):
    /// a `HEADERS` frame ends the stream, after all of its body.
    pub(super) trailers: Option<http::HeaderMap>,
    /// Local redirects followed for its request.
    pub(super) redirects: u8,
    /// Its stream identifier.
    id: u32,
    /// How urgent the client said its answer is.
    priority: Priority,
    /// The stream is gone: answered whole, or reset by either side.
    done: bool,
    /// Reset by the client, seen and not yet counted.
    reset_by_client: bool,
}

/// `PRIORITY_UPDATE`s kept for streams not opened yet.
const MAX_PENDING_UPDATES: usize = 64;

/// Where resets are counted ([`RESET_BY`]).
const BY_CLIENT: usize = 0;
const BY_SERVER: usize = 1;

/// Whether `e`, a stream's error, is the client's reset of it.
fn client_reset(e: &h2::Error) -> bool {
    e.is_reset() && e.is_remote()
}

/// A stream's priority (RFC 9218 §4): the urgency of its request's
/// `priority` field, 0 (most urgent) to 7, 3 when it says none, and
/// whether its answer is useful in parts (`i`); a `PRIORITY_UPDATE` frame
/// (read off the client's bytes by `h2_frames.rs`: the h2 crate drops
/// frame types it does not know) replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Priority {
    urgency: u8,
    incremental: bool,
}

impl Priority {
    /// From the `priority` fields of a request (a Structured Fields
    /// dictionary: `u=0, i`); members it does not know, or cannot read,
    /// leave the defaults.
    fn of(headers: &http::HeaderMap) -> Priority {
        Priority::from_values(headers.get_all("priority").iter().map(http::HeaderValue::as_bytes))
    }

    /// From the values of priority fields (a request's, or a
    /// `PRIORITY_UPDATE`'s, which replaces what the request said).
    fn from_values<'a>(values: impl Iterator<Item = &'a [u8]>) -> Priority {
        let mut p = Priority { urgency: 3, incremental: false };
        let members = values.filter_map(|v| std::str::from_utf8(v).ok()).flat_map(|v| v.split(','));
        for member in members {
            let (key, value) = member.split_once('=').unwrap_or((member, "?1"));
            match (key.trim(), value.trim()) {
                ("u", v) => p.urgency = v.parse().ok().filter(|u| *u <= 7).unwrap_or(p.urgency),
                ("i", "?1") => p.incremental = true,
                ("i", "?0") => p.incremental = false,
                _ => {}
            }
        }
        p
    }
}

impl Stream {
    /// Whether its request waits to be answered.
    fn ready(&self) -> bool {
        !self.done
            && self.respond.is_some()
            && self.body != Body::Arriving
            && self.opening.is_none()
            && self.backend.is_none()
    }

    /// Whether its response head has been handed to the session.
    pub(super) fn answered(&self) -> bool {
        self.respond.is_none()
    }

    /// Whether it is gone (answered whole, or reset by either side).
    pub(super) fn done(&self) -> bool {
        self.done
    }

    /// Notes a reset by the client of a stream whose backend runs: its
    /// answer is not asked for again until the backend has more, and the
    /// job must not run for nobody meanwhile.
    fn watch_reset(&mut self, cx: &mut Context<'_>) {
        if self.backend.is_none() || self.done {
            return;
        }
        let reset = match (&mut self.respond, &mut self.send) {
            (Some(respond), _) => respond.poll_reset(cx).is_ready(),
            (None, Some(send)) => send.poll_reset(cx).is_ready(),
            (None, None) => false,
        };
        self.done |= reset;
        self.reset_by_client |= reset;
    }
}

/// What a session lends its streams: its limits and a fresh output queue.
pub(super) struct Lent<'a> {
    pub(super) max_body: u64,
    /// `limits.body_buffer`: a body's bytes held in memory.
    pub(super) body_window: usize,
    /// A stream's response queue.
    pub(super) out: &'a dyn Fn() -> OutQueue,
}

pub(super) struct Session {
    state: State,
    pipe: Pipe,
    moved: Arc<Moved>,
    waker: Waker,
    /// Open streams, most urgent first (RFC 9218), then in the order they
    /// arrived: answered, and their bodies sent, in that order.
    pub(super) streams: Vec<Stream>,
    /// `GOAWAY` was said.
    going_away: bool,
    /// Streams reset since last asked, by whom ([`RESET_BY`]).
    resets: [u64; RESET_BY.len()],
    /// The client's frames, followed for what the crate drops.
    scan: FrameScan,
    /// `PRIORITY_UPDATE`s for streams not open yet (RFC 9218 §7.1 lets
    /// them come first), and for open ones until applied; at most
    /// [`MAX_PENDING_UPDATES`].
    updates: Vec<(u32, Priority)>,
    /// The highest stream identifier accepted.
    last_stream: u32,
    /// After an `Upgrade: h2c`: the client's first bytes, held until its
    /// preface and first frame are whole, and the upgraded request's
    /// `HEADERS` frame to put after them (`h2c_upgrade.rs`).
    upgraded: Option<(Vec<u8>, Vec<u8>)>,
}

impl Session {
    pub(super) fn new(c: &Http2) -> Session {
        let pipe = Pipe::default();
        let handshake = Builder::new()
            .max_concurrent_streams(c.max_concurrent_streams)
            .max_header_list_size(c.max_header_list_size.0 as u32)
            .initial_window_size(c.window.0 as u32)
            .initial_connection_window_size(c.connection_window.0 as u32)
            .max_pending_accept_reset_streams(c.max_pending_resets)
            .max_local_error_reset_streams(Some(c.max_error_resets))
            .handshake(pipe.clone());
        let moved = Arc::new(Moved::default());
        let waker = Waker::from(moved.clone());
        Session {
            state: State::Handshake(Box::new(handshake)),
            pipe,
            moved,
            waker,
            streams: Vec::new(),
            going_away: false,
            resets: [0; RESET_BY.len()],
            scan: FrameScan::new(PREFACE.len()),
            updates: Vec::new(),
            last_stream: 0,
            upgraded: None,
        }
    }

    /// A session on a connection upgraded from HTTP/1.1, whose request is
    /// stream 1: `frame`, its `HEADERS`, comes after the client's preface
    /// and first `SETTINGS`.
    pub(super) fn upgraded(c: &Http2, frame: Vec<u8>) -> Session {
        Session { upgraded: Some((Vec::new(), frame)), ..Session::new(c) }
    }

    /// Hands the session bytes the transport read.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        let updates = &mut self.updates;
        self.scan.scan(bytes, &mut |stream, value| {
            if updates.len() == MAX_PENDING_UPDATES {
                updates.remove(0);
            }
            updates.push((stream, Priority::from_values(std::iter::once(value))));
        });
        let Some((held, frame)) = self.upgraded.as_mut() else {
            return self.pipe.lock().input.extend_from_slice(bytes);
        };
        held.extend_from_slice(bytes);
        // The preface, then a frame (its 9-byte head and payload).
        let first_frame_end = held
            .get(PREFACE.len()..PREFACE.len() + 3)
            .map(|len| PREFACE.len() + 9 + u32::from_be_bytes([0, len[0], len[1], len[2]]) as usize);
        // Not a preface, or a first frame longer than any the crate takes
        // before its SETTINGS (RFC 9113 §4.2): the crate answers that as
        // it would, and nothing is held longer.
        let too_long = first_frame_end.is_some_and(|end| end - PREFACE.len() - 9 > 16_384);
        let broken = too_long || !held.starts_with(&PREFACE[..held.len().min(PREFACE.len())]);
        match first_frame_end {
            Some(end) if held.len() >= end && !broken => {
                let mut p = self.pipe.lock();
                p.input.extend_from_slice(&held[..end]);
                p.input.extend_from_slice(frame);
                p.input.extend_from_slice(&held[end..]);
            }
            _ if broken => self.pipe.lock().input.extend_from_slice(held),
            _ => return,
        }
        self.upgraded = None;
    }

    /// The client closed its side.
    pub(super) fn feed_eof(&mut self) {
        if let Some((held, _)) = self.upgraded.take() {
            self.pipe.lock().input.extend_from_slice(&held);
        }
        self.pipe.lock().eof = true;
    }

    /// Moves the frames written since the last call to `into`.
    pub(super) fn drain(&mut self, into: &mut Vec<u8>) {
        let mut p = self.pipe.lock();
        into.append(&mut p.output);
    }

    /// Whether the connection is over (once its last frames are drained).
    pub(super) fn ended(&self) -> bool {
        matches!(self.state, State::Ended)
    }

    /// Whether no stream is open: the connection is idle.
    pub(super) fn idle(&self) -> bool {
        self.streams.is_empty()
    }

    /// Whether it waits for backends alone: one relays, and no stream has
    /// output the client has yet to take.
    pub(super) fn awaits_backends(&self) -> bool {
        self.streams.iter().any(|s| s.backend.is_some()) && self.streams.iter().all(|s| s.out.is_empty())
    }

    /// Hands the backends of streams that are gone (every one, once the
    /// connection is over) to `abandon`; the streams go with them.
    pub(super) fn drop_gone(&mut self, mut abandon: impl FnMut(Box<Backend>)) {
        let ended = self.ended();
        for s in self.streams.iter_mut().filter(|s| ended || s.done) {
            if let Some(b) = s.backend.take() {
                abandon(b);
            }
        }
        self.streams.retain(|s| !s.done || s.opening.is_some());
    }

    /// Says `GOAWAY` (`NO_ERROR`): streams already open are finished, no
    /// new one is accepted. Whether it was said now (not before).
    pub(super) fn go_away(&mut self) -> bool {
        let State::Open { conn, .. } = &mut self.state else { return false };
        let now = !std::mem::replace(&mut self.going_away, true);
        if now {
            conn.graceful_shutdown();
        }
        now
    }

    /// The first stream whose request is complete and not yet answered.
    pub(super) fn next_ready(&self) -> Option<usize> {
        self.streams.iter().position(Stream::ready)
    }

    /// The streams waiting for the I/O pool, and their tickets.
    pub(super) fn opening(&self) -> impl Iterator<Item = (usize, &Arc<Ticket>)> {
        self.streams.iter().enumerate().filter_map(|(i, s)| Some((i, s.opening.as_ref()?)))
    }

    /// Takes stream `i`'s ticket back; whether the stream is still to be
    /// answered (it was not reset meanwhile).
    pub(super) fn opened(&mut self, i: usize) -> bool {
        let s = &mut self.streams[i];
        s.opening = None;
        !s.done
    }

    /// Answers stream `i` with `head`, its body (if any) what is left in
    /// its queue.
    pub(super) fn respond(&mut self, i: usize, head: http::Response<()>) {
        let s = &mut self.streams[i];
        let Some(mut respond) = s.respond.take() else { return };
        let end = s.out.is_empty() && s.backend.is_none() && s.trailers.is_none();
        match respond.send_response(head, end) {
            Ok(send) if !end => s.send = Some(send),
            _ => s.done = true,
        }
    }

    /// Sends stream `i` an interim response (`1xx`), ahead of its answer.
    pub(super) fn inform(&mut self, i: usize, head: http::Response<()>) {
        if let Some(respond) = self.streams[i].respond.as_mut() {
            let _ = respond.send_informational(head);
        }
    }

    /// Refuses stream `i` without an answer (its response could not be
    /// made).
    pub(super) fn reset(&mut self, i: usize) {
        let s = &mut self.streams[i];
        if let Some(send) = s.send.as_mut() {
            send.send_reset(Reason::INTERNAL_ERROR);
        } else if let Some(respond) = s.respond.as_mut() {
            respond.send_reset(Reason::INTERNAL_ERROR);
        }
        if !std::mem::replace(&mut s.done, true) {
            self.resets[BY_SERVER] += 1;
        }
    }

    /// The streams reset since last asked, by whom ([`RESET_BY`]).
    pub(super) fn take_resets(&mut self) -> [u64; RESET_BY.len()] {
        std::mem::take(&mut self.resets)
    }

    /// Polls everything until nothing moves: the handshake, new streams,
    /// request bodies, response bodies (at most `room` bytes of them, the
    /// room left in the connection's output). `Err`: the connection
    /// failed (what the crate could say, a `GOAWAY`, is in the output).
    pub(super) fn run(&mut self, lent: &Lent<'_>, mut room: usize) -> Result<(), h2::Error> {
        let waker = self.waker.clone();
        let mut cx = Context::from_waker(&waker);
        loop {
            self.moved.0.store(false, Relaxed);
            let result = self.poll_connection(&mut cx, lent);
            self.reprioritize();
            // The streams are kept most urgent first: their bodies take
            // the room in that order, one after another — an incremental
            // one a chunk a turn, sharing with its equals.
            for s in &mut self.streams {
                receive(s, &mut cx, lent);
                let share = if s.priority.incremental { room.min(DATA_CHUNK) } else { room };
                let (sent, server_reset) = send(s, &mut cx, share);
                room = room.saturating_sub(sent);
                s.watch_reset(&mut cx);
                self.resets[BY_SERVER] += u64::from(server_reset);
                self.resets[BY_CLIENT] += u64::from(std::mem::take(&mut s.reset_by_client));
            }
            // One waiting for the pool stays until its ticket is taken
            // back (its descriptor is watched), one whose backend runs
            // until the connection ends the job (`drop_gone`).
            self.streams.retain(|s| !s.done || s.opening.is_some() || s.backend.is_some());
            if let Err(e) = result {
                self.state = State::Ended;
                return Err(e);
            }
            if !self.moved.0.load(Relaxed) {
                return Ok(());
            }
        }
    }

    /// Applies the `PRIORITY_UPDATE`s for open streams, keeping the streams
    /// most urgent first; those for streams not opened yet wait, those for
    /// streams gone are dropped.
    fn reprioritize(&mut self) {
        if self.updates.is_empty() {
            return;
        }
        let mut moved = false;
        let last = self.last_stream;
        let streams = &mut self.streams;
        self.updates.retain(|(id, p)| match streams.iter_mut().find(|s| s.id == *id) {
            Some(s) => {
                moved |= s.priority != *p;
                s.priority = *p;
                false
            }
            None => *id > last,
        });
        if moved {
            // Stable: equals keep the order they were asked in.
            self.streams.sort_by_key(|s| s.priority.urgency);
        }
    }

    /// Moves the connection on: its handshake, then frames both ways,
    /// accepting streams while it may.
    fn poll_connection(&mut self, cx: &mut Context<'_>, lent: &Lent<'_>) -> Result<(), h2::Error> {
        if let State::Handshake(h) = &mut self.state {
            match Pin::new(&mut **h).poll(cx) {
                Poll::Ready(Ok(conn)) => self.state = State::Open { conn: Box::new(conn), accepting: true },
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
        let State::Open { conn, accepting } = &mut self.state else { return Ok(()) };
        while *accepting {
            match conn.poll_accept(cx) {
                Poll::Ready(Some(Ok((request, respond)))) => {
                    let (head, recv) = request.into_parts();
                    let body = if recv.is_end_stream() { Body::Read } else { Body::Arriving };
                    let id = u32::from(respond.stream_id());
                    self.last_stream = self.last_stream.max(id);
                    let update = self.updates.iter().rposition(|(stream, _)| *stream == id);
                    let priority = match update {
                        Some(at) => self.updates.remove(at).1,
                        None => Priority::of(&head.headers),
                    };
                    // After every stream as urgent or more: answered, and
                    // its body sent, in that order.
                    let at = self.streams.iter().position(|s| s.priority.urgency > priority.urgency);
                    let at = at.unwrap_or(self.streams.len());
                    self.streams.insert(
                        at,
                        Stream {
                            head,
                            recv: (body == Body::Arriving).then_some(recv),
                            body,
                            spool: Spool::default(),
                            received: 0,
                            respond: Some(respond),
                            send: None,
                            out: (lent.out)(),
                            opening: None,
                            backend: None,
                            trailers: None,
                            redirects: 0,
                            id,
                            priority,
                            done: false,
                            reset_by_client: false,
                        },
                    );
                }
                Poll::Ready(Some(Err(e))) => return Err(e),
                Poll::Ready(None) => *accepting = false,
                Poll::Pending => return Ok(()),
            }
        }
        match conn.poll_closed(cx) {
            Poll::Ready(result) => {
                self.state = State::Ended;
                result
            }
            Poll::Pending => Ok(()),
        }
    }
}

/// Takes what arrived of stream `s`'s request body into its spool, giving
/// its window back as it is stored.
fn receive(s: &mut Stream, cx: &mut Context<'_>, lent: &Lent<'_>) {
    let Some(recv) = s.recv.as_mut() else { return };
    loop {
        match recv.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = recv.flow_control().release_capacity(data.len());
                s.received += data.len() as u64;
                if s.received > lent.max_body {
                    s.body = Body::TooLarge;
                } else if s.spool.push(&data, lent.body_window).is_err() {
                    s.body = Body::Unstored;
                }
            }
            // The body ended, with its last `DATA` or with a trailing
            // `HEADERS`, whose fields no handler sees (as a chunked
            // request's trailer fields).
            Poll::Ready(None) => match recv.poll_trailers(cx) {
                Poll::Ready(Err(e)) => {
                    s.reset_by_client |= client_reset(&e);
                    s.done = true;
                }
                _ => {
                    s.body = match s.spool.finish() {
                        Ok(()) => Body::Read,
                        Err(_) => Body::Unstored,
                    };
                }
            },
            Poll::Ready(Some(Err(e))) => {
                s.reset_by_client |= client_reset(&e);
                s.done = true;
            }
            Poll::Pending => return,
        }
        if s.body != Body::Arriving || s.done {
            // Whatever else comes of it is not read (the crate resets
            // the stream once its answer is sent).
            s.recv = None;
            return;
        }
    }
}

/// Hands stream `s`'s response body to the crate as its windows allow, at
/// most `room` bytes; returns how many it handed, and whether it reset the
/// stream. While its backend runs, an empty queue is a pause, not the end;
/// trailer fields end the stream after the last `DATA` in place of its
/// `END_STREAM` flag.
fn send(s: &mut Stream, cx: &mut Context<'_>, room: usize) -> (usize, bool) {
    let Some(send) = s.send.as_mut() else { return (0, false) };
    let (mut sent, mut reset) = (0, false);
    loop {
        let left = s.out.queued() as usize;
        if left == 0 {
            if s.backend.is_none() {
                // The backend ended after all its bytes were handed.
                let _ = match s.trailers.take() {
                    Some(trailers) => send.send_trailers(trailers),
                    None => send.send_data(Bytes::new(), true),
                };
                s.done = true;
            }
            break;
        }
        if sent >= room {
            break;
        }
        send.reserve_capacity(left.min(DATA_CHUNK));
        // Capacity granted before and not used up (the connection's room
        // ran out, or a backend's body had no more yet) is not announced
        // again: `poll_capacity` tells of increases only.
        let granted = match send.capacity() {
            0 => match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(n))) if n > 0 => n,
                Poll::Ready(Some(Ok(_))) | Poll::Pending => break,
                Poll::Ready(Some(Err(e))) => {
                    s.reset_by_client |= client_reset(&e);
                    s.done = true;
                    break;
                }
                Poll::Ready(None) => {
                    s.done = true;
                    break;
                }
            },
            n => n,
        };
        let bytes = match s.out.pull(granted.min(room - sent)) {
            Ok(bytes) => bytes,
            Err(_) => {
                send.send_reset(Reason::INTERNAL_ERROR);
                (s.done, reset) = (true, true);
                break;
            }
        };
        sent += bytes.len();
        let end = s.out.is_empty() && s.backend.is_none() && s.trailers.is_none();
        if let Err(e) = send.send_data(Bytes::from(bytes), end) {
            s.reset_by_client |= client_reset(&e);
            s.done = true;
            break;
        }
        if end {
            s.done = true;
            break;
        }
    }
    if s.done {
        s.send = None;
    }
    (sent, reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_fields_are_read_as_rfc_9218_says() {
        let of = |values: &[&str]| {
            let mut h = http::HeaderMap::new();
            for v in values {
                h.append("priority", v.parse().unwrap());
            }
            let p = Priority::of(&h);
            (p.urgency, p.incremental)
        };
        assert_eq!(of(&[]), (3, false));
        assert_eq!(of(&["u=0"]), (0, false));
        assert_eq!(of(&["u=1, i"]), (1, true));
        assert_eq!(of(&["i=?1", "u=5"]), (5, true));
        assert_eq!(of(&["u=2, i=?0, x=7"]), (2, false));
        assert_eq!(of(&["u=9"]), (3, false));
        assert_eq!(of(&["u=abc, i"]), (3, true));
    }
}
