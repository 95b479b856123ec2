//! The lab's dashboard: pages over the results store, made from templates
//! with the charts drawn as inline SVG, so they read with JavaScript off
//! and a report is one self-contained file.
//!
//! This module knows nothing of HTTP: [`Dashboard::page`] maps a path and
//! query to a [`Page`]; `tern lab serve` mounts it on tern's own server,
//! and `tern lab report` writes [`report`] to a file.
//!
//! Pages: `/` (runs and hosts, filterable; the chart menus), `/run/ID` (an
//! experiment's run opens with its story: `story/`), `/compare?run=ID…`
//! (runs of one experiment overlaid), `/chart?metric=M&view=V[&subject=S]
//! [&kind=K&host=H][&run=ID…]`, `/spectrum?run=ID…`. `views.rs` computes
//! what a generic chart shows, `svg.rs` draws every chart.

mod story;
mod svg;
pub mod views;

use std::path::PathBuf;

use askama::Template;

use crate::store::{self, Filter, Point, Run, Status, Store};
use story::Story;
use svg::{sig3, Axis, Mark, Plot, Scale, Series, Shape, XAxis};
use views::View;

/// A page, as HTTP will send it.
pub struct Page {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// The dashboard over the store at `path`, opened for each page so it
/// always shows the runs stored meanwhile.
pub struct Dashboard {
    pub path: PathBuf,
}

/// A chart with the data it draws, as a table beside it.
pub struct Chart {
    pub title: String,
    pub view: String,
    pub metric: String,
    pub unit: String,
    pub x_name: String,
    pub svg: String,
    pub rows: Vec<Row>,
}

/// One datum of a chart: the runs behind it, its x (or group) and value.
pub struct Row {
    pub runs: String,
    pub link: Option<i64>,
    pub x: String,
    pub value: f64,
    pub shown: String,
    pub flag: bool,
    pub note: String,
}

/// A run as the tables list it.
pub struct RunRow {
    pub id: i64,
    pub started: String,
    pub kind: String,
    pub status: &'static str,
    pub host: String,
    pub label: String,
    pub measurements: u64,
    pub checked: bool,
}

/// A stored measurement as a run's page lists it.
pub struct MeasurementRow {
    pub subject: String,
    pub metric: String,
    pub value: f64,
    pub shown: String,
    pub unit: String,
    pub history: String,
}

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    title: String,
    nav: bool,
    runs: Vec<RunRow>,
    hosts: Vec<(i64, String, u64)>,
    kinds: Vec<String>,
    filter_kind: String,
    filter_host: String,
    filter_status: String,
    filter_text: String,
    metrics: Vec<(String, String)>,
    views: Vec<(&'static str, &'static str)>,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    title: String,
    nav: bool,
    run: RunRow,
    facts: Vec<(&'static str, String)>,
    stories: Vec<Story>,
    measurements: Vec<MeasurementRow>,
    charts: Vec<Chart>,
}

#[derive(Template)]
#[template(path = "compare.html")]
struct ComparePage {
    title: String,
    nav: bool,
    stories: Vec<Story>,
}

#[derive(Template)]
#[template(path = "chart.html")]
struct ChartPage {
    title: String,
    nav: bool,
    metric: String,
    view: String,
    subject: String,
    /// The history's experiment kind and host (empty: any).
    kind: String,
    host: String,
    metrics: Vec<(String, String)>,
    views: Vec<(&'static str, &'static str)>,
    subjects: Vec<String>,
    runs: Vec<i64>,
    charts: Vec<Chart>,
    note: String,
}

#[derive(Template)]
#[template(path = "report.html")]
struct ReportPage {
    title: String,
    nav: bool,
    generated: String,
    runs: Vec<RunRow>,
    stories: Vec<Story>,
    charts: Vec<Chart>,
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage {
    title: String,
    nav: bool,
    message: String,
}

/// The decoded `name=value` pairs of a query string.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        let decode =
            |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
        Query(
            q.unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
    }

