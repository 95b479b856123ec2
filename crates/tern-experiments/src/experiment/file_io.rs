//! E2 file-io: how a file's bytes reach the socket, by file size. tern's
//! own static methods (`sendfile`, `mmap`, `read`) beside the gateway's
//! FastCGI file server (`fcgi-files`) in its `mmap` and `read` modes behind
//! tern (a `[fastcgi.backends]` entry, a pool of 4 kept-alive connections),
//! with the mmap/read ratio per size for both. As `bench/fastcgi.sh e2`:
//! a fixed number of requests per workload, several runs, the median run
//! kept, with the quartiles of the runs' requests/s beside it (the noise
//! the dashboard judges a lead against). tern's own three methods
//! were E1 once; they are measured here, beside the study's server.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tern_lab::load::{self, Options, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::probe::figure::Better;
use tern_lab::probe::suites::ipc::size_label;
use tern_lab::store::{record, Measurement};

use super::outcome::{Outcome, Table};
use super::setup::{gateway_program, Scratch};
use super::workload::{drive, QUIET_LOG};
use crate::content::pattern;
use crate::served::Served;

/// The gateway's FastCGI file server on a Unix socket, stopped on drop.
struct FileServer {
    child: Child,
}

impl FileServer {
    /// Starts it, its messages in `log` (quoted when it does not start).
    fn start(program: &Path, root: &Path, socket: &Path, mode: &str, log: &Path) -> anyhow::Result<FileServer> {
        let _ = std::fs::remove_file(socket);
        let stderr = std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(program)
            .args(["--mode", mode, "--prefix", "/fs", "--threads", "4", "--root"])
            .arg(root)
            .arg("--socket")
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let mut server = FileServer { child };
        let start = Instant::now();
        while !socket.exists() {
            let ended = server.child.try_wait()?;
            if ended.is_some() || start.elapsed() > Duration::from_secs(10) {
                let said = std::fs::read_to_string(log).unwrap_or_default();
                bail!("{} --mode {mode} is not listening on {}: {}", program.display(), socket.display(), said.trim());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        // SIGTERM: it finishes the requests it is answering, then exits.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Who sends the file, and how: (family, I/O method).
const SUBJECTS: [(&str, &str); 5] =
    [("fcgi-files", "mmap"), ("fcgi-files", "read"), ("tern", "read"), ("tern", "mmap"), ("tern", "sendfile")];

/// The servers of one subject: tern alone, or tern in front of `fcgi-files`.
fn start(
    dir: &Path,
    (family, method): (&str, &str),
    gateway: Option<&Path>,
) -> anyhow::Result<(Served, Option<FileServer>)> {
    if family == "tern" {
        let served = Served::start(&dir.join("www"), QUIET_LOG, &["--workers", "1", "--io", method])?;
        return Ok((served, None));
    }
    let socket = dir.join("files.sock");
    let program = gateway_program(gateway, "fcgi-files")?;
    let files = FileServer::start(&program, &dir.join("www/fs"), &socket, method, &dir.join("fcgi-files.log"))?;
    // An empty root of its own: a file tern served itself would be a 404.
    let front = dir.join("front");
    std::fs::create_dir_all(&front)?;
    let config = format!(
        "{QUIET_LOG}[fastcgi.backends.files]\naddress = \"unix:{}\"\nprefixes = [\"/fs\"]\ncheck_file = false\n\
         max_connections = 4\n",
        socket.display()
    );
    Ok((Served::start(&front, &config, &["--workers", "1"])?, Some(files)))
}

pub(super) fn e2(
    quick: bool,
    gateway: Option<&Path>,
    interrupt: &AtomicBool,
    env: &Environment,
) -> anyhow::Result<Outcome> {
    let sizes: &[u64] =
        if quick { &[1 << 10, 64 << 10, 1 << 20] } else { &[1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20] };
    let (requests, runs, warmup) =
        if quick { (200, 3, Duration::from_millis(100)) } else { (1000, 5, Duration::from_millis(500)) };
    // Before anything starts: a missing program is named at once.
    gateway_program(gateway, "fcgi-files")?;
    let dir = Scratch::new("e2")?;
    std::fs::create_dir_all(dir.0.join("www/fs"))?;
    for &s in sizes {
        std::fs::write(dir.0.join(format!("www/fs/f{s}.bin")), pattern(s))?;
    }
    let mut measurements = Vec::new();
    // Requests/s of the median run by (index in SUBJECTS, size).
    let mut rps = HashMap::new();
    let mut interrupted = false;
    'subjects: for (i, subject) in SUBJECTS.into_iter().enumerate() {
        let name = format!("{} {}", subject.0, subject.1);
        let (served, _files) = start(&dir.0, subject, gateway)?;
        let label = |s: u64| format!("{name}, {}", size_label(s as usize));
        for &s in sizes {
            let url = format!("http://{}/fs/f{s}.bin", served.addr);
            let spec = [RequestSpec::new("GET", Url::parse(&url)?)];
            let opts =
                Options { connections: 4, threads: 1, stop: Stop::Requests(requests), warmup, ..Options::default() };
            let mut reports: Vec<load::Report> = Vec::with_capacity(runs);
            for _ in 0..runs {
                let report = drive(&spec, &[], &opts, interrupt)?;
                if report.run.interrupted || interrupt.load(Ordering::Relaxed) {
                    interrupted = true;
                    break 'subjects;
                }
                if report.errors.total() > 0 || report.body_bytes != report.successes * s {
                    bail!(
                        "{name}: {url} was not served whole ({} errors, statuses {:?}, {} body bytes in {} \
                         responses of {s} bytes)",
                        report.errors.total(),
                        report.status,
                        report.body_bytes,
                        report.successes
                    );
                }
                reports.push(report);
            }
            reports.sort_by(|a, b| a.requests_per_s.total_cmp(&b.requests_per_s));
            let median = &reports[runs / 2];
            let mut ms = record::load_measurements(median, &label(s), env);
            ms.retain(|m| ["requests_per_s", "transfer_per_s", "latency_p99"].contains(&m.metric.as_str()));
            // The runs' quartiles, beside the median's requests/s.
            let of_median = ms[0].clone();
            for (suffix, report) in [("_q1", &reports[runs / 4]), ("_q3", &reports[3 * runs / 4])] {
                let metric = format!("requests_per_s{suffix}");
                ms.push(Measurement { metric, value: report.requests_per_s, ..of_median.clone() });
            }
            measurements.extend(ms);
            rps.insert((i, s), median.requests_per_s);
        }
    }

    let header = [
        "size",
        "fcgi mmap",
        "fcgi read",
        "fcgi mmap/read",
        "tern read",
        "tern mmap",
        "tern sendfile",
        "tern mmap/read",
    ];
    let mut table = Table(vec![header.map(String::from).to_vec()]);
    let rate = |i: usize, s: u64| rps.get(&(i, s)).copied();
    let shown = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for &s in sizes {
        let ratio = |family: &str| {
            let of = |method: &str| SUBJECTS.iter().position(|&x| x == (family, method)).and_then(|i| rate(i, s));
            of("mmap").zip(of("read")).map(|(m, r)| m / r)
        };
        let (fcgi, tern) = (ratio("fcgi-files"), ratio("tern"));
        let r = |i: usize| shown(rate(i, s), 0);
        table.0.push(vec![size_label(s as usize), r(0), r(1), shown(fcgi, 2), r(2), r(3), r(4), shown(tern, 2)]);
        for (family, ratio) in [("fcgi-files", fcgi), ("tern", tern)] {
            let Some(value) = ratio else { continue };
            measurements.push(Measurement {
                subject: format!("{family}, {}", size_label(s as usize)),
                metric: "mmap_read_ratio".into(),
                value,
                unit: "x".into(),
                better: Better::Higher,
                size: Some(s),
                concurrency: Some(4),
                cpus: Some(env.cores_usable as u64),
                load: Some(env.load_average[0]),
            });
        }
    }
    let notes = vec![format!(
        "requests/s: the median of {runs} runs of {requests} requests over 4 connections; mmap/read above 1: \
         mmap ahead"
    )];
    let config = serde_json::json!({"sizes": sizes, "requests": requests, "runs": runs, "connections": 4,
        "threads": 1, "workers": 1, "warmup_s": warmup.as_secs_f64(),
        "fcgi_files": {"threads": 4, "max_connections": 4, "socket": "unix"}});
    Ok(Outcome { measurements, table, notes, config, interrupted })
}
