//! Limits and timeouts, enforced against real slow or greedy clients while
//! other clients keep being served.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::{exchange, get, statuses, Tern};

/// Reads until EOF/reset or `limit`; returns the bytes and when it ended.
fn read_until_end(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return (got, Some(start.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (got, Some(start.elapsed())),
        }
    }
    (got, None)
}

#[test]
fn slowloris_is_cut_off_while_others_are_served() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "[timeouts]\nheader = \"2s\"\n", &[]);
    let addr = tern.addr;
    // Twenty clients each send one header byte per second.
    let slow: Vec<_> = (0..20)
        .map(|_| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
                let start = Instant::now();
                let mut got = Vec::new();
                for b in b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
                    if s.write_all(&[*b]).is_err() {
                        break;
                    }
                    let (bytes, ended) = read_until_end(&mut s, Duration::from_secs(1));
                    got.extend_from_slice(&bytes);
                    if ended.is_some() {
                        return (got, start.elapsed());
                    }
                }
                (got, start.elapsed())
            })
        })
        .collect();
    // Meanwhile normal clients are answered promptly.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        let t = Instant::now();
        let r = get(addr, "/small.txt", "");
        assert_eq!(r.status, 200);
        assert!(t.elapsed() < Duration::from_secs(1), "a normal request took {:?}", t.elapsed());
        thread::sleep(Duration::from_millis(100));
    }
    for handle in slow {
        let (got, elapsed) = handle.join().unwrap();
        assert!(elapsed < Duration::from_secs(6), "slow client held on for {elapsed:?}");
        assert_eq!(statuses(&got), [408], "slow client told 408: {:?}", String::from_utf8_lossy(&got));
    }
    assert!(tern.status()["timeouts"]["header"].as_u64().unwrap() >= 20);
}

#[test]
fn idle_keepalive_and_silent_connections_are_closed() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "[timeouts]\nkeepalive = \"1s\"\nheader = \"1s\"\n", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (got, ended) = read_until_end(&mut s, Duration::from_secs(5));
    assert_eq!(statuses(&got), [200]);
    let ended = ended.expect("idle keep-alive connection closed");
    assert!(ended >= Duration::from_millis(900) && ended < Duration::from_secs(4), "closed after {ended:?}");
    // A connection that never sends anything is closed without an answer.
    let mut s = TcpStream::connect(tern.addr).unwrap();
    let (got, ended) = read_until_end(&mut s, Duration::from_secs(5));
    assert!(got.is_empty() && ended.is_some());
}

#[test]
fn a_silent_connection_reaches_a_worker_only_when_it_speaks() {
    // `server.defer_accept` (default 1 s): the kernel holds a connection
    // until its first bytes; with 0 a worker takes it at the handshake.
    let site = common::site();
    let deferred = Tern::start(&site.root, "sendfile", "", &[]);
    let at_once = Tern::start(&site.root, "sendfile", "[server]\ndefer_accept = 0\n", &[]);
    for (tern, silent_accepted) in [(&deferred, 0), (&at_once, 1)] {
        let mut s = TcpStream::connect(tern.addr).unwrap();
        // Well before the kernel's first SYN-ACK retransmission (1 s), which
        // ends a deferral.
        thread::sleep(Duration::from_millis(300));
        // The status request's own connection is counted too.
        assert_eq!(tern.status()["connections"]["accepted"], silent_accepted + 1);
        s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let (got, ended) = read_until_end(&mut s, Duration::from_secs(5));
        assert_eq!(statuses(&got), [200]);
        assert!(ended.is_some());
    }
}

/// The server's descriptor for the connection whose client end is
/// `client`, duplicated into this process (`pidfd_getfd`: the tests run as
/// the server's user). Found by its addresses in `/proc/net/tcp` and its inode
/// among the server's descriptors.
fn server_end(pid: i32, server: std::net::SocketAddr, client: &TcpStream) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let row = common::proc_tcp_row(server, client.local_addr().unwrap()).expect("the server's end in /proc/net/tcp");
    let inode = &row[9];
    let target = format!("socket:[{inode}]");
    let fd: i32 = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_str() == Some(target.as_str())))
        .expect("the server holds the connection")
        .file_name()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: plain system calls on integers; each result is checked.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        assert!(pidfd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        let dup = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        libc::close(pidfd);
        assert!(dup >= 0, "pidfd_getfd: {}", std::io::Error::last_os_error());
        std::os::fd::OwnedFd::from_raw_fd(dup)
    }
}

