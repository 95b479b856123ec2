//! The reverse proxy end to end: a real `tern` in front of real upstreams
//! started by each test (`common::upstream`: the Go and Node servers
//! written for the tests, Python's `http.server`, a python3-websockets echo
//! server, and tern itself, over HTTP and HTTPS). What crosses (every
//! header rule, bodies both ways byte for byte, events as they come), what
//! memory a slow reader costs, what happens when servers die, come back,
//! answer garbage or are left by their client, and what the status page
//! and `tern route` say of it.

mod common;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::upstream::{pattern, sha256_hex, websocket_client, Upstream, RAW_CASES};
use common::{parse_head, Tern};
use serde_json::Value;
use sha2::{Digest, Sha256};

const MIB: usize = 1024 * 1024;

/// Starts tern with top-level sections `upstreams` (`[upstream.NAME]` and
/// any other) and one default site made of `locations`
/// (`[[site.location]]` sections).
fn proxy(upstreams: &str, locations: &str) -> (Tern, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let config =
        format!("[limits]\nmax_body_bytes = \"200MiB\"\n\n{upstreams}\n[[site]]\ndefault = true\n\n{locations}\n");
    (Tern::start(root.path(), "auto", &config, &[]), root)
}

/// `[upstream.NAME]` with `servers` and further keys.
fn upstream(name: &str, servers: &[SocketAddr], keys: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("{{ address = \"{a}\" }}")).collect();
    format!("[upstream.{name}]\nservers = [{}]\n{keys}\n", list.join(", "))
}

/// A `[[site.location]]` sending `prefix` to group `name`.
fn location(prefix: &str, name: &str) -> String {
    format!("[[site.location]]\nprefix = \"{prefix}\"\nproxy = \"{name}\"\n")
}

/// One group `app` of `servers` (with `keys`) behind every path.
fn proxy_to(servers: &[SocketAddr], keys: &str) -> (Tern, tempfile::TempDir) {
    proxy(&upstream("app", servers, keys), &location("/", "app"))
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

/// Group `name`'s servers on the status page: address, up, active, open.
fn servers(tern: &Tern, name: &str) -> Vec<Value> {
    tern.status()["upstreams"][name]["servers"].as_array().expect("the group on the status page").clone()
}

/// Server `i` of group `name`'s pool on the status page (under
/// `fastcgi.backends`, as `upstream NAME/I`).
fn pool(tern: &Tern, name: &str, i: usize) -> Value {
    tern.status()["fastcgi"]["backends"][format!("upstream {name}/{i}")].clone()
}

/// Waits up to `limit` for `check`, polling.
fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    check()
}

/// A client connection kept alive across requests, reading each response
/// as its framing says.
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

/// A response's status and fields (names lower-cased).
struct Head {
    status: u16,
    fields: Vec<(String, String)>,
}

impl Head {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { s, buf: Vec::new() }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// More bytes into the buffer; false at the end of the stream.
    fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 65536];
        let n = self.s.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// The next `\r\n`-ended line, without its ending.
    fn line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(at) = common::find(&self.buf, b"\r\n") {
                let line = self.buf[..at].to_vec();
                self.buf.drain(..at + 2);
                return Ok(line);
            }
            if !self.fill()? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Reads one response (an interim one too), its body handed to `sink`
    /// piece by piece.
    fn read_into(&mut self, head_request: bool, sink: &mut dyn FnMut(&[u8])) -> io::Result<Head> {
        let end = loop {
            if let Some(at) = common::find(&self.buf, b"\r\n\r\n") {
                break at;
            }
            if !self.fill()? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        };
        let (status, fields) = parse_head(std::str::from_utf8(&self.buf[..end]).unwrap());
        self.buf.drain(..end + 4);
        let head = Head { status, fields };
        if head_request || status < 200 || status == 204 || status == 304 {
            return Ok(head);
        }
        if head.field("transfer-encoding") == Some("chunked") {
            loop {
                let line = self.line()?;
                let size = usize::from_str_radix(std::str::from_utf8(&line).unwrap(), 16).unwrap();
                if size == 0 {
                    assert_eq!(self.line()?, b"", "trailer fields");
                    return Ok(head);
                }
                self.copy(size, sink)?;
                assert_eq!(self.line()?, b"", "a chunk's end");
            }
        }
        match head.field("content-length") {
            Some(n) => self.copy(n.parse().unwrap(), sink)?,
            None => loop {
                sink(&self.buf);
                self.buf.clear();
                if !self.fill()? {
                    break;
                }
            },
        }
        Ok(head)
    }

    /// `n` bytes of body to `sink`.
    fn copy(&mut self, mut n: usize, sink: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && !self.fill()? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let k = n.min(self.buf.len());
            sink(&self.buf[..k]);
            self.buf.drain(..k);
            n -= k;
        }
        Ok(())
    }

    /// Reads one response whole.
    fn read(&mut self, head_request: bool) -> io::Result<(Head, Vec<u8>)> {
        let mut body = Vec::new();
        let head = self.read_into(head_request, &mut |b| body.extend_from_slice(b))?;
        Ok((head, body))
    }

    /// `GET path` with extra header lines, and its response.
    fn get(&mut self, path: &str, fields: &str) -> io::Result<(Head, Vec<u8>)> {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: proxy.test\r\n{fields}\r\n").as_bytes());
        self.read(false)
    }
}

/// The Go upstream's `/echo` of a request sent through `tern`.
fn echo(tern: &Tern, raw: &str) -> Value {
    let mut c = Client::connect(tern.addr);
    c.send(raw.as_bytes());
    let (head, body) = c.read(false).unwrap();
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    json(&body)
}

/// The values the upstream saw of field `name` (none: `Null`).
fn seen<'a>(echo: &'a Value, name: &str) -> &'a Value {
    &echo["headers"][name]
}

