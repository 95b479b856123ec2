//! The experiments of the lab (`tern lab run NAME`). Each starts what it
//! needs (this binary's `tern serve`, with the settings compared), drives
//! it with the load generator, stores the whole experiment as one run (one
//! measurement per workload) and prints its table.
//!
//! E1 (`cgi_output.rs`) the C gateway's output disciplines and file
//! methods, by gwbench; E2 (`file_io.rs`) tern's static I/O methods
//! (sendfile, mmap, read) beside the gateway's FastCGI file server in its
//! mmap and read modes, by file size; E3 (`models.rs`) the concurrency
//! models by CGI share and CPU count, their saturation points from
//! open-loop steps; E4 (`compression.rs`, `burst.rs`, `coding.rs`)
//! compression by page size and coding, then a cold burst; E5
//! (`probes.rs`, `references.rs`) the OS probes, beside the reference tools
//! this host has. What they share: `outcome.rs` (what one
//! measured, its table), `workload.rs` (how it loads a server), `setup.rs`
//! (scratch directory, the gateway's programs). E1, E2 and E3 run the
//! gateway's C programs (`make -C gateway`), found beside this binary's
//! repository or in `--gateway DIR`.
//!
//! A measurement's subject names every dimension that varies, the series
//! first (`event, 1 CPU, CGI 0 %`): the dashboard draws each experiment's
//! figure from them.

mod burst;
mod cgi_output;
mod coding;
mod compression;
mod file_io;
mod models;
mod outcome;
mod probes;
mod references;
mod setup;
mod workload;

use std::path::Path;

use anyhow::bail;
use tern_lab::agent::access::Remote;
use tern_lab::load;
use tern_lab::probe::env::Environment;
use tern_lab::store::{self, record, Recording, RunData, Status};

use outcome::Outcome;

/// Where `tern lab serve` listens by default: a run's page is under it.
pub const DASHBOARD: &str = "http://127.0.0.1:8686";

/// The experiments, as `tern lab run` names them.
pub const NAMES: [&str; 5] = ["e1", "e2", "e3", "e4", "e5"];

/// The stored run of an experiment: `outcome` measured on the host `env`
/// describes, with `result` (null: the table and notes).
fn run_data(
    name: &str,
    quick: bool,
    outcome: &Outcome,
    env: Environment,
    result: serde_json::Value,
    ctx: &record::Context,
) -> RunData {
    RunData {
        kind: name.into(),
        status: if outcome.interrupted { Status::Interrupted } else { Status::Complete },
        environment: env,
        tern_version: env!("CARGO_PKG_VERSION").into(),
        command_line: ctx.command_line.clone(),
        config: serde_json::json!({"experiment": name, "quick": quick, "settings": outcome.config}),
        label: if ctx.label.is_empty() {
            format!("{name}{}", if quick { " --quick" } else { "" })
        } else {
            ctx.label.clone()
        },
        started_at: ctx.started_at,
        finished_at: ctx.finished_at,
        result: if result.is_null() {
            serde_json::json!({ "table": outcome.table.0, "notes": outcome.notes })
        } else {
            result
        },
        measurements: outcome.measurements.clone(),
        histograms: Vec::new(),
    }
}

/// Runs experiment `name` (one of [`NAMES`]), prints its table and stores
/// it; `gateway` is where the gateway's programs are (E1, E2, E3), `agents`
/// the hosts E5 also probes, each stored as a run of its own.
pub fn run(
    name: &str,
    quick: bool,
    gateway: Option<&Path>,
    agents: &[Remote],
    recording: &Recording,
) -> anyhow::Result<()> {
    let started = store::now();
    let env = Environment::capture(tern_lab::probe::cpu::governor(0));
    let interrupt = load::interrupt_on_ctrl_c()?;
    let mut remote = Vec::new();
    let mut failures = Vec::new();
    let (outcome, result, env) = match name {
        "e1" => (cgi_output::e1(quick, gateway, &env)?, serde_json::Value::Null, env),
        "e2" => (file_io::e2(quick, gateway, &interrupt, &env)?, serde_json::Value::Null, env),
        "e3" => (models::e3(quick, gateway, &interrupt, &env)?, serde_json::Value::Null, env),
        "e4" => (compression::e4(quick, &interrupt, &env)?, serde_json::Value::Null, env),
        "e5" => {
            let mut p = probes::e5(quick, agents)?;
            failures = p.failures;
            let local = p.reports.remove(0);
            remote = p.reports;
            let result = serde_json::to_value(&local).unwrap_or_default();
            (p.outcome, result, local.environment)
        }
        other => bail!("no experiment {other:?}: choose one of {}", NAMES.join(", ")),
    };
    outcome.table.print();
    for note in &outcome.notes {
        println!("{note}");
    }
    let ctx = record::Context::here(recording.label.clone(), started);
    if let Some(id) = recording.save(&run_data(name, quick, &outcome, env, result, &ctx)) {
        println!("stored as run {id}; its page: {DASHBOARD}/run/{id} (`tern lab serve`)");
    }
    // Each agent's suites as a run of its own host, so the dashboard
    // charts the hosts side by side.
    for r in remote {
        let mut data = run_data(name, quick, &outcome, r.environment.clone(), serde_json::Value::Null, &ctx);
        data.measurements = record::probe_measurements(&r);
        data.label = format!("{} on {}", data.label, r.host);
        data.result = serde_json::to_value(&r).unwrap_or_default();
        if let Some(id) = recording.save(&data) {
            println!("stored agent {}'s run as run {id}", r.host);
        }
    }
    if !failures.is_empty() {
        bail!("{} of {} agents failed: {}", failures.len(), agents.len(), failures.join("; "));
    }
    Ok(())
}
