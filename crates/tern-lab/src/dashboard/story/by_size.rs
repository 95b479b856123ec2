//! A metric by size, the shape of most figures: a series per run and
//! series of the metric against the sizes it was measured at, each with its
//! row of the table, the best starred.

use crate::probe::figure::Better;
use crate::store::Measurement;

use super::super::svg::{self, bytes, sig3, Axis, Mark, Plot, Scale, Series, Shape, XAxis};
use super::page::{Cell, Figure, Table};
use super::reading::{Ctx, Values};

/// The sizes `metric` was measured at in any of the runs, in order.
pub(super) fn sizes(ctx: &Ctx, metric: &str) -> Vec<u64> {
    let mut sizes: Vec<u64> = ctx.runs.iter().flat_map(|r| Values::of(r).sizes(metric)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// A metric by size: a series per run and series of the metric, with its
/// row of the table (a column per size).
pub(super) struct BySize {
    pub(super) series: Vec<Series>,
    pub(super) rows: Vec<Vec<Cell>>,
    pub(super) sizes: Vec<u64>,
    pub(super) labels: Vec<String>,
}

/// `metric` by size, drawn as `shape` (bars stand in groups, one per size;
/// other marks at x = the size); `best` says which marks to star, `text`
/// what a cell shows.
pub(super) fn by_size(
    ctx: &Ctx,
    metric: &str,
    shape: Shape,
    best: &dyn Fn(&Values, &Measurement) -> bool,
    text: &dyn Fn(&Values, &Measurement) -> String,
) -> BySize {
    let sizes = sizes(ctx, metric);
    let labels: Vec<String> = sizes.iter().map(|s| bytes(*s as f64)).collect();
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for run in ctx.runs {
        let v = Values::of(run);
        for name in v.series(metric) {
            let label = ctx.series(run, &name);
            let mut marks = Vec::new();
            let mut row = vec![Cell::label(label.clone())];
            for (i, &size) in sizes.iter().enumerate() {
                let Some(m) = v.at(metric, &name, size) else {
                    row.push(Cell::label("-"));
                    continue;
                };
                let starred = best(&v, m);
                let x = if shape == Shape::Bar { i as f64 } else { size as f64 };
                marks.push(Mark::new(x, m.value, labels[i].clone(), starred));
                row.push(ctx.cell(run, m, &label, &labels[i], text(&v, m), starred));
            }
            rows.push(row);
            series.push(Series { name: label, shape, colour: None, marks });
        }
    }
    BySize { series, rows, sizes, labels }
}

/// Whether `m` is the best of its metric at its size in `v`.
pub(super) fn best_at_size(v: &Values, m: &Measurement) -> bool {
    let at = v.metric(&m.metric).filter(|o| o.size == m.size).map(|o| o.value);
    let extreme = match m.better {
        Better::Lower => at.fold(f64::INFINITY, f64::min),
        Better::Higher => at.fold(f64::NEG_INFINITY, f64::max),
    };
    m.value == extreme
}

/// A cell's text: the value to 3 significant figures.
pub(super) fn plain(_: &Values, m: &Measurement) -> String {
    sig3(m.value)
}

/// What a figure by size says: its id and titles, what its table's rows
/// are, its axes, its note.
pub(super) struct Look<'a> {
    pub(super) id: &'a str,
    pub(super) title: &'a str,
    pub(super) chart: &'a str,
    /// What the table's rows are ("discipline").
    pub(super) rows: &'a str,
    /// The x axis of bars (groups, one per size); lines stand against the
    /// file size on a log scale.
    pub(super) x: &'a str,
    pub(super) y: &'a str,
    pub(super) note: &'a str,
}

impl BySize {
    /// The figure: the chart (bars in groups, or lines against the size,
    /// a tick at each size measured) and the table.
    pub(super) fn figure(self, look: &Look) -> Figure {
        let x = if self.series.iter().any(|s| s.shape == Shape::Bar) {
            XAxis::Groups(self.labels.clone(), look.x.into())
        } else {
            let mut x = Axis::new("file size (log scale)", Scale::Log, &bytes);
            x.ticks = Some(self.sizes.iter().map(|s| *s as f64).collect());
            XAxis::Numeric(x)
        };
        let drawn = self.series.iter().flat_map(|s| s.marks.iter().map(|m| m.y));
        let plot = Plot {
            title: look.chart.into(),
            y: Axis::new(look.y, Scale::for_values(drawn), &sig3),
            x,
            series: self.series,
            size: svg::WIDE,
        };
        let mut head = vec![look.rows.to_string()];
        head.extend(self.labels);
        Figure {
            id: look.id.into(),
            title: look.title.into(),
            charts: vec![svg::draw(&plot)],
            table: Table { head, rows: self.rows },
            note: look.note.into(),
        }
    }
}
