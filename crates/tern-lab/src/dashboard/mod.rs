//! The lab's dashboard: pages over the results store, made from templates
//! with the charts drawn as inline SVG, so they read with JavaScript off
//! and a report is one self-contained file.
//!
//! This module knows nothing of HTTP: [`Dashboard::page`] maps a path and
//! query to a [`Page`]; `tern lab serve` mounts it on tern's own server,
//! and `tern lab report` writes [`report`] to a file.
//!
//! Pages: `/` (runs and hosts, filterable; the chart menus), `/run/ID`,
//! `/chart?metric=M&view=V[&subject=S][&run=ID…]`, `/spectrum?run=ID…`.

mod svg;
pub mod views;

use std::path::PathBuf;

use askama::Template;

use crate::store::{self, Filter, Point, Run, Status, Store};
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
    measurements: Vec<store::Measurement>,
    charts: Vec<Chart>,
}

#[derive(Template)]
#[template(path = "chart.html")]
struct ChartPage {
    title: String,
    nav: bool,
    metric: String,
    view: String,
    subject: String,
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

fn run_row(r: &store::RunSummary, checked: bool) -> RunRow {
    RunRow {
        id: r.id,
        started: store::utc(r.started_at),
        kind: r.kind.clone(),
        status: r.status.name(),
        host: r.host.hostname.clone(),
        label: r.label.clone(),
        measurements: r.measurements,
        checked,
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
            runs: runs.iter().map(|r| run_row(r, false)).collect(),
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
        let summary = store::RunSummary {
            id,
            kind: d.kind.clone(),
            status: d.status,
            host: run.host.clone(),
            label: d.label.clone(),
            started_at: d.started_at,
            finished_at: d.finished_at,
            measurements: d.measurements.len() as u64,
        };
        let facts = vec![
            ("host", run.host.fingerprint.clone()),
            ("machine state", e.machine_state()),
            ("took", format!("{:.1} s", d.finished_at - d.started_at)),
            ("tern", d.tern_version.clone()),
            ("command line", d.command_line.join(" ")),
            ("config", d.config.to_string()),
        ];
        let charts = spectrum_chart(std::slice::from_ref(&run), true).into_iter().collect();
        let page = RunPage {
            title: format!("run {id}: {}", d.label),
            nav: true,
            run: run_row(&summary, false),
            facts,
            measurements: d.measurements.clone(),
            charts,
        };
        Ok(html(200, page.render()))
    }

    fn chart(&self, store: &Store, q: &Query) -> Result<Page, store::Error> {
        let metrics = store.metrics()?;
        let metric = q.get("metric").map(str::to_string).or_else(|| metrics.first().map(|m| m.0.clone()));
        let view_name = q.get("view").unwrap_or("bar-run").to_string();
        let Some(view) = View::parse(&view_name) else {
            return Ok(message(400, "bad request", format!("no view {view_name:?}")));
        };
        let runs = q.ids("run");
        let mut points = match &metric {
            Some(m) => store.points(m, None)?,
            None => Vec::new(),
        };
        if !runs.is_empty() {
            points.retain(|p| runs.contains(&p.run));
        }
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
        let metric = metric.unwrap_or_default();
        let charts = chart_of(&metric, view, &view_name, &points, true).into_iter().collect();
        let page = ChartPage {
            title: if metric.is_empty() { "charts".into() } else { format!("{metric}: {}", describe(&view_name)) },
            nav: true,
            metric,
            view: view_name,
            subject: subject.unwrap_or_default(),
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
    let title = format!(
        "{metric} ({unit}, {} is better)",
        if first.m.better == crate::probe::figure::Better::Higher { "higher" } else { "lower" }
    );
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
                    shown: svg::short(b.value),
                    flag: false,
                    note: if b.runs.len() > 1 { format!("mean of {} runs", b.runs.len()) } else { String::new() },
                })
                .collect();
            (svg::bar_chart(&title, &unit, &bars), "bar", rows)
        }
        View::Xy(axis) => {
            let series = views::series(points, axis);
            let rows = series
                .iter()
                .flat_map(|s| {
                    s.points.iter().map(move |p| Row {
                        runs: format!("#{}", p.2),
                        link: nav.then_some(p.2),
                        x: svg::short(p.0),
                        value: p.1,
                        shown: svg::short(p.1),
                        flag: false,
                        note: s.name.clone(),
                    })
                })
                .collect();
            let x_name = axis.name();
            (svg::xy_chart(&title, x_name, &unit, &series, &|x| svg::short(*x)), x_name, rows)
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
                    shown: svg::short(s.value),
                    flag: s.regression,
                    note: match (s.baseline, s.regression) {
                        (Some(b), true) => format!("regression: {} vs median {}", svg::short(s.value), svg::short(b)),
                        (Some(b), false) => format!("median of previous: {}", svg::short(b)),
                        (None, _) => String::new(),
                    },
                })
                .collect();
            (svg::history_chart(&format!("{title}: {}", first.m.subject), &unit, &steps), "started", rows)
        }
    };
    let svg = svg.unwrap_or_else(|e| format!("<p class=\"error\">{e}</p>"));
    Some(Chart { title, view: view_name.into(), metric: metric.into(), unit, x_name: x_name.into(), svg, rows })
}

/// The latency percentile spectrum of the runs' histograms, overlaid.
fn spectrum_chart(runs: &[Run], nav: bool) -> Option<Chart> {
    let series = views::spectra(runs);
    if series.is_empty() {
        return None;
    }
    let title = "latency by percentile (µs)".to_string();
    let svg = svg::xy_chart(&title, "percentile, on a log 1/(1-p) axis", "µs", &series, &svg::percentile_label)
        .unwrap_or_else(|e| format!("<p class=\"error\">{e}</p>"));
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
                    shown: svg::short(at.1),
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
        svg,
        rows,
    })
}

/// A self-contained HTML report of the runs `ids`: their table, a bar
/// chart per metric they share, and their latency spectra.
pub fn report(store: &Store, ids: &[i64]) -> Result<String, store::Error> {
    let runs = ids.iter().map(|&id| store.get(id)).collect::<Result<Vec<_>, _>>()?;
    let mut metrics: Vec<String> = Vec::new();
    for r in &runs {
        for m in &r.data.measurements {
            if !metrics.contains(&m.metric) {
                metrics.push(m.metric.clone());
            }
        }
    }
    let mut charts = Vec::new();
    for metric in &metrics {
        let mut points = store.points(metric, None)?;
        points.retain(|p| ids.contains(&p.run));
        points.truncate(MAX_BARS);
        charts.extend(chart_of(metric, View::BarRun, "bar-run", &points, false));
    }
    charts.extend(spectrum_chart(&runs, false));
    let rows = runs
        .iter()
        .map(|r| RunRow {
            id: r.id,
            started: store::utc(r.data.started_at),
            kind: r.data.kind.clone(),
            status: r.data.status.name(),
            host: r.host.hostname.clone(),
            label: r.data.label.clone(),
            measurements: r.data.measurements.len() as u64,
            checked: false,
        })
        .collect();
    let page = ReportPage {
        title: format!("tern lab report: runs {}", joined(ids)),
        nav: false,
        generated: store::utc(store::now()),
        runs: rows,
        charts,
    };
    page.render().map_err(|e| store::Error::Format(format!("cannot render the report: {e}")))
}
