//! Reaping CGI programs: each worker waits for the programs its
//! connections started, without blocking, and kills what outlives its
//! output. Below the site, so a worker can own one without knowing CGI.
//!
//! When a request's program has exited, its process group is sent
//! `SIGTERM` (with `cgi.kill_group`): a grandchild that closed its output
//! (a "daemon" started with `&`) would otherwise outlive the request. The
//! signal goes while the leader is still unreaped, so the group's number
//! cannot have been reused; whatever is left after [`EXIT_GRACE`] gets
//! `SIGKILL` (as does a leader still running then). (A group outlives its reaped leader only while members are
//! left in it, so that later signal reaches a reused number only if the
//! kernel handed it to a new group leader within the grace.) A process
//! that called `setsid` has left the group and escapes this; only a
//! cgroup per program would not be escapable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitOptions};

/// How long a program may run on after closing its output before it is
/// killed, and what is left in its group gets after `SIGTERM`.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);
/// How often exited programs are looked for while some are pending.
const POLL: Duration = Duration::from_millis(2);

/// Kills a program's whole process group.
pub fn kill(pid: Pid) {
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
}

struct Pending {
    pid: Pid,
    deadline: Instant,
    /// The leader is still to be waited for.
    leader: bool,
}

/// Child processes still to be waited for, and process groups still to be
/// killed, per worker. Nothing here blocks.
pub struct Reaper {
    pending: Vec<Pending>,
    kill_group: bool,
}

impl Reaper {
    pub fn new(kill_group: bool) -> Reaper {
        Reaper { pending: Vec::new(), kill_group }
    }

    /// The request of program `pid` ended: if it has exited, ends its
    /// group (with `kill_group`) and waits for it; else remembers it (it
    /// has [`EXIT_GRACE`] to exit).
    pub fn collect(&mut self, pid: Pid, now: Instant, running: &AtomicUsize) {
        let leader = !end(self.kill_group, pid, running);
        if leader || group_left(self.kill_group, pid) {
            self.pending.push(Pending { pid, deadline: now + EXIT_GRACE, leader });
        }
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// How soon [`Reaper::tick`] has work: at once-ish while a leader may
    /// exit any moment, else at the first deadline.
    pub fn wake_in(&self, now: Instant) -> Option<Duration> {
        if self.pending.iter().any(|p| p.leader) {
            return Some(POLL);
        }
        self.pending.iter().map(|p| p.deadline.saturating_duration_since(now)).min()
    }

    /// Retries the pending leaders; kills the groups past their grace.
    pub fn tick(&mut self, now: Instant, running: &AtomicUsize) {
        let kill_group = self.kill_group;
        self.pending.retain_mut(|p| {
            if p.leader && end(kill_group, p.pid, running) {
                p.leader = false;
                if !group_left(kill_group, p.pid) {
                    return false;
                }
            }
            if now >= p.deadline {
                kill(p.pid);
                return p.leader;
            }
            true
        });
    }

    /// At shutdown: kill and wait for everything.
    pub fn kill_all(&mut self, running: &AtomicUsize) {
        for p in self.pending.drain(..) {
            kill(p.pid);
            if p.leader && rustix::process::waitpid(Some(p.pid), WaitOptions::empty()).is_ok() {
                running.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Whether the (reaped) leader's group still has members to kill.
fn group_left(kill_group: bool, pid: Pid) -> bool {
    kill_group && rustix::process::test_kill_process_group(pid).is_ok()
}

/// If program `pid` has exited: sends its group `SIGTERM` (with
/// `kill_group`) while it is still unreaped, so the group's number is still
/// its own, then reaps it. Returns whether it was reaped.
fn end(kill_group: bool, pid: Pid, running: &AtomicUsize) -> bool {
    let exited = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    match rustix::process::waitid(WaitId::Pid(pid), exited) {
        Ok(None) => return false,
        Ok(Some(_)) if kill_group => {
            let _ = rustix::process::kill_process_group(pid, Signal::TERM);
        }
        _ => {}
    }
    // Reaped now (or, on an error, not ours to wait for): either way no
    // longer running.
    let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
    running.fetch_sub(1, Ordering::AcqRel);
    true
}
