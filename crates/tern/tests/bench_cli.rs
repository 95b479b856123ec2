//! `tern bench` as a user runs it: flags, output, errors, exit codes, Ctrl-C.
//! The server is the lab's tiny independent test server, in this process.

#[path = "../../tern-lab/tests/support/tiny_server.rs"]
mod tiny_server;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tiny_server::TinyServer;

fn tern(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern")).arg("bench").args(args).output().expect("run tern")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tern bench failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

#[test]
fn help_documents_the_flags_and_the_mix_format() {
    let out = tern(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for needle in [
        "--connections",
        "--threads",
        "--duration",
        "--requests",
        "--warmup",
        "--no-keepalive",
        "--pipeline",
        "--streams",
        "--h2",
        "--rate",
        "--header",
        "--method",
        "--body-file",
        "--timeout",
        "--json",
        "--timeline",
        "--mix",
        "70 /static/115k.bin",
        "@body-file",
        "Exit status",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
}

#[test]
fn a_bad_url_is_a_clear_error() {
    for (url, needle) in [("ftp://127.0.0.1/", "http:// or https://"), ("127.0.0.1:80/", "http://")] {
        let out = tern(&["-n", "1", url]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        let err = text(&out.stderr);
        assert!(err.contains(needle) && err.contains(url), "{url}: {err}");
    }
}

#[test]
fn a_bad_mix_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("site.mix");
    std::fs::write(&mix, "70 /a\n# fine\n-3 /b\n").unwrap();
    let out = tern(&["--mix", mix.to_str().unwrap(), "-n", "1", "http://127.0.0.1:9/"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("site.mix:3:"), "{err}");
    let out = tern(&["--mix", dir.path().join("missing.mix").to_str().unwrap(), "http://127.0.0.1:9/"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read mix file"), "{}", text(&out.stderr));
}

#[test]
fn an_unreachable_host_fails_fast() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = Instant::now();
    let out = tern(&["-d", "5s", &format!("http://127.0.0.1:{port}/")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot connect"), "{}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(3));
    let out = tern(&["-n", "1", "http://no-such-host.invalid/"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot resolve"), "{}", text(&out.stderr));
}

#[test]
fn json_counts_agree_with_the_server() {
    let server = TinyServer::start();
    let out = tern(&["-n", "200", "-c", "4", "-t", "2", "--json", &server.url("/j")]);
    let j = json(&out);
    assert_eq!(j["requests"], 200);
    assert_eq!(j["status"]["200"], 200);
    assert_eq!(j["errors"]["timeout"], 0);
    assert_eq!(server.requests(), 200);
    assert!(j["histograms"]["service"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(j["latency"]["service"]["p99_us"].as_u64().is_some());
}

#[test]
fn the_summary_is_all_there_is_when_not_on_a_terminal() {
    let server = TinyServer::start();
    let out = tern(&["-n", "300", "-c", "3", "-t", "1", &server.url("/s?status=503")]);
    // Not one success: the summary says so and the exit status is 1.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.starts_with("tern bench http://"), "{summary}");
    for needle in [
        "requests",
        "req/s",
        "transfer",
        "p50",
        "p99.9",
        "max",
        "errors    300",
        "status 300",
        "503 × 300",
        "FAILED    no successful (2xx or 3xx) response",
    ] {
        assert!(summary.contains(needle), "summary lacks {needle:?}:\n{summary}");
    }
}

#[test]
fn mixes_headers_methods_and_bodies_from_the_command_line() {
    let server = TinyServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("site.mix");
    std::fs::write(&mix, "3 /static\n1 POST /cgi\n    @body a=1\n").unwrap();
    let out =
        tern(&["--mix", mix.to_str().unwrap(), "-H", "Accept-Encoding: gzip", "-n", "400", "--json", &server.url("/")]);
    let j = json(&out);
    assert_eq!(j["requests"], 400);
    assert_eq!((server.path_count("/static"), server.path_count("/cgi")), (300, 100));
    assert_eq!(j["mix"][1]["responses"], 100);
    assert_eq!(j["mix"][1]["request"], format!("POST {}", server.url("/cgi")));

    let out = tern(&["-m", "PUT", "--body", "xyz", "-n", "5", "--json", &server.url("/put")]);
    assert_eq!(json(&out)["requests"], 5);
    assert_eq!(server.path_count("/put"), 5);
}

#[test]
fn open_loop_pipelining_no_keepalive_and_timeline_flags() {
    let server = TinyServer::start();
    let j = json(&tern(&["--rate", "300", "-d", "1s", "-c", "4", "--json", &server.url("/o")]));
    assert_eq!(j["mode"], "open");
    let n = j["requests"].as_u64().unwrap();
    assert!((280..=320).contains(&n), "{n} requests at 300/s for 1 s");
    assert!(j["latency"]["response"]["p50_us"].as_u64().is_some());
    assert!(j["late"].as_u64().is_some());

    let j = json(&tern(&["--pipeline", "4", "-c", "2", "-n", "101", "--json", &server.url("/p")]));
    assert_eq!((j["requests"].as_u64(), j["connects"].as_u64()), (Some(101), Some(2)));

    let dir = tempfile::tempdir().unwrap();
    let timeline = dir.path().join("t.csv");
    let j = json(&tern(&[
        "--no-keepalive",
        "-c",
        "2",
        "-n",
        "50",
        "--timeline",
        timeline.to_str().unwrap(),
        "--json",
        &server.url("/k"),
    ]));
    assert_eq!((j["requests"].as_u64(), j["connects"].as_u64()), (Some(50), Some(50)));
    let rows = std::fs::read_to_string(&timeline).unwrap();
    assert_eq!(rows.lines().count(), 51, "header + one row per request");
    assert!(rows.starts_with("start_us,end_us,"));
}

#[test]
fn ctrl_c_prints_what_was_measured() {
    let server = TinyServer::start();
    let child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["bench", "-d", "30s", "-c", "2", "-t", "1", &server.url("/long")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let started = Instant::now();
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?} to stop", started.elapsed());
    assert!(out.status.success(), "{:?} {}", out.status, text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.contains("interrupted"), "{summary}");
    assert!(summary.contains("req/s"), "{summary}");
    assert!(server.requests() > 0);
}

/// A run in which nothing succeeded says so and exits 1 (JSON too), one
/// success is enough for 0; a mix run's summary names the mix file.
#[test]
fn a_run_without_a_success_fails_and_a_mix_is_named() {
    let server = TinyServer::start();
    let out = tern(&["-n", "20", "-c", "2", "-t", "1", "--json", &server.url("/x?status=404")]);
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((j["successes"].as_u64(), j["status"]["404"].as_u64()), (Some(0), Some(20)));

    let dir = tempfile::tempdir().unwrap();
    let mix = dir.path().join("two.mix");
    std::fs::write(&mix, "1 /missing?status=404\n1 /fine\n").unwrap();
    let out = tern(&["--mix", mix.to_str().unwrap(), "-n", "20", "-c", "2", "-t", "1", &server.url("/")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    let first = summary.lines().next().unwrap();
    let authority = server.url("/").trim_end_matches('/').to_string();
    assert!(first.starts_with(&format!("tern bench --mix {} (2 entries) {authority}: ", mix.display())), "{first}");
    assert!(!summary.contains("FAILED"), "{summary}");
}
