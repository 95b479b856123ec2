//! `tern lab serve` and `tern lab report` in headless Chromium: the pages
//! come from tern's own server, the charts' elements and values match the
//! stored runs, the report opens from a file:// URL, and screenshots are
//! written under target/ for CI.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::lab::{artifacts, attr, chromium, tags, texts, Dashboard};
use common::{tern_bin, Tern};

fn tern(args: &[&str], store: &Path) -> Output {
    Command::new(tern_bin()).args(args).arg("--store").arg(store).output().unwrap()
}

/// Runs a measuring command; the id of the run it stored (the newest).
fn stored_id(out: &Output, store: &Path) -> i64 {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list = tern(&["lab", "list"], store);
    let text = String::from_utf8(list.stdout).unwrap();
    text.lines().nth(1).unwrap_or_else(|| panic!("{text}")).split_whitespace().next().unwrap().parse().unwrap()
}

/// The figure of view `view` in `dom`: its text up to `</figure>`.
fn figure<'a>(dom: &'a str, view: &str) -> &'a str {
    let at = dom.find(&format!("data-view=\"{view}\"")).unwrap_or_else(|| panic!("no {view} chart in\n{dom}"));
    let rest = &dom[at..];
    &rest[..rest.find("</figure>").unwrap()]
}

/// The (data-runs, data-value) of each row of a figure's data table.
fn rows(fig: &str) -> Vec<(String, f64)> {
    tags(fig, "tr")
        .iter()
        .filter_map(|t| Some((attr(t, "data-runs")?.to_string(), attr(t, "data-value")?.parse().unwrap())))
        .collect()
}

fn stored(store: &Path, id: i64, metric: &str) -> f64 {
    let out = tern(&["lab", "export", &id.to_string()], store);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = doc["runs"][0]["measurements"].as_array().unwrap().iter().find(|m| m["metric"] == metric).unwrap().clone();
    m["value"].as_f64().unwrap()
}

