//! The suites, one file each. A suite measures with the [`Ctx`] it is given
//! and returns its figures, plus notes (facts a figure depends on, such as
//! the filesystem type).

mod syscalls;

use std::io;

use super::{Ctx, Figure};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    Syscalls,
}

/// What a suite measured.
#[derive(Debug, Default)]
pub struct Outcome {
    pub figures: Vec<Figure>,
    pub notes: Vec<String>,
}

impl From<Vec<Figure>> for Outcome {
    fn from(figures: Vec<Figure>) -> Outcome {
        Outcome { figures, notes: Vec::new() }
    }
}

impl Suite {
    pub const ALL: &'static [Suite] = &[Suite::Syscalls];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Syscalls => "syscalls",
        }
    }

    /// The suite called `name`, or a message listing the known ones.
    pub fn parse(name: &str) -> Result<Suite, String> {
        Suite::ALL.iter().copied().find(|s| s.name() == name).ok_or_else(|| {
            let known: Vec<_> = Suite::ALL.iter().map(|s| s.name()).collect();
            format!("unknown suite {name:?} (known: all, {})", known.join(", "))
        })
    }

    pub fn run(self, ctx: &Ctx) -> io::Result<Outcome> {
        match self {
            Suite::Syscalls => syscalls::run(ctx).map(Outcome::from),
        }
    }
}
