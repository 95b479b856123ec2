//! `tern lab`: the results store (list, show, export, import, delete), the
//! experiments (`run`, in `tern_experiments::experiment`) and the
//! dashboard (`serve`, `report`: `lab/dashboard.rs`).

mod dashboard;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use tern_experiments::experiment;
use tern_lab::agent::access::Remote;
use tern_lab::store::{self, Filter, Recording, Status, Store};

use crate::flags::{store_path, Reach};

const LONG_HELP: &str = "\
Every `tern bench`, `tern probe`, `tern lab run` and `tern tune` run is
recorded in the store (unless --no-store): the host (the probe's environment
capture), tern's version, the command line and settings, the whole report
with its HdrHistogram snapshots, and the start and end times. A run stopped with Ctrl-C is stored as
interrupted; a run is written in one transaction, never in part.

Examples:
  tern lab list --kind bench
  tern lab show 12
  tern lab export 12 13 --format csv -o runs.csv
  tern lab export 12 13 -o runs.json && tern lab import runs.json --store other.sqlite
  tern lab delete 12
  tern lab run e1 --quick             CGI output disciplines and file methods (gwbench; make -C gateway)
  tern lab run e2 --quick             tern's static I/O methods beside the FastCGI file server
  tern lab run e3 --quick             concurrency models x CGI share x CPUs: saturation points
  tern lab run e4 --quick             compression by page size, 1 connection and 16, cold burst
  tern lab run e5 --agent b:7700 --token-file t   the OS probes here and on b, side by side
  tern lab run e1 --quick --no-store  print the table, store nothing
  tern lab serve                      the dashboard on http://127.0.0.1:8686/ (a run's page: /run/ID)
  tern lab report 12 13 -o report.html";

