//! The bundled demo site as a visitor meets it: built with `make -C gateway
//! demo` into a copy of `site/` somewhere else, served with and without its
//! `tern.toml` (the same pages), looked at in headless Chromium (the
//! stylesheet applied on every page), and loaded with the README's mix.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tls::{https_addr, section, Ca};
use common::{get, Tern};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Copies a directory tree (files and directories only), leaving out what
/// `make demo` installs, so the copy gets it fresh.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else if !(name.ends_with(".cgi") || name == "board-data.txt") {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of `site/` in a fresh directory, its programs installed by
/// `make -C gateway demo` as README's first command does.
fn demo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    copy_tree(&repo().join("site"), &site);
    // One make at a time: tests run in parallel, and a make that finds a
    // source changed builds into the same gateway/build.
    static MAKE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = MAKE.lock().unwrap_or_else(|e| e.into_inner());
    let made = Command::new("make")
        .args(["-s", "-C"])
        .arg(repo().join("gateway"))
        .arg("demo")
        .arg(format!("DEMO_CGI={}", site.join("cgi-bin").display()))
        .status()
        .unwrap();
    assert!(made.success(), "make -C gateway demo");
    (dir, site)
}

/// The site's own configuration, quiet.
fn site_config(site: &Path) -> String {
    std::fs::read_to_string(site.join("tern.toml")).unwrap().replace("access = \"-\"", "access = \"off\"")
}

/// Every page and file of the demo a visitor can reach from its index.
const PAGES: &[&str] = &[
    "/",
    "/about.html",
    "/css/style.css",
    "/images/tern.svg",
    "/favicon.ico",
    "/files/",
    "/files/large.txt",
    "/cgi-bin/board.cgi?page=1",
    "/cgi-bin/board.cgi?page=5",
    "/cgi-bin/download.cgi/large.txt",
    "/cgi-bin/info.py/some/path?x=1",
];

