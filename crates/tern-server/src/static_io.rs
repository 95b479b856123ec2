//! Which I/O method sends a static file's body. `static.io` may fix one;
//! `"auto"` (the default) chooses per file-size class, because the best
//! method differs from one size and one host to the next: from
//! `static.io_methods` (as `tern tune` writes them) or a profile written by
//! `tern tune --io` when `static.io_profile` names one, else from a
//! calibration over loopback (`calibrate.rs`) that runs in the
//! background at start-up (for the classes `static.io_methods` leaves to
//! it with `"auto"`, or all). Until it ends, the safe choices serve.
//!
//! Classes up to [`SMALL`] are never measured: their head and body leave in
//! one `sendmsg` from the mapping, the fewest system calls per request.
//!
//! The per-request lookup is a binary search over a few bounds and one
//! relaxed atomic load; the report behind a mutex is read by the status
//! page and the start-up log only.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

use serde::Deserialize;

use crate::config::{Bytes, IoChoice, IoMethod, Model, StaticFiles};
use crate::open_files::OpenFile;

/// The methods, in the order of their counters and evidence.
pub const METHODS: [IoMethod; 4] = [IoMethod::Sendfile, IoMethod::Mmap, IoMethod::Read, IoMethod::Uring];

const _: () = assert!(METHODS.len() == crate::metrics::FILE_METHODS);

/// The methods a server of `model` sends with: `uring` reads through the
/// `uring` engine's ring, which the others have not.
pub fn methods(model: Model) -> &'static [IoMethod] {
    if model == Model::Uring {
        &METHODS
    } else {
        &METHODS[..3]
    }
}

/// Classes whose largest file is at most this go by `mmap` without being
/// measured.
pub const SMALL: u64 = 64 * 1024;

/// Position of `m` in [`METHODS`].
pub fn index(m: IoMethod) -> usize {
    match m {
        IoMethod::Sendfile => 0,
        IoMethod::Mmap => 1,
        IoMethod::Read => 2,
        IoMethod::Uring => 3,
    }
}

/// One class's choice and why.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassChoice {
    pub method: IoMethod,
    /// `"rule"`, `"measured"`, `"profile"`, `"configured"`, `"safe default"`
    /// or `"fixed"`.
    pub basis: &'static str,
    /// Responses per second over loopback per method ([`METHODS`] order;
    /// 0 for one not measured), when measured.
    pub rates: Option<[f64; METHODS.len()]>,
}

/// Where the current choices come from.
#[derive(Clone, Debug)]
pub struct Report {
    /// `"fixed"`, `"configured"` (`static.io_methods`), `"profile"`,
    /// `"calibrating"`, `"calibrated"` or `"calibration failed"`.
    pub source: &'static str,
    /// The profile's path, a failure's reason, or the calibration's time.
    pub detail: String,
    pub classes: Vec<ClassChoice>,
}

pub struct StaticIo {
    mode: IoChoice,
    /// The methods the engine can send with ([`methods`]).
    available: &'static [IoMethod],
    /// Upper bounds (inclusive) of every class but the last.
    bounds: Box<[u64]>,
    /// Each class's method, as its index in [`METHODS`].
    methods: Box<[AtomicU8]>,
    report: Mutex<Report>,
}

impl StaticIo {
    /// The choices the configuration allows before any measurement: the
    /// fixed method, the configured ones, a profile's (read now), or the
    /// safe ones.
    pub fn new(st: &StaticFiles, model: Model) -> Result<StaticIo, String> {
        let available = methods(model);
        let bounds: Vec<u64> = st.io_classes.iter().map(|b| b.0).collect();
        let (source, detail, classes) = match (st.io, &st.io_profile) {
            (IoChoice::Fixed(m), _) => {
                ("fixed", String::new(), vec![ClassChoice { method: m, basis: "fixed", rates: None }; bounds.len() + 1])
            }
            (IoChoice::Auto, _) if !st.io_methods.is_empty() => {
                let classes: Vec<ClassChoice> = st
                    .io_methods
                    .iter()
                    .zip(safe_choices(&bounds))
                    .map(|(choice, safe)| match *choice {
                        IoChoice::Fixed(method) => ClassChoice { method, basis: "configured", rates: None },
                        IoChoice::Auto => safe,
                    })
                    .collect();
                let source = if classes.iter().any(to_measure) { "calibrating" } else { "configured" };
                (source, String::new(), classes)
            }
            (IoChoice::Auto, Some(path)) => {
                ("profile", path.display().to_string(), Profile::load(path, &bounds, available)?)
            }
            (IoChoice::Auto, None) => ("calibrating", String::new(), safe_choices(&bounds)),
        };
        let methods = classes.iter().map(|c| AtomicU8::new(index(c.method) as u8)).collect();
        Ok(StaticIo {
            mode: st.io,
            available,
            bounds: bounds.into(),
            methods,
            report: Mutex::new(Report { source, detail, classes }),
        })
    }