#[test]
fn accepted_connections_send_without_nagle_delays() {
    // TCP_NODELAY is set on the listeners and inherited by each connection.
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let server_end = server_end(tern.pid(), tern.addr, &s);
    assert!(socket2::SockRef::from(&server_end).tcp_nodelay().unwrap());
}

#[test]
fn slow_body_is_timed_out_with_408() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "[timeouts]\nbody = \"1s\"\nbody_min_rate = 1000\n", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"POST /small.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789").unwrap();
    let (got, ended) = read_until_end(&mut s, Duration::from_secs(6));
    assert_eq!(statuses(&got), [408]);
    assert!(ended.expect("closed") < Duration::from_secs(4));
}

#[test]
fn slow_reader_is_dropped() {
    let site = common::site();
    let file = std::fs::File::create(site.root.join("huge.bin")).unwrap();
    file.set_len(256 << 20).unwrap();
    let tern = Tern::start(&site.root, "sendfile", "[timeouts]\nsend = \"1s\"\nsend_min_rate = 100000000\n", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // Do not read for a while: the server's writes stall.
    thread::sleep(Duration::from_secs(4));
    let (got, ended) = read_until_end(&mut s, Duration::from_secs(10));
    assert!(ended.is_some(), "the stalled transfer was not cut");
    assert!(got.len() < 256 << 20, "the whole file was sent to a reader that did not read");
    assert!(tern.status()["timeouts"]["send"].as_u64().unwrap() >= 1);
}

#[test]
fn connection_cap_answers_503_and_recovers() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "[server]\nmax_connections = 4\n", &[]);
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(tern.addr).unwrap();
            s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut buf = vec![0u8; 2048];
            let mut n = 0;
            while n < 1000 {
                n += s.read(&mut buf).unwrap();
            }
            // A request under way: not an idle connection that could be
            // closed to make room.
            s.write_all(b"GET /small.txt HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // Each worker publishes its idle count once per loop turn (`room.rs`):
    // let them see the partial heads, or a worker at the cap may still ask
    // another for an idle connection it no longer has and admit one more.
    thread::sleep(Duration::from_millis(300));
    let mut extra = TcpStream::connect(tern.addr).unwrap();
    let (got, ended) = read_until_end(&mut extra, Duration::from_secs(3));
    assert_eq!(statuses(&got), [503]);
    assert!(ended.is_some());
    held.pop();
    thread::sleep(Duration::from_millis(300));
    // Below the cap again: served. (The status page needs a slot too.)
    let r = get(tern.addr, "/small.txt", "");
    assert_eq!(r.status, 200);
    drop(held);
    thread::sleep(Duration::from_millis(300));
    assert!(tern.status()["connections"]["rejected"].as_u64().unwrap() >= 1);
}

#[test]
fn size_limits() {
    let site = common::site();
    let tern = Tern::start(
        &site.root,
        "sendfile",
        "[limits]\nmax_body_bytes = \"1KiB\"\nmax_headers = 20\nmax_request_line = \"1KiB\"\nmax_header_bytes = \"4KiB\"\n",
        &[],
    );
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(2000));
    assert_eq!(statuses(&exchange(tern.addr, long_target.as_bytes(), Duration::from_secs(2))), [414]);
    let many: String = (0..25).map(|i| format!("X-{i}: v\r\n")).collect();
    let req = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(statuses(&exchange(tern.addr, req.as_bytes(), Duration::from_secs(2))), [431]);
    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(5000));
    assert_eq!(statuses(&exchange(tern.addr, big.as_bytes(), Duration::from_secs(2))), [431]);
    let post = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n";
    assert_eq!(statuses(&exchange(tern.addr, post.as_bytes(), Duration::from_secs(2))), [413]);
    let chunk = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n{}\r\n0\r\n\r\n",
        "c".repeat(2048)
    );
    assert_eq!(statuses(&exchange(tern.addr, chunk.as_bytes(), Duration::from_secs(2))), [413]);
    // Within limits, a body is read and the connection kept.
    let ok = "POST /missing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    let raw = exchange(tern.addr, ok.as_bytes(), Duration::from_secs(2));
    let codes: Vec<u16> = common::parse_responses(&raw, &[]).iter().map(|r| r.status).collect();
    assert_eq!(codes, [404, 200]);
}
