//! Measuring through agents, above both the probes and the agent: the
//! rpc suite (always against an agent: one on a thread of this process
//! unless `--agent` names one), the net suite against an agent's peer, and
//! a probe run for an agent ([`run_on`]). Every suite is dispatched by name
//! here ([`run`]), so the local suites never know the agent, and the agent
//! runs its master's probes with [`run`] handed to it.

pub mod net;
pub mod rpc;

use std::io;

use crate::agent::access::Remote;
use crate::agent::client::Agent;
use crate::probe::ctx::{Ctx, Options, Outcome};
use crate::probe::report::ProbeReport;
use crate::probe::suites::{self, Suite};

/// Runs `suites` on this machine (see [`crate::probe::run`]): the rpc suite
/// against an agent on a thread of this process, the net suite against a
/// peer on loopback.
pub fn run(suites: &[Suite], opts: &Options) -> io::Result<ProbeReport> {
    crate::probe::run(suites, opts, |suite, ctx| measure(suite, ctx, None))
}

/// Runs `suites` for `agent`: the rpc and net suites from here, timed here
/// against the agent (null RPC subtracted; the net suite against a peer the
/// agent starts for it, across the network between the two); every other
/// suite on the agent itself, its report coming back whole. The report's
/// host is the agent.
pub fn run_on(agent: &Remote, suites: &[Suite], opts: &Options) -> io::Result<ProbeReport> {
    let from_here = |s: &Suite| matches!(s, Suite::Rpc | Suite::Net);
    let on_agent: Vec<String> = suites.iter().filter(|s| !from_here(s)).map(|s| s.name().to_string()).collect();
    let mut report = if on_agent.is_empty() {
        let mut here = run(&[], opts)?;
        here.host = agent.addr.clone();
        here
    } else {
        let mut client = Agent::connect(&agent.addr, &agent.access)?;
        client.probe(&on_agent, opts.samples, opts.interval, opts.quick)?
    };
    let here: Vec<Suite> = suites.iter().copied().filter(from_here).collect();
    if !here.is_empty() {
        let here = crate::probe::run(&here, opts, |suite, ctx| measure(suite, ctx, Some(agent)))?;
        report.rpc_null_ns = here.rpc_null_ns;
        report.suites.extend(here.suites);
    }
    Ok(report)
}

/// One suite, with `agent` the one the rpc and net suites measure against
/// (none: an agent thread and a loopback peer of this process).
fn measure(suite: Suite, ctx: &Ctx, agent: Option<&Remote>) -> io::Result<Outcome> {
    match (suite, agent) {
        (Suite::Syscalls, _) => suites::syscalls::run(ctx).map(Outcome::from),
        (Suite::Processes, _) => suites::processes::run(ctx),
        (Suite::Commands, _) => suites::commands::run(ctx),
        (Suite::Disk, _) => suites::disk::run(ctx),
        (Suite::Ipc, _) => suites::ipc::run(ctx).map(Outcome::from),
        (Suite::Net, None) => suites::net::run(ctx).map(Outcome::from),
        (Suite::Net, Some(agent)) => net::run(ctx, agent),
        (Suite::Rpc, agent) => rpc::run(ctx, agent),
        (Suite::Files, _) => suites::files::run(ctx).map(Outcome::from),
    }
}
