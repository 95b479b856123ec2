//! The batteries of `tern tune`: for each, the candidates it compares
//! (always including the base configuration's value, "the default"), the
//! decisions it makes and the workloads each is judged on — every workload
//! the setting affects, among those `bench/tune.sh` checks the tuned
//! configuration on (static files of [`FILES`] sizes, a CGI program, the
//! cached page per coding) at a few connections and at the check's 64
//! ([`CONNECTIONS`]) — and how the verdicts become settings with their
//! evidence.

use std::fmt::Write as _;
use std::path::Path;

use tern_server::config::{IoChoice, Model};
use tern_server::static_io::{self, StaticIo};
use tern_server::{calibrate, Config};

use super::battery::{
    ahead, choose, median, setting, unit_of, Battery, Candidate, Decides, Decision, Lab, Outcome, Setting, Workload,
};
use super::output::{Change, Tuned};
use crate::content::{page, pattern};

/// The batteries, in the order they run (later ones measure with what
/// earlier ones chose).
pub const NAMES: [&str; 6] = ["io", "chunk", "cgi", "model", "levels", "adaptive"];

/// The connections every steady workload is measured at: a few, as a quiet
/// site sees, and `bench/tune.sh`'s 64 (a setting that wins at one and
/// loses at the other is not chosen).
pub const CONNECTIONS: [usize; 2] = [4, 64];

/// The static file sizes `bench/tune.sh` checks (its `SIZE_BYTES`): a size
/// class is judged on those inside it, or on its typical size when none is.
pub const FILES: [u64; 5] = [1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];

/// The page the compression workloads ask for (as `bench/tune.sh`'s
/// `page-41518.html`): the largest of SPEC E4's.
const PAGE: usize = 41_518;

/// The CGI program's output (`/cgi-bin/out.sh`).
const CGI_BYTES: u64 = 1 << 20;

/// The battery `name` for the configuration `c` (the base with what earlier
/// batteries chose), or why it is skipped.
pub fn battery(name: &str, lab: &Lab, c: &Config) -> anyhow::Result<Result<Battery, String>> {
    let off = |what: &str| -> anyhow::Result<Result<Battery, String>> {
        Ok(Err(format!("{what}: skipped, compression is off in the base configuration")))
    };
    let site = Site::write(lab.root, c)?;
    match name {
        "io" => io(c).map(Ok),
        "chunk" => chunk(lab, c),
        "cgi" => cgi(lab, &site, c).map(Ok),
        "model" => model(lab, &site, c).map(Ok),
        "levels" if !c.compression.enabled => off("levels"),
        "levels" => levels(c).map(Ok),
        "adaptive" if !c.compression.enabled => off("adaptive"),
        "adaptive" => adaptive(lab, c).map(Ok),
        other => anyhow::bail!("no battery {other:?}: choose among {}", NAMES.join(", ")),
    }
}

/// The files every battery may ask for, and the keys that let its servers
/// run the CGI program.
struct Site {
    cgi: Vec<Setting>,
}

impl Site {
    /// Writes what is missing: `io-SIZE.bin` for [`FILES`] and the
    /// classes' typical sizes, `page.html`, `cgi-bin/out.sh`.
    fn write(root: &Path, c: &Config) -> anyhow::Result<Site> {
        let bounds = bounds(c);
        let typical = (0..=bounds.len()).map(|i| calibrate::representative(&bounds, i));
        for size in FILES.into_iter().chain(typical) {
            let path = root.join(file_name(size));
            if std::fs::metadata(&path).ok().map(|m| m.len()) != Some(size) {
                std::fs::write(&path, pattern(size))?;
            }
        }
        std::fs::write(root.join("page.html"), page(PAGE))?;
        let data = root.parent().unwrap_or(root).join("cgi-output.bin");
        if std::fs::metadata(&data).ok().map(|m| m.len()) != Some(CGI_BYTES) {
            std::fs::write(&data, pattern(CGI_BYTES))?;
        }
        let dir = root.join("cgi-bin");
        std::fs::create_dir_all(&dir)?;
        let script = dir.join("out.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nprintf 'Content-Type: application/octet-stream\\r\\n\\r\\n'\nexec cat '{}'\n",
                data.display()
            ),
        )?;
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let mut interpreters = toml::Table::new();
        interpreters.insert("sh".into(), "/bin/sh".into());
        let mut cgi = vec![
            setting("cgi", "directories", vec!["/cgi-bin"]),
            setting("cgi", "interpreters", interpreters),
            setting("cgi", "max_processes", 64),
        ];
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // Measuring servers only: the program is this battery's own.
            cgi.push(setting("cgi", "allow_root", true));
        }
        Ok(Site { cgi })
    }
}

