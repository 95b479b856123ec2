//! The batteries of `tern tune`: for each, the files it serves, the
//! candidates it compares (always including the base configuration's
//! value, "the default"), the workload, and how the verdicts become
//! settings with their evidence.

use std::fmt::Write as _;
use std::path::Path;

use tern_server::config::{IoMethod, Model};
use tern_server::{calibrate, static_io, Config};

use super::battery::{choose, setting, unit_of, Battery, Candidate, Decides, Lab, Outcome, Setting, Verdict, Workload};
use super::output::Tuned;
use crate::cmd::experiment::page;

/// The batteries, in the order they run (later ones measure with what
/// earlier ones chose).
pub const NAMES: [&str; 6] = ["io", "chunk", "cgi", "model", "levels", "adaptive"];

/// The battery `name` for the base configuration `c`, or why it is skipped.
pub fn battery(name: &str, lab: &Lab, c: &Config) -> anyhow::Result<Result<Battery, String>> {
    let off = |what: &str| -> anyhow::Result<Result<Battery, String>> {
        Ok(Err(format!("{what}: skipped, compression is off in the base configuration")))
    };
    match name {
        "io" => io(lab, c).map(Ok),
        "chunk" => chunk(lab, c).map(Ok),
        "cgi" => cgi(lab, c).map(Ok),
        "model" => model(lab, c).map(Ok),
        "levels" if !c.compression.enabled => off("levels"),
        "levels" => levels(lab, c).map(Ok),
        "adaptive" if !c.compression.enabled => off("adaptive"),
        "adaptive" => adaptive(lab, c).map(Ok),
        other => anyhow::bail!("no battery {other:?}: choose among {}", NAMES.join(", ")),
    }
}

/// `root/name`, `size` bytes of a varied pattern (written once).
fn file(root: &Path, name: &str, size: u64) -> anyhow::Result<String> {
    let path = root.join(name);
    if std::fs::metadata(&path).ok().map(|m| m.len()) != Some(size) {
        let body: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
        std::fs::write(&path, body)?;
    }
    Ok(format!("/{name}"))
}

fn workload(name: String, paths: Vec<String>, connections: usize, size: Option<u64>) -> Workload {
    Workload { name, paths, headers: Vec::new(), connections, size, identity: None }
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

/// The static I/O method per size class: a file of each class's typical
/// size (as the start-up calibration uses), each method fixed in turn.
fn io(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    let bounds: Vec<u64> = c.static_files.io_classes.iter().map(|b| b.0).collect();
    let safe = static_io::safe_choices(&bounds);
    let mut workloads = Vec::new();
    for i in 0..=bounds.len() {
        let size = calibrate::representative(&bounds, i);
        let path = file(lab.root, &format!("io-{size}.bin"), size)?;
        workloads.push(workload(static_io::class_name(&bounds, i), vec![path], 4, Some(size)));
    }
    Ok(Battery {
        name: "io",
        what: "static I/O method per size class: GET of a file of the class's typical size, 4 connections".into(),
        fixed: Vec::new(),
        candidates: static_io::METHODS
            .iter()
            .map(|m| Candidate { name: m.name().into(), settings: vec![setting("static", "io", m.name())] })
            .collect(),
        defaults: safe.iter().map(|s| static_io::index(s.method)).collect(),
        workloads,
        decides: Decides::IoMethods,
        fresh: false,
    })
}

/// `static.read_chunk`: the open-ended class's file sent by `read`.
fn chunk(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    let bounds: Vec<u64> = c.static_files.io_classes.iter().map(|b| b.0).collect();
    let size = calibrate::representative(&bounds, bounds.len());
    let path = file(lab.root, &format!("io-{size}.bin"), size)?;
    let list: &[u64] =
        if lab.quick { &[16 << 10, 64 << 10, 256 << 10] } else { &[16 << 10, 64 << 10, 256 << 10, 1 << 20] };
    let (candidates, at) = sizes("static", "read_chunk", c.static_files.read_chunk.0, list);
    Ok(Battery {
        name: "chunk",
        what: format!(
            "static.read_chunk (used by the classes sent by `read`): GET of a {} file sent by `read`, 4 connections",
            size_name(size)
        ),
        fixed: vec![setting("static", "io", IoMethod::Read.name())],
        candidates,
        defaults: vec![at],
        workloads: vec![workload(size_name(size), vec![path], 4, Some(size))],
        decides: Decides::One,
        fresh: false,
    })
}

/// `cgi.pipe_buffer`: a shell CGI program that sends 1 MiB.
fn cgi(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    let size = 1u64 << 20;
    let data = lab.root.parent().unwrap_or(lab.root).join("cgi-output.bin");
    let body: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
    std::fs::write(&data, body)?;
    let dir = lab.root.join("cgi-bin");
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
    let list: &[u64] =
        if lab.quick { &[16 << 10, 64 << 10, 256 << 10] } else { &[16 << 10, 64 << 10, 256 << 10, 1 << 20] };
    let (candidates, at) = sizes("cgi", "pipe_buffer", c.cgi.pipe_buffer.0, list);
    let mut interpreters = toml::Table::new();
    interpreters.insert("sh".into(), "/bin/sh".into());
    let mut fixed = vec![
        setting("cgi", "directories", vec!["/cgi-bin"]),
        setting("cgi", "interpreters", interpreters),
        setting("cgi", "max_processes", 64),
    ];
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Measuring servers only: the program is this battery's own.
        fixed.push(setting("cgi", "allow_root", true));
    }
    Ok(Battery {
        name: "cgi",
        what: "cgi.pipe_buffer: a /bin/sh CGI program sending 1MiB, 4 connections".into(),
        fixed,
        candidates,
        defaults: vec![at],
        workloads: vec![workload("cgi 1MiB".into(), vec!["/cgi-bin/out.sh".into()], 4, Some(size))],
        decides: Decides::One,
        fresh: false,
    })
}

