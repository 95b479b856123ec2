//! `tern lab run e1 … e5 --quick` end to end: each starts its own tern
//! servers (and the gateway's programs, or an agent), measures, prints its
//! table and stores its run(s), whose measurements are the table's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn tern(args: &[&str], store: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern")).args(args).arg("--store").arg(store).output().unwrap()
}

/// The gateway's programs E2 and E3 run, built once for all tests.
fn gateway() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        let gateway = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../gateway");
        let made = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&gateway)
            .args(["build/fcgi-files", "build/hello.cgi"])
            .status()
            .unwrap();
        assert!(made.success(), "make -C gateway (fcgi-files needs libfcgi-dev)");
        gateway.join("build").to_str().unwrap().to_string()
    })
}

fn run(name: &str, store: &Path) -> (String, serde_json::Value) {
    run_with(name, store, &[])
}

fn run_with(name: &str, store: &Path, extra: &[&str]) -> (String, serde_json::Value) {
    let mut args = vec!["lab", "run", name, "--quick"];
    args.extend(extra);
    let out = tern(&args, store);
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
    let steady = |metric: &str| -> Vec<&serde_json::Value> {
        values(&run, metric).into_iter().filter(|m| !m["subject"].as_str().unwrap().starts_with("burst")).collect()
    };
    let bytes = steady("response_bytes");
    assert_eq!(bytes.len(), 32, "4 pages x 4 codings x sequential and concurrent");
    let of = |metric: &str, coding: &str, page: u64, conns: u64| {
        let found: Vec<_> = steady(metric)
            .into_iter()
            .filter(|m| m["subject"] == coding && m["size"] == page && m["concurrency"] == conns)
            .collect();
        assert_eq!(found.len(), 1, "{metric} {coding} {page} {conns}");
        found[0]["value"].as_f64().unwrap()
    };
    for page in [6_040u64, 11_426, 22_132, 41_518] {
        // Sequential (1 connection) and concurrent (16).
        for conns in [1, 16] {
            assert_eq!(of("response_bytes", "identity", page, conns), page as f64, "identity is the page itself");
            for coding in ["identity", "gzip", "br", "zstd"] {
                if coding != "identity" {
                    let bytes = of("response_bytes", coding, page, conns);
                    assert!(bytes < page as f64 * 0.8, "{coding} on {page}: {bytes}");
                }
                assert!(of("requests_per_s", coding, page, conns) > 0.0, "{coding} {page} {conns}");
                assert!(of("latency_mean", coding, page, conns) > 0.0, "{coding} {page} {conns}");
                let row = [&page.to_string(), coding, &conns.to_string()];
                assert!(table.lines().any(|l| l.split_whitespace().take(3).eq(row)), "{row:?}: {table}");
            }
        }
    }
    let gzip = of("compression_gain", "gzip", 41_518, 16);
    let expected = 100.0 * (1.0 - of("response_bytes", "gzip", 41_518, 16) / 41_518.0);
    assert!((gzip - expected).abs() < 1e-9);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["page", "coding", "conns", "bytes", "gain", "req/s", "mean", "us", "p99", "us"], "{table}");

    // The cold burst: every page once, so "off" sends the mean page, and
    // inline compresses every one of them.
    let mean_page = (6_040 + 11_426 + 22_132 + 41_518) as f64 / 4.0;
    let burst = |mode: &str, metric: &str| {
        let subject = format!("burst {mode}");
        let found: Vec<_> = values(&run, metric).into_iter().filter(|m| m["subject"] == subject.as_str()).collect();
        assert_eq!(found.len(), 1, "{subject} {metric}");
        found[0]["value"].as_f64().unwrap()
    };
    for mode in ["off", "inline", "adaptive"] {
        assert!(burst(mode, "requests_per_s") > 0.0, "{mode}");
        assert_eq!(burst(mode, "errors"), 0.0, "{mode}");
        let bytes = burst(mode, "response_bytes");
        assert!(bytes <= mean_page * 1.01, "{mode}: {bytes}");
        assert!(table.lines().any(|l| l.split_whitespace().take(3).eq(["burst", mode, "64"])), "{mode}: {table}");
    }
    assert!((burst("off", "response_bytes") - mean_page).abs() < mean_page * 0.01, "off sends the pages");
    assert!(burst("inline", "response_bytes") < mean_page * 0.8, "inline compresses every page");
}

