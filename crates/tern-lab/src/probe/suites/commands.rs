//! Wall time of whole commands under identical conditions, as hyperfine
//! measures it: each runs through `/bin/sh -c` with stdin and stdout on
//! /dev/null, and the time of starting the shell itself (`sh -c ''`, measured
//! in the same run) is subtracted. The shell's samples and the commands' are
//! taken in turn, so the difference of the two medians is not the drift of
//! the machine between two stretches of time (on a command as short as
//! `/bin/true` the shell is most of the time: a drift of it is the whole
//! result).

use std::io;
use std::process::{Command, Stdio};

use crate::probe::ctx::{Ctx, Outcome};
use crate::probe::figure::Op;
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

pub fn run(ctx: &Ctx) -> io::Result<Outcome> {
    let mut shell = |n: u64| Interval::looped(n, || run_once(""));
    let mut commands: Vec<_> =
        ctx.opts.commands.iter().map(|cmd| move |n: u64| Interval::looped(n, || run_once(cmd))).collect();
    let mut ops = vec![Op { name: "shell spawn (sh -c '')", sample: &mut shell }];
    for (cmd, sample) in ctx.opts.commands.iter().zip(&mut commands) {
        ops.push(Op { name: cmd, sample });
    }
    let mut figures = ctx.measure_interleaved(&mut ops)?;
    let shell = figures[0].clone();
    for f in &mut figures[1..] {
        f.subtract(shell.corrected_ns.median);
    }
    Ok(Outcome {
        figures,
        rpc_null_ns: None,
        notes: vec![format!(
            "commands run by /bin/sh -c with stdin and stdout on /dev/null; the shell's own start ({} µs, \
             sampled in turn with the commands) is subtracted from each",
            crate::probe::report::num(shell.corrected_ns.median / 1e3)
        )],
    })
}
