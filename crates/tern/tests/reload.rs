//! Reload (SIGHUP) and stop (SIGTERM) under traffic: a replaced server hands
//! its kept-alive connections to its successor instead of closing them, so
//! no request is lost; a stopping server answers a request that arrives on
//! an idle connection instead of dropping it; a reload never cuts a
//! download, whatever `server.shutdown_timeout` says.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Tern;

const GET: &[u8] = b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n";

/// Reads one response to `GET /small.txt` (1,000-byte body): its head.
fn read_response(s: &mut TcpStream) -> Result<String, String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = common::find(&got, b"\r\n\r\n") {
            if got.len() >= end + 4 + 1000 {
                assert_eq!(got.len(), end + 4 + 1000, "one response, nothing more");
                return Ok(String::from_utf8_lossy(&got[..end]).into_owned());
            }
        }
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {} bytes", got.len())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {} bytes", got.len())),
        }
    }
}

fn hup(tern: &Tern) {
    unsafe { libc::kill(tern.pid(), libc::SIGHUP) };
}

/// The reloads the server has logged as done.
fn reloads(tern: &Tern) -> usize {
    tern.stderr.lock().unwrap().matches("configuration reloaded").count()
}

/// Sends SIGHUP and waits until it is the `n`th reload done. Signals sent
/// while a reload is under way would merge into one: each is sent once
/// the last is done.
fn reload(tern: &Tern, n: usize) {
    hup(tern);
    let start = Instant::now();
    while reloads(tern) < n {
        assert!(start.elapsed() < Duration::from_secs(20), "reload {n} not done");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kept-alive connections, each answered once already (so idle).
fn idle_connections(tern: &Tern, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(tern.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(GET).unwrap();
            read_response(&mut s).unwrap();
            s
        })
        .collect()
}

#[test]
fn a_request_sent_on_any_kept_alive_connection_as_the_reload_happens_is_answered() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "", &[]);
    let mut conns = idle_connections(&tern, 24);
    for round in 0..3 {
        hup(&tern);
        // Requests spread over the moments the servers change hands: at
        // once, while the new server starts, after the old one let go.
        for (i, s) in conns.iter_mut().enumerate() {
            if i % 4 == 0 {
                std::thread::sleep(Duration::from_millis(15));
            }
            s.write_all(GET).unwrap_or_else(|e| panic!("round {round}, connection {i}: {e}"));
        }
        for (i, s) in conns.iter_mut().enumerate() {
            let head = read_response(s).unwrap_or_else(|e| panic!("round {round}, connection {i}: {e}"));
            assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
            assert!(!head.to_ascii_lowercase().contains("connection: close"), "{head}");
        }
    }
    // Partly sent requests move with the connection: the rest completes them.
    for s in conns.iter_mut() {
        s.write_all(b"GET /small.txt HT").unwrap();
    }
    hup(&tern);
    std::thread::sleep(Duration::from_millis(300));
    for s in conns.iter_mut() {
        s.write_all(b"TP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(read_response(s).unwrap().starts_with("HTTP/1.1 200 OK"));
    }
}

