//! Charts drawn on the server as SVG text, so a page reads with JavaScript
//! off and a report inlines them. Every chart has a title, axis titles with
//! their units, tick labels and a legend; series take the colours of a
//! colour-blind-safe palette (Okabe and Ito's); an axis is logarithmic when
//! its values span decades. Every mark carries what it draws
//! (`data-series`, `data-x`, `data-value`, and a `<title>` a browser shows
//! on hover), so a test reads the values back from the DOM and a reader
//! finds each one in the table beside the chart.

use std::fmt::Write;

/// Okabe and Ito's palette, told apart with every common colour-vision
/// deficiency; black last (it is also the axes' colour).
pub const PALETTE: [&str; 8] = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"];

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// From zero when every value is positive.
    Linear,
    Log,
}

impl Scale {
    /// Logarithmic when the positive `values` span more than a decade and a
    /// half (the largest over 30 times the smallest), else linear.
    pub fn for_values(values: impl IntoIterator<Item = f64>) -> Scale {
        let (lo, hi) = values
            .into_iter()
            .filter(|v| v.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if lo > 0.0 && hi / lo > 30.0 {
            Scale::Log
        } else {
            Scale::Linear
        }
    }
}

/// A numeric axis.
pub struct Axis<'a> {
    /// What it measures, with the unit: "CPU per repetition (µs)".
    pub title: String,
    pub scale: Scale,
    /// Writes a tick label.
    pub format: &'a dyn Fn(f64) -> String,
    /// Where the ticks go; `None`: round numbers chosen from the values.
    pub ticks: Option<Vec<f64>>,
}

impl<'a> Axis<'a> {
    pub fn new(title: impl Into<String>, scale: Scale, format: &'a dyn Fn(f64) -> String) -> Axis<'a> {
        Axis { title: title.into(), scale, format, ticks: None }
    }
}

/// The x axis: numbers, or named groups side by side (bars).
pub enum XAxis<'a> {
    Numeric(Axis<'a>),
    /// The groups' names and the axis title; a mark's x is its group's index.
    Groups(Vec<String>, String),
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A line through dots.
    Line,
    /// A bar per group (bars of several series stand side by side).
    Bar,
    /// Dots only.
    Dot,
    /// Squares only (regressions).
    Square,
}

/// One datum: where it is, the stored number it draws (`y` may be that
/// number in another unit), what the table calls its x, whether it is the
/// best of its workload (marked with a star).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub x: f64,
    pub y: f64,
    pub value: f64,
    pub x_label: String,
    pub best: bool,
}

impl Mark {
    /// A mark drawing `y` as stored.
    pub fn new(x: f64, y: f64, x_label: impl Into<String>, best: bool) -> Mark {
        Mark { x, y, value: y, x_label: x_label.into(), best }
    }

    /// The same mark, drawing `value` (stored in another unit) at its `y`.
    pub fn of_stored(self, value: f64) -> Mark {
        Mark { value, ..self }
    }
}

pub struct Series {
    pub name: String,
    pub shape: Shape,
    /// `None`: the palette's colour for the series' place.
    pub colour: Option<&'static str>,
    pub marks: Vec<Mark>,
}

pub struct Plot<'a> {
    pub title: String,
    pub x: XAxis<'a>,
    pub y: Axis<'a>,
    pub series: Vec<Series>,
    /// Width and height in pixels (the page scales it down to fit).
    pub size: (f64, f64),
}

/// What the legend calls a star.
const BEST: &str = "best of its workload";

/// The size of a chart across the page.
pub const WIDE: (f64, f64) = (860.0, 420.0);
/// The size of one panel of a grid of charts.
pub const PANEL: (f64, f64) = (520.0, 330.0);

/// `v` to three significant figures ("39800", "5.21", "0.0123"): the
/// precision the measurements have, and the tables print. A whole number
/// (a count, a concurrency) keeps no decimals: "4", not "4.00".
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() { "-".into() } else { format!("{v}") };
    }
    if v == v.trunc() && v.abs() < 1000.0 {
        return format!("{v:.0}");
    }
    let magnitude = v.abs().log10().floor() as i32;
    let unit = 10f64.powi(magnitude - 2);
    let rounded = (v / unit).round() * unit;
    // Rounding up may add a digit (999.7 → 1000): count again.
    let magnitude = rounded.abs().log10().floor() as i32;
    format!("{rounded:.*}", (2 - magnitude).max(0) as usize)
}

