//! FastCGI end to end against a real php-fpm, started by each test with a
//! private configuration and a Unix socket in a temporary directory (no
//! system service): the environment PHP sees, request bodies in, responses
//! out (streamed, byte for byte), PHP's errors, php-fpm killed and
//! recycling its children, the pool's kept-alive connections seen from
//! outside, and backends that never answer.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use common::php_fpm::PhpFpm;
use common::{get, parse_responses, pattern, request, Tern};

/// A document root with PHP scripts, php-fpm for it, and tern in front.
struct Setup {
    site: common::Site,
    fpm: PhpFpm,
    tern: Tern,
}

const ENV_PHP: &str = r#"<?php
header("Content-Type: application/json");
$keys = ["GATEWAY_INTERFACE", "SERVER_PROTOCOL", "REQUEST_METHOD", "SCRIPT_NAME", "SCRIPT_FILENAME",
  "DOCUMENT_ROOT", "PATH_INFO", "PATH_TRANSLATED", "QUERY_STRING", "REQUEST_URI", "CONTENT_LENGTH",
  "CONTENT_TYPE", "HTTP_X_CUSTOM", "HTTP_PROXY", "HTTP_HOST", "REDIRECT_STATUS", "PHP_SELF"];
$o = [];
foreach ($keys as $k) { $o[$k] = $_SERVER[$k] ?? null; }
$o["GET"] = $_GET;
$o["POST"] = $_POST;
$o["FILES"] = [];
foreach ($_FILES as $n => $f) { $o["FILES"][$n] = [$f["name"], $f["size"], base64_encode(file_get_contents($f["tmp_name"]))]; }
echo json_encode($o);
"#;

