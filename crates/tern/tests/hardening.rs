//! Small hardening points: `--check` tries what a start would, the running
//! configuration file is never served, every answer is counted, repeated
//! log lines are rate-limited, a start error says its cause once, and
//! memory taken by a slowloris is given back when it ends.

mod common;

use std::process::Command;

use common::{get, tern_bin, Tern};

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
        for mode in ["--check", "--workers=1"] {
            let (code, out, err) = tern(&["serve", "--config", config.to_str().unwrap(), mode]);
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
