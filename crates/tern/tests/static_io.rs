//! `static.io = "auto"`: a profile forces the method per size class (seen
//! in the per-method body counters of /metrics and in /_tern/status), the
//! methods configured per class (`static.io_methods`) are used, a class
//! they leave `"auto"` is calibrated, the start-up calibration finishes and
//! is reported, `tern tune --io` writes a
//! profile the server accepts, and bodies are byte-exact on both sides of
//! every class boundary.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{get, pattern, tern_bin, Tern};
use tern_server::calibrate::LEAD_TO_SWITCH;

/// Files of `sizes` bytes named `f<size>.bin`, each with its own content.
fn root_with(sizes: &[usize]) -> (tempfile::TempDir, Vec<(String, Vec<u8>)>) {
    let dir = tempfile::tempdir().unwrap();
    let files = sizes
        .iter()
        .map(|&n| {
            let body = pattern(n, n as u64 + 7);
            let name = format!("f{n}.bin");
            std::fs::write(dir.path().join(&name), &body).unwrap();
            (name, body)
        })
        .collect();
    (dir, files)
}

/// The `io` part of the status once the start-up calibration has ended.
fn calibrated(tern: &Tern) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = tern.status();
        if s["io"]["source"] != "calibrating" {
            return s["io"].clone();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "still calibrating: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bodies_by(tern: &Tern, method: &str) -> u64 {
    let m = String::from_utf8(get(tern.addr, "/metrics", "").body).unwrap();
    let key = format!("tern_file_bodies_total{{method=\"{method}\"}} ");
    let line = m.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("no {key} in\n{m}"));
    line[key.len()..].parse().unwrap()
}

fn fetch_all(tern: &Tern, files: &[(String, Vec<u8>)]) {
    for (name, body) in files {
        let r = get(tern.addr, &format!("/{name}"), "");
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.header("content-length"), Some(body.len().to_string().as_str()), "{name}");
        assert!(r.body == *body, "{name}: body differs ({} bytes received)", r.body.len());
    }
}

fn write_profile(dir: &Path, classes: &str, methods: &str) -> std::path::PathBuf {
    let path = dir.join("io-profile.toml");
    std::fs::write(&path, format!("# test profile\nclasses = {classes}\nmethods = {methods}\n")).unwrap();
    path
}

