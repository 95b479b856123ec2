//! Per-request service records (`log.service_records`): one CSV row per
//! request, written through per-worker buffers and flushed on exit.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::Tern;

/// `CLOCK_MONOTONIC` in microseconds: the records' clock.
fn monotonic_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// Reads one response with a `Content-Length` (no body for `HEAD`) off a
/// keep-alive connection; returns its status and announced length (the
/// bytes the access log and the records count).
fn read_response(s: &mut TcpStream, head_request: bool) -> (u16, usize) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = common::find(&raw, b"\r\n\r\n") {
            let (status, headers) = common::parse_head(std::str::from_utf8(&raw[..end]).unwrap());
            let len: usize = headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
            let body = if head_request { 0 } else { len };
            if raw.len() >= end + 4 + body {
                assert_eq!(raw.len(), end + 4 + body, "nothing after the response");
                return (status, len);
            }
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed mid-response: {}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&buf[..n]);
    }
}

/// The header row.
const HEADER: &str = "accept_us,arrive_us,start_us,end_us,status,bytes,read_queued_us,read_working_us,\
                      handle_queued_us,handle_working_us,send_queued_us,send_working_us,log_queued_us,log_working_us";
/// Columns: accept, arrive, start, end, status, bytes, then the stages'.
const ACCEPT: usize = 0;
const ARRIVE: usize = 1;
const START: usize = 2;
const END: usize = 3;
const STATUS: usize = 4;
const BYTES: usize = 5;
const STAGES: usize = 6;
/// How long the client waits before its keep-alive connection's last
/// request.
const PAUSE_US: u64 = 300_000;

/// A site with the CGI program `cgi-bin/NAME` that runs `first` (shell),
/// then answers `hello\n`.
fn site_with_program(name: &str, first: &str) -> common::Site {
    let site = common::site();
    let cgi = site.root.join("cgi-bin");
    std::fs::create_dir_all(&cgi).unwrap();
    let program = cgi.join(name);
    let text = format!("#!/bin/sh\n{first}\nprintf 'Content-Type: text/plain\\nContent-Length: 6\\n\\nhello\\n'\n");
    std::fs::write(&program, text).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    site
}

/// A server on `site` writing its records (and `config`) into `dir`.
fn start(site: &common::Site, dir: &tempfile::TempDir, config: &str, extra: &[&str]) -> Tern {
    let records = dir.path().join("records.csv");
    let config = format!("[log]\naccess = \"off\"\nservice_records = \"{}\"\n{config}", records.display());
    Tern::start(&site.root, "sendfile", &config, extra)
}

