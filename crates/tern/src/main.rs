//! `tern`: one binary for the server, the load generator and the lab.

mod cmd;
mod flags;

use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tern", version, about = "A measuring HTTP/1.1 server and its performance lab")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a directory (static files, CGI) over HTTP/1.1.
    Serve(cmd::serve::Args),
    /// Generate HTTP load against a URL and report throughput and latency.
    Bench(cmd::bench::Args),
    /// Write the manual pages (roff) into a directory.
    Man(cmd::man::Args),
    /// Measure this host and write a configuration of the settings that
    /// win here (I/O methods, buffers, model and threads, compression),
    /// each with its evidence.
    Tune(cmd::tune::Args),
    /// Measure what the operating system costs: syscalls, processes, disk,
    /// IPC, network, RPC, file I/O methods.
    Probe(cmd::probe::Args),
    /// Serve tern's built-in probes and load to a master (gRPC, token).
    Agent(cmd::agent::Args),
    /// The performance lab: the results store of every run.
    Lab(cmd::lab::Args),
    /// Show which site and location a request reaches, every rule looked
    /// at and why, and what would be answered.
    Route(cmd::route::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => cmd::serve::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Man(args) => cmd::man::run(args, Cli::command()),
        Command::Tune(args) => cmd::tune::run(args),
        Command::Probe(args) => cmd::probe::run(args),
        // The agent runs `tern bench` arguments with bench's own parser.
        Command::Agent(args) => cmd::agent::run(args, Arc::new(cmd::bench::run_for_agent)),
        Command::Lab(args) => cmd::lab::run(args),
        Command::Route(args) => cmd::route::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tern: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}