fn bounds(c: &Config) -> Vec<u64> {
    c.static_files.io_classes.iter().map(|b| b.0).collect()
}

fn file_name(size: u64) -> String {
    format!("io-{size}.bin")
}

/// A steady workload per connection count of [`CONNECTIONS`]: GETs of
/// `path` (with `headers`), named `NAME @CONNS`.
fn steady(name: &str, path: &str, headers: &[String], size: u64, decision: usize) -> Vec<Workload> {
    CONNECTIONS
        .iter()
        .map(|&connections| Workload {
            name: format!("{name} @{connections}"),
            paths: vec![path.into()],
            headers: headers.to_vec(),
            connections,
            size: Some(size),
            identity: None,
            setup: Vec::new(),
            decision,
        })
        .collect()
}

/// The steady workloads of static files of `sizes`.
fn files(sizes: &[u64], decision: usize) -> Vec<Workload> {
    sizes.iter().flat_map(|&s| steady(&size_name(s), &format!("/{}", file_name(s)), &[], s, decision)).collect()
}

/// The CGI program sending 1 MiB.
fn cgi_program(decision: usize) -> Vec<Workload> {
    steady("cgi 1MiB", "/cgi-bin/out.sh", &[], CGI_BYTES, decision)
}

/// The page asked for with `coding` (`bench/tune.sh`'s `page gzip`): after
/// the warm-up, from the compression cache.
fn cached_page(coding: &str, decision: usize) -> Vec<Workload> {
    steady(&format!("page {coding}"), "/page.html", &[format!("Accept-Encoding: {coding}")], PAGE as u64, decision)
}

/// The sizes a size class is judged on: [`FILES`] inside it, or its
/// typical size when none is.
fn class_sizes(bounds: &[u64], class: usize) -> Vec<u64> {
    let lo = class.checked_sub(1).map_or(0, |p| bounds[p]);
    let hi = bounds.get(class).copied().unwrap_or(u64::MAX);
    let inside: Vec<u64> = FILES.into_iter().filter(|&s| s > lo && s <= hi).collect();
    if inside.is_empty() {
        vec![calibrate::representative(bounds, class)]
    } else {
        inside
    }
}

/// `1MiB`, `64KiB`, `100B`.
fn size_name(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}

/// Candidates for a byte size, `current` among them, ascending; the index
/// of `current`.
fn sizes(section: &'static str, key: &'static str, current: u64, list: &[u64]) -> (Vec<Candidate>, usize) {
    let mut all = list.to_vec();
    all.push(current);
    all.sort_unstable();
    all.dedup();
    let at = all.iter().position(|&s| s == current).unwrap_or(0);
    let candidates = all
        .iter()
        .map(|&s| Candidate { name: size_name(s), settings: vec![setting(section, key, size_name(s))] })
        .collect();
    (candidates, at)
}

/// The sizes `chunk` and `cgi` try.
fn buffer_sizes(lab: &Lab) -> &'static [u64] {
    if lab.quick {
        &[16 << 10, 64 << 10, 256 << 10]
    } else {
        &[16 << 10, 64 << 10, 256 << 10, 1 << 20]
    }
}