    fn ids(&self, name: &str) -> Vec<i64> {
        self.0.iter().filter(|(k, _)| k == name).filter_map(|(_, v)| v.trim().parse().ok()).collect()
    }
}

fn html(status: u16, body: Result<String, askama::Error>) -> Page {
    match body {
        Ok(text) => Page { status, content_type: "text/html; charset=utf-8", body: text.into_bytes() },
        Err(e) => Page {
            status: 500,
            content_type: "text/plain; charset=utf-8",
            body: format!("cannot render the page: {e}\n").into_bytes(),
        },
    }
}

fn message(status: u16, title: &str, text: String) -> Page {
    html(status, MessagePage { title: title.into(), nav: true, message: text }.render())
}

fn run_row(r: &Run) -> RunRow {
    RunRow {
        id: r.id,
        started: store::utc(r.data.started_at),
        kind: r.data.kind.clone(),
        status: r.data.status.name(),
        host: r.host.hostname.clone(),
        label: r.data.label.clone(),
        measurements: r.data.measurements.len() as u64,
        checked: false,
    }
}

fn summary_row(r: &store::RunSummary) -> RunRow {
    RunRow {
        id: r.id,
        started: store::utc(r.started_at),
        kind: r.kind.clone(),
        status: r.status.name(),
        host: r.host.hostname.clone(),
        label: r.label.clone(),
        measurements: r.measurements,
        checked: false,
    }
}

fn status_of(name: &str) -> Option<Status> {
    match name {
        "complete" => Some(Status::Complete),
        "interrupted" => Some(Status::Interrupted),
        "failed" => Some(Status::Failed),
        _ => None,
    }
}

/// `run` and the runs stored with it: E5 stores each agent's suites as a
/// run of that host, started at the same moment, shown as columns beside
/// this host's.
fn with_companions(store: &Store, run: Run) -> Result<Vec<Run>, store::Error> {
    if run.data.kind != "e5" {
        return Ok(vec![run]);
    }
    let filter = Filter { kind: Some(run.data.kind.clone()), ..Filter::default() };
    let mut ids: Vec<i64> = store
        .list(&filter)?
        .into_iter()
        .filter(|r| r.started_at == run.data.started_at && r.id != run.id)
        .map(|r| r.id)
        .collect();
    ids.sort_unstable();
    let mut runs = vec![run];
    for id in ids {
        runs.push(store.get(id)?);
    }
    Ok(runs)
}

impl Dashboard {
    /// The page for `path` (normalised, no leading `/`) and `query`.
    pub fn page(&self, path: &str, query: Option<&str>) -> Page {
        let q = Query::parse(query);
        let store = match Store::open(&self.path) {
            Ok(s) => s,
            Err(e) => return message(500, "store unavailable", e.to_string()),
        };
        let result = match path {
            "" => self.index(&store, &q),
            "chart" => self.chart(&store, &q),
            "spectrum" => self.spectrum(&store, &q),
            "compare" => self.compare(&store, &q),
            _ => match path.strip_prefix("run/").and_then(|id| id.parse().ok()) {
                Some(id) => self.run(&store, id),
                None => return message(404, "not found", format!("no page /{path} here")),
            },
        };
        result.unwrap_or_else(|e| match e {
            store::Error::NoRun(id) => message(404, "not found", format!("no run {id} in the store")),
            e => message(500, "store error", e.to_string()),
        })
    }

    fn index(&self, store: &Store, q: &Query) -> Result<Page, store::Error> {
        let filter = Filter {
            kind: q.get("kind").map(str::to_string),
            host: q.get("host").and_then(|h| h.parse().ok()),
            status: q.get("status").and_then(status_of),
            text: q.get("text").map(str::to_string),
        };
        let runs = store.list(&filter)?;
        let mut kinds: Vec<String> = store.list(&Filter::default())?.into_iter().map(|r| r.kind).collect();
        kinds.sort();
        kinds.dedup();
        let hosts = store.hosts()?.into_iter().map(|(h, _, n)| (h.id, h.fingerprint, n)).collect();
        let page = IndexPage {
            title: "runs".into(),
            nav: true,
            runs: runs.iter().map(summary_row).collect(),
            hosts,
            kinds,
            filter_kind: filter.kind.unwrap_or_default(),
            filter_host: filter.host.map(|h| h.to_string()).unwrap_or_default(),
            filter_status: filter.status.map(|s| s.name().to_string()).unwrap_or_default(),
            filter_text: filter.text.unwrap_or_default(),
            metrics: store.metrics()?,
            views: views::VIEWS.to_vec(),
        };
        Ok(html(200, page.render()))
    }

