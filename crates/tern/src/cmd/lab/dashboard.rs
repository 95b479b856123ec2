//! `tern lab serve` and `tern lab report`: the dashboard on tern's own
//! server (the lab's pages mounted as an application of its site), and
//! the same pages written to one self-contained file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use tern_lab::dashboard::{self, Dashboard};
use tern_lab::store::Store;
use tern_server::server::Signal;
use tern_server::site::app::{App, Apps, Page};
use tern_server::{Config, Server};

/// The dashboard as an application of tern's site.
struct Lab(Dashboard);

impl App for Lab {
    fn get(&self, path: &str, query: Option<&str>) -> Page {
        let p = self.0.page(path, query);
        Page { status: p.status, content_type: p.content_type, body: p.body }
    }
}

/// The server's settings: `listen` only, one worker, no access log, files
/// sent with read(2) (nothing to calibrate), no CGI, an empty directory as
/// the root (every path is the dashboard's).
fn config(listen: &str, root: &Path) -> anyhow::Result<Config> {
    let text = format!(
        "[server]\nlisten = [{}]\nroot = {}\nworkers = 1\n[static]\nio = \"read\"\n[cgi]\ndirectories = []\nextensions = []\n[log]\naccess = \"off\"\nlevel = \"warn\"\n",
        toml_string(listen),
        toml_string(&root.to_string_lossy())
    );
    Ok(Config::parse(&text, Path::new("tern lab serve"))?)
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Serves the dashboard until SIGINT or SIGTERM.
pub fn serve(store: PathBuf, listen: &str) -> anyhow::Result<ExitCode> {
    // Fail early, with the store's own message, if it cannot be opened.
    Store::open(&store)?;
    let root = std::env::temp_dir().join(format!("tern-lab-serve-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let apps = Apps::default().mount("/", Arc::new(Lab(Dashboard { path: store.clone() })));
    let started = config(listen, &root).and_then(|c| Server::start_with(c, apps).context("cannot start"));
    let mut server = match started {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir(&root);
            return Err(e);
        }
    };
    for (addr, _) in server.local_addrs() {
        eprintln!("tern lab: dashboard on http://{addr}/ (store {})", store.display());
    }
    while server.wait_for_signal() == Signal::Reload {}
    server.stop();
    let _ = std::fs::remove_dir(&root);
    Ok(ExitCode::SUCCESS)
}

/// Writes the report of `ids` to `output`.
pub fn report(store: PathBuf, ids: &[i64], output: &Path) -> anyhow::Result<ExitCode> {
    let text = dashboard::report(&Store::open(&store)?, ids)?;
    std::fs::write(output, text).with_context(|| format!("cannot write {}", output.display()))?;
    eprintln!("tern lab: report of {} runs written to {}", ids.len(), output.display());
    Ok(ExitCode::SUCCESS)
}