    /// Whether files should be mapped when opened (some class may use
    /// `mmap`, now or after calibration).
    pub fn maps(&self) -> bool {
        matches!(self.mode, IoChoice::Auto | IoChoice::Fixed(IoMethod::Mmap))
    }

    /// Whether a calibration is still to run.
    pub fn needs_calibration(&self) -> bool {
        self.report.lock().map(|r| r.source == "calibrating").unwrap_or(false)
    }

    pub fn bounds(&self) -> &[u64] {
        &self.bounds
    }

    /// The methods a calibration measures.
    pub fn methods(&self) -> &'static [IoMethod] {
        self.available
    }

    /// The current choice per class (what a calibration starts from).
    pub fn choices(&self) -> Vec<ClassChoice> {
        self.report().classes
    }

    /// The method for `file`'s body: its size class's (a file without a
    /// mapping goes by `sendfile` instead of `mmap`).
    pub fn method_for(&self, file: &OpenFile) -> IoMethod {
        let class = self.bounds.partition_point(|&b| b < file.size);
        match METHODS[usize::from(self.methods[class].load(Relaxed))] {
            IoMethod::Mmap if file.mapping.is_none() => IoMethod::Sendfile,
            m => m,
        }
    }

    /// Installs a calibration's outcome (or why it failed).
    pub fn calibrated(&self, outcome: Result<Vec<ClassChoice>, String>, took_ms: u128) {
        let Ok(mut report) = self.report.lock() else { return };
        match outcome {
            Ok(classes) => {
                for (slot, c) in self.methods.iter().zip(&classes) {
                    slot.store(index(c.method) as u8, Relaxed);
                }
                *report = Report { source: "calibrated", detail: format!("{took_ms} ms"), classes };
            }
            Err(why) => {
                report.source = "calibration failed";
                report.detail = format!("{why}; the safe choices stay");
            }
        }
    }

    pub fn report(&self) -> Report {
        self.report.lock().map(|r| r.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// One line for the log: the decision and its evidence.
    pub fn describe(&self) -> String {
        let r = self.report();
        let mut s = format!("static.io {}: {}", self.mode.name(), r.source);
        if !r.detail.is_empty() {
            let _ = write!(s, " ({})", r.detail);
        }
        for (i, c) in r.classes.iter().enumerate() {
            let _ = write!(s, "; {} {} [{}", class_name(&self.bounds, i), c.method.name(), c.basis);
            if let Some(rates) = c.rates {
                for (m, rate) in self.available.iter().zip(rates) {
                    let _ = write!(s, " {} {:.0}/s", m.name(), rate);
                }
            }
            s.push(']');
        }
        s
    }

    /// The status page's `io` object.
    pub fn json(&self) -> serde_json::Value {
        let r = self.report();
        let classes: Vec<serde_json::Value> = r
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let rates = c.rates.map(|rates| {
                    self.available
                        .iter()
                        .zip(rates)
                        .map(|(m, v)| (m.name().to_string(), serde_json::json!(v.round())))
                        .collect::<serde_json::Map<_, _>>()
                });
                serde_json::json!({
                    "class": class_name(&self.bounds, i),
                    "up_to": self.bounds.get(i),
                    "method": c.method.name(),
                    "basis": c.basis,
                    "responses_per_s": rates,
                })
            })
            .collect();
        serde_json::json!({ "mode": self.mode.name(), "source": r.source, "detail": r.detail, "classes": classes })
    }
}

/// Whether the start-up calibration measures this class: one left to it
/// (not small, not configured).
pub fn to_measure(c: &ClassChoice) -> bool {
    c.basis == SAFE_DEFAULT
}

/// The basis of a class the calibration has yet to measure.
const SAFE_DEFAULT: &str = "safe default";

/// Before any measurement: `mmap` for small classes (fewest system
/// calls), `sendfile` above.
pub fn safe_choices(bounds: &[u64]) -> Vec<ClassChoice> {
    (0..=bounds.len())
        .map(|i| match bounds.get(i) {
            Some(&b) if b <= SMALL => ClassChoice { method: IoMethod::Mmap, basis: "rule", rates: None },
            _ => ClassChoice { method: IoMethod::Sendfile, basis: SAFE_DEFAULT, rates: None },
        })
        .collect()
}

/// `≤16KiB`, `≤256KiB`, `>256KiB`.
pub fn class_name(bounds: &[u64], i: usize) -> String {
    match (bounds.get(i), i.checked_sub(1).and_then(|p| bounds.get(p))) {
        (Some(&b), _) => format!("<={}", size_name(b)),
        (None, Some(&lo)) => format!(">{}", size_name(lo)),
        (None, None) => "all".into(),
    }
}

