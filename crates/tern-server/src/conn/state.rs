//! The connection's parts: the [`Conn`] struct, the phase it is in, the
//! clock that phase runs against, and what it holds while a backend
//! answers or the I/O pool works.
//!
//! Data only, shared by every piece of `conn/`: each sibling file is an
//! `impl Conn` of one concern and imports its types from here, so none
//! reaches back into `mod.rs`, which composes them. No behaviour belongs
//! here.

use std::sync::Arc;
use std::time::Instant;

use crate::body::OutQueue;
use crate::offload::Ticket;
use crate::service_records::Stage;
use crate::site::Peers;
use crate::spool::Spool;

use super::backend::Backend;
use super::h2::Session;
use super::records::Records;
use super::request_body::BodyReader;
use super::transport::Transport;

/// Whether the engine should keep the connection — or, for a connection
/// that stops at stage boundaries ([`Conn::enter_stage`]), that its work
/// has moved on to another stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Open,
    Closed,
    Next(Stage),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for, or parsing, a request head.
    Head,
    /// Writing queued responses.
    Send,
    /// Reading (and checking) a request body before answering.
    Body,
    /// Relaying a backend's (CGI program's, FastCGI application's) output
    /// as the response.
    Backend,
    /// After a final answer: output shut down, input drained until the
    /// peer closes, so a reset cannot destroy the answer in flight.
    Linger,
    /// Waiting for the I/O pool (a file being opened or read).
    Wait,
    /// An HTTP/2 session runs its streams (reading, answering and sending
    /// at once) until the connection ends.
    Session,
}

/// The clock a phase runs against (see `limits::Timeouts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Clock {
    Idle,
    Header,
    Body,
    Send,
    Backend,
    /// The program's output ended; waiting for it to exit.
    Exit,
    Linger,
    /// Waiting for the I/O pool (held to `timeouts.send`).
    Disk,
}

pub(super) struct Timer {
    pub(super) clock: Clock,
    pub(super) start: Instant,
    /// Bytes moved since `start`: each extends the deadline by
    /// `1 / min_rate` seconds.
    pub(super) bytes: u64,
}

/// Work in the I/O pool a connection waits for.
pub(super) struct Waiting {
    pub(super) ticket: Arc<Ticket>,
    pub(super) awaited: Awaited,
    /// The phase and clock to go back to.
    pub(super) phase: Phase,
    pub(super) timer: Timer,
}

pub(super) enum Awaited {
    /// A path being opened: the request (its head's bytes, and whether its
    /// body was read into `spool`) is answered again with the result.
    Open { head: Vec<u8>, body_read: bool },
    /// The file region at `offset` at the front of the output queue being
    /// read: the bytes go in its place.
    Read { offset: u64 },
}

pub struct Conn {
    /// This connection's key in its engine (tokens for its descriptors).
    pub(super) key: usize,
    /// The socket, its TLS session and readiness.
    pub(super) io: Transport,
    pub(super) peers: Peers,
    /// The receive buffer (the worker's while nothing is pending).
    pub(super) rbuf: Vec<u8>,
    /// Start of the unprocessed part of `rbuf`.
    pub(super) rpos: usize,
    /// The responses queued for the transport to write.
    pub(super) out: OutQueue,
    pub(super) phase: Phase,
    /// Whether the connection stays open after the queued responses.
    pub(super) keep_alive: bool,
    pub(super) requests: u64,
    /// The body being read, and the length of its head (kept in `rbuf`
    /// at `rpos` until the body is complete).
    pub(super) body: Option<(BodyReader, usize)>,
    /// The request body read so far (handed to the site with its request).
    pub(super) spool: Spool,
    pub(super) backend: Option<Box<Backend>>,
    pub(super) redirects: u8,
    pub(super) timer: Timer,
    pub(super) records: Records,
    /// The stage the connection is in, when an engine of stages drives it:
    /// it then stops where its work moves to another stage.
    pub(super) stage: Option<Stage>,
    /// A complete request waits in `rbuf` at `rpos` for the handle stage
    /// (`true`: its body was read).
    pub(super) to_answer: Option<bool>,
    /// Its responses are sent: their records and what follows (the next
    /// request, the close) are the log stage's.
    pub(super) to_log: bool,
    /// Whether the listening address's role is still to be looked at
    /// (on the first readiness: `Conn::new` is not handed `Shared`).
    pub(super) fresh: bool,
    /// On a redirecting address: the HTTPS port to send clients to.
    pub(super) redirect: Option<u16>,
    /// Its address speaks h2c: a first read that opens with the HTTP/2
    /// preface starts a session.
    pub(super) h2c: bool,
    pub(super) waiting: Option<Box<Waiting>>,
    /// The HTTP/2 session, once the connection speaks HTTP/2.
    pub(super) h2: Option<Box<Session>>,
}
