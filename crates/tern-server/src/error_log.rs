//! The error log: rare events (failures, refusals, timeouts at `info`),
//! one line each, written at once. Not on the per-request path.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use serde::Deserialize;

/// Error-log severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

struct ErrorLog {
    level: Level,
    out: Mutex<File>,
}

static LOG: OnceLock<ErrorLog> = OnceLock::new();

/// Opens the error log: `"-"` for standard error, else a path (appended).
/// The first call wins; later calls (tests starting several servers in one
/// process) keep the first log.
pub fn init(spec: &str, level: Level) -> io::Result<()> {
    let file = match spec {
        "-" => File::from(io::stderr().as_fd().try_clone_to_owned()?),
        path => OpenOptions::new().create(true).append(true).open(path)?,
    };
    let _ = LOG.set(ErrorLog { level, out: Mutex::new(file) });
    Ok(())
}

/// A child process's standard error: the error log itself, so a CGI
/// program's messages land there without passing through the server.
pub fn for_child() -> std::process::Stdio {
    let file = LOG.get().and_then(|log| log.out.lock().ok().and_then(|f| f.try_clone().ok()));
    match file {
        Some(f) => std::process::Stdio::from(f),
        None => std::process::Stdio::inherit(),
    }
}

/// Would a message at `level` be written?
pub fn enabled(level: Level) -> bool {
    LOG.get().is_some_and(|l| level <= l.level)
}

/// Lines one `log!` call site writes per second; past it they are only
/// counted, and the count is written once the second is over (a flood of
/// refused connections gives a few lines a second, not one per connection).
pub const BURST: u32 = 10;

/// One `log!` call site: its format string and how much of its current
/// second it has used.
pub struct Site {
    template: &'static str,
    level: Level,
    /// Seconds since the epoch of the current window.
    second: AtomicU64,
    written: AtomicU32,
    suppressed: AtomicU64,
    /// Listed in [`PENDING`] (suppressed lines not yet reported).
    listed: AtomicBool,
}

impl Site {
    pub const fn new(template: &'static str, level: Level) -> Site {
        Site {
            template,
            level,
            second: AtomicU64::new(0),
            written: AtomicU32::new(0),
            suppressed: AtomicU64::new(0),
            listed: AtomicBool::new(false),
        }
    }

    /// Writes the count of lines suppressed so far, if any.
    fn report(&self, log: &ErrorLog) {
        let n = self.suppressed.swap(0, Ordering::Relaxed);
        if n > 0 {
            log.write(self.level, format_args!("{n} more \"{}\" suppressed in the last second", self.template));
        }
    }
}

/// Call sites with suppressed lines, reported by [`tick`].
static PENDING: Mutex<Vec<&'static Site>> = Mutex::new(Vec::new());
static ANY_PENDING: AtomicBool = AtomicBool::new(false);

impl ErrorLog {
    fn write(&self, level: Level, message: fmt::Arguments<'_>) {
        let name = match level {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        };
        let line = format!("[{}] [{name}] {message}\n", httpdate::fmt_http_date(SystemTime::now()));
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(line.as_bytes());
        }
    }
}

fn epoch_second() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Writes one line from call site `site` (the [`log!`] macro makes one per
/// call), if the log is open, the level enabled and the site has not used
/// up its [`BURST`] for this second.
pub fn log(site: &'static Site, message: fmt::Arguments<'_>) {
    let Some(log) = LOG.get() else { return };
    if site.level > log.level {
        return;
    }
    let now = epoch_second();
    if site.second.swap(now, Ordering::Relaxed) != now {
        site.report(log);
        site.written.store(0, Ordering::Relaxed);
    }
    if site.written.fetch_add(1, Ordering::Relaxed) >= BURST {
        site.suppressed.fetch_add(1, Ordering::Relaxed);
        if !site.listed.swap(true, Ordering::Relaxed) {
            if let Ok(mut pending) = PENDING.lock() {
                pending.push(site);
            }
            ANY_PENDING.store(true, Ordering::Release);
        }
        return;
    }
    log.write(site.level, message);
}

/// Reports the lines suppressed in a second that is over; workers call it
/// once a second (a lock only while some site has suppressed lines).
pub fn tick() {
    if !ANY_PENDING.load(Ordering::Acquire) {
        return;
    }
    let (Some(log), Ok(mut pending)) = (LOG.get(), PENDING.lock()) else { return };
    let now = epoch_second();
    pending.retain(|site| {
        if site.second.load(Ordering::Relaxed) == now {
            return true;
        }
        site.listed.store(false, Ordering::Relaxed);
        site.report(log);
        false
    });
    ANY_PENDING.store(!pending.is_empty(), Ordering::Release);
}

/// `log!(Level::Warn, "…", args)`, imported with `use crate::error_log::log`
/// (which brings the function of the same name too). Each call site is
/// rate-limited on its own (see [`BURST`]).
macro_rules! log_line {
    ($level:expr, $fmt:literal $($arg:tt)*) => {{
        static SITE: $crate::error_log::Site = $crate::error_log::Site::new($fmt, $level);
        $crate::error_log::log(&SITE, format_args!($fmt $($arg)*))
    }};
}
pub(crate) use log_line as log;