/// A size in bytes as people write it: "4 KiB", "1 MiB", "6040 B".
pub fn bytes(v: f64) -> String {
    crate::probe::suites::ipc::size_label(v.round() as usize)
}

/// A tick label without the zeros a round number does not need ("0.5",
/// not "0.500"); labels that are not plain numbers are left as they are.
fn tidy(label: String) -> String {
    if label.contains('.') && label.parse::<f64>().is_ok() {
        label.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        label
    }
}

/// Text escaped for SVG and HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A mapping from values to pixels along one axis.
struct Mapping {
    scale: Scale,
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Mapping {
    fn at(&self, v: f64) -> f64 {
        let f = match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()),
        };
        self.from + f * (self.to - self.from)
    }
}

/// A round step near `span / 5`: 1, 2 or 5 times a power of ten.
fn step(span: f64) -> f64 {
    let raw = span / 5.0;
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|s| *s >= raw).unwrap_or(10.0 * power)
}

/// The axis's range and ticks for `values`.
fn range(axis: &Axis, values: &[f64]) -> (f64, f64, Vec<f64>) {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match axis.scale {
        // Given ticks (the sizes measured) bound the axis: no empty decade
        // beyond them.
        Scale::Log if axis.ticks.is_some() => {
            let ticks = axis.ticks.clone().unwrap_or_default();
            let all = || ticks.iter().chain(&finite).copied().filter(|v| *v > 0.0);
            let lo = all().fold(f64::INFINITY, f64::min);
            let hi = all().fold(f64::NEG_INFINITY, f64::max);
            if lo < hi {
                (lo, hi, ticks)
            } else {
                (lo / 2.0, lo * 2.0, ticks)
            }
        }
        Scale::Log => {
            let positive = finite.iter().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
            let (lo, hi) = if positive.is_finite() { (positive, hi.max(positive)) } else { (1.0, 10.0) };
            let (a, b) = (lo.log10().floor() as i32, (hi.log10().ceil() as i32).max(lo.log10().floor() as i32 + 1));
            let between: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
            let ticks = (a..=b)
                .flat_map(|k| between.iter().map(move |m| m * 10f64.powi(k)))
                .filter(|t| (10f64.powi(a)..=10f64.powi(b) * 1.0001).contains(t))
                .collect();
            (10f64.powi(a), 10f64.powi(b), ticks)
        }
        Scale::Linear => {
            let (lo, hi) = if lo.is_finite() { (lo.min(0.0), hi.max(lo.min(0.0))) } else { (0.0, 1.0) };
            let hi = if hi > lo { hi } else { lo + 1.0 };
            let s = step(hi - lo);
            let top = (hi / s).ceil() * s;
            let bottom = (lo / s).floor() * s;
            let ticks = axis.ticks.clone().unwrap_or_else(|| {
                (0..).map(|i| bottom + s * f64::from(i)).take_while(|t| *t <= top + s * 1e-9).collect()
            });
            (bottom, top, ticks)
        }
    }
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, class: &str, extra: &str, body: &str) {
    let _ = write!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\" class=\"{class}\"{extra}>{}</text>",
        escape(body)
    );
}