#[test]
fn the_dashboard_and_the_report_show_the_stored_runs() {
    let site = common::site();
    let server = Tern::start(&site.root, "read", "", &[]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let url = server.url("/small.txt");
    let a = stored_id(&tern(&["bench", "-n", "2000", "-c", "1", "-t", "1", "--label", "one", &url], &store), &store);
    let b = stored_id(&tern(&["bench", "-n", "2000", "-c", "4", "-t", "1", "--label", "four", &url], &store), &store);
    let (rps_a, rps_b) = (stored(&store, a, "requests_per_s"), stored(&store, b, "requests_per_s"));
    let dash = Dashboard::start(&store);

    // Served by tern itself: its Server header, GET and HEAD only.
    let index = common::get(dash.addr(), "/", "");
    assert_eq!(index.status, 200);
    assert!(index.header("server").is_some_and(|s| s.starts_with("tern")), "{:?}", index.header("server"));
    assert_eq!(index.header("content-type"), Some("text/html; charset=utf-8"));
    let post =
        common::request(dash.addr(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(post.status, 405);
    assert_eq!(common::get(dash.addr(), "/run/999", "").status, 404);

    // The run list, and its filter, with JavaScript off (dump-dom runs none
    // of ours: there is none).
    let dom = chromium(&format!("{}/", dash.base), None);
    let listed: Vec<String> = tags(&dom, "tr").iter().filter_map(|t| attr(t, "data-run").map(str::to_string)).collect();
    assert_eq!(listed, vec![b.to_string(), a.to_string()], "newest first");
    let dom = chromium(&format!("{}/?text=four", dash.base), None);
    let listed: Vec<String> = tags(&dom, "tr").iter().filter_map(|t| attr(t, "data-run").map(str::to_string)).collect();
    assert_eq!(listed, vec![b.to_string()]);

    // A bar chart across the two runs: one bar each carrying its stored
    // value, heights in their ratio (a linear axis from zero: the two are
    // within a decade), the table holding exactly those values; the axes
    // titled with the unit, ticks labelled.
    let dom = chromium(&format!("{}/chart?metric=requests_per_s&view=bar-run&run={a}&run={b}", dash.base), None);
    let fig = figure(&dom, "bar-run");
    assert_eq!(rows(fig), vec![(format!("#{a}"), rps_a), (format!("#{b}"), rps_b)]);
    let bars: Vec<(f64, f64)> = tags(fig, "rect")
        .iter()
        .filter(|t| attr(t, "class") == Some("mark"))
        .map(|t| (attr(t, "data-value").unwrap().parse().unwrap(), attr(t, "height").unwrap().parse().unwrap()))
        .collect();
    assert_eq!(bars.iter().map(|b| b.0).collect::<Vec<f64>>(), vec![rps_a, rps_b], "{fig}");
    let (expected, drawn) = (rps_a / rps_b, bars[0].1 / bars[1].1);
    assert!((drawn - expected).abs() < 0.02 * expected.max(1.0) + 2.0 / bars[1].1, "{bars:?} vs {expected}");
    assert_eq!(texts(fig, "text", "class=\"axis-title\" data-axis=\"y\""), ["requests_per_s (req/s)"]);
    assert_eq!(texts(fig, "text", "class=\"axis-title\" data-axis=\"x\""), ["run"]);
    assert_eq!(texts(fig, "text", "data-axis=\"x\"").len(), 3, "two bars' labels and the title: {fig}");
    assert!(texts(fig, "text", "class=\"tick\" data-axis=\"y\"").len() >= 3, "{fig}");

    // x-y against concurrency: the points at 1 and 4 connections.
    let dom = chromium(&format!("{}/chart?metric=requests_per_s&view=xy-concurrency", dash.base), None);
    let fig = figure(&dom, "xy-concurrency");
    let xs: Vec<&str> = fig.split("<td>").filter_map(|c| c.split("</td>").next()).collect();
    assert!(xs.contains(&"1") && xs.contains(&"4"), "{fig}");
    assert!(fig.contains("<polyline") || fig.contains("<path"), "a line is drawn: {fig}");

    // History: two runs; the second is a regression exactly when its p99 is
    // above 125% of the first's.
    let (p99_a, p99_b) = (stored(&store, a, "latency_p99"), stored(&store, b, "latency_p99"));
    let dom = chromium(&format!("{}/chart?metric=latency_p99&view=history", dash.base), None);
    let fig = figure(&dom, "history");
    assert_eq!(rows(fig), vec![(format!("#{a}"), p99_a), (format!("#{b}"), p99_b)]);
    let marked = tags(fig, "tr").iter().filter(|t| attr(t, "class") == Some("regression")).count();
    assert_eq!(marked, usize::from(p99_b > 1.25 * p99_a));
    let squares = tags(fig, "rect")
        .iter()
        .filter(|t| {
            attr(t, "class") == Some("mark") && attr(t, "data-series").is_some_and(|s| s.starts_with("regression"))
        })
        .count();
    assert_eq!(squares, marked, "a square per regression");
    let legend = texts(fig, "text", "class=\"legend-label\"");
    assert_eq!(legend, ["value", "median of the previous runs", "regression (worse than 125% of that median)"]);

    // The percentile spectrum overlays both runs; its p50 and p99 are the
    // stored ones (the same histograms).
    let dom = chromium(&format!("{}/spectrum?run={a}&run={b}", dash.base), None);
    let fig = figure(&dom, "spectrum");
    assert!(fig.contains("99.9%") && fig.contains("90%"), "log 1/(1-p) axis labels: {fig}");
    for (id, p50, p99) in [(a, "latency_p50", "latency_p99"), (b, "latency_p50", "latency_p99")] {
        let mine: Vec<(String, f64)> = rows(fig).into_iter().filter(|(r, _)| *r == format!("#{id}")).collect();
        assert_eq!(mine[0].1, stored(&store, id, p50), "{fig}");
        assert_eq!(mine[2].1, stored(&store, id, p99), "{fig}");
    }

    // Screenshots for CI: the run list and a chart.
    for (name, path) in
        [("lab-dashboard.png", "/".to_string()), ("lab-chart.png", format!("/spectrum?run={a}&run={b}"))]
    {
        common::lab::screenshot(&format!("{}{path}", dash.base), name, 1400);
    }

    // The report: one file, nothing fetched, the same values from file://.
    let report = artifacts().join("lab-report.html");
    let out = tern(&["lab", "report", &a.to_string(), &b.to_string(), "-o", report.to_str().unwrap()], &store);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(dash);
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!text.contains("src=") && !text.contains("href="), "self-contained: no links, no fetched resources");
    let dom = chromium(&format!("file://{}", report.display()), None);
    let listed: Vec<String> = tags(&dom, "tr").iter().filter_map(|t| attr(t, "data-run").map(str::to_string)).collect();
    assert_eq!(listed, vec![a.to_string(), b.to_string()]);
    let at = dom.find("data-metric=\"requests_per_s\"").expect("a requests_per_s chart");
    let fig = &dom[at..];
    assert_eq!(rows(&fig[..fig.find("</figure>").unwrap()]), vec![(format!("#{a}"), rps_a), (format!("#{b}"), rps_b)]);
    assert!(dom.contains("data-view=\"spectrum\""));
}
