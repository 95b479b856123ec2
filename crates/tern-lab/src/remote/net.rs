//! The net suite against a peer an agent starts on its own address for the
//! run, timed from here across the network between the two; the peer stops
//! when the suite ends (its measuring is `crate::probe::suites::net`).

use std::io;
use std::time::Duration;

use crate::agent::access::Remote;
use crate::agent::client::PeerLease;
use crate::probe::ctx::{Ctx, Outcome};
use crate::probe::suites::net::run_against;

/// An agent's peer stops when the suite ends, or at the latest after this.
const AGENT_PEER_LIFETIME: Duration = Duration::from_secs(600);

pub fn run(ctx: &Ctx, remote: &Remote) -> io::Result<Outcome> {
    let lease = PeerLease::start(&remote.addr, &remote.access, AGENT_PEER_LIFETIME)?;
    let figures = run_against(ctx, &lease.addrs)?;
    let a = lease.addrs;
    let note = format!(
        "from this host to a peer on agent {}: TCP echo {}, UDP echo {}, TCP source {}, TCP accept {} (stopped at \
         the end)",
        remote.addr, a.tcp_echo, a.udp_echo, a.tcp_source, a.tcp_accept
    );
    Ok(Outcome { figures, notes: vec![note], rpc_null_ns: None })
}
