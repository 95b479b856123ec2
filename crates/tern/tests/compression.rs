//! Compression end to end, against the real binary over real sockets:
//! every codec decodes to the exact file, the negotiation matrix, ETags and
//! conditionals per variant, HEAD and Range, a changed file never served
//! stale, the memory cap, idle eviction, the load-adaptive policy, single
//! flight, sidecars, and the switch that turns it all off.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

use common::{find, Response, Tern};

/// A realistic, compressible HTML page, different for every `seed`.
fn page(seed: u64, paragraphs: usize) -> Vec<u8> {
    const WORDS: [&str; 12] =
        ["server", "cache", "tern", "request", "file", "page", "byte", "gzip", "load", "burst", "queue", "time"];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = format!("<!DOCTYPE html><html><head><title>page {seed}</title></head><body>\n");
    for i in 0..paragraphs {
        s.push_str(&format!("<p class=\"c{}\">", i % 5));
        for _ in 0..10 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(WORDS[(x % 12) as usize]);
            s.push(' ');
        }
        s.push_str("</p>\n");
    }
    s.push_str("</body></html>\n");
    s.into_bytes()
}

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap();
        }
        Some("br") => {
            brotli::Decompressor::new(body, 4096).read_to_end(&mut out).unwrap();
        }
        Some("zstd") => out = zstd::stream::decode_all(body).unwrap(),
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

/// One keep-alive connection making sequential requests.
struct Client {
    sock: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn new(addr: SocketAddr) -> Client {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        sock.set_nodelay(true).unwrap();
        Client { sock, buf: Vec::new() }
    }

    fn request(&mut self, method: &str, path: &str, headers: &str) -> Response {
        // One write: pieces would meet Nagle and a delayed ACK.
        let req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n");
        self.sock.write_all(req.as_bytes()).unwrap();
        let mut chunk = [0u8; 65536];
        let head_end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end + 4;
            }
            let n = self.sock.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).unwrap().to_string();
        let (status, headers) = common::parse_head(&head);
        let len: usize = if method == "HEAD" || status == 304 {
            0
        } else {
            headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap())
        };
        while self.buf.len() < head_end + len {
            let n = self.sock.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed mid-body");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        Response { status, headers, body }
    }

    fn get(&mut self, path: &str, accept_encoding: Option<&str>) -> Response {
        let h = accept_encoding.map(|v| format!("Accept-Encoding: {v}\r\n")).unwrap_or_default();
        self.request("GET", path, &h)
    }
}

fn status_json(addr: SocketAddr) -> serde_json::Value {
    let r = common::get(addr, "/_tern/status", "");
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["compression"].clone()
}

fn num(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_u64().unwrap_or_else(|| panic!("{path:?} in {v}"))
}

fn write(root: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(root.join(name), bytes).unwrap();
}

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
}

/// Inline compression (no deferral), everything else default.
const INLINE: &str = "[compression]\nadaptive = false\n";

#[test]
fn every_codec_decodes_to_the_exact_file_and_curl_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let text = page(1, 900);
    write(dir.path(), "page.html", &text);
    for io in common::io_methods() {
        let tern = Tern::start(dir.path(), io, INLINE, &[]);
        let mut c = Client::new(tern.addr);
        for coding in ["gzip", "br", "zstd"] {
            // Twice: the first is compressed inline, the second is a hit.
            for _ in 0..2 {
                let r = c.get("/page.html", Some(coding));
                assert_eq!(r.status, 200);
                assert_eq!(r.header("content-encoding"), Some(coding), "{io}");
                assert_eq!(r.header("vary"), Some("Accept-Encoding"));
                assert!(r.header("accept-ranges").is_none());
                assert_eq!(r.header("content-length").unwrap(), r.body.len().to_string());
                assert!(r.body.len() * 3 < text.len(), "{coding}: {} of {}", r.body.len(), text.len());
                assert_eq!(decode(Some(coding), &r.body), text, "{coding} over {io}");
            }
        }
        let s = status_json(tern.addr);
        assert_eq!((num(&s, &["hits"]), num(&s, &["misses"])), (3, 3));
        for coding in ["gzip", "br", "zstd"] {
            assert_eq!(num(&s, &["codings", coding, "compressions"]), 1);
            assert_eq!(num(&s, &["codings", coding, "bytes_in"]), text.len() as u64);
        }
        // curl decodes gzip itself.
        let out = std::process::Command::new("curl")
            .args(["-s", "--compressed", "-H", "Accept-Encoding: gzip", &tern.url("/page.html")])
            .output()
            .expect("curl");
        assert_eq!(out.stdout, text, "curl --compressed over {io}");
    }
}