    fn run(&self, store: &Store, id: i64) -> Result<Page, store::Error> {
        let run = store.get(id)?;
        let d = &run.data;
        let e = &d.environment;
        let facts = vec![
            ("host", run.host.fingerprint.clone()),
            ("machine state", e.machine_state()),
            ("took", format!("{:.1} s", d.finished_at - d.started_at)),
            ("tern", d.tern_version.clone()),
            ("command line", d.command_line.join(" ")),
            ("config", d.config.to_string()),
        ];
        let measurements = d
            .measurements
            .iter()
            .map(|m| MeasurementRow {
                subject: m.subject.clone(),
                metric: m.metric.clone(),
                value: m.value,
                shown: sig3(m.value),
                unit: m.unit.clone(),
                history: story::history_link(&run, m),
            })
            .collect();
        let charts = spectrum_chart(std::slice::from_ref(&run), true).into_iter().collect();
        let title = format!("run {id}: {}", d.label);
        let row = run_row(&run);
        let stories = story::of(&with_companions(store, run)?, true).into_iter().collect();
        let page = RunPage { title, nav: true, run: row, facts, stories, measurements, charts };
        Ok(html(200, page.render()))
    }

    /// Runs of one experiment overlaid: each run its own series.
    fn compare(&self, store: &Store, q: &Query) -> Result<Page, store::Error> {
        let runs = q.ids("run").into_iter().map(|id| store.get(id)).collect::<Result<Vec<_>, _>>()?;
        let Some(first) = runs.first() else {
            return Ok(message(400, "bad request", "compare needs runs: /compare?run=ID&run=ID".into()));
        };
        if let Some(other) = runs.iter().find(|r| r.data.kind != first.data.kind) {
            return Ok(message(
                400,
                "bad request",
                format!(
                    "run {} is {} and run {} is {}: compare runs of one experiment",
                    first.id, first.data.kind, other.id, other.data.kind
                ),
            ));
        }
        let Some(s) = story::of(&runs, true) else {
            return Ok(message(400, "bad request", format!("{} runs are not an experiment", first.data.kind)));
        };
        let ids: Vec<String> = runs.iter().map(|r| format!("#{}", r.id)).collect();
        let page =
            ComparePage { title: format!("{}: runs {}", first.data.kind, ids.join(" ")), nav: true, stories: vec![s] };
        Ok(html(200, page.render()))
    }

