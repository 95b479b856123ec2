//! Nothing outside the document root is ever served: `..` raw, percent-
//! encoded and double-encoded, backslashes, NUL, absolute-form targets, and
//! symlinks leaving the root — under every symlink policy that should
//! refuse them, with the flat configuration and with several sites, where
//! the same vectors also follow an alias without a trailing slash
//! (`common::configs`).

mod common;

use std::os::unix::fs::symlink;
use std::time::Duration;

use common::{exchange, io_methods, statuses, Tern, SECRET};

const ATTEMPTS: &[&str] = &[
    "/../secret.txt",
    "/../../secret.txt",
    "/sub/../../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/.%2e/secret.txt",
    "/%2e%2e%2fsecret.txt",
    "/..%2fsecret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "/%252e%252e/secret.txt",
    "/%252e%252e%252fsecret.txt",
    "/..%5csecret.txt",
    "/..\\secret.txt",
    "/%5c..%5csecret.txt",
    "/secret.txt%00.html",
    "/sub/..%00/secret.txt",
    "/%c0%ae%c0%ae/secret.txt",
    "//../secret.txt",
    "/./../secret.txt",
    "/out",
    "/out/secret.txt",
    "/outdir/secret.txt",
    "/sub/up/secret.txt",
    // After `/alias` (an alias of the root on a prefix without a trailing
    // slash): textually, `/alias../secret.txt` is the secret.
    "/alias../secret.txt",
    "/alias..",
    "/alias../",
    "/alias..%2fsecret.txt",
    "/alias%2e%2e/secret.txt",
    "/alias%2E%2E%2fsecret.txt",
    "/alias.%2e/secret.txt",
    "/alias%252e%252e/secret.txt",
    "/alias%252e%252e%252fsecret.txt",
    "/alias..%5csecret.txt",
    "/alias..\\secret.txt",
    "/alias%5c..%5csecret.txt",
    "/alias%2f..%2fsecret.txt",
    "/alias/../../secret.txt",
    "/alias/%2e%2e/%2e%2e/secret.txt",
    "/alias/..%2f..%2fsecret.txt",
    "/alias%c0%ae%c0%ae/secret.txt",
    "/alias..%00/secret.txt",
    "/alias/out",
    "/alias/outdir/secret.txt",
    "/alias/sub/up/secret.txt",
];

fn plant_links(site: &common::Site) {
    symlink(site.dir.path().join("secret.txt"), site.root.join("out")).unwrap();
    symlink(site.dir.path(), site.root.join("outdir")).unwrap();
    symlink("../..", site.root.join("sub/up")).unwrap();
    symlink("small.txt", site.root.join("inside.txt")).unwrap();
}

fn assert_no_leak(tern: &Tern, label: &str) {
    for path in ATTEMPTS {
        for request in [
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
            format!("GET http://x{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ] {
            let raw = exchange(tern.addr, request.as_bytes(), Duration::from_secs(2));
            assert!(common::find(&raw, SECRET.as_bytes()).is_none(), "{label}: {path} leaked the secret");
            let codes = statuses(&raw);
            assert!(codes.is_empty() || matches!(codes[0], 400 | 403 | 404), "{label}: {path} answered {codes:?}");
        }
    }
}

#[test]
fn traversal_never_leaves_the_root() {
    let site = common::site();
    plant_links(&site);
    for (config_name, config) in common::configs(&site.root) {
        for io in io_methods() {
            let label = format!("{config_name}, {io}");
            let tern = Tern::start(&site.root, io, &config, &[]);
            assert_no_leak(&tern, &label);
            // A symlink that stays inside the root is followed, through the
            // alias too.
            let inside: &[&str] =
                if config.is_empty() { &["/inside.txt"] } else { &["/inside.txt", "/alias/inside.txt"] };
            for path in inside {
                let r = common::get(tern.addr, path, "");
                assert_eq!((r.status, r.body.as_slice()), (200, site.small.as_slice()), "{label}: {path}");
            }
            assert_eq!(common::get(tern.addr, "/out", "").status, 403, "{label}");
        }
    }
}

#[test]
fn symlink_policies() {
    let site = common::site();
    plant_links(&site);
    for (config_name, config) in common::configs(&site.root) {
        let never = Tern::start(&site.root, "sendfile", &format!("[server]\nsymlinks = \"never\"\n{config}"), &[]);
        assert_no_leak(&never, &format!("{config_name}, never"));
        assert_eq!(common::get(never.addr, "/inside.txt", "").status, 403, "{config_name}: no symlink at all");
        drop(never);
        // `any` is the explicit opt-in for links out of the root; `..` in
        // the path itself still never climbs out.
        let any = Tern::start(&site.root, "sendfile", &format!("[server]\nsymlinks = \"any\"\n{config}"), &[]);
        let r = common::get(any.addr, "/out", "");
        assert_eq!((r.status, r.body.as_slice()), (200, SECRET.as_bytes()), "{config_name}");
        for path in [
            "/../secret.txt",
            "/%2e%2e/secret.txt",
            "/..%5csecret.txt",
            "/alias../secret.txt",
            "/alias%2e%2e/secret.txt",
        ] {
            let raw = exchange(
                any.addr,
                format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
                Duration::from_secs(2),
            );
            assert!(common::find(&raw, SECRET.as_bytes()).is_none(), "{config_name}, any: {path}");
        }
    }
}