/// The `Content-Encoding` expected (`None`: identity), or an error status.
type Expect = Result<Option<&'static str>, u16>;

#[test]
fn negotiation_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let text = page(2, 300);
    write(dir.path(), "page.html", &text);
    write(dir.path(), "tiny.html", b"<p>too small to compress</p>\n");
    write(dir.path(), "image.png", &common::pattern(5000, 3));
    let tern = Tern::start(dir.path(), "sendfile", INLINE, &[]);
    let mut c = Client::new(tern.addr);
    // (Accept-Encoding, expected Content-Encoding or None for identity, or
    // Err(status)). The server's order (br, zstd, gzip) breaks ties.
    let cases: &[(Option<&str>, Expect)] = &[
        (None, Ok(None)),
        (Some(""), Ok(None)),
        (Some("gzip"), Ok(Some("gzip"))),
        (Some("x-gzip"), Ok(Some("gzip"))),
        (Some("br"), Ok(Some("br"))),
        (Some("zstd"), Ok(Some("zstd"))),
        (Some("gzip, deflate, br, zstd"), Ok(Some("br"))),
        (Some("gzip;q=1.0, br;q=0.5"), Ok(Some("gzip"))),
        (Some("zstd;q=0.9, gzip;q=0.8"), Ok(Some("zstd"))),
        (Some("*"), Ok(Some("br"))),
        (Some("*;q=0.1, gzip;q=0.5"), Ok(Some("gzip"))),
        (Some("br;q=0, *"), Ok(Some("zstd"))),
        (Some("deflate, compress, foo"), Ok(None)),
        (Some("gzip;q=0"), Ok(None)),
        (Some("gzip;q=0, br;q=0, zstd;q=0"), Ok(None)),
        (Some("gzip;q=5"), Ok(None)),
        (Some("identity"), Ok(None)),
        (Some("identity;q=0, gzip"), Ok(Some("gzip"))),
        (Some("*;q=0, identity"), Ok(None)),
        // Identity refused and nothing else acceptable: 406 (RFC 9110
        // §12.5.3 lets the server answer 406 when identity is excluded).
        (Some("identity;q=0"), Err(406)),
        (Some("*;q=0"), Err(406)),
        (Some("identity;q=0, deflate"), Err(406)),
    ];
    for (ae, want) in cases {
        let r = c.get("/page.html", *ae);
        match want {
            Ok(coding) => {
                assert_eq!(r.status, 200, "{ae:?}");
                assert_eq!(r.header("content-encoding"), *coding, "{ae:?}");
                assert_eq!(decode(*coding, &r.body), text, "{ae:?}");
            }
            Err(status) => assert_eq!(r.status, *status, "{ae:?}"),
        }
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{ae:?}");
    }
    // A range when identity is refused: the range is ignored instead.
    let r = c.request("GET", "/page.html", "Accept-Encoding: identity;q=0, gzip\r\nRange: bytes=0-9\r\n");
    assert_eq!((r.status, r.header("content-encoding")), (200, Some("gzip")));
    // Never compressed (type, size): not negotiated at all, so identity
    // without Vary whatever the client says (RFC 9110 §12.1).
    for path in ["/tiny.html", "/image.png"] {
        for ae in ["gzip, br", "identity;q=0", "*;q=0"] {
            let r = c.get(path, Some(ae));
            assert_eq!((r.status, r.header("content-encoding"), r.header("vary")), (200, None, None), "{path} {ae}");
        }
    }
}

