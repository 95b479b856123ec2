//! `tern man`: the manual pages, generated from the command-line definitions
//! so they never drift from `--help`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Args)]
#[command(after_help = "\
EXAMPLES:
    tern man target/man && man -l target/man/tern-serve.1
    sudo tern man /usr/local/share/man/man1")]
pub struct Args {
    /// Directory the pages are written to (created if missing): tern.1 and
    /// one page per subcommand (tern-serve.1, tern-bench.1, tern-man.1).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub fn run(args: Args, command: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
    clap_mangen::generate_to(command, &args.dir).with_context(|| format!("cannot write to {}", args.dir.display()))?;
    Ok(ExitCode::SUCCESS)
}
