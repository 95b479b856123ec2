//! Sites and locations end to end, over one multi-site configuration:
//! which site a Host (and over HTTPS, the SNI name) reaches, which
//! location answers (nginx's order), each location action with its exact
//! status, header fields and bytes, Basic auth with its file read again,
//! address rules, per-site logs and counters, a reload that swaps the
//! routing table under load, `tern route`'s explanations and `--check`'s
//! errors. The alias traversal vectors and the shared corpus run with
//! several sites too, in `traversal.rs` and `corpus.rs`.

mod common;

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::{parse_responses, Response, Tern};

/// The time every file of a listed directory is set to:
/// 2000-01-01T00:00:00Z.
const LISTED_AT: i64 = 946_684_800;

/// `alice:open sesame` (`htpasswd -nbB -C 5`).
const ALICE: &str = "alice:$2y$05$r8RDq76W82ELYO.1oBwVVOp.Za/tBQSKr.wY6fuSCFo/hZmtXEEMm";
/// `alice:new password` (`openssl passwd -6 -salt pepper`).
const ALICE_CHANGED: &str =
    "alice:$6$pepper$7xNJCjFQQPfCwUpzqDyJH9pALe9fmTjm2OnZAsKknWLFYukZAMYrc9OmE5QOUE2dQG88mACL2umg4Mg3hm8c30";
/// `bob:bob pw` (`openssl passwd -6 -salt bobsalt`).
const BOB: &str =
    "bob:$6$bobsalt$w4iu/j7SeJ/gj1exdTKaUDQBhNrBNJX6w8B7jKneJR/a3qoM4dNgRBivRbxR4hX2fpBQcb9MQS6YYJkM/28Jh1";

const PROGRAM: &str = "#!/bin/sh\n# SOURCE-MARKER: never sent\nprintf 'Content-Type: text/plain\\r\\n\\r\\nran\\n'\n";

/// A page compressible enough to be compressed.
fn page() -> String {
    format!("<!DOCTYPE html><title>page</title>{}\n", "<p>compress me</p>".repeat(100))
}

