//! Charts drawn on the server as SVG text (plotters' SVG backend), so a
//! page reads with JavaScript off and a report inlines them.

use plotters::prelude::*;

use super::views::{Bar, Series, Step};

const SIZE: (u32, u32) = (860, 440);
/// The bars' colour: tests find the bars by it.
pub const BAR: RGBColor = RGBColor(0x46, 0x82, 0xb4);
pub const REGRESSION: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const PALETTE: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
];

type Result = std::result::Result<String, String>;

fn failed<E: std::fmt::Display>(e: E) -> String {
    format!("cannot draw the chart: {e}")
}

/// Draws the series' legend in the upper left corner and finishes the SVG.
fn legend_and_present<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
) -> std::result::Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(failed)?;
    root.present().map_err(failed)
}

/// A short, readable number for labels: 3 significant digits or integers.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || a == a.trunc() {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Bars from 0, each labelled with its value; y in `unit`.
pub fn bar_chart(title: &str, unit: &str, bars: &[Bar]) -> Result {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let top = bars.iter().map(|b| b.value).fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.15;
        let n = bars.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(70)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..n as f64, 0.0..top)
            .map_err(failed)?;
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.min(30))
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 0.01 {
                    labels.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(unit)
            .y_label_formatter(&|y| short(*y))
            .draw()
            .map_err(failed)?;
        chart
            .draw_series(
                bars.iter()
                    .enumerate()
                    .map(|(i, b)| Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, b.value)], BAR.filled())),
            )
            .map_err(failed)?;
        chart
            .draw_series(
                bars.iter().enumerate().map(|(i, b)| {
                    Text::new(short(b.value), (i as f64 + 0.2, b.value + top * 0.05), ("sans-serif", 13))
                }),
            )
            .map_err(failed)?;
        root.present().map_err(failed)?;
    }
    Ok(svg)
}

fn range(values: impl Iterator<Item = f64> + Clone, from_zero: bool) -> std::ops::Range<f64> {
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    let lo = if from_zero { lo.min(0.0) } else { lo };
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.05).max(1e-9);
    (if from_zero && lo >= 0.0 { lo } else { lo - pad })..hi + pad
}

/// Lines with their points marked, one colour per series, a legend.
/// `x_format` writes the x labels (the spectrum's are percentiles).
pub fn xy_chart(title: &str, x_desc: &str, unit: &str, series: &[Series], x_format: &dyn Fn(&f64) -> String) -> Result {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let all = || series.iter().flat_map(|s| s.points.iter());
        let xs = range(all().map(|p| p.0), false);
        let ys = range(all().map(|p| p.1), true);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(xs, ys)
            .map_err(failed)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(unit)
            .x_label_formatter(x_format)
            .y_label_formatter(&|y| short(*y))
            .draw()
            .map_err(failed)?;
        for (i, s) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(s.points.iter().map(|p| (p.0, p.1)), colour.stroke_width(2)))
                .map_err(failed)?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
            if s.points.len() <= 60 {
                chart
                    .draw_series(s.points.iter().map(|p| Circle::new((p.0, p.1), 3, colour.filled())))
                    .map_err(failed)?;
            }
        }
        legend_and_present(&mut chart, &root)?;
    }
    Ok(svg)
}

/// A metric run after run: the values, the baseline each was judged
/// against (dashed), regressions as red squares.
pub fn history_chart(title: &str, unit: &str, steps: &[Step]) -> Result {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let n = steps.len().max(1);
        let ys = range(steps.iter().map(|s| s.value).chain(steps.iter().filter_map(|s| s.baseline)), true);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, ys)
            .map_err(failed)?;
        let runs: Vec<i64> = steps.iter().map(|s| s.run).collect();
        chart
            .configure_mesh()
            .x_desc("run")
            .y_desc(unit)
            .x_labels(n.min(20))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    runs.get(i as usize).map(|r| format!("#{r}")).unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| short(*y))
            .draw()
            .map_err(failed)?;
        let line = PALETTE[0];
        chart
            .draw_series(LineSeries::new(
                steps.iter().enumerate().map(|(i, s)| (i as f64, s.value)),
                line.stroke_width(2),
            ))
            .map_err(failed)?
            .label("value")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], line.stroke_width(2)));
        let base = PALETTE[1];
        chart
            .draw_series(
                steps
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.baseline.map(|b| Circle::new((i as f64, b), 2, base.filled()))),
            )
            .map_err(failed)?
            .label("median of the previous runs")
            .legend(move |(x, y)| Circle::new((x + 9, y), 2, base.filled()));
        chart
            .draw_series(steps.iter().enumerate().filter(|(_, s)| s.regression).map(|(i, s)| {
                EmptyElement::at((i as f64, s.value)) + Rectangle::new([(-6, -6), (6, 6)], REGRESSION.filled())
            }))
            .map_err(failed)?
            .label("regression (worse than 125% of that median)")
            .legend(move |(x, y)| Rectangle::new([(x + 5, y - 4), (x + 13, y + 4)], REGRESSION.filled()));
        legend_and_present(&mut chart, &root)?;
    }
    Ok(svg)
}

/// The x labels of the percentile spectrum: 0% 90% 99% 99.9% …
pub fn percentile_label(x: &f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    match x.round() as i32 {
        _ if (x - x.round()).abs() > 0.01 => String::new(),
        0 => "0%".into(),
        1 => "90%".into(),
        k => format!("{p:.*}%", (k - 2).max(0) as usize),
    }
}