#[test]
fn a_profile_forces_the_method_of_each_size_class() {
    let (root, files) = root_with(&[1000, 2048, 2049, 65536, 65537, 300_000]);
    let conf = tempfile::tempdir().unwrap();
    let profile = write_profile(conf.path(), "[\"2KiB\", \"64KiB\"]", "[\"read\", \"sendfile\", \"mmap\"]");
    let config =
        format!("[static]\nio_classes = [\"2KiB\", 65536]\nio_profile = {:?}\n", profile.display().to_string());
    let tern = Tern::start(root.path(), "auto", &config, &[]);
    fetch_all(&tern, &files);
    // Two files per class, each sent once by its class's method.
    assert_eq!(
        (bodies_by(&tern, "read"), bodies_by(&tern, "sendfile"), bodies_by(&tern, "mmap")),
        (2, 2, 2),
        "bodies per method"
    );
    let s = tern.status();
    let io = &s["io"];
    assert_eq!((io["mode"].as_str(), io["source"].as_str()), (Some("auto"), Some("profile")), "{io}");
    assert_eq!(io["detail"].as_str(), Some(profile.display().to_string().as_str()));
    let methods: Vec<&str> = io["classes"].as_array().unwrap().iter().map(|c| c["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["read", "sendfile", "mmap"]);
    let names: Vec<&str> = io["classes"].as_array().unwrap().iter().map(|c| c["class"].as_str().unwrap()).collect();
    assert_eq!(names, ["<=2KiB", "<=64KiB", ">64KiB"]);
    // A range inside the mmap class and one inside the read class.
    for (name, body) in [&files[5], &files[0]] {
        let r = get(tern.addr, &format!("/{name}"), "Range: bytes=100-899\r\n");
        assert_eq!(r.status, 206, "{name}");
        assert!(r.body == body[100..900], "{name}: range body differs");
    }
}

#[test]
fn configured_io_methods_choose_the_method_of_each_size_class() {
    let (root, files) = root_with(&[1000, 2048, 2049, 65536, 65537, 300_000]);
    let config = "[static]\nio_classes = [\"2KiB\", 65536]\nio_methods = [\"sendfile\", \"read\", \"mmap\"]\n";
    let tern = Tern::start(root.path(), "auto", config, &[]);
    fetch_all(&tern, &files);
    assert_eq!(
        (bodies_by(&tern, "read"), bodies_by(&tern, "sendfile"), bodies_by(&tern, "mmap")),
        (2, 2, 2),
        "bodies per method"
    );
    let io = tern.status()["io"].clone();
    assert_eq!((io["mode"].as_str(), io["source"].as_str()), (Some("auto"), Some("configured")), "{io}");
    let classes = io["classes"].as_array().unwrap();
    let methods: Vec<&str> = classes.iter().map(|c| c["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["sendfile", "read", "mmap"]);
    assert!(classes.iter().all(|c| c["basis"] == "configured"), "{io}");
}

#[test]
fn an_auto_entry_in_io_methods_leaves_its_class_to_the_calibration() {
    let (root, files) = root_with(&[2048, 2049, 300_000, 1_048_577]);
    let config = "[static]\nio_classes = [\"2KiB\", \"1MiB\"]\nio_methods = [\"read\", \"auto\", \"sendfile\"]\n";
    let tern = Tern::start(root.path(), "auto", config, &[]);
    let io = calibrated(&tern);
    assert_eq!(io["source"], "calibrated", "{io}");
    let classes = io["classes"].as_array().unwrap();
    let bases: Vec<&str> = classes.iter().map(|c| c["basis"].as_str().unwrap()).collect();
    assert_eq!(bases, ["configured", "measured", "configured"], "{io}");
    assert_eq!((classes[0]["method"].as_str(), classes[2]["method"].as_str()), (Some("read"), Some("sendfile")));
    assert!(classes[1]["responses_per_s"].as_object().unwrap().values().all(|v| v.as_f64().unwrap() > 0.0), "{io}");
    assert!(classes[0]["responses_per_s"].is_null() && classes[2]["responses_per_s"].is_null(), "{io}");
    let measured = classes[1]["method"].as_str().unwrap();
    fetch_all(&tern, &files);
    let mut want = [("read", 1), ("sendfile", 1), ("mmap", 0)];
    for (m, n) in &mut want {
        if *m == measured {
            *n += 2;
        }
    }
    for (m, n) in want {
        assert_eq!(bodies_by(&tern, m), n, "bodies sent by {m} (the middle class measured {measured}): {io}");
    }
}

#[test]
fn the_start_up_calibration_finishes_and_is_reported() {
    let (root, files) = root_with(&[16384, 16385, 262_144, 262_145]);
    let tern = Tern::start(root.path(), "auto", "", &[]);
    // Served at once (the safe choices), byte-exact across the boundaries.
    fetch_all(&tern, &files);
    let io = calibrated(&tern);
    assert_eq!(io["source"], "calibrated", "{io}");
    let ms: u64 = io["detail"].as_str().unwrap().trim_end_matches(" ms").parse().unwrap();
    assert!(ms < 5000, "calibration took {ms} ms");
    let classes = io["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 3);
    assert_eq!((classes[0]["method"].as_str(), classes[0]["basis"].as_str()), (Some("mmap"), Some("rule")));
    for c in &classes[1..] {
        assert_eq!(c["basis"], "measured", "{c}");
        let rates = c["responses_per_s"].as_object().unwrap();
        let best = rates.iter().max_by(|a, b| a.1.as_f64().unwrap().total_cmp(&b.1.as_f64().unwrap())).unwrap();
        assert!(rates.values().all(|v| v.as_f64().unwrap() > 0.0), "{c}");
        // The fastest wins, unless sendfile (the safe choice) is within
        // the margin a method must lead by to replace it.
        let sendfile = rates["sendfile"].as_f64().unwrap();
        let want = if best.1.as_f64().unwrap() > sendfile * LEAD_TO_SWITCH { best.0.as_str() } else { "sendfile" };
        assert_eq!(c["method"].as_str(), Some(want), "{c}");
    }
    fetch_all(&tern, &files);
    let total: u64 = ["sendfile", "mmap", "read"].iter().map(|m| bodies_by(&tern, m)).sum();
    assert_eq!(total, 8);
    // The decision is on stderr too, with its evidence.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tern.stderr.lock().unwrap().contains("static.io auto: calibrated") {
        assert!(Instant::now() < deadline, "no decision on stderr: {}", tern.stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tern.stderr.lock().unwrap().contains("<=16KiB mmap [rule]"), "{}", tern.stderr.lock().unwrap());
}

#[test]
fn tune_writes_a_profile_that_serve_uses() {
    let conf = tempfile::tempdir().unwrap();
    let profile = conf.path().join("io.toml");
    let out =
        Command::new(tern_bin()).args(["tune", "--io", "--duration", "200ms", "-o"]).arg(&profile).output().unwrap();
    assert!(out.status.success(), "tern tune: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&profile).unwrap();
    let parsed: toml::Value = toml::from_str(&text).expect("the profile is TOML");
    let written: Vec<&str> = parsed["methods"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert_eq!(written.len(), 3, "{text}");
    assert_eq!(written[0], "mmap", "{text}");
    let (root, files) = root_with(&[100, 20000, 400_000]);
    let config = format!("[static]\nio_profile = {:?}\n", profile.display().to_string());
    let tern = Tern::start(root.path(), "auto", &config, &[]);
    let io = tern.status()["io"].clone();
    assert_eq!(io["source"], "profile", "{io}");
    let used: Vec<&str> = io["classes"].as_array().unwrap().iter().map(|c| c["method"].as_str().unwrap()).collect();
    assert_eq!(used, written);
    fetch_all(&tern, &files);
    for (i, m) in written.iter().enumerate() {
        let expect = written.iter().filter(|w| *w == m).count() as u64;
        assert_eq!(bodies_by(&tern, m), expect, "class {i} sent by {m}");
    }
}

#[test]
fn a_profile_for_other_classes_or_a_missing_one_is_refused() {
    let (root, _) = root_with(&[10]);
    let conf = tempfile::tempdir().unwrap();
    let profile = write_profile(conf.path(), "[\"4KiB\"]", "[\"mmap\", \"sendfile\"]");
    for (path, why) in [(profile, "run `tern tune --io` again"), (conf.path().join("none.toml"), "No such file")] {
        let cfg = conf.path().join("tern.toml");
        std::fs::write(&cfg, format!("[static]\nio_profile = {:?}\n", path.display().to_string())).unwrap();
        let out = Command::new(tern_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .arg(root.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("static.io_profile") && err.contains(why), "{err}");
    }
}
