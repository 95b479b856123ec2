//! `tern bench`: flags in, a load run out. Everything else lives in
//! `tern_lab::load`, so tests and the lab drive the same code as the CLI.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tern_lab::agent::client::Agent;
use tern_lab::load::{self, plan, Options, Plan, RequestSpec, Stop, Url};
use tern_lab::probe::env::Environment;
use tern_lab::store::{self, record};

use crate::flags::{Reach, Record};

const LONG_HELP: &str = "\
Examples:
  tern bench -c 100 -t 2 -d 10s http://127.0.0.1:8080/index.html
      closed loop: 100 connections, each sends its next request on a response
  tern bench -c 50 -d 30s --rate 2000 http://127.0.0.1:8080/
      open loop: 2000 requests/s whatever the server does; latency is also
      measured from each request's intended send time, so stalls show
  tern bench -n 10000 --pipeline 16 -H 'Accept-Encoding: gzip' http://host/
  tern bench -m POST --body-file form.txt -H 'Content-Type: text/plain' http://host/cgi-bin/x
  tern bench --mix site.mix -d 20s --json http://127.0.0.1:8080/
  tern bench --h2 -c 32 --streams 10 -d 10s -k https://127.0.0.1:8443/1k.bin
      HTTP/2 (ALPN h2; with http:// URLs h2c by prior knowledge), 10
      concurrent streams per connection, like h2load -c32 -m10

Mix files (--mix FILE) spread requests over several URLs of one server:

  # Lines: [WEIGHT] [METHOD] URL      (blank lines and # comments are ignored)
  70 /static/115k.bin
  30 POST /cgi-bin/form.cgi
      Content-Type: application/x-www-form-urlencoded
      @body name=tern&size=115k
  5 PUT http://127.0.0.1:8080/upload
      @body-file payload.bin

  WEIGHT is a positive integer (default 1): an entry gets weight/total of the
  requests, in a precomputed interleaved order, so proportions are exact.
  METHOD defaults to -m (GET). URL is http://host[:port]/path, or a path
  starting with / resolved against the URL on the command line; all entries
  must target the same host and port. Indented lines belong to the entry
  above: 'Name: value' adds a header, '@body TEXT' sets the body, '@body-file
  PATH' reads it from a file (relative to the mix file). Content-Length is
  computed. -H headers apply to every entry unless it sets the same header.

Waiting: a generator thread alone on its CPU (pinned apart from the server) is
not woken by every response, so that a saturated server does not pay for
waking it. With --no-keepalive it polls for up to 1ms before it sleeps (its
CPU then shows near 100% busy); with kept-alive connections in closed loop, 8
or more requests in flight and responses of 64KiB or less it naps (at most
64us, while the server answers a quarter of them) and then takes what arrived.
Kept-alive open loop (--rate), and a thread that shares its CPU, sleep until
woken.

Output: a summary on stdout (or JSON with --json, including the latency
histograms in HdrHistogram V2 deflate + base64 so runs can be merged exactly),
a progress bar on stderr when it is a terminal. Errors are counted by class:
connect, read, write, timeout, status (responses other than 2xx/3xx), and
with --h2 reset (RST_STREAM) and goaway (GOAWAY with an error code; the
requests a graceful GOAWAY left unprocessed are sent again, as after
Connection: close).
Ctrl-C stops the run and prints what was measured; a second Ctrl-C exits.
Exit status: 0 when the run was made and at least one response was a 2xx or
3xx, 1 when none was (every request 404, refused or timed out: the summary
says FAILED), 2 when the run could not be made (bad URL or mix file,
unreachable host).";

#[derive(clap::Args)]
#[command(after_long_help = LONG_HELP)]
pub struct Args {
    /// Target URL, http://host[:port]/path. With --mix, the base that paths
    /// in the mix file are resolved against.
    #[arg(required_unless_present = "mix")]
    pub url: Option<String>,
    /// Request mix: URLs with weights, methods, headers, bodies (format in --help).
    #[arg(long, value_name = "FILE")]
    pub mix: Option<PathBuf>,
    /// Connections to keep open (spread over the threads).
    #[arg(short = 'c', long, default_value_t = 10)]
    pub connections: usize,
    /// Worker threads, each with its own epoll loop.
    #[arg(short = 't', long, default_value_t = 2)]
    pub threads: usize,
    /// Measure for this long (10s, 500ms, 2m) [default: 10s].
    #[arg(short = 'd', long, value_parser = load::parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,
    /// Measure exactly this many requests instead of a duration.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Load the server this long before measuring.
    #[arg(long, value_parser = load::parse_duration, default_value = "0s")]
    pub warmup: Duration,
    /// One request per connection (sends Connection: close; the TCP
    /// handshake is then part of every request's latency). A thread alone
    /// on its CPU then polls up to 1ms before sleeping (see Waiting below):
    /// expect its CPU near 100%.
    #[arg(long)]
    pub no_keepalive: bool,
    /// https://: accept any server certificate.
    #[arg(long, short = 'k')]
    pub insecure: bool,
    /// https://: trust the CA certificates in this PEM file (default: the
    /// system's).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub cacert: Option<PathBuf>,
    /// https://: a full handshake on every connection (no session
    /// resumption).
    #[arg(long)]
    pub no_resumption: bool,
    /// Requests in flight per connection: HTTP/1.1 pipelining, or with
    /// --h2 concurrent streams (h2load's -m; -m is the method here).
    #[arg(long, visible_alias = "streams", value_name = "N", default_value_t = 1)]
    pub pipeline: usize,
    /// Speak HTTP/2: over TLS when the server selects h2 by ALPN
    /// (https://), else by prior knowledge (h2c, http://).
    #[arg(long)]
    pub h2: bool,
    /// Open loop: send this many requests per second in total, whatever the
    /// server does, and also measure latency from each intended send time.
    #[arg(short = 'R', long, value_name = "REQ_PER_S")]
    pub rate: Option<f64>,
    /// Add a header to every request, e.g. -H 'Accept-Encoding: gzip'.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Request method (with --mix: for entries that name none).
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// Request body.
    #[arg(long, conflicts_with_all = ["body_file", "mix"])]
    pub body: Option<String>,
    /// Request body, read from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "mix")]
    pub body_file: Option<PathBuf>,
    /// A request without a complete response after this long fails.
    #[arg(long, value_parser = load::parse_duration, default_value = "10s")]
    pub timeout: Duration,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write one CSV row per request (start, end, status, bytes, connection).
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Run the load from this `tern agent` (HOST:PORT; repeatable): every
    /// agent makes the same run at one coordinated start, and the latency
    /// histograms are merged exactly.
    #[arg(long, value_name = "HOST:PORT", requires = "token_file", conflicts_with = "timeline")]
    pub agent: Vec<String>,
    #[command(flatten)]
    pub reach: Reach,
    #[command(flatten)]
    pub record: Record,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.agent.is_empty() {
        return distributed(&args);
    }
    // Before the load, so the load average is the machine's, not ours.
    let env = Environment::capture(tern_lab::probe::cpu::governor(0));
    let started = store::now();
    let report = load_run(&args, std::io::stderr().is_terminal(), true)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    let ctx = record::Context::here(args.record.label.clone(), started);
    args.record.recording().save(&record::bench(&report, env, ctx));
    Ok(if report.successes == 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `tern bench` arguments as an agent receives them.
#[derive(Parser)]
#[command(name = "tern bench", no_binary_name = true)]
struct AgentArgs {
    #[command(flatten)]
    args: Args,
}

/// Parses and runs a load run ordered by an agent's master; the report as
/// JSON. What `tern agent` runs, so the arguments' syntax lives here only.
pub fn run_for_agent(argv: Vec<String>) -> Result<String, String> {
    let parsed = AgentArgs::try_parse_from(argv).map_err(|e| e.to_string())?;
    if !parsed.args.agent.is_empty() {
        return Err("an agent does not order other agents".into());
    }
    let report = load_run(&parsed.args, false, false).map_err(|e| format!("{e:#}"))?;
    Ok(report.to_json())
}

/// Makes the load run the arguments describe (here, or on an agent that
/// received them). `ctrl_c`: the first Ctrl-C stops the run and reports it.
fn load_run(args: &Args, progress: bool, ctrl_c: bool) -> anyhow::Result<load::Report> {
    let base = args.url.as_deref().map(Url::parse).transpose()?;
    let specs = match (&args.mix, base) {
        (Some(mix), base) => plan::parse_mix_file(mix, base.as_ref(), &args.method)?,
        (None, Some(url)) => {
            let mut spec = RequestSpec::new(&args.method, url);
            if let Some(body) = &args.body {
                spec.body = body.clone().into_bytes();
            }
            if let Some(path) = &args.body_file {
                spec.body =
                    std::fs::read(path).with_context(|| format!("cannot read the body file {}", path.display()))?;
            }
            vec![spec]
        }
        (None, None) => anyhow::bail!("give a URL or --mix FILE"),
    };
    let headers = args.headers.iter().map(|h| plan::parse_header(h)).collect::<Result<Vec<_>, _>>()?;
    let keepalive = !args.no_keepalive;
    let plan = Plan::build(&specs, &headers, keepalive)?;
    let stop = match (args.requests, args.duration) {
        (Some(n), _) => Stop::Requests(n),
        (None, Some(d)) => Stop::Duration(d),
        (None, None) => Stop::Duration(Duration::from_secs(10)),
    };
    let opts = Options {
        connections: args.connections,
        threads: args.threads,
        stop,
        warmup: args.warmup,
        keepalive,
        pipeline: args.pipeline,
        h2: args.h2,
        rate: args.rate,
        timeout: args.timeout,
        timeline: args.timeline.clone(),
        progress,
        mix_file: args.mix.clone(),
        tls: load::tls::TlsOptions {
            insecure: args.insecure,
            cacert: args.cacert.clone(),
            no_resumption: args.no_resumption,
        },
    };
    // An agent's runs stop on their own; Ctrl-C there stops the agent.
    let interrupt = if ctrl_c { load::interrupt_on_ctrl_c()? } else { Default::default() };
    Ok(load::run(&plan, &opts, &interrupt)?)
}

/// The options that concern the master only: not forwarded to agents.
const MASTER_ONLY: &[&str] = &["--agent", "--token-file", "--agent-ca"];

/// The command line after `bench`, less the master's own options: what each
/// agent runs.
fn forwarded_args() -> Vec<String> {
    let mut out = Vec::new();
    let mut args = std::env::args().skip_while(|a| a != "bench").skip(1);
    while let Some(a) = args.next() {
        if MASTER_ONLY.contains(&a.as_str()) {
            args.next();
        } else if !MASTER_ONLY.iter().any(|o| a.strip_prefix(o).is_some_and(|rest| rest.starts_with('='))) {
            out.push(a);
        }
    }
    out
}

/// `tern bench --agent A --agent B …`: the same run on every agent at one
/// start time, the histograms merged exactly.
fn distributed(args: &Args) -> anyhow::Result<ExitCode> {
    let access = args.reach.access()?;
    let agents = args.agent.iter().map(|a| Agent::connect(a, &access)).collect::<Result<Vec<_>, _>>()?;
    let expected = args.warmup
        + match (args.requests, args.duration) {
            (Some(_), _) => Duration::from_secs(300),
            (None, d) => d.unwrap_or(Duration::from_secs(10)),
        };
    let report = tern_lab::agent::distributed::run(agents, &forwarded_args(), expected)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(if report.total.requests == 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
