//! `tern bench --h2` against real HTTP/2 servers, Debian's h2o and nginx
//! (installed by scripts/test.sh), each in a child process on free ports of
//! 127.0.0.1: the counts, statuses and body bytes it reports are the
//! servers' own (their access logs), over TLS (ALPN) and h2c, in closed and
//! open loop and with a mix; `--streams` really multiplexes; nginx's GOAWAY
//! after `keepalive_requests` costs no request; a server without HTTP/2 is
//! one clear error.

mod common;

use std::collections::HashSet;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::tls::Ca;

const KIB: usize = 1024;

/// A free port on 127.0.0.1 (the server binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A reference server in a child process, killed when dropped.
struct RefServer {
    child: Child,
    dir: tempfile::TempDir,
    /// TLS (h2 by ALPN) and plain (h2c) listeners.
    tls: u16,
    plain: u16,
    /// nginx: the same over HTTP/1.1 only (TLS, plain).
    http1: (u16, u16),
}

/// Files served: `1k.bin` and `slow.bin` (40 KiB).
fn docroot(dir: &Path) -> PathBuf {
    let root = dir.join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("1k.bin"), common::pattern(KIB, 1)).unwrap();
    std::fs::write(root.join("slow.bin"), common::pattern(40 * KIB, 2)).unwrap();
    root
}

impl RefServer {
    /// h2o, one thread; its access log gives each request's connection,
    /// protocol, status and body bytes.
    fn h2o() -> RefServer {
        let dir = tempfile::tempdir().unwrap();
        let root = docroot(dir.path());
        let (cert, key, _) = Ca::new("bench-h2 CA").leaf(dir.path(), "server", &["localhost"]);
        let (tls, plain) = (free_port(), free_port());
        let d = dir.path().display();
        // As root h2o would switch to nobody, who cannot read the test's
        // private directory.
        let user = if unsafe { libc::geteuid() } == 0 { "user: root\n" } else { "" };
        let config = format!(
            "{user}num-threads: 1\nerror-log: {d}/error.log\n\
             access-log:\n  path: {d}/access.log\n  format: \"%{{connection-id}}x %H %s %b\"\n\
             listen:\n  host: 127.0.0.1\n  port: {tls}\n  ssl:\n    certificate-file: {}\n    key-file: {}\n\
             listen:\n  host: 127.0.0.1\n  port: {plain}\n\
             hosts:\n  default:\n    paths:\n      /:\n        file.dir: {}\n",
            cert.display(),
            key.display(),
            root.display()
        );
        std::fs::write(dir.path().join("h2o.conf"), config).unwrap();
        let mut cmd = Command::new("/usr/bin/h2o");
        cmd.arg("-c").arg(dir.path().join("h2o.conf"));
        RefServer::spawn(cmd, dir, (tls, plain), (0, 0))
    }

