//! Static files over real sockets, for each I/O method: byte-exact bodies
//! (full, ranged, multipart), conditional requests, HEAD, index files,
//! redirects, MIME types, keep-alive and pipelining — with curl, the ureq
//! client library, and raw bytes where exact framing matters.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{get, io_methods, parse_responses, read_until_close, request, Tern};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn curl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("curl").args(["-s", "--max-time", "20"]).args(args).output().expect("curl runs");
    assert!(out.status.success(), "curl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn full_and_ranged_bodies_are_byte_exact() {
    let site = common::site();
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, "", &[]);
        let agent = agent();
        for (path, want) in [("/small.txt", &site.small), ("/big.bin", &site.big)] {
            let mut resp = agent.get(&tern.url(path)).call().unwrap();
            assert_eq!(resp.status().as_u16(), 200, "{io} {path}");
            assert_eq!(resp.headers()["content-length"], want.len().to_string().as_str());
            let body = resp.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap();
            assert!(body == **want, "{io} {path}: body differs (ureq)");
            assert!(curl(&[&tern.url(path)]) == **want, "{io} {path}: body differs (curl)");
        }
        let len = site.big.len();
        for (spec, start, end) in [
            ("0-0", 0, 0),
            ("100-199", 100, 199),
            ("1048570-2097160", 1_048_570, 2_097_160),
            ("-17", len - 17, len - 1),
            ("3145000-", 3_145_000, len - 1),
            ("0-99999999", 0, len - 1),
        ] {
            let mut resp = agent.get(&tern.url("/big.bin")).header("Range", &format!("bytes={spec}")).call().unwrap();
            assert_eq!(resp.status().as_u16(), 206, "{io} {spec}");
            assert_eq!(resp.headers()["content-range"], format!("bytes {start}-{end}/{len}").as_str());
            let body = resp.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap();
            assert!(body == site.big[start..=end], "{io} range {spec}: body differs");
            let via_curl = curl(&["-r", spec, &tern.url("/big.bin")]);
            assert!(via_curl == site.big[start..=end], "{io} range {spec}: body differs (curl)");
        }
    }
}

#[test]
fn multipart_byteranges_carry_each_part_exactly() {
    let site = common::site();
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, "", &[]);
        let r = get(tern.addr, "/big.bin", "Range: bytes=0-9, 2000000-2000099, -5\r\n");
        assert_eq!(r.status, 206, "{io}");
        let ctype = r.header("content-type").unwrap();
        let boundary = ctype.strip_prefix("multipart/byteranges; boundary=").expect(ctype);
        let len = site.big.len();
        let mut rest = &r.body[..];
        for (start, end) in [(0, 9), (2_000_000, 2_000_099), (len - 5, len - 1)] {
            let head = format!(
                "\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {start}-{end}/{len}\r\n\r\n"
            );
            assert!(rest.starts_with(head.as_bytes()), "{io}: part head for {start}-{end}");
            rest = &rest[head.len()..];
            assert!(rest[..=end - start] == site.big[start..=end], "{io}: part {start}-{end}");
            rest = &rest[end - start + 1..];
        }
        assert_eq!(rest, format!("\r\n--{boundary}--\r\n").as_bytes(), "{io}: closing delimiter");
        // Overlapping ranges are coalesced into one part.
        let r = get(tern.addr, "/small.txt", "Range: bytes=0-99, 50-149\r\n");
        assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 0-149/1000")));
        assert_eq!(r.body, site.small[..150]);
    }
}