#[test]
fn etags_conditionals_head_and_range_per_variant() {
    let dir = tempfile::tempdir().unwrap();
    let text = page(3, 300);
    write(dir.path(), "page.html", &text);
    let tern = Tern::start(dir.path(), "mmap", INLINE, &[]);
    let mut c = Client::new(tern.addr);
    let identity = c.get("/page.html", None);
    let gzip = c.get("/page.html", Some("gzip"));
    let br = c.get("/page.html", Some("br"));
    let tag = |r: &Response| r.header("etag").unwrap().to_string();
    let (ti, tg, tb) = (tag(&identity), tag(&gzip), tag(&br));
    assert_eq!(tg, format!("{}-gzip\"", ti.trim_end_matches('"')));
    assert_eq!(tb, format!("{}-br\"", ti.trim_end_matches('"')));
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"));

    // If-None-Match is compared with the variant actually selected; a 304
    // keeps Vary.
    let inm = |c: &mut Client, ae: &str, tag: &str| {
        c.request("GET", "/page.html", &format!("Accept-Encoding: {ae}\r\nIf-None-Match: {tag}\r\n"))
    };
    let r = inm(&mut c, "gzip", &tg);
    assert_eq!((r.status, r.header("etag"), r.header("vary")), (304, Some(tg.as_str()), Some("Accept-Encoding")));
    assert!(r.header("content-encoding").is_none() && r.body.is_empty());
    let r = inm(&mut c, "identity", &ti);
    assert_eq!((r.status, r.header("vary")), (304, Some("Accept-Encoding")));
    let r = inm(&mut c, "gzip", &ti);
    assert_eq!((r.status, r.header("content-encoding")), (200, Some("gzip")));
    assert_eq!(decode(Some("gzip"), &r.body), text);
    let r = inm(&mut c, "br", &tg);
    assert_eq!((r.status, r.header("content-encoding")), (200, Some("br")));
    let r = inm(&mut c, "gzip", &format!("\"nope\", W/{tg}"));
    assert_eq!(r.status, 304, "weak comparison for If-None-Match");
    let last_modified = gzip.header("last-modified").unwrap().to_string();
    let r = c.request("GET", "/page.html", &format!("Accept-Encoding: gzip\r\nIf-Modified-Since: {last_modified}\r\n"));
    assert_eq!((r.status, r.header("etag"), r.header("vary")), (304, Some(tg.as_str()), Some("Accept-Encoding")));
    let r = c.request("GET", "/page.html", &format!("Accept-Encoding: gzip\r\nIf-Match: {ti}\r\n"));
    assert_eq!(r.status, 412, "If-Match with the identity tag fails for the gzip variant");

    // HEAD: the same head as GET, no body.
    let r = c.request("HEAD", "/page.html", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-length").unwrap(), gzip.body.len().to_string());
    assert_eq!(r.header("etag"), Some(tg.as_str()));
    assert!(r.body.is_empty());

    // Range requests get identity (with Vary).
    let r = c.request("GET", "/page.html", "Accept-Encoding: gzip\r\nRange: bytes=10-19\r\n");
    assert_eq!((r.status, r.header("content-encoding")), (206, None));
    assert_eq!(r.body, &text[10..20]);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = c.request("GET", "/page.html", "Accept-Encoding: gzip\r\nRange: bytes=0-1,5-6\r\n");
    assert_eq!((r.status, r.header("vary")), (206, Some("Accept-Encoding")));
    assert!(r.header("content-type").unwrap().starts_with("multipart/byteranges"));
}

#[test]
fn a_changed_file_is_never_served_stale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("page.html");
    let old = page(4, 300);
    std::fs::write(&path, &old).unwrap();
    // open_file_valid is long, so only the compression path's own check
    // can notice the change.
    let tern = Tern::start(
        dir.path(),
        "sendfile",
        "[static]\nopen_file_valid = \"60s\"\n[compression]\nadaptive = false\n",
        &[],
    );
    let mut c = Client::new(tern.addr);
    for coding in ["gzip", "br", "zstd"] {
        assert_eq!(decode(Some(coding), &c.get("/page.html", Some(coding)).body), old);
    }
    let base = SystemTime::now() + Duration::from_secs(10);
    for round in 1..=3u64 {
        // Same size, new content and mtime; then a different size.
        let mut new = page(4 + round * 100, 300);
        new.resize(if round == 2 { old.len() + 77 } else { old.len() }, b' ');
        std::fs::write(&path, &new).unwrap();
        set_mtime(&path, base + Duration::from_secs(round));
        for coding in ["gzip", "br", "zstd"] {
            let r = c.get("/page.html", Some(coding));
            assert_eq!(r.header("content-encoding"), Some(coding));
            assert_eq!(decode(Some(coding), &r.body), new, "round {round}, {coding}");
        }
    }
    // Replaced by rename (a new inode), as deploy tools do.
    let newest = page(999, 310);
    std::fs::write(dir.path().join("tmp"), &newest).unwrap();
    std::fs::rename(dir.path().join("tmp"), &path).unwrap();
    let r = c.get("/page.html", Some("gzip"));
    assert_eq!(decode(Some("gzip"), &r.body), newest);
    let s = status_json(tern.addr);
    assert!(num(&s, &["stale"]) >= 9, "{s}");
}