/// The base's method per class as `static.io_methods` writes it: `"auto"`
/// where the start-up calibration decides (or the rule, for small classes).
fn base_methods(c: &Config) -> anyhow::Result<Vec<String>> {
    let io = StaticIo::new(&c.static_files, c.sending_methods()).map_err(anyhow::Error::msg)?;
    Ok(io
        .choices()
        .iter()
        .map(|ch| {
            if ch.basis == "rule" || static_io::to_measure(ch) {
                IoChoice::Auto.name().to_string()
            } else {
                ch.method.name().to_string()
            }
        })
        .collect())
}

/// The static I/O method per size class. The default is the base
/// configuration as it is (`"auto"`: the start-up calibration's choice);
/// each other candidate fixes one method. A class is judged on its files.
fn io(c: &Config) -> anyhow::Result<Battery> {
    let bounds = bounds(c);
    let mut candidates =
        vec![Candidate { name: format!("{} (as configured)", c.static_files.io.name()), settings: vec![] }];
    for m in c.sending_methods().iter().filter(|&&m| c.static_files.io != IoChoice::Fixed(m)) {
        candidates.push(Candidate { name: m.name().into(), settings: vec![setting("static", "io", m.name())] });
    }
    let mut workloads = Vec::new();
    let mut decisions = Vec::new();
    for class in 0..=bounds.len() {
        workloads.extend(files(&class_sizes(&bounds, class), class));
        decisions.push(Decision { name: static_io::class_name(&bounds, class), default: 0 });
    }
    Ok(Battery {
        name: "io",
        what: format!(
            "static I/O method per size class, each judged on its files ({}) at {CONNECTIONS:?} connections",
            FILES.map(size_name).join(", ")
        ),
        fixed: Vec::new(),
        candidates,
        workloads,
        decisions,
        decides: Decides::IoMethods { configured: c.static_files.io.name().into(), kept: base_methods(c)? },
        fresh: false,
    })
}

/// `static.read_chunk`, the `read` method's buffer: judged on the files of
/// the classes `read` may send (configured so, or left to the start-up
/// calibration, which measures `read` with it), sent as configured.
fn chunk(lab: &Lab, c: &Config) -> anyhow::Result<Result<Battery, String>> {
    let bounds = bounds(c);
    let io = StaticIo::new(&c.static_files, c.sending_methods()).map_err(anyhow::Error::msg)?;
    let classes: Vec<usize> = io
        .choices()
        .iter()
        .enumerate()
        .filter(|(_, ch)| ch.method == tern_server::config::IoMethod::Read || static_io::to_measure(ch))
        .map(|(i, _)| i)
        .collect();
    if classes.is_empty() {
        return Ok(Err("chunk: skipped, no size class is sent by `read` or measured at start-up".into()));
    }
    let sizes_judged: Vec<u64> = classes.iter().flat_map(|&i| class_sizes(&bounds, i)).collect();
    let (candidates, at) = sizes("static", "read_chunk", c.static_files.read_chunk.0, buffer_sizes(lab));
    Ok(Ok(Battery {
        name: "chunk",
        what: format!(
            "static.read_chunk: the files of the classes `read` may send ({}), static.io as configured, at \
             {CONNECTIONS:?} connections",
            sizes_judged.iter().map(|&s| size_name(s)).collect::<Vec<_>>().join(", ")
        ),
        fixed: Vec::new(),
        candidates,
        workloads: files(&sizes_judged, 0),
        decisions: vec![Decision { name: String::new(), default: at }],
        decides: Decides::One,
        fresh: false,
    }))
}

/// `cgi.pipe_buffer`: a shell CGI program that sends 1 MiB.
fn cgi(lab: &Lab, site: &Site, c: &Config) -> anyhow::Result<Battery> {
    let (candidates, at) = sizes("cgi", "pipe_buffer", c.cgi.pipe_buffer.0, buffer_sizes(lab));
    Ok(Battery {
        name: "cgi",
        what: format!("cgi.pipe_buffer: a /bin/sh CGI program sending 1MiB, at {CONNECTIONS:?} connections"),
        fixed: site.cgi.clone(),
        candidates,
        workloads: cgi_program(0),
        decisions: vec![Decision { name: String::new(), default: at }],
        decides: Decides::One,
        fresh: false,
    })
}