    /// nginx, one process (no master): h2 on its TLS listener, h2c on a
    /// plain one, and HTTP/1.1 only on two more; `slow.bin` sent at
    /// 20 KiB/s, `/reset` answered by resetting the stream (444).
    fn nginx() -> RefServer {
        let dir = tempfile::tempdir().unwrap();
        let root = docroot(dir.path());
        let (cert, key, _) = Ca::new("bench-h2 CA").leaf(dir.path(), "server", &["localhost"]);
        let (tls, plain) = (free_port(), free_port());
        let http1 = (free_port(), free_port());
        let d = dir.path().display();
        let config = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;\n\
               uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               log_format counts '$connection $server_protocol $status $body_bytes_sent $request_time';\n\
               access_log {d}/access.log counts;\n\
               ssl_certificate {}; ssl_certificate_key {};\n\
               server {{\n\
                 listen 127.0.0.1:{tls} ssl http2; listen 127.0.0.1:{plain} http2;\n\
                 root {};\n\
                 location = /slow.bin {{ limit_rate 20k; }}\n\
                 location = /reset {{ return 444; }}\n\
               }}\n\
               server {{ listen 127.0.0.1:{} ssl; listen 127.0.0.1:{}; root {}; }}\n\
             }}\n",
            cert.display(),
            key.display(),
            root.display(),
            http1.0,
            http1.1,
            root.display()
        );
        std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
        let mut cmd = Command::new("/usr/sbin/nginx");
        cmd.arg("-p").arg(dir.path()).arg("-c").arg(dir.path().join("nginx.conf"));
        RefServer::spawn(cmd, dir, (tls, plain), http1)
    }

    fn spawn(mut cmd: Command, dir: tempfile::TempDir, (tls, plain): (u16, u16), http1: (u16, u16)) -> RefServer {
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start server");
        let server = RefServer { child, dir, tls, plain, http1 };
        let started = Instant::now();
        for port in [tls, plain, http1.0, http1.1].into_iter().filter(|&p| p != 0) {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no listener on {port}: {}",
                    server.log("error.log")
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        server
    }

    fn url(&self, tls: bool, path: &str) -> String {
        match tls {
            true => format!("https://127.0.0.1:{}{path}", self.tls),
            false => format!("http://127.0.0.1:{}{path}", self.plain),
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// The access log's lines, split into fields, once `n` are written
    /// (nginx and h2o log after the response is sent).
    fn access(&self, n: usize) -> Vec<Vec<String>> {
        let started = Instant::now();
        loop {
            let lines: Vec<Vec<String>> =
                self.log("access.log").lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect();
            if lines.len() >= n || started.elapsed() > Duration::from_secs(5) {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Empties the access log between runs.
    fn clear_access(&self) {
        std::fs::write(self.dir.path().join("access.log"), "").unwrap();
    }
}

impl Drop for RefServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["bench", "--no-store", "--h2", "--insecure", "--json"])
        .args(args)
        .output()
        .expect("run tern bench")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tern bench failed: {}", String::from_utf8_lossy(&out.stderr));
    json_or_failed(out)
}

/// The report of a run that was made, successful or not (exit 0 or 1).
fn json_or_failed(out: &Output) -> serde_json::Value {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(matches!(out.status.code(), Some(0 | 1)), "tern bench failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

/// The report's requests, 200s, body bytes and errors.
fn counts(r: &serde_json::Value) -> (u64, u64, u64, u64) {
    let errors: u64 = r["errors"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    (
        r["requests"].as_u64().unwrap(),
        r["status"]["200"].as_u64().unwrap_or(0),
        r["body_bytes"].as_u64().unwrap(),
        errors,
    )
}

#[test]
fn h2o_over_tls_and_h2c_counts_are_the_servers() {
    let server = RefServer::h2o();
    for (tls, protocol) in [(true, "h2"), (false, "h2c")] {
        server.clear_access();
        let r = json(&bench(&["-c", "3", "-t", "2", "--streams", "4", "-n", "600", &server.url(tls, "/1k.bin")]));
        assert_eq!(r["protocol"], protocol);
        assert_eq!(counts(&r), (600, 600, 600 * KIB as u64, 0), "{protocol}: {r}");
        assert_eq!(r["connects"], 3, "{protocol}");
        let log = server.access(600);
        assert_eq!(log.len(), 600, "{protocol}: the server logged {} requests", log.len());
        assert!(log.iter().all(|l| l[1] == "HTTP/2" && l[2] == "200" && l[3] == "1024"), "{protocol}: {log:?}");
        let conns: HashSet<&str> = log.iter().map(|l| l[0].as_str()).collect();
        assert_eq!(conns.len(), 3, "{protocol}: requests came on {} connections", conns.len());
    }
}

#[test]
fn h2o_open_loop_and_mix() {
    let server = RefServer::h2o();
    let r =
        json(&bench(&["-c", "4", "-t", "2", "--streams", "2", "-R", "500", "-d", "1s", &server.url(true, "/1k.bin")]));
    assert_eq!(r["mode"], "open");
    let (requests, ok, body, errors) = counts(&r);
    assert!((450..=550).contains(&requests), "{requests} requests at 500/s for 1s");
    assert_eq!((ok, body, errors), (requests, requests * KIB as u64, 0));
    assert_eq!(server.access(requests as usize).len() as u64, requests);

    server.clear_access();
    let mix = server.dir.path().join("site.mix");
    std::fs::write(&mix, "3 /1k.bin\n1 /missing\n").unwrap();
    let r = json(&bench(&[
        "--mix",
        mix.to_str().unwrap(),
        "-c",
        "2",
        "--streams",
        "5",
        "-n",
        "400",
        &server.url(false, "/"),
    ]));
    assert_eq!(r["status"]["200"], 300);
    assert_eq!(r["status"]["404"], 100);
    assert_eq!(r["errors"]["status"], 100);
    let log = server.access(400);
    assert_eq!(log.iter().filter(|l| l[2] == "200").count(), 300);
    assert_eq!(log.iter().filter(|l| l[2] == "404").count(), 100);
}

#[test]
fn nginx_goaway_after_keepalive_requests_loses_no_request() {
    // nginx ends each connection with a graceful GOAWAY after 1,000
    // requests (keepalive_requests): the streams it left unprocessed are
    // sent again on a new connection, not counted as failed (h2load counts
    // them as failures).
    let server = RefServer::nginx();
    for tls in [true, false] {
        server.clear_access();
        let r = json(&bench(&["-c", "2", "-t", "1", "--streams", "8", "-n", "3000", &server.url(tls, "/1k.bin")]));
        assert_eq!(counts(&r), (3000, 3000, 3000 * KIB as u64, 0), "tls {tls}: {r}");
        let log = server.access(3000);
        assert_eq!(log.len(), 3000);
        assert!(log.iter().all(|l| l[1] == "HTTP/2.0" && l[2] == "200" && l[3] == "1024"));
        let conns: HashSet<&str> = log.iter().map(|l| l[0].as_str()).collect();
        assert!(conns.len() >= 3, "3,000 requests on {} connections of at most 1,000 each", conns.len());
        assert_eq!(r["connects"].as_u64().unwrap(), conns.len() as u64);
    }
}

#[test]
fn streams_are_concurrent_on_one_connection() {
    // nginx sends slow.bin (40 KiB) at 20 KiB/s after its first second's
    // worth: about a second each. Ten in turn would take ten seconds; ten
    // streams at once on the one connection take about one.
    let server = RefServer::nginx();
    let started = Instant::now();
    let r = json(&bench(&["-c", "1", "-t", "1", "--streams", "10", "-n", "10", &server.url(false, "/slow.bin")]));
    let elapsed = started.elapsed();
    assert_eq!(counts(&r), (10, 10, 10 * 40 * KIB as u64, 0), "{r}");
    assert!(r["latency"]["service"]["p50_us"].as_u64().unwrap() > 500_000, "not rate-limited: {r}");
    assert!(elapsed < Duration::from_secs(5), "10 requests took {elapsed:?}: not concurrent");
    let log = server.access(10);
    let conns: HashSet<&str> = log.iter().map(|l| l[0].as_str()).collect();
    assert_eq!((log.len(), conns.len()), (10, 1));
}

#[test]
fn resets_are_counted_as_such_and_keep_the_connection() {
    let server = RefServer::nginx();
    let r =
        json_or_failed(&bench(&["-c", "2", "-t", "1", "--streams", "4", "-n", "100", &server.url(false, "/reset")]));
    assert_eq!(r["requests"], 0);
    assert_eq!(r["errors"]["reset"], 100, "{}", r["errors"]);
    assert_eq!(r["errors"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 100);
    // A stream's reset is not the connection's end.
    assert_eq!(r["connects"], 2);
}

#[test]
fn a_server_without_http2_is_a_clear_error() {
    let server = RefServer::nginx();
    let (tls, plain) = server.http1;
    for (url, needle) in [
        (format!("https://127.0.0.1:{tls}/1k.bin"), "does not speak HTTP/2 over TLS: it refused ALPN \"h2\""),
        (format!("http://127.0.0.1:{plain}/1k.bin"), "does not speak HTTP/2 by prior knowledge (h2c)"),
    ] {
        let out = bench(&["-n", "1", &url]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{url}: {err}");
    }
    // (The HTTP/1.1 server logs the h2c probe's preface as a 400; an
    // HTTP/2 server logs nothing for either check: the exact counts above.)
}
