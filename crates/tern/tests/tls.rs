//! HTTPS end to end: certificates made here (rcgen), real clients (curl,
//! `openssl s_client`, raw sockets) against the real server.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::tls::{https_addr, listening, section, Ca};
use common::{io_methods, Tern};

/// `curl --cacert CA https://localhost:PORT/PATH` (resolved to `addr`),
/// with extra arguments; returns the output.
fn curl(ca: &Path, addr: SocketAddr, path: &str, extra: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "30", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("localhost:{}:127.0.0.1", addr.port())])
        .args(extra)
        .arg(format!("https://localhost:{}{path}", addr.port()))
        .output()
        .expect("curl")
}

/// `openssl s_client` to `addr` with `args`, stdin `input`; stdin stays
/// open until an HTTP answer arrives (and the TLS 1.3 tickets before it),
/// or briefly when there is no input.
fn s_client(addr: SocketAddr, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if common::find(&all, b"HTTP/1.1 ").is_some() {
                let _ = tx.send(());
            }
        }
        all
    });
    let wait = if input.is_empty() { Duration::from_millis(300) } else { Duration::from_secs(15) };
    let _ = rx.recv_timeout(wait);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = reader.join().unwrap();
    format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&out.stderr))
}

fn pki(dir: &Path) -> (Ca, std::path::PathBuf, String) {
    let ca = Ca::new("tern test CA");
    let (cert, key, _) = ca.leaf(dir, "site", &["localhost"]);
    let ca_path = ca.write(dir, "test");
    (ca, ca_path, section(&cert, &key))
}

#[test]
fn curl_gets_byte_exact_bodies_ranges_and_compression_for_every_io_method() {
    let site = common::site();
    let text = "tern over TLS, compressible line\n".repeat(2000);
    std::fs::write(site.root.join("page.html"), &text).unwrap();
    let (_ca, ca_path, tls) = pki(site.dir.path());
    let config = format!("{tls}hsts = \"max-age=600\"\n");
    let out = site.dir.path().join("out");
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, &config, &[]);
        let addr = https_addr(&tern);
        for (path, want) in [("/small.txt", &site.small), ("/big.bin", &site.big)] {
            let got = curl(&ca_path, addr, path, &["-o", out.to_str().unwrap(), "-w", "%{http_code}"]);
            assert_eq!(
                String::from_utf8_lossy(&got.stdout),
                "200",
                "{io} {path}: {}",
                String::from_utf8_lossy(&got.stderr)
            );
            assert!(std::fs::read(&out).unwrap() == *want, "{io} {path}: body differs");
        }
        let got = curl(
            &ca_path,
            addr,
            "/big.bin",
            &["-r", "1000-2000999", "-o", out.to_str().unwrap(), "-w", "%{http_code}"],
        );
        assert_eq!(String::from_utf8_lossy(&got.stdout), "206", "{io}");
        assert!(std::fs::read(&out).unwrap() == site.big[1000..2001000], "{io}: range differs");
        let got = curl(&ca_path, addr, "/page.html", &["--compressed", "-D", "-", "-o", out.to_str().unwrap()]);
        let head = String::from_utf8_lossy(&got.stdout).to_ascii_lowercase();
        assert!(head.contains("content-encoding: "), "{io}: not compressed: {head}");
        assert!(head.contains("strict-transport-security: max-age=600\r\n"), "{io}: {head}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), text, "{io}: decompressed body differs");
        // Keep-alive: the second request on the first one's connection.
        let first = format!("https://localhost:{}/big.bin", addr.port());
        let w = ["-w", "%{http_code}:%{num_connects} "];
        let got =
            curl(&ca_path, addr, "/small.txt", &["-o", "/dev/null", &first, "-o", out.to_str().unwrap(), w[0], w[1]]);
        assert_eq!(String::from_utf8_lossy(&got.stdout), "200:1 200:0 ", "{io}");
        assert!(std::fs::read(&out).unwrap() == site.small, "{io}: kept-alive body differs");
    }
}

