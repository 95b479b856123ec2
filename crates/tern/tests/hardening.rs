//! Small hardening points: `--check` tries what a start would, the running
//! configuration file is never served, every answer is counted, repeated
//! log lines are rate-limited, a start error says its cause once, and
//! memory taken by a slowloris is given back when it ends.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{get, statuses, tern_bin, Tern};

fn tern(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(tern_bin()).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_start_error_says_its_cause_once() {
    let (code, _, err) = tern(&["serve", "/nonexistent/dir", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        err,
        "tern: cannot start: cannot open document root /nonexistent/dir: No such file or directory (os error 2)\n"
    );
}

#[test]
fn check_tries_everything_a_start_would() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let not_executable = dir.path().join("interp");
    std::fs::write(&not_executable, "").unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap();
    let d = dir.path().display();
    let r = root.display();
    let cases: Vec<(String, String)> = vec![
        (
            "[server]\nroot = \"/nonexistent/dir\"\n".into(),
            "cannot open document root /nonexistent/dir: No such file or directory".into(),
        ),
        (format!("[server]\nroot = \"{d}/file\"\n"), format!("cannot open document root {d}/file: Not a directory")),
        (
            format!("[server]\nroot = \"{r}\"\nlisten = [\"{taken}\"]\n"),
            format!("cannot listen on {taken}: Address already in use"),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[log]\nerror = \"{d}/missing/error.log\"\n"),
            "line 4: log.error: cannot open".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[log]\naccess = \"{d}/missing/access.log\"\n"),
            "line 4: log.access: cannot open".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\nworkers = 100000\n"),
            "line 3: server.workers: must be at most 1024".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[timeouts]\nheader = \"0\"\n"),
            "line 4: timeouts.header: must be more than 0".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[status]\npath = \"status\"\n"),
            "line 4: status.path: must be a URL path starting with /".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[cgi]\ninterpreters = {{ rb = \"/nonexistent/ruby\" }}\n"),
            "line 4: cgi.interpreters: rb = /nonexistent/ruby: No such file or directory".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[cgi]\ninterpreters = {{ rb = \"{}\" }}\n", not_executable.display()),
            "line 4: cgi.interpreters: rb = ".into(),
        ),
        (
            format!("[server]\nroot = \"{r}\"\n[cgi]\ndirectories = [\"/cgi-bin\", \"/scripts\", \"/missing\"]\n"),
            "line 4: cgi.directories: /missing does not exist under the document root".into(),
        ),
    ];
    let config = dir.path().join("tern.toml");
    for (text, expected) in &cases {
        std::fs::write(&config, text).unwrap();
        // Port 0 unless the case is about the address: the default 8080 may
        // be someone else's on a shared machine.
        let listen: &[&str] = if text.contains("listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
        for mode in ["--check", "--workers=1"] {
            let (code, out, err) = tern(&[&["serve", "--config", config.to_str().unwrap(), mode], listen].concat());
            assert_eq!(code, Some(2), "{mode} {text:?}: {out}{err}");
            assert!(out.is_empty() && err.contains(expected), "{mode} {text:?} → {err}");
        }
    }
    // The same root unreadable (only meaningful for a user that is not root).
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::write(&config, format!("[server]\nroot = \"{r}\"\n")).unwrap();
        let (code, _, err) = tern(&["serve", "--config", config.to_str().unwrap(), "--check"]);
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(code, Some(2));
        assert!(err.contains("Permission denied"), "{err}");
    }
    // A good configuration passes, and nothing stays bound afterwards.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    std::fs::write(
        &config,
        format!("[server]\nroot = \"{r}\"\nlisten = [\"{free}\"]\n[cgi]\ndirectories = [\"/scripts\"]\ninterpreters = {{ sh = \"/bin/sh\" }}\n"),
    )
    .unwrap();
    let (code, out, err) = tern(&["serve", "--config", config.to_str().unwrap(), "--check"]);
    assert_eq!((code, out.as_str()), (Some(0), "configuration OK\n"), "{err}");
    std::net::TcpListener::bind(free).expect("the check let its address go");
}

#[test]
fn the_running_configuration_file_is_not_served() {
    let site = common::site();
    let config = site.root.join("tern.toml");
    std::fs::write(&config, "[log]\naccess = \"off\"\n").unwrap();
    std::fs::hard_link(&config, site.root.join("copy.txt")).unwrap();
    std::fs::write(site.root.join("other.toml"), "x = 1\n").unwrap();
    let mut cmd = Command::new(tern_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "2", "--config"]).arg(&config);
    let tern = Tern::spawn(cmd);
    for _ in 0..2 {
        assert_eq!(get(tern.addr, "/tern.toml", "").status, 404);
        assert_eq!(get(tern.addr, "/copy.txt", "").status, 404);
        assert_eq!(get(tern.addr, "/other.toml", "").body, b"x = 1\n");
        assert_eq!(get(tern.addr, "/small.txt", "").body, site.small);
    }
}

/// A connection busy with a response that stays open: a 64 MiB download
/// whose head was read and whose body is not (an idle keep-alive connection
/// would be closed to make room at the cap).
fn held_connection(tern: &Tern, root: &std::path::Path) -> TcpStream {
    let huge = root.join("huge.bin");
    if !huge.exists() {
        std::fs::File::create(&huge).unwrap().set_len(64 << 20).unwrap();
    }
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    s
}