/// The concurrency model and its thread count, which every request
/// depends on: judged on every workload of the check.
fn model(lab: &Lab, site: &Site, c: &Config) -> anyhow::Result<Battery> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let event = |w: usize| Candidate {
        name: format!("event, workers {w}"),
        settings: vec![setting("server", "model", Model::Event.name()), setting("server", "workers", w as i64)],
    };
    let pool = |t: usize| Candidate {
        name: format!("pool, threads {t}"),
        settings: vec![setting("server", "model", Model::Pool.name()), setting("server", "threads", t as i64)],
    };
    let mut candidates: Vec<Candidate> = (0..cpus).map(event).collect();
    if !lab.quick {
        candidates.push(event(2 * cpus));
    }
    let threads: &[usize] = if lab.quick { &[32] } else { &[8, 32, 128] };
    candidates.extend(threads.iter().map(|&t| pool(t)));
    let only = |m: Model| Candidate { name: m.name().into(), settings: vec![setting("server", "model", m.name())] };
    candidates.push(only(Model::PerRequest));
    let s = &c.server;
    let current = match s.model {
        Model::Event => event(s.workers),
        Model::Pool => pool(s.threads),
        other => only(other),
    };
    let at = match candidates.iter().position(|x| x.name == current.name) {
        Some(at) => at,
        None => {
            candidates.push(current);
            candidates.len() - 1
        }
    };
    let mut workloads = files(&FILES, 0);
    workloads.extend(cgi_program(0));
    if c.compression.enabled {
        for (coding, _) in codings(c) {
            workloads.extend(cached_page(coding, 0));
        }
    }
    Ok(Battery {
        name: "model",
        what: format!(
            "server.model and its thread count: static files ({}), the CGI program sending 1MiB and the cached page \
             per coding, at {CONNECTIONS:?} connections",
            FILES.map(size_name).join(", ")
        ),
        fixed: site.cgi.clone(),
        candidates,
        workloads,
        decisions: vec![Decision { name: String::new(), default: at }],
        decides: Decides::One,
        fresh: false,
    })
}

/// The offered codings, as `Accept-Encoding` names them, with their level
/// keys.
fn codings(c: &Config) -> Vec<(&'static str, &'static str)> {
    use tern_server::config::CodingName;
    c.compression
        .codings
        .iter()
        .map(|k| match k {
            CodingName::Gzip => ("gzip", "gzip_level"),
            CodingName::Br => ("br", "br_level"),
            CodingName::Zstd => ("zstd", "zstd_level"),
        })
        .collect()
}

/// The compression levels, per coding. A level changes two things: the
/// bytes of every compressed response (the cached page, in r/s, as
/// `bench/tune.sh` measures it) and the cost of compressing a page anew
/// (a page compressed for every response, identity refused, scored in
/// bytes saved per second); a level is chosen only when ahead on both.
fn levels(c: &Config) -> anyhow::Result<Battery> {
    let z = &c.compression;
    let sets = [[1, 1, 1], [z.gzip_level, z.br_level, z.zstd_level], [9, 7, 9]];
    let candidates = sets
        .iter()
        .map(|[g, b, s]| Candidate {
            name: format!("gzip {g}, br {b}, zstd {s}"),
            settings: vec![
                setting("compression", "gzip_level", i64::from(*g)),
                setting("compression", "br_level", i64::from(*b)),
                setting("compression", "zstd_level", i64::from(*s)),
            ],
        })
        .collect();
    let codings = codings(c);
    let mut workloads = Vec::new();
    for (d, (name, _)) in codings.iter().enumerate() {
        workloads.extend(cached_page(name, d));
    }
    // Anew: no cache, every cold page compressed inline, a few connections.
    for (d, (name, _)) in codings.iter().enumerate() {
        workloads.push(Workload {
            name: format!("page {name} anew @{}", CONNECTIONS[0]),
            paths: vec!["/page.html".into()],
            headers: vec![format!("Accept-Encoding: {name}, identity;q=0")],
            connections: CONNECTIONS[0],
            size: Some(PAGE as u64),
            identity: Some(PAGE as u64),
            setup: vec![setting("compression", "cache_memory", 1), setting("compression", "adaptive", false)],
            decision: d,
        });
    }
    Ok(Battery {
        name: "levels",
        what: format!(
            "compression levels: a {PAGE}-byte HTML page from the cache at {CONNECTIONS:?} connections (req/s), and \
             compressed for every response (no cache) at {} connections (bytes saved per second)",
            CONNECTIONS[0]
        ),
        fixed: Vec::new(),
        candidates,
        decisions: codings.iter().map(|(name, _)| Decision { name: (*name).into(), default: 1 }).collect(),
        workloads,
        decides: Decides::PerDecision(codings.iter().map(|(_, key)| ("compression", *key)).collect()),
        fresh: false,
    })
}

