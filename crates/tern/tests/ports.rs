//! One owner per port: a server started on an address another process
//! already listens on refuses to start, naming the address, and the server
//! already there keeps answering every request.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{get, tern_bin, Tern};

/// Runs `tern` with `args`; its exit code and standard error, or a failure
/// if it is still running after `limit` (it started and is serving).
fn run_to_exit(args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(tern_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return (status.code(), err);
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("`tern {}` was still running after {limit:?}: it started on a taken address", args.join(" "));
}

#[test]
fn a_second_server_on_a_taken_address_refuses_to_start() {
    let site = common::site();
    let first = Tern::start(&site.root, "sendfile", "", &[]);
    let addr = first.addr;
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("small.txt"), "the other server\n").unwrap();
    let other_root = other.path().to_str().unwrap().to_string();

    // A client keeps asking the first server throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (stop, small) = (stop.clone(), site.small.clone());
        thread::spawn(move || {
            let mut answered = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = get(addr, "/small.txt", "");
                assert_eq!((r.status, r.body == small), (200, true), "request {answered} to the first server");
                answered += 1;
            }
            answered
        })
    };

    let wildcard = format!("0.0.0.0:{}", addr.port());
    for _ in 0..3 {
        for listen in [addr.to_string(), wildcard.clone()] {
            let (code, err) = run_to_exit(&["serve", &other_root, "--listen", &listen], Duration::from_secs(15));
            assert_eq!(code, Some(2), "{err}");
            let taken = if listen == wildcard { &wildcard } else { &listen };
            assert_eq!(
                err,
                format!("tern: cannot start: cannot listen on {taken}: address already in use by another process\n")
            );
            let (code, err) =
                run_to_exit(&["serve", &other_root, "--listen", &listen, "--check"], Duration::from_secs(15));
            assert_eq!(code, Some(2), "{err}");
            assert_eq!(
                err,
                format!("tern: check failed: cannot listen on {taken}: address already in use by another process\n")
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let answered = client.join().unwrap();
    assert!(answered > 0);
    let r = get(addr, "/small.txt", "");
    assert_eq!((r.status, r.body), (200, site.small.clone()));
}

#[test]
fn an_address_held_without_reuseport_is_refused_too() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_to_exit(&["serve", dir.path().to_str().unwrap(), "--listen", &addr], Duration::from_secs(15));
    assert_eq!(code, Some(2));
    assert_eq!(err, format!("tern: cannot start: cannot listen on {addr}: Address already in use (os error 98)\n"));
}