/// Connects and reads until the server closes. It sends nothing: its
/// server needs `server.defer_accept = 0` to see it at once.
fn refused(tern: &Tern) -> Vec<u8> {
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[test]
fn every_answer_is_counted() {
    let site = common::site();
    let tern = Tern::start(
        &site.root,
        "sendfile",
        "[server]\nmax_connections = 3\ndefer_accept = 0\n[timeouts]\nheader = \"1s\"\n",
        &[],
    );
    let before = tern.status();
    let held: Vec<TcpStream> = (0..3).map(|_| held_connection(&tern, &site.root)).collect();
    for _ in 0..5 {
        assert_eq!(statuses(&refused(&tern)), [503]);
    }
    drop(held);
    // A loaded machine may take a moment to see the held ones close: a
    // connection refused meanwhile is one more 503 to count.
    let mut more_503 = 0;
    loop {
        let mut slow = TcpStream::connect(tern.addr).unwrap();
        let _ = slow.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x");
        slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let _ = slow.read_to_end(&mut got);
        match statuses(&got)[..] {
            [503] if more_503 < 50 => more_503 += 1,
            _ => {
                assert_eq!(statuses(&got), [408]);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = tern.status();
    let delta = |k: &str| after["requests"][k].as_u64().unwrap() - before["requests"][k].as_u64().unwrap();
    // The first status page, three GETs, the 503s, one 408.
    assert_eq!(delta("total"), 1 + 3 + 5 + more_503 + 1);
    assert_eq!((delta("2xx"), delta("4xx"), delta("5xx")), (4, 1, 5 + more_503));
}

#[test]
fn repeated_log_lines_are_rate_limited() {
    let site = common::site();
    let log = site.dir.path().join("error.log");
    let config = format!(
        "[log]\naccess = \"off\"\nlevel = \"warn\"\nerror = \"{}\"\n[server]\nmax_connections = 1\ndefer_accept = 0\n",
        log.display()
    );
    let tern = Tern::start(&site.root, "sendfile", &config, &[]);
    let _held = held_connection(&tern, &site.root);
    const FLOOD: u64 = 300;
    let flood = Instant::now();
    for _ in 0..FLOOD {
        assert_eq!(statuses(&refused(&tern)), [503]);
    }
    // Written lines plus the reported counts add up to every refusal, once
    // the last second's count is out (workers report once a second).
    let refusal = "refused, server.max_connections reached";
    let start = Instant::now();
    let (written, suppressed) = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        let written = text.lines().filter(|l| l.contains("[warn]") && l.ends_with(refusal)).count() as u64;
        let suppressed: u64 = text
            .lines()
            .filter(|l| l.ends_with(&format!("\"{{peer}}: {refusal}\" suppressed in the last second")))
            .map(|l| l.split("] ").nth(2).unwrap().split(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        if written + suppressed == FLOOD || start.elapsed() > Duration::from_secs(10) {
            break (written, suppressed);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(written + suppressed, FLOOD, "{written} written, {suppressed} reported as suppressed");
    // At most 10 a second over the seconds the flood touched.
    let seconds = start.duration_since(flood).as_secs() + 2;
    assert!(written <= 10 * seconds && suppressed > 0, "{written} lines written over {seconds} s");
}

/// Resident anonymous memory (heap and stacks): what connections cost. The
/// resident pages of the binary itself grow as code runs for the first
/// time (the status page, the timeouts) and are the kernel's to drop, not
/// the server's to give back.
fn anon_kib(pid: i32) -> u64 {
    status_kib(pid, "RssAnon:")
}

fn status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn memory_taken_by_a_slowloris_is_given_back() {
    const ATTACK: usize = 1500;
    // Room for the attack's descriptors, here and in the server (inherited).
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let want = (4 * ATTACK as u64).min(limit.rlim_max);
    assert!(want > 2 * ATTACK as u64 + 100, "RLIMIT_NOFILE hard limit {} is too low", limit.rlim_max);
    limit.rlim_cur = limit.rlim_cur.max(want);
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };

    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "[timeouts]\nheader = \"60s\"\n", &[]);
    assert_eq!(get(tern.addr, "/small.txt", "").status, 200);
    let idle = anon_kib(tern.pid());
    let head = format!("GET /small.txt HTTP/1.1\r\nHost: x\r\nX-Slow: {}", "a".repeat(4000));
    let attack: Vec<TcpStream> = (0..ATTACK)
        .map(|_| {
            let mut s = TcpStream::connect(tern.addr).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    // Every attacker's bytes have been read (each holds a buffer).
    let start = Instant::now();
    while tern.status()["connections"]["active"].as_u64().unwrap() < ATTACK as u64 + 1 {
        assert!(start.elapsed() < Duration::from_secs(20), "the attack's connections were not all accepted");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = anon_kib(tern.pid());
    assert!(during > idle + 8 * 1024, "the attack took little memory: idle {idle} KiB, during {during} KiB");
    drop(attack);
    // Within a few seconds of the end, less than half of what it took is
    // still resident. (Seen here: a few hundred KiB left under event in
    // most runs; 22-28 % under pool and per-request, and once under event
    // in CI, from allocator arenas of threads that handled the closes.)
    let start = Instant::now();
    let mut after = during;
    while start.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(250));
        after = anon_kib(tern.pid());
        if after < idle + (during - idle) / 2 {
            break;
        }
    }
    let files = status_kib(tern.pid(), "RssFile:");
    assert!(
        after < idle + (during - idle) / 2,
        "anonymous: idle {idle} KiB, during the attack {during} KiB, after {after} KiB (file-backed now {files} KiB)"
    );
    assert_eq!(get(tern.addr, "/small.txt", "").status, 200);
}
