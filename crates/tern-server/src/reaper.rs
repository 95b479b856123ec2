//! Reaping CGI programs: each worker waits for the programs its
//! connections started, without blocking, and kills what outlives its
//! output. Below the site, so a worker can own one without knowing CGI.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

/// How long a program may run on after closing its output before it is
/// killed.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Kills a program's whole process group.
pub fn kill(pid: Pid) {
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
}

/// Child processes still to be waited for, per worker: a program that
/// closed its output may take a moment to exit; one that lingers past
/// [`EXIT_GRACE`] is killed. Nothing here blocks.
#[derive(Default)]
pub struct Reaper {
    pending: Vec<(Pid, Instant)>,
}

impl Reaper {
    /// Waits for `pid` if it has exited, else remembers it.
    pub fn collect(&mut self, pid: Pid, now: Instant, running: &std::sync::atomic::AtomicUsize) {
        if !try_wait(pid, running) {
            self.pending.push((pid, now + EXIT_GRACE));
        }
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Retries the pending ones; kills those past their grace.
    pub fn tick(&mut self, now: Instant, running: &std::sync::atomic::AtomicUsize) {
        self.pending.retain(|&(pid, deadline)| {
            if try_wait(pid, running) {
                return false;
            }
            if now >= deadline {
                kill(pid);
            }
            true
        });
    }

    /// At shutdown: kill and wait for everything.
    pub fn kill_all(&mut self, running: &std::sync::atomic::AtomicUsize) {
        for (pid, _) in self.pending.drain(..) {
            kill(pid);
            if rustix::process::waitpid(Some(pid), WaitOptions::empty()).is_ok() {
                running.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

fn try_wait(pid: Pid, running: &std::sync::atomic::AtomicUsize) -> bool {
    match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
        Ok(Some(_)) | Err(_) => {
            running.fetch_sub(1, Ordering::AcqRel);
            true
        }
        Ok(None) => false,
    }
}
