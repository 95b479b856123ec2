//! Headless Chromium (Debian's `chromium`, installed by scripts/test.sh),
//! bounded in time, with a throwaway profile.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Loads `url` in a `width,height` window: with `screenshot`, writes a PNG
/// there and returns an empty string; without, returns the DOM after load.
pub fn load(url: &str, window: &str, screenshot: Option<&Path>) -> String {
    load_with(url, window, screenshot, &[])
}

/// As [`load`], with `extra` switches (e.g. `--ignore-certificate-errors`
/// for a server whose certificate a test's own CA signed).
pub fn load_with(url: &str, window: &str, screenshot: Option<&Path>, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--window-size={window}"))
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(extra);
    match screenshot {
        Some(out) => cmd.arg(format!("--screenshot={}", out.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out_file = profile.path().join("dom.html");
    let mut child = cmd
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium (scripts/test.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took more than 90 s for {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match screenshot {
        Some(_) => String::new(),
        None => std::fs::read_to_string(out_file).unwrap(),
    }
}