#[test]
fn request_fields_cross_by_the_rules() -> io::Result<()> {
    let up = Upstream::go()?;
    let servers = [up.addr()];
    let upstreams = format!(
        "{}{}",
        upstream("app", &servers, ""),
        upstream("edge", &servers, "trusted_proxies = [\"127.0.0.0/8\"]")
    );
    let locations = format!(
        "{}{}[[site.location]]\nexact = \"/echo/by-group\"\nproxy = \"app\"\nproxy_host = \"upstream\"\n\n\
         [[site.location]]\nexact = \"/echo/by-name\"\nproxy = \"app\"\nproxy_host = \"backend.internal:8080\"\n",
        location("/", "app"),
        location("/echo/trusted", "edge")
    );
    let (tern, _root) = proxy(&upstreams, &locations);

    // Hop-by-hop fields stay on the client's hop: those `Connection` names
    // too, but `TE: trailers`, which goes on (tern passes trailer fields);
    // a body arrives with its length whatever its framing was.
    let hops = "Connection: keep-alive, X-Private\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n\
                Trailer: X-Sum\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\n\
                Upgrade: h2c\r\nX-Kept: yes\r\n";
    let e = echo(
        &tern,
        &format!(
            "POST /echo/hops?q=1 HTTP/1.1\r\nHost: shop.example\r\n{hops}Transfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\n\r\n"
        ),
    );
    for gone in ["x-private", "keep-alive", "trailer", "proxy-authorization", "proxy-connection"] {
        assert_eq!(seen(&e, gone), &Value::Null, "{gone} crossed: {e}");
    }
    assert_eq!(
        (seen(&e, "te"), seen(&e, "connection")),
        (&serde_json::json!(["trailers"]), &serde_json::json!(["te"]))
    );
    assert_eq!((seen(&e, "upgrade"), seen(&e, "transfer-encoding")), (&Value::Null, &Value::Null), "{e}");
    assert_eq!(seen(&e, "x-kept"), &serde_json::json!(["yes"]));
    assert_eq!(seen(&e, "content-length"), &serde_json::json!(["5"]));
    assert_eq!((&e["body_sha256"], &e["uri"]), (&sha256_hex(b"hello").into(), &"/echo/hops?q=1".into()));
    assert_eq!(e["proto"], "HTTP/1.1");

    // `Expect` is answered by tern, which has the body before it calls.
    let mut c = Client::connect(tern.addr);
    c.send(b"PUT /echo/expect HTTP/1.1\r\nHost: shop.example\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(c.read(false)?.0.status, 100);
    c.send(b"hello");
    let (head, body) = c.read(false)?;
    let e = json(&body);
    assert_eq!((head.status, seen(&e, "expect"), &e["method"]), (200, &Value::Null, &"PUT".into()));
    assert_eq!(e["body_sha256"], sha256_hex(b"hello"));

    // An untrusted client's forwarding fields are replaced, not extended.
    let claims = "X-Forwarded-For: 10.9.9.9\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.example\r\n\
                  Forwarded: for=10.9.9.9;proto=https\r\nVia: 1.1 edge\r\n";
    let e = echo(&tern, &format!("GET /echo/plain HTTP/1.1\r\nHost: shop.example\r\n{claims}\r\n"));
    assert_eq!(seen(&e, "host"), &serde_json::json!(["shop.example"]), "Host passed");
    assert_eq!(seen(&e, "x-forwarded-for"), &serde_json::json!(["127.0.0.1"]));
    assert_eq!(seen(&e, "x-forwarded-proto"), &serde_json::json!(["http"]));
    assert_eq!(seen(&e, "x-forwarded-host"), &serde_json::json!(["shop.example"]));
    assert_eq!(seen(&e, "forwarded"), &serde_json::json!(["for=127.0.0.1;host=shop.example;proto=http"]));
    // Via is a record of every hop: extended whoever sent it.
    assert_eq!(seen(&e, "via"), &serde_json::json!(["1.1 edge, 1.1 tern"]));

    // A trusted proxy's are kept and extended.
    let e = echo(&tern, &format!("GET /echo/trusted HTTP/1.1\r\nHost: shop.example\r\n{claims}\r\n"));
    assert_eq!(seen(&e, "x-forwarded-for"), &serde_json::json!(["10.9.9.9, 127.0.0.1"]));
    assert_eq!(seen(&e, "x-forwarded-proto"), &serde_json::json!(["https"]));
    assert_eq!(seen(&e, "x-forwarded-host"), &serde_json::json!(["evil.example"]));
    assert_eq!(
        seen(&e, "forwarded"),
        &serde_json::json!(["for=10.9.9.9;proto=https, for=127.0.0.1;host=shop.example;proto=http"])
    );
    // Without forwarding fields of its own, a trusted client is the first hop.
    let e = echo(&tern, "GET /echo/trusted HTTP/1.0\r\nHost: shop.example:81\r\n\r\n");
    assert_eq!(seen(&e, "x-forwarded-for"), &serde_json::json!(["127.0.0.1"]));
    assert_eq!(seen(&e, "forwarded"), &serde_json::json!(["for=127.0.0.1;host=\"shop.example:81\";proto=http"]));
    assert_eq!((seen(&e, "via"), &e["proto"]), (&serde_json::json!(["1.0 tern"]), &"HTTP/1.1".into()));

    // Host: the client's, the group's name, or the location's.
    let e = echo(&tern, "GET /echo/by-group HTTP/1.1\r\nHost: shop.example\r\n\r\n");
    assert_eq!(seen(&e, "host"), &serde_json::json!(["app"]));
    assert_eq!(seen(&e, "x-forwarded-host"), &serde_json::json!(["shop.example"]));
    let e = echo(&tern, "GET /echo/by-name HTTP/1.1\r\nHost: shop.example\r\n\r\n");
    assert_eq!(seen(&e, "host"), &serde_json::json!(["backend.internal:8080"]));
    Ok(())
}

#[test]
fn response_fields_cross_by_the_rules() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = proxy_to(&[up.addr()], "");
    let mut c = Client::connect(tern.addr);
    let fields = [
        "Connection:X-Private",
        "X-Private:secret",
        "Keep-Alive:timeout=99",
        "Proxy-Authenticate:Basic",
        "Trailer:X-Sum",
        "Upgrade:h2c",
        "X-Kept:yes",
        "Server:go-upstream",
    ];
    let query: Vec<String> = fields.iter().map(|f| format!("header={}", f.replace(' ', "%20"))).collect();
    let (head, body) = c.get(&format!("/bytes?n=10&{}", query.join("&")), "")?;
    assert_eq!((head.status, body), (200, pattern(10)));
    for gone in ["x-private", "keep-alive", "proxy-authenticate", "trailer", "upgrade"] {
        assert_eq!(head.field(gone), None, "{gone} crossed: {:?}", head.fields);
    }
    assert_eq!(head.field("x-kept"), Some("yes"));
    // The connection's fields are tern's own: its Server, its framing, and
    // the connection kept alive whatever the upstream's said.
    assert_eq!((head.field("server"), head.field("connection")), (Some("tern"), None));
    assert_eq!(head.field("content-length"), Some("10"));
    let (head, body) = c.get("/bytes?n=3&chunked=1", "")?;
    assert_eq!((head.status, head.field("transfer-encoding"), body), (200, Some("chunked"), pattern(3)));
    Ok(())
}

/// POSTs `n` bytes of the pattern to `/echo` (chunked or with a length)
/// and checks what the upstream received.
fn upload(tern: &Tern, n: usize, chunked: bool) {
    let body = pattern(n);
    let mut c = Client::connect(tern.addr);
    let framing = if chunked { "Transfer-Encoding: chunked".to_string() } else { format!("Content-Length: {n}") };
    c.send(format!("POST /echo/upload HTTP/1.1\r\nHost: proxy.test\r\n{framing}\r\n\r\n").as_bytes());
    if chunked {
        for piece in body.chunks(MIB + 7) {
            c.send(format!("{:x}\r\n", piece.len()).as_bytes());
            c.send(piece);
            c.send(b"\r\n");
        }
        c.send(b"0\r\n\r\n");
    } else {
        c.send(&body);
    }
    let (head, reply) = c.read(false).unwrap();
    assert_eq!(head.status, 200, "{n} bytes up: {}", String::from_utf8_lossy(&reply));
    let e = json(&reply);
    assert_eq!(e["body_length"], n, "{n} bytes up (chunked: {chunked})");
    assert_eq!(e["body_sha256"], sha256_hex(&body), "{n} bytes up (chunked: {chunked})");
}

/// GETs `n` bytes of the pattern from `/bytes` (sent chunked or with a
/// length) and checks them, hashed as they come.
fn download(tern: &Tern, n: usize, chunked: bool) {
    let mut c = Client::connect(tern.addr);
    let query = if chunked { "&chunked=1" } else { "" };
    let mut sha = Sha256::new();
    let mut got = 0;
    c.send(format!("GET /bytes?n={n}{query} HTTP/1.1\r\nHost: proxy.test\r\n\r\n").as_bytes());
    let head = c
        .read_into(false, &mut |b| {
            got += b.len();
            sha.update(b);
        })
        .unwrap();
    assert_eq!(head.status, 200);
    let framing = (head.field("content-length").map(str::to_string), head.field("transfer-encoding"));
    assert_eq!(framing, if chunked { (None, Some("chunked")) } else { (Some(n.to_string()), None) });
    assert_eq!(got, n, "{n} bytes down (chunked: {chunked})");
    let digest: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, sha256_hex(&pattern(n)), "{n} bytes down (chunked: {chunked})");
}

