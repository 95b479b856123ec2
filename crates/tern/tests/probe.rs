//! `tern probe` as a user runs it: each suite in --quick mode yields
//! positive, sane figures, and independent references measured in the same
//! test agree with them within a stated tolerance.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn tern_probe(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).arg("probe").args(args).output().expect("run tern");
    assert!(out.status.success(), "tern probe {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// The figures of `suite` in a report, by name.
fn figures<'a>(report: &'a Value, suite: &str) -> Vec<&'a Value> {
    let s = report["suites"].as_array().unwrap().iter().find(|s| s["suite"] == suite).expect("suite in the report");
    s["figures"].as_array().unwrap().iter().collect()
}

fn figure<'a>(report: &'a Value, suite: &str, name: &str) -> &'a Value {
    figures(report, suite).into_iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("no figure {name:?}"))
}

/// Every figure: positive value and corrected median, corrected ≤ raw,
/// quartiles ordered, the stated unit and direction.
fn assert_sane(report: &Value, suite: &str, min_figures: usize) {
    let figs = figures(report, suite);
    assert!(figs.len() >= min_figures, "{suite}: {} figures", figs.len());
    for f in figs {
        let name = f["name"].as_str().unwrap();
        let c = &f["corrected_ns"];
        let (q1, med, q3, min) = (
            c["q1"].as_f64().unwrap(),
            c["median"].as_f64().unwrap(),
            c["q3"].as_f64().unwrap(),
            c["min"].as_f64().unwrap(),
        );
        assert!(med > 0.0 && f["value"].as_f64().unwrap() > 0.0, "{suite}/{name}: {f}");
        assert!(min <= q1 && q1 <= med && med <= q3, "{suite}/{name}: {f}");
        assert!(med <= f["raw_ns"]["median"].as_f64().unwrap(), "{suite}/{name}: {f}");
        assert!(f["overhead_ns"].as_f64().unwrap() >= 0.0, "{suite}/{name}: {f}");
        let unit = f["unit"].as_str().unwrap();
        match f["better"].as_str().unwrap() {
            "lower" => assert!(["ns", "µs", "ms"].contains(&unit), "{suite}/{name}: {unit}"),
            "higher" => assert_eq!(unit, "MB/s", "{suite}/{name}"),
            other => panic!("{suite}/{name}: better {other}"),
        }
        assert!(f["samples"].as_u64().unwrap() >= 3 && f["iterations"].as_u64().unwrap() >= 1, "{suite}/{name}");
    }
}

/// Compiles one of the C references next to this test into `dir`.
fn compile(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probe_refs").join(format!("{name}.c"));
    let bin = dir.join(name);
    let out = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("gcc (scripts/test.sh installs it)");
    assert!(out.status.success(), "gcc {name}: {}", String::from_utf8_lossy(&out.stderr));
    bin
}

fn run_number(cmd: &mut Command) -> f64 {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn the_environment_and_the_stopwatch_are_reported() {
    let r = tern_probe(&["syscalls", "--quick", "--json", "--samples", "3"]);
    let e = &r["environment"];
    assert!(e["kernel"].as_str().unwrap().starts_with("Linux "), "{e}");
    assert!(e["cores_online"].as_u64().unwrap() >= 1 && e["memory_total_kib"].as_u64().unwrap() > 0, "{e}");
    for key in ["cpu_model", "governor", "mitigations", "cpu_quota", "virtualisation", "load_average"] {
        assert!(e.get(key).is_some(), "environment lacks {key}: {e}");
    }
    assert!(r["pinned_cpu"].is_u64(), "pinned by default: {}", r["pinned_cpu"]);
    let clock = r["overhead"]["clock_ns"].as_f64().unwrap();
    assert!(clock > 0.0 && clock < 10_000.0, "clock read {clock} ns");
    assert_eq!(r["samples"], 3);
    assert_sane(&r, "syscalls", 8);
    // The vDSO calls stay out of the kernel: cheaper than getppid.
    let vdso = figure(&r, "syscalls", "clock_gettime (vDSO)")["corrected_ns"]["min"].as_f64().unwrap();
    let getppid = figure(&r, "syscalls", "getppid")["corrected_ns"]["min"].as_f64().unwrap();
    assert!(vdso < getppid, "vDSO {vdso} ns vs getppid {getppid} ns");
}

#[test]
fn no_pin_floats_and_unknown_suites_are_named() {
    let r = tern_probe(&["syscalls", "--quick", "--json", "--no-pin", "--samples", "3"]);
    assert!(r["pinned_cpu"].is_null());
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(["probe", "sycalls"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown suite \"sycalls\"") && err.contains("syscalls"), "{err}");
}

/// getppid against a C loop compiled here: both best-of-several, on the same
/// CPU. Tolerance ±35%: the C loop keeps a fraction of a ns of loop per call
/// that tern subtracts, and a loaded 2-core machine moves minima by 10–20%.
#[test]
fn getppid_agrees_with_a_c_loop() {
    let dir = tempfile::tempdir().unwrap();
    let c_loop = compile(dir.path(), "getppid");
    let cpu = tern_probe(&["syscalls", "--quick", "--json", "--samples", "3"])["pinned_cpu"].as_u64().unwrap();
    let reference = run_number(Command::new("taskset").args(["-c", &cpu.to_string()]).arg(&c_loop));
    let r = tern_probe(&["syscalls", "--json", "--samples", "7", "--interval", "2ms", "--cpu", &cpu.to_string()]);
    let ours = figure(&r, "syscalls", "getppid")["corrected_ns"]["min"].as_f64().unwrap();
    let ratio = ours / reference;
    assert!((0.65..=1.35).contains(&ratio), "tern {ours:.1} ns vs C loop {reference:.1} ns (ratio {ratio:.2})");
}
