//! HTTP/2 end to end: `h2` over TLS by ALPN and `h2c` by prior knowledge,
//! with real clients — curl for the exchange (static files byte-exact, a
//! range, a `304`, a gzip variant, request bodies through the windows,
//! many streams on one connection), nghttp where curl falls short, and
//! h2spec for the protocol (installed by `scripts/ensure-go-tools.sh`).

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::h2::{attack, frame, GET_ROOT};
use common::tls::{https_addr, section, Ca};
use common::{Site, Tern};

/// A site whose `/post` answers any request with a fixed body (it takes a
/// request body whole), serving `root` otherwise; `sections` go first.
fn config(root: &Path, protocols: &str, sections: &str) -> String {
    format!(
        "{sections}[http2]\nprotocols = [{protocols}]\n[limits]\nmax_body_bytes = \"4MiB\"\n\
         [[site]]\nname = \"main\"\ndefault = true\nroot = \"{}\"\n\
         [[site.location]]\nexact = \"/post\"\nrespond = {{ body = \"taken\" }}\n",
        root.display()
    )
}

/// A server of `site` speaking h2c (and h2 over TLS, when `tls` is a
/// `[tls]` section).
fn serve(site: &Site, tls: &str) -> Tern {
    let page = "HTTP/2 test page, a compressible line\n".repeat(500);
    std::fs::write(site.root.join("page.html"), page).unwrap();
    Tern::start(&site.root, "auto", &config(&site.root, "\"h2\", \"h2c\"", tls), &[])
}

/// How curl reaches the server: h2c by prior knowledge, or TLS (trusting
/// `ca`, `localhost` resolved to the address) with HTTP/2 offered by ALPN.
enum Via<'a> {
    H2c(SocketAddr),
    Tls(SocketAddr, &'a Path),
}

impl Via<'_> {
    fn url(&self, path: &str) -> String {
        match self {
            Via::H2c(addr) => format!("http://{addr}{path}"),
            Via::Tls(addr, _) => format!("https://localhost:{}{path}", addr.port()),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Via::H2c(_) => vec!["--http2-prior-knowledge".into()],
            Via::Tls(addr, ca) => vec![
                "--http2".into(),
                "--cacert".into(),
                ca.display().to_string(),
                "--resolve".into(),
                format!("localhost:{}:127.0.0.1", addr.port()),
            ],
        }
    }

    /// `curl -sS` with `extra`, the body to `out`, the head to stdout
    /// followed by `%{http_version}`.
    fn curl(&self, path: &str, out: &Path, extra: &[&str]) -> (String, Vec<u8>) {
        let _ = std::fs::remove_file(out);
        let got = Command::new("curl")
            .args(["-sS", "--max-time", "30", "-D", "-", "-w", "version=%{http_version}\n", "-o"])
            .arg(out)
            .args(self.args())
            .args(extra)
            .arg(self.url(path))
            .output()
            .expect("curl");
        assert!(got.status.success(), "curl {path}: {}", String::from_utf8_lossy(&got.stderr));
        let head = String::from_utf8(got.stdout).unwrap().to_ascii_lowercase();
        assert!(head.contains("version=2\n"), "{path}: not HTTP/2: {head}");
        (head, std::fs::read(out).unwrap_or_default())
    }
}

impl Via<'_> {
    /// The URL of `path` for nghttp (which checks no certificate).
    fn nghttp_url(&self, path: &str) -> String {
        match self {
            Via::H2c(addr) => format!("http://{addr}{path}"),
            Via::Tls(addr, _) => format!("https://{addr}{path}"),
        }
    }

    /// The status `nghttp` gets uploading `data` to `path`. Not curl: when
    /// the answer comes before the whole body (a `413`), the server stops
    /// the upload as RFC 9113 §8.1 says, with `RST_STREAM` (`NO_ERROR`)
    /// after it, which curl 7.88 takes for a failure.
    fn nghttp_status(&self, path: &str, data: &Path) -> u16 {
        let url = self.nghttp_url(path);
        let got = Command::new("nghttp").args(["-v", "-t", "30", "-d"]).arg(data).arg(url).output().expect("nghttp");
        let text = String::from_utf8_lossy(&got.stdout);
        let status = text.lines().find_map(|l| l.split(":status: ").nth(1));
        status.and_then(|s| s.trim().parse().ok()).unwrap_or_else(|| panic!("no status from nghttp: {text}"))
    }
}

fn status(head: &str) -> u16 {
    head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

/// The exchange over one way in: what HTTP/1.1 answers, framed as HTTP/2;
/// then many streams at once.
fn check_exchange(site: &Site, via: &Via<'_>) {
    let out = site.dir.path().join("out");
    let (head, body) = via.curl("/", &out, &[]);
    assert_eq!((status(&head), &body[..]), (200, common::INDEX.as_bytes()), "{head}");
    assert!(field(&head, "connection").is_none(), "HTTP/1.1's connection field over HTTP/2: {head}");
    assert_eq!(field(&head, "content-length"), Some(&*common::INDEX.len().to_string()));

    let (head, body) = via.curl("/big.bin", &out, &[]);
    assert_eq!(status(&head), 200);
    assert!(body == site.big, "big.bin differs: {} bytes of {}", body.len(), site.big.len());

    let (head, body) = via.curl("/big.bin", &out, &["-H", "Range: bytes=1000-1999"]);
    assert_eq!(status(&head), 206, "{head}");
    assert_eq!(field(&head, "content-range"), Some(&*format!("bytes 1000-1999/{}", site.big.len())));
    assert!(body == site.big[1000..2000], "the range's bytes differ");

    let (head, _) = via.curl("/small.txt", &out, &[]);
    let etag = field(&head, "etag").expect("an etag").to_string();
    let (head, body) = via.curl("/small.txt", &out, &["-H", &format!("If-None-Match: {etag}")]);
    assert_eq!((status(&head), body.len()), (304, 0), "{head}");

    let (head, body) = via.curl("/page.html", &out, &["-H", "Accept-Encoding: gzip"]);
    assert_eq!(field(&head, "content-encoding"), Some("gzip"), "{head}");
    let mut page = String::new();
    flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut page).unwrap();
    assert_eq!(page, std::fs::read_to_string(site.root.join("page.html")).unwrap());

    // HEAD: the head alone (curl fails a body it did not expect).
    let (head, _) = via.curl("/small.txt", &out, &["-I"]);
    assert_eq!((status(&head), field(&head, "content-length")), (200, Some("1000")), "{head}");

    // A body larger than both receive windows arrives whole; one larger
    // than allowed is refused.
    let upload = site.dir.path().join("upload");
    std::fs::write(&upload, common::pattern(3 << 20, 5)).unwrap();
    let data = format!("@{}", upload.display());
    let (head, body) = via.curl("/post", &out, &["--data-binary", &data]);
    assert_eq!((status(&head), &body[..]), (200, &b"taken"[..]), "{head}");
    std::fs::write(&upload, common::pattern(5 << 20, 5)).unwrap();
    assert_eq!(via.nghttp_status("/post", &upload), 413);

    let (head, _) = via.curl("/missing", &out, &[]);
    assert_eq!(status(&head), 404, "{head}");

    check_streams(site, via, 20);
}