#[test]
fn bodies_cross_both_ways_byte_exact() -> io::Result<()> {
    let (go, node) = (Upstream::go()?, Upstream::node()?);
    let (tern_go, _a) = proxy_to(&[go.addr()], "");
    let (tern_node, _b) = proxy_to(&[node.addr()], "");
    for n in [0, 1, 65_537, 3 * MIB + 5, 100 * MIB] {
        for chunked in [false, true] {
            upload(&tern_go, n, chunked);
            download(&tern_go, n, chunked);
        }
    }
    for n in [0, 1, 65_537, 3 * MIB + 5] {
        for chunked in [false, true] {
            upload(&tern_node, n, chunked);
            download(&tern_node, n, chunked);
        }
    }
    // Many responses on one kept-alive connection, both ways.
    let mut c = Client::connect(tern_go.addr);
    for i in 0..20 {
        let (head, body) = c.get(&format!("/bytes?n={}", i * 1000), "")?;
        assert_eq!((head.status, body), (200, pattern(i * 1000)));
    }
    let pool = pool(&tern_go, "app", 0);
    assert!(pool["reused"].as_u64().unwrap() >= 20, "the upstream connection is not reused: {pool}");
    Ok(())
}

#[test]
fn an_http10_upstream_and_a_body_ended_by_closing() -> io::Result<()> {
    let files = tempfile::tempdir()?;
    let file = pattern(200_000);
    std::fs::write(files.path().join("file.bin"), &file)?;
    // A CGI program whose output http.server sends as it is: no length,
    // the end of the body is the end of the connection.
    let cgi = files.path().join("cgi-bin");
    std::fs::create_dir(&cgi)?;
    let program = cgi.join("pattern.py");
    std::fs::write(
        &program,
        "#!/usr/bin/python3\nimport sys\nsys.stdout.write('Content-Type: application/octet-stream\\r\\n\\r\\n')\n\
         sys.stdout.flush()\nsys.stdout.buffer.write(bytes(i % 251 for i in range(300000)))\n",
    )?;
    for path in [files.path(), &cgi, &program] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    let up = Upstream::python_http(files.path())?;
    let (tern, _root) = proxy_to(&[up.addr()], "");
    let mut c = Client::connect(tern.addr);
    for _ in 0..3 {
        let (head, body) = c.get("/file.bin", "")?;
        assert_eq!((head.status, head.field("content-length")), (200, Some("200000")));
        assert!(body == file, "the file differs");
        // Relayed in the client's framing: chunked to an HTTP/1.1 client.
        let (head, body) = c.get("/cgi-bin/pattern.py", "")?;
        assert_eq!((head.status, head.field("transfer-encoding")), (200, Some("chunked")), "{:?}", head.fields);
        assert!(body == pattern(300_000), "the program's output differs ({} bytes)", body.len());
    }
    // An HTTP/1.0 client gets it ended by closing too.
    let r = common::request(tern.addr, "GET /cgi-bin/pattern.py HTTP/1.0\r\n\r\n");
    assert!(r.status == 200 && r.body == pattern(300_000), "{} bytes", r.body.len());
    // A server that closes after each response is never reused.
    let pool = pool(&tern, "app", 0);
    assert_eq!(
        (pool["reused"].as_u64(), pool["connects"].as_u64(), pool["open"].as_u64()),
        (Some(0), Some(7), Some(0))
    );
    Ok(())
}

/// A server on a thread of the test: for each connection, reads a request
/// head and answers `response`, then closes at once.
fn answering_server(response: &'static [u8]) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in listener.incoming().map_while(Result::ok) {
            let mut head = Vec::new();
            let mut buf = [0; 4096];
            while common::find(&head, b"\r\n\r\n").is_none() {
                match s.read(&mut buf) {
                    Ok(n @ 1..) => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let _ = s.write_all(response);
        }
    });
    addr
}

#[test]
fn a_body_ended_by_closing_ends_when_the_server_closes() -> io::Result<()> {
    // The last bytes and the end of the stream come together, in one
    // readiness report: the end must not wait for another.
    let server = answering_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe body, then the end");
    let (tern, _root) = proxy_to(&[server], "read_timeout = \"10s\"");
    let mut c = Client::connect(tern.addr);
    for _ in 0..20 {
        let start = Instant::now();
        let (head, body) = c.get("/", "")?;
        assert_eq!((head.status, body.as_slice()), (200, &b"the body, then the end"[..]));
        assert!(start.elapsed() < Duration::from_secs(2), "the response took {:?}", start.elapsed());
    }
    Ok(())
}

#[test]
fn tern_behind_tern() -> io::Result<()> {
    let site = common::site();
    let origin = Tern::start(&site.root, "auto", "", &[]);
    let (tern, _root) = proxy_to(&[origin.addr], "");
    let mut c = Client::connect(tern.addr);
    let (head, body) = c.get("/big.bin", "")?;
    assert_eq!(head.status, 200);
    assert!(body == site.big, "big.bin differs");
    let etag = head.field("etag").expect("the origin's ETag").to_string();
    let (head, body) = c.get("/big.bin", &format!("If-None-Match: {etag}\r\n"))?;
    assert_eq!((head.status, body.len()), (304, 0));
    let (head, body) = c.get("/big.bin", "Range: bytes=10-19\r\n")?;
    assert_eq!((head.status, head.field("content-range")), (206, Some("bytes 10-19/3145745")));
    assert_eq!(body, &site.big[10..20]);
    c.send(b"HEAD /small.txt HTTP/1.1\r\nHost: proxy.test\r\n\r\n");
    let (head, body) = c.read(true)?;
    assert_eq!((head.status, head.field("content-length"), body.len()), (200, Some("1000"), 0));
    let (head, _) = c.get("/missing", "")?;
    assert_eq!(head.status, 404);
    let (head, body) = c.get("/small.txt", "")?;
    assert_eq!((head.status, body), (200, site.small.clone()));
    Ok(())
}

#[test]
fn server_sent_events_arrive_one_by_one() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = proxy_to(&[up.addr()], "");
    let every = Duration::from_millis(300);
    let mut s = TcpStream::connect(tern.addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let start = Instant::now();
    s.write_all(b"GET /sse?n=5&every=300ms HTTP/1.1\r\nHost: proxy.test\r\nConnection: close\r\n\r\n")?;
    let (mut received, mut arrivals) = (Vec::new(), Vec::new());
    let mut buf = [0; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        received.extend_from_slice(&buf[..n]);
        let events = String::from_utf8_lossy(&received).matches("\n\n").count();
        arrivals.resize(events, start.elapsed());
    }
    let text = String::from_utf8_lossy(&received);
    assert!(text.contains("Content-Type: text/event-stream"), "{text}");
    assert!((1..=5).all(|i| text.contains(&format!("id: {i}\ndata: event {i}\n\n"))), "{text}");
    assert_eq!(arrivals.len(), 5, "{text}");
    // Event i (from 0) is sent at i × every: it must have arrived before
    // event i + 1 was sent, so nothing held it back for the next.
    for (i, at) in arrivals.iter().enumerate() {
        assert!(*at < every * (i as u32 + 1), "event {} arrived at {at:?}: {arrivals:?}", i + 1);
    }
    assert!(arrivals[4] >= every * 4, "events not paced: {arrivals:?}");
    Ok(())
}