/// The concurrency model and its thread count: a 1 KiB file, 16
/// connections.
fn model(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    let path = file(lab.root, "model-1KiB.bin", 1024)?;
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
    Ok(Battery {
        name: "model",
        what: "server.model and its thread count: GET of a 1KiB file, 16 connections".into(),
        fixed: Vec::new(),
        candidates,
        defaults: vec![at],
        workloads: vec![workload("1KiB".into(), vec![path], 16, Some(1024))],
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

/// The compression levels, per coding: a 41,518-byte page compressed
/// anew for every response (nothing cached, identity refused), scored in
/// bytes saved per second.
fn levels(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    const PAGE: usize = 41_518;
    std::fs::write(lab.root.join("page.html"), page(PAGE))?;
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
    let workloads = codings
        .iter()
        .map(|(name, _)| Workload {
            name: (*name).into(),
            paths: vec!["/page.html".into()],
            headers: vec![format!("Accept-Encoding: {name}, identity;q=0")],
            connections: 4,
            size: Some(PAGE as u64),
            identity: Some(PAGE as u64),
        })
        .collect::<Vec<_>>();
    Ok(Battery {
        name: "levels",
        what: format!(
            "compression levels: a {PAGE}-byte HTML page compressed for every response (no cache), 4 connections, \
             scored in bytes saved per second"
        ),
        fixed: vec![setting("compression", "cache_memory", 1), setting("static", "io", IoMethod::Mmap.name())],
        candidates,
        defaults: vec![1; workloads.len()],
        workloads,
        decides: Decides::PerWorkload(codings.iter().map(|(_, key)| ("compression", *key)).collect()),
        fresh: false,
    })
}

/// The adaptive thresholds: a cold burst (a fresh server per sample, many
/// distinct pages, 64 connections), scored in bytes saved per second.
fn adaptive(lab: &Lab, c: &Config) -> anyhow::Result<Battery> {
    const PAGE: usize = 11_426;
    let count = if lab.quick { 300 } else { 2000 };
    let dir = lab.root.join("burst");
    std::fs::create_dir_all(&dir)?;
    let body = page(PAGE);
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
    Ok(Battery {
        name: "adaptive",
        what: format!(
            "compression.adaptive and its thresholds: a cold burst ({count} distinct {PAGE}-byte pages in turn, a fresh \
             server per sample), 64 connections, scored in bytes saved per second"
        ),
        fixed: vec![setting("static", "io", IoMethod::Mmap.name())],
        candidates,
        defaults: vec![at],
        workloads: vec![Workload {
            name: format!("cold {coding}"),
            paths,
            headers: vec![format!("Accept-Encoding: {coding}")],
            connections: 64,
            size: Some(PAGE as u64),
            identity: Some(PAGE as u64),
        }],
        decides: Decides::One,
        fresh: true,
    })
}

/// The settings a battery's outcome chooses, each with its evidence.
pub fn decide(b: &Battery, o: &Outcome, lab: &Lab) -> Vec<Tuned> {
    let run = o.run_id.map_or("not stored".to_string(), |id| format!("run {id}"));
    let head = format!(
        "tern tune `{}`, {run}: {}; median of {} interleaved rounds of {} ms each.",
        b.name,
        b.what,
        lab.rounds,
        lab.sample.as_millis()
    );
    match &b.decides {
        Decides::One => {
            let samples: Vec<Vec<f64>> = o.samples.iter().map(|c| c[0].clone()).collect();
            let v = choose(&samples, b.defaults[0]);
            let mut lines = vec![head];
            lines.extend(evidence(b, o, 0, &v));
            let winner = &b.candidates[v.winner];
            keys(&winner.settings, &lines, b.name, &run)
        }
        Decides::PerWorkload(keys_of) => {
            let mut out = Vec::new();
            for (w, &(section, key)) in keys_of.iter().enumerate() {
                let samples: Vec<Vec<f64>> = o.samples.iter().map(|c| c[w].clone()).collect();
                let v = choose(&samples, b.defaults[w]);
                let mut lines = vec![head.clone()];
                lines.extend(evidence(b, o, w, &v));
                let value = b.candidates[v.winner].settings.iter().find(|s| s.section == section && s.key == key);
                if let Some(s) = value {
                    out.push(Tuned { section, key, value: Some(s.value.clone()), comment: lines });
                }
            }
            out
        }
        Decides::IoMethods => {
            let mut lines = vec![head];
            let mut methods = Vec::new();
            for w in 0..b.workloads.len() {
                let samples: Vec<Vec<f64>> = o.samples.iter().map(|c| c[w].clone()).collect();
                let v = choose(&samples, b.defaults[w]);
                lines.extend(evidence(b, o, w, &v));
                methods.push(toml::Value::from(static_io::METHODS[v.winner].name()));
            }
            vec![
                Tuned {
                    section: "static",
                    key: "io",
                    value: Some("auto".into()),
                    comment: vec![format!("\"auto\", so that static.io_methods apply (tern tune `io`, {run}).")],
                },
                Tuned { section: "static", key: "io_profile", value: None, comment: Vec::new() },
                Tuned {
                    section: "static",
                    key: "io_methods",
                    value: Some(toml::Value::Array(methods)),
                    comment: lines,
                },
            ]
        }
    }
}

/// The winner's keys: the evidence above the first, a pointer to it above
/// the others.
fn keys(settings: &[Setting], lines: &[String], battery: &str, run: &str) -> Vec<Tuned> {
    settings
        .iter()
        .enumerate()
        .map(|(i, s)| Tuned {
            section: s.section,
            key: s.key,
            value: Some(s.value.clone()),
            comment: if i == 0 {
                lines.to_vec()
            } else {
                vec![format!("Chosen with {}.{} (tern tune `{battery}`, {run}).", settings[0].section, settings[0].key)]
            },
        })
        .collect()
}

/// The comment lines for one workload's verdict: every candidate's median
/// as a ratio to the default's, the noise, and what was chosen and why.
fn evidence(b: &Battery, o: &Outcome, w: usize, v: &Verdict) -> Vec<String> {
    let wl = &b.workloads[w];
    let d = b.defaults[w];
    let (_, unit) = unit_of(wl);
    let base = v.medians[d];
    let ratio = |m: f64| if base > 0.0 { format!("{:.2}x", m / base) } else { "-".into() };
    let name = |c: usize| name_of(b, c, w);
    let mut shown = Vec::new();
    for c in 0..b.candidates.len() {
        let mut s = format!("{} {}", name(c), ratio(v.medians[c]));
        if c == d {
            s = format!("{} (default) = {:.0} {unit}", name(c), base);
        }
        if let Some(per) = o.bytes.get(c).and_then(|x| x.get(w)).filter(|_| wl.identity.is_some()) {
            let _ = write!(s, ", {per:.0} B/response");
        }
        shown.push(s);
    }
    let mut lines = vec![format!("{}: {}; noise {:.0}%.", wl.name, shown.join("; "), v.noise * 100.0)];
    let best = (0..v.medians.len()).max_by(|&x, &y| v.medians[x].total_cmp(&v.medians[y])).unwrap_or(d);
    lines.push(if v.medians.iter().all(|&m| m <= 0.0) {
        let why = o.failures.first().map_or("no sample", String::as_str);
        format!("{}: not measured ({why}); the default {} stays.", wl.name, name(d))
    } else if v.winner != d {
        format!("{}: chosen {}, {} the default.", wl.name, name(v.winner), ratio(v.medians[v.winner]))
    } else if v.kept {
        format!(
            "{}: kept the default {}: {} at {} is within the noise.",
            wl.name,
            name(d),
            name(best),
            ratio(v.medians[best])
        )
    } else {
        format!("{}: kept the default {}: no candidate measured ahead of it.", wl.name, name(d))
    });
    lines
}

/// A candidate as one workload's verdict names it: by the key that
/// workload decides (`gzip_level 1`), else by its name.
fn name_of(b: &Battery, c: usize, w: usize) -> String {
    let cand = &b.candidates[c];
    if let Decides::PerWorkload(keys) = &b.decides {
        if let Some(s) = cand.settings.iter().find(|s| (s.section, s.key) == keys[w]) {
            return format!("{} {}", s.key, s.value);
        }
    }
    cand.name.clone()
}
