//! `tern tune`: flags in, the tuner of `tern_experiments::tune` run, its
//! configuration (or with `--io` its I/O profile) out.

use std::path::PathBuf;
use std::process::ExitCode;

use tern_experiments::tune;

use crate::flags::Record;

#[derive(clap::Args)]
#[command(after_help = "\
BATTERIES (in this order; each stored as a run of kind `tune`):
    io        static.io_methods: sendfile, mmap or read per file-size class
    chunk     static.read_chunk: the buffer of the `read` method
    cgi       cgi.pipe_buffer: bytes read from a CGI program per read
    model     server.model with server.workers (event) or server.threads (pool)
    levels    compression.gzip_level, br_level, zstd_level (bytes saved per second)
    adaptive  compression.adaptive, busy_accept_queue, busy_in_flight (a cold burst)

EXAMPLES:
    tern tune -o /etc/tern/tuned.toml                 a few minutes
    tern tune --quick -o tuned.toml                   under a minute
    tern tune --config /etc/tern/tern.toml -o tuned.toml --only model,levels
    tern serve --check --config tuned.toml
    tern tune --io -o /etc/tern/io-profile.toml       only the I/O profile (static.io_profile)

A candidate replaces the default (the --config file's value, else tern's) only
when its median is ahead by more than the noise; the comment above each
written key says which it was, with the ratios and the store's run id.")]
pub struct Args {
    /// Only the static I/O method per size class, by the server's own
    /// in-process calibration, written as a profile for
    /// `static.io_profile` (not a configuration).
    #[arg(long, conflicts_with_all = ["quick", "only", "sample"])]
    pub io: bool,
    /// The short battery (under a minute): 3 rounds of 250 ms samples and
    /// fewer candidates, instead of 5 rounds of 1 s.
    #[arg(long)]
    pub quick: bool,
    /// Run only these batteries (comma-separated; default: all).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = tune::NAMES)]
    pub only: Vec<String>,
    /// The base configuration: its settings are kept, its values are the
    /// defaults candidates must beat (default: tern's defaults).
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where to write the configuration (default: standard output).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// How long each sample measures, e.g. "2s", "100ms" (default 1s;
    /// with --quick 250ms).
    #[arg(long, value_name = "TIME")]
    pub sample: Option<String>,
    /// With --io: how long the calibration measures, e.g. "3s", "500ms".
    #[arg(long, value_name = "TIME", default_value = "3s")]
    pub duration: String,
    #[command(flatten)]
    pub record: Record,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.io {
        tune::profile::run(args.config.as_deref(), &args.duration, args.output.as_deref())?;
    } else {
        tune::run(&tune::Options {
            quick: args.quick,
            only: args.only,
            config: args.config,
            output: args.output,
            sample: args.sample,
            recording: args.record.recording(),
        })?;
    }
    Ok(ExitCode::SUCCESS)
}