/// `n` requests each of `/big.bin` and `/small.txt`, all at once on one
/// connection (nghttp: curl 7.88 fails its own parallel transfers over
/// h2c, against any server): every one answered whole.
fn check_streams(site: &Site, via: &Via<'_>, n: usize) {
    let got = Command::new("nghttp")
        .args(["-ns", "-t", "60", "-H", "accept-encoding: identity", "-m", &n.to_string()])
        .args(["/big.bin", "/small.txt"].map(|p| via.nghttp_url(p)))
        .output()
        .expect("nghttp");
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(got.status.success(), "nghttp: {text}{}", String::from_utf8_lossy(&got.stderr));
    // `id responseEnd requestStart process code size path` per request.
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 7 && f[0].parse::<u32>().is_ok())
        .collect();
    let answered =
        |path: &str, size: &str| rows.iter().filter(|f| f[4] == "200" && f[6] == path && f[5] == size).count();
    let small = site.small.len().to_string();
    assert_eq!((answered("/big.bin", "3M"), answered("/small.txt", &small)), (n, n), "{text}");
}

fn pki(dir: &Path) -> (PathBuf, String) {
    let ca = Ca::new("tern h2 test CA");
    let (cert, key, _) = ca.leaf(dir, "site", &["localhost"]);
    (ca.write(dir, "test"), section(&cert, &key))
}

#[test]
fn h2c_by_prior_knowledge_answers_as_http1_does() {
    let site = common::site();
    let tern = serve(&site, "");
    check_exchange(&site, &Via::H2c(tern.addr));
}

#[test]
fn h2_over_tls_by_alpn_answers_as_http1_does() {
    let site = common::site();
    let (ca, tls) = pki(site.dir.path());
    let tern = serve(&site, &tls);
    check_exchange(&site, &Via::Tls(https_addr(&tern), &ca));
}

#[test]
fn http2_is_off_unless_configured_and_http1_is_unchanged_beside_it() {
    let site = common::site();
    let (ca, tls) = pki(site.dir.path());
    let version = |args: &[&str], url: String| http_version(&ca, args, &url);
    for (protocols, h2) in [("", false), ("\"h2\", \"h2c\"", true)] {
        let tern = Tern::start(&site.root, "auto", &config(&site.root, protocols, &tls), &[]);
        let https = https_addr(&tern);
        let tls_url = format!("https://localhost:{}/small.txt", https.port());
        let plain = tern.url("/small.txt");
        // ALPN offers h2 only when it is spoken; HTTP/1.1 stays as it was.
        let offered = version(&["--http2", "--resolve", &resolve(https)], tls_url.clone());
        assert_eq!(offered, if h2 { "2" } else { "1.1" }, "protocols [{protocols}]");
        assert_eq!(version(&["--http1.1", "--resolve", &resolve(https)], tls_url), "1.1");
        assert_eq!(version(&["--http1.1"], plain.clone()), "1.1");
        let prior = version(&["--http2-prior-knowledge"], plain);
        assert_eq!(prior == "2", h2, "h2c by prior knowledge with protocols [{protocols}]: {prior:?}");
    }
}

/// `Upgrade: h2c` is answered `101` only when `http2.upgrade` is on: the
/// request is then answered as stream 1, exact; otherwise in HTTP/1.1.
#[test]
fn upgrade_h2c_is_taken_only_when_configured() {
    let site = common::site();
    for upgrade in [false, true] {
        let extra = format!("[http2]\nprotocols = [\"h2c\"]\nupgrade = {upgrade}\n");
        let tern = Tern::start(&site.root, "auto", &extra, &[]);
        let out = site.dir.path().join("upgraded");
        let got = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--http2", "-D", "-", "-w", "version=%{http_version}\n", "-o"])
            .arg(&out)
            .arg(tern.url("/small.txt?x=1"))
            .output()
            .expect("curl");
        let head = String::from_utf8(got.stdout).unwrap().to_ascii_lowercase();
        assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
        assert_eq!(std::fs::read(&out).unwrap(), site.small, "{head}");
        if upgrade {
            assert!(head.starts_with("http/1.1 101 switching protocols\r\n"), "{head}");
            assert!(head.contains("upgrade: h2c\r\n") && head.contains("\r\n\r\nhttp/2 200"), "{head}");
            assert!(head.ends_with("version=2\n"), "{head}");
            assert_eq!(tern.status()["http2"]["connections"], 1);
        } else {
            assert!(head.starts_with("http/1.1 200 ok\r\n") && head.ends_with("version=1.1\n"), "{head}");
        }
    }
}

