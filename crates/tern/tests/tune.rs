//! `tern tune` end to end: the whole battery, quick and with tiny samples,
//! writes a configuration that `tern serve` accepts unchanged, with the
//! evidence of every decision naming a stored run that `tern lab show`
//! finds; and every decision follows the rule, recomputed here from the
//! run's raw rounds: a setting is written only when its candidate was
//! ahead of the default past the noise on every workload of its decision,
//! and is then that candidate's value; otherwise it is not written (the
//! default stays) and its evidence names the default's value.

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

/// A key as the file has it: set (`key = value`) or kept (`# key = value`,
/// the default that stays), with the comment lines just above it.
#[derive(Debug)]
struct Key {
    section: String,
    key: String,
    value: String,
    kept: bool,
    comments: Vec<String>,
}

/// Whether `line` (a comment's text) is a kept key: `name = value`.
fn kept_key(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(" = ")?;
    key.chars().all(|c| c.is_ascii_lowercase() || c == '_').then_some((key, value))
}

fn keys(text: &str) -> Vec<Key> {
    let (mut section, mut comments, mut out) = (String::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(c) = line.strip_prefix('#') {
            let c = c.trim();
            match kept_key(c) {
                Some((key, value)) => out.push(Key {
                    section: section.clone(),
                    key: key.into(),
                    value: value.into(),
                    kept: true,
                    comments: std::mem::take(&mut comments),
                }),
                None => comments.push(c.to_string()),
            }
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            comments.clear();
        } else if let Some((key, value)) = line.split_once(" = ") {
            out.push(Key {
                section: section.clone(),
                key: key.into(),
                value: value.into(),
                kept: false,
                comments: std::mem::take(&mut comments),
            });
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

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The rule: `c`'s median beats `d`'s by more than the larger half-spread
/// of their rounds, at least 3%.
fn ahead(c: &[f64], d: &[f64]) -> bool {
    let spread = |s: &[f64]| {
        let m = median(s);
        let (lo, hi) = s.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if m > 0.0 {
            (hi - lo) / 2.0 / m
        } else {
            0.0
        }
    };
    let noise = 0.03f64.max(spread(c)).max(spread(d));
    median(c) > 0.0 && median(c) > median(d) * (1.0 + noise)
}

/// One decision of a stored run: its default and chosen candidates, and
/// the candidates the rule allows (ahead on every one of its workloads).
struct Decided {
    default: usize,
    chosen: usize,
    allowed: Vec<usize>,
}

fn decisions(run: &serde_json::Value) -> Vec<(String, Decided)> {
    let names: Vec<&str> =
        run["config"]["candidates"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    let index = |v: &serde_json::Value| names.iter().position(|n| *n == v.as_str().unwrap()).unwrap();
    let workloads = run["config"]["workloads"].as_array().unwrap();
    let samples = |c: usize, w: usize| -> Vec<f64> {
        run["result"]["samples"][c][w].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
    };
    run["config"]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|dec| {
            let name = dec["name"].as_str().unwrap().to_string();
            let (default, chosen) = (index(&dec["default"]), index(&dec["chosen"]));
            let ws: Vec<usize> = (0..workloads.len()).filter(|&w| workloads[w]["decision"] == dec["name"]).collect();
            assert!(!ws.is_empty(), "decision {name:?} has no workload");
            // The first workload of a decision measures every candidate.
            for (c, name) in names.iter().enumerate() {
                assert!(!samples(c, ws[0]).is_empty(), "{name} not measured on {}", workloads[ws[0]]["name"]);
            }
            let allowed = (0..names.len())
                .filter(|&c| c != default && ws.iter().all(|&w| ahead(&samples(c, w), &samples(default, w))))
                .collect();
            (name, Decided { default, chosen, allowed })
        })
        .collect()
}

/// What candidate `c` of `run` sets `key` to (TOML text).
fn value_of(run: &serde_json::Value, c: usize, key: &str) -> Option<String> {
    run["config"]["candidates"][c]["settings"][key].as_str().map(String::from)
}

#[test]
fn quick_tune_writes_only_what_won_everywhere_with_evidence() {
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
    let found = keys(&text);
    let key = |section: &str, key: &str| {
        found
            .iter()
            .find(|k| k.section == section && k.key == key)
            .unwrap_or_else(|| panic!("{section}.{key}: neither written nor its evidence:\n{text}"))
    };
    // Every battery's decisions, each run checked once.
    let batteries: [(&str, &[&str]); 6] = [
        ("io", &["static.io"]),
        ("chunk", &["static.read_chunk"]),
        ("cgi", &["cgi.pipe_buffer"]),
        ("model", &["server.model"]),
        ("levels", &["compression.gzip_level", "compression.br_level", "compression.zstd_level"]),
        ("adaptive", &["compression.adaptive"]),
    ];
    for (battery, first_keys) in batteries {
        let (section, name) = first_keys[0].split_once('.').unwrap();
        let k = key(section, name);
        let id = run_id(&k.comments).unwrap_or_else(|| panic!("{section}.{name}: no run id in {k:?}\n{text}"));
        let shown = ok(&tern(&["lab", "show", &id, "--store", store.to_str().unwrap()]), "lab show");
        assert!(shown.starts_with(&format!("run {id}: tune (complete)")), "{shown}");
        let run = export(&id, &store);
        assert_eq!(run["config"]["battery"], battery);
        for m in run["measurements"].as_array().unwrap() {
            assert!(m["value"].as_f64().unwrap() > 0.0, "{battery}: {m}");
        }
        let decided = decisions(&run);
        for (dname, d) in &decided {
            if d.allowed.is_empty() {
                assert_eq!(d.chosen, d.default, "{battery} {dname}: chosen with no lead on every workload");
            } else {
                assert!(d.allowed.contains(&d.chosen), "{battery} {dname}: chose one the rule does not allow");
            }
        }
        match battery {
            "io" => {
                let changed: Vec<&(String, Decided)> = decided.iter().filter(|(_, d)| d.chosen != d.default).collect();
                let io = key("static", "io");
                if changed.is_empty() {
                    // The default stays: "auto", its calibration, no method pinned.
                    assert!(io.kept && io.value == "\"auto\"", "{io:?}");
                    assert!(parsed
                        .get("static")
                        .is_none_or(|s| s.get("io").is_none() && s.get("io_methods").is_none()));
                    assert!(io.comments.iter().any(|c| c.contains("The default's server decided: static.io auto")));
                } else {
                    let written = parsed["static"]["io_methods"].as_array().unwrap();
                    assert_eq!(written.len(), decided.len(), "{text}");
                    for ((_, d), m) in decided.iter().zip(written) {
                        let want = value_of(&run, d.chosen, "static.io").unwrap_or_else(|| "\"auto\"".into());
                        assert_eq!(m.to_string(), want, "{text}");
                    }
                }
            }
            "levels" => {
                for (dname, d) in &decided {
                    let k = key("compression", &format!("{dname}_level"));
                    let want = value_of(&run, d.chosen, &format!("compression.{dname}_level")).unwrap();
                    assert_eq!((&k.value, k.kept), (&want, d.chosen == d.default), "{dname}: {text}");
                }
            }
            _ => {
                let d = &decided[0].1;
                assert_eq!(decided.len(), 1);
                let k = key(section, name);
                let want = value_of(&run, d.chosen, first_keys[0]).unwrap();
                assert_eq!((&k.value, k.kept), (&want, d.chosen == d.default), "{battery}: {text}");
            }
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
    let written = keys(&text);
    let mut names: Vec<String> = written.iter().map(|k| format!("{}.{}", k.section, k.key)).collect();
    names.sort();
    // The base's settings stay (its root made absolute), one key is decided:
    // set, or the base's line kept under its evidence.
    assert_eq!(names, ["server.backlog", "server.root", "static.read_chunk"], "{text}");
    assert!(written.iter().all(|k| !k.kept), "{text}");
    assert!(written.iter().filter(|k| k.section == "server").all(|k| k.comments.is_empty()), "{text}");
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(
        parsed["server"]["root"].as_str(),
        Some(dir.path().canonicalize().unwrap().join("site").to_str().unwrap())
    );
    let chunk = written.iter().find(|k| k.key == "read_chunk").unwrap();
    let run = export(&run_id(&chunk.comments).unwrap(), &store);
    // The base's value is the default the others are compared with.
    let measured: Vec<String> = (0..4).filter_map(|c| value_of(&run, c, "static.read_chunk")).collect();
    assert_eq!(measured, ["\"16KiB\"", "\"32KiB\"", "\"64KiB\"", "\"256KiB\""], "{text}");
    assert!(text.contains("32KiB (default) ="), "{text}");
    let (_, d) = &decisions(&run)[0];
    assert_eq!(d.default, 1);
    assert_eq!(chunk.value, value_of(&run, d.chosen, "static.read_chunk").unwrap(), "{text}");
}