/// The directories of the sites, and what lies beside them.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let files: &[(&str, &str)] = &[
            ("shop/index.html", "shop index\n"),
            ("shop/static/a.css", "a{}\n"),
            ("shop/static/t.txt", "static txt\n"),
            ("shop/static/raw/r.txt", "raw txt\n"),
            ("shop/errors/404.html", "<h1>custom 404</h1>\n"),
            ("shop/files/one.txt", "file one\n"),
            ("shop/files/sub/two.txt", "sub two\n"),
            ("shop/docs/home.html", "docs home\n"),
            ("shop/docs/index.html", "not the index here\n"),
            ("shop/nolist/x.txt", "x\n"),
            ("media/media/m.txt", "media\n"),
            ("shop/nozip/page.html", &page()),
            ("shop/zip.html", &page()),
            ("shop/nocgi/prog.cgi", PROGRAM),
            ("shop/run/prog.cgi", PROGRAM),
            ("shop/cgi-bin/info.sh", "printf 'Content-Type: text/plain\\r\\n\\r\\n%s\\n' \"$PATH_INFO\"\n"),
            ("shop/private/doc.html", "private doc\n"),
            ("shop/lan/doc.html", "lan doc\n"),
            ("alias/img/a.png", "PNG\n"),
            ("alias/secret.txt", "ALIAS-SECRET\n"),
            ("spa/index.html", "<p>spa</p>\n"),
            ("spa/assets/app.js", "js\n"),
            ("spa/api/data.json", "{\"ok\":1}\n"),
            ("blog/index.html", "blog index\n"),
            ("fallback/index.html", "fallback index\n"),
        ];
        for (path, text) in files {
            let path = d.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        for program in ["shop/nocgi/prog.cgi", "shop/run/prog.cgi"] {
            std::fs::set_permissions(d.join(program), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for listed in ["shop/files/one.txt", "shop/files/sub/two.txt", "shop/files/sub", "shop/files"] {
            set_mtime(&d.join(listed), LISTED_AT);
        }
        std::fs::write(d.join("users.htpasswd"), format!("{ALICE}\n")).unwrap();
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The configuration: four sites (`shop` with a location for each
    /// action, `app` a single-page app, `blog` a wildcard, `fallback` the
    /// default), `tls` adding an HTTPS address and the certificates of
    /// `shop` and `app`.
    fn config(&self, tls: Option<&Certificates>) -> String {
        let d = self.path().display();
        let (https, shop_cert, app_cert) = match tls {
            Some(c) => ("[tls]\nlisten = [\"127.0.0.1:0\"]\n".to_string(), certificate(&c.shop), certificate(&c.app)),
            None => Default::default(),
        };
        format!(
            r#"[compression]
adaptive = false
{https}
[[site]]
name = "shop"
hosts = ["shop.test", "www.shop.test"]
root = "{d}/shop"
error_pages = {{ 404 = "/errors/404.html" }}
headers = {{ set = {{ X-Frame-Options = "DENY" }}, add = {{ X-Site = "shop" }}, remove = ["Server"] }}
{shop_cert}
[[site.location]]
exact = "/favicon.ico"
respond = {{ status = 200, body = "icon", content_type = "image/x-icon" }}

[[site.location]]
prefix = "/static/"
expires = "1h"

[[site.location]]
prefix = "/static/raw/"
skip_regex = true
headers = {{ add = {{ X-Loc = "raw" }} }}

[[site.location]]
regex = '^/static/.*\.txt$'
headers = {{ set = {{ Cache-Control = "no-store" }}, add = {{ X-Loc = "txt" }} }}

[[site.location]]
prefix = "/img"
alias = "{d}/alias/img"

[[site.location]]
prefix = "/media/"
root = "{d}/media"

[[site.location]]
prefix = "/docs/"
index = ["home.html"]

[[site.location]]
prefix = "/old/"
redirect = "https://{{hostname}}/new/{{rest}}"
redirect_status = 301

[[site.location]]
prefix = "/go/"
redirect = "/r?s={{scheme}}&h={{host}}&n={{hostname}}&p={{path}}&r={{rest}}&q={{query}}"

[[site.location]]
exact = "/plain"
redirect = "/target"
redirect_status = 308

[[site.location]]
exact = "/frag"
redirect = "/page#top"
redirect_status = 307

[[site.location]]
exact = "/braces"
redirect = "/{{{{x}}}}"
redirect_status = 303

[[site.location]]
prefix = "/files/"
list_directories = true

[[site.location]]
prefix = "/nozip/"
compression = false

[[site.location]]
prefix = "/nocgi/"
cgi = false

[[site.location]]
prefix = "/private/"
auth = {{ realm = "Private", htpasswd = "{d}/users.htpasswd" }}

[[site.location]]
prefix = "/hashed/"
alias = "{d}/shop/private"
auth = {{ realm = "Hashed", htpasswd = "{d}/users.htpasswd", remember = false }}

[[site.location]]
prefix = "/lan/"
access = ["deny 127.0.0.3", "allow 127.0.0.0/30", "deny all"]

[[site.location]]
prefix = "/lan-private/"
alias = "{d}/shop/private"
access = ["deny 127.0.0.3"]
auth = {{ htpasswd = "{d}/users.htpasswd" }}

[[site]]
name = "app"
hosts = ["app.test"]
root = "{d}/spa"
try_files = ["{{path}}", "/index.html"]
{app_cert}
[[site.location]]
prefix = "/api/"
try_files = ["{{path}}", "=404"]

[[site.location]]
exact = "/health"
respond = {{ status = 503, body = "down\n" }}

[[site]]
name = "blog"
hosts = ["*.blog.test"]
root = "{d}/blog"

[site.log]
access = "{d}/blog.log"

[[site]]
name = "fallback"
default = true
root = "{d}/fallback"

[site.log]
access = "{d}/fallback.json"
access_format = "json"
"#
        )
    }

    /// `tern serve` with [`Fixture::config`].
    fn serve(&self, tls: Option<&Certificates>) -> Tern {
        Tern::start(&self.path().join("fallback"), "sendfile", &self.config(tls), &[])
    }

    /// Writes `text` beside the sites as `name` and returns its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// A site's `[[site.tls.certificates]]` (its names: the site's hosts).
fn certificate((cert, key): &(PathBuf, PathBuf)) -> String {
    format!("\n[[site.tls.certificates]]\ncert = \"{}\"\nkey = \"{}\"\n", cert.display(), key.display())
}

/// The test CA and the chains of `shop` and `app`.
struct Certificates {
    ca: common::tls::Ca,
    shop: (PathBuf, PathBuf),
    app: (PathBuf, PathBuf),
}

impl Certificates {
    fn new(dir: &Path) -> Certificates {
        let ca = common::tls::Ca::new("sites CA");
        let (cert, key, _) = ca.leaf(dir, "shop", &["shop.test", "www.shop.test"]);
        let (app_cert, app_key, _) = ca.leaf(dir, "app", &["app.test"]);
        Certificates { ca, shop: (cert, key), app: (app_cert, app_key) }
    }
}

fn set_mtime(path: &Path, secs: i64) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec { tv_sec: secs, tv_nsec: 0 };
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}", path.display());
}

/// `GET path` for `host` with extra header lines, closing the connection.
fn get_request(host: &str, path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n")
}

/// [`get_request`] on its own connection.
fn get(addr: SocketAddr, host: &str, path: &str, extra: &str) -> Response {
    common::request(addr, &get_request(host, path, extra))
}

/// As [`get`], from the local address `from` (any of 127.0.0.0/8).
fn get_from(from: &str, addr: SocketAddr, host: &str, path: &str, extra: &str) -> Response {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0).into()).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(get_request(host, path, extra).as_bytes()).unwrap();
    let raw = common::read_until_close(&mut s);
    parse_responses(&raw, &[false]).into_iter().next().expect("a response")
}

/// The head as `name: value` lines (lower-case names, in the order sent),
/// with the values that change from run to run shown as `*`.
fn head(r: &Response) -> Vec<String> {
    r.headers
        .iter()
        .map(|(n, v)| match n.as_str() {
            "date" | "etag" | "expires" | "last-modified" => format!("{n}: *"),
            _ => format!("{n}: {v}"),
        })
        .collect()
}

/// Status, head (as [`head`]) and body as text.
fn seen(r: &Response) -> (u16, Vec<String>, String) {
    (r.status, head(r), String::from_utf8_lossy(&r.body).into_owned())
}

fn lines(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// tern's own page for `status` (`<title>` and `<h1>` say it).
fn tern_page(status: &str) -> String {
    format!("<!DOCTYPE html>\n<html><head><title>{status}</title></head>\n<body><h1>{status}</h1></body></html>\n")
}

/// Seconds since the epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(s: &str) -> i64 {
    let f: Vec<&str> = s.split([' ', ':']).collect();
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        .iter()
        .position(|m| *m == f[2])
        .unwrap() as i64
        + 1;
    let (day, year): (i64, i64) = (f[1].parse().unwrap(), f[3].parse().unwrap());
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let hms: i64 =
        f[4].parse::<i64>().unwrap() * 3600 + f[5].parse::<i64>().unwrap() * 60 + f[6].parse::<i64>().unwrap();
    days * 86_400 + hms
}

