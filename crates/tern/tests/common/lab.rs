//! The lab's dashboard in the tests: `tern lab serve` on an ephemeral
//! port, pages loaded in headless Chromium, and the tags and attributes
//! read back from the DOM they produce.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tern_bin;

/// `tern lab serve` on an ephemeral port, stopped when dropped.
pub struct Dashboard {
    child: Child,
    pub base: String,
}

impl Dashboard {
    pub fn start(store: &Path) -> Dashboard {
        let mut child = Command::new(tern_bin())
            .args(["lab", "serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("tern lab serve exited before listening").unwrap();
            if let Some(rest) = line.split("dashboard on ").nth(1) {
                break rest.split(' ').next().unwrap().trim_end_matches('/').to_string();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Dashboard { child, base }
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    /// The address `printed` (a page of the default dashboard, as `tern lab
    /// run` prints it) on this dashboard.
    pub fn at(&self, printed: &str) -> String {
        let path = printed.trim_start_matches("http://").split_once('/').map_or("", |(_, p)| p);
        format!("{}/{path}", self.base)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The DOM after load, or a screenshot, in the dashboard's window size.
pub fn chromium(url: &str, screenshot: Option<&Path>) -> String {
    super::chromium::load(url, "1100,1400", screenshot)
}

/// A screenshot of `url`, `height` pixels tall, as `target/lab-artifacts/NAME`
/// (a PNG of some substance: a page, not an error).
pub fn screenshot(url: &str, name: &str, height: u32) -> PathBuf {
    let png = artifacts().join(name);
    let _ = std::fs::remove_file(&png);
    super::chromium::load(url, &format!("1100,{height}"), Some(&png));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{name}: {} bytes", bytes.len());
    png
}

/// The attributes of every `<NAME …>` tag in `html`.
pub fn tags(html: &str, name: &str) -> Vec<Vec<(String, String)>> {
    let open = format!("<{name} ");
    html.split(&open)
        .skip(1)
        .map(|rest| {
            let tag = &rest[..rest.find('>').unwrap()];
            let mut attrs = Vec::new();
            for part in tag.split('"').collect::<Vec<_>>().chunks(2) {
                if let [key, value] = part {
                    attrs.push((key.trim().trim_end_matches('=').to_string(), unescape(value)));
                }
            }
            attrs
        })
        .collect()
}

/// An attribute's value as written in HTML, unescaped.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

pub fn attr<'a>(tag: &'a [(String, String)], name: &str) -> Option<&'a str> {
    tag.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The text of every `<TAG …>text</TAG>` whose attributes contain `with`.
pub fn texts(html: &str, tag: &str, with: &str) -> Vec<String> {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    html.split(&open)
        .skip(1)
        .filter(|rest| rest.starts_with([' ', '>']))
        .filter_map(|rest| {
            let end = rest.find('>')?;
            let stop = rest.find(&close)?;
            rest[..end].contains(with).then(|| unescape(&rest[end + 1..stop]))
        })
        .collect()
}

/// Where the tests leave what a person may look at (screenshots, reports).
pub fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/lab-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