#[test]
fn the_same_pages_with_or_without_its_config() {
    let (_dir, site) = demo();
    // `tern serve site/` (the harness adds only a quiet log and, since CI
    // is root, cgi.allow_root) and `tern serve --config site/tern.toml`.
    let plain = Tern::start(&site, "sendfile", "", &[]);
    let configured = Tern::start(&site, "sendfile", &site_config(&site), &[]);
    for path in PAGES {
        let (a, b) = (get(plain.addr, path, ""), get(configured.addr, path, ""));
        assert_eq!((a.status, b.status), (200, 200), "{path}");
        // info.py shows the port it was reached on.
        let seen = |r: &common::Response, addr: std::net::SocketAddr| match path.contains("info.py") {
            true => String::from_utf8_lossy(&r.body).replace(&format!(">{}<", addr.port()), ">PORT<").into_bytes(),
            false => r.body.clone(),
        };
        assert!(seen(&a, plain.addr) == seen(&b, configured.addr), "{path} differs");
    }
    let large = std::fs::read(site.join("files/large.txt")).unwrap();
    assert_eq!(get(plain.addr, "/cgi-bin/download.cgi/large.txt", "").body, large);
    let board = String::from_utf8(get(plain.addr, "/cgi-bin/board.cgi?page=2", "").body).unwrap();
    for want in ["page 2 of 5", "<link rel=\"stylesheet\" href=\"/css/style.css\">", "<a href=\"/\">"] {
        assert!(board.contains(want), "board page lacks {want}");
    }
    let index = String::from_utf8(get(plain.addr, "/", "").body).unwrap();
    assert!(index.contains("tern is serving this site") && index.contains("href=\"/favicon.ico\""));
    let icon = get(plain.addr, "/favicon.ico", "");
    assert_eq!(icon.header("content-type"), Some("image/x-icon"));
    assert_eq!(icon.body, std::fs::read(site.join("favicon.ico")).unwrap());
    // Ranges, redirects and what a program must not reach.
    let r = get(plain.addr, "/files/large.txt", "Range: bytes=-100\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &large[large.len() - 100..]));
    assert_eq!(get(plain.addr, "/files", "").header("location"), Some("/files/"));
    assert_eq!(get(plain.addr, "/cgi-bin/download.cgi/../tern.toml", "").status, 404);
    assert_eq!(get(plain.addr, "/cgi-bin/download.cgi?file=../tern.toml", "").status, 403);
    assert_eq!(get(plain.addr, "/cgi-bin/board-data.txt", "").status, 403);
}

/// The first pixel's colour of a PNG: its filter cannot change the first
/// pixel of the first row, so no unfiltering is needed.
fn first_pixel(png: &[u8]) -> [u8; 3] {
    use std::io::Read;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut pos, mut color_type, mut idat) = (8, 0, Vec::new());
    while pos + 8 <= png.len() {
        let len = u32::from_be_bytes(png[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &png[pos + 4..pos + 8];
        let data = &png[pos + 8..pos + 8 + len];
        match kind {
            b"IHDR" => {
                assert_eq!(data[8], 8, "8-bit samples");
                color_type = data[9];
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        pos += 12 + len;
    }
    assert!(matches!(color_type, 2 | 6), "RGB or RGBA, not colour type {color_type}");
    let mut row = [0u8; 4];
    flate2::read::ZlibDecoder::new(idat.as_slice()).read_exact(&mut row).unwrap();
    [row[1], row[2], row[3]]
}

#[test]
fn screenshots_show_the_stylesheet_on_every_page() {
    let (_dir, site) = demo();
    let tern = Tern::start(&site, "sendfile", &site_config(&site), &[]);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for (name, path) in [
        ("index", "/"),
        ("about", "/about.html"),
        ("files", "/files/"),
        ("board", "/cgi-bin/board.cgi?page=2"),
        ("info", "/cgi-bin/info.py/some/path?x=1"),
    ] {
        let png = shots.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&png);
        common::chromium::load(&tern.url(path), "1024,900", Some(&png));
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot of {path}: {e}"));
        // The stylesheet's background (--foam, #f4f8fb); without it, white.
        let [r, g, b] = first_pixel(&bytes);
        let near = |got: u8, want: u8| got.abs_diff(want) <= 3;
        assert!(near(r, 0xf4) && near(g, 0xf8) && near(b, 0xfb), "{path}: background {r},{g},{b} ({})", png.display());
    }
}

/// A page of the test's own, served beside the demo (whose files stay as
/// they are): the demo's index in a frame, its stylesheet and picture, and
/// once all are loaded, how each came (`URL PROTOCOL`, one a line).
const PROBE: &str = r#"<!doctype html>
<html><head><link rel="stylesheet" href="/css/style.css"></head>
<body><iframe src="/"></iframe><img src="/images/tern.svg" alt="">
<pre id="protocols"></pre>
<script>
addEventListener("load", () => {
  const entries = performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"));
  document.getElementById("protocols").textContent = entries.map(e => e.name + " " + e.nextHopProtocol).join("\n");
});
</script></body></html>
"#;

#[test]
fn chromium_loads_the_demo_over_h2() {
    let (dir, site) = demo();
    let probe = tempfile::tempdir().unwrap();
    std::fs::write(probe.path().join("h2-probe.html"), PROBE).unwrap();
    let (cert, key, _) = Ca::new("tern demo CA").leaf(dir.path(), "demo", &["localhost"]);
    let log = dir.path().join("access.log");
    let config = format!(
        "{}{}[http2]\nprotocols = [\"h2\"]\n[[site]]\ndefault = true\n\
         [[site.location]]\nexact = \"/h2-probe.html\"\nroot = \"{}\"\n",
        site_config(&site).replace("access = \"off\"", &format!("access = \"{}\"", log.display())),
        section(&cert, &key),
        probe.path().display()
    );
    let mut tern = Tern::start(&site, "sendfile", &config, &[]);
    let origin = format!("https://127.0.0.1:{}", https_addr(&tern).port());
    // Chromium speaks HTTP/2 only over TLS, offered by ALPN.
    let dom = common::chromium::load_with(
        &format!("{origin}/h2-probe.html"),
        "1024,900",
        None,
        &["--ignore-certificate-errors"],
    );
    let text = dom.split("<pre id=\"protocols\">").nth(1).and_then(|s| s.split("</pre>").next()).unwrap_or("");
    let paths = ["/h2-probe.html", "/", "/css/style.css", "/images/tern.svg"];
    for path in paths {
        let came = text.lines().find_map(|l| l.strip_prefix(&format!("{origin}{path} ")));
        assert_eq!(came, Some("h2"), "{path}: {text}");
    }
    // The access log (written out at exit) says so too.
    tern.terminate(std::time::Duration::from_secs(10));
    let logged = std::fs::read_to_string(&log).unwrap();
    for path in paths {
        assert!(logged.contains(&format!("\"GET {path} HTTP/2.0\"")), "{path}:\n{logged}");
    }
    assert!(logged.lines().all(|l| l.contains(" HTTP/2.0\"")), "{logged}");
}

#[test]
fn the_readme_mix_runs_against_the_demo() {
    let (_dir, site) = demo();
    let tern = Tern::start(&site, "sendfile", &site_config(&site), &[]);
    let out = Command::new(common::tern_bin())
        .args(["bench", &tern.url("/"), "--mix"])
        .arg(repo().join("site/demo.mix"))
        .args(["-n", "300", "-c", "2", "-t", "1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["requests"], 300);
    assert_eq!(j["successes"], 300, "{}", j["status"]);
    assert_eq!(j["mix_file"], repo().join("site/demo.mix").display().to_string());
}
