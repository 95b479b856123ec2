//! Program sources (`.php`, `.pl`, `.fcgi` by default) are never sent as
//! static files: a PHP page under a root with no FastCGI backend for it is
//! answered 403, not shown as source. `static.exclude_extensions` sets the
//! list.

mod common;

use common::{get, Tern};

fn root_with_sources() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, body) in [
        ("page.php", "<?php $db_password = 'secret'; ?>\n"),
        ("Upper.PHP", "<?php echo 1; ?>\n"),
        ("tool.pl", "print 1;\n"),
        ("app.fcgi", "#!/bin/sh\n"),
        ("dir/index.php", "<?php echo 2; ?>\n"),
        ("notes.txt", "plain\n"),
        ("php", "no extension\n"),
    ] {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    dir
}

#[test]
fn program_sources_are_refused_by_default() {
    let root = root_with_sources();
    let config = "[server]\nindex = [\"index.php\", \"index.html\"]\n";
    for io in ["sendfile", "mmap", "read"] {
        let tern = Tern::start(root.path(), io, config, &[]);
        for path in ["/page.php", "/Upper.PHP", "/tool.pl", "/app.fcgi", "/dir/", "/page%2ephp"] {
            let r = get(tern.addr, path, "");
            assert_eq!(r.status, 403, "{io} {path}");
            assert!(!String::from_utf8_lossy(&r.body).contains("<?php"), "{io} {path}: source sent");
        }
        // Asked twice: a refused file is never kept in the open-file table.
        assert_eq!(get(tern.addr, "/page.php", "").status, 403, "{io}");
        for (path, body) in [("/notes.txt", "plain\n"), ("/php", "no extension\n")] {
            let r = get(tern.addr, path, "");
            assert_eq!((r.status, r.body.as_slice()), (200, body.as_bytes()), "{io} {path}");
        }
    }
}

#[test]
fn the_list_is_a_setting() {
    let root = root_with_sources();
    let tern = Tern::start(root.path(), "sendfile", "[static]\nexclude_extensions = [\".pl\"]\n", &[]);
    let r = get(tern.addr, "/page.php", "");
    assert_eq!((r.status, r.body.as_slice()), (200, b"<?php $db_password = 'secret'; ?>\n".as_slice()));
    assert_eq!(get(tern.addr, "/tool.pl", "").status, 403);

    let config = root.path().join("bad.toml");
    std::fs::write(&config, "[static]\nexclude_extensions = [\"php\"]\n").unwrap();
    let out = std::process::Command::new(common::tern_bin())
        .args(["serve", "--check", "--config"])
        .arg(&config)
        .arg(root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2: static.exclude_extensions: each must be an extension starting with ."), "{err}");
}
