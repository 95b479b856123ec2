//! RPC over the agent's gRPC service, timed from the caller: the null call,
//! eager fetches by size (the whole result in one reply) and lazy transfers
//! (the agent answers one callback per piece), with the crossover: how many
//! callbacks of one piece a lazy transfer can make before one eager reply of
//! the whole result is cheaper. Without `--agent` the agent is a thread of
//! this process on loopback.
//!
//! The null call is measured at the start and at the end; the mean of the
//! two medians is subtracted from every transfer (`rpc_time(x) − rpc_time(null)`)
//! and reported with the run.

use std::io;

use crate::agent::access::{Access, Remote};
use crate::agent::client::Agent;
use crate::agent::server::LocalAgent;
use crate::probe::ctx::{Ctx, Outcome};
use crate::probe::report::num;
use crate::probe::suites::ipc::size_label;

const SIZES: &[u64] = &[1024, 65536, 1 << 20, 4 << 20];
const QUICK_SIZES: &[u64] = &[1024, 1 << 20];
/// The lazy transfer's piece size.
pub const PIECE: u64 = 4096;
/// Callbacks in the long lazy transfer (the short one makes one).
const LONG: u64 = 16;

/// The number of callbacks at which a lazy transfer (fixed cost `fixed_ns`,
/// `per_callback_ns` each) costs as much as one eager reply of `eager_ns`.
pub fn crossover(eager_ns: f64, fixed_ns: f64, per_callback_ns: f64) -> f64 {
    if per_callback_ns <= 0.0 {
        return f64::INFINITY;
    }
    ((eager_ns - fixed_ns) / per_callback_ns).max(0.0)
}

/// Times the calls against `agent`, or against an agent on a thread of
/// this process when `None`.
pub fn run(ctx: &Ctx, agent: Option<&Remote>) -> io::Result<Outcome> {
    let (_local, mut agent) = match agent {
        Some(remote) => (None, Agent::connect(&remote.addr, &remote.access)?),
        None => {
            let token = format!("local-{}", crate::probe::stopwatch::now_ns());
            let local = LocalAgent::start(&token)?;
            let agent = Agent::connect(&local.addr.to_string(), &Access { token, ca_pem: None })?;
            (Some(local), agent)
        }
    };
    agent.null()?;
    let null_start = ctx.measure("null call (start)", None, |n| agent.timed_null(n))?;
    let sizes = if ctx.opts.quick { QUICK_SIZES } else { SIZES };
    let mut eager = Vec::new();
    for &size in sizes {
        let name = format!("eager fetch {}", size_label(size as usize));
        eager.push((size, ctx.measure(&name, None, |n| agent.timed_fetch(n, size))?));
    }
    let piece = size_label(PIECE as usize);
    let short = ctx.measure(&format!("lazy, 1 callback of {piece}"), None, |n| agent.timed_lazy(n, 1, PIECE))?;
    let long =
        ctx.measure(&format!("lazy, {LONG} callbacks of {piece}"), None, |n| agent.timed_lazy(n, LONG, PIECE))?;
    let null_end = ctx.measure("null call (end)", None, |n| agent.timed_null(n))?;

    let null = (null_start.corrected_ns.median + null_end.corrected_ns.median) / 2.0;
    let per_callback = ((long.corrected_ns.median - short.corrected_ns.median) / (LONG - 1) as f64).max(0.0);
    let fixed = short.corrected_ns.median - per_callback;
    let mut notes = vec![format!(
        "null call {} µs (start {}, end {}) subtracted from every transfer; a lazy transfer costs {} µs + {} µs per \
         callback of {piece}",
        num(null / 1e3),
        num(null_start.corrected_ns.median / 1e3),
        num(null_end.corrected_ns.median / 1e3),
        num((fixed - null).max(0.0) / 1e3),
        num(per_callback / 1e3),
    )];
    for (size, f) in &eager {
        let size = *size;
        let k = crossover(f.corrected_ns.median, fixed, per_callback);
        notes.push(format!(
            "crossover {}: eager {} µs = lazy with {} callbacks of {piece} ({} pieces make the whole); lazy wins \
             below",
            size_label(size as usize),
            num(f.corrected_ns.median / 1e3),
            num(k),
            size.div_ceil(PIECE),
        ));
    }
    let mut figures = vec![null_start];
    for mut f in eager.into_iter().map(|(_, f)| f).chain([short, long]) {
        f.subtract(null);
        figures.push(f);
    }
    figures.push(null_end);
    Ok(Outcome { figures, notes, rpc_null_ns: Some(null) })
}

#[cfg(test)]
mod tests {
    use super::crossover;

    #[test]
    fn crossover_is_where_the_lines_meet() {
        // Eager 100 µs; lazy 20 µs + 10 µs per callback: equal at 8 callbacks.
        assert_eq!(crossover(100_000.0, 20_000.0, 10_000.0), 8.0);
        assert_eq!(crossover(10_000.0, 20_000.0, 10_000.0), 0.0);
        assert_eq!(crossover(10_000.0, 20_000.0, 0.0), f64::INFINITY);
    }
}
