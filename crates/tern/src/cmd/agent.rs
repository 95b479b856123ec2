//! `tern agent`: serve tern's built-in probes and load to a master that
//! presents the token.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use tern_lab::agent;
use tern_lab::agent::access::{read_pem, read_token, Access};
use tern_lab::agent::server::Work;

#[derive(clap::Args)]
#[command(after_help = "\
EXAMPLES:
    head -c 32 /dev/urandom | base64 > agent.token     # the same file on master and agents
    tern agent --listen 0.0.0.0:7700 --token-file agent.token
    tern probe --agent host-b:7700 --token-file agent.token syscalls rpc
    tern bench --agent host-b:7700 --agent host-c:7700 --token-file agent.token -c 100 -d 30s http://server/
  over TLS (the master checks the agent's certificate against its CA):
    tern agent --listen 0.0.0.0:7700 --token-file agent.token --tls-cert b.pem --tls-key b.key
    tern probe --agent host-b:7700 --token-file agent.token --agent-ca ca.pem net rpc

The agent runs nothing but tern's built-in probe suites, the net suite's peer
and `tern bench` load, for callers presenting the token (gRPC metadata
`authorization: Bearer TOKEN`); any other call is refused. Without
--tls-cert/--tls-key its traffic is plain HTTP/2 and the token travels in
clear: keep it on a trusted network. With them it speaks TLS only.")]
pub struct Args {
    /// Address to listen on, IP:PORT (port 0 picks one; it is printed).
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// File whose first line is the shared token.
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// The agent's certificate chain (PEM): with --tls-key, serve TLS only.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// How `tern bench` and `tern probe` reach their agents (`--agent`).
#[derive(clap::Args)]
pub struct Reach {
    /// The agents' shared token (first line of the file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) that signed the agents' certificates: talk to
    /// them over TLS only, refusing any other certificate.
    #[arg(long, value_name = "FILE", requires = "agent")]
    pub agent_ca: Option<PathBuf>,
}

impl Reach {
    pub fn access(&self) -> anyhow::Result<Access> {
        let token_file = self.token_file.as_ref().ok_or_else(|| anyhow::anyhow!("--agent needs --token-file"))?;
        Ok(Access::read(token_file, self.agent_ca.as_deref())?)
    }
}

/// `tern bench` arguments as an agent receives them.
#[derive(Parser)]
#[command(name = "tern bench", no_binary_name = true)]
struct BenchArgs {
    #[command(flatten)]
    args: super::bench::Args,
}

/// Parses and runs a load run ordered by the master; the report as JSON.
fn run_bench(argv: Vec<String>) -> Result<String, String> {
    let parsed = BenchArgs::try_parse_from(argv).map_err(|e| e.to_string())?;
    if !parsed.args.agent.is_empty() {
        return Err("an agent does not order other agents".into());
    }
    let report = super::bench::load_run(&parsed.args, false, false).map_err(|e| format!("{e:#}"))?;
    Ok(report.to_json())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let token = read_token(&args.token_file)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(agent::server::TlsPair {
            cert_pem: read_pem(cert, "certificate (--tls-cert)")?,
            key_pem: read_pem(key, "private key (--tls-key)")?,
        }),
        _ => None,
    };
    let scheme = if tls.is_some() { "TLS" } else { "plain HTTP/2" };
    let work = Work { bench: Arc::new(run_bench), probe: tern_lab::remote::run };
    agent::server::serve(args.listen, token, tls, work, |addr| {
        eprintln!("tern agent: listening on {addr} ({scheme})");
    })?;
    Ok(ExitCode::SUCCESS)
}
