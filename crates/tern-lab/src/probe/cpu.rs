//! Where the probe runs: pinned to one CPU (so a measurement is not smeared
//! over cores and their caches), and at what frequency policy.

use std::io;

/// Pins the calling thread (and so the threads and processes it creates
/// later) to `cpu`, or to the CPU it is running on when `None`. Returns the
/// CPU it is pinned to.
pub fn pin(cpu: Option<usize>) -> io::Result<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = match cpu {
        Some(c) => c,
        None => usize::try_from(unsafe { libc::sched_getcpu() }).map_err(|_| io::Error::last_os_error())?,
    };
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it
    // for any cpu below CPU_SETSIZE, which is checked.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu}")));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("cannot pin to CPU {cpu}: {e}")));
        }
    }
    Ok(cpu)
}

/// The CPUs a thread may run on, saved to be put back: the probe pins the
/// thread that calls it and leaves it as it found it.
pub struct Affinity(libc::cpu_set_t);

impl Affinity {
    /// The calling thread's.
    pub fn current() -> io::Result<Affinity> {
        // SAFETY: sched_getaffinity fills a plain-data set of the size given.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(Affinity(set))
        }
    }

    /// The first of these CPUs that is not `cpu`.
    pub fn other_than(&self, cpu: usize) -> Option<usize> {
        // SAFETY: CPU_ISSET reads within the set for numbers below CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize).find(|&c| c != cpu && unsafe { libc::CPU_ISSET(c, &self.0) })
    }

    /// Gives the calling thread these CPUs again.
    pub fn restore(&self) -> io::Result<()> {
        // SAFETY: a set of the size given, filled by sched_getaffinity.
        match unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

/// The CPU frequency governor of `cpu`, or why there is none to read
/// (containers and many VMs have no cpufreq).
pub fn governor(cpu: usize) -> String {
    let path = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor");
    match std::fs::read_to_string(&path) {
        Ok(g) => g.trim().to_string(),
        Err(_) => "unknown (no cpufreq)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pins_to_the_current_cpu_and_reports_it() {
        // In a thread of its own so the test harness's other threads keep
        // their affinity.
        std::thread::spawn(|| {
            let cpu = super::pin(None).unwrap();
            // SAFETY: no preconditions.
            assert_eq!(unsafe { libc::sched_getcpu() } as usize, cpu);
            assert!(super::pin(Some(usize::MAX)).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_saved_affinity_is_restored_after_pinning() {
        std::thread::spawn(|| {
            // SAFETY: counting the bits of a set sched_getaffinity filled.
            let count = || super::Affinity::current().map(|a| unsafe { libc::CPU_COUNT(&a.0) }).unwrap();
            let before = count();
            let saved = super::Affinity::current().unwrap();
            super::pin(None).unwrap();
            assert_eq!(count(), 1);
            saved.restore().unwrap();
            assert_eq!(count(), before);
        })
        .join()
        .unwrap();
    }
}
