//! The reverse-proxy tests' upstreams (`tests/upstreams/`, started by
//! `common::upstream`), checked directly with real clients and no proxy,
//! so that a proxy test that fails blames the proxy, not its fixture.

mod common;

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::upstream::{pattern, sha256_hex, websocket_client, Upstream, RAW_CASES};
use tern_http::chunked::{Chunk, ChunkedDecoder};
use tern_http::{parse_response, Framing, Limits, Parsed, RequestKind};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

/// What the Go and Node upstreams have in common: echo, bytes, sse, count.
fn common_endpoints(up: &Upstream) {
    // Echo: the request as received, the body by length and hash.
    let body = pattern(1 << 20);
    let mut r = agent()
        .post(up.url("/echo/a%20b?x=1&y"))
        .header("X-Twice", "1")
        .header("X-Twice", "2")
        .send(&body[..])
        .unwrap();
    let echo = json(&r.body_mut().read_to_vec().unwrap());
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/echo/a%20b");
    assert_eq!(echo["query"], "x=1&y");
    assert_eq!(echo["uri"], "/echo/a%20b?x=1&y");
    assert_eq!(echo["proto"], "HTTP/1.1");
    assert_eq!(echo["headers"]["x-twice"], serde_json::json!(["1", "2"]));
    assert_eq!(echo["headers"]["host"], serde_json::json!([up.addr().to_string()]));
    assert_eq!(echo["headers"]["content-length"], serde_json::json!([body.len().to_string()]));
    assert_eq!(echo["body_length"], body.len());
    assert_eq!(echo["body_sha256"], sha256_hex(&body));

    let raw = "POST /echo HTTP/1.1\r\nHost: up\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n\
               5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let echo = json(&common::request(up.addr(), raw).body);
    assert_eq!(echo["headers"]["transfer-encoding"], serde_json::json!(["chunked"]));
    assert_eq!((&echo["body_length"], &echo["body_sha256"]), (&11.into(), &sha256_hex(b"hello world").into()));

    // Bytes: the pattern, with a length or chunked, byte-exact.
    for n in [0, 1, 65537, 3 << 20] {
        for chunked in [false, true] {
            let path = format!("/bytes?n={n}&piece=10000{}", if chunked { "&chunked=1" } else { "" });
            let r = common::get(up.addr(), &path, "");
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(r.header("transfer-encoding"), chunked.then_some("chunked"), "{path}");
            assert_eq!(r.header("content-length"), (!chunked).then(|| n.to_string()).as_deref(), "{path}");
            assert!(r.body == pattern(n), "{path}: {} bytes, not the pattern", r.body.len());
        }
    }
    let head = common::request(up.addr(), "HEAD /bytes?n=5 HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n");
    assert_eq!((head.header("content-length"), head.body.len()), (Some("5"), 0));

    // Server-sent events, each as it is written.
    let mut s = TcpStream::connect(up.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /sse?n=4&every=150ms HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n").unwrap();
    let start = Instant::now();
    let (mut received, mut arrivals) = (Vec::new(), Vec::new());
    let mut buf = [0; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        received.extend_from_slice(&buf[..n]);
        let events = String::from_utf8_lossy(&received).matches("\n\n").count();
        arrivals.resize(events, start.elapsed());
    }
    let text = String::from_utf8_lossy(&received);
    assert!(text.to_ascii_lowercase().contains("content-type: text/event-stream"), "{text}");
    assert!((1..=4).all(|i| text.contains(&format!("id: {i}\ndata: event {i}\n\n"))), "{text}");
    assert_eq!(arrivals.len(), 4, "{text}");
    assert!(arrivals[3] - arrivals[0] >= Duration::from_millis(400), "events not paced: {arrivals:?}");
    assert!(arrivals[0] < Duration::from_millis(400), "the first event held back: {arrivals:?}");

    // Count: requests received per method and path.
    for method in ["POST", "POST", "GET"] {
        let raw =
            format!("{method} /echo/counted HTTP/1.1\r\nHost: up\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assert_eq!(common::request(up.addr(), &raw).status, 200);
    }
    assert_eq!((up.count("POST", "/echo/counted"), up.count("GET", "/echo/counted")), (2, 1));
    assert_eq!(up.count("GET", "/count"), 0);
}

#[test]
fn go_upstream_common_endpoints() -> io::Result<()> {
    common_endpoints(&Upstream::go()?);
    Ok(())
}

#[test]
fn node_upstream_common_endpoints() -> io::Result<()> {
    common_endpoints(&Upstream::node()?);
    Ok(())
}

#[test]
fn go_upstream_status_delay_and_fields() -> io::Result<()> {
    let up = Upstream::go()?;
    let r = common::get(up.addr(), "/status/503", "");
    assert_eq!((r.status, r.body.as_slice()), (503, &b"status 503\n"[..]));
    assert_eq!(common::get(up.addr(), "/status/204", "").body, b"");
    // A 1xx is an interim response before the final one.
    let raw = common::exchange(
        up.addr(),
        b"GET /status/103 HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_eq!(common::statuses(&raw), [103, 200]);
    assert!(raw.starts_with(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>"));

    // Not common::get: Go takes a half-closed connection for a client gone,
    // and cancels the delay.
    let start = Instant::now();
    let mut s = TcpStream::connect(up.addr())?;
    s.write_all(b"GET /echo?delay=300ms&header=X-Extra:%20yes&header=Keep-Alive:%20timeout=9 HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n")?;
    let r = &common::parse_responses(&common::read_until_close(&mut s), &[false])[0];
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!((r.status, r.header("x-extra"), r.header("keep-alive")), (200, Some("yes"), Some("timeout=9")));
    Ok(())
}

/// Does tern's strict parser refuse `response` (its head, its chunked
/// body, or a body cut short of its length)?
fn refused(response: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let head = match parse_response(response, &Limits::default(), &mut fields, RequestKind::Plain) {
        Err(_) => return true,
        Ok(Parsed::Partial) => return true,
        Ok(Parsed::Complete(head)) => head,
    };
    let body = &response[head.head_len..];
    match head.framing {
        Framing::Length(n) => (body.len() as u64) < n,
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut at = 0;
            loop {
                match decoder.decode(&body[at..]) {
                    Err(_) | Ok((_, Chunk::NeedMore)) => return true,
                    Ok((_, Chunk::Done)) => return false,
                    Ok((n, Chunk::Data(_))) => at += n,
                }
            }
        }
        _ => false,
    }
}

#[test]
fn go_upstream_writes_each_malformed_response() -> io::Result<()> {
    let up = Upstream::go()?;
    for good in ["/bytes?n=5&chunked=1", "/bytes?n=5"] {
        let request = format!("GET {good} HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n");
        let raw = common::exchange(up.addr(), request.as_bytes(), Duration::from_secs(5));
        assert!(!refused(&raw), "{good} is refused: {:?}", String::from_utf8_lossy(&raw));
    }
    for case in RAW_CASES {
        let request = format!("GET /raw?case={case} HTTP/1.1\r\nHost: up\r\n\r\n");
        let (raw, closed) = common::exchange_until_close(up.addr(), request.as_bytes(), Duration::from_secs(5));
        assert!(closed, "{case}: the connection stays open");
        assert!(raw.starts_with(b"HTTP/1.1 200") || raw.starts_with(b"HTTP/1.1 2000"), "{case}: {raw:?}");
        assert!(refused(&raw), "{case} is accepted: {:?}", String::from_utf8_lossy(&raw));
    }
    let r = common::get(up.addr(), "/raw?case=none", "");
    assert_eq!(r.status, 404);
    let listed: Vec<&str> =
        std::str::from_utf8(&r.body).unwrap().trim().trim_start_matches("cases: ").split(' ').collect();
    let mut known = RAW_CASES.to_vec();
    known.sort();
    assert_eq!(listed, known, "RAW_CASES and the Go upstream's cases differ");
    Ok(())
}

#[test]
fn go_upstream_upgrade_echoes_bytes_and_half_close() -> io::Result<()> {
    let up = Upstream::go()?;
    let mut s = TcpStream::connect(up.addr())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /upgrade HTTP/1.1\r\nHost: up\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nfirst")?;
    let head = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";
    let mut got = vec![0; head.len() + 5];
    s.read_exact(&mut got)?;
    assert_eq!(got, [&head[..], b"first"].concat());
    s.write_all(b"second")?;
    let mut got = [0; 6];
    s.read_exact(&mut got)?;
    assert_eq!(&got, b"second");
    // Our half-close is answered by the upstream's.
    s.shutdown(Shutdown::Write)?;
    assert_eq!(s.read(&mut got)?, 0);

    let r = common::get(up.addr(), "/upgrade", "");
    assert_eq!((r.status, r.header("upgrade")), (426, Some("echo")));
    Ok(())
}

#[test]
fn go_upstream_restarts_on_its_port() -> io::Result<()> {
    let mut up = Upstream::go()?;
    let addr = up.addr();
    assert_eq!(common::get(addr, "/echo", "").status, 200);
    assert_eq!(up.count("GET", "/echo"), 1);
    up.kill();
    assert!(TcpStream::connect(addr).is_err());
    up.restart()?;
    assert_eq!(up.addr(), addr);
    assert_eq!(up.count("GET", "/echo"), 0);
    assert_eq!(common::get(addr, "/echo", "").status, 200);
    Ok(())
}

#[test]
fn python_http_server_answers_http10_and_closes() -> io::Result<()> {
    let root = tempfile::tempdir()?;
    let body = pattern(100_000);
    std::fs::write(root.path().join("file.bin"), &body)?;
    let up = Upstream::python_http(root.path())?;
    let request = b"GET /file.bin HTTP/1.1\r\nHost: up\r\n\r\n";
    let (raw, closed) = common::exchange_until_close(up.addr(), request, Duration::from_secs(5));
    assert!(closed && raw.starts_with(b"HTTP/1.0 200 OK\r\n"), "{:?}", String::from_utf8_lossy(&raw[..100]));
    let r = &common::parse_responses(&raw, &[false])[0];
    assert_eq!(r.header("content-length"), Some("100000"));
    assert!(r.body == body);
    Ok(())
}

#[test]
fn websocket_echo_server_and_client() -> io::Result<()> {
    let up = Upstream::websocket()?;
    let messages = ["hello", "binary:0", "two words", "binary:1000000"];
    assert_eq!(websocket_client(&format!("ws://{}/any/path", up.addr()), &messages)?, messages);
    Ok(())
}