/// The adaptive thresholds, which only act on pages not yet compressed: a
/// cold burst (a fresh server per sample, many distinct pages, 64
/// connections), scored in bytes saved per second.
fn adaptive(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    const BURST_PAGE: usize = 11_426;
    let count = if lab.quick { 300 } else { 2000 };
    let dir = lab.root.join("burst");
    std::fs::create_dir_all(&dir)?;
    let body = page(BURST_PAGE);
    let mut paths = Vec::with_capacity(count);
    for i in 0..count {
        std::fs::write(dir.join(format!("p{i}.html")), &body)?;
        paths.push(format!("/burst/p{i}.html"));
    }
    let z = &c.compression;
    let on = |q: u64, f: u64| Candidate {
        name: format!("adaptive, busy at {q} queued / {f} in flight"),
        settings: vec![
            setting("compression", "adaptive", true),
            setting("compression", "busy_accept_queue", q as i64),
            setting("compression", "busy_in_flight", f as i64),
        ],
    };
    let mut candidates = vec![on(2, 8), on(z.busy_accept_queue, z.busy_in_flight), on(32, 128)];
    candidates.push(Candidate {
        name: "inline (adaptive off)".into(),
        settings: vec![setting("compression", "adaptive", false)],
    });
    candidates.dedup_by(|a, b| a.name == b.name);
    let at = if z.adaptive {
        candidates.iter().position(|x| x.name == on(z.busy_accept_queue, z.busy_in_flight).name).unwrap_or(0)
    } else {
        candidates.len() - 1
    };
    let coding = codings(c).first().map_or("gzip", |c| c.0);
    let connections = CONNECTIONS[1];
    Ok(Battery {
        name: "adaptive",
        what: format!(
            "compression.adaptive and its thresholds: a cold burst ({count} distinct {BURST_PAGE}-byte pages in turn, \
             a fresh server per sample), {connections} connections, scored in bytes saved per second"
        ),
        fixed: Vec::new(),
        candidates,
        workloads: vec![Workload {
            name: format!("cold {coding} @{connections}"),
            paths,
            headers: vec![format!("Accept-Encoding: {coding}")],
            connections,
            size: Some(BURST_PAGE as u64),
            identity: Some(BURST_PAGE as u64),
            setup: Vec::new(),
            decision: 0,
        }],
        decisions: vec![Decision { name: String::new(), default: at }],
        decides: Decides::One,
        fresh: true,
    })
}

