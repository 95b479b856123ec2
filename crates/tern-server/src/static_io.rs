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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::open_files::OpenFile;
use crate::values::{first_broken, Bytes, Seconds};

/// How static file bodies are sent (SPEC 2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMethod {
    /// `sendfile(2)`: zero-copy from the page cache.
    Sendfile,
    /// `mmap(2)` once per open file, write from the mapping.
    Mmap,
    /// `pread(2)` into a buffer of `read_chunk` bytes, `write(2)` it.
    Read,
    /// Read through the engine's ring, 256 KiB at a time, into a buffer
    /// that a send through the ring takes: a page-cache miss waits in the
    /// kernel, never in the worker. `server.model = "uring"` only.
    Uring,
}

impl IoMethod {
    pub fn name(self) -> &'static str {
        match self {
            IoMethod::Sendfile => "sendfile",
            IoMethod::Mmap => "mmap",
            IoMethod::Read => "read",
            IoMethod::Uring => "uring",
        }
    }
}

impl std::str::FromStr for IoMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sendfile" => Ok(IoMethod::Sendfile),
            "mmap" => Ok(IoMethod::Mmap),
            "read" => Ok(IoMethod::Read),
            "uring" => Ok(IoMethod::Uring),
            _ => Err(format!("unknown I/O method `{s}` (expected sendfile, mmap, read or uring)")),
        }
    }
}

/// `static.io`: one method for every file — `"sendfile"` (zero-copy from
/// the page cache), `"mmap"` (the file mapped once, written from the
/// mapping), `"read"` (`pread` into a buffer of `read_chunk` bytes) or
/// `"uring"` (read through the ring, with `server.model = "uring"`) — or
/// `"auto"`: per file-size class the method measured fastest on this host
/// (`static_io.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoChoice {
    Auto,
    Fixed(IoMethod),
}

impl IoChoice {
    pub fn name(self) -> &'static str {
        match self {
            IoChoice::Auto => "auto",
            IoChoice::Fixed(m) => m.name(),
        }
    }
}

impl std::str::FromStr for IoChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(IoChoice::Auto),
            _ => s
                .parse()
                .map(IoChoice::Fixed)
                .map_err(|_| format!("unknown I/O method `{s}` (expected auto, sendfile, mmap, read or uring)")),
        }
    }
}

impl<'de> Deserialize<'de> for IoChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// `[static]`: static file serving.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaticFiles {
    /// How file bodies are sent: `"auto"` chooses per size class (see
    /// [`IoChoice`]). Default `"auto"`.
    pub io: IoChoice,
    /// Upper bounds (inclusive) of the file-size classes `"auto"` chooses a
    /// method for; strictly ascending, at most 7. Default
    /// `["16KiB", "256KiB"]` (three classes: ≤ 16 KiB, ≤ 256 KiB, larger).
    pub io_classes: Vec<Bytes>,
    /// A profile written by `tern tune --io`: its per-class methods are used
    /// instead of measuring at start-up. Relative to the config file's
    /// directory. Default: none.
    pub io_profile: Option<PathBuf>,
    /// The method per size class, smallest first, as `tern tune` writes
    /// them: with `io = "auto"` they are used instead of measuring at
    /// start-up, except where an entry is `"auto"`: that class is measured
    /// as without them (so a tuned file pins only the classes where a method
    /// beat the calibration). One entry per class: one more than
    /// `io_classes`; not with `io_profile`. Default `[]`: measure.
    pub io_methods: Vec<IoChoice>,
    /// Buffer size of the `read` method. Default `"64KiB"`.
    pub read_chunk: Bytes,
    /// Most bytes one connection sends by `sendfile` before the others
    /// of its worker have a turn (nginx's `sendfile_max_chunk`, lighttpd's
    /// write limit per turn); 0 = no limit. Without it one `sendfile` call
    /// queues a whole large file in one client's socket before the next
    /// is served: on this project's machine the limit took 64 clients of a
    /// 1 MiB file from 3,041 to 4,386 req/s and halved the p99.
    /// Default `"256KiB"`.
    pub sendfile_max_chunk: Bytes,
    /// Entries in each worker's open-file table. Default 1024.
    pub open_file_cache: usize,
    /// Threads of the blocking I/O pool shared by the reactors' workers
    /// (`event`, `uring`): opens that miss the open-file table and reads of
    /// file pages not in the page cache run there, so a slow disk never
    /// stalls a reactor. 0 = off (the worker does them itself). Default 32, as
    /// nginx's `aio threads` pool: a thread blocked on a disk holds no
    /// CPU, and the count bounds how many slow opens and reads are under
    /// way at once (a disk's queue wants several); a sleeping thread costs
    /// a few KiB. Started under the reactor models only (see
    /// [`Config::io_pool_threads`]).
    pub io_threads: usize,
    /// How long an open file is trusted before it is looked up again
    /// (0 = before every request). Default `"1s"`.
    pub open_file_valid: Seconds,
    /// Charset appended to `text/*` types; empty for none. Default `"utf-8"`.
    pub charset: String,
    /// Extra or overriding MIME types by extension, e.g.
    /// `{ md = "text/markdown" }`. Default `{}`.
    pub mime_types: BTreeMap<String, String>,
    /// Paths with a segment starting with `.` (`/.git/config`, `/a/.env`):
    /// `"deny"` answers them 404 (static files, CGI, FastCGI), `"allow"`
    /// serves them as any other. Default `"deny"`.
    pub hidden: Hidden,
    /// URL paths served even though hidden (with `hidden = "deny"`); hidden
    /// names below them are still refused. Default `["/.well-known"]`.
    pub hidden_allow: Vec<String>,
    /// Extensions of program sources never sent as static files (answered
    /// 403), so a `.php` page is not shown as source when no FastCGI
    /// backend claims it (lighttpd's `static-file.exclude-extensions`).
    /// Files that a CGI or FastCGI route claims never reach static files
    /// anyway. Default `[".php", ".pl", ".fcgi"]`.
    pub exclude_extensions: Vec<String>,
}

