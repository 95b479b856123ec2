//! `tern lab run e1|e4 --quick` end to end: each starts its own tern
//! servers, measures, prints its table and stores one run whose
//! measurements are the table's.

use std::path::Path;
use std::process::{Command, Output};

fn tern(args: &[&str], store: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern")).args(args).arg("--store").arg(store).output().unwrap()
}

fn run(name: &str, store: &Path) -> (String, serde_json::Value) {
    let out = tern(&["lab", "run", name, "--quick"], store);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout.lines().find(|l| l.starts_with("stored as run ")).unwrap_or_else(|| panic!("{stdout}"));
    let id = line["stored as run ".len()..].split(';').next().unwrap().to_string();
    let export = tern(&["lab", "export", &id], store);
    let doc: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    (stdout, doc["runs"][0].clone())
}

fn values<'a>(run: &'a serde_json::Value, metric: &str) -> Vec<&'a serde_json::Value> {
    run["measurements"].as_array().unwrap().iter().filter(|m| m["metric"] == metric).collect()
}

#[test]
fn e1_measures_each_static_method_by_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run("e1", &store);
    assert_eq!(run["kind"], "e1");
    assert_eq!(run["status"], "complete");
    let rps = values(&run, "requests_per_s");
    assert_eq!(rps.len(), 9, "3 methods x 3 sizes");
    for method in ["sendfile", "mmap", "read"] {
        let sizes: Vec<u64> =
            rps.iter().filter(|m| m["subject"] == method).map(|m| m["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, vec![4096, 262_144, 4_194_304], "{method}");
        assert!(table.lines().any(|l| l.contains(method) && l.contains("4MiB")), "{table}");
    }
    assert!(rps.iter().all(|m| m["value"].as_f64().unwrap() > 0.0), "every workload was served");
}

#[test]
fn e4_stores_the_compression_gain_per_page_and_coding() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run("e4", &store);
    assert_eq!(run["kind"], "e4");
    let bytes = values(&run, "response_bytes");
    assert_eq!(bytes.len(), 16, "4 pages x 4 codings");
    for page in [6_040u64, 11_426, 22_132, 41_518] {
        let of = |coding: &str| {
            bytes.iter().find(|m| m["subject"] == coding && m["size"] == page).unwrap()["value"].as_f64().unwrap()
        };
        assert_eq!(of("identity"), page as f64, "identity is the page itself");
        for coding in ["gzip", "br", "zstd"] {
            assert!(of(coding) < page as f64 * 0.8, "{coding} on {page}: {}", of(coding));
        }
    }
    let gains = values(&run, "compression_gain");
    let gzip = gains.iter().find(|m| m["subject"] == "gzip" && m["size"] == 41_518).unwrap();
    let expected = 100.0
        * (1.0
            - bytes.iter().find(|m| m["subject"] == "gzip" && m["size"] == 41_518).unwrap()["value"].as_f64().unwrap()
                / 41_518.0);
    assert!((gzip["value"].as_f64().unwrap() - expected).abs() < 1e-9);
    assert!(table.contains("41518") && table.contains("zstd"), "{table}");
}