#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// The results store (SQLite)
    /// [default: $XDG_DATA_HOME/tern/lab.sqlite, else ~/.local/share/tern/lab.sqlite].
    #[arg(long, value_name = "PATH", global = true)]
    pub store: Option<PathBuf>,
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(clap::Subcommand)]
pub enum LabCommand {
    /// List the stored runs, newest first.
    List {
        /// Only runs of this kind (bench, probe, e1 … e5, tune).
        #[arg(long)]
        kind: Option<String>,
        /// Only runs on this host (its id, as `tern lab hosts` shows).
        #[arg(long, value_name = "ID")]
        host: Option<i64>,
        /// Only runs that ended so: complete, interrupted, failed.
        #[arg(long, value_parser = ["complete", "interrupted", "failed"])]
        status: Option<String>,
        /// Only runs whose label contains TEXT.
        #[arg(long, value_name = "TEXT")]
        grep: Option<String>,
    },
    /// List the hosts runs were made on.
    Hosts,
    /// Show one run: how it was made and what it measured.
    Show { id: i64 },
    /// Write runs as JSON (whole, for `import`) or CSV (one row per measurement).
    Export {
        #[arg(required = true)]
        ids: Vec<i64>,
        #[arg(long, value_parser = ["json", "csv"], default_value = "json")]
        format: String,
        /// Write to FILE instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Add the runs of a JSON export to the store (as new runs).
    Import { file: PathBuf },
    /// Delete runs with their measurements and histograms.
    Delete {
        #[arg(required = true)]
        ids: Vec<i64>,
    },
    /// Run an experiment (e1 CGI output disciplines, e2 file I/O methods
    /// beside the FastCGI file server, e3 concurrency models, e4
    /// compression, e5 OS probes), store it as one run, print its table and
    /// the address of its page on the dashboard.
    Run {
        #[arg(value_parser = experiment::NAMES)]
        name: String,
        /// The short version (well under two minutes).
        #[arg(long)]
        quick: bool,
        /// e1, e2, e3: the directory of the gateway's built programs
        /// (gwbench, fcgi-files, hello.cgi) [default: gateway/build of the repository
        /// this tern was built in, or of the current directory].
        #[arg(long, value_name = "DIR")]
        gateway: Option<PathBuf>,
        /// A label for the run in the store.
        #[arg(long, value_name = "TEXT", default_value = "")]
        label: String,
        /// Run and print the table, but store nothing.
        #[arg(long)]
        no_store: bool,
        /// e5: also run the suites on this `tern agent` (HOST:PORT;
        /// repeatable), one column per host; each host's run is stored.
        #[arg(long, value_name = "HOST:PORT", requires = "token_file")]
        agent: Vec<String>,
        #[command(flatten)]
        reach: Reach,
    },
    /// Serve the dashboard (runs, hosts, charts) with tern's own server.
    Serve {
        /// Address to listen on (port 0 picks one; it is printed).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8686")]
        listen: String,
    },
    /// Write a self-contained HTML report of runs: each experiment's page,
    /// the other runs' charts (SVG inlined; opens offline).
    Report {
        #[arg(required = true)]
        ids: Vec<i64>,
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
}

fn open(given: Option<&Path>) -> anyhow::Result<Store> {
    Ok(Store::open(&store_path(given))?)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let given = args.store.as_deref();
    match args.command {
        LabCommand::List { kind, host, status, grep } => {
            let filter = Filter { kind, host, status: status.as_deref().map(status_of), text: grep };
            let runs = open(given)?.list(&filter)?;
            println!(
                "{:>5}  {:<23}  {:<6}  {:<11}  {:<16}  {:>5}  LABEL",
                "ID", "STARTED", "KIND", "STATUS", "HOST", "MEAS"
            );
            for r in runs {
                println!(
                    "{:>5}  {:<23}  {:<6}  {:<11}  {:<16}  {:>5}  {}",
                    r.id,
                    store::utc(r.started_at),
                    r.kind,
                    r.status.name(),
                    r.host.hostname,
                    r.measurements,
                    r.label
                );
            }
        }
        LabCommand::Hosts => {
            for (h, env, runs) in open(given)?.hosts()? {
                println!(
                    "{:>3}  {}  ({runs} runs; {} usable CPUs, {} KiB memory, {})",
                    h.id, h.fingerprint, env.cores_usable, env.memory_total_kib, env.virtualisation
                );
            }
        }
        LabCommand::Show { id } => print!("{}", show(&open(given)?.get(id)?)),
        LabCommand::Export { ids, format, output } => {
            let store = open(given)?;
            let runs = ids.iter().map(|&id| store.get(id)).collect::<Result<Vec<_>, _>>()?;
            let text = if format == "csv" { store::csv(&runs) } else { store::to_json(&runs) };
            match output {
                Some(path) => {
                    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?
                }
                None => print!("{text}"),
            }
        }
        LabCommand::Import { file } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let ids = store::import_json(&mut open(given)?, &text)
                .with_context(|| format!("cannot import {}", file.display()))?;
            let shown: Vec<String> = ids.iter().map(i64::to_string).collect();
            println!("imported {} runs as {}", ids.len(), shown.join(" "));
        }
        LabCommand::Run { name, quick, gateway, label, no_store, agent, reach } => {
            if no_store && given.is_some() {
                anyhow::bail!("--no-store and --store contradict each other: give one");
            }
            if !agent.is_empty() && name != "e5" {
                anyhow::bail!("--agent is for e5 (the probe suites); {name} runs on this host only");
            }
            let recording = Recording { path: store_path(given), no_store, label };
            // The token is read before anything is measured: a wrong path
            // fails at once.
            let agents = if agent.is_empty() {
                Vec::new()
            } else {
                let access = reach.access()?;
                agent.into_iter().map(|addr| Remote { addr, access: access.clone() }).collect()
            };
            experiment::run(&name, quick, gateway.as_deref(), &agents, &recording)?;
        }
        LabCommand::Serve { listen } => return dashboard::serve(store_path(given), &listen),
        LabCommand::Report { ids, output } => return dashboard::report(store_path(given), &ids, &output),
        LabCommand::Delete { ids } => {
            let mut store = open(given)?;
            for id in ids {
                store.delete(id)?;
                println!("deleted run {id}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn status_of(name: &str) -> Status {
    match name {
        "interrupted" => Status::Interrupted,
        "failed" => Status::Failed,
        _ => Status::Complete,
    }
}

/// `tern lab show`: the run's facts, then its measurements as a table.
fn show(run: &store::Run) -> String {
    use std::fmt::Write;
    let d = &run.data;
    let e = &d.environment;
    let mut s = String::new();
    let _ = writeln!(s, "run {}: {} ({}), {}", run.id, d.kind, d.status.name(), d.label);
    let _ = writeln!(
        s,
        "started {}, took {:.1} s, tern {}",
        store::utc(d.started_at),
        d.finished_at - d.started_at,
        d.tern_version
    );
    let _ = writeln!(s, "host {} (id {}): {}", run.host.hostname, run.host.id, run.host.fingerprint);
    let _ = writeln!(s, "  {}", e.machine_state());
    let _ = writeln!(s, "command: {}", d.command_line.join(" "));
    let _ = writeln!(s, "config: {}", d.config);
    let _ = writeln!(s, "{:<40} {:<16} {:>14} {:<8}", "SUBJECT", "METRIC", "VALUE", "UNIT");
    for m in &d.measurements {
        let _ = writeln!(
            s,
            "{:<40} {:<16} {:>14} {:<8}",
            m.subject,
            m.metric,
            tern_lab::probe::report::num(m.value),
            m.unit
        );
    }
    let names: Vec<String> = d.histograms.iter().map(|h| format!("{}/{}", h.subject, h.name)).collect();
    if !names.is_empty() {
        let _ = writeln!(s, "histograms: {}", names.join(", "));
    }
    s
}