/// Whether hidden paths (a segment starting with `.`) are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hidden {
    Deny,
    Allow,
}

impl Default for StaticFiles {
    fn default() -> Self {
        StaticFiles {
            io: IoChoice::Auto,
            io_classes: vec![Bytes(16 * 1024), Bytes(256 * 1024)],
            io_profile: None,
            io_methods: Vec::new(),
            read_chunk: Bytes(64 * 1024),
            sendfile_max_chunk: Bytes(256 * 1024),
            open_file_cache: 1024,
            io_threads: 32,
            open_file_valid: Seconds(Duration::from_secs(1)),
            charset: "utf-8".into(),
            mime_types: BTreeMap::new(),
            hidden: Hidden::Deny,
            hidden_allow: vec!["/.well-known".into()],
            exclude_extensions: vec![".php".into(), ".pl".into(), ".fcgi".into()],
        }
    }
}

impl StaticFiles {
    /// The keys a `[[site]]` may set in `[site.static]`; the others are
    /// the whole server's (one open-file table, one I/O method per size).
    pub const SITE_KEYS: &'static [&'static str] =
        &["charset", "mime_types", "hidden", "hidden_allow", "exclude_extensions"];

    /// The first rule of `[static]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (self.read_chunk.0 == 0, "read_chunk", "must be at least 1 byte"),
            (self.open_file_cache == 0, "open_file_cache", "must be at least 1"),
            (self.io_threads > 1024, "io_threads", "must be at most 1024"),
            (
                self.io_classes.len() > 7
                    || self.io_classes.first().is_some_and(|b| b.0 == 0)
                    || self.io_classes.windows(2).any(|w| w[0].0 >= w[1].0),
                "io_classes",
                "must be at most 7 sizes above 0, strictly ascending",
            ),
            (
                !self.io_methods.is_empty() && self.io_methods.len() != self.io_classes.len() + 1,
                "io_methods",
                "needs one method per size class: one more than static.io_classes has sizes",
            ),
            (
                !self.io_methods.is_empty() && self.io_profile.is_some(),
                "io_methods",
                "cannot be combined with static.io_profile (both say which method sends each class)",
            ),
            (
                self.hidden_allow.iter().any(|p| !p.starts_with('/')),
                "hidden_allow",
                "each must be a URL path starting with /",
            ),
            (
                self.exclude_extensions.iter().any(|e| !e.starts_with('.') || e.len() < 2),
                "exclude_extensions",
                "each must be an extension starting with . (\".php\")",
            ),
        ])
    }
}

/// The methods, in the order of their counters and evidence.
pub const METHODS: [IoMethod; 4] = [IoMethod::Sendfile, IoMethod::Mmap, IoMethod::Read, IoMethod::Uring];

const _: () = assert!(METHODS.len() == crate::metrics::FILE_METHODS);

/// The methods a server sends with: `uring` reads through the `uring`
/// engine's ring, so only where the engine has one (`ring`; see
/// `Config::sending_methods`).
pub fn methods(ring: bool) -> &'static [IoMethod] {
    if ring {
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
    /// safe ones, among the methods `available` ([`methods`]).
    pub fn new(st: &StaticFiles, available: &'static [IoMethod]) -> Result<StaticIo, String> {
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
        assert_eq!(methods(false), &METHODS[..3]);
        assert!(methods(true).contains(&IoMethod::Uring));
        let bounds = [16 << 10];
        let mut choices = safe_choices(&bounds);
        choices[1] = ClassChoice { method: IoMethod::Uring, basis: "measured", rates: Some([1.0, 2.0, 3.0, 4.0]) };
        let text = profile_text(&bounds, &choices, "test");
        assert!(text.contains("\nuring = 4\n"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("io.toml");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(Profile::load(&path, &bounds, methods(true)).unwrap()[1].rates, choices[1].rates);
        let e = Profile::load(&path, &bounds, methods(false)).unwrap_err();
        assert!(e.contains("\"uring\" needs server.model = \"uring\""), "{e}");
        // Measured without it (another model): no line for it, as before.
        choices[1] = ClassChoice { method: IoMethod::Mmap, basis: "measured", rates: Some([1.0, 2.0, 3.0, 0.0]) };
        let text = profile_text(&bounds, &choices, "test");
        assert!(!text.contains("uring"), "{text}");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(Profile::load(&path, &bounds, methods(false)).unwrap()[1].rates, choices[1].rates);
    }
}