#[test]
fn interim_responses_100_passed_over_103_relayed() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = proxy_to(&[up.addr()], "");
    let mut c = Client::connect(tern.addr);
    let (head, body) = c.get("/status/100", "")?;
    assert_eq!((head.status, body), (200, b"status 200\n".to_vec()));
    let (head, _) = c.get("/status/103", "")?;
    assert_eq!((head.status, head.field("link")), (103, Some("</style.css>; rel=preload; as=style")));
    let (head, body) = c.read(false)?;
    assert_eq!((head.status, body), (200, b"status 200\n".to_vec()));
    // Not to an HTTP/1.0 client, which knows no interim responses.
    let raw = common::exchange(tern.addr, b"GET /status/103 HTTP/1.0\r\n\r\n", Duration::from_secs(5));
    assert_eq!(common::statuses(&raw), [200]);
    for status in [204, 304, 404, 503] {
        let (head, _) = c.get(&format!("/status/{status}"), "")?;
        assert_eq!(head.status, status);
    }
    Ok(())
}

/// tern's resident memory, in bytes.
fn rss(pid: i32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
}

#[test]
fn a_slow_reader_of_100_mib_costs_tern_a_window_not_the_response() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = proxy_to(&[up.addr()], "");
    download(&tern, 4 * MIB, false);
    let before = rss(tern.pid());
    let n = 100 * MIB;
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.set_recv_buffer_size(64 * 1024)?;
    sock.connect(&tern.addr.into())?;
    let mut c = Client { s: sock.into(), buf: Vec::new() };
    c.s.set_read_timeout(Some(Duration::from_secs(20)))?;
    c.send(format!("GET /bytes?n={n} HTTP/1.1\r\nHost: proxy.test\r\n\r\n").as_bytes());
    // Nothing read for a while: an unbounded proxy would take the whole
    // response from the upstream now (it comes at loopback speed).
    std::thread::sleep(Duration::from_secs(2));
    let mut peak = rss(tern.pid());
    let (mut got, mut pieces) = (0, 0);
    let mut sha = Sha256::new();
    let head = c
        .read_into(false, &mut |b| {
            got += b.len();
            sha.update(b);
            pieces += 1;
            if pieces % 16 == 0 {
                peak = peak.max(rss(tern.pid()));
                std::thread::sleep(Duration::from_millis(4));
            }
        })
        .unwrap();
    assert_eq!((head.status, got), (200, n));
    let digest: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, sha256_hex(&pattern(n)));
    let growth = peak.saturating_sub(before);
    eprintln!("tern's resident memory: {} MiB before, {} MiB at most while relaying", before / MIB, peak / MIB);
    assert!(growth < 64 * MIB, "tern grew by {} MiB reading 100 MiB for a slow client", growth / MIB);
    Ok(())
}

/// A client's outcome: its status, or what went wrong.
type Outcome = Result<u16, String>;