/// After a `101`, a first frame longer than any allowed before SETTINGS is
/// not waited for: the connection ends with `GOAWAY` at once.
#[test]
fn an_upgraded_connection_with_an_oversized_first_frame_ends_at_once() {
    use std::io::{Read, Write};
    let site = common::site();
    let tern = Tern::start(&site.root, "auto", "[http2]\nprotocols = [\"h2c\"]\nupgrade = true\n", &[]);
    let mut s = std::net::TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let ask = "GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\n\r\n";
    let mut out = ask.as_bytes().to_vec();
    out.extend(common::h2::preface().iter().take(24));
    // A SETTINGS frame's head saying 1 MiB follows, and no more.
    out.extend_from_slice(&[0x10, 0, 0, 4, 0, 0, 0, 0, 0]);
    s.write_all(&out).unwrap();
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    assert!(read.is_ok(), "not closed: {read:?} after {} bytes", got.len());
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{text}");
    let end = common::find(&got, b"\r\n\r\n").unwrap() + 4;
    let frames = common::h2::frames(&got[end..]);
    assert!(frames.iter().any(|(kind, ..)| *kind == 7), "no GOAWAY: {frames:?}");
}

/// The HTTP version curl spoke to `url` (trusting `ca`): `2`, `1.1`, or
/// empty when it failed.
fn http_version(ca: &Path, args: &[&str], url: &str) -> String {
    let got = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_version}", "--cacert"])
        .arg(ca)
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8(got.stdout).unwrap()
}

/// `localhost` resolved to `addr`, for curl.
fn resolve(addr: SocketAddr) -> String {
    format!("localhost:{}:{}", addr.port(), addr.ip())
}

/// An address's own `protocols` take the place of `http2.protocols`: h2
/// everywhere but an HTTPS address that says `[]`, h2c only on the plain
/// address that says so.
#[test]
fn each_address_may_speak_its_own_http2() {
    let site = common::site();
    let (ca, tls) = pki(site.dir.path());
    let tls = tls.replace(
        "listen = [\"127.0.0.1:0\"]",
        "listen = [\"127.0.0.1:0\", { address = \"127.0.0.2:0\", protocols = [] }]",
    );
    let listen = "[log]\naccess = \"off\"\n[server]\nworkers = 2\n\
                  listen = [\"127.0.0.1:0\", { address = \"127.0.0.2:0\", protocols = [\"h2c\"] }]\n";
    let file = site.dir.path().join("addresses.toml");
    std::fs::write(&file, config(&site.root, "\"h2\"", &format!("{listen}{tls}"))).unwrap();
    let mut cmd = Command::new(common::tern_bin());
    cmd.args(["serve", "--config"]).arg(&file);
    let tern = Tern::spawn(cmd);
    let at = |scheme, ip| common::tls::listening(&tern, scheme, ip);
    let tls_url = |addr: SocketAddr| format!("https://localhost:{}/small.txt", addr.port());
    for (ip, h2) in [("127.0.0.1", "2"), ("127.0.0.2", "1.1")] {
        let https = at("https", ip);
        assert_eq!(http_version(&ca, &["--http2", "--resolve", &resolve(https)], &tls_url(https)), h2, "{https}");
    }
    for (ip, h2c) in [("127.0.0.1", false), ("127.0.0.2", true)] {
        let plain = format!("http://{}/small.txt", at("http", ip));
        let prior = http_version(&ca, &["--http2-prior-knowledge"], &plain);
        assert_eq!(prior == "2", h2c, "h2c by prior knowledge on {plain}: {prior:?}");
        assert_eq!(http_version(&ca, &["--http1.1"], &plain), "1.1");
    }
}

