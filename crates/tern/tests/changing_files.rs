//! Files that change while they are served, for each I/O method: a file
//! that shrinks under a response ends it at once (connection closed, the
//! client sees the truncation, an error line names the file), and a file
//! rewritten in place is never labelled with its old length or strong
//! `ETag` — not even within `static.open_file_valid`.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{find, io_methods, pattern, Tern};

/// One response read from a keep-alive connection: its head, the body
/// bytes that arrived, and whether the server closed before the announced
/// length.
struct Got {
    head: String,
    body: Vec<u8>,
    cut: bool,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn content_length(&self) -> usize {
        self.header("content-length").expect("Content-Length").parse().unwrap()
    }
}

fn send_get(s: &mut TcpStream, path: &str) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
}

/// Reads one response (head, then its body up to Content-Length or the
/// close); fails the test if the server falls silent for `silence`.
fn read_response(s: &mut TcpStream, silence: Duration) -> Got {
    s.set_read_timeout(Some(silence)).unwrap();
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let head_end = loop {
        if let Some(i) = find(&raw, b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).expect("the head arrives (the server did not fall silent)");
        assert!(n > 0, "closed before a head");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut got = Got { head, body: raw[head_end..].to_vec(), cut: false };
    let want = got.content_length();
    while got.body.len() < want {
        match s.read(&mut buf) {
            Ok(0) => {
                got.cut = true;
                break;
            }
            Ok(n) => got.body.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                got.cut = true;
                break;
            }
            Err(e) => panic!("the server fell silent after {} of {want} body bytes: {e}", got.body.len()),
        }
    }
    got
}

/// Rewrites `path` in place (same inode): truncate, then write.
fn rewrite(path: &std::path::Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_file_truncated_during_a_download_ends_the_response_at_once() {
    const SIZE: usize = 40 << 20;
    // Beyond what the server can have sent into the socket buffers by then.
    const CUT: usize = 20 << 20;
    for io in io_methods() {
        let site = common::site();
        let path = site.root.join("large.bin");
        let content = pattern(SIZE, 13);
        std::fs::write(&path, &content).unwrap();
        let tern = Tern::start(&site.root, io, "", &[]);
        let mut s = TcpStream::connect(tern.addr).unwrap();
        send_get(&mut s, "/large.bin");
        // Take the first MiB, then let the server fill the socket.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut first = vec![0u8; 1 << 20];
        s.read_exact(&mut first).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(CUT as u64).unwrap();
        let start = Instant::now();
        let mut rest = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let closed = match s.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        let elapsed = start.elapsed();
        assert!(closed, "{io}: the connection closes");
        assert!(elapsed < Duration::from_secs(2), "{io}: closed after {elapsed:?}, not at once");
        first.extend_from_slice(&rest);
        let head_end = find(&first, b"\r\n\r\n").unwrap() + 4;
        let body = &first[head_end..];
        assert!(find(&first[..head_end], format!("Content-Length: {SIZE}\r\n").as_bytes()).is_some());
        assert!(body.len() <= CUT, "{io}: {} body bytes, more than the file holds", body.len());
        assert!(body == &content[..body.len()], "{io}: the bytes sent are the file's");
        drop(s);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !tern.stderr.lock().unwrap().contains("/large.bin shrank") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = tern.stderr.lock().unwrap().clone();
        assert!(log.contains("file /large.bin shrank while sent"), "{io}: the error log names the file: {log}");
    }
}

#[test]
fn a_file_shrunk_between_keep_alive_requests_is_served_as_it_is_now() {
    for io in io_methods() {
        let site = common::site();
        let path = site.root.join("shrinks.bin");
        let before = pattern(100_000, 7);
        std::fs::write(&path, &before).unwrap();
        // The default open_file_valid (1 s): the second request comes well
        // within it.
        let tern = Tern::start(&site.root, io, "", &[]);
        let mut s = TcpStream::connect(tern.addr).unwrap();
        send_get(&mut s, "/shrinks.bin");
        let first = read_response(&mut s, Duration::from_secs(10));
        assert_eq!(first.body, before, "{io}");
        let after = pattern(50_000, 8);
        rewrite(&path, &after);
        send_get(&mut s, "/shrinks.bin");
        let second = read_response(&mut s, Duration::from_secs(2));
        assert!(!second.cut, "{io}: the response is complete");
        assert_eq!(second.content_length(), after.len(), "{io}: Content-Length of the file as it is now");
        assert!(second.body == after, "{io}: the new bytes");
        assert_ne!(first.header("etag"), second.header("etag"), "{io}: a new ETag");
    }
}

#[test]
fn a_file_rewritten_in_place_never_reuses_a_strong_etag() {
    for io in io_methods() {
        let site = common::site();
        let path = site.root.join("page.html");
        std::fs::write(&path, "start").unwrap();
        let tern = Tern::start(&site.root, io, "", &[]);
        let mut s = TcpStream::connect(tern.addr).unwrap();
        let mut seen: HashMap<String, Vec<u8>> = HashMap::new();
        for i in 0..40usize {
            // Sizes differ per round and stay below the compression
            // threshold's concern: identity is what is checked here.
            let body = pattern(2_000 + i * 37, i as u64 + 100);
            rewrite(&path, &body);
            send_get(&mut s, "/page.html");
            let got = read_response(&mut s, Duration::from_secs(5));
            assert!(!got.cut, "{io} round {i}: complete");
            assert_eq!(got.content_length(), body.len(), "{io} round {i}: Content-Length");
            assert!(got.body == body, "{io} round {i}: the bytes just written");
            let etag = got.header("etag").expect("ETag").to_string();
            assert!(etag.starts_with('"'), "{io}: a strong ETag");
            if let Some(earlier) = seen.insert(etag.clone(), got.body.clone()) {
                assert!(earlier == got.body, "{io} round {i}: ETag {etag} labels two different bodies");
            }
        }
    }
}