#[test]
fn hosts_choose_the_site_and_unknown_hosts_the_default() {
    let f = Fixture::new();
    let tern = f.serve(None);
    for (host, body) in [
        ("shop.test", "shop index\n"),
        ("www.shop.test", "shop index\n"),
        ("WWW.Shop.TEST:8080", "shop index\n"),
        ("shop.test.", "shop index\n"),
        ("app.test", "<p>spa</p>\n"),
        ("a.blog.test", "blog index\n"),
        ("x.y.blog.test:80", "blog index\n"),
        // A wildcard does not cover its own base name.
        ("blog.test", "fallback index\n"),
        ("unknown.test", "fallback index\n"),
        ("127.0.0.1", "fallback index\n"),
    ] {
        let r = get(tern.addr, host, "/", "");
        assert_eq!((r.status, String::from_utf8_lossy(&r.body).as_ref()), (200, body), "Host: {host}");
    }
    // HTTP/1.0 without a Host: the default site.
    let r = common::request(tern.addr, "GET / HTTP/1.0\r\n\r\n");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"fallback index\n"[..]));
}

#[test]
fn without_a_default_site_an_unknown_host_gets_server_unknown_host() {
    let f = Fixture::new();
    let sites = format!(
        "[[site]]\nhosts = [\"a.test\"]\nroot = \"{0}/shop\"\n\n[[site]]\nhosts = [\"*.b.test\"]\nroot = \"{0}/blog\"\n",
        f.path().display()
    );
    for (unknown_host, config) in [
        ("421 Misdirected Request", sites.clone()),
        ("404 Not Found", format!("[server]\nunknown_host = 404\n{sites}")),
    ] {
        let tern = Tern::start(&f.path().join("fallback"), "sendfile", &config, &[]);
        let status: u16 = unknown_host[..3].parse().unwrap();
        assert_eq!(get(tern.addr, "a.test", "/", "").body, b"shop index\n");
        assert_eq!(get(tern.addr, "c.b.test", "/", "").body, b"blog index\n");
        for host in ["b.test", "unknown.test", "a.test.example"] {
            let r = get(tern.addr, host, "/", "");
            assert_eq!(
                seen(&r),
                (
                    status,
                    lines(&[
                        "server: tern",
                        "date: *",
                        "content-type: text/html; charset=utf-8",
                        &format!("content-length: {}", tern_page(unknown_host).len()),
                        "connection: close"
                    ]),
                    tern_page(unknown_host)
                ),
                "Host: {host}"
            );
        }
        let r = common::request(tern.addr, "GET / HTTP/1.0\r\n\r\n");
        assert_eq!(r.status, status, "no Host at all");
    }
}

