//! E4 compression: the bytes each coding saves per page size (beside the
//! study's compressed sizes), requests/s per page size and coding from
//! tern's cache, and adaptive against inline compression in a cold burst
//! (p99); the published 21–64 % gain beside this host's.
//!
//! Measurements: `gzip, 6040 B page, 16 connections` (size = page,
//! concurrency = connections): `requests_per_s`, `latency_mean`,
//! `latency_p99`, `response_bytes`, `compression_gain` (% of the page
//! saved); and `adaptive, cold burst`: the same with `latency_p50` and
//! `errors`.

use crate::probe::figure::Better;
use crate::store::{Measurement, Run};

use super::super::svg::{self, sig3, Axis, Mark, Plot, Scale, Series, Shape, XAxis};
use super::page::{Cell, Figure, Finding, Story, Table};
use super::reading::{lead, series_of, Ctx, Spread, Values, NOISE};
use super::words::{percent, signed};

/// The study's pages (bytes) and what they compressed to.
const PUBLISHED: [(u64, f64); 4] = [(6_040, 2_401.0), (11_426, 2_937.0), (22_132, 4_836.0), (41_518, 11_446.0)];
/// The connections of the concurrent steady state, the one compared.
const CONCURRENT: u64 = 16;
const BURST: &str = "cold burst";

pub(super) fn story(ctx: &Ctx) -> Story {
    let mut summary = Vec::new();
    let mut findings = Vec::new();
    for run in ctx.runs {
        let (gain, here, agrees) = gain_words(run);
        summary.push(format!("{}{} {gain} {}", ctx.whose(run), saving_words(run), burst_words(run)));
        findings.push(Finding {
            what: format!("{}compressed against identity, requests/s", ctx.whose(run)),
            published: "+21 % to +64 % (a kernel-space server against uncompressed Apache)".into(),
            here,
            agrees,
        });
    }
    Story {
        title: "E4 compression: what each coding saves and costs, and a cold burst".into(),
        summary,
        findings,
        figures: vec![saving_figure(ctx), rate_figure(ctx, CONCURRENT), rate_figure(ctx, 1), burst_figure(ctx)],
        kind: String::new(),
    }
}

/// The steady-state measurements of `metric` at `connections`.
fn steady<'a>(v: &Values<'a>, metric: &'a str, connections: u64) -> impl Iterator<Item = &'a Measurement> + 'a {
    v.metric(metric).filter(move |m| m.concurrency == Some(connections) && !m.subject.ends_with(BURST))
}

fn pages(v: &Values) -> Vec<u64> {
    let mut p: Vec<u64> = steady(v, "response_bytes", CONCURRENT).filter_map(|m| m.size).collect();
    p.sort_unstable();
    p.dedup();
    p
}

/// Which coding saved the most bytes, and how much.
fn saving_words(run: &Run) -> String {
    let v = Values::of(run);
    let pages = pages(&v);
    let mut wins: Vec<(&str, usize)> = Vec::new();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &page in &pages {
        let best = steady(&v, "compression_gain", CONCURRENT)
            .filter(|m| m.size == Some(page))
            .max_by(|a, b| a.value.total_cmp(&b.value));
        if let Some(b) = best {
            lo = lo.min(b.value);
            hi = hi.max(b.value);
            let name = series_of(&b.subject);
            match wins.iter_mut().find(|w| w.0 == name) {
                Some(w) => w.1 += 1,
                None => wins.push((name, 1)),
            }
        }
    }
    wins.sort_by_key(|w| std::cmp::Reverse(w.1));
    match wins.first() {
        Some((name, n)) => format!(
            "{name} saved the most bytes on {n} of {} pages ({}–{} % of each page; the study's pages compressed by \
             60–78 %).",
            pages.len(),
            sig3(lo),
            sig3(hi)
        ),
        None => "No page was compressed.".into(),
    }
}

