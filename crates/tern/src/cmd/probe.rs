//! `tern probe`: flags in, a probe run out; the measuring is in
//! `tern_lab::probe`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tern_lab::agent::access::Remote;
use tern_lab::load;
use tern_lab::probe::{self, Options, Pin, Suite};
use tern_lab::remote;
use tern_lab::store::{self, record};

use crate::flags::{Reach, Record};

const LONG_HELP: &str = "\
Suites: syscalls, processes, commands, disk, ipc, net, rpc, files (all by default).
With --agent HOST:PORT (repeatable) the suites run on each agent and the
reports come back (JSON: an array, one per agent); the rpc suite is timed from
here against the agent, with the null-RPC time (measured at the start and the
end) subtracted from its transfers and reported, and the net suite runs from
here against a peer the agent starts on its address for the run. An agent
that fails is named; the others' reports are still printed (exit status 2).
--agent-ca CA.pem: the agents speak TLS with certificates that CA signed.

Examples:
  tern probe                          every suite on this machine
  tern probe syscalls ipc --samples 21
  tern probe disk --path /mnt/ssd     write+fsync and warm/cold reads there
  tern probe commands -x 'gzip -c /etc/services' -x 'python3 -c pass'
  tern probe all --quick --json > host.json
  tern probe --agent b:7700 --agent c:7700 --token-file t syscalls rpc
  tern probe --agent b:7700 --token-file t --agent-ca ca.pem net

Arithmetic: each figure is timed with CLOCK_MONOTONIC in intervals calibrated
to --interval (iterations grow x8 until an interval exceeds 150 us, then are
scaled to the target); the cost of a clock read and of an empty loop iteration
are measured in the same run and subtracted from every interval, clamped at 0.
The table shows the corrected median (value), the raw median, the overhead
subtracted, the corrected quartiles and best sample, and samples x iterations;
'noisy' marks an interquartile spread above 10% of the median. Bandwidths
(MB/s = 10^6 bytes/s) are computed from the corrected times.

The process pins itself to the CPU it starts on (--cpu N to choose, --no-pin
to let it float) and records the frequency governor, kernel, CPU model,
mitigations, cores, cgroup quota, memory, virtualisation and load average
(in the JSON output).";

#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// Suites to run (default: all).
    #[arg(value_name = "SUITE")]
    pub suites: Vec<String>,
    /// Intervals timed per figure; the median and quartiles are over these.
    #[arg(long, default_value_t = probe::DEFAULT_SAMPLES)]
    pub samples: usize,
    /// Length each interval is calibrated to.
    #[arg(long, value_parser = load::parse_duration, default_value = "5ms")]
    pub interval: Duration,
    /// Few sizes and short intervals (5 samples of 300 us): a first look.
    #[arg(long)]
    pub quick: bool,
    /// Pin to this CPU instead of the one the process starts on.
    #[arg(long, value_name = "N", conflicts_with = "no_pin")]
    pub cpu: Option<usize>,
    /// Do not pin to a CPU.
    #[arg(long)]
    pub no_pin: bool,
    /// Directory for the disk and files suites' scratch files.
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// A command for the commands suite, run by /bin/sh -c (repeatable;
    /// default: /bin/true).
    #[arg(short = 'x', long = "command", value_name = "CMD")]
    pub commands: Vec<String>,
    /// Print the results as JSON, with the environment.
    #[arg(long)]
    pub json: bool,
    /// Run the suites on this `tern agent` (HOST:PORT; repeatable: hosts
    /// side by side). The rpc suite is timed from here, null RPC subtracted.
    #[arg(long, value_name = "HOST:PORT", requires = "token_file")]
    pub agent: Vec<String>,
    #[command(flatten)]
    pub reach: Reach,
    #[command(flatten)]
    pub record: Record,
}

/// The suites named on the command line; none or `all` means every suite.
fn suites(names: &[String]) -> anyhow::Result<Vec<Suite>> {
    if names.is_empty() || names.iter().any(|n| n == "all") {
        return Ok(Suite::ALL.to_vec());
    }
    names.iter().map(|n| Suite::parse(n).map_err(anyhow::Error::msg)).collect()
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let suites = suites(&args.suites)?;
    if args.samples == 0 {
        anyhow::bail!("--samples must be at least 1");
    }
    let mut opts = Options {
        samples: args.samples,
        interval: args.interval,
        pin: match (args.no_pin, args.cpu) {
            (true, _) => Pin::None,
            (false, Some(c)) => Pin::Cpu(c),
            (false, None) => Pin::Current,
        },
        progress: std::io::stderr().is_terminal(),
        ..Options::default()
    };
    if let Some(path) = args.path {
        opts.path = path;
    }
    if !args.commands.is_empty() {
        opts.commands = args.commands;
    }
    if args.quick {
        opts = opts.quick();
    }
    let recording = args.record.recording();
    if args.agent.is_empty() {
        let started = store::now();
        let report = remote::run(&suites, &opts)?;
        if args.json {
            println!("{}", report.to_json());
        } else {
            print!("{report}");
        }
        recording.save(&record::probe(&report, record::Context::here(recording.label.clone(), started)));
        return Ok(ExitCode::SUCCESS);
    }
    let access = args.reach.access()?;
    // One agent after the other, so none disturbs another's figures (nor
    // the master's timing of the rpc and net suites); one that fails is
    // named at the end and does not cost the others their reports.
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for addr in &args.agent {
        let agent = Remote { addr: addr.clone(), access: access.clone() };
        let started = store::now();
        match remote::run_on(&agent, &suites, &opts) {
            Ok(r) => {
                recording.save(&record::probe(&r, record::Context::here(recording.label.clone(), started)));
                reports.push(r);
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    if reports.is_empty() {
        // Nothing to print: the error below says why.
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            println!("{r}");
        }
        if reports.len() > 1 {
            print!("{}", probe::report::SideBySide(&reports));
        }
    }
    if !failures.is_empty() {
        anyhow::bail!("{} of {} agents failed: {}", failures.len(), args.agent.len(), failures.join("; "));
    }
    Ok(ExitCode::SUCCESS)
}
