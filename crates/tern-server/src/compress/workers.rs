//! Background compression threads.
//!
//! Workers hand them cold files while the server is busy, through a bounded
//! channel; a thread looks for the file's sidecar, else compresses it; a job carries the [`Claim`] on its variant, so a file is queued
//! at most once however many requests miss it meanwhile (they see the
//! claim's `Busy` slot). The threads run at nice 19, so under a burst they
//! take only the CPU the workers leave, and catch up when the burst ends.
//! The first thread also sweeps idle entries out of the cache.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use tern_http::accept_encoding::Coding;

use super::cache::Claim;
use super::maker::Maker;
use crate::error_log::{log, Level};
use crate::open_files::OpenFile;
use crate::resolve::Root;

/// Niceness of the background threads: the lowest priority short of
/// `SCHED_IDLE`.
const NICE: i32 = 19;

/// One variant to make.
pub struct Job {
    pub claim: Claim,
    /// The file's root: its sidecars are looked for there.
    pub root: Arc<Root>,
    pub file: Arc<OpenFile>,
    pub coding: Coding,
}

pub struct Background {
    jobs: Sender<Job>,
    /// Dropped to stop the threads.
    stop: Mutex<Option<Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Background {
    /// Starts `count` threads fed by a queue of `capacity` jobs.
    pub fn start(count: usize, capacity: usize, maker: Arc<Maker>) -> std::io::Result<Background> {
        let (jobs, job_rx) = crossbeam_channel::bounded::<Job>(capacity);
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let mut threads = Vec::with_capacity(count);
        for index in 0..count {
            let (job_rx, stop_rx, maker) = (job_rx.clone(), stop_rx.clone(), maker.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tern-compress-{index}"))
                    .spawn(move || run(index == 0, &job_rx, &stop_rx, &maker))?,
            );
        }
        Ok(Background { jobs, stop: Mutex::new(Some(stop)), threads: Mutex::new(threads) })
    }

    /// Queues a job; when the queue is full the job is dropped (and its
    /// claim released), and the file is simply sent uncompressed again.
    pub fn submit(&self, job: Job) -> bool {
        match self.jobs.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Jobs waiting.
    pub fn queued(&self) -> usize {
        self.jobs.len()
    }

    /// Stops the threads (a job in progress finishes) and waits for them.
    pub fn stop(&self) {
        drop(self.stop.lock().unwrap_or_else(|e| e.into_inner()).take());
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn run(sweeper: bool, jobs: &Receiver<Job>, stop: &Receiver<()>, maker: &Maker) {
    lower_priority();
    let cache = maker.cache();
    let ticks = if sweeper { crossbeam_channel::tick(cache.sweep_interval()) } else { crossbeam_channel::never() };
    loop {
        crossbeam_channel::select! {
            recv(stop) -> _ => return,
            recv(ticks) -> _ => {
                cache.sweep(Instant::now());
            }
            recv(jobs) -> job => {
                let Ok(job) = job else { return };
                let Job { claim, root, file, coding } = job;
                if let Err(e) = maker.fill(&root, &file, coding, claim, Instant::now()) {
                    log!(Level::Warn, "background compression failed: {e}");
                }
            }
        }
    }
}

/// Puts the calling thread at nice 19 (on Linux a thread has its own nice
/// value). Failure is logged, not fatal: the thread just competes equally.
fn lower_priority() {
    // SAFETY: plain system calls on the calling thread.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE) };
    if rc != 0 {
        log!(Level::Warn, "cannot lower the compression thread's priority: {}", std::io::Error::last_os_error());
    }
}