/// Draws `plot`.
pub fn draw(plot: &Plot) -> String {
    let (width, height) = plot.size;
    let legend = plot.series.len() > 1 || plot.series.iter().any(|s| s.shape != Shape::Bar);
    let starred = plot.series.iter().any(|s| s.marks.iter().any(|m| m.best));
    let legend_width = if legend {
        let names = plot.series.iter().map(|s| s.name.chars().count());
        let longest = names.chain(starred.then_some(BEST.len())).max().unwrap_or(0) as f64;
        (longest * 6.6 + 34.0).clamp(90.0, width * 0.34)
    } else {
        0.0
    };
    // Group names too long to stand side by side are written slanted,
    // below a plot shortened to make room for them.
    let slant = match &plot.x {
        XAxis::Groups(names, _) => {
            let room = (width - 88.0 - legend_width) * 0.9;
            let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0) as f64;
            (names.iter().map(|n| n.chars().count()).sum::<usize>() as f64 * 6.6 > room).then_some(longest * 4.4)
        }
        XAxis::Numeric(_) => None,
    };
    let (left, right, top) = (74.0, width - 14.0 - legend_width, 34.0);
    let bottom = height - 62.0 - slant.unwrap_or(0.0).min(height * 0.3);
    let ys: Vec<f64> = plot.series.iter().flat_map(|s| s.marks.iter().map(|m| m.y)).collect();
    let (y_lo, y_hi, y_ticks) = range(&plot.y, &ys);
    let y = Mapping { scale: plot.y.scale, lo: y_lo, hi: y_hi, from: bottom, to: top };

    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" font-family=\"sans-serif\" font-size=\"12\"><title>{}</title>\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>",
        escape(&plot.title)
    );
    text(
        &mut out,
        (left + right) / 2.0,
        20.0,
        "middle",
        "chart-title",
        " font-size=\"14\" font-weight=\"bold\"",
        &plot.title,
    );

    // The y axis: grid lines, ticks, title.
    for &t in &y_ticks {
        let py = y.at(t);
        let _ = write!(out, "<line x1=\"{left}\" x2=\"{right}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#e4e4e4\"/>");
        text(&mut out, left - 6.0, py + 4.0, "end", "tick", " data-axis=\"y\"", &tidy((plot.y.format)(t)));
    }
    let mid = (top + bottom) / 2.0;
    let _ = write!(
        out,
        "<text x=\"16\" y=\"{mid:.1}\" text-anchor=\"middle\" class=\"axis-title\" data-axis=\"y\" \
         transform=\"rotate(-90 16 {mid:.1})\">{}</text>",
        escape(&plot.y.title)
    );

    // The x axis.
    let x_title;
    let x_map: Box<dyn Fn(f64) -> f64> = match &plot.x {
        XAxis::Numeric(axis) => {
            x_title = axis.title.clone();
            let xs: Vec<f64> = plot.series.iter().flat_map(|s| s.marks.iter().map(|m| m.x)).collect();
            let (lo, hi, ticks) = match axis.scale {
                // Lines start where the data starts: no zero on an x axis.
                Scale::Linear => {
                    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let (lo, hi) = if lo < hi { (lo, hi) } else { (lo - 1.0, lo + 1.0) };
                    let s = step(hi - lo);
                    let (lo, hi) = ((lo / s).floor() * s, (hi / s).ceil() * s);
                    let ticks = axis.ticks.clone().unwrap_or_else(|| {
                        (0..).map(|i| lo + s * f64::from(i)).take_while(|t| *t <= hi + s * 1e-9).collect()
                    });
                    (lo, hi, ticks)
                }
                Scale::Log => range(axis, &xs),
            };
            let m = Mapping { scale: axis.scale, lo, hi, from: left + 10.0, to: right - 10.0 };
            for &t in &ticks {
                let px = m.at(t);
                let _ = write!(
                    out,
                    "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{bottom}\" y2=\"{:.1}\" stroke=\"#888\"/>",
                    bottom + 5.0
                );
                text(&mut out, px, bottom + 19.0, "middle", "tick", " data-axis=\"x\"", &tidy((axis.format)(t)));
            }
            Box::new(move |v| m.at(v))
        }
        XAxis::Groups(names, title) => {
            x_title = title.clone();
            let n = names.len().max(1) as f64;
            let width = (right - left) / n;
            // Long names take turns on two rows.
            for (i, name) in names.iter().enumerate() {
                let px = left + width * (i as f64 + 0.5);
                match slant {
                    Some(_) => {
                        let at = format!(" data-axis=\"x\" transform=\"rotate(-35 {px:.1} {:.1})\"", bottom + 14.0);
                        text(&mut out, px, bottom + 14.0, "end", "tick", &at, name);
                    }
                    None => text(&mut out, px, bottom + 19.0, "middle", "tick", " data-axis=\"x\"", name),
                }
            }
            Box::new(move |v| left + width * (v + 0.5))
        }
    };
    text(&mut out, (left + right) / 2.0, height - 10.0, "middle", "axis-title", " data-axis=\"x\"", &x_title);
    let _ =
        write!(out, "<path d=\"M{left},{top} V{bottom} H{right}\" fill=\"none\" stroke=\"#000\" stroke-width=\"1\"/>");

    // The marks.
    let bars: Vec<usize> = (0..plot.series.len()).filter(|&i| plot.series[i].shape == Shape::Bar).collect();
    let group_width = match &plot.x {
        XAxis::Groups(names, _) => (right - left) / names.len().max(1) as f64,
        XAxis::Numeric(_) => 0.0,
    };
    let bar_width = group_width * 0.8 / bars.len().max(1) as f64;
    let mut palette = 0;
    let mut legend_rows = Vec::new();
    for (i, s) in plot.series.iter().enumerate() {
        let colour = s.colour.unwrap_or_else(|| {
            palette += 1;
            PALETTE[(palette - 1) % PALETTE.len()]
        });
        let name = escape(&s.name);
        let _ = write!(out, "<g class=\"series\" data-series=\"{name}\">");
        if s.shape == Shape::Line && s.marks.len() > 1 {
            let points: Vec<String> = s.marks.iter().map(|m| format!("{:.1},{:.1}", x_map(m.x), y.at(m.y))).collect();
            let _ = write!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                points.join(" ")
            );
        }
        for m in &s.marks {
            let attrs = format!(
                "class=\"mark\" data-series=\"{name}\" data-x=\"{}\" data-value=\"{}\"{}",
                escape(&m.x_label),
                m.value,
                if m.best { " data-best=\"true\"" } else { "" }
            );
            let tip = format!("<title>{name}, {}: {}</title>", escape(&m.x_label), sig3(m.y));
            let (px, py) = (x_map(m.x), y.at(m.y));
            let star_at = match s.shape {
                Shape::Bar => {
                    let slot = bars.iter().position(|&b| b == i).unwrap_or(0) as f64;
                    let x0 = x_map(m.x) - group_width * 0.4 + slot * bar_width;
                    let (top_px, base) = (py.min(bottom), bottom);
                    let _ = write!(
                        out,
                        "<rect {attrs} x=\"{x0:.1}\" y=\"{top_px:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\">{tip}</rect>",
                        (bar_width - 1.0).max(1.0),
                        (base - top_px).max(0.0)
                    );
                    (x0 + bar_width / 2.0, top_px - 4.0)
                }
                Shape::Square => {
                    let _ = write!(
                        out,
                        "<rect {attrs} x=\"{:.1}\" y=\"{:.1}\" width=\"11\" height=\"11\" fill=\"{colour}\">{tip}</rect>",
                        px - 5.5,
                        py - 5.5
                    );
                    (px, py - 8.0)
                }
                Shape::Line | Shape::Dot => {
                    let _ = write!(
                        out,
                        "<circle {attrs} cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3.5\" fill=\"{colour}\">{tip}</circle>"
                    );
                    (px, py - 8.0)
                }
            };
            if m.best {
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"best\" font-size=\"15\" \
                     data-series=\"{name}\" data-x=\"{}\">★</text>",
                    star_at.0,
                    star_at.1,
                    escape(&m.x_label)
                );
            }
        }
        out.push_str("</g>");
        legend_rows.push((s.name.as_str(), colour, s.shape));
    }

    if legend {
        let x0 = right + 14.0;
        for (i, (name, colour, shape)) in legend_rows.iter().enumerate() {
            let ly = top + 8.0 + 18.0 * i as f64;
            let swatch = match shape {
                Shape::Line => format!(
                    "<line x1=\"{x0}\" x2=\"{:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\"/>\
                     <circle cx=\"{:.1}\" cy=\"{ly:.1}\" r=\"3.5\" fill=\"{colour}\"/>",
                    x0 + 18.0,
                    x0 + 9.0
                ),
                Shape::Dot => format!("<circle cx=\"{:.1}\" cy=\"{ly:.1}\" r=\"3.5\" fill=\"{colour}\"/>", x0 + 9.0),
                Shape::Bar | Shape::Square => format!(
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"11\" height=\"11\" fill=\"{colour}\"/>",
                    x0 + 3.5,
                    ly - 5.5
                ),
            };
            let _ = write!(out, "<g class=\"legend\" data-series=\"{}\">{swatch}", escape(name));
            text(&mut out, x0 + 24.0, ly + 4.0, "start", "legend-label", "", name);
            out.push_str("</g>");
        }
        if starred {
            let ly = top + 8.0 + 18.0 * legend_rows.len() as f64;
            text(&mut out, x0 + 9.0, ly + 5.0, "middle", "best", " font-size=\"15\"", "★");
            text(&mut out, x0 + 24.0, ly + 4.0, "start", "legend-label", "", BEST);
        }
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_figures() {
        assert_eq!(sig3(39780.120368100244), "39800");
        assert_eq!(sig3(5.2049), "5.20");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(999.7), "1000");
        assert_eq!(sig3(-24.66), "-24.7");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(4.0), "4");
        assert_eq!(bytes(65536.0), "64 KiB");
        assert_eq!(bytes(6040.0), "6040 B");
        assert_eq!(
            (tidy(sig3(0.5)), tidy(sig3(1.5)), tidy("99.0%".into())),
            ("0.5".into(), "1.5".into(), "99.0%".into())
        );
    }

    #[test]
    fn decades_make_a_log_axis_with_a_tick_per_decade() {
        assert_eq!(Scale::for_values([1200.0, 40_000.0]), Scale::Log);
        assert_eq!(Scale::for_values([116.0, 400.0]), Scale::Linear);
        let f = |v: f64| sig3(v);
        let axis = Axis::new("req/s", Scale::Log, &f);
        let (lo, hi, ticks) = range(&axis, &[1200.0, 40_000.0]);
        assert_eq!((lo, hi), (1000.0, 100_000.0));
        assert_eq!(ticks, vec![1000.0, 2000.0, 5000.0, 10_000.0, 20_000.0, 50_000.0, 100_000.0]);
        let axis = Axis::new("µs", Scale::Linear, &f);
        let (lo, hi, ticks) = range(&axis, &[116.0, 400.0]);
        assert_eq!((lo, hi, ticks.len()), (0.0, 400.0, 5));
    }

    #[test]
    fn every_mark_carries_its_value_and_the_best_is_starred() {
        let f = |v: f64| sig3(v);
        let plot = Plot {
            title: "t".into(),
            x: XAxis::Groups(vec!["1 KiB".into(), "2 KiB".into()], "buffer".into()),
            y: Axis::new("CPU (µs)", Scale::Linear, &f),
            series: vec![Series {
                name: "① stdio".into(),
                shape: Shape::Bar,
                colour: None,
                marks: vec![Mark::new(0.0, 346.7, "1 KiB", false), Mark::new(1.0, 247.5, "2 KiB", true)],
            }],
            size: WIDE,
        };
        let svg = draw(&plot);
        assert!(svg.contains("data-x=\"1 KiB\" data-value=\"346.7\""), "{svg}");
        assert!(svg.contains("data-value=\"247.5\" data-best=\"true\""), "{svg}");
        assert_eq!(svg.matches("class=\"best\"").count(), 1, "one star, no legend for one series of bars");
        assert!(svg.contains(">CPU (µs)</text>") && svg.contains(">buffer</text>"), "{svg}");
        assert!(!svg.contains("rotate(-35"), "two short names stand level");
    }

    #[test]
    fn names_too_long_to_stand_side_by_side_are_slanted() {
        let names: Vec<String> = (0..24).map(|i| format!("#{i} event, 1 CPU, CGI {} %", i * 4)).collect();
        let marks =
            names.iter().enumerate().map(|(i, n)| Mark::new(i as f64, 1000.0 * (i + 1) as f64, n.as_str(), false));
        let f = |v: f64| sig3(v);
        let plot = Plot {
            title: "t".into(),
            x: XAxis::Groups(names.clone(), "run".into()),
            y: Axis::new("req/s", Scale::Linear, &f),
            series: vec![Series { name: "capacity".into(), shape: Shape::Bar, colour: None, marks: marks.collect() }],
            size: WIDE,
        };
        assert_eq!(draw(&plot).matches("rotate(-35").count(), 24);
    }
}