#[test]
fn a_server_killed_and_restarted_under_load_fails_no_get_and_repeats_no_post() -> io::Result<()> {
    let a = Upstream::go()?;
    let mut b = Upstream::go()?;
    let (tern, _root) = proxy_to(&[a.addr(), b.addr()], "fail_after = 2\ndown_for = \"1s\"");
    let stop = Arc::new(AtomicBool::new(false));
    let gets: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let posts: Arc<Mutex<Vec<(String, Outcome)>>> = Arc::default();
    let clients: Vec<_> = (0..4)
        .map(|t| {
            let (stop, gets, posts, addr) = (stop.clone(), gets.clone(), posts.clone(), tern.addr);
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let (path, outcome) = if i % 2 == 0 {
                        c.send(b"GET /echo/get?delay=20ms HTTP/1.1\r\nHost: proxy.test\r\n\r\n");
                        (None, c.read(false))
                    } else {
                        let path = format!("/echo/post-{t}-{i}");
                        let raw = format!(
                            "POST {path}?delay=20ms HTTP/1.1\r\nHost: proxy.test\r\nContent-Length: 4\r\n\r\nbody"
                        );
                        c.send(raw.as_bytes());
                        (Some(path), c.read(false))
                    };
                    let outcome = match outcome {
                        Ok((head, _)) => Ok(head.status),
                        Err(e) => {
                            c = Client::connect(addr);
                            Err(e.to_string())
                        }
                    };
                    match path {
                        None => gets.lock().unwrap().push(outcome),
                        Some(path) => posts.lock().unwrap().push((path, outcome)),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    b.kill();
    std::thread::sleep(Duration::from_secs(3));
    b.restart()?;
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }

    let gets = gets.lock().unwrap();
    let failed: Vec<_> = gets.iter().filter(|o| **o != Ok(200)).collect();
    assert!(failed.is_empty(), "{} of {} GETs failed: {:?}", failed.len(), gets.len(), &failed[..failed.len().min(10)]);
    let (on_a, on_b) = (a.received(), b.received());
    let posts = posts.lock().unwrap();
    let mut answered = 0;
    for (path, outcome) in posts.iter() {
        let key = format!("POST {path}");
        let times = on_a.get(&key).unwrap_or(&0) + on_b.get(&key).unwrap_or(&0);
        assert!(times <= 1, "{path} was received {times} times ({outcome:?})");
        if *outcome == Ok(200) {
            answered += 1;
            assert_eq!(times, 1, "{path} was answered 200 but received {times} times");
        }
    }
    assert!(gets.len() > 200 && answered > 200, "too little load: {} GETs, {answered} POSTs", gets.len());
    // The restarted server takes requests again.
    assert!(b.count("GET", "/echo/get") > 0, "no GET reached the restarted server");
    let log = tern.stderr.lock().unwrap().clone();
    let lost = |method: &str| log.matches(&format!("answering \"{method} ")).count();
    eprintln!(
        "{} GETs, {} POSTs ({answered} answered 200); lost mid-exchange: {} GETs, {} POSTs; retried on a fresh \
         connection: {}",
        gets.len(),
        posts.len(),
        lost("GET"),
        lost("POST"),
        pool(&tern, "app", 1)["retried"]
    );
    Ok(())
}

/// `n` GETs of `path` through `tern`, each on its own connection: their
/// statuses.
fn statuses(tern: &Tern, path: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| common::get(tern.addr, path, "").status).collect()
}

/// Whether group `name`'s server `i` is up, as the status page and the
/// `tern_upstream_up` metric both say (read again while a check changes
/// it between the two).
fn is_up(tern: &Tern, name: &str, i: usize) -> bool {
    loop {
        let server = &servers(tern, name)[i];
        let up = server["up"].as_bool().unwrap();
        let metrics = String::from_utf8(common::get(tern.addr, "/metrics", "").body).unwrap();
        let address = server["address"].as_str().unwrap();
        let line = format!("tern_upstream_up{{upstream=\"{name}\",server=\"{address}\"}} ");
        let metric = metrics.lines().find_map(|l| l.strip_prefix(&line)).expect("the server's metric");
        if metric == if up { "1" } else { "0" } && servers(tern, name)[i]["up"] == up {
            return up;
        }
    }
}

#[test]
fn failures_mark_a_server_down_and_a_trial_brings_it_back() -> io::Result<()> {
    let a = Upstream::go()?;
    let mut b = Upstream::go()?;
    let (tern, _root) = proxy_to(&[a.addr(), b.addr()], "fail_after = 2\nfail_window = \"10s\"\ndown_for = \"1s\"");
    assert_eq!(statuses(&tern, "/echo/x", 4), [200; 4]);
    assert!(is_up(&tern, "app", 0) && is_up(&tern, "app", 1));
    assert_eq!(b.count("GET", "/echo/x"), 2, "round robin");
    b.kill();
    // Each failure is retried on the other server; two mark it down.
    assert_eq!(statuses(&tern, "/echo/x", 6), [200; 6]);
    assert!(!is_up(&tern, "app", 1), "{:?}", servers(&tern, "app"));
    assert!(is_up(&tern, "app", 0));
    b.restart()?;
    // Down for a second: passed over, even though it is back.
    assert_eq!(statuses(&tern, "/echo/y", 4), [200; 4]);
    assert_eq!(b.count("GET", "/echo/y"), 0);
    std::thread::sleep(Duration::from_millis(1100));
    // Then one trial request, which succeeds: up again, in the rotation.
    assert_eq!(statuses(&tern, "/echo/z", 6), [200; 6]);
    assert!(is_up(&tern, "app", 1), "{:?}", servers(&tern, "app"));
    assert!(b.count("GET", "/echo/z") >= 2, "{}", b.count("GET", "/echo/z"));
    Ok(())
}

#[test]
fn an_active_check_marks_a_server_down_and_up_without_requests() -> io::Result<()> {
    let a = Upstream::go()?;
    let mut b = Upstream::go()?;
    let check = "fail_after = 100\ncheck = { path = \"/status/204\", interval = \"100ms\", expect = 204 }";
    let (tern, _root) = proxy_to(&[a.addr(), b.addr()], check);
    assert!(eventually(Duration::from_secs(5), || b.count("GET", "/status/204") > 0), "no check arrived");
    assert!(is_up(&tern, "app", 1));
    b.kill();
    assert!(eventually(Duration::from_secs(5), || !is_up(&tern, "app", 1)), "not marked down");
    b.restart()?;
    assert!(eventually(Duration::from_secs(5), || is_up(&tern, "app", 1)), "not marked up");
    assert_eq!(statuses(&tern, "/echo/after", 4), [200; 4]);
    assert_eq!(b.count("GET", "/echo/after"), 2);
    // A check answered with another status fails too.
    let (tern, _root) = proxy_to(&[a.addr()], "check = { path = \"/status/503\", interval = \"100ms\" }");
    assert!(eventually(Duration::from_secs(5), || !is_up(&tern, "app", 0)), "a 503 passes the check");
    Ok(())
}

/// Which of `ups` received `GET path`.
fn owner(ups: &[Upstream], path: &str) -> usize {
    let owners: Vec<usize> = (0..ups.len()).filter(|&i| ups[i].count("GET", path) > 0).collect();
    assert_eq!(owners.len(), 1, "{path} reached servers {owners:?}");
    owners[0]
}

#[test]
fn the_consistent_hash_moves_only_the_keys_of_a_server_that_leaves() -> io::Result<()> {
    let mut ups = vec![Upstream::go()?, Upstream::go()?, Upstream::go()?];
    let addrs: Vec<SocketAddr> = ups.iter().map(Upstream::addr).collect();
    let keys = "balance = \"hash\"\nhash = \"header:X-User\"\nfail_after = 1\ndown_for = \"500ms\"";
    let (tern, _root) = proxy_to(&addrs, keys);
    let users = 240;
    let mut c = Client::connect(tern.addr);
    let mut round = |ups: &[Upstream], name: &str| -> Vec<usize> {
        (0..users)
            .map(|u| {
                let path = format!("/echo/{name}-{u}");
                let (head, _) = c.get(&path, &format!("X-User: user-{u}\r\n")).unwrap();
                assert_eq!(head.status, 200, "{path}");
                owner(ups, &path)
            })
            .collect()
    };
    let first = round(&ups, "first");
    let again = round(&ups, "again");
    assert_eq!(first, again, "a key changed servers while the servers stayed");
    let share = |owners: &[usize], s: usize| owners.iter().filter(|&&o| o == s).count();
    for s in 0..3 {
        assert!(
            (users / 5..users / 2).contains(&share(&first, s)),
            "server {s} has {} of {users} keys",
            share(&first, s)
        );
    }
    ups[2].kill();
    let left = round(&ups[..2], "left");
    for u in 0..users {
        if first[u] == 2 {
            assert_ne!(left[u], 2);
        } else {
            assert_eq!(left[u], first[u], "user-{u} moved though its server stayed");
        }
    }
    // The leaver's keys spread over those that stay (its points' successors
    // on the ring), not all onto one.
    let moved: Vec<usize> = (0..users).filter(|&u| first[u] == 2).map(|u| left[u]).collect();
    assert!(share(&moved, 0) > moved.len() / 5 && share(&moved, 1) > moved.len() / 5, "moved keys: {moved:?}");
    // Back after its down time: every key returns to its server.
    ups[2].restart()?;
    std::thread::sleep(Duration::from_millis(600));
    let back = round(&ups, "back");
    assert_eq!(back, first, "keys did not return to the server that came back");
    Ok(())
}

#[test]
fn a_malformed_upstream_response_is_a_502_and_none_of_it_is_relayed() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = proxy_to(&[up.addr()], "fail_after = 1000");
    for case in RAW_CASES {
        let mut c = Client::connect(tern.addr);
        c.send(format!("GET /raw?case={case} HTTP/1.1\r\nHost: proxy.test\r\nConnection: close\r\n\r\n").as_bytes());
        c.s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut all = Vec::new();
        c.s.read_to_end(&mut all).unwrap_or_else(|e| panic!("{case}: the connection stays open: {e}"));
        let text = String::from_utf8_lossy(&all);
        if case == "cut-short" && text.starts_with("HTTP/1.1 200 ") {
            // A body short of its length shows only at the end of the
            // stream, which may come after the head and the bytes before it
            // were relayed (else it is a 502 as the others): then the client
            // is left with the length unmet and the connection closed,
            // never a response that looks whole.
            let end = common::find(&all, b"\r\n\r\n").unwrap();
            let (_, fields) = parse_head(std::str::from_utf8(&all[..end]).unwrap());
            let length = fields.iter().find(|(n, _)| n == "content-length").map(|(_, v)| v.as_str());
            assert_eq!((length, &all[end + 4..]), (Some("100"), &b"hello"[..]), "{text:?}");
            continue;
        }
        assert!(text.starts_with("HTTP/1.1 502 "), "{case}: {text:?}");
        for relayed in ["hello", "X-Folded", "X-Nul", "Content-Length: 100", "Transfer-Encoding"] {
            assert!(!text.contains(relayed), "{case}: {relayed} relayed: {text:?}");
        }
        // Another request on the same server works: only that exchange failed.
        assert_eq!(common::get(tern.addr, "/echo/after", "").status, 200, "{case}");
    }
    let pool = pool(&tern, "app", 0);
    assert_eq!(pool["open"].as_u64(), Some(pool["idle"].as_u64().unwrap()), "{pool}");
    Ok(())
}

#[test]
fn a_failed_request_is_retried_only_when_no_server_can_see_it_twice() -> io::Result<()> {
    let (a, b) = (Upstream::go()?, Upstream::go()?);
    let (tern, _root) = proxy_to(&[a.addr(), b.addr()], "fail_after = 1000\nretries = 1");
    let both = |method: &str| a.count(method, "/raw") + b.count(method, "/raw");
    // A GET that got garbage goes to the other server (which answers
    // garbage too): two tries, then 502.
    let r = common::get(tern.addr, "/raw?case=two-content-lengths", "");
    assert_eq!((r.status, both("GET")), (502, 2));
    // A POST that reached a server is never sent again.
    let post = "POST /raw?case=two-content-lengths HTTP/1.1\r\nHost: proxy.test\r\nContent-Length: 4\r\n\r\nbody";
    assert_eq!(common::request(tern.addr, post).status, 502);
    assert_eq!(both("POST"), 1);
    // One that reached none (refused) goes to the next server.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let (tern, _root) = proxy_to(&[dead, a.addr()], "fail_after = 1000");
    for i in 0..4 {
        let raw = format!("POST /echo/p{i} HTTP/1.1\r\nHost: proxy.test\r\nContent-Length: 4\r\n\r\nbody");
        assert_eq!(common::request(tern.addr, &raw).status, 200);
        assert_eq!(a.count("POST", &format!("/echo/p{i}")), 1);
    }
    Ok(())
}