fn size_name(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => n.to_string(),
    }
}

/// The file `tern tune --io` writes and `static.io_profile` reads.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    classes: Vec<Bytes>,
    methods: Vec<IoMethod>,
    #[serde(default)]
    evidence: Vec<Evidence>,
}

/// Responses per second per method (its `class` key is for the reader;
/// `uring` only in a profile measured under that model).
#[derive(Deserialize)]
struct Evidence {
    sendfile: f64,
    mmap: f64,
    read: f64,
    #[serde(default)]
    uring: f64,
}

impl Profile {
    /// Reads a profile measured for exactly these class bounds.
    fn load(path: &Path, bounds: &[u64], available: &[IoMethod]) -> Result<Vec<ClassChoice>, String> {
        let at = || format!("static.io_profile: {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", at()))?;
        let p: Profile = toml::from_str(&text).map_err(|e| format!("{}: {e}", at()))?;
        let theirs: Vec<u64> = p.classes.iter().map(|b| b.0).collect();
        if theirs != bounds {
            return Err(format!(
                "{}: measured for classes {theirs:?}, but static.io_classes is {bounds:?}; run `tern tune --io` again",
                at()
            ));
        }
        if p.methods.len() != bounds.len() + 1 {
            return Err(format!("{}: `methods` needs {} entries, one per class", at(), bounds.len() + 1));
        }
        if let Some(m) = p.methods.iter().find(|m| !available.contains(m)) {
            return Err(format!("{}: method \"{}\" needs server.model = \"uring\"", at(), m.name()));
        }
        Ok(p.methods
            .iter()
            .enumerate()
            .map(|(i, &method)| ClassChoice {
                method,
                basis: "profile",
                rates: p.evidence.get(i).map(|e| [e.sendfile, e.mmap, e.read, e.uring]),
            })
            .collect())
    }
}

/// The profile text for `choices` (commented TOML, evidence included).
pub fn profile_text(bounds: &[u64], choices: &[ClassChoice], header: &str) -> String {
    let mut s = String::new();
    for line in header.lines() {
        let _ = writeln!(s, "# {line}");
    }
    let list = |items: Vec<String>| items.join(", ");
    let _ = writeln!(s, "\n# Upper bounds (inclusive) of the size classes; must equal static.io_classes.");
    let _ = writeln!(s, "classes = [{}]", list(bounds.iter().map(|b| format!("\"{}\"", size_name(*b))).collect()));
    let _ = writeln!(s, "# The method per class, smallest first.");
    let _ = writeln!(s, "methods = [{}]", list(choices.iter().map(|c| format!("\"{}\"", c.method.name())).collect()));
    for (i, c) in choices.iter().enumerate() {
        let rates = c.rates.unwrap_or_default();
        let _ = write!(
            s,
            "\n# {}: {} ({}); responses per second over loopback, 0 = not measured\n[[evidence]]\nclass = \"{}\"\n",
            class_name(bounds, i),
            c.method.name(),
            c.basis,
            class_name(bounds, i),
        );
        // `uring` is measured under its model only.
        for (m, rate) in METHODS.iter().zip(rates).filter(|&(&m, rate)| m != IoMethod::Uring || rate > 0.0) {
            let _ = writeln!(s, "{} = {rate:.0}", m.name());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uring_is_a_method_of_the_uring_model_only_and_profiles_keep_its_evidence() {
        assert_eq!(methods(Model::Event), &METHODS[..3]);
        assert!(methods(Model::Uring).contains(&IoMethod::Uring));
        let bounds = [16 << 10];
        let mut choices = safe_choices(&bounds);
        choices[1] = ClassChoice { method: IoMethod::Uring, basis: "measured", rates: Some([1.0, 2.0, 3.0, 4.0]) };
        let text = profile_text(&bounds, &choices, "test");
        assert!(text.contains("\nuring = 4\n"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("io.toml");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(Profile::load(&path, &bounds, methods(Model::Uring)).unwrap()[1].rates, choices[1].rates);
        let e = Profile::load(&path, &bounds, methods(Model::Event)).unwrap_err();
        assert!(e.contains("\"uring\" needs server.model = \"uring\""), "{e}");
        // Measured without it (another model): no line for it, as before.
        choices[1] = ClassChoice { method: IoMethod::Mmap, basis: "measured", rates: Some([1.0, 2.0, 3.0, 0.0]) };
        let text = profile_text(&bounds, &choices, "test");
        assert!(!text.contains("uring"), "{text}");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(Profile::load(&path, &bounds, methods(Model::Event)).unwrap()[1].rates, choices[1].rates);
    }
}
