//! The error log: rare events (failures, refusals, timeouts at `info`),
//! one line each, written at once. Not on the per-request path.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use crate::config::Level;

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

/// Writes one line at `level`, if the log is open and the level enabled.
pub fn log(level: Level, message: fmt::Arguments<'_>) {
    let Some(log) = LOG.get() else { return };
    if level > log.level {
        return;
    }
    let name = match level {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Info => "info",
        Level::Debug => "debug",
    };
    let line = format!("[{}] [{name}] {message}\n", httpdate::fmt_http_date(SystemTime::now()));
    if let Ok(mut out) = log.out.lock() {
        let _ = out.write_all(line.as_bytes());
    }
}

/// `log!(Level::Warn, "…", args)`, imported with `use crate::error_log::log`
/// (which brings the function of the same name too).
macro_rules! log_line {
    ($level:expr, $($arg:tt)*) => {
        $crate::error_log::log($level, format_args!($($arg)*))
    };
}
pub(crate) use log_line as log;