#[test]
fn tls_1_2_and_1_3_are_served_and_1_0_and_1_1_refused() {
    let site = common::site();
    let (_ca, _ca_path, tls) = pki(site.dir.path());
    let tern = Tern::start(&site.root, "sendfile", &tls, &[]);
    let addr = https_addr(&tern);
    let request = b"GET /small.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    for (flag, name) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let out = s_client(addr, &[flag, "-servername", "localhost", "-alpn", "http/1.1"], request);
        assert!(
            out.contains(&format!("Protocol: {name}")) || out.contains(&format!("Protocol  : {name}")),
            "{flag}: {out}"
        );
        assert!(out.contains("ALPN protocol: http/1.1"), "{flag}: {out}");
        assert!(out.contains("HTTP/1.1 200 OK"), "{flag}: {out}");
    }
    for flag in ["-tls1", "-tls1_1"] {
        // The client is allowed the old versions; the server refuses them.
        let out = s_client(addr, &[flag, "-cipher", "DEFAULT@SECLEVEL=0", "-servername", "localhost"], request);
        assert!(!out.contains("HTTP/1.1 200"), "{flag}: {out}");
        // rustls answers an old ClientHello with a handshake_failure alert.
        assert!(out.contains("Cipher is (NONE)") && out.contains("alert handshake failure"), "{flag}: {out}");
    }
}

/// Whether this CPU has AES and carry-less multiply instructions (what
/// the server checks to put AES-GCM before ChaCha20).
fn aes_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq");
    #[cfg(target_arch = "aarch64")]
    return std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull");
    #[allow(unreachable_code)]
    false
}

