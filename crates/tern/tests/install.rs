//! What an operator installs beside the binary: the manual pages, the
//! `--help` text, the systemd unit and the sample configuration — each
//! checked with the real tool that will read it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tern_bin;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tern man DIR` into a fresh directory laid out as a MANPATH entry.
fn man_pages() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(tern_bin()).arg("man").arg(dir.path().join("man1")).output().unwrap();
    assert!(out.status.success(), "tern man: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// A page rendered by man(1) as a reader sees it.
fn render(page: &Path) -> String {
    let out = Command::new("man").arg("-l").arg(page).env("MANWIDTH", "100").env("MANPAGER", "cat").output().unwrap();
    assert!(out.status.success(), "man -l {}: {}", page.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn man_pages_render_every_option() {
    let dir = man_pages();
    let top = render(&dir.path().join("man1/tern.1"));
    for want in ["tern-serve(1)", "tern-bench(1)", "tern-man(1)"] {
        assert!(top.contains(want), "tern(1) lacks {want}:\n{top}");
    }
    let serve = render(&dir.path().join("man1/tern-serve.1"));
    for want in ["--config", "--listen", "--io", "--workers", "--access-log", "--check", "SIGHUP", "log.level"] {
        assert!(serve.contains(want), "tern-serve(1) lacks {want}:\n{serve}");
    }
    let bench = render(&dir.path().join("man1/tern-bench.1"));
    assert!(bench.contains("--mix") && bench.contains("--rate"), "{bench}");
}

#[test]
fn serve_help_tells_reload_and_the_error_log() {
    let out = Command::new(tern_bin()).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for want in ["SIGHUP", "reload", "log.error", "log.level", "warn (the default)"] {
        assert!(help.contains(want), "serve --help lacks {want}:\n{help}");
    }
}

/// `systemd-analyze verify` needs every program the unit runs to exist, so
/// it checks a copy whose `ExecStart`/`ExecStartPre` name the binary under
/// test instead of `/usr/local/bin/tern`, with the generated pages on
/// `MANPATH` (it also checks `Documentation=man:tern-serve(1)`). Any
/// warning fails the test, not only a non-zero exit: an unknown key is a
/// warning.
#[test]
fn systemd_unit_verifies() {
    let unit = std::fs::read_to_string(repo().join("contrib/tern.service")).unwrap();
    for want in [
        "ExecReload=/bin/kill -HUP $MAINPID",
        "User=tern",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ExecStart=/usr/local/bin/tern serve --config /etc/tern/tern.toml\n",
    ] {
        assert!(unit.contains(want), "contrib/tern.service lacks {want}");
    }
    let pages = man_pages();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tern.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/tern", tern_bin())).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&copy).env("MANPATH", pages.path()).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {:?}\n{said}", out.status);
}

#[test]
fn sample_config_passes_check() {
    // `--check` opens what a start would (root, logs, addresses): the
    // sample's places are moved into a scratch directory that has them.
    let sample = std::fs::read_to_string(repo().join("contrib/tern.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::create_dir_all(dir.path().join("log")).unwrap();
    let mut text = sample;
    for (from, to) in [
        ("\"/srv/www\"".to_string(), format!("\"{d}/www\"")),
        ("/var/log/tern/".to_string(), format!("{d}/log/")),
        ("[\"0.0.0.0:80\", \"[::]:80\"]".to_string(), "[\"127.0.0.1:0\"]".to_string()),
    ] {
        assert!(text.contains(&from), "contrib/tern.toml no longer has {from}");
        text = text.replace(&from, &to);
    }
    let config = dir.path().join("tern.toml");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(tern_bin()).args(["serve", "--check", "--config"]).arg(&config).output().unwrap();
    assert!(
        out.status.success(),
        "contrib/tern.toml: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