/// RFC 9218: of two large answers asked at once, the one whose request
/// said it is more urgent (`priority: u=0`) is sent first, though asked
/// second; without the field they go in the order asked.
#[test]
fn the_more_urgent_stream_is_sent_first() {
    use std::io::{Read, Write};
    let site = common::site();
    let tern = serve(&site, "");
    // Which of streams 1 and 3 (both /big.bin) ends first, when 3 says
    // `urgency`, and a `PRIORITY_UPDATE` for 3 says `update` before its
    // `HEADERS` (`true`) or after.
    let first_done = |urgency: Option<&str>, update: Option<(&str, bool)>| {
        let mut s = std::net::TcpStream::connect(tern.addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        // Windows as large as HTTP/2 allows: only the order is the server's.
        let mut out = common::h2::preface();
        out.extend(frame(4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
        out.extend(frame(8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
        let get = |priority: Option<&str>| {
            let mut block = b"\x82\x86\x04\x08/big.bin\x41\x09localhost".to_vec();
            if let Some(p) = priority {
                block.extend_from_slice(b"\x00\x08priority");
                block.push(p.len() as u8);
                block.extend_from_slice(p.as_bytes());
            }
            block
        };
        let priority_update = |value: &str| frame(0x10, 0, 0, &[&3u32.to_be_bytes()[..], value.as_bytes()].concat());
        out.extend(frame(1, 0x5, 1, &get(None)));
        if let Some((value, true)) = update {
            out.extend(priority_update(value));
        }
        out.extend(frame(1, 0x5, 3, &get(urgency)));
        if let Some((value, false)) = update {
            out.extend(priority_update(value));
        }
        s.write_all(&out).unwrap();
        let (mut got, mut buf) = (Vec::new(), vec![0; 1 << 16]);
        loop {
            let ended = streams_ended(&got);
            if ended.len() == 2 {
                break ended[0];
            }
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed before both ended");
            got.extend_from_slice(&buf[..n]);
        }
    };
    assert_eq!(first_done(None, None), 1, "in the order asked");
    assert_eq!(first_done(Some("u=0"), None), 3, "the urgent one first");
    // RFC 9218 §7.1: an update may come before its stream; it replaces
    // what the request said.
    assert_eq!(first_done(None, Some(("u=0", true))), 3, "made urgent before it opened");
    assert_eq!(first_done(None, Some(("u=1", false))), 3, "made urgent once open");
    assert_eq!(first_done(Some("u=0"), Some(("u=5", false))), 1, "made less urgent than its request said");
}

/// The streams whose last `DATA` frame (`END_STREAM`) is in `bytes`, in
/// that order.
fn streams_ended(bytes: &[u8]) -> Vec<u32> {
    let frames = common::h2::frames(bytes).into_iter();
    frames.filter(|(kind, flags, ..)| *kind == 0 && flags & 1 == 1).map(|(_, _, stream, _)| stream).collect()
}

/// `limits.keepalive_requests` holds for HTTP/2 as for HTTP/1.1: past it
/// the connection says `GOAWAY` (`NO_ERROR`) and the client goes on on a
/// new one, nothing refused.
#[test]
fn a_connection_that_served_keepalive_requests_says_goaway() {
    let site = common::site();
    let text = config(&site.root, "\"h2c\"", "").replace("[limits]\n", "[limits]\nkeepalive_requests = 3\n");
    let tern = Tern::start(&site.root, "auto", &text, &[]);
    // One stream at a time on one connection; the client opens another
    // after each GOAWAY.
    let got = Command::new(common::tern_bin())
        .args(["bench", "--no-store", "--h2", "--json", "-c", "1", "-t", "1", "--streams", "1", "-n", "7"])
        .arg(tern.url("/small.txt"))
        .output()
        .expect("tern bench");
    let r: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!((&r["requests"], &r["status"]["200"]), (&7.into(), &7.into()), "{r}");
    // A stream the client sent before it read the GOAWAY is still served.
    let connects = r["connects"].as_u64().unwrap();
    let http2 = &tern.status()["http2"];
    assert!((2..=3).contains(&connects), "{r}\n{http2}");
    let said = http2["goaways"]["no_error"].as_u64().unwrap();
    assert!(said + 1 >= connects && said >= 1 && http2["streams"] == 7, "{http2}");
}

/// h2spec, found where `scripts/ensure-go-tools.sh` installs it.
fn h2spec() -> PathBuf {
    if let Some(p) = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("h2spec")).find(|p| p.is_file()))
    {
        return p;
    }
    let gopath = Command::new("go").args(["env", "GOPATH"]).output().ok();
    let bin = gopath.map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("bin/h2spec"));
    bin.filter(|p| p.is_file()).expect("h2spec is installed (scripts/ensure-go-tools.sh)")
}

/// Runs h2spec against `addr`; returns its failed cases' lines and its
/// summary.
fn run_h2spec(addr: SocketAddr, tls: bool) -> (Vec<String>, String) {
    let mut cmd = Command::new(h2spec());
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "-o", "5"]);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let got = cmd.output().expect("h2spec");
    let text = String::from_utf8_lossy(&got.stdout).into_owned();
    let failures = text.split("Failures:").nth(1).unwrap_or("");
    let failed = failures.lines().filter(|l| l.trim_start().starts_with('×')).map(|l| l.trim().to_string()).collect();
    let summary = text.lines().rfind(|l| l.contains("tests,")).unwrap_or("no summary").to_string();
    (failed, summary)
}

#[test]
fn h2spec_passes_every_case() {
    let site = common::site();
    let (_ca, tls) = pki(site.dir.path());
    let tern = serve(&site, &tls);
    for (via, addr, tls) in [("h2 over TLS", https_addr(&tern), true), ("h2c", tern.addr, false)] {
        let (failed, summary) = run_h2spec(addr, tls);
        assert!(failed.is_empty() && summary.contains(" 0 failed"), "{via}: {summary}\n{failed:#?}");
    }
}

#[test]
fn a_broken_preface_is_closed_unanswered_where_h2c_is_spoken() {
    // What h2spec sends (its case 3.5/2): not HTTP/1.x, so on an address
    // that speaks h2c it is a client that meant HTTP/2 (RFC 9113 §3.4).
    const BROKEN: &[u8] = b"INVALID CONNECTION PREFACE\r\n\r\n";
    let site = common::site();
    let exchange = |addr, bytes: &[u8]| {
        let (got, closed) = common::exchange_until_close(addr, bytes, std::time::Duration::from_secs(10));
        assert!(closed, "the server closes");
        String::from_utf8_lossy(&got).into_owned()
    };
    let h2c = serve(&site, "");
    assert_eq!(exchange(h2c.addr, BROKEN), "", "h2c: closed without an answer");
    // Any other bad head, and a bad version after a first request, keep
    // their HTTP/1.1 answers.
    let answered = |bytes: &[u8]| exchange(h2c.addr, bytes);
    assert!(answered(b"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n").starts_with("HTTP/1.1 400 "));
    let second = answered(b"GET /small.txt HTTP/1.1\r\nHost: a\r\n\r\nINVALID CONNECTION PREFACE\r\n\r\n");
    assert!(second.starts_with("HTTP/1.1 200 ") && second.contains("HTTP/1.1 400 "), "{second}");
    // Without h2c the same line is a bad HTTP/1.1 request.
    let plain = Tern::start(&site.root, "auto", &config(&site.root, "\"h2\"", ""), &[]);
    assert!(exchange(plain.addr, BROKEN).starts_with("HTTP/1.1 400 "));
}

/// More answers at once than one turn's output holds (64 KiB: 100 streams
/// of 1 KiB, or of 40 KiB): what a stream was granted of its windows and
/// could not use in one turn is used in the next. h2load waited for the
/// last few streams for good before.
#[test]
fn a_hundred_streams_at_once_all_finish() {
    let site = common::site();
    let tern = serve(&site, "");
    for (file, len) in [("one.bin", 1024), ("forty.bin", 40 * 1024)] {
        std::fs::write(site.root.join(file), common::pattern(len, 7)).unwrap();
        let got = Command::new("timeout")
            .args(["30", "h2load", "-n", "600", "-c1", "-m100"])
            .arg(tern.url(&format!("/{file}")))
            .output()
            .expect("h2load (nghttp2-client)");
        let text = String::from_utf8_lossy(&got.stdout);
        assert!(text.contains("requests: 600 total, 600 started, 600 done, 600 succeeded"), "{file}: {text}");
    }
}

/// `ENHANCE_YOUR_CALM`: what the server says to a client it stops.
const ENHANCE_YOUR_CALM: u32 = 0xb;

