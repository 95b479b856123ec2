//! How an experiment loads its servers: quietly logging servers, closed
//! loops of set lengths, any request mix, on one load thread.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tern_lab::load::{self, plan, Options, Plan, RequestSpec, Stop, Url};

/// The log settings of every server an experiment starts: no access log,
/// warnings only.
pub(super) const QUIET_LOG: &str = "[log]\naccess = \"off\"\nlevel = \"warn\"\n";

/// The lengths of one workload's measurement.
#[derive(Clone, Copy)]
pub(super) struct Lengths {
    pub(super) warmup: Duration,
    pub(super) measure: Duration,
}

/// One closed-loop load run: `connections` on one thread.
pub(super) fn load(
    url: &str,
    headers: &[&str],
    connections: usize,
    len: Lengths,
    interrupt: &AtomicBool,
) -> anyhow::Result<load::Report> {
    let opts = Options {
        connections,
        threads: 1,
        stop: Stop::Duration(len.measure),
        warmup: len.warmup,
        ..Options::default()
    };
    drive(&[RequestSpec::new("GET", Url::parse(url)?)], headers, &opts, interrupt)
}

/// One load run of `specs` (all to one server), `headers` on every request.
pub(super) fn drive(
    specs: &[RequestSpec],
    headers: &[&str],
    opts: &Options,
    interrupt: &AtomicBool,
) -> anyhow::Result<load::Report> {
    let headers = headers.iter().map(|h| plan::parse_header(h)).collect::<Result<Vec<_>, _>>()?;
    let plan = Plan::build(specs, &headers, true)?;
    Ok(load::run(&plan, opts, interrupt)?)
}
