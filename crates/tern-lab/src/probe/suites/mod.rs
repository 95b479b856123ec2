//! The suites, one file each, and their names. A suite measures with the
//! [`Ctx`](super::ctx::Ctx) it is given and returns its figures, plus notes
//! (facts a figure depends on, such as the filesystem type). They are
//! dispatched by name in `crate::remote`, with the rpc suite, which needs
//! an agent.

pub mod commands;
pub mod disk;
pub mod files;
pub mod ipc;
pub mod net;
pub mod processes;
mod scratch;
pub mod syscalls;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    Syscalls,
    Processes,
    Commands,
    Disk,
    Ipc,
    Net,
    Rpc,
    Files,
}

impl Suite {
    pub const ALL: &'static [Suite] = &[
        Suite::Syscalls,
        Suite::Processes,
        Suite::Commands,
        Suite::Disk,
        Suite::Ipc,
        Suite::Net,
        Suite::Rpc,
        Suite::Files,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Syscalls => "syscalls",
            Suite::Processes => "processes",
            Suite::Commands => "commands",
            Suite::Disk => "disk",
            Suite::Ipc => "ipc",
            Suite::Net => "net",
            Suite::Rpc => "rpc",
            Suite::Files => "files",
        }
    }

    /// The suite called `name`, or a message listing the known ones.
    pub fn parse(name: &str) -> Result<Suite, String> {
        Suite::ALL.iter().copied().find(|s| s.name() == name).ok_or_else(|| {
            let known: Vec<_> = Suite::ALL.iter().map(|s| s.name()).collect();
            format!("unknown suite {name:?} (known: all, {})", known.join(", "))
        })
    }
}
