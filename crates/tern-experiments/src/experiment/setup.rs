//! What an experiment sets up besides its servers: its scratch directory,
//! and the gateway's C programs it runs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// A scratch directory of one experiment, removed with what is in it when
/// dropped (also when the experiment fails half-way).
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new(name: &str) -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("tern-lab-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A program the gateway builds (`make -C gateway`): in `dir` when given,
/// else in `gateway/build` of the repository this binary was built in (an
/// ancestor of its path) or of the current directory.
pub(super) fn gateway_program(dir: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if let Some(dir) = dir {
        let path = dir.join(name);
        if !executable(&path) {
            bail!(
                "{} is not an executable: build it with `make -C gateway` (then --gateway gateway/build)",
                path.display()
            );
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().and_then(std::fs::canonicalize).unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_default();
    exe.ancestors()
        .chain(cwd.ancestors())
        .map(|a| a.join("gateway/build").join(name))
        .find(|p| executable(p))
        .with_context(|| {
            format!(
                "cannot find the gateway's {name}: build it with `make -C gateway` in tern's repository \
                 (fcgi-files needs libfcgi-dev), or name its directory with --gateway DIR"
            )
        })
}
