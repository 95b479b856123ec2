//! Started as root, tern binds and opens its logs, then becomes
//! `server.user` for good; as root without one it runs no programs unless
//! `cgi.allow_root`. These tests need root (CI has it); as anyone else they
//! say so and check nothing.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{get, Tern};

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("not root: privilege tests skipped");
    }
    root
}

/// The numeric ids of `name` in /etc/passwd (uid, primary gid).
fn ids(name: &str) -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd.lines().find(|l| l.starts_with(&format!("{name}:"))).expect("user in /etc/passwd");
    let f: Vec<&str> = line.split(':').collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

/// A tree every user may read: a document root with a program that says
/// who runs it.
fn readable_site() -> common::Site {
    let site = common::site();
    let cgi = site.root.join("cgi-bin");
    std::fs::create_dir(&cgi).unwrap();
    std::fs::write(cgi.join("id.sh"), "printf 'Content-Type: text/plain\\n\\n'\nid -u\nid -g\n").unwrap();
    std::fs::set_permissions(site.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    site
}

/// Every thread of `pid` runs as `uid`/`gid` with only `gid` as group, no
/// capability, and no way to gain privileges.
fn assert_dropped(pid: i32, uid: u32, gid: u32) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut n = 0;
    for task in tasks {
        // A thread may end meanwhile (a replaced server drains in the
        // background after a reload).
        let Ok(status) = std::fs::read_to_string(task.unwrap().path().join("status")) else { continue };
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).unwrap_or_default().trim().to_string()
        };
        assert_eq!(field("Uid"), format!("{uid}\t{uid}\t{uid}\t{uid}"), "{status}");
        assert_eq!(field("Gid"), format!("{gid}\t{gid}\t{gid}\t{gid}"), "{status}");
        assert!(field("Groups").split_whitespace().all(|g| g == gid.to_string()), "{status}");
        assert_eq!(field("CapEff"), "0000000000000000", "{status}");
        assert_eq!(field("NoNewPrivs"), "1", "{status}");
        n += 1;
    }
    assert!(n >= 3, "expected the main thread and two workers, saw {n}");
}

fn wait_for(tern: &Tern, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tern.stderr.lock().unwrap().contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} in: {}", tern.stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn becomes_server_user_and_reloads_after() {
    if !root() {
        return;
    }
    let (uid, gid) = ids("nobody");
    let site = readable_site();
    let logs = site.dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let access = logs.join("access.log");
    let config = format!("[server]\nuser = \"nobody\"\n[log]\naccess = \"{}\"\n", access.display());
    let tern = Tern::start(&site.root, "sendfile", &config, &[]);
    assert_dropped(tern.pid(), uid, gid);
    let id = get(tern.addr, "/cgi-bin/id.sh", "");
    assert_eq!((id.status, String::from_utf8_lossy(&id.body).as_ref()), (200, format!("{uid}\n{gid}\n").as_str()));
    // The log was handed over, so the reload can open it again as nobody;
    // the listeners are handed over, not bound again.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&access).unwrap().uid(), uid);
    std::fs::set_permissions(tern.config_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tern.pid(), libc::SIGHUP) };
    wait_for(&tern, "configuration reloaded");
    assert!(!tern.stderr.lock().unwrap().contains("reload failed"), "{}", tern.stderr.lock().unwrap());
    assert_eq!(get(tern.addr, "/", "").status, 200);
    let id = get(tern.addr, "/cgi-bin/id.sh", "");
    assert_eq!(String::from_utf8_lossy(&id.body), format!("{uid}\n{gid}\n"));
    assert_dropped(tern.pid(), uid, gid);
}

#[test]
fn a_root_only_document_root_is_refused_at_start() {
    if !root() {
        return;
    }
    let site = readable_site();
    std::fs::set_permissions(&site.root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tern.toml");
    std::fs::write(&config, "[server]\nuser = \"nobody\"\n").unwrap();
    let out = Command::new(common::tern_bin())
        .arg("serve")
        .arg(&site.root)
        .args(["--listen", "127.0.0.1:0", "--access-log", "off", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    let want = format!("server.root: {} cannot be read by user nobody: Permission denied", site.root.display());
    assert!(said.contains(&want), "{said}");
    assert!(!said.contains("listening on"), "{said}");
}

#[test]
fn as_root_programs_run_only_when_allowed() {
    if !root() {
        return;
    }
    let site = readable_site();
    let tern = Tern::start(&site.root, "sendfile", "[cgi]\nallow_root = false\n", &[]);
    wait_for(&tern, "CGI programs will be refused (403)");
    assert_eq!(get(tern.addr, "/cgi-bin/id.sh", "").status, 403);
    assert_eq!(get(tern.addr, "/index.html", "").status, 200);
    drop(tern);
    let tern = Tern::start(&site.root, "sendfile", "[cgi]\nallow_root = true\n", &[]);
    let id = get(tern.addr, "/cgi-bin/id.sh", "");
    assert_eq!((id.status, String::from_utf8_lossy(&id.body).as_ref()), (200, "0\n0\n"));
    assert!(!tern.stderr.lock().unwrap().contains("will be refused"));
}

#[test]
fn an_unknown_user_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tern.toml");
    std::fs::write(&config, "[server]\nuser = \"no-such-user-tern\"\n").unwrap();
    let out = Command::new(common::tern_bin())
        .arg("serve")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("server.user: no user `no-such-user-tern`"), "{said}");
}
