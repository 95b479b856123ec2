//! The server under measurement: this binary's `tern serve`, started as a
//! child process (every experiment and every `tern tune` candidate is one),
//! so it is measured through its public face, a process and a socket, as
//! it runs in production. The executable calling this must be `tern`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};

/// A `tern serve` child on an ephemeral loopback port, stopped on drop.
pub struct Served {
    child: Child,
    pub addr: String,
    /// How it sends static files, as it reported once decided (`static.io
    /// auto: calibrated …`).
    pub io: String,
}

impl Served {
    /// `tern serve ROOT` with `config` and the command-line `args`, once it
    /// listens and has decided how to send static files: a start-up
    /// calibration (a fraction of a second) is over before anything is
    /// measured, and never overlaps the next server's.
    pub fn start(root: &Path, config: &str, args: &[&str]) -> anyhow::Result<Served> {
        let file = root.with_extension("toml");
        std::fs::write(&file, config).with_context(|| format!("cannot write {}", file.display()))?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("serve")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .arg("--config")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start tern serve")?;
        let mut lines = BufReader::new(child.stderr.take().context("no stderr")?).lines();
        let mut next = |what: &str| match lines.next() {
            Some(Ok(line)) => Ok(line),
            _ => {
                let _ = child.wait();
                bail!("tern serve exited before {what}");
            }
        };
        let addr = loop {
            if let Some(rest) = next("listening")?.split("listening on http://").nth(1) {
                break rest.split('/').next().unwrap_or_default().to_string();
            }
        };
        let io = loop {
            if let Some(rest) = next("saying how it sends files")?.strip_prefix("tern: static.io ") {
                break format!("static.io {rest}");
            }
        };
        // Keep reading, so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Served { child, addr, io })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // SIGTERM: the server's graceful stop.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