#[test]
fn unsatisfiable_and_ignored_ranges() {
    let site = common::site();
    let tern = Tern::start(&site.root, "sendfile", "", &[]);
    let r = get(tern.addr, "/small.txt", "Range: bytes=1000-\r\n");
    assert_eq!((r.status, r.header("content-range")), (416, Some("bytes */1000")));
    let r = get(tern.addr, "/small.txt", "Range: bytes=9-1\r\n");
    assert_eq!((r.status, r.body.len()), (200, 1000), "a syntactically invalid range is ignored");
    let r = get(tern.addr, "/small.txt", "Range: lines=1-2\r\n");
    assert_eq!(r.status, 200, "an unknown unit is ignored");
    let many: Vec<String> = (0..20).map(|i| format!("{}-{}", i * 10, i * 10 + 1)).collect();
    let r = get(tern.addr, "/small.txt", &format!("Range: bytes={}\r\n", many.join(",")));
    assert_eq!(r.status, 200, "more than limits.max_ranges ranges are ignored");
    let r = get(tern.addr, "/empty.txt", "Range: bytes=0-\r\n");
    assert_eq!(r.status, 416);
    let r = get(tern.addr, "/empty.txt", "");
    assert_eq!((r.status, r.header("content-length"), r.body.len()), (200, Some("0"), 0));
}

#[test]
fn conditional_requests() {
    let site = common::site();
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, "", &[]);
        let r = get(tern.addr, "/small.txt", "");
        let etag = r.header("etag").unwrap().to_string();
        let modified = r.header("last-modified").unwrap().to_string();
        assert!(etag.starts_with('"') && etag.ends_with('"'), "strong ETag: {etag}");

        let r = get(tern.addr, "/small.txt", &format!("If-None-Match: {etag}\r\n"));
        assert_eq!((r.status, r.body.len()), (304, 0), "{io}");
        assert_eq!(r.header("etag"), Some(etag.as_str()));
        assert_eq!(r.header("content-length"), None);
        let r = get(tern.addr, "/small.txt", &format!("If-None-Match: \"other\", W/{etag}\r\n"));
        assert_eq!(r.status, 304, "weak comparison for If-None-Match");
        let r = get(tern.addr, "/small.txt", "If-None-Match: \"other\"\r\n");
        assert_eq!(r.status, 200);
        let r = get(tern.addr, "/small.txt", &format!("If-Modified-Since: {modified}\r\n"));
        assert_eq!(r.status, 304);
        let r = get(tern.addr, "/small.txt", "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
        assert_eq!(r.status, 200);
        let r = get(tern.addr, "/small.txt", "If-Match: \"other\"\r\n");
        assert_eq!(r.status, 412);
        let r = get(tern.addr, "/small.txt", &format!("If-Match: {etag}\r\n"));
        assert_eq!(r.status, 200);
        let r = get(tern.addr, "/small.txt", "If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
        assert_eq!(r.status, 412);
        // If-Range: the range only while the validator still matches.
        let r = get(tern.addr, "/small.txt", &format!("Range: bytes=0-9\r\nIf-Range: {etag}\r\n"));
        assert_eq!((r.status, r.body.len()), (206, 10));
        let r = get(tern.addr, "/small.txt", "Range: bytes=0-9\r\nIf-Range: \"stale\"\r\n");
        assert_eq!((r.status, r.body.len()), (200, 1000));
        let r = get(tern.addr, "/small.txt", &format!("Range: bytes=0-9\r\nIf-Range: {modified}\r\n"));
        assert_eq!(r.status, 206);
    }
}

#[test]
fn a_changed_file_gets_a_new_etag() {
    let site = common::site();
    let tern = Tern::start(&site.root, "mmap", "[static]\nopen_file_valid = 0\n", &[]);
    let first = get(tern.addr, "/style.css", "");
    std::fs::write(site.root.join("style.css"), "body{color:red}\n").unwrap();
    let second = get(tern.addr, "/style.css", "");
    assert_eq!(second.body, b"body{color:red}\n");
    assert_ne!(first.header("etag"), second.header("etag"));
    let r = get(tern.addr, "/style.css", &format!("If-None-Match: {}\r\n", first.header("etag").unwrap()));
    assert_eq!(r.status, 200, "the old ETag no longer matches");
}

