//! CGI/1.1 end to end: real programs in sh, Perl, Python and C run by the
//! real server, checked for exact meta-variables, bodies in and out,
//! redirects, status codes, failures, time limits, client aborts, process
//! groups, zombies and descriptors.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use common::{exchange, get, parse_responses, request, statuses, Tern};

/// Meta-variables every env program prints, in order.
const NAMES: &[&str] = &[
    "GATEWAY_INTERFACE",
    "SERVER_PROTOCOL",
    "SERVER_SOFTWARE",
    "REQUEST_METHOD",
    "SCRIPT_NAME",
    "PATH_INFO",
    "PATH_TRANSLATED",
    "QUERY_STRING",
    "CONTENT_LENGTH",
    "CONTENT_TYPE",
    "REMOTE_ADDR",
    "SERVER_NAME",
    "SERVER_PORT",
    "REQUEST_URI",
    "HTTP_X_CUSTOM",
    "HTTP_PROXY",
];

fn write_program(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

struct CgiSite {
    site: common::Site,
    cgi: PathBuf,
    state: PathBuf,
}

/// A document root with a `cgi-bin` full of test programs.
fn cgi_site() -> CgiSite {
    let site = common::site();
    let cgi = site.root.join("cgi-bin");
    let state = site.dir.path().join("state");
    std::fs::create_dir_all(&cgi).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let names = NAMES.join(" ");
    write_program(
        &cgi.join("env.sh"),
        &format!(
            "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nfor n in {names}; do eval \"v=\\${{$n-(unset)}}\"; printf '%s=%s\\n' \"$n\" \"$v\"; done\n"
        ),
    );
    write_program(
        &cgi.join("env.pl"),
        &format!(
            "print \"Content-Type: text/plain\\r\\n\\r\\n\";\nfor my $n (qw({names})) {{ print \"$n=\" . ($ENV{{$n}} // '(unset)') . \"\\n\"; }}\n"
        ),
    );
    write_program(
        &cgi.join("env.py"),
        &format!(
            "import os, sys\nsys.stdout.write('Content-Type: text/plain\\n\\n')\nfor n in '{names}'.split():\n    sys.stdout.write(n + '=' + os.environ.get(n, '(unset)') + '\\n')\n"
        ),
    );
    let c_src = site.dir.path().join("env.c");
    let list: Vec<String> = NAMES.iter().map(|n| format!("\"{n}\"")).collect();
    std::fs::write(
        &c_src,
        format!(
            "#include <stdio.h>\n#include <stdlib.h>\nstatic const char *n[] = {{{}, 0}};\nint main(void) {{\n  fputs(\"Content-Type: text/plain\\r\\n\\r\\n\", stdout);\n  for (int i = 0; n[i]; i++) {{ const char *v = getenv(n[i]); printf(\"%s=%s\\n\", n[i], v ? v : \"(unset)\"); }}\n  return 0;\n}}\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let built = Command::new("cc").arg("-O2").arg("-o").arg(cgi.join("env.cgi")).arg(&c_src).status().unwrap();
    assert!(built.success(), "cc env.c");
    write_program(&cgi.join("echo.sh"), "#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\n\\n'\nexec cat\n");
    write_program(&cgi.join("printenv.sh"), "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nenv\n");
    write_program(&cgi.join("local.sh"), "#!/bin/sh\nprintf 'Location: /small.txt\\n\\n'\n");
    write_program(&cgi.join("loop.sh"), "#!/bin/sh\nprintf 'Location: /cgi-bin/loop.sh\\n\\n'\n");
    write_program(&cgi.join("client.sh"), "#!/bin/sh\nprintf 'Location: http://example.com/elsewhere\\n\\n'\n");
    write_program(
        &cgi.join("teapot.sh"),
        "#!/bin/sh\nprintf 'Status: 418 I am a teapot\\nContent-Type: text/plain\\nX-Extra: 1\\n\\nshort and stout'\n",
    );
    write_program(
        &cgi.join("length.sh"),
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\nContent-Length: 5\\n\\nhello, and more'\n",
    );
    write_program(
        &cgi.join("big.sh"),
        "#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\n\\n'\nyes 0123456789abcdef | head -c 52428800\n",
    );
    write_program(&cgi.join("crash.sh"), "#!/bin/sh\nkill -SEGV $$\n");
    write_program(&cgi.join("garbage.sh"), "#!/bin/sh\nprintf 'this is not a header\\n\\nbody'\n");
    write_program(&cgi.join("silent.sh"), "#!/bin/sh\nexit 0\n");
    write_program(&cgi.join("badstatus.sh"), "#!/bin/sh\nprintf 'Status: 9999 nope\\n\\n'\n");
    write_program(
        &cgi.join("nph-raw.sh"),
        "#!/bin/sh\nprintf 'HTTP/1.1 299 Custom\\r\\nX-Raw: yes\\r\\n\\r\\nraw body'\n",
    );
    write_program(
        &cgi.join("stderr.sh"),
        "#!/bin/sh\necho 'a message for the error log' >&2\nprintf 'Content-Type: text/plain\\n\\nok'\n",
    );
    // Starts a grandchild, records both pids, then hangs or streams.
    let spawn = format!("sleep 300 & echo $! > {st}/$1.child; echo $$ > {st}/$1.pid", st = state.display());
    write_program(&cgi.join("hang.sh"), &format!("#!/bin/sh\nset -- hang\n{spawn}\nsleep 300\n"));
    write_program(
        &cgi.join("stream.sh"),
        &format!("#!/bin/sh\nset -- stream\n{spawn}\nprintf 'Content-Type: text/plain\\n\\n'\nwhile :; do echo line; sleep 0.05; done\n"),
    );
    write_program(&cgi.join("slow.sh"), "#!/bin/sh\nsleep 2\nprintf 'Content-Type: text/plain\\n\\nslow'\n");
    write_program(&cgi.join("notexec.cgi"), "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(cgi.join("notexec.cgi"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(site.root.join("script.cgi"), "not executable\n").unwrap();
    CgiSite { site, cgi, state }
}

/// Starts tern on the CGI site; `cgi` holds extra `[cgi]` lines (the time
/// limit is 2 s unless they set one).
fn start(cs: &CgiSite, cgi: &str) -> Tern {
    let timeout = if cgi.contains("timeout") { "" } else { "timeout = \"2s\"\n" };
    Tern::start(&cs.site.root, "sendfile", &format!("[limits]\nmax_body_bytes = \"2MiB\"\n[cgi]\n{timeout}{cgi}"), &[])
}

fn env_map(body: &[u8]) -> Vec<(String, String)> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    // A zombie still has a pid: count it as gone only once reaped (it is not
    // our child, so check its state).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pids: &[i32], limit: Duration) {
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(start.elapsed() < limit, "processes {pids:?} still alive");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn meta_variables_are_exact_for_every_language() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let root = std::fs::canonicalize(&cs.site.root).unwrap().display().to_string();
    let port = tern.addr.port().to_string();
    // (target, SCRIPT_NAME suffix after /cgi-bin/env.EXT, PATH_INFO, QUERY_STRING)
    let cases: &[(&str, &str, &str)] = &[
        ("", "(unset)", ""),
        ("/", "(unset)", ""),
        ("/path/info", "/path/info", ""),
        ("/a%20b/c%2Fd?x=1&y=%20", "/a b/c/d", "x=1&y=%20"),
        ("?", "(unset)", ""),
        ("/dir/?q=%E2%9C%93", "/dir/", "q=%E2%9C%93"),
    ];
    for ext in ["sh", "pl", "py", "cgi"] {
        for (suffix, path_info, query) in cases {
            let target = format!("/cgi-bin/env.{ext}{suffix}");
            for (method, body) in [("GET", ""), ("POST", "k=v")] {
                let raw = format!(
                    "{method} {target} HTTP/1.1\r\nHost: www.example.com:8080\r\nX-Custom: one\r\nX-Custom: two\r\nProxy: http://evil.example/\r\n{}Connection: close\r\n\r\n{body}",
                    if body.is_empty() { String::new() } else { format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n", body.len()) }
                );
                let r = request(tern.addr, &raw);
                assert_eq!(r.status, 200, "{method} {target}");
                let env = env_map(&r.body);
                let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).unwrap();
                let translated =
                    if *path_info == "(unset)" { "(unset)".to_string() } else { format!("{root}{path_info}") };
                let expect: Vec<(&str, String)> = vec![
                    ("GATEWAY_INTERFACE", "CGI/1.1".into()),
                    ("SERVER_PROTOCOL", "HTTP/1.1".into()),
                    ("SERVER_SOFTWARE", format!("tern/{}", env!("CARGO_PKG_VERSION"))),
                    ("REQUEST_METHOD", method.to_string()),
                    ("SCRIPT_NAME", format!("/cgi-bin/env.{ext}")),
                    ("PATH_INFO", path_info.to_string()),
                    ("PATH_TRANSLATED", translated),
                    ("QUERY_STRING", query.to_string()),
                    ("CONTENT_LENGTH", if body.is_empty() { "(unset)".into() } else { body.len().to_string() }),
                    (
                        "CONTENT_TYPE",
                        if body.is_empty() { "(unset)".into() } else { "application/x-www-form-urlencoded".into() },
                    ),
                    ("REMOTE_ADDR", "127.0.0.1".into()),
                    ("SERVER_NAME", "www.example.com".into()),
                    ("SERVER_PORT", port.clone()),
                    ("REQUEST_URI", target.clone()),
                    ("HTTP_X_CUSTOM", "one, two".into()),
                    ("HTTP_PROXY", "(unset)".into()),
                ];
                for (k, v) in &expect {
                    assert_eq!(get(k), v, "{k} for {method} {target}");
                }
            }
        }
    }
    // HTTP/1.0 is reported as such.
    let r = request(tern.addr, "GET /cgi-bin/env.sh HTTP/1.0\r\n\r\n");
    assert!(String::from_utf8_lossy(&r.body).contains("SERVER_PROTOCOL=HTTP/1.0\n"));
}

#[test]
fn httpoxy_never_reaches_the_environment() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    for header in ["Proxy: http://evil.example:8080/", "proxy: x", "PROXY: y"] {
        let r = get(tern.addr, "/cgi-bin/printenv.sh", &format!("{header}\r\n"));
        let text = String::from_utf8(r.body).unwrap();
        assert!(text.lines().any(|l| l.starts_with("GATEWAY_INTERFACE=")));
        assert!(!text.contains("HTTP_PROXY"), "{header} became HTTP_PROXY:\n{text}");
        assert!(!text.contains("evil"));
    }
    // Names with underscores would collide with the dash spelling: dropped.
    let r = get(tern.addr, "/cgi-bin/printenv.sh", "X_Custom: sneaky\r\nAuthorization: Basic c2VjcmV0\r\n");
    let text = String::from_utf8(r.body).unwrap();
    assert!(!text.contains("sneaky") && !text.contains("c2VjcmV0"), "{text}");
}

#[test]
fn request_bodies_reach_the_program() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let mib = common::pattern(1 << 20, 3);
    for body in [Vec::new(), b"x".to_vec(), mib.clone()] {
        let mut raw = format!(
            "POST /cgi-bin/echo.sh HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend_from_slice(&body);
        let out = exchange(tern.addr, &raw, Duration::from_secs(10));
        let r = &parse_responses(&out, &[])[0];
        assert_eq!(r.status, 200);
        assert!(r.body == body, "echoed {} bytes for {}", r.body.len(), body.len());
    }
    // Chunked request bodies are de-chunked.
    let mut raw =
        b"POST /cgi-bin/echo.sh HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for piece in mib.chunks(100_000) {
        raw.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        raw.extend_from_slice(piece);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let out = exchange(tern.addr, &raw, Duration::from_secs(10));
    assert!(parse_responses(&out, &[])[0].body == mib);
    // `Expect: 100-continue` gets its interim answer, then the body is read
    // (curl sends it for large bodies).
    let file = cs.site.dir.path().join("upload.bin");
    std::fs::write(&file, &mib).unwrap();
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-H", "Expect: 100-continue", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .arg(tern.url("/cgi-bin/echo.sh"))
        .output()
        .unwrap();
    assert!(out.stdout == mib, "curl upload echoed {} bytes", out.stdout.len());
}

#[test]
fn output_status_redirects_and_framing() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let r = get(tern.addr, "/cgi-bin/teapot.sh", "");
    assert_eq!((r.status, r.header("x-extra"), r.header("content-type")), (418, Some("1"), Some("text/plain")));
    let r = get(tern.addr, "/cgi-bin/local.sh", "");
    assert_eq!((r.status, r.body.as_slice()), (200, cs.site.small.as_slice()), "local redirect served /small.txt");
    assert_eq!(get(tern.addr, "/cgi-bin/loop.sh", "").status, 500, "a local redirect loop ends");
    let r = get(tern.addr, "/cgi-bin/client.sh", "");
    assert_eq!((r.status, r.header("location")), (302, Some("http://example.com/elsewhere")));
    let r = get(tern.addr, "/cgi-bin/length.sh", "");
    assert_eq!((r.header("content-length"), r.body.as_slice()), (Some("5"), &b"hello"[..]));
    // nph- output is relayed untouched.
    let raw = exchange(tern.addr, b"GET /cgi-bin/nph-raw.sh HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(3));
    assert_eq!(raw, b"HTTP/1.1 299 Custom\r\nX-Raw: yes\r\n\r\nraw body");
    // HEAD runs the program but sends no body; keep-alive survives.
    let raw = exchange(
        tern.addr,
        b"HEAD /cgi-bin/teapot.sh HTTP/1.1\r\nHost: x\r\n\r\nGET /cgi-bin/teapot.sh HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(3),
    );
    let both: Vec<(u16, Vec<u8>)> = parse_responses(&raw, &[true]).into_iter().map(|r| (r.status, r.body)).collect();
    assert_eq!(both, [(418, Vec::new()), (418, b"short and stout".to_vec())]);
    // HTTP/1.0 without a length: close-delimited.
    let raw = exchange(tern.addr, b"GET /cgi-bin/teapot.sh HTTP/1.0\r\n\r\n", Duration::from_secs(3));
    assert!(raw.ends_with(b"\r\n\r\nshort and stout") && common::find(&raw, b"Connection: close").is_some());
    // Program errors are 502, and the server keeps serving.
    for path in ["/cgi-bin/crash.sh", "/cgi-bin/garbage.sh", "/cgi-bin/silent.sh", "/cgi-bin/badstatus.sh"] {
        let r = get(tern.addr, path, "");
        assert_eq!(r.status, 502, "{path}");
        assert!(!String::from_utf8_lossy(&r.body).contains("not a header"));
    }
    assert_eq!(get(tern.addr, "/cgi-bin/notexec.cgi", "").status, 403);
    assert_eq!(get(tern.addr, "/script.cgi", "").status, 403, "a non-executable .cgi is never served as text");
    assert_eq!(get(tern.addr, "/cgi-bin/missing.sh", "").status, 404);
    assert_eq!(get(tern.addr, "/cgi-bin/", "").status, 403);
    assert_eq!(get(tern.addr, "/cgi-bin/echo.sh", "").status, 200);
    assert_eq!(get(tern.addr, "/small.txt", "").status, 200);
}

#[test]
fn large_output_streams_exactly() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"GET /cgi-bin/big.sh HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::with_capacity(53 << 20);
    s.read_to_end(&mut raw).unwrap();
    let r = parse_responses(&raw, &[]);
    assert_eq!(r[0].status, 200);
    let body = &r[0].body;
    assert_eq!(body.len(), 52_428_800);
    let unit = b"0123456789abcdef\n";
    assert!(body.chunks(unit.len()).all(|c| c == &unit[..c.len()]), "50 MiB body differs");
}

#[test]
fn hanging_program_gets_504_and_its_group_is_killed() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let t = Instant::now();
    let r = get(tern.addr, "/cgi-bin/hang.sh", "");
    assert_eq!(r.status, 504);
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    let pid = read_pid(&cs.state.join("hang.pid"));
    let child = read_pid(&cs.state.join("hang.child"));
    wait_gone(&[pid, child], Duration::from_secs(5));
    let s: serde_json::Value = serde_json::from_slice(&get(tern.addr, "/_tern/status", "").body).unwrap();
    assert_eq!(s["cgi"]["timeouts"], 1);
}

