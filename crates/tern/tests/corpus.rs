//! Replays the shared HTTP/1.1 request corpus (`../shared/http1-corpus/`)
//! against the real server, for each I/O method, with the flat
//! configuration and with several sites (`common::configs`), and asserts
//! every label.
//! Vectors that need a CGI (`__ECHO__`, CGI response headers) belong to the
//! CGI tests.

mod common;

use std::time::Duration;

use base64::Engine;
use common::{corpus_dir, exchange_until_close, io_methods, statuses, Tern};

struct Vector {
    id: String,
    raw: Vec<u8>,
    expect: String,
}

fn vectors() -> Vec<Vector> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "jsonl")) {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["kind"] == "cgi-response-header" {
                continue;
            }
            let raw = b64.decode(v["raw_b64"].as_str().unwrap()).unwrap();
            if raw.windows(8).any(|w| w == b"__ECHO__") {
                continue;
            }
            let id = v["id"].as_str().unwrap().to_string();
            out.push(Vector { id: id.clone(), raw, expect: v["expect"].as_str().unwrap().to_string() });
            if let (Some(raw), Some(expect)) = (v["raw_with_host_b64"].as_str(), v["expect_with_host"].as_str()) {
                out.push(Vector {
                    id: format!("{id}+host"),
                    raw: b64.decode(raw).unwrap(),
                    expect: expect.to_string(),
                });
            }
        }
    }
    out
}

const REJECT: [u16; 7] = [400, 411, 413, 414, 431, 501, 505];

/// Checks one label; `None` means the label is informational.
fn verdict(expect: &str, codes: &[u16]) -> Option<bool> {
    let first = codes.first().copied();
    let rejected = first.is_none_or(|c| REJECT.contains(&c));
    Some(match expect {
        e if e.starts_with("reject-or-") => {
            let n: u16 = e["reject-or-".len()..].parse().unwrap();
            rejected || first == Some(n)
        }
        e if e.starts_with("reject") => rejected,
        "accept" => first.is_some_and(|c| c != 400 && c != 505),
        "accept-all" => !codes.is_empty() && codes.iter().all(|&c| c != 400),
        e if e.starts_with("accept-first") => first.is_some_and(|c| c != 400),
        "any-success(200-399)" => first.is_some_and(|c| (200..400).contains(&c)),
        "any-error(>=400)" => first.is_some_and(|c| c >= 400),
        "drop-connection-without-response" => codes.is_empty(),
        e if e.len() == 3 && e.bytes().all(|b| b.is_ascii_digit()) => first == Some(e.parse().unwrap()),
        _ => return None,
    })
}

/// The one gated vector whose label tern deliberately does not meet.
/// `llhttp/uri/225+host` expects `GET http://a%12:b!&*$@hypnotoad.org:1234/toto`
/// to be accepted, while `httpd-strict/55` expects `GET http://foo@localhost:80/`
/// to be refused with 400: the two labels cannot both hold for a rule about
/// userinfo. tern follows RFC 9110 §4.2.4 ("treat its presence as an error")
/// and answers 400 to both; this asserts exactly that.
const USERINFO_DEVIATION: &str = "llhttp/uri/225+host";

#[test]
fn corpus_labels_hold_for_every_io_method_and_configuration() {
    let vectors = vectors();
    assert!(vectors.len() > 250, "corpus not found or truncated: {}", vectors.len());
    let site = common::site();
    for (config_name, config) in common::configs(&site.root) {
        for io in io_methods() {
            let mut tern = Tern::start(&site.root, io, &config, &[]);
            let addr = tern.addr;
            let name = format!("{config_name}, {io}");
            replay(&vectors, &name, |raw| exchange_until_close(addr, raw, Duration::from_secs(1)));
            assert!(tern.alive(), "{name}: server died during the corpus");
        }
    }
}

/// The same labels over HTTPS: TLS is a layer under the one parser.
#[test]
fn corpus_labels_hold_over_tls() {
    let vectors = vectors();
    let site = common::site();
    let ca = common::tls::Ca::new("corpus CA");
    let (cert, key, _) = ca.leaf(site.dir.path(), "site", &["localhost"]);
    let mut tern = Tern::start(&site.root, "mmap", &common::tls::section(&cert, &key), &[]);
    let addr = common::tls::https_addr(&tern);
    let client = common::tls::client(&ca);
    replay(&vectors, "tls", |raw| common::tls::exchange_until_close(&client, addr, raw, Duration::from_secs(1)));
    assert!(tern.alive(), "server died during the corpus over TLS");
}

/// Sends every vector with `exchange` (bytes in; response and whether the
/// server closed out) and asserts the labels.
fn replay(vectors: &[Vector], name: &str, exchange: impl Fn(&[u8]) -> (Vec<u8>, bool)) {
    let mut failures = Vec::new();
    let mut gated = 0;
    for v in vectors {
        let (response, closed) = exchange(&v.raw);
        let codes = statuses(&response);
        // A refused request ends its connection: nothing after it is
        // read as another request.
        if codes.first().is_some_and(|c| REJECT.contains(c)) && (codes.len() != 1 || !closed) {
            failures.push(format!(
                "{}: refused with {codes:?} but the connection {}",
                v.id,
                if closed { "answered more" } else { "stayed open" }
            ));
        }
        if v.id == USERINFO_DEVIATION {
            assert_eq!(codes.first(), Some(&400), "{name}: {}", v.id);
            continue;
        }
        match verdict(&v.expect, &codes) {
            Some(true) => gated += 1,
            Some(false) => failures.push(format!("{} expected {} got {:?}", v.id, v.expect, codes)),
            None => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} gated vectors failed:\n{}",
        failures.len(),
        gated + failures.len(),
        failures.join("\n")
    );
    assert!(gated > 200, "{name}: only {gated} gated vectors checked");
}