fn setup(children: usize, fpm_extra: &str, tern_extra: &str) -> Setup {
    let site = common::site();
    let root = &site.root;
    std::fs::create_dir_all(root.join("app")).unwrap();
    std::fs::create_dir_all(root.join("upload")).unwrap();
    std::fs::write(root.join("env.php"), ENV_PHP).unwrap();
    std::fs::write(root.join("app/env.php"), ENV_PHP).unwrap();
    std::fs::write(root.join("upload/x.jpg"), "<?php echo 'source ran';").unwrap();
    std::fs::write(root.join("hello.php"), "<?php echo 'hello';").unwrap();
    std::fs::write(
        root.join("echo.php"),
        "<?php header('X-Length: ' . ($_SERVER['CONTENT_LENGTH'] ?? '-')); readfile('php://input');",
    )
    .unwrap();
    // 50 MiB of a pattern both sides compute: block i is 1 MiB of byte i.
    std::fs::write(
        root.join("big.php"),
        "<?php header('Content-Type: application/octet-stream'); for ($i = 0; $i < 50; $i++) { echo str_repeat(chr(65 + $i), 1048576); }",
    )
    .unwrap();
    std::fs::write(root.join("flush.php"), "<?php echo 'first'; flush(); sleep(4); echo 'second';").unwrap();
    std::fs::write(
        root.join("hash.php"),
        "<?php echo $_SERVER['CONTENT_LENGTH'], ' ', hash_file('crc32b', 'php://input');",
    )
    .unwrap();
    std::fs::write(
        root.join("echo.cgi"),
        "#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\r\\n\\r\\n'\nexec cat\n",
    )
    .unwrap();
    std::fs::set_permissions(root.join("echo.cgi"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(root.join("fatal.php"), "<?php tern_no_such_function();").unwrap();
    std::fs::write(
        root.join("ticks.php"),
        "<?php for ($i = 0; $i < 300; $i++) { echo \"tick $i\\n\"; flush(); usleep(100000); }",
    )
    .unwrap();
    std::fs::write(root.join("slow.php"), "<?php sleep(3); echo 'slow';").unwrap();
    std::fs::write(root.join("status.php"), "<?php header('Status: 418 Teapot'); header('X-Php: yes'); echo 'tea';")
        .unwrap();
    let fpm = PhpFpm::start(site.dir.path(), children, fpm_extra);
    let config = format!(
        "[limits]\nmax_body_bytes = \"64MiB\"\n[fastcgi.backends.php]\naddress = \"unix:{}\"\nextensions = [\".php\"]\n{tern_extra}\n",
        fpm.socket.display()
    );
    let tern = Tern::start(root, "sendfile", &config, &[]);
    Setup { site, fpm, tern }
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

#[test]
fn the_environment_php_sees() {
    let s = setup(2, "", "max_connections = 2");
    let root = std::fs::canonicalize(&s.site.root).unwrap().display().to_string();
    // (URL, SCRIPT_NAME, PATH_INFO, QUERY_STRING)
    let cases: &[(&str, &str, Option<&str>, &str)] = &[
        ("/env.php", "/env.php", None, ""),
        ("/env.php?a=1&b=two", "/env.php", None, "a=1&b=two"),
        ("/env.php/extra/path", "/env.php", Some("/extra/path"), ""),
        ("/env.php/extra/dir/?x=%20y", "/env.php", Some("/extra/dir/"), "x=%20y"),
        ("/app/env.php/a%20b", "/app/env.php", Some("/a b"), ""),
        ("/app/./../app/env.php?", "/app/env.php", None, ""),
    ];
    for &(url, script, info, query) in cases {
        let r = get(s.tern.addr, url, "X-Custom: one\r\nX-Custom: two\r\nProxy: http://evil:1\r\n");
        assert_eq!(r.status, 200, "{url}: {}", String::from_utf8_lossy(&r.body));
        let v = json(&r.body);
        assert_eq!(v["GATEWAY_INTERFACE"], "CGI/1.1", "{url}");
        assert_eq!(v["SERVER_PROTOCOL"], "HTTP/1.1");
        assert_eq!(v["REQUEST_METHOD"], "GET");
        assert_eq!(v["SCRIPT_NAME"], script, "{url}");
        assert_eq!(v["SCRIPT_FILENAME"], format!("{root}{script}"), "{url}");
        assert_eq!(v["DOCUMENT_ROOT"], root.as_str());
        assert_eq!(v["PATH_INFO"], info.map_or(serde_json::Value::Null, Into::into), "{url}");
        let translated = info.map_or(serde_json::Value::Null, |i| format!("{root}{i}").into());
        assert_eq!(v["PATH_TRANSLATED"], translated, "{url}");
        assert_eq!(v["QUERY_STRING"], query, "{url}");
        assert_eq!(v["REQUEST_URI"], url);
        assert_eq!(v["CONTENT_LENGTH"], serde_json::Value::Null, "{url}");
        assert_eq!(v["HTTP_X_CUSTOM"], "one, two");
        assert_eq!(v["HTTP_PROXY"], serde_json::Value::Null, "httpoxy: a Proxy header never becomes HTTP_PROXY");
        assert_eq!(v["HTTP_HOST"], "localhost");
        assert_eq!(v["PHP_SELF"], format!("{script}{}", info.unwrap_or("")), "{url}");
    }
    assert_eq!(
        json(&get(s.tern.addr, "/env.php?a=1&b=two", "").body)["GET"],
        serde_json::json!({"a": "1", "b": "two"})
    );
    // A script that does not exist, and a non-PHP file named like a
    // directory in front of a .php name, are never run.
    for url in ["/missing.php", "/upload/x.jpg/y.php", "/upload/x.jpg/.php", "/missing.php/info"] {
        let r = get(s.tern.addr, url, "");
        assert_eq!(r.status, 404, "{url}: {}", String::from_utf8_lossy(&r.body));
        assert!(!String::from_utf8_lossy(&r.body).contains("source ran"), "{url}");
    }
    // Status and fields from PHP pass through the CGI response rules.
    let r = get(s.tern.addr, "/status.php", "");
    assert_eq!((r.status, r.header("x-php"), r.body.as_slice()), (418, Some("yes"), &b"tea"[..]));
    // HEAD: PHP runs, no body reaches the client.
    let r = request(s.tern.addr, "HEAD /hello.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.body.len()), (200, 0));
}

#[test]
fn request_bodies_reach_php() {
    let s = setup(2, "", "");
    let addr = s.tern.addr;
    // urlencoded
    let form = "name=tern&list%5B%5D=a&list%5B%5D=b";
    let r = request(
        addr,
        &format!(
            "POST /env.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    );
    let v = json(&r.body);
    assert_eq!(v["REQUEST_METHOD"], "POST");
    assert_eq!(v["CONTENT_LENGTH"], form.len().to_string());
    assert_eq!(v["CONTENT_TYPE"], "application/x-www-form-urlencoded");
    assert_eq!(v["POST"], serde_json::json!({"name": "tern", "list": ["a", "b"]}));
    // multipart, with a binary file
    let file = pattern(100_000, 3);
    let mut body = Vec::new();
    body.extend_from_slice(b"--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhello\r\n");
    body.extend_from_slice(
        b"--XyZ\r\nContent-Disposition: form-data; name=\"up\"; filename=\"p.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n",
    );
    body.extend_from_slice(&file);
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    let mut raw = format!(
        "POST /env.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(&body);
    let out = common::exchange(addr, &raw, Duration::from_secs(10));
    let v = json(&parse_responses(&out, &[false])[0].body);
    assert_eq!(v["POST"], serde_json::json!({"title": "hello"}));
    assert_eq!(v["FILES"]["up"][0], "p.bin");
    assert_eq!(v["FILES"]["up"][1], 100_000);
    let got = base64::engine::general_purpose::STANDARD.decode(v["FILES"]["up"][2].as_str().unwrap()).unwrap();
    assert!(got == file, "the uploaded file arrived changed");

    // 10 MiB, echoed back byte for byte.
    let big = pattern(10 * 1024 * 1024, 5);
    let mut raw = format!(
        "POST /echo.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        big.len()
    )
    .into_bytes();
    raw.extend_from_slice(&big);
    let out = common::exchange(addr, &raw, Duration::from_secs(30));
    let r = &parse_responses(&out, &[false])[0];
    assert_eq!((r.status, r.header("x-length")), (200, Some("10485760")));
    assert!(r.body == big, "10 MiB body echoed: {} bytes, differs", r.body.len());

    // Chunked: de-chunked, with CONTENT_LENGTH set.
    let raw = "POST /echo.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
    let r = request(addr, raw);
    assert_eq!((r.status, r.header("x-length"), r.body.as_slice()), (200, Some("12"), &b"hello, world"[..]));
}

/// The most memory the server process has used so far (`VmHWM`), in KiB.
fn peak_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Sends `head` then `body` (as it is: framing is the caller's) and returns
/// the one response.
fn upload(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> common::Response {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    sock.write_all(head.as_bytes()).unwrap();
    sock.write_all(body).unwrap();
    let mut out = Vec::new();
    sock.read_to_end(&mut out).unwrap();
    parse_responses(&out, &[false]).remove(0)
}

#[test]
fn a_50_mib_upload_takes_bounded_memory() {
    let s = setup(1, "", "");
    let addr = s.tern.addr;
    let pid = s.tern.pid();
    let big = pattern(50 * 1024 * 1024 + 7, 11);
    let crc = format!("{} {:08x}", big.len(), crc32fast::hash(&big));
    // Warm up every path first (php-fpm connection, spool file, CGI).
    let small = &big[..200_000];
    let head = |path: &str, len: usize| {
        format!("POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n")
    };
    let r = upload(addr, &head("/hash.php", small.len()), small);
    assert_eq!(r.body, format!("{} {:08x}", small.len(), crc32fast::hash(small)).into_bytes());
    assert!(upload(addr, &head("/echo.cgi", small.len()), small).body == small);
    let before = peak_kib(pid);

    let r = upload(addr, &head("/hash.php", big.len()), &big);
    assert_eq!((r.status, String::from_utf8_lossy(&r.body)), (200, crc.clone().into()));
    // Chunked: php needs CONTENT_LENGTH, so the body is spooled whole first.
    let mut chunked = Vec::with_capacity(big.len() + 1024);
    for piece in big.chunks(1 << 20) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let chunked_head =
        "POST /hash.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    let r = upload(addr, chunked_head, &chunked);
    assert_eq!((r.status, String::from_utf8_lossy(&r.body)), (200, crc.into()));
    // CGI takes the same spooled body as its standard input.
    let r = upload(addr, &head("/echo.cgi", big.len()), &big);
    assert!(r.status == 200 && r.body == big, "CGI echo: {} bytes, differs", r.body.len());

    let grown = peak_kib(pid).saturating_sub(before);
    assert!(grown < 16 * 1024, "three 50 MiB uploads raised the server's peak memory by {grown} KiB");
}

#[test]
fn responses_stream_byte_for_byte() {
    let s = setup(2, "", "");
    // 50 MiB, through a deliberately slow reader at first.
    let mut sock = TcpStream::connect(s.tern.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sock.write_all(b"GET /big.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = common::read_until_close(&mut sock);
    let r = &parse_responses(&out, &[false])[0];
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 50 * 1024 * 1024);
    for (i, block) in r.body.chunks(1024 * 1024).enumerate() {
        assert!(block.iter().all(|&b| b == 65 + i as u8), "block {i} differs");
    }

    // flush(): the first part arrives while the script still sleeps.
    let start = Instant::now();
    let mut sock = TcpStream::connect(s.tern.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    sock.write_all(b"GET /flush.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("first") {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the flushed part");
        seen.extend_from_slice(&buf[..n]);
    }
    let first_at = start.elapsed();
    assert!(!String::from_utf8_lossy(&seen).contains("second"));
    assert!(first_at < Duration::from_millis(3500), "flushed output took {first_at:?}: held until the end");
    seen.extend(common::read_until_close(&mut sock));
    assert!(start.elapsed() >= Duration::from_secs(4));
    let r = &parse_responses(&seen, &[false])[0];
    assert_eq!(r.body, b"firstsecond");
}

#[test]
fn a_php_fatal_error_is_logged_and_relayed() {
    let s = setup(1, "", "");
    let r = get(s.tern.addr, "/fatal.php", "");
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    let start = Instant::now();
    loop {
        let log = s.tern.stderr.lock().unwrap().clone();
        if log.contains("tern_no_such_function") {
            assert!(log.contains("GET /fatal.php HTTP/1.1"), "the request line is with the message: {log}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "PHP's error is not in tern's log: {log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `n` keep-alive GETs of `path` over `conns` parallel connections;
/// returns the statuses that were not 200.
fn hammer(addr: std::net::SocketAddr, path: &str, conns: usize, n: usize) -> Vec<String> {
    let threads: Vec<_> = (0..conns)
        .map(|_| {
            let path = path.to_string();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let sock = TcpStream::connect(addr).unwrap();
                sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut w = sock.try_clone().unwrap();
                let mut r = BufReader::new(sock);
                for _ in 0..n / conns {
                    w.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
                    let mut line = String::new();
                    r.read_line(&mut line).unwrap();
                    let mut len = None;
                    let mut chunked = false;
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).unwrap();
                        let lower = h.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            len = Some(v.trim().parse::<usize>().unwrap());
                        }
                        chunked |= lower.starts_with("transfer-encoding: chunked");
                        if h == "\r\n" || h.is_empty() {
                            break;
                        }
                    }
                    if chunked {
                        loop {
                            let mut size = String::new();
                            r.read_line(&mut size).unwrap();
                            let size = usize::from_str_radix(size.trim(), 16).unwrap();
                            let mut data = vec![0; size + 2];
                            r.read_exact(&mut data).unwrap();
                            if size == 0 {
                                break;
                            }
                        }
                    } else {
                        let mut data = vec![0; len.unwrap_or(0)];
                        r.read_exact(&mut data).unwrap();
                    }
                    if !line.starts_with("HTTP/1.1 200") {
                        failures.push(line);
                    }
                }
                failures
            })
        })
        .collect();
    threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
}

#[test]
fn kept_alive_connections_stay_at_the_pool_size() {
    let s = setup(4, "", "max_connections = 3");
    let failures = hammer(s.tern.addr, "/hello.php", 5, 2000);
    assert!(failures.is_empty(), "{failures:?}");
    // From outside: php-fpm's socket holds exactly the pool's connections.
    assert_eq!(s.fpm.connections(), 3, "connections to php-fpm after 2,000 requests");
    let php = &s.tern.status()["fastcgi"]["backends"]["php"];
    assert_eq!(php["connects"], 3, "{php}");
    assert_eq!(php["open"], 3);
    assert_eq!(php["idle"], 3);
    assert_eq!(php["reused"], 2000 - 3);
    assert!(php["reuse_ratio"].as_f64().unwrap() > 0.99);
}

/// One worker and more clients than connections: each freed connection
/// goes straight to a request waiting on the same worker (its doorbell
/// rung, the connection kept in its epoll set), never lost or doubled.
#[test]
fn one_worker_hands_its_connections_to_its_waiting_requests() {
    let s = setup(3, "", "max_connections = 2\n[server]\nworkers = 1");
    let failures = hammer(s.tern.addr, "/hello.php", 8, 2000);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(s.fpm.connections(), 2, "connections to php-fpm after 2,000 requests");
    let php = &s.tern.status()["fastcgi"]["backends"]["php"];
    assert_eq!((php["connects"].as_u64(), php["reused"].as_u64()), (Some(2), Some(2000 - 2)), "{php}");
    assert_eq!((php["open"].as_u64(), php["idle"].as_u64(), php["waiting"].as_u64()), (Some(2), Some(2), Some(0)));
}

/// A script found is remembered (no lookup per request), but its removal
/// is seen at once: tern answers `404` itself (php-fpm's says "File not
/// found."), and serves it again once it is back (the same script: PHP's
/// opcache may still hold the old one for a moment).
#[test]
fn a_removed_script_is_404_at_once() {
    let s = setup(1, "", "");
    for _ in 0..3 {
        assert_eq!(get(s.tern.addr, "/hello.php", "").body, b"hello");
    }
    std::fs::remove_file(s.site.root.join("hello.php")).unwrap();
    let r = get(s.tern.addr, "/hello.php", "");
    assert_eq!(r.status, 404);
    assert!(!String::from_utf8_lossy(&r.body).contains("File not found"), "php-fpm was asked");
    std::fs::write(s.site.root.join("hello.php"), "<?php echo 'hello';").unwrap();
    let r = get(s.tern.addr, "/hello.php", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
}

#[test]
fn recycled_children_and_a_killed_php_fpm() {
    let mut s = setup(2, "pm.max_requests = 10", "max_connections = 2\nconnect_timeout = \"5s\"");
    // php-fpm closes each child's connection after 10 requests, so 2,000
    // requests take at least 200 connections: each close is seen before
    // the connection is used again, or met by one retry on a fresh
    // connection, never a failure.
    let failures = hammer(s.tern.addr, "/hello.php", 4, 2000);
    assert!(failures.is_empty(), "{} failures: {:?}", failures.len(), &failures[..failures.len().min(5)]);
    let php = &s.tern.status()["fastcgi"]["backends"]["php"];
    assert_eq!(php["502"], 0, "{php}");
    assert!(php["connects"].as_u64().unwrap() >= 200, "{php}");

    // Killed: 502 at once (not after the 5 s connect timeout), and again
    // served when it is back.
    s.fpm.kill();
    let start = Instant::now();
    let r = get(s.tern.addr, "/hello.php", "");
    assert_eq!(r.status, 502);
    assert!(start.elapsed() < Duration::from_millis(2500), "502 took {:?}", start.elapsed());
    assert_eq!(get(s.tern.addr, "/small.txt", "").body, s.site.small, "static files unaffected");
    s.fpm.launch();
    let r = get(s.tern.addr, "/hello.php", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
}

/// php-fpm reads nothing from its connection while a script runs, so an
/// `FCGI_ABORT_REQUEST` would wait unread until the script ended; closing
/// the connection stops the script at its next output (EPIPE). With one
/// child and a pool of one, the next request is served at once only if the
/// aborted script was stopped.
#[test]
fn a_client_gone_mid_script_frees_the_php_child() {
    let s = setup(1, "", "max_connections = 1\nqueue_timeout = \"20s\"");
    let mut sock = TcpStream::connect(s.tern.addr).unwrap();
    sock.write_all(b"GET /ticks.php HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = [0u8; 256];
    let n = sock.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"), "{:?}", &first[..n]);
    drop(sock);
    // The script would tick for 30 s more.
    let start = Instant::now();
    let r = get(s.tern.addr, "/hello.php", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    assert!(start.elapsed() < Duration::from_secs(8), "the child was held {:?}", start.elapsed());
}

/// A listener that accepts and never answers.
#[test]
fn a_silent_backend_times_out_while_static_files_flow() {
    let site = common::site();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::write(site.root.join("x.php"), "<?php").unwrap();
    let config = format!(
        "[fastcgi.backends.silent]\naddress = \"unix:{}\"\nextensions = [\".php\"]\nread_timeout = \"3s\"\n",
        sock.display()
    );
    let tern = Tern::start(&site.root, "sendfile", &config, &["--workers", "1"]);
    let addr = tern.addr;
    let slow = std::thread::spawn(move || {
        let start = Instant::now();
        (get(addr, "/x.php", "").status, start.elapsed())
    });
    // Meanwhile the (only) worker serves static files, each well within
    // the 3 s the backend is waited for.
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..20 {
        let start = Instant::now();
        assert_eq!(get(addr, "/small.txt", "").body, site.small);
        assert!(start.elapsed() < Duration::from_millis(1500), "static file took {:?}", start.elapsed());
    }
    let (status, took) = slow.join().unwrap();
    assert_eq!(status, 504);
    assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(8), "504 after {took:?}");
    let v = tern.status();
    assert_eq!(v["fastcgi"]["backends"]["silent"]["504"], 1, "{v}");
    drop(listener);
}

#[test]
fn past_the_cap_requests_wait_then_get_503() {
    let s = setup(2, "", "max_connections = 1\nqueue_timeout = \"1s\"");
    let addr = s.tern.addr;
    let slow = std::thread::spawn(move || get(addr, "/slow.php", "").status);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let r = get(addr, "/hello.php", "");
    assert_eq!(r.status, 503);
    assert!(start.elapsed() >= Duration::from_secs(1), "503 after {:?}", start.elapsed());
    assert_eq!(s.fpm.connections(), 1, "never a connection past the cap");
    assert_eq!(slow.join().unwrap(), 200);
    assert_eq!(get(addr, "/hello.php", "").body, b"hello");
}

/// The bundled demo site's PHP page, as site/tern.toml configures it (with
/// php-fpm's socket moved into a scratch directory).
#[test]
fn the_demo_site_runs_its_php_page() {
    let site = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../site");
    let dir = tempfile::tempdir().unwrap();
    let fpm = PhpFpm::start(dir.path(), 1, "");
    let config = std::fs::read_to_string(site.join("tern.toml"))
        .unwrap()
        .replace("access = \"-\"", "access = \"off\"")
        .replace("unix:/tmp/tern-demo-php-fpm.sock", &format!("unix:{}", fpm.socket.display()));
    assert!(config.contains(&fpm.socket.display().to_string()), "site/tern.toml names the demo's php-fpm socket");
    let tern = Tern::start(&site, "sendfile", &config, &[]);
    let r = get(tern.addr, "/php/index.php", "");
    let page = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 200, "{page}");
    assert!(page.contains("<h1>PHP through FastCGI</h1>") && page.contains("/php/index.php"), "{page}");
    let form = "name=Ada";
    let r = request(
        tern.addr,
        &format!(
            "POST /php/index.php/form?from=demo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    );
    let page = String::from_utf8_lossy(&r.body);
    assert!(page.contains("Hello, Ada!") && page.contains("<code>/form</code>"), "{page}");
}

/// A backend over TCP: a non-blocking connect completed through the
/// engine; a refused port is 502 at once.
#[test]
fn a_tcp_backend() {
    let site = common::site();
    std::fs::write(site.root.join("hello.php"), "<?php echo 'hello over tcp';").unwrap();
    let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, refused) = (free_port(), free_port());
    let _fpm = PhpFpm::start_on(site.dir.path(), Some(port), 1, "");
    let config = format!(
        "[fastcgi.backends.tcp]\naddress = \"127.0.0.1:{port}\"\nextensions = [\".php\"]\n\
         [fastcgi.backends.zdown]\naddress = \"127.0.0.1:{refused}\"\nprefixes = [\"/down\"]\ncheck_file = false\n"
    );
    let tern = Tern::start(&site.root, "sendfile", &config, &[]);
    for _ in 0..3 {
        let r = get(tern.addr, "/hello.php", "");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello over tcp"[..]));
    }
    let start = Instant::now();
    assert_eq!(get(tern.addr, "/down/x", "").status, 502);
    assert!(start.elapsed() < Duration::from_millis(1500), "502 took {:?}", start.elapsed());
    let v = tern.status();
    assert_eq!(v["fastcgi"]["backends"]["tcp"]["connects"], 1, "{v}");
    assert_eq!(v["fastcgi"]["backends"]["zdown"]["502"], 1, "{v}");
}

/// A reload that resizes the backend's pool while the replaced server
/// lingers for a slow download: each of the old pool's idle kept-alive
/// connections holds a php-fpm child (a child serves one connection at a
/// time), so with the pool as large as php-fpm's children the new server's
/// PHP requests waited, unanswered, for as long as the old server lived
/// (found by `bench/soak.sh`). A replaced server closes those of a pool its
/// successor did not take over.
#[test]
fn a_reload_frees_the_php_children_the_replaced_server_kept() {
    let s = setup(2, "", "max_connections = 2\nread_timeout = \"4s\"");
    let failures = hammer(s.tern.addr, "/hello.php", 4, 200);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(s.fpm.connections(), 2, "both pooled connections kept alive");
    // A download its client does not read keeps the replaced server alive.
    std::fs::write(s.site.root.join("huge.bin"), vec![b'h'; 32 << 20]).unwrap();
    let mut slow = TcpStream::connect(s.tern.addr).unwrap();
    slow.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let config = std::fs::read_to_string(s.tern.config_path()).unwrap();
    std::fs::write(s.tern.config_path(), config.replace("max_connections = 2", "max_connections = 1")).unwrap();
    reload(&s.tern);
    for _ in 0..3 {
        let start = Instant::now();
        let r = get(s.tern.addr, "/hello.php", "");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "after {:?}", start.elapsed());
    }
    drop(slow);
}

/// SIGHUP, and waits until the new server runs.
fn reload(tern: &Tern) {
    unsafe { libc::kill(tern.pid(), libc::SIGHUP) };
    let start = Instant::now();
    while !tern.stderr.lock().unwrap().contains("configuration reloaded") {
        assert!(start.elapsed() < Duration::from_secs(10), "no reload");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A request the replaced server still answers (its body was arriving
/// as the reload came) shares the backend's connections with the new
/// server: with a pool of its own it opened a connection php-fpm had no
/// child for — the new server's pool kept them all — and waited in
/// php-fpm's backlog until `read_timeout` (found by `bench/soak.sh`: PHP
/// requests sent as a reload came hung to the client's timeout).
#[test]
fn a_request_the_replaced_server_answers_shares_the_php_children_with_the_new_one() {
    let s = setup(2, "", "max_connections = 2\nread_timeout = \"20s\"");
    let failures = hammer(s.tern.addr, "/hello.php", 4, 200);
    assert!(failures.is_empty(), "{failures:?}");
    let mut old = TcpStream::connect(s.tern.addr).unwrap();
    old.write_all(b"POST /echo.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 6\r\n\r\nabc")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    reload(&s.tern);
    // The new server's requests, kept alive, hold both php-fpm children.
    let failures = hammer(s.tern.addr, "/hello.php", 2, 20);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(s.fpm.connections(), 2, "both children's connections kept alive");
    let start = Instant::now();
    old.write_all(b"def").unwrap();
    old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = parse_responses(&common::read_until_close(&mut old), &[false]);
    assert!(r.len() == 1 && start.elapsed() < Duration::from_secs(3), "answered {r:?} after {:?}", start.elapsed());
    assert_eq!((r[0].status, r[0].header("x-length"), r[0].body.as_slice()), (200, Some("6"), &b"abcdef"[..]));
    assert_eq!(s.fpm.connections(), 2, "still at most the pool's size");
}