/// The settings a battery's outcome decides, each with its evidence.
pub fn decide(b: &Battery, o: &Outcome, lab: &Lab) -> Vec<Tuned> {
    let run = o.run_id.map_or("not stored".to_string(), |id| format!("run {id}"));
    let head = format!(
        "tern tune `{}`, {run}: {}; medians of {} interleaved rounds of {} ms each.",
        b.name,
        b.what,
        lab.rounds,
        lab.sample.as_millis()
    );
    let verdicts: Vec<(usize, Vec<String>)> = (0..b.decisions.len()).map(|d| verdict(b, o, d)).collect();
    match &b.decides {
        Decides::One => {
            let (winner, lines) = &verdicts[0];
            let mut lines = std::iter::once(head).chain(lines.iter().cloned()).collect::<Vec<_>>();
            let d = b.decisions[0].default;
            let (settings, keep) =
                if *winner == d { (&b.candidates[d].settings, true) } else { (&b.candidates[*winner].settings, false) };
            settings
                .iter()
                .enumerate()
                .map(|(i, s)| Tuned {
                    section: s.section,
                    key: s.key,
                    change: if keep { Change::Keep(s.value.clone()) } else { Change::Set(s.value.clone()) },
                    comment: if i == 0 {
                        std::mem::take(&mut lines)
                    } else {
                        vec![format!(
                            "With {}.{} (tern tune `{}`, {run}).",
                            settings[0].section, settings[0].key, b.name
                        )]
                    },
                })
                .collect()
        }
        Decides::PerDecision(keys_of) => keys_of
            .iter()
            .zip(&verdicts)
            .enumerate()
            .filter_map(|(d, (&(section, key), (winner, lines)))| {
                let value = |c: usize| b.candidates[c].settings.iter().find(|s| (s.section, s.key) == (section, key));
                let default = value(b.decisions[d].default)?;
                let change = if *winner == b.decisions[d].default {
                    Change::Keep(default.value.clone())
                } else {
                    Change::Set(value(*winner)?.value.clone())
                };
                let comment = std::iter::once(head.clone()).chain(lines.iter().cloned()).collect();
                Some(Tuned { section, key, change, comment })
            })
            .collect(),
        Decides::IoMethods { configured, kept } => {
            let mut lines = vec![head];
            if let Some(calibrated) = o.io.first().and_then(Option::as_ref) {
                lines.push(format!("The default's server decided: {calibrated}."));
            }
            let mut methods = Vec::new();
            let mut any = false;
            for (d, (winner, evidence)) in verdicts.iter().enumerate() {
                lines.extend(evidence.iter().cloned());
                if *winner == b.decisions[d].default {
                    methods.push(toml::Value::from(kept[d].clone()));
                } else {
                    any = true;
                    let m =
                        b.candidates[*winner].settings.first().map_or(toml::Value::from("auto"), |s| s.value.clone());
                    methods.push(m);
                }
            }
            if !any {
                return vec![Tuned {
                    section: "static",
                    key: "io",
                    change: Change::Keep(configured.clone()),
                    comment: lines,
                }];
            }
            vec![
                Tuned {
                    section: "static",
                    key: "io",
                    change: Change::Set("auto".into()),
                    comment: vec![format!("\"auto\", so that static.io_methods apply (tern tune `io`, {run}).")],
                },
                Tuned { section: "static", key: "io_profile", change: Change::Remove, comment: Vec::new() },
                Tuned {
                    section: "static",
                    key: "io_methods",
                    change: Change::Set(toml::Value::Array(methods)),
                    comment: lines,
                },
            ]
        }
    }
}