#[test]
fn a_server_that_cannot_be_reached_at_all_is_passed_over() -> io::Result<()> {
    // A Unix socket that is not there fails at once, before any readiness.
    let up = Upstream::go()?;
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("missing.sock");
    let config = format!(
        "[upstream.app]\nservers = [{{ address = \"unix:{}\" }}, {{ address = \"{}\" }}]\nfail_after = 2\n",
        missing.display(),
        up.addr()
    );
    let (tern, _root) = proxy(&config, &location("/", "app"));
    assert_eq!(statuses(&tern, "/echo/x", 6), [200; 6]);
    assert!(!is_up(&tern, "app", 0), "{:?}", servers(&tern, "app"));
    Ok(())
}

#[test]
fn a_client_that_hangs_up_frees_the_upstream_connection() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = proxy_to(&[up.addr()], "");
    let idle = |tern: &Tern| {
        let (pool, server) = (pool(tern, "app", 0), servers(tern, "app")[0].clone());
        pool["busy"] == 0 && server["active"] == 0
    };
    // The hang-up frees the upstream connection, closed rather than
    // pooled (it was mid-exchange).
    let freed = |tern: &Tern| {
        let why = || format!("{} {:?}", pool(tern, "app", 0), servers(tern, "app"));
        assert!(eventually(Duration::from_secs(3), || idle(tern)), "{}", why());
        assert_eq!(pool(tern, "app", 0)["open"], 0, "{}", why());
    };
    // Mid-response: a paced 100 MiB body, the client gone after 1 MiB.
    let mut c = Client::connect(tern.addr);
    c.send(b"GET /bytes?n=104857600&piece=65536&every=5ms HTTP/1.1\r\nHost: proxy.test\r\n\r\n");
    let mut got = 0;
    while got < MIB {
        got += c.s.read(&mut [0; 65536])?;
    }
    assert_eq!(pool(&tern, "app", 0)["busy"], 1);
    // Unread bytes make the close a reset, as a browser tab closed.
    drop(c);
    freed(&tern);
    // Before the response: the upstream still thinking.
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.connect(&tern.addr.into())?;
    s.set_linger(Some(Duration::ZERO))?;
    let mut s: TcpStream = s.into();
    s.write_all(b"GET /echo/slow?delay=20s HTTP/1.1\r\nHost: proxy.test\r\n\r\n")?;
    assert!(eventually(Duration::from_secs(3), || !idle(&tern)), "the request did not start");
    drop(s);
    freed(&tern);
    assert_eq!(common::get(tern.addr, "/echo/after", "").status, 200);
    Ok(())
}

#[test]
fn past_every_cap_a_request_waits_then_503_and_a_silent_server_is_a_504() -> io::Result<()> {
    let up = Upstream::go()?;
    let config = format!(
        "[upstream.app]\nservers = [{{ address = \"{0}\", max_connections = 1 }}]\nqueue_timeout = \"300ms\"\n\n\
         {1}",
        up.addr(),
        upstream("impatient", &[up.addr()], "read_timeout = \"500ms\"\nretries = 0")
    );
    let (tern, _root) = proxy(&config, &format!("{}{}", location("/", "app"), location("/echo/silent", "impatient")));
    let slow = std::thread::spawn({
        let addr = tern.addr;
        move || common::get(addr, "/echo/held?delay=2500ms", "").status
    });
    assert!(eventually(Duration::from_secs(3), || pool(&tern, "app", 0)["busy"] == 1));
    // Timeouts are looked at once a second.
    let start = Instant::now();
    assert_eq!(common::get(tern.addr, "/echo/queued", "").status, 503);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_millis(2000), "{waited:?}");
    assert_eq!(slow.join().unwrap(), 200);
    let start = Instant::now();
    assert_eq!(common::get(tern.addr, "/echo/silent?delay=5s", "").status, 504);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_millis(3000), "{waited:?}");
    assert_eq!(common::get(tern.addr, "/echo/after", "").status, 200);
    Ok(())
}