#[test]
fn twelve_reloads_under_load_fail_no_request() {
    let site = common::site();
    std::fs::write(site.root.join("4k.bin"), common::pattern(4096, 3)).unwrap();
    let tern = Tern::start(&site.root, "sendfile", "", &[]);
    let url = tern.url("/4k.bin");
    let bench = Command::new(common::tern_bin())
        .args(["bench", "-c", "32", "-t", "1", "-d", "120s", "--json", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    for n in 1..=12 {
        reload(&tern, n);
        std::thread::sleep(Duration::from_millis(250));
    }
    // Ctrl-C ends the run with its report.
    unsafe { libc::kill(bench.id() as i32, libc::SIGINT) };
    let out = bench.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        j["errors"],
        serde_json::json!({"connect": 0, "read": 0, "write": 0, "timeout": 0, "reset": 0, "goaway": 0, "status": 0}),
        "{j}"
    );
    let requests = j["requests"].as_u64().unwrap();
    assert!(requests > 1000, "{j}");
    assert_eq!(j["status"]["200"].as_u64(), Some(requests), "{j}");
    assert_eq!(reloads(&tern), 12);
}

#[test]
fn sigterm_answers_a_request_arriving_on_an_idle_connection_then_closes() {
    let site = common::site();
    let mut tern = Tern::start(&site.root, "sendfile", "", &[]);
    let mut conns = idle_connections(&tern, 8);
    unsafe { libc::kill(tern.pid(), libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(200));
    for s in conns.iter_mut() {
        s.write_all(GET).unwrap();
    }
    for s in conns.iter_mut() {
        let head = read_response(s).expect("a request that arrived during the stop is answered");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
        assert_eq!(s.read(&mut [0u8; 16]).unwrap(), 0, "closed after the answer");
    }
    // An idle connection that sends nothing is closed soon.
    let mut quiet = conns.pop().unwrap();
    let _ = quiet.read(&mut [0u8; 16]);
    let status = tern.terminate(Duration::from_secs(10)).expect("exits");
    assert!(status.success());
}

#[test]
fn a_reload_does_not_cut_a_download_that_outlasts_shutdown_timeout() {
    let site = common::site();
    let size: usize = 24 << 20;
    std::fs::File::create(site.root.join("huge.bin")).unwrap().set_len(size as u64).unwrap();
    let tern = Tern::start(&site.root, "sendfile", "[server]\nshutdown_timeout = \"1s\"\n", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0usize;
    let mut hup_sent = false;
    // When the new server had taken over, and how much had arrived then.
    let mut reloaded: Option<(Instant, usize)> = None;
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => panic!("download failed after {got} bytes: {e}"),
        };
        got += n;
        if !hup_sent && got > 1 << 20 {
            hup(&tern);
            hup_sent = true;
        }
        match reloaded {
            // Slowly until the reload is done (it may take a while on a
            // busy machine) ...
            None if hup_sent => {
                if tern.stderr.lock().unwrap().contains("configuration reloaded") {
                    reloaded = Some((Instant::now(), got));
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            None => {}
            // ... then about 6 MB/s: the rest takes seconds, several times
            // the shutdown timeout.
            Some((at, from)) => {
                let due = Duration::from_secs_f64((got - from) as f64 / 6e6);
                if let Some(wait) = due.checked_sub(at.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
    }
    let (at, _) = reloaded.expect("the reload was not done before the download ended");
    assert!(at.elapsed() > Duration::from_secs(2), "the download ended {:?} after the reload", at.elapsed());
    assert!(got > size, "the download was cut at {got} of {size} body bytes");
}

/// A server replaced twice in a row: its successor has ended (it had
/// nothing to finish) by the time its last request is answered. The
/// connection that request was on goes on to the newest server, which
/// answers the next request on it.
#[test]
fn a_connection_freed_after_its_successor_ended_goes_to_the_newest_server() {
    let site = common::site();
    let cgi = site.root.join("cgi-bin");
    std::fs::create_dir_all(&cgi).unwrap();
    let slow = cgi.join("slow.sh");
    std::fs::write(&slow, "#!/bin/sh\nsleep 2\nprintf 'Content-Type: text/plain\\n\\nslow'\n").unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tern = Tern::start(&site.root, "sendfile", "", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /cgi-bin/slow.sh HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for n in 1..=2 {
        reload(&tern, n);
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"slow\r\n0\r\n\r\n") {
        let n = s.read(&mut buf).expect("the slow answer");
        assert!(n > 0, "closed before the slow answer: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&got));
    // Handed on by now; the next request on it is answered.
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(GET).unwrap();
    let head = read_response(&mut s).expect("the request after the hand-over");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
}