#[test]
fn each_location_answers_with_exact_status_fields_and_bytes() {
    let f = Fixture::new();
    let tern = f.serve(None);
    let shop = |path: &str| seen(&get(tern.addr, "shop.test", path, ""));
    // The site's header changes: `Server` removed, two fields appended.
    let dressed = ["x-frame-options: DENY", "x-site: shop"];
    let file = |ty: &str, len: usize, extra: &[&str]| {
        let mut h =
            lines(&["date: *", &format!("content-type: {ty}"), "last-modified: *", "etag: *", "accept-ranges: bytes"]);
        h.extend(lines(extra));
        h.extend(lines(&[&format!("content-length: {len}"), "connection: close"]));
        h
    };
    let page = |status: &str, extra: &[&str]| {
        let mut h = lines(extra);
        h.extend(lines(&[
            "content-type: text/html; charset=utf-8",
            "x-frame-options: DENY",
            "x-site: shop",
            &format!("content-length: {}", tern_page(status).len()),
            "connection: close",
        ]));
        h.insert(0, "date: *".into());
        (status[..3].parse::<u16>().unwrap(), h, tern_page(status))
    };
    let custom_404 = || {
        let h = lines(&[
            "date: *",
            "content-type: text/html; charset=utf-8",
            "x-frame-options: DENY",
            "x-site: shop",
            "content-length: 20",
            "connection: close",
        ]);
        (404, h, "<h1>custom 404</h1>\n".to_string())
    };

    let moved = |status: &str, to: &str| page(status, &[&format!("location: {to}")]);

    // An exact location: a fixed response, dressed by the site.
    assert_eq!(
        shop("/favicon.ico"),
        (
            200,
            lines(&[
                "date: *",
                "content-type: image/x-icon",
                "x-frame-options: DENY",
                "x-site: shop",
                "content-length: 4",
                "connection: close"
            ]),
            "icon".into()
        )
    );
    // A prefix with an expiry: `Cache-Control` and `Expires`, an hour on.
    let r = get(tern.addr, "shop.test", "/static/a.css", "");
    let mut h = dressed.to_vec();
    h.extend(["cache-control: max-age=3600", "expires: *"]);
    assert_eq!(seen(&r), (200, file("text/css; charset=utf-8", 4, &h), "a{}\n".into()));
    let age = http_date(r.header("expires").unwrap()) - http_date(r.header("date").unwrap());
    assert!((3599..=3601).contains(&age), "Expires is {age} s after Date");
    // A regex beats the longest prefix; its own `headers` replace the
    // site's (so `Server` stays), and it has no expiry.
    let mut h = file("text/plain; charset=utf-8", 11, &["cache-control: no-store", "x-loc: txt"]);
    h.insert(0, "server: tern".into());
    assert_eq!(shop("/static/t.txt"), (200, h, "static txt\n".into()));
    // ... unless the longest prefix skips regexes.
    let mut h = file("text/plain; charset=utf-8", 8, &["x-loc: raw"]);
    h.insert(0, "server: tern".into());
    assert_eq!(shop("/static/raw/r.txt"), (200, h, "raw txt\n".into()));
    // Its error pages are the site's, under its own header changes.
    assert_eq!(
        shop("/static/none.txt"),
        (
            404,
            lines(&[
                "server: tern",
                "date: *",
                "content-type: text/html; charset=utf-8",
                "cache-control: no-store",
                "x-loc: txt",
                "content-length: 20",
                "connection: close"
            ]),
            "<h1>custom 404</h1>\n".into()
        )
    );
    // An alias replaces the prefix; a root has the whole path appended.
    assert_eq!(shop("/img/a.png"), (200, file("image/png", 4, &dressed), "PNG\n".into()));
    assert_eq!(shop("/img/secret.txt"), custom_404());
    assert_eq!(shop("/imgs/a.png"), custom_404(), "a name that only starts like the prefix");
    assert_eq!(shop("/img?x=1"), moved("301 Moved Permanently", "/img/?x=1"));
    assert_eq!(shop("/img/"), page("403 Forbidden", &[]));
    assert_eq!(shop("/media/m.txt"), (200, file("text/plain; charset=utf-8", 6, &dressed), "media\n".into()));
    // A location's own index files.
    assert_eq!(shop("/docs/"), (200, file("text/html; charset=utf-8", 10, &dressed), "docs home\n".into()));
    assert_eq!(shop("/"), (200, file("text/html; charset=utf-8", 11, &dressed), "shop index\n".into()));
    // A custom error page keeps its status.
    assert_eq!(shop("/missing"), custom_404());

    // Redirects: each placeholder, the query kept.
    assert_eq!(shop("/old/a/b?x=1&y=2"), moved("301 Moved Permanently", "https://shop.test/new/a/b?x=1&y=2"));
    assert_eq!(shop("/old/"), moved("301 Moved Permanently", "https://shop.test/new/"));
    assert_eq!(
        seen(&get(tern.addr, "shop.test:8080", "/go/a%20b/c?x=1", "")),
        moved("302 Found", "/r?s=http&h=shop.test:8080&n=shop.test&p=/go/a%20b/c&r=a%20b/c&q=?x=1")
    );
    assert_eq!(shop("/plain?x=1&y"), moved("308 Permanent Redirect", "/target?x=1&y"));
    assert_eq!(shop("/plain"), moved("308 Permanent Redirect", "/target"));
    assert_eq!(shop("/frag?x=1"), moved("307 Temporary Redirect", "/page?x=1#top"));
    assert_eq!(shop("/braces?k"), moved("303 See Other", "/{x}?k"));

    // Listings, HTML and JSON.
    let html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Index of /files/</title>\n\
        <style>body{font-family:sans-serif}th,td{padding:0 1.5em 0 0;text-align:left}td.size{text-align:right}</style>\n\
        </head>\n<body>\n<h1>Index of /files/</h1>\n<table>\n\
        <thead><tr><th>Name</th><th>Size</th><th>Modified</th></tr></thead>\n<tbody>\n\
        <tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n\
        <tr><td><a href=\"sub/\">sub/</a></td><td class=\"size\">-</td><td>2000-01-01T00:00:00Z</td></tr>\n\
        <tr><td><a href=\"one.txt\">one.txt</a></td><td class=\"size\">9</td><td>2000-01-01T00:00:00Z</td></tr>\n\
        </tbody>\n</table>\n</body>\n</html>\n";
    let listing = |ty: &str, len: usize| {
        lines(&[
            "date: *",
            &format!("content-type: {ty}"),
            "vary: Accept",
            "cache-control: no-cache",
            "x-frame-options: DENY",
            "x-site: shop",
            &format!("content-length: {len}"),
            "connection: close",
        ])
    };
    assert_eq!(shop("/files/"), (200, listing("text/html; charset=utf-8", html.len()), html.into()));
    let json = r#"[{"name":"sub","type":"directory","modified":"2000-01-01T00:00:00Z"},{"name":"one.txt","type":"file","size":9,"modified":"2000-01-01T00:00:00Z"}]"#;
    assert_eq!(
        seen(&get(tern.addr, "shop.test", "/files/", "Accept: application/json\r\n")),
        (200, listing("application/json", json.len()), json.into())
    );
    assert_eq!(shop("/files/sub"), moved("301 Moved Permanently", "/files/sub/"));
    // Without `list_directories`, a directory without an index is refused;
    // a location's expiry is not on its errors (a cache must not keep them).
    assert_eq!(shop("/nolist/"), page("403 Forbidden", &[]));
    assert_eq!(shop("/static/"), page("403 Forbidden", &[]));

    // The single-page app: unknown paths get its page, `/api/` a 404.
    let app = |path: &str| {
        let r = get(tern.addr, "app.test", path, "");
        (
            r.status,
            r.header("content-type").unwrap_or_default().to_string(),
            String::from_utf8_lossy(&r.body).into_owned(),
        )
    };
    let spa = (200, "text/html; charset=utf-8".to_string(), "<p>spa</p>\n".to_string());
    assert_eq!(app("/assets/app.js"), (200, "text/javascript; charset=utf-8".into(), "js\n".into()));
    assert_eq!(app("/some/route?q=1"), spa);
    assert_eq!(app("/assets/"), spa);
    assert_eq!(app("/"), spa);
    assert_eq!(app("/api/data.json"), (200, "application/json".into(), "{\"ok\":1}\n".into()));
    assert_eq!(app("/api/missing"), (404, "text/html; charset=utf-8".into(), tern_page("404 Not Found")));
    assert_eq!(
        seen(&get(tern.addr, "app.test", "/health", "")),
        (
            503,
            lines(&[
                "server: tern",
                "date: *",
                "content-type: text/plain; charset=utf-8",
                "content-length: 5",
                "connection: close"
            ]),
            "down\n".into()
        )
    );
}