#[test]
fn websockets_cross_with_their_close() -> io::Result<()> {
    let ws = Upstream::websocket()?;
    let go = Upstream::go()?;
    let upstreams = format!("{}{}", upstream("ws", &[ws.addr()], ""), upstream("app", &[go.addr()], ""));
    let (tern, _root) = proxy(&upstreams, &format!("{}{}", location("/ws/", "ws"), location("/", "app")));
    let messages = ["hello", "binary:0", "two words", "binary:1000000", "last"];
    let start = Instant::now();
    assert_eq!(websocket_client(&format!("ws://{}/ws/chat", tern.addr), &messages)?, messages);
    // The client's close handshake ends when the server's close reaches it
    // (else it waits its 10 s close timeout).
    assert!(start.elapsed() < Duration::from_secs(8), "the close took {:?}", start.elapsed());
    let gone = || servers(&tern, "ws")[0]["active"] == 0 && pool(&tern, "ws", 0)["open"] == 0;
    assert!(eventually(Duration::from_secs(3), gone), "{:?} {}", servers(&tern, "ws"), pool(&tern, "ws", 0));

    // A raw upgrade: bytes both ways, the client's half-close passed on and
    // answered by the server's.
    let mut s = TcpStream::connect(tern.addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /upgrade HTTP/1.1\r\nHost: proxy.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nfirst")?;
    let mut got = Vec::new();
    while !got.ends_with(b"first") {
        let mut buf = [0; 4096];
        let n = s.read(&mut buf)?;
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 101 ") && text.contains("upgrade: echo\r\n"), "{text}");
    s.write_all(b"second")?;
    let mut buf = [0; 6];
    s.read_exact(&mut buf)?;
    assert_eq!(&buf, b"second");
    s.shutdown(Shutdown::Write)?;
    assert_eq!(s.read(&mut buf)?, 0);
    Ok(())
}

#[test]
fn an_https_upstream_is_verified() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let authority = common::tls::Ca::new("proxy test CA");
    let (cert, key, _) = authority.leaf(dir.path(), "upstream", &["upstream.test"]);
    let ca_file = authority.write(dir.path(), "upstream");
    let site = common::site();
    let origin = Tern::start(&site.root, "auto", &common::tls::section(&cert, &key), &[]);
    let origin_addr = common::tls::https_addr(&origin);
    let server = |extra: &str| format!("[{{ address = \"{origin_addr}\", tls = true, {extra} }}]");
    let ca = format!("ca = \"{}\"", ca_file.display());
    let groups = [
        ("good", server(&format!("tls_name = \"upstream.test\", {ca}"))),
        ("wrong", server(&format!("tls_name = \"other.test\", {ca}"))),
        ("by_ip", server(&ca)),
        ("system", server("tls_name = \"upstream.test\"")),
        ("unverified", server("tls_name = \"other.test\", verify = false")),
    ];
    let mut upstreams = String::new();
    let mut locations = String::new();
    for (name, servers) in &groups {
        upstreams.push_str(&format!("[upstream.{name}]\nservers = {servers}\nfail_after = 1000\n\n"));
        locations.push_str(&location(&format!("/{name}/"), name));
        // The path goes up whole: the origin has /NAME/big.bin.
        std::fs::create_dir(site.root.join(name))?;
        for file in ["big.bin", "small.txt"] {
            std::fs::hard_link(site.root.join(file), site.root.join(name).join(file))?;
        }
    }
    let (tern, _root) = proxy(&upstreams, &locations);
    for (name, expected) in [("good", 200), ("wrong", 502), ("by_ip", 502), ("system", 502), ("unverified", 200)] {
        let r = common::get(tern.addr, &format!("/{name}/big.bin"), "");
        assert_eq!(r.status, expected, "{name}: {}", String::from_utf8_lossy(&r.body[..r.body.len().min(200)]));
        if expected == 200 {
            assert!(r.body == site.big, "{name}: big.bin differs");
        }
    }
    // A client of tern's over HTTPS is said to be on HTTPS.
    let go = Upstream::go()?;
    let (front_cert, front_key, _) = authority.leaf(dir.path(), "front", &["localhost"]);
    let sections = format!("{}\n{}", common::tls::section(&front_cert, &front_key), upstream("app", &[go.addr()], ""));
    let (front, _front_root) = proxy(&sections, &location("/", "app"));
    let (raw, _) = common::tls::exchange_until_close(
        &common::tls::client(&authority),
        common::tls::https_addr(&front),
        b"GET /echo/tls HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    let e = json(&common::parse_responses(&raw, &[false])[0].body);
    assert_eq!(seen(&e, "x-forwarded-proto"), &serde_json::json!(["https"]));
    assert_eq!(seen(&e, "forwarded"), &serde_json::json!(["for=127.0.0.1;host=localhost;proto=https"]));
    // Kept-alive sessions are reused.
    let mut c = Client::connect(tern.addr);
    for _ in 0..5 {
        let (head, body) = c.get("/good/small.txt", "")?;
        assert_eq!((head.status, body), (200, site.small.clone()));
    }
    assert!(pool(&tern, "good", 0)["reused"].as_u64().unwrap() >= 4, "{}", pool(&tern, "good", 0));
    Ok(())
}

#[test]
fn tern_route_names_the_upstream() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("tern.toml");
    std::fs::write(
        &config,
        "[upstream.app]\nservers = [{ address = \"127.0.0.1:9001\" }, { address = \"unix:/run/app.sock\", weight = 2 }]\n\n\
         [[site]]\nhosts = [\"shop.example\"]\n\n[[site.location]]\nprefix = \"/api/\"\nproxy = \"app\"\n",
    )?;
    let out = Command::new(common::tern_bin())
        .arg("route")
        .arg("--config")
        .arg(&config)
        .arg("http://shop.example/api/orders?id=7")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("=> proxied to upstream `app` (127.0.0.1:9001, unix:/run/app.sock)"), "{text}");
    let out = Command::new(common::tern_bin())
        .arg("route")
        .arg("--config")
        .arg(&config)
        .arg("http://shop.example/other")
        .output()?;
    assert!(!String::from_utf8_lossy(&out.stdout).contains("proxied"));
    Ok(())
}

/// An address whose connections are never made: a listener whose accept
/// queue one connection filled (its SYNs are dropped from then on). Kept
/// open while the returned sockets live.
fn black_hole() -> (SocketAddr, socket2::Socket, TcpStream) {
    let listener = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let filler = TcpStream::connect(addr).unwrap();
    (addr, listener, filler)
}

#[test]
fn a_connection_not_made_in_time_goes_to_another_server() -> io::Result<()> {
    let up = Upstream::go()?;
    let (hole, _listener, _filler) = black_hole();
    let (tern, _root) = proxy_to(&[hole, up.addr()], "connect_timeout = \"300ms\"\nfail_after = 1000");
    // Round robin sends every other request to the black hole first.
    for _ in 0..2 {
        let start = Instant::now();
        let r = common::get(tern.addr, "/echo/x", "");
        assert_eq!(r.status, 200, "after {:?}", start.elapsed());
    }
    assert_eq!(up.count("GET", "/echo/x"), 2);
    Ok(())
}

#[test]
fn weights_and_least_connections_choose_the_server() -> io::Result<()> {
    let (a, b) = (Upstream::go()?, Upstream::go()?);
    let weighted = format!(
        "[upstream.app]\nservers = [{{ address = \"{}\", weight = 2 }}, {{ address = \"{}\" }}]\n",
        a.addr(),
        b.addr()
    );
    let (tern, _root) = proxy(&weighted, &location("/", "app"));
    assert_eq!(statuses(&tern, "/echo/w", 9), [200; 9]);
    assert_eq!((a.count("GET", "/echo/w"), b.count("GET", "/echo/w")), (6, 3));

    // Least connections: while one server holds a slow request, the quick
    // ones all go to the other.
    let (tern, _root) = proxy_to(&[a.addr(), b.addr()], "balance = \"least-connections\"");
    let slow = std::thread::spawn({
        let addr = tern.addr;
        move || common::get(addr, "/echo/slow?delay=1500ms", "").status
    });
    assert!(eventually(Duration::from_secs(3), || servers(&tern, "app").iter().any(|s| s["active"] == 1)));
    let busy = usize::from(b.count("GET", "/echo/slow") == 1);
    assert_eq!(statuses(&tern, "/echo/quick", 6), [200; 6]);
    let quick = [a.count("GET", "/echo/quick"), b.count("GET", "/echo/quick")];
    assert_eq!((quick[busy], quick[1 - busy]), (0, 6), "server {busy} is busy");
    assert_eq!(slow.join().unwrap(), 200);
    Ok(())
}

/// An HTTP/1.1 server on a Unix socket (Python's http.server handler on a
/// `UnixStreamServer`), killed when dropped.
struct UnixUpstream(std::process::Child);

impl UnixUpstream {
    fn start(socket: &std::path::Path) -> UnixUpstream {
        let program = "import http.server, socketserver, sys\n\
            class H(http.server.BaseHTTPRequestHandler):\n\
            \x20   protocol_version = 'HTTP/1.1'\n\
            \x20   def do_GET(self):\n\
            \x20       body = ('unix %s %s' % (self.path, self.headers['Host'])).encode()\n\
            \x20       self.send_response(200)\n\
            \x20       self.send_header('Content-Length', str(len(body)))\n\
            \x20       self.end_headers()\n\
            \x20       self.wfile.write(body)\n\
            \x20   def log_message(self, *args):\n\
            \x20       pass\n\
            class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):\n\
            \x20   daemon_threads = True\n\
            S(sys.argv[1], H).serve_forever()\n";
        let child = Command::new("/usr/bin/python3").arg("-c").arg(program).arg(socket).spawn().unwrap();
        assert!(eventually(Duration::from_secs(10), || std::os::unix::net::UnixStream::connect(socket).is_ok()));
        UnixUpstream(child)
    }
}

impl Drop for UnixUpstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_unix_socket_upstream() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("app.sock");
    let _app = UnixUpstream::start(&socket);
    let config = format!("[upstream.app]\nservers = [{{ address = \"unix:{}\" }}]\n", socket.display());
    let (tern, _root) = proxy(&config, &location("/", "app"));
    let mut c = Client::connect(tern.addr);
    for i in 0..5 {
        let (head, body) = c.get(&format!("/page/{i}?q"), "")?;
        assert_eq!((head.status, body), (200, format!("unix /page/{i}?q proxy.test").into_bytes()));
    }
    let pool = pool(&tern, "app", 0);
    assert_eq!((pool["connects"].as_u64(), pool["reused"].as_u64()), (Some(1), Some(4)), "{pool}");
    Ok(())
}

