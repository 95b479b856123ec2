//! The lab's results store, end to end: real `tern bench` and `tern probe`
//! runs against a real tern, recorded, listed, shown, exported, imported
//! and deleted through the `tern lab` commands.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{tern_bin, Tern};

fn tern(args: &[&str], store: &Path) -> Output {
    Command::new(tern_bin()).args(args).arg("--store").arg(store).output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The newest run in the store (`tern lab list`'s first row): its id,
/// after checking that it ended with `status`.
fn stored_id(store: &Path, status: &str) -> i64 {
    let list = ok(tern(&["lab", "list"], store));
    let row = list.lines().nth(1).unwrap_or_else(|| panic!("no run stored: {list}"));
    assert!(row.contains(&format!(" {status} ")), "{row}");
    row.split_whitespace().next().unwrap().parse().unwrap()
}

fn export(ids: &[&str], store: &Path) -> serde_json::Value {
    let mut args = vec!["lab", "export"];
    args.extend(ids);
    serde_json::from_str(&ok(tern(&args, store))).unwrap()
}

#[test]
fn bench_and_probe_runs_are_stored_exported_imported_and_deleted() {
    let site = common::site();
    let server = Tern::start(&site.root, "read", "", &[]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab/runs.sqlite");
    let url = server.url("/small.txt");

    let out = tern(&["bench", "-n", "300", "-c", "2", "-t", "1", "--json", &url], &store);
    assert!(out.stderr.is_empty(), "piped: the run is stored silently");
    let printed: serde_json::Value = serde_json::from_slice(&ok(out).into_bytes()).unwrap();
    let bench_id = stored_id(&store, "complete");
    ok(tern(&["probe", "syscalls", "--quick", "--label", "quick syscalls"], &store));
    let probe_id = stored_id(&store, "complete");

    // The stored bench run is the printed report, with its measurements
    // taken from it exactly.
    let doc = export(&[&bench_id.to_string()], &store);
    assert_eq!(doc["format"], "tern-lab-runs");
    let run = &doc["runs"][0];
    assert_eq!(run["id"], bench_id);
    assert_eq!(run["kind"], "bench");
    assert_eq!(run["status"], "complete");
    assert_eq!(run["result"], printed);
    assert_eq!(run["config"]["connections"], 2);
    assert_eq!(run["label"], url);
    assert!(run["command_line"].as_array().unwrap().iter().any(|a| a == "-n"), "{}", run["command_line"]);
    let value = |metric: &str| {
        run["measurements"].as_array().unwrap().iter().find(|m| m["metric"] == metric).unwrap()["value"].clone()
    };
    assert_eq!(value("requests_per_s"), printed["requests_per_s"]);
    assert_eq!(value("latency_p99").as_f64().unwrap(), printed["latency"]["service"]["p99_us"].as_f64().unwrap());
    let m = run["measurements"].as_array().unwrap().iter().find(|m| m["metric"] == "requests_per_s").unwrap();
    assert_eq!(m["size"], 1000, "the body size per response");
    assert_eq!(m["concurrency"], 2);
    assert_eq!(run["histograms"][0]["name"], "service");
    assert_eq!(run["histograms"][0]["snapshot"], printed["histograms"]["service"]);
    assert!(run["environment"]["cores_online"].as_u64().unwrap() >= 1);
    assert!(run["finished_at"].as_f64().unwrap() >= run["started_at"].as_f64().unwrap());

    // Both runs listed, newest first; the probe run with its label and one
    // host (the same fingerprint) for both.
    let list = ok(tern(&["lab", "list"], &store));
    let rows: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{list}");
    assert!(rows[0].trim_start().starts_with(&probe_id.to_string()) && rows[0].contains("quick syscalls"), "{list}");
    assert!(rows[1].trim_start().starts_with(&bench_id.to_string()) && rows[1].contains(" bench "), "{list}");
    let only = ok(tern(&["lab", "list", "--kind", "probe"], &store));
    assert_eq!(only.lines().count(), 2, "{only}");
    let hosts = ok(tern(&["lab", "hosts"], &store));
    assert_eq!(hosts.lines().count(), 1, "{hosts}");
    assert!(hosts.contains("(2 runs;"), "{hosts}");
    let show = ok(tern(&["lab", "show", &probe_id.to_string()], &store));
    assert!(show.contains("probe (complete), quick syscalls"), "{show}");
    assert!(show.contains("syscalls/"), "{show}");

    // CSV: one row per measurement.
    let csv = ok(tern(&["lab", "export", &bench_id.to_string(), "--format", "csv"], &store));
    let measurements = run["measurements"].as_array().unwrap().len();
    assert_eq!(csv.lines().count(), 1 + measurements, "{csv}");
    assert!(csv.lines().any(|l| l.contains(",requests_per_s,") && l.starts_with(&format!("{bench_id},bench,"))));

    // Export both, import into another store: the same runs, new ids.
    let file = dir.path().join("runs.json");
    ok(tern(&["lab", "export", &bench_id.to_string(), &probe_id.to_string(), "-o", file.to_str().unwrap()], &store));
    let other = dir.path().join("other.sqlite");
    let said = ok(tern(&["lab", "import", file.to_str().unwrap()], &other));
    assert_eq!(said, "imported 2 runs as 1 2\n");
    let before = export(&[&bench_id.to_string(), &probe_id.to_string()], &store);
    let after = export(&["1", "2"], &other);
    for (a, b) in before["runs"].as_array().unwrap().iter().zip(after["runs"].as_array().unwrap()) {
        let strip = |v: &serde_json::Value| {
            let mut v = v.clone();
            v.as_object_mut().unwrap().remove("id");
            v.as_object_mut().unwrap().remove("host");
            v
        };
        assert_eq!(strip(a), strip(b));
    }

    // Deleting removes the run and only it.
    assert_eq!(ok(tern(&["lab", "delete", &bench_id.to_string()], &store)), format!("deleted run {bench_id}\n"));
    let out = tern(&["lab", "show", &bench_id.to_string()], &store);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("no run {bench_id} in the store")));
    assert_eq!(ok(tern(&["lab", "list"], &store)).lines().count(), 2);
    let out = tern(&["lab", "import", store.to_str().unwrap()], &other);
    assert_eq!(out.status.code(), Some(2), "a non-export is refused");
}

#[test]
fn an_interrupted_bench_is_stored_as_interrupted() {
    let site = common::site();
    let server = Tern::start(&site.root, "read", "", &[]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let mut child = Command::new(tern_bin())
        .args(["bench", "-c", "2", "-t", "1", "-d", "60s", "--json", &server.url("/small.txt"), "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "tern bench did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap();
    let id = stored_id(&store, "interrupted");
    let doc = export(&[&id.to_string()], &store);
    let run = &doc["runs"][0];
    assert_eq!(run["status"], "interrupted");
    assert_eq!(run["result"]["interrupted"], true);
    assert!(run["finished_at"].as_f64().unwrap() - run["started_at"].as_f64().unwrap() < 50.0);
    let list = ok(tern(&["lab", "list", "--status", "interrupted"], &store));
    assert_eq!(list.lines().count(), 2, "{list}");
}

#[test]
fn a_store_from_a_newer_tern_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    ok(tern(&["lab", "list"], &store));
    let status = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version=99'); c.commit()",
        ])
        .arg(&store)
        .status()
        .unwrap();
    assert!(status.success());
    let out = tern(&["lab", "list"], &store);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("schema version 99 is newer than this tern knows (1)"), "{err}");
    assert!(err.contains(store.to_str().unwrap()), "{err}");
}
