//! Sending (phases `Send` and `Linger`): writing the output queue through
//! the transport until it is empty or the socket is full, what follows a
//! sent response (the next request, or the end of the connection), and
//! the end itself — closing at once when nothing more can arrive, else
//! shutting down output and draining input.
//!
//! Every response byte — heads, files by any I/O method, compressed and
//! backend bodies — leaves through [`Conn::flush`], whose write through
//! the transport counts `bytes_sent`. Nothing here decides what is sent:
//! it sends what `answer.rs` and `relay.rs` queued (a cold file region's
//! bytes, read, take the region's place).

use std::os::unix::fs::FileExt;

use crate::body::Flushed;
use crate::error_log::{log, Level};
use crate::offload::Task;
use crate::open_files::OpenFile;
use crate::shared::Shared;
use crate::worker::Worker;

use super::state::{Awaited, Clock, Conn, Phase, Status};
use super::transport::Fill;

/// Responses gathered into one write while pipelined requests keep coming.
pub(super) const MAX_GATHERED: u64 = 64 * 1024;

pub(super) enum Sent {
    All,
    Wait,
    Failed,
}

impl Conn {
    /// Writes queued output as far as the socket takes it.
    pub(super) fn flush(&mut self, shared: &Shared, w: &mut Worker<'_>) -> Sent {
        loop {
            if !self.io.may_write {
                return Sent::Wait;
            }
            return match self.io.write(&mut self.out, &mut self.timer.bytes, w) {
                Ok(Flushed::All) => Sent::All,
                Ok(Flushed::Blocked) => Sent::Wait,
                // A reactor drives the others first and this one again
                // after them; a thread of its own writes on.
                Ok(Flushed::Yield) => match w.watcher.doorbell() {
                    Some(doorbell) => {
                        doorbell.ring(self.key);
                        Sent::Wait
                    }
                    None => continue,
                },
                // Pages not in memory: read in the I/O pool (only a queue
                // of a connection with a pool says this).
                Ok(Flushed::Cold { file, offset, len }) => {
                    let Some(pool) = w.offload else { return Sent::Failed };
                    let submitted = pool.submit(Task::Read { file: file.clone(), offset, len });
                    let Ok(ticket) = submitted else {
                        // No eventfd to wait on: read here.
                        if !self.read_here(&file, offset, len) {
                            return Sent::Failed;
                        }
                        continue;
                    };
                    w.stats.offloaded_reads.incr();
                    match self.wait(shared, w, ticket, Awaited::Read { offset }) {
                        Some(Status::Closed) => Sent::Failed,
                        // Done already (waited here): send on.
                        Some(Status::Open) | None if self.waiting.is_none() => continue,
                        _ => Sent::Wait,
                    }
                }
                // A region the ring reads (`uring`): the engine reads it
                // and reports with `Conn::on_fetched`.
                Ok(Flushed::Fetch { file, offset, len, cached }) => {
                    if self.io.fetch(&file, offset, len, cached) {
                        Sent::Wait
                    } else if self.read_here(&file, offset, len) {
                        continue;
                    } else {
                        Sent::Failed
                    }
                }
                Err(err) => {
                    self.read_failed(&err);
                    Sent::Failed
                }
            };
        }
    }

    /// Reads `len` bytes at `offset` of the front file region here, in
    /// their place in the queue (no pool or ring to read them); false
    /// when it failed (logged).
    fn read_here(&mut self, file: &OpenFile, offset: u64, len: usize) -> bool {
        let mut bytes = vec![0; len];
        if let Err(err) = file.file.read_exact_at(&mut bytes, offset) {
            let eof = err.kind() == std::io::ErrorKind::UnexpectedEof;
            self.read_failed(&if eof { file.shrank() } else { err });
            return false;
        }
        self.out.insert_read(offset, bytes);
        true
    }

    /// Logs a file that could not be sent: one that ended early is the
    /// server's fault, worth an error line; a peer that went away is not.
    pub(super) fn read_failed(&self, err: &std::io::Error) {
        if err.kind() == std::io::ErrorKind::UnexpectedEof {
            log!(Level::Error, "{}: {err}", self.peers.peer);
        } else {
            log!(Level::Debug, "{}: send failed: {err}", self.peers.peer);
        }
    }

    /// Everything queued was sent. Returns a status to return, or `None`
    /// to keep driving.
    pub(super) fn sent(&mut self, w: &mut Worker<'_>) -> Option<Status> {
        self.records.write(w);
        if !self.keep_alive {
            return Some(self.finish(w));
        }
        self.phase = Phase::Head;
        let clock = if self.rpos < self.rbuf.len() { Clock::Header } else { Clock::Idle };
        self.set_clock(clock, w);
        None
    }

    /// Ends the connection after its last answer: at once when nothing more
    /// can arrive, else by shutting down output and draining input.
    fn finish(&mut self, w: &mut Worker<'_>) -> Status {
        if self.io.eof_pending && !self.io.peer_closed {
            // The peer has shut down its side already: read up to its end
            // now and close outright, rather than shut down ours first and
            // linger - the peer would see the end of the response while the
            // connection still counted as open.
            loop {
                self.rbuf.clear();
                self.rpos = 0;
                match self.fill(w) {
                    Fill::Got => {}
                    Fill::Eof | Fill::Wait | Fill::Failed => break,
                }
            }
        }
        let unread = self.rpos < self.rbuf.len() || self.io.may_read || self.body.is_some();
        self.io.close_tls();
        if self.io.peer_closed || !unread {
            return Status::Closed;
        }
        self.shut_and_linger(w)
    }

    /// Shuts down output and drains input until the peer closes (or the
    /// linger clock ends), so what it still sends cannot reset the
    /// connection before it read what was sent.
    pub(super) fn shut_and_linger(&mut self, w: &mut Worker<'_>) -> Status {
        self.io.shutdown_write();
        self.body = None;
        self.rpos = 0;
        self.rbuf.clear();
        self.phase = Phase::Linger;
        self.set_clock(Clock::Linger, w);
        self.linger(w)
    }

    /// Drains what the peer still sends until it closes.
    pub(super) fn linger(&mut self, w: &mut Worker<'_>) -> Status {
        loop {
            self.rbuf.clear();
            match self.fill(w) {
                Fill::Got => {}
                Fill::Wait => return Status::Open,
                Fill::Eof | Fill::Failed => return Status::Closed,
            }
        }
    }
}
