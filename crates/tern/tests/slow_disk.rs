//! A slow disk never stalls a reactor (`static.io_threads`, on by
//! default): a real FUSE file system (`tests/slow_disk/slowfs.py`,
//! python3-fusepy) serves a document root in which every read of
//! `slow.bin` takes 200 ms. While one client downloads it from a server
//! with a single worker and the default configuration, requests for other
//! files on that worker are answered at once; with the I/O pool off
//! (`io_threads = 0`), the same requests wait for the disk (the control
//! that shows the test can fail).
//!
//! The slow file is opened with FUSE's `direct_io`, so the kernel caches
//! none of its pages: every read of it reaches the file system and is
//! slow, however often it was read before (and it cannot be mapped, so
//! the server cannot ask `mincore`: its reads always go to the pool).
//! The fast files go through the page cache as on any disk.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const DELAY: Duration = Duration::from_millis(200);
const SLOW_LEN: usize = 1024 * 1024;
const FAST_REQUESTS: usize = 8;

/// A mounted slow file system, unmounted (and its process ended) when
/// dropped, however the test ends.
struct SlowFs {
    mount: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl SlowFs {
    /// Mirrors `files` (name, bytes) through FUSE; reads of names starting
    /// with `slow` take [`DELAY`] each.
    fn mount(files: &[(&str, &[u8])]) -> SlowFs {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("backing");
        let mount = dir.path().join("www");
        std::fs::create_dir_all(&backing).unwrap();
        std::fs::create_dir_all(&mount).unwrap();
        for (name, bytes) in files {
            std::fs::write(backing.join(name), bytes).unwrap();
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slow_disk/slowfs.py");
        // Debian's python3 (where python3-fusepy lives), not a user's.
        let child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg(&backing)
            .arg(&mount)
            .arg(DELAY.as_secs_f64().to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("start slowfs.py (python3-fusepy; scripts/ensure-packages.sh installs it)");
        let mut fs = SlowFs { mount, child, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !fs.mounted() {
            if let Ok(Some(status)) = fs.child.try_wait() {
                panic!("slowfs.py ended before mounting: {status}");
            }
            assert!(Instant::now() < deadline, "slowfs.py did not mount {} within 20 s", fs.mount.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        fs
    }

    fn mounted(&self) -> bool {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let path = self.mount.to_string_lossy();
        mounts.lines().any(|l| l.split(' ').nth(4) == Some(&*path) && l.contains(" - fuse"))
    }
}

impl Drop for SlowFs {
    fn drop(&mut self) {
        for tool in ["fusermount3", "fusermount"] {
            if !self.mounted() {
                break;
            }
            let _ = Command::new(tool).arg("-u").arg("-z").arg(&self.mount).stderr(Stdio::null()).status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fast_page(i: usize) -> Vec<u8> {
    format!("<!DOCTYPE html><title>fast {i}</title><p>served from the page cache</p>\n").into_bytes()
}

/// What one run saw: the slow download's bytes and how long it took, and
/// the time of each fast request made while it ran.
struct Run {
    slow: Response,
    slow_took: Duration,
    fast: Vec<Duration>,
    /// The last fast answer came before the slow download ended.
    overlapped: bool,
    metrics: String,
}

/// Starts a one-worker server on the slow file system with `config` and
/// the I/O method `io`, downloads `slow.bin`, and meanwhile asks for the
/// fast files, one after another.
fn run(fs: &SlowFs, io: &str, config: &str) -> Run {
    let tern = Tern::start(&fs.mount, io, config, &["--workers", "1"]);
    let addr = tern.addr;
    let started = Instant::now();
    let slow = std::thread::spawn(move || {
        let response = get(addr, "/slow.bin", "");
        (response, started.elapsed())
    });
    // The download has begun (its open is quick; its reads are not).
    std::thread::sleep(DELAY / 2);
    let mut fast = Vec::new();
    for i in 0..FAST_REQUESTS {
        let path = format!("/fast{}.html", i % 2);
        let t = Instant::now();
        let response = get(addr, &path, "");
        fast.push(t.elapsed());
        assert_eq!(response.status, 200, "{path}");
        assert_eq!(response.body, fast_page(i % 2), "{path}");
    }
    let fast_done = started.elapsed();
    let (slow, slow_took) = slow.join().unwrap();
    let metrics = String::from_utf8_lossy(&get(addr, "/metrics", "").body).into_owned();
    Run { slow, slow_took, fast, overlapped: fast_done < slow_took, metrics }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

fn slow_fs() -> (SlowFs, Vec<u8>) {
    let slow = pattern(SLOW_LEN, 91);
    let (fast0, fast1) = (fast_page(0), fast_page(1));
    let fs = SlowFs::mount(&[("slow.bin", &slow), ("fast0.html", &fast0), ("fast1.html", &fast1)]);
    (fs, slow)
}

#[test]
fn a_slow_disk_does_not_stall_the_worker() {
    let (fs, slow) = slow_fs();
    for io in io_methods() {
        // The default configuration: no `io_threads` given.
        let run = run(&fs, io, "");
        assert_eq!(run.slow.status, 200, "{io}");
        assert!(run.slow.body == slow, "{io}: slow.bin's bytes differ");
        // 1 MiB in reads of at most 256 KiB, each at least one slow read.
        assert!(run.slow_took >= 4 * DELAY, "{io}: slow.bin took only {:?}: the disk was not slow", run.slow_took);
        assert!(run.overlapped, "{io}: the fast requests ended after the slow download");
        // The fast answers come without waiting for the disk (< 20 ms);
        // the slowest is allowed a scheduling hiccup of a loaded machine,
        // still below one slow read (a stalled worker makes one of them
        // wait for many: see the test below).
        let (median, max) = (median(&run.fast), run.fast.iter().max().copied().unwrap());
        eprintln!("{io}: slow.bin in {:?}; fast requests meanwhile: {:?}", run.slow_took, run.fast);
        assert!(
            median < Duration::from_millis(20) && max < DELAY,
            "{io}: fast requests took {:?} while slow.bin was read (median {median:?})",
            run.fast
        );
        // Both files were opened by the pool, and slow.bin read there
        // (by the `uring` method: through the ring, never in the pool).
        assert!(metric(&run.metrics, "tern_io_pool_opens_total") >= 3, "{io}:\n{}", run.metrics);
        let pool_reads = metric(&run.metrics, "tern_io_pool_reads_total");
        assert!(if io == "uring" { pool_reads == 0 } else { pool_reads >= 4 }, "{io}:\n{}", run.metrics);
    }
}

#[test]
fn without_io_threads_a_slow_disk_stalls_the_worker() {
    let (fs, slow) = slow_fs();
    let run = run(&fs, "sendfile", "[static]\nio_threads = 0\n");
    assert!(run.slow.body == slow, "slow.bin's bytes differ");
    // The first fast request waits for the slow reads the worker is
    // blocked in (`sendfile` reads much of the file in one call).
    let max = run.fast.iter().max().copied().unwrap();
    assert!(max >= DELAY, "fast requests took {:?}: the worker was not stalled", run.fast);
    assert_eq!(metric(&run.metrics, "tern_io_pool_opens_total"), 0);
    assert_eq!(metric(&run.metrics, "tern_io_pool_reads_total"), 0);
}
