//! `tern tune` end to end: the whole battery, quick and with tiny samples,
//! writes a configuration that `tern serve` accepts unchanged, with a
//! comment above every chosen key naming a stored run that `tern lab show`
//! finds, and values that are among the candidates that run measured.

use std::path::Path;
use std::process::{Command, Output};

fn tern(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern")).args(args).output().unwrap()
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Each `section.key = value` line of `text` with the comment lines just
/// above it.
fn keys_with_comments(text: &str) -> Vec<(String, String, Vec<String>)> {
    let (mut section, mut comments, mut out) = (String::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(c) = line.strip_prefix('#') {
            comments.push(c.trim().to_string());
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            comments.clear();
        } else if let Some((key, _)) = line.split_once(" = ") {
            out.push((section.clone(), key.to_string(), std::mem::take(&mut comments)));
        } else {
            comments.clear();
        }
    }
    out
}

/// The run id a comment names ("run 12").
fn run_id(comments: &[String]) -> Option<String> {
    let all = comments.join(" ");
    let at = all.find("run ")?;
    let id: String = all[at + 4..].chars().take_while(char::is_ascii_digit).collect();
    (!id.is_empty()).then_some(id)
}

fn export(id: &str, store: &Path) -> serde_json::Value {
    let out = tern(&["lab", "export", id, "--store", store.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_str(&ok(&out, "lab export")).unwrap();
    doc["runs"][0].clone()
}

/// The values the run's candidates gave `section.key`, as TOML text.
fn candidate_values(run: &serde_json::Value, key: &str) -> Vec<String> {
    run["config"]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["settings"][key].as_str().map(String::from))
        .collect()
}

#[test]
fn quick_tune_writes_a_config_serve_accepts_with_evidence_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let (conf, store) = (dir.path().join("tuned.toml"), dir.path().join("lab.sqlite"));
    let out = tern(&[
        "tune",
        "--quick",
        "--sample",
        "40ms",
        "-o",
        conf.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    ok(&out, "tern tune --quick");
    let text = std::fs::read_to_string(&conf).unwrap();
    let check = tern(&["serve", "--check", "--listen", "127.0.0.1:0", "--config", conf.to_str().unwrap()]);
    assert_eq!(ok(&check, "serve --check").trim(), "configuration OK", "{text}");

    let parsed: toml::Table = toml::from_str(&text).unwrap();
    let keys = keys_with_comments(&text);
    let names: Vec<String> = keys.iter().map(|(s, k, _)| format!("{s}.{k}")).collect();
    for wanted in [
        "static.io",
        "static.io_methods",
        "static.read_chunk",
        "cgi.pipe_buffer",
        "server.model",
        "compression.gzip_level",
        "compression.br_level",
        "compression.zstd_level",
        "compression.adaptive",
    ] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} not written:\n{text}");
    }
    for (section, key, comments) in &keys {
        let id = run_id(comments).unwrap_or_else(|| panic!("{section}.{key}: no run id in {comments:?}\n{text}"));
        let show = tern(&["lab", "show", &id, "--store", store.to_str().unwrap()]);
        let shown = ok(&show, "lab show");
        assert!(shown.starts_with(&format!("run {id}: tune (complete)")), "{shown}");
        let run = export(&id, &store);
        let value = &parsed[section.as_str()][key.as_str()];
        match (section.as_str(), key.as_str()) {
            ("static", "io") => assert_eq!(value.as_str(), Some("auto"), "{text}"),
            ("static", "io_methods") => {
                let measured = candidate_values(&run, "static.io");
                let methods = value.as_array().unwrap();
                assert_eq!(methods.len(), 3, "one per default size class: {text}");
                for m in methods {
                    assert!(measured.contains(&m.to_string()), "{m} not among {measured:?}");
                }
                assert_eq!(run["measurements"].as_array().unwrap().len(), 9, "3 methods x 3 classes");
            }
            _ => {
                let measured = candidate_values(&run, &format!("{section}.{key}"));
                assert!(measured.contains(&value.to_string()), "{section}.{key} = {value} not among {measured:?}");
            }
        }
        // Every candidate was measured: a positive median each.
        for m in run["measurements"].as_array().unwrap() {
            assert!(m["value"].as_f64().unwrap() > 0.0, "{section}.{key}: {m}");
        }
    }
}

#[test]
fn only_the_batteries_asked_for_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let base = dir.path().join("base.toml");
    std::fs::write(&base, "[server]\nroot = \"site\"\nbacklog = 77\n[static]\nread_chunk = \"32KiB\"\n").unwrap();
    std::fs::create_dir(dir.path().join("site")).unwrap();
    let out = tern(&[
        "tune",
        "--quick",
        "--only",
        "chunk",
        "--sample",
        "40ms",
        "--config",
        base.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    let text = ok(&out, "tern tune --only chunk");
    let written = keys_with_comments(&text);
    let mut keys: Vec<String> = written.iter().map(|(s, k, _)| format!("{s}.{k}")).collect();
    keys.sort();
    // The base's settings stay (its root made absolute), one key is tuned.
    assert_eq!(keys, ["server.backlog", "server.root", "static.read_chunk"], "{text}");
    assert!(written.iter().filter(|(s, _, _)| s == "server").all(|(_, _, c)| c.is_empty()), "{text}");
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(
        parsed["server"]["root"].as_str(),
        Some(dir.path().canonicalize().unwrap().join("site").to_str().unwrap())
    );
    let chunk = written.iter().find(|(_, k, _)| k == "read_chunk").unwrap();
    let run = export(&run_id(&chunk.2).unwrap(), &store);
    // The base's value is the default the others are compared with.
    let measured = candidate_values(&run, "static.read_chunk");
    assert_eq!(measured, ["\"16KiB\"", "\"32KiB\"", "\"64KiB\"", "\"256KiB\""], "{text}");
    assert!(text.contains("32KiB (default) ="), "{text}");
}
