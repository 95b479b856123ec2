//! Hidden paths (a segment starting with `.`) are answered 404 by default,
//! however they are spelled, for static files and CGI alike, except under
//! `/.well-known/`; `static.hidden` and `static.hidden_allow` change it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{get, Tern};

/// A root with the usual hidden things, a `.well-known` tree and a CGI
/// program with a hidden name that leaves a mark when it runs.
fn hidden_site() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    for (path, body) in [
        (".git/config", "[core]\n"),
        (".htpasswd", "admin:secret\n"),
        ("a/.env", "KEY=1\n"),
        ("a/b.txt", "visible\n"),
        (".well-known/acme-challenge/tok", "token\n"),
        (".well-known/.secret", "no\n"),
        (".public/x.txt", "public\n"),
    ] {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let mark = dir.path().join("ran");
    for script in ["cgi-bin/.run.sh", "cgi-bin/.d/run.sh"] {
        let p = root.join(script);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            &p,
            format!("#!/bin/sh\ntouch {}\nprintf 'Content-Type: text/plain\\r\\n\\r\\nran\\n'\n", mark.display()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, root)
}

fn status_and_body(tern: &Tern, path: &str) -> (u16, String) {
    let r = get(tern.addr, path, "");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

#[test]
fn hidden_paths_are_not_found_by_default() {
    let (dir, root) = hidden_site();
    let tern = Tern::start(&root, "sendfile", "", &[]);
    for path in [
        "/.git/config",
        "/.git/",
        "/.git",
        "/.htpasswd",
        "/a/.env",
        "/%2egit/config",
        "/%2Ehtpasswd",
        "/a/%2eenv",
        "/a/b/../.env",
        "/a/./.env",
        "/.well-known/.secret",
        "/cgi-bin/.run.sh",
        "/cgi-bin/.d/run.sh",
    ] {
        assert_eq!(status_and_body(&tern, path).0, 404, "{path}");
    }
    assert!(!dir.path().join("ran").exists(), "a hidden CGI program was run");
    assert_eq!(status_and_body(&tern, "/.well-known/acme-challenge/tok"), (200, "token\n".into()));
    assert_eq!(status_and_body(&tern, "/%2ewell-known/acme-challenge/tok"), (200, "token\n".into()));
    assert_eq!(status_and_body(&tern, "/a/b.txt"), (200, "visible\n".into()));
}

#[test]
fn hidden_allow_mode_and_allowlist() {
    let (dir, root) = hidden_site();
    let tern = Tern::start(&root, "sendfile", "[static]\nhidden = \"allow\"\n", &[]);
    assert_eq!(status_and_body(&tern, "/.git/config"), (200, "[core]\n".into()));
    assert_eq!(status_and_body(&tern, "/a/.env"), (200, "KEY=1\n".into()));
    assert_eq!(status_and_body(&tern, "/cgi-bin/.run.sh"), (200, "ran\n".into()));
    assert!(dir.path().join("ran").exists());
    drop(tern);

    let tern = Tern::start(&root, "sendfile", "[static]\nhidden_allow = [\"/.public\"]\n", &[]);
    assert_eq!(status_and_body(&tern, "/.public/x.txt"), (200, "public\n".into()));
    assert_eq!(status_and_body(&tern, "/.well-known/acme-challenge/tok").0, 404);
    assert_eq!(status_and_body(&tern, "/.git/config").0, 404);
}

#[test]
fn hidden_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        ("[static]\nhidden = \"maybe\"\n", "line 2"),
        (
            "[static]\nio = \"read\"\nhidden_allow = [\".well-known\"]\n",
            "line 3: static.hidden_allow: each must be a URL path starting with /",
        ),
    ] {
        let config = dir.path().join("t.toml");
        std::fs::write(&config, text).unwrap();
        let out = std::process::Command::new(common::tern_bin())
            .args(["serve", "--check", "--config"])
            .arg(&config)
            .arg(Path::new(dir.path()))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected) && err.contains(config.to_str().unwrap()), "{text:?} → {err}");
    }
}