#[test]
fn floods_end_the_connection_and_others_are_served() {
    let site = common::site();
    let tern = serve(&site, "");
    let out = site.dir.path().join("out");
    let served = || {
        let (head, body) = Via::H2c(tern.addr).curl("/small.txt", &out, &[]);
        assert_eq!((status(&head), body), (200, site.small.clone()));
    };

    // Rapid reset (CVE-2023-44487): streams opened and cancelled at once,
    // far more of them than are served.
    let mut resets = Vec::new();
    for i in 0..10_000u32 {
        resets.extend(frame(1, 0x5, 2 * i + 1, GET_ROOT));
        resets.extend(frame(3, 0, 2 * i + 1, &8u32.to_be_bytes()));
    }
    let (goaway, answered) = attack(tern.addr, &resets);
    assert_eq!(goaway, Some(ENHANCE_YOUR_CALM), "rapid reset");
    assert!(answered < 1000, "{answered} of 10000 reset streams answered");
    served();

    // CONTINUATION flood: one header block that never ends.
    let mut flood = frame(1, 0x1, 1, GET_ROOT);
    let field = [b"\x00\x03x-a\x64".as_slice(), &[b'v'; 100]].concat().repeat(10);
    for _ in 0..2000 {
        flood.extend(frame(9, 0, 1, &field));
    }
    assert_eq!(attack(tern.addr, &flood), (Some(ENHANCE_YOUR_CALM), 0), "CONTINUATION flood");
    served();

    let http2 = &tern.status()["http2"];
    assert_eq!((&http2["connections"], &http2["errors"]), (&4.into(), &2.into()), "{http2}");
    assert_eq!(http2["goaways"]["enhance_your_calm"], 2, "{http2}");
    assert!(http2["streams"].as_u64() >= Some(2), "{http2}");
}

#[test]
fn a_client_that_never_opens_its_window_is_timed_out() {
    let site = common::site();
    let config = config(&site.root, "\"h2c\"", "[timeouts]\nsend = \"1s\"\n");
    let tern = Tern::start(&site.root, "auto", &config, &[]);
    // Windows of 0 for its streams, then `GET /big.bin`: the answer's head
    // comes, and nothing of its body can.
    let mut stall = frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]);
    stall.extend(frame(1, 0x5, 1, b"\x82\x86\x04\x08/big.bin\x41\x09localhost"));
    let start = std::time::Instant::now();
    let (_, headers) = attack(tern.addr, &stall);
    let waited = start.elapsed();
    assert_eq!(headers, 1);
    assert!(waited < std::time::Duration::from_secs(6), "closed after {waited:?}");
}

#[test]
fn a_stopping_server_finishes_the_streams_in_flight() {
    let site = common::site();
    // Far more than the sockets' buffers hold, at 20 MiB/s: under way
    // when the server is told to stop.
    let huge = common::pattern(64 << 20, 3);
    std::fs::write(site.root.join("huge.bin"), &huge).unwrap();
    let mut tern = serve(&site, "");
    let out = site.dir.path().join("out");
    let download = Command::new("curl")
        .args(["-sS", "--max-time", "60", "--limit-rate", "20M", "--http2-prior-knowledge", "-o"])
        .arg(&out)
        .arg(format!("http://{}/huge.bin", tern.addr))
        .spawn()
        .expect("curl");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let exited = tern.terminate(std::time::Duration::from_secs(30));
    let got = download.wait_with_output().unwrap();
    assert!(got.status.success(), "the download failed");
    assert!(std::fs::read(&out).unwrap() == huge, "the download is not whole");
    assert!(exited.is_some(), "the server did not stop after its last stream");
}

#[test]
fn a_stopping_server_says_goaway_to_an_idle_client() {
    use std::io::Write;
    let site = common::site();
    let tern = serve(&site, "");
    let mut s = std::net::TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(&common::h2::preface()).unwrap();
    let mut settings = [0; 9];
    s.read_exact(&mut settings).unwrap();
    unsafe { libc::kill(tern.pid(), libc::SIGTERM) };
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let mut at = u32::from_be_bytes([0, settings[0], settings[1], settings[2]]) as usize;
    let mut kinds = Vec::new();
    while at + 9 <= got.len() {
        kinds.push(got[at + 3]);
        at += 9 + u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
    }
    assert!(kinds.contains(&7), "no GOAWAY before the close: frames {kinds:?}");
}

/// A site whose requests go to backends: CGI programs in `cgi-bin` (the C
/// gateway's `hello.cgi`, Perl, Python and sh), PHP pages through a
/// php-fpm of its own, and `/proxied/` through the proxy to a second tern;
/// `tls` a `[tls]` section or nothing.
struct Backends {
    site: Site,
    state: PathBuf,
    /// What `hello.cgi` prints after its head.
    hello: Vec<u8>,
    /// The file the upstream serves at `/proxied/file.bin`.
    proxied: Vec<u8>,
    _fpm: common::php_fpm::PhpFpm,
    _upstream: Tern,
    tern: Tern,
}

/// The gateway's `hello.cgi`, built once for all tests.
fn hello_cgi() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let gateway = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../gateway");
            let made = Command::new("make").args(["-s", "-C"]).arg(&gateway).arg("build/hello.cgi").status().unwrap();
            assert!(made.success(), "make -C gateway build/hello.cgi");
            gateway.join("build/hello.cgi")
        })
        .clone()
}

