//! `tern tune`: measures this host and writes a configuration of what it
//! chose, with the evidence beside each choice.
//!
//! The batteries (`batteries.rs`) run in order, each comparing candidate
//! settings side by side in `tern serve` children (`battery.rs`), each
//! stored in the lab's store as one run whose id the comments cite; later
//! batteries measure with what earlier ones chose. The output
//! (`output.rs`) is the base configuration with the chosen keys set, and
//! `tern serve --config` reads it unchanged (it is parsed before it is
//! written). `--io` alone is the older, narrower command (`profile.rs`).

mod batteries;
mod battery;
mod output;
pub mod profile;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tern_lab::load;
use tern_lab::probe::env::Environment;
use tern_lab::store::Recording;
use tern_server::Config;

pub use batteries::NAMES;
use battery::Lab;
use output::Change;

/// What `tern tune` is asked (its `--io` alone is [`profile::run`]).
pub struct Options {
    /// The short battery: 3 rounds of 250 ms samples and fewer candidates.
    pub quick: bool,
    /// Only these batteries (empty: all of [`NAMES`]).
    pub only: Vec<String>,
    /// The base configuration (default: tern's defaults).
    pub config: Option<PathBuf>,
    /// Where the configuration is written (default: standard output).
    pub output: Option<PathBuf>,
    /// How long each sample measures, as given (default 1s, quick 250ms).
    pub sample: Option<String>,
    pub recording: Recording,
}

/// Removes the batteries' files when the command ends, however it ends.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the batteries, one after the other, and writes the configuration.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let base = match &opts.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            Config::parse(&text, path)?;
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let dir = std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
            output::base(&text, &dir)?
        }
        None => toml::Table::new(),
    };
    let config_path = opts.config.clone().unwrap_or_else(|| PathBuf::from("tuned.toml"));
    let sample = match &opts.sample {
        Some(s) => load::parse_duration(s).map_err(anyhow::Error::msg)?,
        None if opts.quick => Duration::from_millis(250),
        None => Duration::from_secs(1),
    };
    if sample < Duration::from_millis(20) {
        bail!("--sample {}: at least 20ms", opts.sample.as_deref().unwrap_or_default());
    }
    let work = WorkDir(std::env::temp_dir().join(format!("tern-tune-{}", std::process::id())));
    let root = work.0.join("www");
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let interrupt = load::interrupt_on_ctrl_c()?;
    let env = Environment::capture(tern_lab::probe::cpu::governor(0));
    let mut lab = Lab {
        base: base.clone(),
        root: &root,
        rounds: if opts.quick { 3 } else { 5 },
        sample,
        warmup: sample / 2,
        quick: opts.quick,
        recording: &opts.recording,
        interrupt: &interrupt,
        tuned: Vec::new(),
    };
    let mut notes = Vec::new();
    for name in batteries::NAMES.iter().filter(|n| opts.only.is_empty() || opts.only.iter().any(|o| o.as_str() == **n))
    {
        // The base with what earlier batteries chose: its values are the
        // defaults this battery's candidates must beat.
        let now = lab.config(&config_path)?;
        let b = match batteries::battery(name, &lab, &now)? {
            Ok(b) => b,
            Err(why) => {
                eprintln!("tern tune: {why}");
                notes.push(why);
                continue;
            }
        };
        eprintln!("tern tune: {name}: {} candidates, {} rounds", b.candidates.len(), lab.rounds);
        let outcome = lab.run(&b)?;
        if outcome.interrupted {
            bail!("interrupted during `{name}` (stored as interrupted); no configuration written");
        }
        for f in outcome.failures.iter().take(3) {
            eprintln!("tern tune: {name}: failed sample: {f}");
        }
        let chosen = batteries::decide(&b, &outcome, &lab);
        for t in &chosen {
            let last = t.comment.last().map_or("", String::as_str);
            match &t.change {
                Change::Set(v) => eprintln!("tern tune: {}.{} = {v} ({last})", t.section, t.key),
                Change::Keep(v) => eprintln!("tern tune: {}.{} stays {v} ({last})", t.section, t.key),
                Change::Remove => {}
            }
        }
        lab.tuned.extend(chosen);
    }
    let header = header(opts, &env, &lab, &notes);
    let text = output::text(&base, &lab.tuned, &header)?;
    // What is written must be what `tern serve --config` accepts.
    let check_path = opts.output.clone().unwrap_or_else(|| PathBuf::from("tuned.toml"));
    Config::parse(&text, &check_path).context("the tuned configuration does not parse (a bug in tern tune)")?;
    match &opts.output {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("tern tune: configuration written to {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// The lines at the top of the written file: how, where and when it was
/// measured, and the machine's state.
fn header(opts: &Options, env: &Environment, lab: &Lab, notes: &[String]) -> Vec<String> {
    let mut lines = vec![
        format!(
            "Written by `tern tune{}` (tern {}) on {} ({}, {} of {} CPUs usable),",
            if opts.quick { " --quick" } else { "" },
            env!("CARGO_PKG_VERSION"),
            env.hostname,
            env.kernel,
            env.cores_usable,
            env.cores_online
        ),
        format!(
            "at {}; load average at the start {:.2} {:.2} {:.2} (other work on the machine disturbs the figures).",
            tern_lab::store::utc(tern_lab::store::now()),
            env.load_average[0],
            env.load_average[1],
            env.load_average[2]
        ),
        format!(
            "Base: {}. Each candidate is a `tern serve` on 127.0.0.1 loaded by tern's load generator; {} rounds,",
            opts.config.as_ref().map_or("tern's defaults".to_string(), |p| p.display().to_string()),
            lab.rounds
        ),
        format!(
            "each measuring every candidate for {} ms in turn (first round after a {} ms warm-up); a figure is the",
            lab.sample.as_millis(),
            lab.warmup.as_millis()
        ),
        "median of its rounds. A candidate replaces the default only when ahead of it by more than the noise (the"
            .into(),
        "half-spread of the rounds, at least 3%) on every workload its setting affects; otherwise the setting stays"
            .into(),
        "as the base has it and is not written (its evidence is). Ratios are to the default's median.".into(),
        format!("The runs are in {} (`tern lab show ID`).", opts.recording.path.display()),
    ];
    lines.extend(notes.iter().cloned());
    lines
}
