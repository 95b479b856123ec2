//! What an experiment's page is made of, as the template shows it: the
//! story, its findings, its figures and their tables.

/// An experiment's page, as the template shows it.
pub struct Story {
    /// The experiment: "e1".
    pub kind: String,
    /// "E1 cgi-output: CGI output disciplines".
    pub title: String,
    /// Computed from the data: who won each workload here, by how much,
    /// and whether that agrees with the published finding.
    pub summary: Vec<String>,
    /// The published findings beside this host's.
    pub findings: Vec<Finding>,
    pub figures: Vec<Figure>,
}

/// A published finding and what this host (each run) showed.
pub struct Finding {
    pub what: String,
    pub published: String,
    pub here: String,
    /// `Some(true)`: agrees; `None`: the data cannot tell (a tie within the
    /// noise, or nothing measured).
    pub agrees: Option<bool>,
}

impl Finding {
    pub fn verdict(&self) -> &'static str {
        match self.agrees {
            Some(true) => "agrees",
            Some(false) => "differs",
            None => "cannot tell",
        }
    }
}

/// A figure: its charts (several panels, or one) and the table of every
/// number they draw.
pub struct Figure {
    /// What tests and links find it by (`data-figure`).
    pub id: String,
    pub title: String,
    pub charts: Vec<String>,
    pub table: Table,
    pub note: String,
}

/// A table; each cell that shows a stored number carries it.
pub struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

pub struct Cell {
    pub text: String,
    /// The stored value the cell shows (its text is it to 3 significant
    /// figures), with the series and x the chart gives it.
    pub value: Option<f64>,
    pub series: String,
    pub x: String,
    pub best: bool,
    /// The page of this value's history on its host (`None` in a report).
    pub history: Option<String>,
}

impl Cell {
    pub fn label(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), value: None, series: String::new(), x: String::new(), best: false, history: None }
    }
}