#[test]
fn compression_and_cgi_are_switched_per_location() {
    let f = Fixture::new();
    let tern = f.serve(None);
    let gzip = "Accept-Encoding: gzip\r\n";
    let r = get(tern.addr, "shop.test", "/zip.html", gzip);
    assert_eq!(
        (r.status, r.header("content-encoding"), r.header("vary")),
        (200, Some("gzip"), Some("Accept-Encoding"))
    );
    let mut plain = String::new();
    flate2::read::GzDecoder::new(r.body.as_slice()).read_to_string(&mut plain).unwrap();
    assert_eq!(plain, page());
    let r = get(tern.addr, "shop.test", "/nozip/page.html", gzip);
    assert_eq!(
        seen(&r),
        (
            200,
            lines(&[
                "date: *",
                "content-type: text/html; charset=utf-8",
                "last-modified: *",
                "etag: *",
                "accept-ranges: bytes",
                "x-frame-options: DENY",
                "x-site: shop",
                &format!("content-length: {}", page().len()),
                "connection: close"
            ]),
            page()
        )
    );
    // A program runs where programs may; where they may not it is refused,
    // and its source is never sent.
    let r = get(tern.addr, "shop.test", "/run/prog.cgi", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ran\n"[..]));
    let r = get(tern.addr, "shop.test", "/cgi-bin/info.sh/a/b", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"/a/b\n"[..]));
    let r = get(tern.addr, "shop.test", "/nocgi/prog.cgi", "");
    assert_eq!((r.status, String::from_utf8_lossy(&r.body).into_owned()), (403, tern_page("403 Forbidden")));
    for path in ["/nocgi/prog.cgi", "/nocgi/prog.cgi/x", "/nocgi/%70rog.cgi", "/nocgi/prog.cgi?x"] {
        let raw = common::exchange(
            tern.addr,
            format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\nRange: bytes=0-\r\n\r\n").as_bytes(),
            Duration::from_secs(2),
        );
        assert!(common::find(&raw, b"SOURCE-MARKER").is_none(), "{path} sent the program's source");
    }
}