fn program(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The backends' site, with `tls` (a config's `[tls]`) and CGI programs
/// cut at `cgi_timeout` (short only where a test waits for it: a 1 MiB
/// echo through `sh` on a loaded machine may take seconds).
fn backends(tls: &str, cgi_timeout: &str) -> Backends {
    let site = common::site();
    let (root, state) = (site.root.clone(), site.dir.path().join("state"));
    let cgi = root.join("cgi-bin");
    std::fs::create_dir_all(&cgi).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::copy(hello_cgi(), cgi.join("hello.cgi")).unwrap();
    // The built program, not the copy: a test forking on another thread
    // may hold the copy open for writing a moment longer (`ETXTBSY`).
    let printed = Command::new(hello_cgi()).output().unwrap().stdout;
    let hello = printed[common::find(&printed, b"\n\n").expect("hello.cgi's head") + 2..].to_vec();
    let env = "REQUEST_METHOD QUERY_STRING CONTENT_LENGTH SERVER_NAME SERVER_PROTOCOL";
    program(
        &cgi.join("env.pl"),
        &format!("print \"Content-Type: text/plain\\r\\n\\r\\n\";\nfor my $n (qw({env})) {{ print \"$n=\" . ($ENV{{$n}} // '') . \"\\n\"; }}\n"),
    );
    program(
        &cgi.join("env.py"),
        &format!("import os, sys\nsys.stdout.write('Content-Type: text/plain\\n\\n')\nfor n in '{env}'.split():\n    sys.stdout.write(n + '=' + os.environ.get(n, '') + '\\n')\n"),
    );
    program(&cgi.join("echo.sh"), "#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\n\\n'\nexec cat\n");
    // A burst bigger than a stream's queue, more after a pause, the end
    // after another: each a report of its own on the pipe.
    program(
        &cgi.join("burst.sh"),
        "#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\n\\n'\nhead -c 100000 /dev/zero\nsleep 0.3\nprintf end\nsleep 0.3\n",
    );
    program(&cgi.join("local.sh"), "#!/bin/sh\nprintf 'Location: /small.txt\\n\\n'\n");
    program(
        &cgi.join("dies.sh"),
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\npart of it'\nsleep 0.3\nkill -KILL $$\n",
    );
    // Record their pids (and a grandchild's), then hang or stream.
    let spawn = format!("sleep 300 & echo $! > {st}/$1.child; echo $$ > {st}/$1.pid", st = state.display());
    program(&cgi.join("hang.sh"), &format!("#!/bin/sh\nset -- hang\n{spawn}\nsleep 300\n"));
    program(
        &cgi.join("stream.sh"),
        &format!("#!/bin/sh\nset -- stream\n{spawn}\nprintf 'Content-Type: text/plain\\n\\n'\nwhile :; do echo line; sleep 0.05; done\n"),
    );
    std::fs::write(root.join("teapot.php"), "<?php header('Status: 418 Teapot'); header('X-Php: yes'); echo 'tea';")
        .unwrap();
    std::fs::write(
        root.join("echo.php"),
        "<?php header('X-Length: ' . $_SERVER['CONTENT_LENGTH']); readfile('php://input');",
    )
    .unwrap();
    // As many pooled connections as children: a kept connection holds one.
    let fpm = common::php_fpm::PhpFpm::start(site.dir.path(), 4, "");

    let upstream_root = site.dir.path().join("upstream");
    std::fs::create_dir_all(upstream_root.join("proxied")).unwrap();
    let proxied = common::pattern(300_000, 9);
    std::fs::write(upstream_root.join("proxied/file.bin"), &proxied).unwrap();
    let upstream = Tern::start(&upstream_root, "auto", "", &[]);

    let config = format!(
        "{tls}[http2]\nprotocols = [\"h2\", \"h2c\"]\n[limits]\nmax_body_bytes = \"4MiB\"\n[cgi]\ntimeout = \"{cgi_timeout}\"\n\
         [fastcgi.backends.php]\naddress = \"unix:{}\"\nextensions = [\".php\"]\nmax_connections = 4\n\
         [upstream.app]\nservers = [{{ address = \"{}\" }}]\n\
         [[site]]\nname = \"main\"\ndefault = true\nroot = \"{}\"\n\
         [[site.location]]\nprefix = \"/proxied/\"\nproxy = \"app\"\n",
        fpm.socket.display(),
        upstream.addr,
        root.display()
    );
    let tern = Tern::start(&root, "auto", &config, &[]);
    Backends { site, state, hello, proxied, _fpm: fpm, _upstream: upstream, tern }
}

/// CGI (C, Perl, Python, sh), PHP and the proxy over one way in, exact;
/// request bodies through CGI and PHP; a local redirect.
fn check_backends(b: &Backends, via: &Via<'_>) {
    let out = b.site.dir.path().join("out");
    let (head, body) = via.curl("/cgi-bin/hello.cgi", &out, &[]);
    assert_eq!((status(&head), &body[..]), (200, &b.hello[..]), "{head}");
    assert_eq!(field(&head, "content-type"), Some("text/html; charset=utf-8"), "{head}");
    assert!(field(&head, "connection").is_none() && field(&head, "transfer-encoding").is_none(), "{head}");
    // `:authority` is the host the program is told of.
    let host = match via {
        Via::H2c(_) => "127.0.0.1",
        Via::Tls(..) => "localhost",
    };
    for program in ["env.pl", "env.py"] {
        let (head, body) = via.curl(&format!("/cgi-bin/{program}?a=1"), &out, &[]);
        let text = String::from_utf8(body).unwrap();
        assert_eq!(status(&head), 200, "{head}");
        let expected = format!(
            "REQUEST_METHOD=GET\nQUERY_STRING=a=1\nCONTENT_LENGTH=\nSERVER_NAME={host}\nSERVER_PROTOCOL=HTTP/2.0\n"
        );
        assert_eq!(text, expected, "{program}");
    }
    // HEAD: the head alone (curl fails a body it did not expect).
    let (head, _) = via.curl("/cgi-bin/hello.cgi", &out, &["-I"]);
    assert_eq!(field(&head, "content-type"), Some("text/html; charset=utf-8"), "{head}");

    let (head, body) = via.curl("/teapot.php", &out, &[]);
    assert_eq!((status(&head), &body[..]), (418, &b"tea"[..]), "{head}");
    assert_eq!(field(&head, "x-php"), Some("yes"), "{head}");

    let (head, body) = via.curl("/proxied/file.bin", &out, &[]);
    assert_eq!(status(&head), 200, "{head}");
    assert_eq!(field(&head, "content-length"), Some(&*b.proxied.len().to_string()), "{head}");
    assert!(body == b.proxied, "the proxied file differs: {} bytes of {}", body.len(), b.proxied.len());

    // Bodies in: through a CGI program's stdin and PHP's input, back.
    let upload = b.site.dir.path().join("upload");
    let sent = common::pattern(1 << 20, 7);
    std::fs::write(&upload, &sent).unwrap();
    let data = format!("@{}", upload.display());
    let (head, body) = via.curl("/cgi-bin/echo.sh", &out, &["--data-binary", &data]);
    assert_eq!(status(&head), 200, "{head}");
    assert!(body == sent, "the CGI echo differs: {} bytes of {}", body.len(), sent.len());
    let (head, body) = via.curl("/echo.php", &out, &["--data-binary", &data]);
    assert_eq!((status(&head), field(&head, "x-length")), (200, Some(&*sent.len().to_string())), "{head}");
    assert!(body == sent, "the PHP echo differs: {} bytes of {}", body.len(), sent.len());

    // A local redirect is answered in place, on the stream.
    let (head, body) = via.curl("/cgi-bin/local.sh", &out, &[]);
    assert_eq!((status(&head), body), (200, b.site.small.clone()), "{head}");
}