#[test]
fn the_memory_cap_holds_with_a_thousand_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for i in 0..1000u64 {
        let text = page(10_000 + i, 12 + (i % 20) as usize);
        write(dir.path(), &format!("p{i}.html"), &text);
        files.push(text);
    }
    let cap = 100 * 1024;
    let tern = Tern::start(
        dir.path(),
        "sendfile",
        &format!("[compression]\nadaptive = false\ncache_memory = {cap}\nwhen_full = \"refuse\"\n"),
        &[],
    );
    let mut c = Client::new(tern.addr);
    let mut compressed = 0;
    for (i, text) in files.iter().enumerate() {
        let r = c.get(&format!("/p{i}.html"), Some("gzip"));
        assert_eq!(r.status, 200);
        compressed += usize::from(r.header("content-encoding").is_some());
        assert_eq!(decode(r.header("content-encoding"), &r.body), *text, "file {i}");
        if i % 50 == 49 {
            let m = c.get("/_tern/status", None);
            let s: serde_json::Value = serde_json::from_slice(&m.body).unwrap();
            let used = num(&s, &["compression", "memory_bytes"]);
            assert!(used <= cap, "after {} files: {used} > {cap}", i + 1);
        }
    }
    let s = status_json(tern.addr);
    let used = num(&s, &["memory_bytes"]);
    assert!(used <= cap && used > cap * 8 / 10, "{used} of {cap}");
    assert!(num(&s, &["full"]) > 0, "{s}");
    assert!(compressed > 50 && compressed < 1000, "{compressed} compressed");
    // Refused past the cap, nothing new is compressed: the cached files
    // still hit.
    let r = c.get("/p0.html", Some("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let r = c.get("/p999.html", Some("gzip"));
    assert_eq!(r.header("content-encoding"), None);
}

#[test]
fn idle_entries_are_evicted() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.html", &page(5, 200));
    write(dir.path(), "b.css", &page(6, 200));
    let tern = Tern::start(dir.path(), "sendfile", "[compression]\nadaptive = false\nidle = \"1s\"\n", &[]);
    let mut c = Client::new(tern.addr);
    c.get("/a.html", Some("gzip"));
    c.get("/b.css", Some("zstd"));
    let s = status_json(tern.addr);
    assert_eq!((num(&s, &["entries"]), num(&s, &["evictions"])), (2, 0));
    assert!(num(&s, &["memory_bytes"]) > 0);
    let start = Instant::now();
    loop {
        let s = status_json(tern.addr);
        if num(&s, &["entries"]) == 0 {
            assert_eq!(num(&s, &["evictions"]), 2);
            assert_eq!(num(&s, &["memory_bytes"]), 0);
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "not evicted: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Gone means compressed again on the next use.
    let r = c.get("/a.html", Some("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(num(&status_json(tern.addr), &["codings", "gzip", "compressions"]), 2);
}

#[test]
fn under_load_a_cold_file_is_sent_identity_then_compressed_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let text = page(7, 400);
    write(dir.path(), "page.html", &text);
    // Threshold forced low: every request counts itself as in flight.
    let tern = Tern::start(dir.path(), "sendfile", "[compression]\nbusy_in_flight = 0\n", &[]);
    let mut c = Client::new(tern.addr);
    let first = c.get("/page.html", Some("gzip"));
    assert_eq!((first.status, first.header("content-encoding")), (200, None));
    assert_eq!(first.header("vary"), Some("Accept-Encoding"));
    assert_eq!(first.body, text);
    let start = Instant::now();
    let later = loop {
        let r = c.get("/page.html", Some("gzip"));
        if r.header("content-encoding").is_some() {
            break r;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "never compressed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(decode(Some("gzip"), &later.body), text);
    let s = status_json(tern.addr);
    assert!(num(&s, &["deferred"]) >= 1, "{s}");
    assert_eq!(num(&s, &["codings", "gzip", "compressions"]), 1);
    assert!(num(&s, &["hits"]) >= 1);
    // A client that refuses identity is never deferred.
    write(dir.path(), "other.html", &page(8, 400));
    let r = c.get("/other.html", Some("identity;q=0, br"));
    assert_eq!(r.header("content-encoding"), Some("br"));
}

#[test]
fn concurrent_requests_for_one_cold_file_compress_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = Arc::new(page(9, 3000));
    write(dir.path(), "big.html", &text);
    for config in [INLINE, "[compression]\nbusy_in_flight = 4\n"] {
        let tern = Tern::start(dir.path(), "sendfile", config, &[]);
        let barrier = Arc::new(Barrier::new(64));
        let threads: Vec<_> = (0..64)
            .map(|_| {
                let (barrier, text, addr) = (barrier.clone(), text.clone(), tern.addr);
                std::thread::spawn(move || {
                    let mut c = Client::new(addr);
                    barrier.wait();
                    let r = c.get("/big.html", Some("gzip"));
                    assert_eq!(r.status, 200);
                    assert_eq!(decode(r.header("content-encoding"), &r.body), *text);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Deferred jobs finish in the background.
        let start = Instant::now();
        while num(&status_json(tern.addr), &["entries"]) == 0 {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = status_json(tern.addr);
        assert_eq!(num(&s, &["codings", "gzip", "compressions"]), 1, "{config}: {s}");
        assert_eq!(num(&s, &["hits"]) + num(&s, &["misses"]), 64, "{s}");
    }
}

#[test]
fn precompressed_sidecars_are_served_when_not_older() {
    let dir = tempfile::tempdir().unwrap();
    let text = page(11, 300);
    let path = dir.path().join("app.js");
    std::fs::write(&path, &text).unwrap();
    // A sidecar tern would not produce itself (level 1), to tell it apart.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&text).unwrap();
    let side = enc.finish().unwrap();
    let side_path = dir.path().join("app.js.gz");
    std::fs::write(&side_path, &side).unwrap();
    let now = SystemTime::now();
    set_mtime(&path, now - Duration::from_secs(100));
    set_mtime(&side_path, now - Duration::from_secs(50));
    let tern = Tern::start(dir.path(), "sendfile", INLINE, &[]);
    let mut c = Client::new(tern.addr);
    let r = c.get("/app.js", Some("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, side, "the sidecar's bytes");
    let tag = r.header("etag").unwrap().to_string();
    assert!(tag.contains("-gzip-"), "a sidecar variant has its own tag: {tag}");
    assert_eq!(c.get("/app.js", Some("gzip")).body, side, "cached");
    let s = status_json(tern.addr);
    assert_eq!((num(&s, &["sidecars"]), num(&s, &["codings", "gzip", "compressions"])), (1, 0));
    // The sidecar changes: not served from the cache any more.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&text).unwrap();
    let side2 = enc.finish().unwrap();
    std::fs::write(&side_path, &side2).unwrap();
    set_mtime(&side_path, now - Duration::from_secs(40));
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = c.get("/app.js", Some("gzip"));
        assert_ne!(r.body, side, "old sidecar served");
        got = r.body;
    }
    assert_eq!(got, side2);
    let r = c.get("/app.js", Some("gzip"));
    assert_ne!(r.header("etag").unwrap(), tag, "new sidecar bytes, new strong tag");
    // A sidecar older than its file is ignored: tern compresses itself.
    std::fs::write(dir.path().join("old.js"), &text).unwrap();
    std::fs::write(dir.path().join("old.js.gz"), &side).unwrap();
    set_mtime(&dir.path().join("old.js.gz"), now - Duration::from_secs(1000));
    let r = c.get("/old.js", Some("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_ne!(r.body, side);
    assert_eq!(decode(Some("gzip"), &r.body), text);
}

#[test]
fn the_switch_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let text = page(12, 300);
    write(dir.path(), "page.html", &text);
    let tern = Tern::start(dir.path(), "sendfile", "[compression]\nenabled = false\n", &[]);
    let r = common::get(tern.addr, "/page.html", "Accept-Encoding: gzip, br\r\n");
    assert_eq!((r.status, r.header("content-encoding"), r.header("vary")), (200, None, None));
    assert_eq!(r.body, text);
    let m = common::get(tern.addr, "/metrics", "");
    let metrics = String::from_utf8(m.body).unwrap();
    assert!(metrics.contains("tern_compression_hits_total 0"), "{metrics}");
    assert!(metrics.contains("tern_compression_cache_memory_bytes 0"));
    assert!(metrics.contains("tern_compression_compressions_total{coding=\"gzip\"} 0"));
}

/// A page of `len` bytes that compresses about 4:3 (base64-like text): a
/// hundred of them do not fit in a few MiB of compressed cache.
fn dense_page(len: usize, seed: u64) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    common::pattern(len, seed).iter().map(|b| ALPHABET[usize::from(b % 64)]).collect()
}

/// 150 pages of 100 KB against an 8 MiB cache: the first sweep fills it
/// with the first ~100; the last 20 are then asked for again and again.
/// `evict` (the default) makes room for them; `refuse` keeps them out.
#[test]
fn when_full_the_most_used_variants_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let pages: Vec<Vec<u8>> = (0..150u64).map(|i| dense_page(100_000, 500 + i)).collect();
    for (i, p) in pages.iter().enumerate() {
        write(dir.path(), &format!("d{i}.html"), p);
    }
    let cap: u64 = 8 << 20;
    let hot = 130..150;
    for policy in ["evict", "refuse"] {
        let config = format!("[compression]\nadaptive = false\ncache_memory = \"8MiB\"\nwhen_full = \"{policy}\"\n");
        let tern = Tern::start(dir.path(), "sendfile", &config, &[]);
        let mut c = Client::new(tern.addr);
        for (i, p) in pages.iter().enumerate() {
            let r = c.get(&format!("/d{i}.html"), Some("gzip"));
            assert_eq!(decode(r.header("content-encoding"), &r.body), *p, "{policy}: page {i}");
        }
        let s = status_json(tern.addr);
        assert!(num(&s, &["full"]) > 0 && num(&s, &["memory_bytes"]) <= cap, "{policy}: the first sweep fills it: {s}");
        for _ in 0..3 {
            for i in hot.clone() {
                let r = c.get(&format!("/d{i}.html"), Some("gzip"));
                assert_eq!(decode(r.header("content-encoding"), &r.body), pages[i], "{policy}: page {i}");
                assert!(num(&status_json(tern.addr), &["memory_bytes"]) <= cap, "{policy}: over the cap");
            }
        }
        let before = num(&status_json(tern.addr), &["hits"]);
        let gzipped = hot
            .clone()
            .filter(|i| c.get(&format!("/d{i}.html"), Some("gzip")).header("content-encoding") == Some("gzip"))
            .count();
        let s = status_json(tern.addr);
        let hits = num(&s, &["hits"]) - before;
        assert!(num(&s, &["memory_bytes"]) <= cap, "{policy}: {s}");
        if policy == "evict" {
            assert_eq!((gzipped, hits), (20, 20), "evict: every hot page is a cache hit: {s}");
            assert!(num(&s, &["displaced"]) >= 20, "evict: cold variants made room: {s}");
        } else {
            assert_eq!((gzipped, hits), (0, 0), "refuse: the hot pages stay locked out: {s}");
            assert_eq!(num(&s, &["displaced"]), 0, "{s}");
        }
    }
}
