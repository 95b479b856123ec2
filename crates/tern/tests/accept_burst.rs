//! Accepting connections. A burst of connections that arrive while the
//! worker is not looking must all be accepted, not only the first batch:
//! listener readiness is edge-triggered, so connections left in the accept
//! queue after a batch produce no new event (they used to wait there until
//! someone else connected). And a connection read in the turn that accepts
//! it still hears of the bytes that come after that read.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Tern;

#[test]
fn every_connection_of_a_burst_is_accepted() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "", &["--workers", "1"]);
    // Stopped, the server cannot accept: all 300 wait in its accept queue
    // (backlog 1024) and it sees them in one edge when it resumes.
    unsafe { libc::kill(tern.pid(), libc::SIGSTOP) };
    let mut conns: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(tern.addr).unwrap()).collect();
    unsafe { libc::kill(tern.pid(), libc::SIGCONT) };
    for c in &mut conns {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /style.css HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"), "connection {i} got no answer: {out:?}");
    }
}

/// A connection is read in the turn that accepts it (its first bytes came
/// with the accept) and joins epoll after: a head split across that read,
/// and the next request on the same connection, must still be answered.
#[test]
fn a_head_split_across_the_accepting_read_is_answered() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "", &["--workers", "1"]);
    let mut c = TcpStream::connect(tern.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /style.css HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    c.write_all(b"st: localhost\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    c.write_all(b"GET /style.css HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let responses = common::parse_responses(&common::read_until_close(&mut c), &[false, false]);
    let css = std::fs::read(site.root.join("style.css")).unwrap();
    assert_eq!(responses.len(), 2);
    for r in &responses {
        assert_eq!((r.status, &r.body), (200, &css));
    }
}