    fn chart(&self, store: &Store, q: &Query) -> Result<Page, store::Error> {
        let metrics = store.metrics()?;
        let runs = q.ids("run");
        // Without a metric: the first the runs asked for have, else any.
        let metric = match q.get("metric") {
            Some(m) => Some(m.to_string()),
            None => match runs.first() {
                Some(&id) => store.get(id)?.data.measurements.first().map(|m| m.metric.clone()),
                None => metrics.first().map(|m| m.0.clone()),
            },
        };
        let view_name = q.get("view").unwrap_or("bar-run").to_string();
        let Some(view) = View::parse(&view_name) else {
            return Ok(message(400, "bad request", format!("no view {view_name:?}")));
        };
        let mut points = match &metric {
            Some(m) => store.points(m, None)?,
            None => Vec::new(),
        };
        if !runs.is_empty() {
            points.retain(|p| runs.contains(&p.run));
        }
        let kind = q.get("kind").map(str::to_string);
        let host: Option<i64> = q.get("host").and_then(|h| h.parse().ok());
        points.retain(|p| kind.as_ref().is_none_or(|k| &p.kind == k) && host.is_none_or(|h| p.host.id == h));
        let mut subjects: Vec<String> = points.iter().map(|p| p.m.subject.clone()).collect();
        subjects.sort();
        subjects.dedup();
        // A history follows one subject: the chosen one, else the first.
        let subject = q
            .get("subject")
            .map(str::to_string)
            .or_else(|| (view == View::History && !subjects.is_empty()).then(|| subjects[0].clone()));
        if let Some(s) = &subject {
            points.retain(|p| &p.m.subject == s);
        }
        let mut note = String::new();
        if view == View::BarRun && points.len() > MAX_BARS {
            note = format!("the latest {MAX_BARS} of {} measurements", points.len());
            points.drain(..points.len() - MAX_BARS);
        }
        if let (View::History, Some(k), Some(h)) = (view, &kind, host) {
            note = format!("the runs of {k} on host {h}");
        }
        let metric = metric.unwrap_or_default();
        let charts = chart_of(&metric, view, &view_name, &points, true).into_iter().collect();
        let page = ChartPage {
            title: if metric.is_empty() { "charts".into() } else { format!("{metric}: {}", describe(&view_name)) },
            nav: true,
            metric,
            view: view_name,
            subject: subject.unwrap_or_default(),
            kind: kind.unwrap_or_default(),
            host: host.map(|h| h.to_string()).unwrap_or_default(),
            metrics,
            views: views::VIEWS.to_vec(),
            subjects,
            runs,
            charts,
            note,
        };
        Ok(html(200, page.render()))
    }

    fn spectrum(&self, store: &Store, q: &Query) -> Result<Page, store::Error> {
        let mut ids = q.ids("run");
        if ids.is_empty() {
            // The latest runs that have histograms.
            ids = store.list(&Filter::default())?.iter().filter(|r| r.kind == "bench").take(3).map(|r| r.id).collect();
        }
        let runs = ids.iter().map(|&id| store.get(id)).collect::<Result<Vec<_>, _>>()?;
        let page = ChartPage {
            title: "latency percentile spectrum".into(),
            nav: true,
            metric: String::new(),
            view: String::new(),
            subject: String::new(),
            kind: String::new(),
            host: String::new(),
            metrics: Vec::new(),
            views: Vec::new(),
            subjects: Vec::new(),
            runs: ids,
            charts: spectrum_chart(&runs, true).into_iter().collect(),
            note: String::new(),
        };
        Ok(html(200, page.render()))
    }
}

/// Bars beyond this would be unreadable: a bar chart shows the latest.
const MAX_BARS: usize = 40;

fn describe(view: &str) -> &'static str {
    views::VIEWS.iter().find(|(v, _)| *v == view).map_or("", |(_, d)| d)
}

fn links(runs: &[i64], nav: bool) -> Option<i64> {
    (nav && runs.len() == 1).then(|| runs[0])
}

fn joined(runs: &[i64]) -> String {
    runs.iter().map(|r| format!("#{r}")).collect::<Vec<_>>().join(" ")
}