#[test]
fn e2_compares_tern_and_the_fastcgi_file_server_by_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run_with("e2", &store, &["--gateway", gateway()]);
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e2"), Some("complete")));
    let rps = values(&run, "requests_per_s");
    assert_eq!(rps.len(), 15, "5 methods x 3 sizes");
    let of = |subject: &str, size: u64| {
        rps.iter().find(|m| m["subject"] == subject && m["size"] == size).unwrap()["value"].as_f64().unwrap()
    };
    for subject in ["fcgi-files mmap", "fcgi-files read", "tern read", "tern mmap", "tern sendfile"] {
        let sizes: Vec<u64> =
            rps.iter().filter(|m| m["subject"] == subject).map(|m| m["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, vec![1024, 65_536, 1_048_576], "{subject}");
        assert!(sizes.iter().all(|&s| of(subject, s) > 0.0), "{subject} served every size");
    }
    let ratios = values(&run, "mmap_read_ratio");
    assert_eq!(ratios.len(), 6, "2 servers x 3 sizes");
    for r in ratios {
        let (family, size) = (r["subject"].as_str().unwrap(), r["size"].as_u64().unwrap());
        let expected = of(&format!("{family} mmap"), size) / of(&format!("{family} read"), size);
        assert!((r["value"].as_f64().unwrap() - expected).abs() < 1e-9, "{family} {size}: {r}");
    }
    let header = table.lines().next().unwrap();
    for column in
        ["fcgi mmap", "fcgi read", "fcgi mmap/read", "tern read", "tern mmap", "tern sendfile", "tern mmap/read"]
    {
        assert!(header.contains(column), "{table}");
    }
    for size in ["1KiB", "64KiB", "1MiB"] {
        assert!(table.lines().any(|l| l.trim_start().starts_with(size)), "{size}: {table}");
    }
}

#[test]
fn e2_without_the_gateway_names_what_to_build_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let missing = dir.path().join("no-gateway");
    let out = tern(&["lab", "run", "e2", "--quick", "--gateway", missing.to_str().unwrap()], &store);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-gateway/fcgi-files") && stderr.contains("make -C gateway"), "{stderr}");
    let list = String::from_utf8(tern(&["lab", "list"], &store).stdout).unwrap();
    assert_eq!(list.lines().count(), 1, "only the header: {list}");
}

#[test]
fn e3_finds_each_models_saturation_point_by_cgi_share_and_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run_with("e3", &store, &["--gateway", gateway()]);
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e3"), Some("complete")));
    let cpus: Vec<u64> = if std::thread::available_parallelism().unwrap().get() >= 2 { vec![1, 2] } else { vec![1] };
    let one = |subject: &str, metric: &str, n: u64| {
        let found: Vec<_> =
            values(&run, metric).into_iter().filter(|m| m["subject"] == subject && m["cpus"] == n).collect();
        assert_eq!(found.len(), 1, "{subject} {metric} on {n} CPUs");
        found[0]["value"].as_f64().unwrap()
    };
    let capacities = values(&run, "capacity");
    let models: std::collections::BTreeSet<&str> =
        capacities.iter().map(|m| m["subject"].as_str().unwrap().split(' ').next().unwrap()).collect();
    for model in ["event", "pool", "per-request"] {
        assert!(models.contains(model), "{model} measured: {models:?}");
    }
    assert_eq!(capacities.len(), models.len() * 3 * cpus.len(), "every model x 3 shares x CPU counts");
    for model in &models {
        for share in [0, 50, 100] {
            let subject = format!("{model} cgi{share}%");
            for &n in &cpus {
                let capacity = one(&subject, "capacity", n);
                assert!(capacity > 0.0, "{subject} on {n} CPUs");
                // The steps are fractions of the probed capacity.
                assert_eq!(one(&subject, "rate@1x", n), capacity.floor(), "{subject}");
                assert_eq!(one(&subject, "rate@0.5x", n), (capacity * 0.5).floor(), "{subject}");
                assert!(one(&subject, "requests_per_s@0.5x", n) > 0.0, "{subject}");
                assert_eq!(one(&subject, "failed@0.5x", n), 0.0, "{subject} lost requests at half its capacity");
                // The saturation point: the most a step carried (95 % of its
                // rate, p99 within 500 ms, nothing failed).
                let carried = ["0.5", "1", "1.25"]
                    .iter()
                    .map(|f| {
                        let at = |metric: &str| one(&subject, &format!("{metric}@{f}x"), n);
                        let served = at("requests_per_s");
                        let ok = served >= 0.95 * at("rate") && at("latency_p99") <= 500_000.0 && at("failed") == 0.0;
                        if ok {
                            served
                        } else {
                            0.0
                        }
                    })
                    .fold(0.0, f64::max);
                assert_eq!(one(&subject, "saturation", n), carried, "{subject} on {n} CPUs");
            }
            assert!(
                table.lines().any(|l| l.contains(&format!("highest saturation point on 1 CPU, CGI {share}%"))),
                "{table}"
            );
        }
        let rows = table.lines().filter(|l| l.split_whitespace().nth(2) == Some(model)).count();
        assert_eq!(rows, 3 * cpus.len(), "a row per share and CPU count: {table}");
    }
    let header = table.lines().next().unwrap();
    for column in ["cpus", "cgi", "model", "capacity", "0.5x", "1x", "1.25x", "saturation"] {
        assert!(header.contains(column), "{header}");
    }
}