#[test]
fn backends_answer_over_h2c_as_over_http1() {
    let b = backends("", "2s");
    check_backends(&b, &Via::H2c(b.tern.addr));
}

#[test]
fn backends_answer_over_tls_as_over_http1() {
    let site = common::site();
    let (ca, tls) = pki(site.dir.path());
    let b = backends(&tls, "2s");
    check_backends(&b, &Via::Tls(https_addr(&b.tern), &ca));
}

/// `nghttp -ns` for `paths` on one connection (each `m` times): its
/// statistics rows, `id responseEnd requestStart process code size path`.
fn nghttp_rows(addr: SocketAddr, m: usize, paths: &[&str]) -> Vec<Vec<String>> {
    let got = Command::new("nghttp")
        .args(["-ns", "-t", "30", "-m", &m.to_string()])
        .args(paths.iter().map(|p| format!("http://{addr}{p}")))
        .output()
        .expect("nghttp");
    let text = String::from_utf8_lossy(&got.stdout);
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|f| f.len() == 7 && f[0].parse::<u32>().is_ok())
        .collect()
}

/// A row's `responseEnd` (`+1.23s`, `+456.7ms`, `+89us`).
fn ended_after(row: &[String]) -> std::time::Duration {
    let t = row[1].trim_start_matches('+');
    let (n, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap());
    let n: f64 = n.parse().unwrap();
    std::time::Duration::from_secs_f64(match unit {
        "s" => n,
        "ms" => n / 1e3,
        _ => n / 1e6,
    })
}

#[test]
fn twenty_cgi_streams_on_one_connection_are_all_answered() {
    let b = backends("", "30s");
    let rows = nghttp_rows(b.tern.addr, 20, &["/cgi-bin/hello.cgi", "/small.txt", "/teapot.php"]);
    let answered = |path: &str, code: &str| rows.iter().filter(|f| f[6] == path && f[4] == code).count();
    assert_eq!(answered("/cgi-bin/hello.cgi", "200"), 20, "{rows:?}");
    assert_eq!(answered("/small.txt", "200"), 20, "{rows:?}");
    assert_eq!(answered("/teapot.php", "418"), 20, "{rows:?}");
    // Every CGI answer whole: the size of hello.cgi's (nghttp rounds it).
    let sizes: std::collections::HashSet<&str> =
        rows.iter().filter(|f| f[6] == "/cgi-bin/hello.cgi").map(|f| f[5].as_str()).collect();
    assert_eq!(sizes.len(), 1, "{rows:?}");
    let http2 = &b.tern.status()["http2"];
    assert_eq!(http2["connections"], 1, "{http2}");
}

#[test]
fn a_program_dying_mid_body_resets_its_stream_only() {
    let b = backends("", "30s");
    let got = Command::new("nghttp")
        .args(["-v", "-t", "30"])
        .args(["/cgi-bin/dies.sh", "/cgi-bin/hello.cgi", "/small.txt"].map(|p| format!("http://{}{p}", b.tern.addr)))
        .output()
        .expect("nghttp");
    let text = String::from_utf8_lossy(&got.stdout);
    // Streams 13, 15, 17 (nghttp's first is 13): the first reset by the
    // server, the others ended with their whole bodies.
    let reset = text.lines().position(|l| l.contains("recv RST_STREAM frame") && l.contains("stream_id=13"));
    let reset = reset.unwrap_or_else(|| panic!("no RST_STREAM for the program's stream: {text}"));
    assert!(text.lines().nth(reset + 1).is_some_and(|l| l.contains("INTERNAL_ERROR")), "{text}");
    for id in [15, 17] {
        let ended = format!("flags=0x01, stream_id={id}>");
        assert!(text.lines().any(|l| l.contains("recv DATA frame") && l.contains(&ended)), "stream {id}: {text}");
        assert!(!text.contains(&format!("RST_STREAM frame <length=4, flags=0x00, stream_id={id}>")), "{text}");
    }
    let resets = &b.tern.status()["http2"]["resets"];
    assert_eq!((&resets["server"], &resets["client"]), (&1.into(), &0.into()), "{resets}");
}

#[test]
fn a_hanging_program_is_504_on_its_stream_while_another_is_served() {
    let b = backends("", "2s");
    let rows = nghttp_rows(b.tern.addr, 1, &["/cgi-bin/hang.sh", "/cgi-bin/hello.cgi", "/small.txt"]);
    let row = |path: &str| rows.iter().find(|f| f[6] == path).unwrap_or_else(|| panic!("{path}: {rows:?}"));
    let hang = row("/cgi-bin/hang.sh");
    assert_eq!(hang[4], "504", "{rows:?}");
    let waited = ended_after(hang);
    assert!(waited >= std::time::Duration::from_secs(2) && waited < std::time::Duration::from_secs(5), "{rows:?}");
    for other in ["/cgi-bin/hello.cgi", "/small.txt"] {
        let r = row(other);
        assert_eq!(r[4], "200", "{rows:?}");
        assert!(ended_after(r) < std::time::Duration::from_secs(1), "{other} waited for the hanging one: {rows:?}");
    }
    let pids = ["hang.pid", "hang.child"].map(|f| read_pid(&b.state.join(f)));
    wait_gone(&pids);
    assert_eq!(b.tern.status()["cgi"]["timeouts"], 1);
}

