//! What an experiment measured, before it is stored, and the table it
//! prints.

use tern_lab::store::Measurement;

/// What an experiment measured, before it is stored.
pub(super) struct Outcome {
    pub(super) measurements: Vec<Measurement>,
    pub(super) table: Table,
    /// Lines printed (and stored) after the table: conclusions, what was
    /// left out and why.
    pub(super) notes: Vec<String>,
    pub(super) config: serde_json::Value,
    pub(super) interrupted: bool,
}

/// A printed table: header, then rows of cells.
pub(super) struct Table(pub(super) Vec<Vec<String>>);

impl Table {
    pub(super) fn print(&self) {
        let widths: Vec<usize> =
            (0..self.0[0].len()).map(|c| self.0.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
        for row in &self.0 {
            let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
            println!("{}", cells.join("  "));
        }
    }
}
