//! Wall time of whole commands under identical conditions, as hyperfine
//! measures it: each runs through `/bin/sh -c` with stdin and stdout on
//! /dev/null, and the time of starting the shell itself (`sh -c ''`, measured
//! in the same run) is subtracted.

use std::io;
use std::process::{Command, Stdio};

use super::super::{Ctx, Figure};
use crate::probe::stopwatch::Interval;

/// Runs `sh -c cmd` once, failing when it does not exit with status 0.
fn run_once(cmd: &str) -> io::Result<()> {
    let status = Command::new("/bin/sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("command {cmd:?} failed ({status})")))
    }
}

pub fn run(ctx: &Ctx) -> io::Result<super::Outcome> {
    let shell = ctx.measure("shell spawn (sh -c '')", None, |n| Interval::looped(n, || run_once("")))?;
    let mut figures = vec![shell.clone()];
    for cmd in &ctx.opts.commands {
        let mut f: Figure = ctx.measure(cmd, None, |n| Interval::looped(n, || run_once(cmd)))?;
        f.subtract(shell.corrected_ns.median);
        figures.push(f);
    }
    Ok(super::Outcome {
        figures,
        rpc_null_ns: None,
        notes: vec![format!(
            "commands run by /bin/sh -c with stdin and stdout on /dev/null; the shell's own start ({} µs) is \
             subtracted from each",
            crate::probe::report::num(shell.corrected_ns.median / 1e3)
        )],
    })
}