/// The chart of `points` (one metric) in `view`, with its data table.
fn chart_of(metric: &str, view: View, view_name: &str, points: &[Point], nav: bool) -> Option<Chart> {
    let first = points.first()?;
    let unit = first.m.unit.clone();
    let better = if first.m.better == crate::probe::figure::Better::Higher { "higher" } else { "lower" };
    let title = format!("{metric} ({unit}, {better} is better)");
    let y_title = format!("{metric} ({unit})");
    let (svg, x_name, rows) = match view {
        View::BarRun | View::BarHost | View::BarLabel => {
            let bars = views::bars(points, view);
            let rows = bars
                .iter()
                .map(|b| Row {
                    runs: joined(&b.runs),
                    link: links(&b.runs, nav),
                    x: b.label.clone(),
                    value: b.value,
                    shown: sig3(b.value),
                    flag: false,
                    note: if b.runs.len() > 1 { format!("mean of {} runs", b.runs.len()) } else { String::new() },
                })
                .collect();
            let x_name = match view {
                View::BarHost => "host",
                View::BarLabel => "configuration (run label)",
                _ => "run",
            };
            let marks = bars.iter().enumerate().map(|(i, b)| Mark::new(i as f64, b.value, b.label.clone(), false));
            let plot = Plot {
                title: title.clone(),
                x: XAxis::Groups(bars.iter().map(|b| b.label.clone()).collect(), x_name.into()),
                y: Axis::new(y_title, Scale::for_values(bars.iter().map(|b| b.value)), &sig3),
                series: vec![Series { name: metric.into(), shape: Shape::Bar, colour: None, marks: marks.collect() }],
                size: svg::WIDE,
            };
            (svg::draw(&plot), x_name, rows)
        }
        View::Xy(axis) => {
            let series = views::series(points, axis);
            let x_format: &dyn Fn(f64) -> String = if axis == views::Axis::Size { &svg::bytes } else { &sig3 };
            let rows = series
                .iter()
                .flat_map(|s| {
                    s.points.iter().map(move |p| Row {
                        runs: format!("#{}", p.2),
                        link: nav.then_some(p.2),
                        x: x_format(p.0),
                        value: p.1,
                        shown: sig3(p.1),
                        flag: false,
                        note: s.name.clone(),
                    })
                })
                .collect();
            let all = || series.iter().flat_map(|s| s.points.iter());
            let x_scale = if axis == views::Axis::Size { Scale::for_values(all().map(|p| p.0)) } else { Scale::Linear };
            let plot = Plot {
                title: title.clone(),
                x: XAxis::Numeric(Axis::new(axis.name(), x_scale, x_format)),
                y: Axis::new(y_title, Scale::for_values(all().map(|p| p.1)), &sig3),
                series: lines(&series, x_format),
                size: svg::WIDE,
            };
            (svg::draw(&plot), axis.name(), rows)
        }
        View::History => {
            let steps = views::history(points);
            let rows = steps
                .iter()
                .map(|s| Row {
                    runs: format!("#{}", s.run),
                    link: nav.then_some(s.run),
                    x: store::utc(s.started_at),
                    value: s.value,
                    shown: sig3(s.value),
                    flag: s.regression,
                    note: match (s.baseline, s.regression) {
                        (Some(b), true) => format!("regression: {} vs median {}", sig3(s.value), sig3(b)),
                        (Some(b), false) => format!("median of previous: {}", sig3(b)),
                        (None, _) => String::new(),
                    },
                })
                .collect();
            let label = |i: usize| format!("#{}", steps[i].run);
            let mark = |i: usize, y: f64| Mark::new(i as f64, y, label(i), false);
            let values = steps.iter().map(|s| s.value).chain(steps.iter().filter_map(|s| s.baseline));
            let plot = Plot {
                title: format!("{title}: {}", first.m.subject),
                x: XAxis::Groups((0..steps.len()).map(label).collect(), "run, oldest first".into()),
                y: Axis::new(y_title, Scale::for_values(values), &sig3),
                series: vec![
                    Series {
                        name: "value".into(),
                        shape: Shape::Line,
                        colour: None,
                        marks: steps.iter().enumerate().map(|(i, s)| mark(i, s.value)).collect(),
                    },
                    Series {
                        name: "median of the previous runs".into(),
                        shape: Shape::Dot,
                        colour: None,
                        marks: steps.iter().enumerate().filter_map(|(i, s)| Some(mark(i, s.baseline?))).collect(),
                    },
                    Series {
                        name: "regression (worse than 125% of that median)".into(),
                        shape: Shape::Square,
                        colour: Some(REGRESSION),
                        marks: steps
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| s.regression)
                            .map(|(i, s)| mark(i, s.value))
                            .collect(),
                    },
                ],
                size: svg::WIDE,
            };
            (svg::draw(&plot), "started", rows)
        }
    };
    Some(Chart { title, view: view_name.into(), metric: metric.into(), unit, x_name: x_name.into(), svg, rows })
}

