use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Document root.
    pub dir: Option<std::path::PathBuf>,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("tern serve is being built (issue 2)")
}