#[test]
fn the_server_picks_the_cipher_suite_in_its_order_not_the_clients() {
    let site = common::site();
    let (_ca, _ca_path, tls) = pki(site.dir.path());
    let tern = Tern::start(&site.root, "sendfile", &tls, &[]);
    let addr = https_addr(&tern);
    let aes = aes_hardware();
    // (client's flags, its suites in its order, the suite the server picks)
    let cases = [
        ("-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
        (
            "-tls1_3",
            "-ciphersuites",
            "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256",
            if aes { "TLS_AES_128_GCM_SHA256" } else { "TLS_CHACHA20_POLY1305_SHA256" },
        ),
        (
            "-tls1_2",
            "-cipher",
            "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256",
            if aes { "ECDHE-ECDSA-AES128-GCM-SHA256" } else { "ECDHE-ECDSA-CHACHA20-POLY1305" },
        ),
    ];
    for (version, option, offered, picked) in cases {
        let out = s_client(addr, &[version, option, offered, "-servername", "localhost"], b"");
        assert!(out.contains(&format!("Cipher is {picked}\n")), "{version} {offered}: {out}");
    }
}

#[test]
fn sni_picks_the_certificate_for_the_name_and_the_first_otherwise() {
    let site = common::site();
    let dir = site.dir.path();
    let ca = Ca::new("tern test CA");
    let (cert_a, key_a, pem_a) = ca.leaf(dir, "a", &["a.test"]);
    let (cert_b, key_b, pem_b) = ca.leaf(dir, "b", &["b.test", "*.b.test"]);
    let config = format!(
        "{}certificates = [{{ cert = \"{}\", key = \"{}\", names = [\"a.test\"] }}, {{ cert = \"{}\", key = \"{}\", names = [\"b.test\", \"*.b.test\"] }}]\n",
        "[tls]\nlisten = [\"127.0.0.1:0\"]\n",
        cert_a.display(),
        key_a.display(),
        cert_b.display(),
        key_b.display()
    );
    let tern = Tern::start(&site.root, "sendfile", &config, &[]);
    let addr = https_addr(&tern);
    let leaf = |pem: &str| pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
    for (name, want, other) in [
        ("a.test", &pem_a, &pem_b),
        ("b.test", &pem_b, &pem_a),
        ("www.b.test", &pem_b, &pem_a),
        ("c.test", &pem_a, &pem_b),
    ] {
        let out = s_client(addr, &["-servername", name, "-showcerts"], b"");
        let shown: String = out.lines().filter(|l| !l.starts_with("-----")).collect();
        assert!(shown.contains(&leaf(want)), "{name}: expected its certificate:\n{out}");
        assert!(!shown.contains(&leaf(other)), "{name}: the other certificate:\n{out}");
    }
}

#[test]
fn sessions_resume_with_the_cache_and_with_tickets() {
    let site = common::site();
    let (_ca, _ca_path, tls) = pki(site.dir.path());
    let tern = Tern::start(&site.root, "sendfile", &tls, &[]);
    let addr = https_addr(&tern);
    // TLS 1.2: session IDs (the cache shared by the workers) and tickets.
    let out = s_client(addr, &["-tls1_2", "-reconnect", "-servername", "localhost"], b"");
    assert!(out.matches("Reused, TLSv1.2").count() >= 5, "TLS 1.2 resumption: {out}");
    // TLS 1.3: a ticket saved by one client process, used by the next.
    let sess = site.dir.path().join("sess.pem");
    let request = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let first = s_client(addr, &["-tls1_3", "-sess_out", sess.to_str().unwrap(), "-servername", "localhost"], request);
    assert!(first.contains("New, TLSv1.3"), "{first}");
    let second = s_client(addr, &["-tls1_3", "-sess_in", sess.to_str().unwrap(), "-servername", "localhost"], request);
    assert!(second.contains("Reused, TLSv1.3"), "TLS 1.3 ticket not accepted: {second}");
    assert!(second.contains("HTTP/1.1 200 OK"), "{second}");
    // The status page counts both kinds.
    let status = common::get(tern.addr, "/_tern/status", "");
    let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    let tls = &json["tls"];
    assert!(tls["handshakes"]["resumed"].as_u64().unwrap() >= 6, "{tls}");
    assert!(tls["handshakes"]["full"].as_u64().unwrap() >= 2, "{tls}");
    assert!(tls["versions"]["TLSv1.3"].as_u64().unwrap() >= 2, "{tls}");
    assert!(tls["ktls"].as_str().unwrap().starts_with(if kernel_tls() { "offered" } else { "not available" }), "{tls}");
}

#[test]
fn each_handshake_sends_the_configured_number_of_tickets() {
    let site = common::site();
    let (_ca, _ca_path, tls) = pki(site.dir.path());
    let request = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    for (setting, per_handshake) in [("", 1), ("tickets_per_handshake = 2\n", 2)] {
        let tern = Tern::start(&site.root, "sendfile", &format!("{tls}{setting}"), &[]);
        let addr = https_addr(&tern);
        let sess = site.dir.path().join(format!("sess-{per_handshake}.pem"));
        let sess = sess.to_str().unwrap();
        let tickets =
            |out: &str| out.lines().filter(|l| l.starts_with("<<<") && l.ends_with("NewSessionTicket")).count();
        let full = s_client(addr, &["-tls1_3", "-msg", "-sess_out", sess, "-servername", "localhost"], request);
        assert!(full.contains("New, TLSv1.3") && full.contains("HTTP/1.1 200 OK"), "{full}");
        assert_eq!(tickets(&full), per_handshake, "{setting:?}, full handshake: {full}");
        let resumed = s_client(addr, &["-tls1_3", "-msg", "-sess_in", sess, "-servername", "localhost"], request);
        assert!(resumed.contains("Reused, TLSv1.3") && resumed.contains("HTTP/1.1 200 OK"), "{resumed}");
        assert_eq!(tickets(&resumed), per_handshake, "{setting:?}, resumed handshake: {resumed}");
    }
}

fn kernel_tls() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|s| s.split_whitespace().any(|u| u == "tls"))
}