/// Decision `d`'s winner and the comment lines for it: per workload, every
/// candidate's median as a ratio to the default's (marked where ahead past
/// the noise; `out` where no longer in the running), then what was chosen
/// and why.
fn verdict(b: &Battery, o: &Outcome, d: usize) -> (usize, Vec<String>) {
    let dec = &b.decisions[d];
    let def = dec.default;
    let ws: Vec<usize> = (0..b.workloads.len()).filter(|&w| b.workloads[w].decision == d).collect();
    let winner = choose(&o.samples, &ws, def);
    let prefix = if dec.name.is_empty() { String::new() } else { format!("{}: ", dec.name) };
    let mut lines = Vec::new();
    let mut skipped = Vec::new();
    for &w in &ws {
        let wl = &b.workloads[w];
        let sd = &o.samples[def][w];
        if sd.is_empty() {
            skipped.push(wl.name.as_str());
            continue;
        }
        let base = median(sd);
        let (_, unit) = unit_of(wl);
        let mut shown = vec![format!("{} (default) = {base:.0} {unit}", name_of(b, def, d))];
        for c in (0..b.candidates.len()).filter(|&c| c != def) {
            let sc = &o.samples[c][w];
            let mut s = format!("{} ", name_of(b, c, d));
            if sc.is_empty() {
                s.push_str("out");
            } else if base > 0.0 {
                let _ = write!(s, "{:.2}x", median(sc) / base);
                if ahead(sc, sd) {
                    s.push_str(" ahead");
                }
            } else {
                s.push('-');
            }
            if wl.identity.is_some() {
                if let Some(per) = o.bytes.get(c).and_then(|x| x.get(w)).filter(|&&p| p > 0.0) {
                    let _ = write!(s, ", {per:.0} B/response");
                }
            }
            shown.push(s);
        }
        lines.push(format!("{prefix}{}: {}.", wl.name, shown.join("; ")));
    }
    if !skipped.is_empty() {
        lines.push(format!("{prefix}{}: not measured, no candidate left in the running.", skipped.join(", ")));
    }
    let all = match ws.len() {
        1 => "its workload".to_string(),
        n => format!("all {n} workloads"),
    };
    let measured = ws.iter().any(|&w| median(&o.samples[def][w]) > 0.0);
    lines.push(if !measured && ws.iter().any(|&w| !o.samples[def][w].is_empty()) {
        let why = o.failures.first().map_or("no sample", String::as_str);
        format!("{prefix}not measured ({why}); the default {} stays.", name_of(b, def, d))
    } else if winner != def {
        let least =
            ws.iter().map(|&w| median(&o.samples[winner][w]) / median(&o.samples[def][w])).fold(f64::MAX, f64::min);
        format!(
            "{prefix}chosen {}: ahead of the default past the noise on {all} (by {least:.2}x at least).",
            name_of(b, winner, d)
        )
    } else {
        format!(
            "{prefix}kept the default {}: no candidate was ahead of it past the noise (at least {:.0}%) on {all}.",
            name_of(b, def, d),
            super::battery::MIN_NOISE * 100.0
        )
    });
    (winner, lines)
}

