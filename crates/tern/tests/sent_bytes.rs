//! `bytes_sent` in `/_tern/status` and `tern_sent_bytes_total` in
//! `/metrics` count every byte a client receives: heads, files by each I/O
//! method, ranges, compressed bodies, CGI output, error pages, `100
//! Continue` — checked against the bytes real clients read.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{find, io_methods, read_until_close, Tern};

/// Sends one request on its own connection (`Connection: close`) and reads
/// the whole answer, as the server wrote it to the socket.
fn fetch(addr: SocketAddr, request: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let got = read_until_close(&mut s);
    assert!(got.starts_with(b"HTTP/1.1 "), "{request:?} got {:?}", String::from_utf8_lossy(&got));
    got
}

fn get(addr: SocketAddr, path: &str, fields: &str) -> Vec<u8> {
    fetch(addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{fields}\r\n"))
}

fn body(response: &[u8]) -> &[u8] {
    &response[find(response, b"\r\n\r\n").unwrap() + 4..]
}

/// The status page's `bytes_sent`, and the whole response that carried it.
fn bytes_sent(addr: SocketAddr) -> (u64, usize) {
    let r = get(addr, "/_tern/status", "");
    let json: serde_json::Value = serde_json::from_slice(body(&r)).unwrap();
    (json["bytes_sent"].as_u64().unwrap(), r.len())
}

#[test]
fn sent_bytes_equal_what_clients_received() {
    let site = common::site();
    let text: String = (0..400).map(|i| format!("line {i} of a compressible page\n")).collect();
    std::fs::write(site.root.join("page.txt"), &text).unwrap();
    let cgi = site.root.join("cgi-bin");
    std::fs::create_dir(&cgi).unwrap();
    // 30,000 bytes of output without a length: relayed chunked.
    std::fs::write(
        cgi.join("out.sh"),
        "printf 'Content-Type: text/plain\\n\\n'\nhead -c 30000 /dev/zero | tr '\\0' x\n",
    )
    .unwrap();
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, "", &[]);
        let addr = tern.addr;
        let (before, first_status) = bytes_sent(addr);
        let mut received = first_status as u64;
        let mut gzipped = 0;
        for _ in 0..3 {
            for (path, fields) in [
                ("/big.bin", ""),
                ("/big.bin", "Range: bytes=1000-200000\r\n"),
                ("/small.txt", ""),
                ("/", ""),
                ("/page.txt", "Accept-Encoding: gzip\r\n"),
                ("/page.txt", "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n"),
                ("/missing", ""),
                ("/cgi-bin/out.sh", ""),
            ] {
                let r = get(addr, path, fields);
                gzipped += usize::from(find(&r, b"Content-Encoding: gzip\r\n").is_some());
                received += r.len() as u64;
            }
            let post = "POST /cgi-bin/out.sh HTTP/1.1\r\nHost: t\r\nConnection: close\r\nExpect: 100-continue\r\n\
                        Content-Length: 5\r\n\r\nhello";
            received += fetch(addr, post).len() as u64;
            received += fetch(addr, "HEAD /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").len() as u64;
            received += fetch(addr, "GET / HTTP/1.1\r\nHost: \r\nHost: twice\r\n\r\n").len() as u64;
        }
        assert!(gzipped >= 1, "{io}: no compressed response was sent");
        assert!(received > 3 * (3 << 20), "{io}: {received}");
        let (after, second_status) = bytes_sent(addr);
        assert_eq!(after - before, received, "{io}: bytes_sent moved by {} for {received} received", after - before);
        let metrics = get(addr, "/metrics", "");
        let total = String::from_utf8_lossy(body(&metrics))
            .lines()
            .find_map(|l| l.strip_prefix("tern_sent_bytes_total ").map(|v| v.parse::<u64>().unwrap()))
            .expect("tern_sent_bytes_total");
        assert_eq!(total, after + second_status as u64, "{io}");
    }
}