#[test]
fn plain_http_to_the_https_port_gets_a_clear_400_and_a_close() {
    let site = common::site();
    let (_ca, _ca_path, tls) = pki(site.dir.path());
    let tern = Tern::start(&site.root, "sendfile", &tls, &[]);
    let addr = https_addr(&tern);
    let (answer, closed) =
        common::exchange_until_close(addr, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", Duration::from_secs(5));
    assert!(closed, "connection left open");
    assert_eq!(
        String::from_utf8_lossy(&answer),
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 51\r\nConnection: close\r\n\r\nThe plain HTTP request was sent to an HTTPS port.\r\n"
    );
    let status = common::get(tern.addr, "/_tern/status", "");
    let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    assert_eq!(json["tls"]["handshakes"]["failed"], 1, "{}", json["tls"]);
}

#[test]
fn handshake_slowloris_is_cut_off_while_others_are_served() {
    let site = common::site();
    let (_ca, ca_path, tls) = pki(site.dir.path());
    let config = format!("[timeouts]\nheader = \"1s\"\nheader_min_rate = 100\n{tls}");
    let tern = Tern::start(&site.root, "sendfile", &config, &[]);
    let addr = https_addr(&tern);
    // Each sends the first bytes of a ClientHello record and stops.
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&[0x16, 0x03, 0x01, 0x02]).unwrap();
            s
        })
        .collect();
    let out = site.dir.path().join("out");
    let got = curl(&ca_path, addr, "/small.txt", &["-o", out.to_str().unwrap(), "-w", "%{http_code}"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout), "200");
    let start = Instant::now();
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut buf = [0u8; 64];
        // Closed (EOF or reset) within the header time and a tick or two.
        match s.read(&mut buf) {
            Ok(0) | Err(_) if start.elapsed() < Duration::from_secs(12) => {}
            other => panic!("slow handshake not cut off: {other:?} after {:?}", start.elapsed()),
        }
    }
    let status = common::get(tern.addr, "/_tern/status", "");
    let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    assert!(json["timeouts"]["header"].as_u64().unwrap() >= 20, "{json}");
    assert!(json["tls"]["handshakes"]["failed"].as_u64().unwrap() >= 20, "{}", json["tls"]);
}

#[test]
fn redirect_listener_sends_308_to_https_and_plain_http_has_no_hsts() {
    let site = common::site();
    let (_ca, _ca_path, tls) = pki(site.dir.path());
    let config = format!("{tls}redirect = [\"127.0.0.1:0\"]\nhsts = \"max-age=600\"\n");
    let tern = Tern::start(&site.root, "sendfile", &config, &[]);
    let https = https_addr(&tern);
    let redirect = listening(&tern, "http", "redirecting");
    let r = common::get(redirect, "/sub/x?y=1", "");
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some(format!("https://localhost:{}/sub/x?y=1", https.port()).as_str()));
    let r = common::get(tern.addr, "/small.txt", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("strict-transport-security"), None);
}

