//! E5 probes: the OS probe suites on this host and on each agent given,
//! one column per host; beside this host's figures, the reference tools it
//! has (`references.rs`).

use tern_lab::agent::access::Remote;
use tern_lab::probe::report::{num, ProbeReport};
use tern_lab::probe::{Options, Suite};
use tern_lab::remote;
use tern_lab::store::{record, Measurement};

use super::outcome::{Outcome, Table};
use super::references;

/// What E5 measured: this host's report first, then each agent's that
/// answered, and the agents that failed (named).
pub(super) struct Probed {
    pub(super) outcome: Outcome,
    pub(super) reports: Vec<ProbeReport>,
    pub(super) failures: Vec<String>,
}

/// E5: the probe suites on this host and on each agent in turn (one at a
/// time, so none disturbs another's figures), one column per host.
pub(super) fn e5(quick: bool, agents: &[Remote]) -> anyhow::Result<Probed> {
    let mut opts = Options::default();
    if quick {
        opts = opts.quick();
    }
    let mut reports = vec![remote::run(Suite::ALL, &opts)?];
    // The references right after this host's suites, on its CPU.
    let references = references::run(&reports[0], quick);
    let mut failures = Vec::new();
    for agent in agents {
        match remote::run_on(agent, Suite::ALL, &opts) {
            Ok(r) => reports.push(r),
            Err(e) => failures.push(format!("agent {}: {e}", agent.addr)),
        }
    }
    let mut header = vec!["figure".to_string(), "unit".into()];
    header.extend(reports.iter().map(|r| r.host.clone()));
    let mut table = Table(vec![header]);
    for s in &reports[0].suites {
        for f in &s.figures {
            let mut row = vec![format!("{}/{}", s.suite, f.name), f.unit.clone()];
            // In this host's unit, as `tern probe --agent` compares them.
            row.extend(reports.iter().map(|r| {
                r.figure(&s.suite, &f.name).map_or_else(|| "-".into(), |y| num(f.in_unit(y.corrected_ns.median)))
            }));
            table.0.push(row);
        }
    }
    let mut measurements = record::probe_measurements(&reports[0]);
    let mut notes = Vec::new();
    let mut tools = serde_json::Map::new();
    for r in references {
        let Some(ours) = measurements.iter().find(|m| m.subject == r.subject && m.metric == "value") else { continue };
        let reference = Measurement { metric: "reference".into(), value: r.value, ..ours.clone() };
        notes.push(format!("reference: {} {} {} by {}", r.subject, num(r.value), ours.unit, r.tool));
        tools.insert(r.subject, r.tool.into());
        measurements.push(reference);
    }
    let outcome = Outcome {
        measurements,
        table,
        notes,
        config: serde_json::json!({"suites": "all", "quick": quick, "samples": reports[0].samples,
            "hosts": reports.iter().map(|r| r.host.as_str()).collect::<Vec<_>>(), "references": tools}),
        interrupted: false,
    };
    Ok(Probed { outcome, reports, failures })
}
