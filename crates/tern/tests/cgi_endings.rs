//! How a CGI request ends: what the program left running is killed with
//! its process group (`cgi.kill_group`), and a response is complete only
//! when its program exited with status 0 — a crash or a failure after the
//! head ends it without its last bytes (no chunked terminator), connection
//! closed, so the client can tell.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{find, Tern};

struct Site {
    site: common::Site,
    state: PathBuf,
}

fn program(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn cgi_site() -> Site {
    let site = common::site();
    let cgi = site.root.join("cgi-bin");
    let state = site.dir.path().join("state");
    std::fs::create_dir_all(&cgi).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let st = state.display();
    // A grandchild that closed every inherited descriptor, as daemons do.
    program(
        &cgi,
        "leftover.sh",
        &format!(
            "#!/bin/sh\nsleep 31 </dev/null >/dev/null 2>&1 &\necho $! > {st}/leftover\nprintf 'Content-Type: text/plain\\n\\nok'\n"
        ),
    );
    // One that ignores SIGTERM: only the KILL after the grace ends it.
    program(
        &cgi,
        "stubborn.sh",
        &format!(
            "#!/bin/sh\n(trap '' TERM; exec sleep 31) </dev/null >/dev/null 2>&1 &\necho $! > {st}/stubborn\nprintf 'Content-Type: text/plain\\n\\nok'\n"
        ),
    );
    program(&cgi, "segv.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\npartial body'\nkill -SEGV $$\n");
    program(
        &cgi,
        "segv-length.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\nContent-Length: 12\\n\\npartial body'\nkill -SEGV $$\n",
    );
    program(
        &cgi,
        "mask.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\nexec grep SigBlk /proc/self/status\n",
    );
    program(&cgi, "fails.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nall printed'\nexit 3\n");
    program(&cgi, "fine.sh", "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nall printed'\nexit 0\n");
    program(
        &cgi,
        "fine-length.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\nContent-Length: 11\\n\\nall printed'\n",
    );
    Site { site, state }
}

fn start(s: &Site, cgi: &str) -> Tern {
    Tern::start(&s.site.root, "sendfile", &format!("[cgi]\ntimeout = \"20s\"\n{cgi}"), &[])
}

fn read_pid(path: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()) {
            return pid;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Running (a zombie waiting for its reaper counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

fn gone_within(pid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while alive(pid) {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// A keep-alive GET; reads until the server closes or 5 s of silence.
/// Returns the bytes and whether the server closed.
fn get_keep_alive(tern: &Tern, path: &str) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (out, true),
            Err(_) => return (out, false),
        }
    }
}

#[test]
fn a_grandchild_left_running_is_killed_when_its_request_ends() {
    let s = cgi_site();
    let tern = start(&s, "");
    for name in ["leftover", "stubborn"] {
        let r = common::get(tern.addr, &format!("/cgi-bin/{name}.sh"), "");
        assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
        let pid = read_pid(&s.state.join(name));
        assert!(gone_within(pid, Duration::from_secs(5)), "{name}: the grandchild {pid} outlived its request");
    }
}

#[test]
fn programs_start_with_no_signal_blocked() {
    // Workers block SIGTERM, SIGHUP, SIGINT and SIGCHLD; a program that
    // inherited that could not be stopped with SIGTERM.
    let s = cgi_site();
    let tern = start(&s, "");
    let r = common::get(tern.addr, "/cgi-bin/mask.sh", "");
    assert_eq!((r.status, String::from_utf8_lossy(&r.body).as_ref()), (200, "SigBlk:\t0000000000000000\n"));
}

#[test]
fn kill_group_off_leaves_the_grandchild_alone() {
    let s = cgi_site();
    let tern = start(&s, "kill_group = false\n");
    let r = common::get(tern.addr, "/cgi-bin/leftover.sh", "");
    assert_eq!(r.status, 200);
    let pid = read_pid(&s.state.join("leftover"));
    std::thread::sleep(Duration::from_millis(2500));
    let survived = alive(pid);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(survived, "with kill_group = false the grandchild is left alone");
}

#[test]
fn a_program_that_dies_after_its_head_ends_the_response_cut_short() {
    let s = cgi_site();
    let tern = start(&s, "");
    for name in ["segv", "fails"] {
        let t = Instant::now();
        let (raw, closed) = get_keep_alive(&tern, &format!("/cgi-bin/{name}.sh"));
        let text = String::from_utf8_lossy(&raw);
        assert!(closed, "{name}: the connection closes: {text:?}");
        assert!(t.elapsed() < Duration::from_secs(4), "{name}: closed after {:?}", t.elapsed());
        assert!(text.starts_with("HTTP/1.1 200"), "{name}: {text:?}");
        assert!(text.contains("Transfer-Encoding: chunked\r\n"), "{name}: {text:?}");
        assert!(find(&raw, b"\r\n0\r\n\r\n").is_none(), "{name}: no chunked terminator: {text:?}");
    }
    // Content-Length framing: the last byte is held until the exit status
    // is known, so the client never sees the announced length complete.
    let (raw, closed) = get_keep_alive(&tern, "/cgi-bin/segv-length.sh");
    let text = String::from_utf8_lossy(&raw);
    assert!(closed, "{text:?}");
    assert!(text.contains("Content-Length: 12\r\n"), "{text:?}");
    let body = &raw[find(&raw, b"\r\n\r\n").unwrap() + 4..];
    assert!(body.len() < 12 && b"partial body".starts_with(body), "{text:?}");
}

#[test]
fn a_program_that_exits_zero_ends_a_complete_response_kept_alive() {
    let s = cgi_site();
    let tern = start(&s, "");
    let mut c = TcpStream::connect(tern.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for (path, end) in
        [("/cgi-bin/fine.sh", &b"b\r\nall printed\r\n0\r\n\r\n"[..]), ("/cgi-bin/fine-length.sh", b"all printed")]
    {
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(end) {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "{path}: closed: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"), "{path}");
    }
}