#[test]
fn client_abort_kills_the_program() {
    let cs = cgi_site();
    let tern = start(&cs, "timeout = \"60s\"\n");
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"GET /cgi-bin/stream.sh HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 256];
    assert!(s.read(&mut buf).unwrap() > 0);
    let pid = read_pid(&cs.state.join("stream.pid"));
    let child = read_pid(&cs.state.join("stream.child"));
    drop(s);
    wait_gone(&[pid, child], Duration::from_secs(5));
}

#[test]
fn programs_never_block_the_reactor() {
    let cs = cgi_site();
    let tern = Tern::start(&cs.site.root, "sendfile", "", &["--workers", "1"]);
    let addr = tern.addr;
    let slow: Vec<_> = (0..3).map(|_| std::thread::spawn(move || get(addr, "/cgi-bin/slow.sh", "").status)).collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        let t = Instant::now();
        assert_eq!(get(addr, "/small.txt", "").status, 200);
        assert!(t.elapsed() < Duration::from_millis(500), "a static request waited {:?} behind CGI", t.elapsed());
    }
    for h in slow {
        assert_eq!(h.join().unwrap(), 200);
    }
}

#[test]
fn process_cap_answers_503() {
    let cs = cgi_site();
    let tern = start(&cs, "max_processes = 2\ntimeout = \"10s\"\n");
    let addr = tern.addr;
    let slow: Vec<_> = (0..2).map(|_| std::thread::spawn(move || get(addr, "/cgi-bin/slow.sh", "").status)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let r = get(addr, "/cgi-bin/echo.sh", "");
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    for h in slow {
        assert_eq!(h.join().unwrap(), 200);
    }
    assert_eq!(get(addr, "/cgi-bin/echo.sh", "").status, 200);
}

#[test]
fn stderr_goes_to_the_error_log() {
    let cs = cgi_site();
    let log = cs.site.dir.path().join("error.log");
    let mut tern = Tern::start(
        &cs.site.root,
        "sendfile",
        &format!("[log]\naccess = \"off\"\nerror = \"{}\"\n", log.display()),
        &[],
    );
    assert_eq!(get(tern.addr, "/cgi-bin/stderr.sh", "").body, b"ok");
    tern.terminate(Duration::from_secs(5));
    assert!(std::fs::read_to_string(&log).unwrap().contains("a message for the error log"));
}

#[test]
fn no_zombies_or_leaked_descriptors_after_many_requests() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let fds = |pid: i32| std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    // Warm up (pools, the error log), then count.
    get(tern.addr, "/cgi-bin/env.cgi", "");
    std::thread::sleep(Duration::from_millis(200));
    let before = fds(tern.pid());
    let addr = tern.addr;
    let workers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = vec![0u8; 8192];
                for _ in 0..5000 {
                    s.write_all(b"GET /cgi-bin/env.cgi?x HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                    let mut got = Vec::new();
                    while !got.ends_with(b"\r\n0\r\n\r\n") {
                        let n = s.read(&mut buf).unwrap();
                        assert!(n > 0);
                        got.extend_from_slice(&buf[..n]);
                        assert!(
                            got.len() < 12 || got.starts_with(b"HTTP/1.1 200 "),
                            "{}",
                            String::from_utf8_lossy(&got)
                        );
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let after = fds(tern.pid());
    assert!(after <= before + 1, "descriptors: {before} before, {after} after 20,000 CGI requests");
    let zombies: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            fields.first() == Some(&"Z") && fields.get(1) == Some(&tern.pid().to_string().as_str())
        })
        .collect();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
    let s: serde_json::Value = serde_json::from_slice(&get(tern.addr, "/_tern/status", "").body).unwrap();
    assert_eq!(s["cgi"]["running"], 0);
    assert!(s["cgi"]["started"].as_u64().unwrap() >= 20_001);
}

fn corpus() -> Vec<serde_json::Value> {
    let dir = common::corpus_dir();
    let mut out = Vec::new();
    for f in ["httpd-chunk-cl.jsonl", "httpd-http-strict.jsonl", "llhttp-requests.jsonl"] {
        for line in std::fs::read_to_string(dir.join(f)).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    out
}

#[test]
fn corpus_echo_vectors() {
    let cs = cgi_site();
    let tern = start(&cs, "");
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut checked = 0;
    for v in corpus().into_iter().filter(|v| v["kind"] != "cgi-response-header") {
        let raw = b64.decode(v["raw_b64"].as_str().unwrap()).unwrap();
        let Some(at) = common::find(&raw, b"__ECHO__") else { continue };
        let mut bytes = raw[..at].to_vec();
        bytes.extend_from_slice(b"/cgi-bin/echo.sh");
        bytes.extend_from_slice(&raw[at + 8..]);
        let codes = statuses(&exchange(tern.addr, &bytes, Duration::from_secs(1)));
        let expect = v["expect"].as_str().unwrap();
        let first = codes.first().copied();
        let rejected = first.is_none_or(|c| [400, 411, 413, 414, 431, 501, 505].contains(&c));
        let ok = match expect {
            "200" => first == Some(200),
            "reject" => rejected,
            "reject-or-200" => rejected || first == Some(200),
            other => panic!("unexpected label {other}"),
        };
        assert!(ok, "{} expected {expect}, got {codes:?}", v["id"]);
        checked += 1;
    }
    assert_eq!(checked, 24);
}

#[test]
fn corpus_cgi_response_header_vectors() {
    let cs = cgi_site();
    let b64 = base64::engine::general_purpose::STANDARD;
    let cases: Vec<(String, Vec<u8>, String)> = corpus()
        .into_iter()
        .filter(|v| v["kind"] == "cgi-response-header")
        .map(|v| {
            let header = b64.decode(v["cgi_header_b64"].as_str().unwrap()).unwrap();
            (v["id"].as_str().unwrap().to_string(), header, v["expect"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(cases.len(), 8);
    for (i, (_, header, _)) in cases.iter().enumerate() {
        let data = cs.site.dir.path().join(format!("header{i}.bin"));
        std::fs::write(&data, header).unwrap();
        write_program(
            &cs.cgi.join(format!("header{i}.sh")),
            &format!(
                "#!/bin/sh\nprintf 'Content-Type: text/plain\\n'\ncat '{}'\nprintf '\\n\\nscript-body\\n'\n",
                data.display()
            ),
        );
    }
    let tern = start(&cs, "");
    for (i, (id, header, expect)) in cases.iter().enumerate() {
        let raw = exchange(
            tern.addr,
            format!("GET /cgi-bin/header{i}.sh HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
            Duration::from_secs(2),
        );
        let codes = statuses(&raw);
        match expect.as_str() {
            "200" => {
                assert_eq!(codes, [200], "{id}");
                assert!(common::find(&raw, header).is_some(), "{id}: a valid header is relayed");
            }
            "500" => {
                assert!(codes == [500] || codes == [502], "{id}: {codes:?}");
                assert!(common::find(&raw, header).is_none(), "{id}: an invalid header was relayed");
                assert!(common::find(&raw, b"script-body").is_none(), "{id}");
            }
            other => panic!("{id}: label {other}"),
        }
    }
}

/// Out of descriptors (`RLIMIT_NOFILE` reached by held connections), a kept
/// connection asking for a program is answered `503` with `Retry-After`, as
/// at `cgi.max_processes`: the server is full for now, not the program
/// broken (found by `bench/soak.sh`: it was `500`). Once the connections go,
/// programs run again.
#[test]
fn out_of_descriptors_a_program_is_503_for_now() {
    let cs = cgi_site();
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=64:64", "--", common::tern_bin()]);
    let tern = Tern::start_with(cmd, &cs.site.root, "sendfile", "", &["--workers", "1"]);
    let mut kept = TcpStream::connect(tern.addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = |s: &mut TcpStream| {
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    kept.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(head(&mut kept).starts_with("HTTP/1.1 200"));
    // The server's descriptors all taken, then one freed: the program's
    // file opens, its pipes cannot.
    let mut held = common::hold_every_descriptor(&tern, 64);
    held.pop();
    let start = Instant::now();
    while common::free_descriptors(&tern, 64) == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "the closed connection stays open");
        std::thread::sleep(Duration::from_millis(5));
    }
    kept.write_all(b"GET /cgi-bin/printenv.sh HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let answer = head(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("Retry-After: 1"), "{answer}");
    drop(held);
    let start = Instant::now();
    while get(tern.addr, "/cgi-bin/printenv.sh", "").status != 200 {
        assert!(start.elapsed() < Duration::from_secs(10), "programs do not run again");
        std::thread::sleep(Duration::from_millis(200));
    }
}
