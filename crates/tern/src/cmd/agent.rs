//! `tern agent`: serve tern's built-in probes and load to a master that
//! presents the token.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tern_lab::agent::access::{read_pem, read_token};
use tern_lab::agent::server::{self, BenchRunner, TlsPair, Work};

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

/// Serves until the process ends; `bench` parses and runs the load runs
/// ordered (`tern bench`'s arguments, whose syntax is that command's).
pub fn run(args: Args, bench: BenchRunner) -> anyhow::Result<ExitCode> {
    let token = read_token(&args.token_file)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsPair {
            cert_pem: read_pem(cert, "certificate (--tls-cert)")?,
            key_pem: read_pem(key, "private key (--tls-key)")?,
        }),
        _ => None,
    };
    let scheme = if tls.is_some() { "TLS" } else { "plain HTTP/2" };
    let work = Work { bench, probe: tern_lab::remote::run };
    server::serve(args.listen, token, tls, work, |addr| {
        eprintln!("tern agent: listening on {addr} ({scheme})");
    })?;
    Ok(ExitCode::SUCCESS)
}