/// Out of descriptors (`RLIMIT_NOFILE` reached by held connections), a kept
/// connection asking for a proxied path is answered `503`: the server is
/// full for now, the upstream is not at fault (found by `bench/soak.sh`: it
/// was `502`, and counted against the server's health). Once the
/// connections go, requests reach the upstream again.
#[test]
fn out_of_descriptors_a_proxied_request_is_503_for_now() -> io::Result<()> {
    let server = answering_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let root = tempfile::tempdir().unwrap();
    let config = format!("{}\n[[site]]\ndefault = true\n\n{}", upstream("app", &[server], ""), location("/up/", "app"));
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=64:64", "--", common::tern_bin()]);
    let tern = Tern::start_with(cmd, root.path(), "auto", &config, &["--workers", "1"]);
    let mut c = Client::connect(tern.addr);
    assert_eq!(c.get("/none", "")?.0.status, 404);
    let held = common::hold_every_descriptor(&tern, 64);
    assert_eq!(c.get("/up/x", "")?.0.status, 503);
    drop(held);
    assert!(eventually(Duration::from_secs(10), || {
        Client::connect(tern.addr).get("/up/x", "").is_ok_and(|(head, body)| head.status == 200 && body == b"ok")
    }));
    assert_eq!(servers(&tern, "app")[0]["up"], Value::Bool(true), "the server was not marked down");
    Ok(())
}

/// A chunked response with trailer fields: one a client may have, the
/// others hop-by-hop or ones no trailer may carry.
const WITH_TRAILERS: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n\
    5\r\nhello\r\n0\r\nX-Checksum: abc\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nContent-Length: 5\r\n\
    Host: elsewhere\r\nProxy-Status: x\r\n\r\n";

/// What a raw request to `tern` got, the whole connection's bytes.
fn raw_exchange(tern: &Tern, request: &str) -> String {
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    String::from_utf8(got).unwrap()
}

#[test]
fn trailer_fields_reach_an_http11_client_in_the_last_chunk_but_hop_by_hop_ones() -> io::Result<()> {
    let (tern, _root) = proxy_to(&[answering_server(WITH_TRAILERS)], "");
    let got = raw_exchange(&tern, "GET / HTTP/1.1\r\nHost: proxy.test\r\nTE: trailers\r\nConnection: close\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.contains("\r\nTransfer-Encoding: chunked\r\n"), "{got}");
    assert!(got.ends_with("\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"), "{got}");

    // HTTP/1.0 has no chunks to carry them: the body alone, ended by the close.
    let got = raw_exchange(&tern, "GET / HTTP/1.0\r\nHost: proxy.test\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n") && got.ends_with("\r\n\r\nhello"), "{got}");
    assert!(!got.contains("X-Checksum"), "{got}");
    Ok(())
}

/// tern speaking h2c, every path proxied to `server`.
fn h2c_proxy_to(server: SocketAddr) -> (Tern, tempfile::TempDir) {
    let ups = format!("[http2]\nprotocols = [\"h2c\"]\n\n{}", upstream("app", &[server], ""));
    proxy(&ups, &location("/", "app"))
}

/// `nghttp -v` of `path` on `tern` over h2c, with `args`: what it printed.
fn nghttp(tern: &Tern, path: &str, args: &[&str]) -> String {
    let url = format!("http://{}{path}", tern.addr);
    let got = Command::new("nghttp").args(["-v", "-t", "20"]).args(args).arg(url).output().expect("nghttp");
    let text = String::from_utf8_lossy(&got.stdout).into_owned();
    assert!(got.status.success(), "nghttp {path}: {text}{}", String::from_utf8_lossy(&got.stderr));
    text
}

#[test]
fn trailer_fields_end_an_http2_stream_after_its_body() -> io::Result<()> {
    let (tern, _root) = h2c_proxy_to(answering_server(WITH_TRAILERS));
    let out = nghttp(&tern, "/", &["-H", "te: trailers"]);
    // The body in DATA without END_STREAM, then HEADERS with the trailer
    // fields and END_STREAM (the response's own HEADERS came first).
    let frames: Vec<&str> = out.lines().filter_map(|l| l.split_once("] recv ").map(|(_, f)| f)).collect();
    let headers = frames.iter().rposition(|f| f.starts_with("HEADERS frame")).expect("a HEADERS frame");
    let data = frames.iter().position(|f| f.starts_with("DATA frame")).expect("a DATA frame");
    assert!(data < headers, "{out}");
    assert!(frames[data].contains("<length=5, flags=0x00"), "{out}");
    let fields = frames[data..headers].iter().filter(|f| f.starts_with("(stream_id="));
    let trailers: Vec<&str> = fields.filter_map(|f| f.split_once(") ").map(|(_, field)| field)).collect();
    assert_eq!(trailers, ["x-checksum: abc"], "{out}");
    let after = out.split(frames[headers]).nth(1).unwrap();
    assert!(frames[headers].contains("flags=0x05") && after.contains("; END_STREAM | END_HEADERS"), "{out}");
    Ok(())
}

/// A proxied server's `103 Early Hints` reaches an HTTP/2 client (where
/// browsers act on them) as a `HEADERS` frame of its own, its `Link` field
/// and no `END_STREAM`, before the answer's.
#[test]
fn early_hints_reach_an_http2_client_before_the_answer() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, _root) = h2c_proxy_to(up.addr());
    let out = nghttp(&tern, "/status/103", &[]);
    // nghttp prints a frame's fields as it decodes them, then the frame.
    let received: Vec<String> = out
        .lines()
        .filter_map(|l| match l.split_once("] recv ")?.1 {
            frame if frame.starts_with("HEADERS frame") => Some(format!("HEADERS {}", frame.split_once("flags=")?.1)),
            field => Some(field.split_once(") ")?.1.to_string()),
        })
        .collect();
    let hints = received.iter().position(|r| r == ":status: 103").unwrap_or_else(|| panic!("no 103: {out}"));
    assert_eq!(received[hints + 1], "link: </style.css>; rel=preload; as=style", "{out}");
    assert!(received[hints + 2].starts_with("HEADERS 0x04,"), "an interim HEADERS ends no stream: {out}");
    assert_eq!(received[hints + 3], ":status: 200", "{out}");
    assert!(out.contains("status 200\n"), "{out}");
    Ok(())
}

#[test]
fn an_http2_request_body_ended_by_trailer_fields_is_answered_without_them() -> io::Result<()> {
    let up = Upstream::go()?;
    let (tern, root) = h2c_proxy_to(up.addr());
    let body = root.path().join("body");
    std::fs::write(&body, pattern(100_000))?;
    let data = body.to_str().unwrap();
    let out = nghttp(&tern, "/echo/trailers", &["-d", data, "--trailer", "x-sum: 1"]);
    // The request ended with a HEADERS frame of its own: its trailer.
    assert!(out.contains("] send HEADERS frame <length=") && out.contains("x-sum: 1"), "{out}");
    assert!(out.contains(":status: 200"), "{out}");
    let json_at = out.find("{\"").unwrap_or_else(|| panic!("no echo: {out}"));
    let e: Value = serde_json::Deserializer::from_str(&out[json_at..]).into_iter().next().unwrap().unwrap();
    assert_eq!(e["body_sha256"], sha256_hex(&pattern(100_000)), "{e}");
    assert_eq!(seen(&e, "x-sum"), &Value::Null, "{e}");
    Ok(())
}
