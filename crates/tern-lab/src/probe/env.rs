//! The machine a probe ran on, captured with its results: figures mean
//! little without the kernel, CPU, mitigations, quota and load behind them.

use std::fs;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    /// CPUs online on the machine.
    pub cores_online: usize,
    /// CPUs this process may run on (affinity, cpusets).
    pub cores_usable: usize,
    /// cgroup CPU quota in CPUs (e.g. 1.5), `None` when unlimited.
    pub cpu_quota: Option<f64>,
    pub governor: String,
    /// Vulnerability → mitigation state, from /sys/devices/system/cpu/vulnerabilities.
    pub mitigations: Vec<(String, String)>,
    pub memory_total_kib: u64,
    pub memory_available_kib: u64,
    /// "none", or what the machine runs in (docker, kvm, …).
    pub virtualisation: String,
    /// 1, 5 and 15 minute load averages at capture time.
    pub load_average: [f64; 3],
}

fn read(path: &str) -> String {
    fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

impl Environment {
    /// One line on what the run had to work with: usable CPUs, governor,
    /// load, free memory and what the machine runs in.
    pub fn machine_state(&self) -> String {
        let [l1, l5, l15] = self.load_average;
        format!(
            "{} of {} CPUs usable, governor {}, load {l1:.2} {l5:.2} {l15:.2}, {} KiB available, {}",
            self.cores_usable, self.cores_online, self.governor, self.memory_available_kib, self.virtualisation
        )
    }

    /// Reads everything from /proc and /sys; what cannot be read is empty.
    pub fn capture(governor: String) -> Environment {
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        let kib = |key: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse().ok())
                .unwrap_or(0)
        };
        let loads: Vec<f64> = read("/proc/loadavg").split_whitespace().take(3).filter_map(|v| v.parse().ok()).collect();
        let mut mitigations: Vec<(String, String)> = fs::read_dir("/sys/devices/system/cpu/vulnerabilities")
            .map(|dir| {
                dir.flatten()
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), read(&e.path().to_string_lossy())))
                    .collect()
            })
            .unwrap_or_default();
        mitigations.sort();
        Environment {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: format!("{} {}", read("/proc/sys/kernel/ostype"), read("/proc/sys/kernel/osrelease")),
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
                .unwrap_or_else(|| "unknown".into()),
            cores_online: cpuinfo.lines().filter(|l| l.starts_with("processor")).count(),
            cores_usable: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpu_quota: cpu_quota(),
            governor,
            mitigations,
            memory_total_kib: kib("MemTotal:"),
            memory_available_kib: kib("MemAvailable:"),
            virtualisation: virtualisation(&cpuinfo),
            load_average: [0, 1, 2].map(|i| loads.get(i).copied().unwrap_or(0.0)),
        }
    }
}

/// The cgroup CPU quota: v2 `cpu.max` ("max 100000" or "150000 100000"),
/// else v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`.
fn cpu_quota() -> Option<f64> {
    let v2 = read("/sys/fs/cgroup/cpu.max");
    let (quota, period) = match v2.split_once(' ') {
        Some((q, p)) => (q.to_string(), p.to_string()),
        None => (read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")),
    };
    let (q, p): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
    (q > 0.0 && p > 0.0).then(|| q / p)
}

/// Containers first (they hide the hypervisor's traces), then the CPU's
/// hypervisor flag and the DMI vendor.
fn virtualisation(cpuinfo: &str) -> String {
    if std::path::Path::new("/.dockerenv").exists() {
        return "docker".into();
    }
    if let Ok(env) = fs::read("/proc/1/environ") {
        if let Some(c) = env.split(|&b| b == 0).find_map(|v| v.strip_prefix(b"container=")) {
            return String::from_utf8_lossy(c).into_owned();
        }
    }
    if cpuinfo.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor")) {
        let vendor = read("/sys/class/dmi/id/sys_vendor");
        return if vendor.is_empty() { "vm".into() } else { format!("vm ({vendor})") };
    }
    "none".into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn captures_this_machine() {
        let e = super::Environment::capture("performance".into());
        assert!(e.kernel.starts_with("Linux "), "{e:?}");
        assert!(e.cores_online >= 1 && e.cores_usable >= 1, "{e:?}");
        assert!(e.memory_total_kib > e.memory_available_kib / 2 && e.memory_total_kib > 0, "{e:?}");
        assert!(e.load_average.iter().all(|l| *l >= 0.0));
        assert!(!e.cpu_model.is_empty() && !e.virtualisation.is_empty());
    }
}