/// The pid a program wrote to `path`.
fn read_pid(path: &Path) -> i32 {
    let start = std::time::Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()) {
            return pid;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "{} never written", path.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `pid` runs (a zombie does not: it waits to be reaped).
fn running(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z')
}

fn wait_gone(pids: &[i32]) {
    let start = std::time::Instant::now();
    while pids.iter().any(|&p| running(p) || std::path::Path::new(&format!("/proc/{p}")).exists()) {
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "processes {pids:?} still there");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Reads one frame: its type, flags, stream and payload.
fn read_frame(s: &mut std::net::TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0; 9];
    s.read_exact(&mut head).expect("a frame");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).unwrap();
    (head[3], head[4], stream, payload)
}

/// A program that ends while its stream's queue is full (the client's
/// window shut) is seen to end once the window opens: the report of its
/// pipe's end, come while the job still had bytes to read, is not lost.
#[test]
fn a_program_ending_while_its_stream_is_held_ends_the_stream() {
    use std::io::Write;
    let b = backends("", "30s");
    let mut s = std::net::TcpStream::connect(b.tern.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE 0: nothing of the body may be sent yet.
    hello.extend(frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    hello.extend(frame(1, 0x5, 1, b"\x82\x86\x04\x11/cgi-bin/burst.sh\x41\x09localhost"));
    s.write_all(&hello).unwrap();
    loop {
        let (kind, flags, stream, _) = read_frame(&mut s);
        if kind == 4 && flags & 1 == 0 {
            s.write_all(&frame(4, 1, 0, b"")).unwrap();
        }
        if kind == 1 && stream == 1 {
            break;
        }
    }
    // The program prints it all and exits meanwhile; then the windows open.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let open = (1u32 << 20).to_be_bytes();
    s.write_all(&[frame(8, 0, 0, &open), frame(8, 0, 1, &open)].concat()).unwrap();
    let mut body = Vec::new();
    loop {
        let (kind, flags, stream, payload) = read_frame(&mut s);
        assert!(!(kind == 3 && stream == 1), "stream reset: {payload:?}");
        if kind == 0 && stream == 1 {
            body.extend_from_slice(&payload);
            if flags & 1 == 1 {
                break;
            }
        }
    }
    assert_eq!(body.len(), 100_003);
    assert!(body.ends_with(b"end"));
}

#[test]
fn a_stream_reset_by_the_client_kills_its_program() {
    use std::io::Write;
    let b = backends("", "30s");
    // What a connection or a job holds: sockets, pipes, pidfds (not a
    // worker's epoll or inotify, which a loaded machine may see made
    // after the server answers its first connection, nor the open-file
    // cache's files).
    let fds = |pid: i32| -> Vec<String> {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
        let mut held: Vec<String> = open
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|l| l.display().to_string())
            .filter(|l| l.starts_with("socket:") || l.starts_with("pipe:") || l.contains("pidfd"))
            .collect();
        held.sort();
        held
    };
    let before = fds(b.tern.pid());
    let mut s = std::net::TcpStream::connect(b.tern.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut hello = common::h2::preface();
    hello.extend(frame(1, 0x5, 1, b"\x82\x86\x04\x12/cgi-bin/stream.sh\x41\x09localhost"));
    s.write_all(&hello).unwrap();
    // Its head (`200`, indexed) and a line of its body, then the stream
    // is cancelled.
    let mut frames = Vec::new();
    while !frames.iter().any(|(kind, _)| *kind == 0) {
        let (kind, flags, stream, payload) = read_frame(&mut s);
        if kind == 4 && flags & 1 == 0 {
            s.write_all(&frame(4, 1, 0, b"")).unwrap();
        }
        if stream == 1 {
            frames.push((kind, payload));
        }
    }
    assert_eq!(frames[0].0, 1, "HEADERS first: {frames:?}");
    assert_eq!(frames[0].1.first(), Some(&0x88), "not a 200: {frames:?}");
    assert!(frames[1].1.starts_with(b"line\n"), "{frames:?}");
    let pids = ["stream.pid", "stream.child"].map(|f| read_pid(&b.state.join(f)));
    s.write_all(&frame(3, 0, 1, &8u32.to_be_bytes())).unwrap();
    wait_gone(&pids);
    // The connection goes on: another stream is answered.
    s.write_all(&frame(1, 0x5, 3, b"\x82\x86\x04\x0a/small.txt\x41\x09localhost")).unwrap();
    let answered = loop {
        let (kind, _, stream, payload) = read_frame(&mut s);
        if kind == 1 && stream == 3 {
            break payload;
        }
    };
    assert_eq!(answered.first(), Some(&0x88), "not a 200: {answered:?}");
    let resets = &b.tern.status()["http2"]["resets"];
    assert_eq!((&resets["client"], &resets["server"]), (&1.into(), &0.into()), "{resets}");
    let metrics = String::from_utf8(common::get(b.tern.addr, "/metrics", "").body).unwrap();
    assert!(metrics.contains("\ntern_http2_resets_total{by=\"client\"} 1\n"), "{metrics}");
    drop(s);
    // The close is seen at the server's next turn (seconds on a loaded
    // machine); the descriptors then come back to what they were.
    let start = std::time::Instant::now();
    let new = || -> Vec<String> {
        let mut held = before.clone();
        let after = fds(b.tern.pid());
        after.into_iter().filter(|f| held.iter().position(|h| h == f).map(|i| held.remove(i)).is_none()).collect()
    };
    while !new().is_empty() && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(new(), Vec::<String>::new(), "held after the connection closed, not before");
    assert_eq!(b.tern.status()["cgi"]["running"], 0);
}
