//! `tern tune --io`: only the static I/O method per file-size class, by
//! the server's own calibration (in process, over loopback, for longer than
//! at start-up), written as the profile `static.io_profile` reads.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tern_server::config::Seconds;
use tern_server::{calibrate, static_io, Config};

/// Calibrates for `duration` (as given, e.g. "3s") with the settings of
/// `config` (default: tern's) and writes the profile to `output` (default:
/// standard output).
pub fn run(config: Option<&Path>, duration: &str, output: Option<&Path>) -> anyhow::Result<()> {
    let config = match config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let budget = Seconds::parse(duration)
        .map(|s| s.0)
        .filter(|d| *d >= Duration::from_millis(50))
        .with_context(|| format!("--duration `{duration}`: expected a time of at least 50ms, e.g. \"3s\""))?;
    let st = &config.static_files;
    let bounds: Vec<u64> = st.io_classes.iter().map(|b| b.0).collect();
    let methods = config.sending_methods();
    let choices = calibrate::run(&bounds, static_io::safe_choices(&bounds), methods, budget, st, &config.limits)
        .context("calibration failed")?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let header = format!(
        "tern static I/O profile: written by `tern tune --io` (tern {}) on {} (Linux {}, {} usable CPUs)\n\
         at Unix time {}, measuring {} ms over loopback. Use it with static.io_profile = \"PATH\".",
        env!("CARGO_PKG_VERSION"),
        host.trim(),
        kernel.trim(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        now,
        budget.as_millis()
    );
    let text = static_io::profile_text(&bounds, &choices, &header);
    match output {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
            for (i, c) in choices.iter().enumerate() {
                eprintln!("tern: {} {} ({})", static_io::class_name(&bounds, i), c.method.name(), c.basis);
            }
            eprintln!("tern: profile written to {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}