/// Ends the server (its records are flushed at exit) and reads its rows,
/// sorted by service start, a column left empty as `None`.
fn finish(mut tern: Tern, dir: &tempfile::TempDir) -> Vec<Vec<Option<u64>>> {
    let status = tern.terminate(Duration::from_secs(10)).expect("exits on SIGTERM");
    assert!(status.success());
    let text = std::fs::read_to_string(dir.path().join("records.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 14), "14 columns:\n{text}");
    let mut rows: Vec<Vec<Option<u64>>> =
        rows.iter().map(|r| r.iter().map(|c| (!c.is_empty()).then(|| c.parse().unwrap())).collect()).collect();
    rows.sort_by_key(|r| r[START]);
    rows
}

fn n(r: &[Option<u64>], i: usize) -> u64 {
    r[i].unwrap_or_else(|| panic!("column {i} empty: {r:?}"))
}

/// The rows a server writes for the requests below (sorted by service
/// start), checked for what every model writes: the header, one row per
/// request with its status and bytes, the times in order. `config` is
/// added to the server's, `extra` to its command line; `during` sees the
/// running server after the requests.
fn rows_for(config: &str, extra: &[&str], during: impl FnOnce(&Tern)) -> Vec<Vec<u64>> {
    let site = site_with_program("hello.sh", "");
    let dir = tempfile::tempdir().unwrap();
    let before = monotonic_us();
    let tern = start(&site, &dir, config, extra);

    // One keep-alive connection, a request at a time.
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut seen = Vec::new();
    for (method, path) in
        [("GET", "/small.txt"), ("GET", "/missing"), ("GET", "/cgi-bin/hello.sh"), ("HEAD", "/big.bin")]
    {
        if method == "HEAD" {
            std::thread::sleep(Duration::from_micros(PAUSE_US));
        }
        s.write_all(format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        seen.push(read_response(&mut s, method == "HEAD"));
    }
    drop(s);
    // And one on its own connection.
    let r = common::get(tern.addr, "/index.html", "");
    seen.push((r.status, r.body.len()));
    assert_eq!(seen, [(200, 1000), (404, seen[1].1), (200, 6), (200, site.big.len()), (200, common::INDEX.len())]);
    assert!(seen[1].1 > 0, "the 404 page has a body");
    during(&tern);

    let mut rows = finish(tern, &dir);
    let after = monotonic_us();
    // The rows of the requests above (a status page asked for `during`
    // has its own): by service start, as rows of different workers may
    // come in any order.
    rows.truncate(seen.len());
    assert_eq!(rows.len(), 5, "one row per request: {rows:?}");
    let got: Vec<(u16, usize)> = rows.iter().map(|r| (n(r, STATUS) as u16, n(r, BYTES) as usize)).collect();
    assert_eq!(got, seen, "status and body bytes per request, in order");
    for r in &rows {
        let (accept, arrive, start, end) = (n(r, ACCEPT), n(r, ARRIVE), n(r, START), n(r, END));
        assert!(
            before <= accept && accept <= arrive && arrive <= start && start <= end && end <= after,
            "times in order: {r:?}"
        );
    }
    // The keep-alive connection's requests: accepted once, each arriving
    // after the previous one's answer was sent (the client waits for it),
    // served one after the other.
    assert!(rows[..4].iter().all(|r| r[ACCEPT] == rows[0][ACCEPT]), "one accept time per connection");
    for pair in rows[..4].windows(2) {
        assert!(n(&pair[0], END) <= n(&pair[1], ARRIVE), "each request arrives after the previous one ended: {pair:?}");
    }
    // The last request came after the client's pause: its arrival, not
    // its connection's accept, is when it asked.
    assert!(n(&rows[3], ARRIVE) >= n(&rows[2], END) + PAUSE_US, "arrival after the pause: {rows:?}");
    // Accepted after the previous request started (its end is read after
    // the answer left, so the client may connect before it is taken).
    assert!(n(&rows[4], ACCEPT) >= n(&rows[3], START), "the last connection came after the others: {rows:?}");
    // The stage columns are all filled, or all empty.
    for r in &rows {
        assert!(r[STAGES..].iter().all(Option::is_some) || r[STAGES..].iter().all(Option::is_none), "{r:?}");
    }
    rows.iter().map(|r| r.iter().map(|c| c.unwrap_or(u64::MAX)).collect()).collect()
}

/// A stage column left empty.
const EMPTY: u64 = u64::MAX;

#[test]
fn one_row_per_request_with_its_times_status_and_bytes() {
    let rows = rows_for("", &["--model", "event"], |_| {});
    assert!(
        rows.iter().all(|r| r[STAGES..].iter().all(|&c| c == EMPTY)),
        "no stage times under the event engine: {rows:?}"
    );
}

/// Time queued shows: under the pool model with one thread, held by a
/// program that runs for a second, a request on a keep-alive connection
/// opened long before waits for the thread, and its row says so from the
/// request's arrival (its connection's accept says nothing about it).
#[test]
fn a_request_queued_behind_a_busy_thread_waits_from_its_arrival_to_its_start() {
    let site = site_with_program("slow.sh", "sleep 1");
    let dir = tempfile::tempdir().unwrap();
    let tern = start(&site, &dir, "[server]\nthreads = 1\n", &["--model", "pool"]);
    let addr = tern.addr;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let ask = |s: &mut TcpStream| {
        s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(read_response(s, false), (200, 1000));
    };
    ask(&mut s);
    let program = std::thread::spawn(move || common::get(addr, "/cgi-bin/slow.sh", ""));
    // The program has started and holds the only thread.
    std::thread::sleep(Duration::from_millis(200));
    ask(&mut s);
    let answer = program.join().unwrap();
    assert_eq!((answer.status, answer.body.as_slice()), (200, &b"hello\n"[..]));
    let rows = finish(tern, &dir);
    let waited: Vec<&Vec<Option<u64>>> = rows.iter().filter(|r| r[ACCEPT] == rows[0][ACCEPT]).collect();
    assert_eq!(waited.len(), 2, "two requests on the keep-alive connection: {rows:?}");
    let second = waited[1];
    let wait = n(second, START) - n(second, ARRIVE);
    assert!(wait >= 300_000, "the request waited for the thread from its arrival: {wait} µs: {rows:?}");
    assert!(n(second, ARRIVE) - n(second, ACCEPT) >= 200_000, "it arrived long after the accept: {rows:?}");
}

#[test]
fn under_staged_each_row_has_its_time_queued_and_working_per_stage_and_the_status_page_shows_the_stages() {
    let rows = rows_for("[staged]\nsend_threads = 3\n", &["--model", "staged"], |tern| {
        let r = common::get(tern.addr, "/_tern/status", "");
        let s: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(s["model"], "staged");
        let stages = &s["stages"];
        let threads: Vec<u64> =
            ["read", "handle", "send", "log"].iter().map(|k| stages[k]["threads"].as_u64().unwrap()).collect();
        assert_eq!(threads, [2, 2, 3, 1], "{stages}");
        // Each of the five requests passed the handle stage once (it has
        // counted them before their answers went out; the status request
        // is still in it).
        assert_eq!(stages["handle"]["taken"], 5, "{stages}");
        assert!(stages["read"]["taken"].as_u64().unwrap() >= 5, "{stages}");
        // Starting the program took the handle stage some time.
        assert!(stages["handle"]["busy_seconds"].as_f64().unwrap() > 0.0, "{stages}");
        for k in ["read", "handle", "send", "log"] {
            assert!(stages[k]["queue"].is_u64() && stages[k]["busy_seconds"].is_f64(), "{stages}");
        }
        let text = String::from_utf8(common::get(tern.addr, "/metrics", "").body).unwrap();
        for line in [
            "# TYPE tern_stage_threads gauge\ntern_stage_threads{stage=\"read\"} 2\n",
            "tern_stage_threads{stage=\"send\"} 3\ntern_stage_threads{stage=\"log\"} 1\n",
            "# TYPE tern_stage_taken_total counter\n",
            "tern_stage_taken_total{stage=\"handle\"} 6\n",
            "# TYPE tern_stage_queue_length gauge\n",
            "# TYPE tern_stage_busy_seconds_total counter\n",
        ] {
            assert!(text.contains(line), "{line:?} in:\n{text}");
        }
    });
    for r in &rows {
        assert!(r[STAGES..].iter().all(|&c| c != EMPTY), "every stage column filled under staged: {r:?}");
    }
    // The program's row: starting it (handle) and relaying its output
    // until it exited (send) took time.
    let cgi = &rows[2];
    let (handle_working, send_working) = (cgi[STAGES + 3], cgi[STAGES + 5]);
    assert!(handle_working > 0 && send_working > 0, "handle and send working time of the CGI request: {cgi:?}");
}

#[test]
fn an_unwritable_records_path_names_the_key_and_line() {
    let site = common::site();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tern.toml");
    std::fs::write(&config, "[log]\nservice_records = \"/nonexistent-dir/records.csv\"\n").unwrap();
    let out = std::process::Command::new(common::tern_bin())
        .args(["serve", "--check", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg(&site.root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2: log.service_records") && err.contains("/nonexistent-dir/records.csv"), "{err}");
}
