//! E1 static I/O: tern's three static I/O methods (`sendfile`, `mmap`,
//! `read`) by file size, one server per method.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_lab::probe::env::Environment;
use tern_lab::store::record;

use super::outcome::{sized, Outcome, Table};
use super::workload::{load, Lengths, QUIET_LOG};
use crate::content::pattern;
use crate::served::Served;

/// E1: tern's three static I/O methods by file size, one server per method.
pub(super) fn e1(quick: bool, interrupt: &AtomicBool, env: &Environment) -> anyhow::Result<Outcome> {
    let sizes: &[u64] =
        if quick { &[4 << 10, 256 << 10, 4 << 20] } else { &[1 << 10, 16 << 10, 256 << 10, 1 << 20, 16 << 20] };
    let len = if quick {
        Lengths { warmup: Duration::from_millis(200), measure: Duration::from_millis(1500) }
    } else {
        Lengths { warmup: Duration::from_secs(1), measure: Duration::from_secs(5) }
    };
    let dir = std::env::temp_dir().join(format!("tern-lab-e1-{}", std::process::id()));
    let root = dir.join("www");
    std::fs::create_dir_all(&root)?;
    for &s in sizes {
        std::fs::write(root.join(format!("{s}.bin")), pattern(s))?;
    }
    let mut table = Table(vec![vec!["method".into(), "size".into(), "req/s".into(), "MiB/s".into(), "p99 us".into()]]);
    let mut measurements = Vec::new();
    let mut interrupted = false;
    'methods: for method in ["sendfile", "mmap", "read"] {
        let served = Served::start(&root, &format!("[static]\nio = \"{method}\"\n{QUIET_LOG}"), &["--workers", "1"])?;
        for &s in sizes {
            let report = load(&format!("http://{}/{s}.bin", served.addr), &[], 4, len, interrupt)?;
            let mut ms = record::load_measurements(&report, method, env);
            ms.retain(|m| ["requests_per_s", "transfer_per_s", "latency_p99"].contains(&m.metric.as_str()));
            for m in &mut ms {
                m.size = Some(s);
            }
            table.0.push(vec![
                method.into(),
                sized(s),
                format!("{:.0}", report.requests_per_s),
                format!("{:.1}", report.transfer_per_s / (1 << 20) as f64),
                report.latency.service.p99_us.to_string(),
            ]);
            measurements.extend(ms);
            if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
                interrupted = true;
                break 'methods;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let config = serde_json::json!({"sizes": sizes, "connections": 4, "threads": 1, "workers": 1,
        "warmup_s": len.warmup.as_secs_f64(), "measure_s": len.measure.as_secs_f64()});
    Ok(Outcome { measurements, table, notes: Vec::new(), config, interrupted })
}