/// The best coding against identity per page at [`CONCURRENT`]
/// connections: the sentence, the finding's "here" and whether it agrees
/// (a gain past the noise on every page).
fn gain_words(run: &Run) -> (String, String, Option<bool>) {
    let v = Values::of(run);
    let mut gains = Vec::new();
    for page in pages(&v) {
        let at = || steady(&v, "requests_per_s", CONCURRENT).filter(move |m| m.size == Some(page));
        let identity = at().find(|m| series_of(&m.subject) == "identity");
        let best = at().filter(|m| series_of(&m.subject) != "identity").max_by(|a, b| a.value.total_cmp(&b.value));
        if let (Some(i), Some(b)) = (identity, best) {
            gains.push((100.0 * (b.value - i.value) / i.value, b, i));
        }
    }
    if gains.is_empty() {
        return ("Identity and the codings were not both measured.".into(), "not measured".into(), None);
    }
    let lo = gains.iter().map(|g| g.0).fold(f64::INFINITY, f64::min);
    let hi = gains.iter().map(|g| g.0).fold(f64::NEG_INFINITY, f64::max);
    let past = |g: &(f64, &Measurement, &Measurement)| {
        lead(&[("c", Spread::bare(g.1.value)), ("i", Spread::bare(g.2.value))], Better::Higher).is_some_and(|l| l.clear)
    };
    let ahead = gains.iter().filter(|g| g.0 > 0.0 && past(g)).count();
    let behind = gains.iter().filter(|g| g.0 < 0.0 && past(g)).count();
    let agrees = if ahead == gains.len() {
        Some(true)
    } else if behind > 0 {
        Some(false)
    } else {
        None
    };
    let here = format!(
        "{} to {} (the best coding per page, from tern's cache, {CONCURRENT} connections)",
        signed(lo),
        signed(hi)
    );
    let sentence = format!(
        "From tern's cache at {CONCURRENT} connections the best coding served {} to {} requests/s against identity \
         (ahead past the noise on {ahead} of {} pages, behind on {behind}); the study measured +21 % to +64 % \
         against uncompressed Apache: {}.",
        signed(lo),
        signed(hi),
        gains.len(),
        match agrees {
            Some(true) => "this host agrees in direction",
            Some(false) => "this host differs",
            None => "within the noise here",
        }
    );
    (sentence, here, agrees)
}

/// Adaptive against inline in the cold burst, by p99.
fn burst_words(run: &Run) -> String {
    let v = Values::of(run);
    let p99 = |mode: &str| v.get("latency_p99", &format!("{mode}, {BURST}")).map(|m| m.value);
    let (Some(adaptive), Some(inline)) = (p99("adaptive"), p99("inline")) else {
        return String::new();
    };
    let l = lead(&[("adaptive", Spread::bare(adaptive)), ("inline", Spread::bare(inline))], Better::Lower)
        .expect("two candidates");
    let off = p99("off").map_or(String::new(), |o| format!(", with compression off {} ms", sig3(o / 1000.0)));
    format!(
        "In the cold burst adaptive's p99 was {} ms against inline's {} ms ({}){off}: {}.",
        sig3(adaptive / 1000.0),
        sig3(inline / 1000.0),
        percent(adaptive, inline),
        if !l.clear {
            format!("no mode leads past the noise ({} %)", NOISE * 100.0)
        } else if l.name == "adaptive" {
            "adaptive answers the burst sooner".into()
        } else {
            "inline answers the burst sooner".into()
        }
    )
}

/// The pages measured in any run, and their labels ("6040 B").
fn all_pages(ctx: &Ctx) -> (Vec<u64>, Vec<String>) {
    let mut p: Vec<u64> = ctx.runs.iter().flat_map(|r| pages(&Values::of(r))).collect();
    p.sort_unstable();
    p.dedup();
    let labels = p.iter().map(|s| format!("{s} B")).collect();
    (p, labels)
}

