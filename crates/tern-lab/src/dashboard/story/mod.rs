//! An experiment's page: the figure its published study drew, drawn from
//! the stored run (or several runs of the experiment, overlaid, each its
//! own series), the sentences that say what this host showed, computed
//! from the numbers, and the published finding beside this host's.
//!
//! One file per experiment: `cgi_output.rs` (E1), `file_io.rs` (E2),
//! `models.rs` (E3), `compression.rs` (E4), `os.rs` (E5). What they share:
//! `page.rs` (what a page is made of: [`Story`], its figures and tables),
//! `reading.rs` (reading runs: measurements by metric and subject, who
//! leads and whether past the noise), `by_size.rs` (a metric against size,
//! most figures' shape), `words.rs` (numbers in sentences).

mod by_size;
mod cgi_output;
mod compression;
mod file_io;
mod models;
mod os;
mod page;
mod reading;
mod words;

use crate::store::Run;

pub use page::Story;
pub use reading::history_link;
use reading::Ctx;

/// The story of `runs` (all of one experiment kind), or `None` for a kind
/// that is not an experiment. `nav`: cells link to their history.
pub fn of(runs: &[Run], nav: bool) -> Option<Story> {
    let first = runs.first()?;
    let ctx = Ctx { runs, nav };
    let mut story = match first.data.kind.as_str() {
        "e1" => cgi_output::story(&ctx),
        "e2" => file_io::story(&ctx),
        "e3" => models::story(&ctx),
        "e4" => compression::story(&ctx),
        "e5" => os::story(&ctx),
        _ => return None,
    };
    story.kind = first.data.kind.clone();
    Some(story)
}