#[test]
fn reload_takes_a_new_certificate_under_load_and_keeps_it_when_the_next_key_is_wrong() {
    let site = common::site();
    let dir = site.dir.path();
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    let (cert, key, old_pem) = old_ca.leaf(dir, "site", &["localhost"]);
    let bundle = dir.join("both.pem");
    std::fs::write(&bundle, format!("{}{}", old_ca.pem(), new_ca.pem())).unwrap();
    let mut tern = Tern::start(&site.root, "sendfile", &section(&cert, &key), &[]);
    let addr = https_addr(&tern);
    // Load: curl fetching over fresh and kept-alive connections, in a loop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, bundle) = (stop.clone(), bundle.clone());
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            let mut done = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let again = format!("https://localhost:{}/small.txt", addr.port());
                let args = ["-o", "/dev/null", &again, "-o", "/dev/null", "-w", "%{http_code} "];
                let got = curl(&bundle, addr, "/small.txt", &args);
                let codes = String::from_utf8_lossy(&got.stdout).to_string();
                if !got.status.success() || codes != "200 200 " {
                    failures.push(format!("{codes:?} {}", String::from_utf8_lossy(&got.stderr)));
                }
                done += 1;
            }
            (done, failures)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let (_, _, new_pem) = new_ca.leaf(dir, "site", &["localhost"]);
    unsafe { libc::kill(tern.pid(), libc::SIGHUP) };
    wait_for(&tern, "configuration reloaded", 1);
    std::thread::sleep(Duration::from_millis(500));
    let leaf = |pem: &str| pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
    let shown = |out: String| out.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
    let out = shown(s_client(addr, &["-servername", "localhost", "-showcerts"], b""));
    assert!(out.contains(&leaf(&new_pem)) && !out.contains(&leaf(&old_pem)), "new certificate not served: {out}");
    // A key that does not go with the certificate: the reload fails, and
    // says why; the running server keeps its certificate.
    std::fs::write(&key, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
    unsafe { libc::kill(tern.pid(), libc::SIGHUP) };
    wait_for(&tern, "reload failed", 1);
    let log = tern.stderr.lock().unwrap().clone();
    assert!(log.contains("does not go with"), "{log}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (done, failures) = load.join().unwrap();
    assert!(failures.is_empty(), "{} of {done} requests failed: {failures:#?}", failures.len());
    assert!(done >= 3, "only {done} requests");
    let out = shown(s_client(addr, &["-servername", "localhost", "-showcerts"], b""));
    assert!(out.contains(&leaf(&new_pem)), "certificate lost after a failed reload: {out}");
    assert!(tern.alive());
    let _ = tern.terminate(Duration::from_secs(10));
}

/// Waits until the server's log holds `needle` `count` times.
fn wait_for(tern: &Tern, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tern.stderr.lock().unwrap().matches(needle).count() < count {
        assert!(Instant::now() < deadline, "no {needle:?} in:\n{}", tern.stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tern bench https://…`: every request answered, and the server's
/// handshake counters show keep-alive (one handshake per connection),
/// `--no-keepalive` with resumption (resumed after each connection's first)
/// and `--no-resumption` (a full handshake per request).
#[test]
fn tern_bench_speaks_https_with_and_without_keepalive_and_resumption() {
    let site = common::site();
    let (_ca, ca_path, tls) = pki(site.dir.path());
    let tern = Tern::start(&site.root, "sendfile", &tls, &["--workers", "1"]);
    let addr = https_addr(&tern);
    let url = format!("https://localhost:{}/small.txt", addr.port());
    let counters = || {
        let status = common::get(tern.addr, "/_tern/status", "");
        let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
        let h = &json["tls"]["handshakes"];
        (h["full"].as_u64().unwrap(), h["resumed"].as_u64().unwrap(), h["failed"].as_u64().unwrap())
    };
    /// Arguments, requests, and the check of (full, resumed) handshakes.
    type Case<'a> = (&'a [&'a str], u64, fn(u64, u64) -> bool);
    let cases: [Case; 3] = [
        (&["-n", "300", "-c", "4", "-t", "2"], 300, |full, resumed| full >= 1 && full + resumed == 4),
        (&["-n", "100", "-c", "2", "-t", "1", "--no-keepalive"], 100, |full, resumed| {
            full <= 4 && full + resumed == 100
        }),
        (&["-n", "60", "-c", "2", "-t", "1", "--no-keepalive", "--no-resumption"], 60, |full, resumed| {
            full == 60 && resumed == 0
        }),
    ];
    for (args, n, handshakes) in cases {
        let before = counters();
        let out = Command::new(common::tern_bin())
            .arg("bench")
            .arg(&url)
            .args(["--cacert", ca_path.to_str().unwrap(), "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["requests"].as_u64(), Some(n), "{args:?}: {j}");
        assert_eq!(j["status"]["200"].as_u64(), Some(n), "{args:?}");
        assert_eq!(j["body_bytes"].as_u64(), Some(n * site.small.len() as u64), "{args:?}");
        let after = counters();
        let (full, resumed, failed) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
        assert!(handshakes(full, resumed), "{args:?}: {full} full, {resumed} resumed");
        assert_eq!(failed, 0, "{args:?}");
    }
    // Without the CA the certificate is refused; --insecure accepts it.
    let out = Command::new(common::tern_bin()).args(["bench", &url, "-n", "5", "-c", "1", "--json"]).output().unwrap();
    assert!(!out.status.success(), "an unknown CA was trusted");
    let out = Command::new(common::tern_bin())
        .args(["bench", &url, "-n", "5", "-c", "1", "--insecure", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A client's socket that keeps a copy of every byte it reads, so the TLS
/// records the server sent can be told apart by their headers.
struct Recording {
    sock: TcpStream,
    seen: Vec<u8>,
}

impl Read for Recording {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.seen.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Recording {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

type Recorded = rustls::StreamOwned<rustls::ClientConnection, Recording>;

/// A TLS connection to `addr`, its handshake done, whose segments carry at
/// most `mss` bytes (the client's SYN says so) when given.
fn recorded(ca: &Ca, addr: SocketAddr, mss: Option<u32>) -> Recorded {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if let Some(mss) = mss {
        sock.set_tcp_mss(mss).unwrap();
    }
    sock.connect(&addr.into()).unwrap();
    let sock = TcpStream::from(sock);
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let conn = rustls::ClientConnection::new(common::tls::client(ca), "localhost".try_into().unwrap()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, Recording { sock, seen: Vec::new() });
    // The handshake's records come before any response's.
    tls.conn.complete_io(&mut tls.sock).unwrap();
    tls
}

/// GETs `path` (keep-alive) and returns the response (head and body) and
/// the lengths of the records that arrived since the previous response,
/// from their headers (all application data).
fn get_recorded(tls: &mut Recorded, path: &str) -> (Vec<u8>, Vec<usize>) {
    let mark = tls.sock.seen.len();
    tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
    tls.flush().unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Some(end) = common::find(&response, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
            let length: usize =
                head.split("content-length: ").nth(1).and_then(|v| v.lines().next()?.parse().ok()).unwrap();
            if response.len() == end + 4 + length {
                break;
            }
        }
        let n = tls.read(&mut buf).unwrap();
        assert!(n > 0, "{path}: connection closed");
        response.extend_from_slice(&buf[..n]);
    }
    let (mut lengths, mut rest) = (Vec::new(), &tls.sock.seen[mark..]);
    while !rest.is_empty() {
        assert!(rest.len() >= 5 && rest[0] == 23, "{path}: not an application-data record: {:?}", &rest[..5]);
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        lengths.push(len);
        rest = &rest[5 + len..];
    }
    (response, lengths)
}

/// The records that hold the last `bytes` plaintext bytes received (TLS 1.3
/// adds 17 bytes to each: the content type and the tag): what came before
/// them were session tickets.
fn last_records(lengths: &[usize], bytes: usize) -> &[usize] {
    let mut sum = 0;
    for i in (0..lengths.len()).rev() {
        sum += lengths[i] - 17;
        if sum == bytes {
            return &lengths[i..];
        }
    }
    panic!("no records end with exactly {bytes} bytes: {lengths:?}")
}

/// Issue 15: records sized for the path. After an idle moment a response's
/// first ten records each fit one TCP segment of the path (a client starts
/// on each as it arrives), then full 16 KiB records; a busy connection and
/// a path whose segment holds a full record (loopback) get full records
/// only; a small response leaves in one record with its head, whatever the
/// I/O method.
#[test]
fn records_are_sized_for_the_path_small_after_an_idle_moment_then_full() {
    const FULL: usize = 16384 + 17;
    let site = common::site();
    let body = common::pattern(200_000, 5);
    std::fs::write(site.root.join("record.bin"), &body).unwrap();
    let (ca, _ca_path, tls) = pki(site.dir.path());
    let full_after = |records: &[usize], what: &str| {
        let (last, full) = records.split_last().unwrap();
        assert!(full.iter().all(|&l| l == FULL) && *last <= FULL, "{what}: {records:?}");
    };
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, &tls, &[]);
        let addr = https_addr(&tern);
        // Loopback: a segment holds a full record, so there are no small
        // ones, even in the first response (tickets arrive before it).
        let mut conn = recorded(&ca, addr, None);
        let (response, lengths) = get_recorded(&mut conn, "/record.bin");
        assert!(response.ends_with(&body), "{io}: body differs");
        assert_eq!(conn.conn.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
        full_after(last_records(&lengths, response.len()), &format!("{io}: loopback"));
        let (response, lengths) = get_recorded(&mut conn, "/small.txt");
        assert!(response.ends_with(&site.small), "{io}: small body differs");
        assert_eq!(lengths, [response.len() + 17], "{io}: a small response and its head in one record");
        if io != "sendfile" {
            continue;
        }
        // A path of 1200-byte segments.
        let mut conn = recorded(&ca, addr, Some(1200));
        let segment = socket2::SockRef::from(&conn.sock.sock).tcp_mss().unwrap() as usize;
        assert!((1000..=1200).contains(&segment), "{segment}");
        get_recorded(&mut conn, "/small.txt");
        std::thread::sleep(Duration::from_millis(1300));
        let (response, lengths) = get_recorded(&mut conn, "/record.bin");
        assert!(response.ends_with(&body), "after idle: body differs");
        assert_eq!(lengths.iter().map(|l| l - 17).sum::<usize>(), response.len(), "{lengths:?}");
        let (small, rest) = lengths.split_at(10);
        // Each small record's plaintext is a segment less the most a
        // record adds (29 bytes, TLS 1.2's); its 22 bytes of TLS 1.3
        // overhead fit.
        assert!(small.iter().all(|&l| l - 17 == segment - 29), "after idle ({segment}-byte segments): {lengths:?}");
        full_after(rest, "after idle");
        // At once again: not idle, full records only.
        let (response, lengths) = get_recorded(&mut conn, "/record.bin");
        assert!(response.ends_with(&body), "busy: body differs");
        assert_eq!(lengths.iter().map(|l| l - 17).sum::<usize>(), response.len(), "{lengths:?}");
        full_after(&lengths, "busy");
    }
}

/// Over TLS the unsent bound (`limits.unsent_bytes`, 128 KiB) is never
/// raised for a fast reader, as it is over plain HTTP
/// (`slow_clients.rs`): the records queued beyond it would be sent by the
/// client's acknowledgements, on the CPU the client decrypts with. A
/// client that reads 24 MiB at loopback speed and then stops finds no
/// more than the bound (and a round of records) held for it.
#[test]
fn a_fast_tls_reader_keeps_the_unsent_bound() {
    let site = common::site();
    std::fs::File::create(site.root.join("big.bin")).unwrap().set_len(8 << 20).unwrap();
    std::fs::File::create(site.root.join("huge.bin")).unwrap().set_len(256 << 20).unwrap();
    let (ca, _ca_path, tls) = pki(site.dir.path());
    let tern = Tern::start(&site.root, "sendfile", &tls, &[]);
    let addr = https_addr(&tern);
    let mut conn = recorded(&ca, addr, None);
    for _ in 0..3 {
        let (response, _) = get_recorded(&mut conn, "/big.bin");
        assert_eq!(response.len() - common::find(&response, b"\r\n\r\n").unwrap() - 4, 8 << 20);
    }
    assert_eq!(tern.status()["connections"]["fast_readers"].as_u64(), Some(0), "{}", tern.status());
    conn.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    conn.flush().unwrap();
    let mut buf = [0u8; 16 * 1024];
    conn.read_exact(&mut buf).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let local = conn.sock.sock.local_addr().unwrap();
    let queued = common::send_queue(addr, local).expect("the server's socket in /proc/net/tcp");
    assert!(queued <= 256 * 1024, "{queued} bytes held in the kernel for a TLS reader that stopped reading");
}