/// Grouped bars of `metric` at `connections`: a group per page, a series
/// per coding (`skip`: codings left out), the best per page starred.
fn page_bars(ctx: &Ctx, metric: &str, connections: u64, skip: &[&str]) -> (Vec<Series>, Vec<Vec<Cell>>, Vec<String>) {
    let (pages, labels) = all_pages(ctx);
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for run in ctx.runs {
        let v = Values::of(run);
        let mut codings: Vec<&str> = Vec::new();
        for m in steady(&v, metric, connections) {
            let c = series_of(&m.subject);
            if !codings.contains(&c) && !skip.contains(&c) {
                codings.push(c);
            }
        }
        for coding in codings {
            let name = ctx.series(run, coding);
            let mut marks = Vec::new();
            let mut row = vec![Cell::label(name.clone())];
            for (i, &page) in pages.iter().enumerate() {
                let here = || steady(&v, metric, connections).filter(move |m| m.size == Some(page));
                let Some(m) = here().find(|m| series_of(&m.subject) == coding) else {
                    row.push(Cell::label("-"));
                    continue;
                };
                let top =
                    here().filter(|o| !skip.contains(&series_of(&o.subject))).map(|o| o.value).fold(f64::MIN, f64::max);
                let best = m.value == top;
                marks.push(Mark::new(i as f64, m.value, labels[i].clone(), best));
                let mut text = sig3(m.value);
                if metric == "requests_per_s" && coding != "identity" {
                    if let Some(i) = here().find(|o| series_of(&o.subject) == "identity") {
                        text = format!("{text} ({})", percent(m.value, i.value));
                    }
                }
                row.push(ctx.cell(run, m, &name, &labels[i], text, best));
            }
            rows.push(row);
            series.push(Series { name, shape: Shape::Bar, colour: None, marks });
        }
    }
    (series, rows, labels)
}

fn saving_figure(ctx: &Ctx) -> Figure {
    let (mut series, mut rows, labels) = page_bars(ctx, "compression_gain", CONCURRENT, &["identity"]);
    let (pages, _) = all_pages(ctx);
    // The study's pages, where this run's are the same sizes.
    let published: Vec<Mark> = pages
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let (_, to) = PUBLISHED.iter().find(|(size, _)| size == p)?;
            Some(Mark::new(i as f64, 100.0 * (1.0 - to / *p as f64), labels[i].clone(), false))
        })
        .collect();
    if !published.is_empty() {
        let name = "the study (its compressed pages)".to_string();
        let mut row = vec![Cell::label(name.clone())];
        row.extend(published.iter().map(|m| Cell {
            value: Some(m.y),
            series: name.clone(),
            x: m.x_label.clone(),
            ..Cell::label(sig3(m.y))
        }));
        rows.push(row);
        series.push(Series { name, shape: Shape::Bar, colour: Some(svg::PALETTE[7]), marks: published });
    }
    let plot = Plot {
        title: "Bytes saved per page".into(),
        x: XAxis::Groups(labels.clone(), "page size".into()),
        y: Axis::new("bytes saved (% of the page)", Scale::Linear, &sig3),
        series,
        size: svg::WIDE,
    };
    let mut head = vec!["coding".to_string()];
    head.extend(labels);
    Figure {
        id: "saving".into(),
        title: "Bytes saved by each coding, per page size (higher is better)".into(),
        charts: vec![svg::draw(&plot)],
        table: Table { head, rows },
        note: "tern's default levels; ★ the most saved on its page. The study's four pages compressed to 2,401, \
               2,937, 4,836 and 11,446 bytes."
            .into(),
    }
}

fn rate_figure(ctx: &Ctx, connections: u64) -> Figure {
    let (series, rows, labels) = page_bars(ctx, "requests_per_s", connections, &[]);
    let plural = if connections == 1 { "" } else { "s" };
    let plot = Plot {
        title: format!("Requests/s per page, {connections} connection{plural}"),
        x: XAxis::Groups(labels.clone(), "page size".into()),
        y: Axis::new("requests/s", Scale::Linear, &sig3),
        series,
        size: svg::WIDE,
    };
    let mut head = vec!["coding".to_string()];
    head.extend(labels);
    Figure {
        id: format!("rate-{connections}"),
        title: format!(
            "Requests/s per page size and coding from tern's cache, {connections} connection{plural} (higher is better)"
        ),
        charts: vec![svg::draw(&plot)],
        table: Table { head, rows },
        note: "In brackets: against identity on the same page. ★ the most on its page.".into(),
    }
}