/// A `tern agent` on 127.0.0.1 with the token in `token`, stopped on drop.
struct Agent {
    child: std::process::Child,
    addr: String,
}

impl Agent {
    fn start(token: &Path) -> Agent {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["agent", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(token)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let line = lines.next().expect("the agent says where it listens").unwrap();
        let addr = line.split("listening on ").nth(1).unwrap_or_else(|| panic!("{line}"));
        let addr = addr.split(' ').next().unwrap().to_string();
        std::thread::spawn(move || lines.for_each(drop));
        Agent { child, addr }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// E5 with `--agent`: the suites here and on the agent, one column per
/// host, and one stored run per host.
#[test]
fn e5_probes_this_host_and_an_agent_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let token = dir.path().join("token");
    std::fs::write(&token, "e5-side-by-side\n").unwrap();
    let agent = Agent::start(&token);
    let t = token.to_str().unwrap();
    let out = tern(&["lab", "run", "e5", "--quick", "--agent", &agent.addr, "--token-file", t], &store);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["figure", "unit", "local", agent.addr.as_str()], "{stdout}");
    let rows: Vec<&str> = lines.take_while(|l| !l.starts_with("stored as run ")).collect();
    assert!(rows.len() > 20, "every suite's figures: {stdout}");
    for row in &rows {
        let cells: Vec<&str> = row.split_whitespace().rev().take(2).collect();
        for cell in cells {
            assert!(cell.parse::<f64>().is_ok_and(|v| v >= 0.0), "both hosts measured {row:?}: {stdout}");
        }
    }
    for suite in ["syscalls/", "processes/", "ipc/", "net/", "rpc/", "files/", "disk/"] {
        assert!(rows.iter().any(|r| r.trim_start().starts_with(suite)), "{suite}: {stdout}");
    }

    // Both runs stored, kind e5, each with every figure of the table.
    let ids: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("stored as run ").or_else(|| l.split("'s run as run ").nth(1)))
        .map(|rest| rest.split(';').next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{stdout}");
    let export = tern(&["lab", "export", &ids[0], &ids[1]], &store);
    let doc: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs[0]["label"], "e5 --quick");
    assert_eq!(runs[1]["label"], format!("e5 --quick on {}", agent.addr));
    for run in runs {
        assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e5"), Some("complete")));
        assert_eq!(run["measurements"].as_array().unwrap().len(), rows.len(), "{run}");
    }
    assert_eq!(runs[1]["result"]["host"], agent.addr.as_str());
    let list = String::from_utf8(tern(&["lab", "list", "--kind", "e5"], &store).stdout).unwrap();
    assert_eq!(list.lines().count(), 3, "the header and two runs: {list}");
}

/// `--no-store`: the table is printed, the store is not even created.
#[test]
fn no_store_prints_the_table_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["lab", "run", "e5", "--quick", "--no-store"])
        .env("XDG_DATA_HOME", dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().next().unwrap().split_whitespace().eq(["figure", "unit", "local"]), "{stdout}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("syscalls/")), "{stdout}");
    assert!(!stdout.contains("stored"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing written: {left:?}");
    assert!(!store.exists());
    // With a store named too, it says the two contradict.
    let both = tern(&["lab", "run", "e5", "--quick", "--no-store"], &store);
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("--no-store and --store"), "{both:?}");
}