/// A Basic `Authorization` field.
fn basic(user_password: &str) -> String {
    format!("Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(user_password))
}

/// The status `path` gets with `credentials` (none when empty).
fn status_as(tern: &Tern, path: &str, credentials: &str) -> u16 {
    let extra = if credentials.is_empty() { String::new() } else { basic(credentials) };
    get(tern.addr, "shop.test", path, &extra).status
}

#[test]
fn basic_auth_and_its_file_read_again_when_it_changes() {
    let f = Fixture::new();
    let tern = f.serve(None);
    // Missing, wrong, right: with the credentials remembered and without.
    for (path, realm) in [("/private/doc.html", "Private"), ("/hashed/doc.html", "Hashed")] {
        let r = get(tern.addr, "shop.test", path, "");
        assert_eq!(
            seen(&r),
            (
                401,
                lines(&[
                    "date: *",
                    &format!("www-authenticate: Basic realm=\"{realm}\", charset=\"UTF-8\""),
                    "content-type: text/html; charset=utf-8",
                    "x-frame-options: DENY",
                    "x-site: shop",
                    "content-length: 113",
                    "connection: close"
                ]),
                tern_page("401 Unauthorized")
            )
        );
        for wrong in ["alice:open sesame!", "alice:", "Alice:open sesame", "mallory:open sesame", "alice"] {
            assert_eq!(status_as(&tern, path, wrong), 401, "{path} {wrong}");
        }
        let bearer = get(tern.addr, "shop.test", path, "Authorization: Bearer open-sesame\r\n");
        assert_eq!(bearer.status, 401);
        for _ in 0..3 {
            let r = get(tern.addr, "shop.test", path, &basic("alice:open sesame"));
            assert_eq!((r.status, r.body.as_slice()), (200, &b"private doc\n"[..]), "{path}");
        }
    }
    // A user added and a password changed: each worker looks at the file at
    // most once a second, so a second after the change every one has read it.
    f.write("users.htpasswd", &format!("# changed\n{ALICE_CHANGED}\n{BOB}\n"));
    let changed = Instant::now();
    for path in ["/private/doc.html", "/hashed/doc.html"] {
        while status_as(&tern, path, "bob:bob pw") != 200 {
            assert!(changed.elapsed() < Duration::from_secs(10), "{path}: the added user is not let in");
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(rest) = Duration::from_millis(1100).checked_sub(changed.elapsed()) {
            std::thread::sleep(rest);
        }
        // Every worker (a pool has many): a connection each, a few times over.
        for _ in 0..6 {
            assert_eq!(status_as(&tern, path, "alice:new password"), 200, "{path}");
            assert_eq!(status_as(&tern, path, "alice:open sesame"), 401, "{path}: the old password");
            assert_eq!(status_as(&tern, path, "bob:bob pw"), 200, "{path}");
        }
    }
    // A file that became invalid keeps the users read before.
    f.write("users.htpasswd", "alice:plain-text\n");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(status_as(&tern, "/private/doc.html", "alice:new password"), 200);
    assert_eq!(status_as(&tern, "/hashed/doc.html", "bob:bob pw"), 200);
    assert_eq!(status_as(&tern, "/private/doc.html", "alice:plain-text"), 401);
}

#[test]
fn client_addresses_are_allowed_or_denied_before_authentication() {
    let f = Fixture::new();
    let tern = f.serve(None);
    // ["deny 127.0.0.3", "allow 127.0.0.0/30", "deny all"]: first match wins.
    for (from, status) in
        [("127.0.0.1", 200), ("127.0.0.2", 200), ("127.0.0.3", 403), ("127.0.0.4", 403), ("127.1.2.3", 403)]
    {
        let r = get_from(from, tern.addr, "shop.test", "/lan/doc.html", "");
        assert_eq!(r.status, status, "from {from}");
        if status == 403 {
            assert_eq!(String::from_utf8_lossy(&r.body), tern_page("403 Forbidden"));
            assert_eq!(r.header("x-site"), Some("shop"), "a refusal is dressed as the location's answers");
        } else {
            assert_eq!(r.body, b"lan doc\n");
        }
    }
    // Refused addresses are refused before credentials are asked for.
    let creds = basic("alice:open sesame");
    assert_eq!(get_from("127.0.0.3", tern.addr, "shop.test", "/lan-private/doc.html", "").status, 403);
    assert_eq!(get_from("127.0.0.3", tern.addr, "shop.test", "/lan-private/doc.html", &creds).status, 403);
    assert_eq!(get_from("127.0.0.2", tern.addr, "shop.test", "/lan-private/doc.html", "").status, 401);
    assert_eq!(get_from("127.0.0.2", tern.addr, "shop.test", "/lan-private/doc.html", &creds).status, 200);
    // Another location, or another site, is not restricted.
    assert_eq!(get_from("127.0.0.3", tern.addr, "shop.test", "/", "").status, 200);
    assert_eq!(get_from("127.0.0.3", tern.addr, "app.test", "/lan/doc.html", "").status, 200);
}

#[test]
fn over_https_sni_chooses_the_certificate_and_a_host_of_another_site_is_421() {
    let f = Fixture::new();
    let certs = Certificates::new(f.path());
    let tern = f.serve(Some(&certs));
    let addr = common::tls::https_addr(&tern);
    let client = common::tls::client(&certs.ca);
    // The client checks the certificate against the name it asked for: a
    // wrong one fails the handshake, and no response comes.
    let ask = |sni: &str, host: &str, path: &str| -> (u16, String) {
        let request = get_request(host, path, "");
        let (raw, _) = common::tls::exchange_as(&client, addr, sni, request.as_bytes(), Duration::from_secs(5));
        let r = parse_responses(&raw, &[false]).into_iter().next().unwrap_or_else(|| panic!("{sni}/{host}: no answer"));
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    let misdirected = (421, tern_page("421 Misdirected Request"));
    for (sni, host, want) in [
        ("shop.test", "shop.test", (200, "shop index\n".to_string())),
        ("shop.test", "WWW.shop.test:443", (200, "shop index\n".to_string())),
        ("www.shop.test", "shop.test", (200, "shop index\n".to_string())),
        ("app.test", "app.test", (200, "<p>spa</p>\n".to_string())),
        ("shop.test", "app.test", misdirected.clone()),
        ("app.test", "shop.test", misdirected.clone()),
        ("app.test", "www.shop.test", misdirected.clone()),
        ("shop.test", "a.blog.test", misdirected.clone()),
        ("shop.test", "unknown.test", misdirected.clone()),
    ] {
        assert_eq!(ask(sni, host, "/"), want, "SNI {sni}, Host {host}");
    }
    // The scheme a redirect names is the connection's.
    let request = get_request("shop.test", "/go/x?q", "");
    let (raw, _) = common::tls::exchange_as(&client, addr, "shop.test", request.as_bytes(), Duration::from_secs(5));
    let r = parse_responses(&raw, &[false]).remove(0);
    assert_eq!((r.status, r.header("location")), (302, Some("/r?s=https&h=shop.test&n=shop.test&p=/go/x&r=x&q=?q")));
    // Plain HTTP has no name to compare: the Host alone chooses.
    assert_eq!(get(tern.addr, "app.test", "/", "").body, b"<p>spa</p>\n");
}

/// Waits until `path` has `n` lines and returns them (in any order: each
/// worker writes its own buffer).
fn log_lines(path: &Path, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            assert_eq!(lines.len(), n, "{}:\n{text}", path.display());
            return lines;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{} has {} lines:\n{text}", path.display(), lines.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn each_site_has_its_access_log_and_its_counters() {
    let f = Fixture::new();
    let tern = f.serve(None);
    let addr = tern.addr;
    get(addr, "a.blog.test", "/", "User-Agent: ua-1\r\nReferer: http://ref.test/\r\n");
    get(addr, "b.blog.test", "/", "");
    get(addr, "a.blog.test", "/nope?x=\"1\"", "User-Agent: ua \"2\"\r\n");
    get(addr, "unknown.test", "/", "User-Agent: ua-3\r\n");
    get(addr, "other.test", "/gone", "");
    get(addr, "shop.test", "/old/x", "");
    get(addr, "shop.test", "/favicon.ico", "");

    // Combined Log Format, the time masked.
    let mut combined: Vec<String> = log_lines(&f.path().join("blog.log"), 3)
        .iter()
        .map(|l| {
            let (before, rest) = l.split_once(" [").unwrap();
            format!("{before} [*]{}", rest.split_once(']').unwrap().1)
        })
        .collect();
    combined.sort();
    assert_eq!(
        combined,
        [
            r#"127.0.0.1 - - [*] "GET / HTTP/1.1" 200 11 "-" "-""#,
            r#"127.0.0.1 - - [*] "GET / HTTP/1.1" 200 11 "http://ref.test/" "ua-1""#,
            r#"127.0.0.1 - - [*] "GET /nope?x=\"1\" HTTP/1.1" 404 107 "-" "ua \"2\"""#,
        ]
    );
    // JSON lines.
    let mut json: Vec<serde_json::Value> = log_lines(&f.path().join("fallback.json"), 2)
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let time = v["time"].as_str().unwrap();
            assert!(time.len() == 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
            v["time"] = "*".into();
            v
        })
        .collect();
    json.sort_by_key(|v| v["request"].to_string());
    assert_eq!(
        json,
        [
            serde_json::json!({"time": "*", "site": "fallback", "client": "127.0.0.1", "request": "GET / HTTP/1.1",
                "status": 200, "bytes": 15, "referer": null, "user_agent": "ua-3"}),
            serde_json::json!({"time": "*", "site": "fallback", "client": "127.0.0.1", "request": "GET /gone HTTP/1.1",
                "status": 404, "bytes": 107, "referer": null, "user_agent": null}),
        ]
    );

    // The counters, on the status page and in the metrics.
    let moved = tern_page("301 Moved Permanently").len() as u64;
    let want = serde_json::json!({
        "shop": {"requests": {"total": 2, "1xx": 0, "2xx": 1, "3xx": 1, "4xx": 0, "5xx": 0}, "bytes": moved + 4},
        "app": {"requests": {"total": 0, "1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0}, "bytes": 0},
        "blog": {"requests": {"total": 3, "1xx": 0, "2xx": 2, "3xx": 0, "4xx": 1, "5xx": 0}, "bytes": 129},
        "fallback": {"requests": {"total": 2, "1xx": 0, "2xx": 1, "3xx": 0, "4xx": 1, "5xx": 0}, "bytes": 122},
    });
    let start = Instant::now();
    while tern.status()["sites"] != want {
        assert!(start.elapsed() < Duration::from_secs(10), "sites: {}", tern.status()["sites"]);
        std::thread::sleep(Duration::from_millis(100));
    }
    let metrics = String::from_utf8(get(addr, "shop.test", "/metrics", "").body).unwrap();
    let sites: Vec<&str> = metrics.lines().filter(|l| l.starts_with("tern_site_")).collect();
    let mut expected = Vec::new();
    for (site, counts) in
        [("shop", [0, 1, 1, 0, 0]), ("app", [0; 5]), ("blog", [0, 2, 0, 1, 0]), ("fallback", [0, 1, 0, 1, 0])]
    {
        for (class, n) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().zip(counts) {
            expected.push(format!("tern_site_responses_total{{site=\"{site}\",class=\"{class}\"}} {n}"));
        }
    }
    for (site, bytes) in [("shop", moved + 4), ("app", 0), ("blog", 129), ("fallback", 122)] {
        expected.push(format!("tern_site_bytes_total{{site=\"{site}\"}} {bytes}"));
    }
    assert_eq!(sites, expected);
}

/// The wrk script of the reload test: every response must come wholly from
/// one table — table A's file with A's header, or B's fixed response with
/// B's header; anything else counts as bad.
const WHOLE_TABLES: &str = r#"
wrk.headers["Host"] = "shop.test"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) a = 0; b = 0; bad = 0 end
function response(status, headers, body)
  local t = headers["X-Table"]
  if status == 200 and t == "A" and body == "A-body\n" then a = a + 1
  elseif status == 200 and t == "B" and body == "B-body" then b = b + 1
  else bad = bad + 1 end
end
function done(summary, latency, requests)
  local A, B, BAD = 0, 0, 0
  for _, t in ipairs(threads) do A = A + t:get("a"); B = B + t:get("b"); BAD = BAD + t:get("bad") end
  local e = summary.errors
  io.write(string.format("RESULT a=%d b=%d bad=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    A, B, BAD, e.connect, e.read, e.write, e.status, e.timeout))
end
"#;

#[test]
fn a_reload_under_load_swaps_the_whole_routing_table() {
    let f = Fixture::new();
    f.write("v.txt", "A-body\n");
    let d = f.path().display();
    // The same request reaches another site, and there another action.
    let table_a = format!(
        "[log]\naccess = \"off\"\n\n[[site]]\nname = \"one\"\nhosts = [\"shop.test\"]\nroot = \"{d}\"\n\
         headers = {{ set = {{ X-Table = \"A\" }} }}\n\n[[site]]\nname = \"two\"\nhosts = [\"other.test\"]\nroot = \"{d}/blog\"\n"
    );
    let table_b = format!(
        "[log]\naccess = \"off\"\n\n[[site]]\nname = \"two\"\nhosts = [\"shop.test\"]\nroot = \"{d}/blog\"\n\
         headers = {{ set = {{ X-Table = \"B\" }} }}\n\n[[site.location]]\nexact = \"/v.txt\"\n\
         respond = {{ body = \"B-body\" }}\n\n[[site]]\nname = \"one\"\nhosts = [\"other.test\"]\nroot = \"{d}\"\n"
    );
    let tern = Tern::start(f.path(), "sendfile", &table_a, &[]);
    let script = f.write("tables.lua", WHOLE_TABLES);
    let wrk = Command::new("wrk")
        .args(["-t", "2", "-c", "16", "-d", "60s", "--timeout", "5s", "-s"])
        .arg(&script)
        .arg(tern.url("/v.txt"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wrk (Debian package wrk)");
    std::thread::sleep(Duration::from_millis(300));
    let reloads = || tern.stderr.lock().unwrap().matches("configuration reloaded").count();
    let tables = [&table_b, &table_a, &table_b, &table_a, &table_b];
    for (n, table) in tables.iter().enumerate() {
        std::fs::write(tern.config_path(), table).unwrap();
        unsafe { libc::kill(tern.pid(), libc::SIGHUP) };
        // Signals sent while a reload is under way merge: one at a time.
        let start = Instant::now();
        while reloads() < n + 1 {
            assert!(start.elapsed() < Duration::from_secs(20), "reload {} not done", n + 1);
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    // Ctrl-C ends wrk's run with its report.
    unsafe { libc::kill(wrk.id() as i32, libc::SIGINT) };
    let out = wrk.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let result = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")).unwrap_or_else(|| panic!("{stdout}"));
    let n = |key: &str| -> u64 {
        let field = result.split(' ').find_map(|kv| kv.strip_prefix(&format!("{key}="))).unwrap();
        field.parse().unwrap()
    };
    for key in ["bad", "connect", "read", "write", "status", "timeout"] {
        assert_eq!(n(key), 0, "{key}: {result}\n{stdout}");
    }
    assert!(n("a") > 100 && n("b") > 100, "both tables answered: {result}");
    // The last table answers now, on a new connection too.
    let r = get(tern.addr, "shop.test", "/v.txt", "");
    assert_eq!((r.header("x-table"), r.body.as_slice()), (Some("B"), &b"B-body"[..]));
    assert_eq!(get(tern.addr, "other.test", "/v.txt", "").body, b"A-body\n");
}

/// `tern route --config CONFIG ARGS...`: its output, which must succeed.
fn route(config: &Path, args: &[&str]) -> String {
    let out = Command::new(common::tern_bin()).arg("route").arg("--config").arg(config).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A command line's words; `'...'` holds spaces.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, part) in line.split('\'').enumerate() {
        if i % 2 == 1 {
            out.push(part.to_string());
        } else {
            out.extend(part.split_whitespace().map(str::to_string));
        }
    }
    out
}

#[test]
fn tern_route_explains_each_case() {
    let f = Fixture::new();
    let config = f.write("tern.toml", &f.config(None));
    let dir = f.path().canonicalize().unwrap().display().to_string();
    let transcript = include_str!("sites_route.txt");
    let mut cases = 0;
    for case in transcript.split("\n\n").filter(|c| c.starts_with("$ ")) {
        let (command, want) = case.split_once('\n').unwrap();
        let args = words(command.strip_prefix("$ tern route ").unwrap());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = route(&config, &args).replace(&dir, "$DIR");
        assert_eq!(got.trim_end(), want.trim_end(), "{command}");
        cases += 1;
    }
    assert_eq!(cases, 20);
}

#[test]
fn check_names_the_key_and_line_of_each_mistake() {
    let f = Fixture::new();
    let d = f.path().display();
    let site = |hosts: &str, extra: &str| format!("[[site]]\nhosts = [{hosts}]\nroot = \"{d}/shop\"\n{extra}\n");
    let cases = [
        (
            format!("{}{}", site("\"a.test\", \"*.b.test\"", ""), site("\"c.test\", \"A.TEST\"", "name = \"c\"")),
            "line 8: site `c`: `hosts`: host `A.TEST` is listed by sites `a.test` and `c`",
        ),
        (
            format!("{}{}", site("\"a.test\"", "default = true"), site("\"b.test\"", "default = true")),
            "line 8: site `b.test`: `default`: site `a.test` is the default already",
        ),
        (
            site("\"a.test\"", "\n[[site.location]]\nregex = '^/'\n\n[[site.location]]\nprefix = \"/api/\"\nfastcgi = false"),
            "line 4: site `a.test`: location 2 (line 11): prefix `/api/` can never be reached: \
             location 1 (regex `^/`) matches every path first",
        ),
        (
            site("\"a.test\"", "\n[[site.location]]\nexact = \"/x\"\n\n[[site.location]]\nexact = \"/x\"\ncgi = false"),
            "line 4: site `a.test`: location 2 (line 11): exact `/x` can never be reached: location 1 has the same path",
        ),
        (
            site("\"a.test\"", &format!("\n[[site.location]]\nprefix = \"/p/\"\nauth = {{ htpasswd = \"{d}/none\" }}")),
            &format!(
                "line 4: site `a.test`: location 1 (line 8): auth.htpasswd: cannot read {d}/none: \
                 No such file or directory (os error 2)"
            ),
        ),
        (
            site("\"a.test\"", "\n[site.static]\ncharset = \"latin1\"\nio = \"read\""),
            "line 10: `static.io` is the whole server's: set it in [static], not in a site (a site may set `charset`, \
             `mime_types`, `hidden`, `hidden_allow`, `exclude_extensions`)",
        ),
    ];
    for (text, want) in &cases {
        let path = f.write("check.toml", &format!("[server]\nlisten = [\"127.0.0.1:0\"]\n\n{text}"));
        let out = Command::new(common::tern_bin()).args(["serve", "--check", "--config"]).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let message = stderr.trim_end().split_once(&format!("{}: ", path.display())).map(|(_, m)| m);
        assert_eq!(message, Some(*want), "{text}");
    }
}