fn burst_figure(ctx: &Ctx) -> Figure {
    let metrics = [
        ("requests_per_s", "requests/s", 1.0),
        ("latency_p50", "p50 (ms)", 1e3),
        ("latency_p99", "p99 (ms)", 1e3),
        ("response_bytes", "bytes per response", 1.0),
    ];
    let mut modes: Vec<String> = Vec::new();
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for run in ctx.runs {
        let v = Values::of(run);
        let burst: Vec<&Measurement> = v.metric("latency_p99").filter(|m| m.subject.ends_with(BURST)).collect();
        let least = burst.iter().map(|m| m.value).fold(f64::INFINITY, f64::min);
        let mut marks = Vec::new();
        for m in &burst {
            let mode = series_of(&m.subject).to_string();
            if !modes.contains(&mode) {
                modes.push(mode.clone());
            }
            let x = modes.iter().position(|g| *g == mode).unwrap_or(0) as f64;
            marks.push(Mark::new(x, m.value / 1000.0, mode.clone(), m.value == least).of_stored(m.value));
            let name = ctx.series(run, &mode);
            let mut row = vec![Cell::label(name.clone())];
            for (metric, column, scale) in metrics {
                match v.get(metric, &m.subject) {
                    Some(c) => {
                        let cell = ctx.cell(
                            run,
                            c,
                            &name,
                            column,
                            sig3(c.value / scale),
                            metric == "latency_p99" && c.value == least,
                        );
                        row.push(cell);
                    }
                    None => row.push(Cell::label("-")),
                }
            }
            rows.push(row);
        }
        series.push(Series { name: ctx.series(run, "p99"), shape: Shape::Bar, colour: None, marks });
    }
    let plot = Plot {
        title: "p99 response time in a cold burst".into(),
        x: XAxis::Groups(modes, "compression".into()),
        y: Axis::new("p99 response time (ms)", Scale::Linear, &sig3),
        series,
        size: svg::WIDE,
    };
    let mut head = vec!["compression".to_string()];
    head.extend(metrics.iter().map(|m| m.1.to_string()));
    Figure {
        id: "burst".into(),
        title: "A cold burst: compression off, inline, adaptive (lower is better)".into(),
        charts: vec![svg::draw(&plot)],
        table: Table { head, rows },
        note: "On a fresh server each, many connections at once ask for every page once (gzip accepted), none \
               compressed yet. Inline compresses on the worker while the burst waits; adaptive sends identity while \
               busy and compresses in the background. ★ the lowest p99."
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::reading::tests::run;
    use super::*;

    fn stored(rates: &[(&str, u64, f64)], burst: &[(&str, f64)]) -> Run {
        let subjects: Vec<String> =
            rates.iter().map(|(c, page, _)| format!("{c}, {page} B page, 16 connections")).collect();
        let mut ms: Vec<(&str, &str, f64, &str, Option<u64>)> = rates
            .iter()
            .zip(&subjects)
            .map(|((_, page, rps), s)| (s.as_str(), "requests_per_s", *rps, "req/s", Some(*page)))
            .collect();
        let bursts: Vec<String> = burst.iter().map(|(mode, _)| format!("{mode}, {BURST}")).collect();
        ms.extend(burst.iter().zip(&bursts).map(|((_, p99), s)| (s.as_str(), "latency_p99", *p99, "us", None)));
        ms.extend(subjects.iter().zip(rates).map(|(s, r)| (s.as_str(), "response_bytes", 1.0, "B", Some(r.1))));
        let mut r = run(4, "e4", &ms);
        for m in &mut r.data.measurements {
            m.concurrency = m.size.map(|_| 16);
        }
        r
    }

    #[test]
    fn the_gain_is_the_best_coding_against_identity_per_page() {
        let r = stored(
            &[
                ("identity", 6040, 10_000.0),
                ("gzip", 6040, 12_000.0),
                ("br", 6040, 12_500.0),
                ("identity", 41_518, 5_000.0),
                ("gzip", 41_518, 5_100.0),
            ],
            &[("off", 9_000.0), ("inline", 80_000.0), ("adaptive", 12_000.0)],
        );
        let (sentence, here, agrees) = gain_words(&r);
        assert!(sentence.contains("the best coding served +2 % to +25 % requests/s against identity (ahead past the noise on 1 of 2 pages, behind on 0)"), "{sentence}");
        assert_eq!(agrees, None, "one page within the noise");
        assert!(here.starts_with("+2 % to +25 %"), "{here}");
        assert_eq!(
            burst_words(&r),
            "In the cold burst adaptive's p99 was 12 ms against inline's 80 ms (−85 %), with compression off 9 ms: \
             adaptive answers the burst sooner."
        );
    }
}
