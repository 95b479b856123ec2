use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Target URL.
    pub url: String,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("tern bench is being built (issue 3)")
}