/// The generic views' series as lines, each mark's x written by `x_label`.
fn lines(series: &[views::Series], x_label: &dyn Fn(f64) -> String) -> Vec<Series> {
    series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            shape: Shape::Line,
            colour: None,
            marks: s.points.iter().map(|p| Mark::new(p.0, p.1, x_label(p.0), false)).collect(),
        })
        .collect()
}

/// The colour of a regression's square (the palette's vermillion).
const REGRESSION: &str = svg::PALETTE[3];

/// The latency percentile spectrum of the runs' histograms, overlaid.
fn spectrum_chart(runs: &[Run], nav: bool) -> Option<Chart> {
    let series = views::spectra(runs);
    if series.is_empty() {
        return None;
    }
    let title = "latency by percentile (µs)".to_string();
    let decades = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0, f64::max).ceil() as i32;
    let format = |x: f64| views::percentile_label(x);
    let mut x = Axis::new("percentile, on a log 1/(1-p) axis", Scale::Linear, &format);
    x.ticks = Some((0..=decades).map(f64::from).collect());
    let plot = Plot {
        title: title.clone(),
        x: XAxis::Numeric(x),
        y: Axis::new(
            "latency (µs)",
            Scale::for_values(series.iter().flat_map(|s| s.points.iter().map(|p| p.1))),
            &sig3,
        ),
        series: lines(&series, &|x| format!("p{}", sig3(100.0 * (1.0 - 10f64.powf(-x))))),
        size: svg::WIDE,
    };
    let rows = series
        .iter()
        .flat_map(|s| {
            views::NAMED.into_iter().filter_map(move |(p, name)| {
                let x = views::spectrum_x(p);
                let at = s.points.iter().find(|pt| (pt.0 - x).abs() < 1e-12)?;
                Some(Row {
                    runs: format!("#{}", at.2),
                    link: nav.then_some(at.2),
                    x: name.to_string(),
                    value: at.1,
                    shown: sig3(at.1),
                    flag: false,
                    note: s.name.clone(),
                })
            })
        })
        .collect();
    Some(Chart {
        title,
        view: "spectrum".into(),
        metric: "latency".into(),
        unit: "µs".into(),
        x_name: "percentile".into(),
        svg: svg::draw(&plot),
        rows,
    })
}

/// A self-contained HTML report of the runs `ids`: their table; each
/// experiment's story (its page, without links); for the other runs a bar
/// chart per metric they share; and their latency spectra.
pub fn report(store: &Store, ids: &[i64]) -> Result<String, store::Error> {
    let runs = ids.iter().map(|&id| store.get(id)).collect::<Result<Vec<_>, _>>()?;
    let mut stories = Vec::new();
    let mut told: Vec<i64> = Vec::new();
    for run in &runs {
        if told.contains(&run.id) {
            continue;
        }
        // An E5 run's companions (its agents) go with it, when the report
        // holds them.
        let group: Vec<Run> =
            with_companions(store, run.clone())?.into_iter().filter(|r| ids.contains(&r.id)).collect();
        if let Some(s) = story::of(&group, false) {
            told.extend(group.iter().map(|r| r.id));
            stories.push(s);
        }
    }
    let mut metrics: Vec<String> = Vec::new();
    for r in runs.iter().filter(|r| !told.contains(&r.id)) {
        for m in &r.data.measurements {
            if !metrics.contains(&m.metric) {
                metrics.push(m.metric.clone());
            }
        }
    }
    let mut charts = Vec::new();
    for metric in &metrics {
        let mut points = store.points(metric, None)?;
        points.retain(|p| ids.contains(&p.run) && !told.contains(&p.run));
        points.truncate(MAX_BARS);
        charts.extend(chart_of(metric, View::BarRun, "bar-run", &points, false));
    }
    charts.extend(spectrum_chart(&runs, false));
    let page = ReportPage {
        title: format!("tern lab report: runs {}", joined(ids)),
        nav: false,
        generated: store::utc(store::now()),
        runs: runs.iter().map(run_row).collect(),
        stories,
        charts,
    };
    page.render().map_err(|e| store::Error::Format(format!("cannot render the report: {e}")))
}