#[test]
fn head_index_redirect_types_and_errors() {
    let site = common::site();
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, "", &[]);
        let r = request(tern.addr, "HEAD /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!((r.status, r.body.len()), (200, 0));
        assert_eq!(r.header("content-length"), Some(site.big.len().to_string().as_str()));
        // HEAD sends no body: the raw stream ends right after the head.
        let raw = common::exchange(tern.addr, b"HEAD /small.txt HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(2));
        assert!(raw.ends_with(b"\r\n\r\n"), "{io}: HEAD response carried a body");

        let r = get(tern.addr, "/", "");
        assert_eq!((r.status, r.body.as_slice()), (200, common::INDEX.as_bytes()));
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let r = get(tern.addr, "/sub", "");
        assert_eq!((r.status, r.header("location")), (301, Some("/sub/")));
        let r = get(tern.addr, "/sub?x=1", "");
        assert_eq!(r.header("location"), Some("/sub/?x=1"));
        assert_eq!(get(tern.addr, "/sub/", "").body, b"sub index\n");
        assert_eq!(get(tern.addr, "/noindex/", "").status, 403);
        assert_eq!(get(tern.addr, "/missing.html", "").status, 404);
        assert_eq!(get(tern.addr, "/small.txt/", "").status, 404);
        assert_eq!(get(tern.addr, "/style.css", "").header("content-type"), Some("text/css; charset=utf-8"));
        assert_eq!(get(tern.addr, "/big.bin", "").header("content-type"), Some("application/octet-stream"));
        let r = get(tern.addr, "/missing", "");
        assert!(String::from_utf8_lossy(&r.body).contains("<title>404 Not Found</title>"));
        assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));

        let r = request(
            tern.addr,
            "POST /small.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        );
        assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")));
        let r = request(tern.addr, "OPTIONS /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!((r.status, r.header("allow")), (200, Some("GET, HEAD, OPTIONS")));
        let r = request(tern.addr, "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(r.status, 200);
        let r = request(tern.addr, "BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(r.status, 501);
    }
}

#[test]
fn mime_types_can_be_configured() {
    let site = common::site();
    std::fs::write(site.root.join("notes.md"), "# notes\n").unwrap();
    let tern =
        Tern::start(&site.root, "sendfile", "[static]\ncharset = \"\"\nmime_types = { md = \"text/markdown\" }\n", &[]);
    assert_eq!(get(tern.addr, "/notes.md", "").header("content-type"), Some("text/markdown"));
    assert_eq!(get(tern.addr, "/style.css", "").header("content-type"), Some("text/css"));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let site = common::site();
    for io in io_methods() {
        let tern = Tern::start(&site.root, io, "", &[]);
        let paths = ["/small.txt", "/style.css", "/missing", "/", "/big.bin", "/small.txt", "/sub/"];
        let mut burst = Vec::new();
        let mut heads = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            let method = if i == 5 { "HEAD" } else { "GET" };
            heads.push(method == "HEAD");
            burst.extend_from_slice(format!("{method} {p} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        }
        burst.extend_from_slice(b"GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        heads.push(false);
        let mut s = TcpStream::connect(tern.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&burst).unwrap();
        let raw = read_until_close(&mut s);
        let rs = parse_responses(&raw, &heads);
        let statuses: Vec<u16> = rs.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [200, 200, 404, 200, 200, 200, 200, 200], "{io}");
        assert_eq!(rs[0].body, site.small);
        assert_eq!(rs[1].body, b"body{}\n");
        assert_eq!(rs[3].body, common::INDEX.as_bytes());
        assert!(rs[4].body == site.big, "{io}: big body in a pipeline");
        assert!(rs[5].body.is_empty());
        assert_eq!(rs[6].body, b"sub index\n");
        assert_eq!(rs[7].header("connection"), Some("close"));
    }
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let site = common::site();
    let tern = Tern::start(&site.root, "mmap", "", &[]);
    let mut s = TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..50 {
        s.write_all(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(&site.small) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed mid keep-alive");
            got.extend_from_slice(&buf[..n]);
        }
        let rs = parse_responses(&got, &[false]);
        assert_eq!((rs.len(), rs[0].status), (1, 200));
    }
    // HTTP/1.0 keeps the connection only when asked.
    let r = common::exchange(
        tern.addr,
        b"GET /small.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        Duration::from_secs(2),
    );
    assert!(common::find(&r, b"Connection: keep-alive\r\n").is_some());
    let text = ureq::get(&tern.url("/_tern/status")).call().unwrap().body_mut().read_to_string().unwrap();
    let status: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(status["requests"]["total"].as_u64().unwrap() >= 51);
}
