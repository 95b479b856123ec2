//! `[cgi]`: which paths are programs and how they run (the section, its
//! defaults and its rules; `Settings::new` in `mod.rs` prepares it).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::values::{first_broken, Bytes, Seconds};

/// `[cgi]`: programs run per request (RFC 3875).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cgi {
    /// URL path prefixes whose files are CGI programs (never served as
    /// files), e.g. `["/cgi-bin"]`. Default `["/cgi-bin"]`.
    pub directories: Vec<String>,
    /// File extensions run as CGI anywhere under the root, e.g. `[".cgi"]`.
    /// Default `[".cgi"]`.
    pub extensions: Vec<String>,
    /// Interpreter per extension: `{ py = "/usr/bin/python3" }`. A program
    /// without one is executed directly and must be executable.
    /// Default `{ py = "/usr/bin/python3", pl = "/usr/bin/perl",
    /// sh = "/bin/sh", php = "/usr/bin/php-cgi" }`.
    pub interpreters: BTreeMap<String, String>,
    /// Wall-clock limit per request; past it the program's process group is
    /// killed and the client gets `504` (or, mid-body, a closed
    /// connection). Default `"30s"`.
    pub timeout: Seconds,
    /// Programs running at once across all workers; a request past the cap
    /// is answered `503` at once (with `Retry-After: 1`), never queued.
    /// Default 64.
    pub max_processes: usize,
    /// Environment variables passed through from tern's own environment.
    /// Default `["PATH", "LANG", "LC_ALL", "TZ"]`.
    pub pass_env: Vec<String>,
    /// Fixed variables for every program: `{ APP_MODE = "demo" }`
    /// (meta-variables win over them). Default `{}`.
    pub env: BTreeMap<String, String>,
    /// Bytes read from a program's output per read. Default `"64KiB"`.
    pub pipe_buffer: Bytes,
    /// Run programs even when the server is root (no `server.user`);
    /// otherwise they are refused with `403`. Default false.
    pub allow_root: bool,
    /// When a request ends, send its program's process group `SIGTERM`,
    /// then `SIGKILL` a second later, so nothing it started outlives the
    /// request (a process that called `setsid` escapes). Default true.
    pub kill_group: bool,
}

impl Default for Cgi {
    fn default() -> Self {
        let interpreters =
            [("py", "/usr/bin/python3"), ("pl", "/usr/bin/perl"), ("sh", "/bin/sh"), ("php", "/usr/bin/php-cgi")];
        Cgi {
            directories: vec!["/cgi-bin".into()],
            extensions: vec![".cgi".into()],
            interpreters: interpreters.iter().map(|(e, i)| ((*e).to_string(), (*i).to_string())).collect(),
            timeout: Seconds(Duration::from_secs(30)),
            max_processes: 64,
            pass_env: ["PATH", "LANG", "LC_ALL", "TZ"].iter().map(|s| (*s).to_string()).collect(),
            env: BTreeMap::new(),
            pipe_buffer: Bytes(64 * 1024),
            allow_root: false,
            kill_group: true,
        }
    }
}

impl Cgi {
    /// The keys a `[[site]]` may set in `[site.cgi]`; `max_processes`,
    /// `pipe_buffer` and `kill_group` are the whole server's.
    pub const SITE_KEYS: &'static [&'static str] =
        &["directories", "extensions", "interpreters", "timeout", "pass_env", "env", "allow_root"];

    /// The first rule of `[cgi]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (self.max_processes == 0, "max_processes", "must be at least 1"),
            (self.pipe_buffer.0 == 0, "pipe_buffer", "must be at least 1 byte"),
            (
                self.directories.iter().any(|d| !d.starts_with('/')),
                "directories",
                "each must be a URL path starting with /",
            ),
        ])
    }
}