/// A candidate as decision `d` names it: by the key it decides (`gzip_level
/// 1`), else by its name.
fn name_of(b: &Battery, c: usize, d: usize) -> String {
    let cand = &b.candidates[c];
    if let Decides::PerDecision(keys) = &b.decides {
        if let Some(s) = cand.settings.iter().find(|s| (s.section, s.key) == keys[d]) {
            return format!("{} {}", s.key, s.value);
        }
    }
    cand.name.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;
    use tern_lab::store::Recording;

    fn lab<'a>(recording: &'a Recording, interrupt: &'a AtomicBool) -> Lab<'a> {
        Lab {
            base: toml::Table::new(),
            root: Path::new("/nonexistent"),
            rounds: 3,
            sample: Duration::from_millis(100),
            warmup: Duration::ZERO,
            quick: true,
            recording,
            interrupt,
            tuned: Vec::new(),
        }
    }

    /// An outcome where, for each workload, candidate `lead(w)` (if any)
    /// measures 1.5x the default (candidate 0) and the others 0.9x.
    fn outcome(b: &Battery, lead: impl Fn(usize) -> Option<usize>) -> Outcome {
        let n = b.candidates.len();
        let samples = (0..n)
            .map(|c| {
                (0..b.workloads.len())
                    .map(|w| {
                        let v = match (c, lead(w)) {
                            (0, _) => 100.0,
                            (c, Some(l)) if c == l => 150.0,
                            _ => 90.0,
                        };
                        vec![v, v, v]
                    })
                    .collect()
            })
            .collect();
        Outcome {
            samples,
            bytes: vec![vec![0.0; b.workloads.len()]; n],
            io: vec![Some("static.io auto: calibrated (250 ms); <=16KiB mmap [rule]".into()); n],
            failures: Vec::new(),
            run_id: Some(7),
            interrupted: false,
        }
    }

    #[test]
    fn io_judges_each_class_on_its_files_at_both_connection_counts() {
        let b = io(&Config::default()).unwrap();
        let names: Vec<&str> = b.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["auto (as configured)", "sendfile", "mmap", "read"]);
        assert!(b.candidates[0].settings.is_empty(), "the default is the configuration as it is");
        let judged: Vec<(usize, String)> = b.workloads.iter().map(|w| (w.decision, w.name.clone())).collect();
        let want: Vec<(usize, String)> = [(0, "1KiB"), (0, "16KiB"), (1, "64KiB"), (1, "256KiB"), (2, "1MiB")]
            .iter()
            .flat_map(|&(d, s)| CONNECTIONS.map(|c| (d, format!("{s} @{c}"))))
            .collect();
        assert_eq!(judged, want);
    }

    #[test]
    fn io_writes_nothing_when_no_method_beats_the_calibration_everywhere() {
        let (recording, interrupt) =
            (Recording { path: "/nonexistent".into(), no_store: true, label: String::new() }, AtomicBool::new(false));
        let lab = lab(&recording, &interrupt);
        let b = io(&Config::default()).unwrap();
        // mmap leads on the middle class's files but the 256KiB one at 64
        // connections; no method leads elsewhere.
        let o = outcome(&b, |w| (b.workloads[w].decision == 1 && b.workloads[w].name != "256KiB @64").then_some(2));
        let tuned = decide(&b, &o, &lab);
        assert_eq!(tuned.len(), 1, "{tuned:?}");
        assert_eq!((tuned[0].section, tuned[0].key), ("static", "io"));
        assert!(matches!(&tuned[0].change, Change::Keep(v) if v.as_str() == Some("auto")), "{tuned:?}");
        let comment = tuned[0].comment.join("\n");
        assert!(comment.contains("The default's server decided: static.io auto: calibrated"), "{comment}");
        assert!(comment.contains("<=256KiB: 256KiB @64: auto (as configured) (default) = 100 req/s; sendfile 0.90x; mmap 0.90x; read 0.90x."), "{comment}");
        assert!(comment.contains("<=256KiB: 64KiB @4: auto (as configured) (default) = 100 req/s; sendfile 0.90x; mmap 1.50x ahead; read 0.90x."), "{comment}");
        assert!(comment.contains("<=256KiB: kept the default auto (as configured)"), "{comment}");
    }

    #[test]
    fn io_pins_only_the_classes_a_method_won_and_leaves_the_others_auto() {
        let (recording, interrupt) =
            (Recording { path: "/nonexistent".into(), no_store: true, label: String::new() }, AtomicBool::new(false));
        let lab = lab(&recording, &interrupt);
        let b = io(&Config::default()).unwrap();
        // read leads on both files of the middle class at both counts.
        let o = outcome(&b, |w| (b.workloads[w].decision == 1).then_some(3));
        let tuned = decide(&b, &o, &lab);
        let keys: Vec<(&str, String)> = tuned
            .iter()
            .map(|t| {
                let v = match &t.change {
                    Change::Set(v) => format!("= {v}"),
                    Change::Remove => "removed".into(),
                    Change::Keep(v) => format!("kept {v}"),
                };
                (t.key, v)
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("io", "= \"auto\"".to_string()),
                ("io_profile", "removed".into()),
                ("io_methods", "= [\"auto\", \"read\", \"auto\"]".into())
            ]
        );
        let comment = tuned[2].comment.join("\n");
        assert!(
            comment.contains(
                "<=256KiB: chosen read: ahead of the default past the noise on all 4 workloads (by 1.50x at least)."
            ),
            "{comment}"
        );
        assert!(comment.contains("tern tune `io`, run 7:"), "{comment}");
        // A base that pins a method: the kept classes stay pinned to it.
        let mut c = Config::default();
        c.static_files.io = IoChoice::Fixed(tern_server::config::IoMethod::Sendfile);
        let b = io(&c).unwrap();
        let names: Vec<&str> = b.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["sendfile (as configured)", "mmap", "read"]);
        let o = outcome(&b, |w| (b.workloads[w].decision == 2).then_some(1));
        let tuned = decide(&b, &o, &lab);
        assert!(
            matches!(&tuned[2].change, Change::Set(v) if v.to_string() == "[\"sendfile\", \"sendfile\", \"mmap\"]"),
            "{tuned:?}"
        );
    }
}
