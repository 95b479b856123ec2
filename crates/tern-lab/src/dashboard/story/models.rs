//! E3 models: the saturation curves — throughput and p99 against the rate
//! offered, one line per concurrency model — one panel per CPU count × CGI
//! share, the saturation point starred; the service-time spread (p50 to
//! p99) of every step in the tables; the published ranking beside this
//! host's.
//!
//! Measurements, of `event, 1 CPU, CGI 0 %` (cpus = the CPU count):
//! `capacity`, `saturation` and, per open-loop step at a fraction F of the
//! capacity, `rate@Fx` (offered), `requests_per_s@Fx` (served),
//! `latency_p50@Fx`, `latency_p99@Fx` (µs, from the intended send time)
//! and `failed@Fx`.

use crate::probe::figure::Better;
use crate::store::Run;

use super::super::svg::{self, sig3, Axis, Mark, Plot, Scale, Series, Shape, XAxis};
use super::page::{Cell, Figure, Finding, Story, Table};
use super::reading::{lead, place_of, series_of, Ctx, Spread, Values, NOISE};
use super::words::{listed, signed};

/// The model the study found best overall (the thread pool).
const PUBLISHED_BEST: &str = "pool";

pub(super) fn story(ctx: &Ctx) -> Story {
    let mut summary = Vec::new();
    let mut findings = Vec::new();
    for run in ctx.runs {
        let (ranking, here, agrees) = ranking_words(run);
        let (scaling, scaling_here, scaling_agrees) = scaling_words(run);
        summary.push(format!("{}{ranking} {scaling}", ctx.whose(run)));
        findings.push(Finding {
            what: format!("{}the best model overall", ctx.whose(run)),
            published: "the thread pool (4-CPU SMP); request-based and task-based swapped places with CPU count, \
                        file size and CGI share"
                .into(),
            here,
            agrees,
        });
        findings.push(Finding {
            what: format!("{}throughput from 1 to 2 CPUs", ctx.whose(run)),
            published: "static throughput did not grow with CPUs; CGI throughput did".into(),
            here: scaling_here,
            agrees: scaling_agrees,
        });
    }
    let mut figures = panels(ctx);
    figures.push(ranking_figure(ctx));
    Story {
        title: "E3 models: concurrency models under a static and CGI load, by CPU count".into(),
        summary,
        findings,
        figures,
        kind: String::new(),
    }
}

/// The configurations (CPUs, CGI share) of a run, in order, with their
/// names ("1 CPU, CGI 0 %").
fn places(run: &Run) -> Vec<(u64, u32, String)> {
    let mut out: Vec<(u64, u32, String)> = Vec::new();
    for m in Values::of(run).metric("saturation") {
        let place = place_of(&m.subject).to_string();
        if !out.iter().any(|p| p.2 == place) {
            out.push((m.cpus.unwrap_or(0), share_of(&place), place));
        }
    }
    out.sort();
    out
}

/// The CGI share named in "1 CPU, CGI 50 %".
fn share_of(place: &str) -> u32 {
    place.split("CGI ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The models' saturation points in one configuration.
fn saturations<'a>(v: &Values<'a>, place: &str) -> Vec<(&'a str, Spread)> {
    v.metric("saturation")
        .filter(|m| place_of(&m.subject) == place)
        .map(|m| (series_of(&m.subject), Spread::bare(m.value)))
        .collect()
}

/// Who carried the most in how many configurations: the sentence, the
/// finding's "here" and whether it agrees.
fn ranking_words(run: &Run) -> (String, String, Option<bool>) {
    let v = Values::of(run);
    let places = places(run);
    let mut wins: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut ties = Vec::new();
    for (_, _, place) in &places {
        match lead(&saturations(&v, place), Better::Higher) {
            Some(l) if l.clear && l.spread.value > 0.0 => match wins.iter_mut().find(|w| w.0 == l.name) {
                Some(w) => w.1.push(place),
                None => wins.push((l.name, vec![place])),
            },
            Some(_) => ties.push(place.as_str()),
            None => {}
        }
    }
    wins.sort_by_key(|w| std::cmp::Reverse(w.1.len()));
    let tally = |w: &(&str, Vec<&str>)| format!("{} {}", w.0, w.1.len());
    let here = if wins.is_empty() {
        "no model led past the noise".to_string()
    } else {
        format!("configurations led: {}", wins.iter().map(tally).collect::<Vec<_>>().join(", "))
    };
    let Some(top) = wins.first() else {
        return (
            format!("No model carried more than the others past the noise ({} %) in any configuration.", NOISE * 100.0),
            here,
            None,
        );
    };
    let alone = wins.get(1).is_none_or(|second| second.1.len() < top.1.len());
    let agrees = alone.then_some(top.0 == PUBLISHED_BEST);
    let mut sentence = format!(
        "{} had the highest saturation point in {} of {} configurations ({})",
        top.0,
        top.1.len(),
        places.len(),
        top.1.join("; ")
    );
    if wins.len() > 1 {
        let others: Vec<String> = wins[1..].iter().map(|w| format!("{} in {}", w.0, w.1.join("; "))).collect();
        sentence.push_str(&format!(", {}", listed(&others)));
    }
    if !ties.is_empty() {
        sentence.push_str(&format!("; within {} % of each other in {}", NOISE * 100.0, ties.join("; ")));
    }
    sentence.push_str(&format!(
        ". The study found the thread pool best overall: {}.",
        match agrees {
            Some(true) => "this host agrees",
            Some(false) => "this host differs",
            None => "no single model leads here",
        }
    ));
    (sentence, here, agrees)
}

/// How the best saturation point grew from 1 to 2 CPUs, static only and
/// CGI only.
fn scaling_words(run: &Run) -> (String, String, Option<bool>) {
    let v = Values::of(run);
    let best = |cpus: u64, share: u32| {
        v.metric("saturation")
            .filter(|m| m.cpus == Some(cpus) && share_of(place_of(&m.subject)) == share)
            .map(|m| m.value)
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))))
    };
    let growth = |share: u32| match (best(1, share), best(2, share)) {
        (Some(one), Some(two)) if one > 0.0 => Some(100.0 * (two - one) / one),
        _ => None,
    };
    let (Some(stat), Some(cgi)) = (growth(0), growth(100)) else {
        return ("Only one CPU count was measured.".into(), "one CPU count measured".into(), None);
    };
    let grew = |g: f64| g > NOISE * 100.0;
    let agrees = !grew(stat) && grew(cgi);
    let here = format!("static {}, CGI {} (best saturation point, 1 → 2 CPUs)", signed(stat), signed(cgi));
    (
        format!(
            "From 1 to 2 CPUs the best static-only saturation point moved {} and the best CGI-only {}; the study \
             saw static throughput flat and CGI throughput growing: this host {}.",
            signed(stat),
            signed(cgi),
            if agrees { "agrees" } else { "differs" }
        ),
        here,
        Some(agrees),
    )
}

/// The step fractions of a run, in order ("0.5", "1", "1.25").
fn steps(v: &Values) -> Vec<String> {
    let mut out: Vec<(f64, String)> = Vec::new();
    for m in v.0 {
        if let Some(f) = m.metric.strip_prefix("rate@").and_then(|f| f.strip_suffix('x')) {
            if !out.iter().any(|o| o.1 == f) {
                out.push((f.parse().unwrap_or(0.0), f.to_string()));
            }
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out.into_iter().map(|o| o.1).collect()
}

/// A figure per configuration: throughput and p99 against the offered
/// rate, a line per model (per run, when several), the table beside.
fn panels(ctx: &Ctx) -> Vec<Figure> {
    let mut places: Vec<(u64, u32, String)> = ctx.runs.iter().flat_map(places).collect();
    places.sort();
    places.dedup();
    places
        .into_iter()
        .map(|(cpus, share, place)| {
            let mut served = Vec::new();
            let mut p99 = Vec::new();
            let mut rows = Vec::new();
            let mut head = vec!["model".to_string(), "capacity (req/s)".into(), "saturation (req/s)".into()];
            for run in ctx.runs {
                let v = Values::of(run);
                let fractions = steps(&v);
                if head.len() == 3 {
                    head.extend(fractions.iter().map(|f| format!("{f}×: offered → served (req/s), p50–p99 (ms)")));
                }
                for m in v.metric("saturation").filter(|m| place_of(&m.subject) == place) {
                    let model = series_of(&m.subject);
                    let name = ctx.series(run, model);
                    let at = |metric: &str, f: &str| v.get(&format!("{metric}@{f}x"), &m.subject);
                    let mut row = vec![Cell::label(name.clone())];
                    if let Some(c) = v.get("capacity", &m.subject) {
                        row.push(ctx.cell(run, c, &name, "capacity", sig3(c.value), false));
                    }
                    row.push(ctx.cell(run, m, &name, "saturation", sig3(m.value), false));
                    let mut line = Vec::new();
                    let mut tail = Vec::new();
                    for f in &fractions {
                        let (Some(rate), Some(thr), Some(p50), Some(p)) =
                            (at("rate", f), at("requests_per_s", f), at("latency_p50", f), at("latency_p99", f))
                        else {
                            row.push(Cell::label("-"));
                            continue;
                        };
                        let x_label = format!("{} req/s offered", sig3(rate.value));
                        let star = m.value > 0.0 && thr.value == m.value;
                        line.push(Mark::new(rate.value, thr.value, x_label.clone(), star));
                        tail.push(Mark::new(rate.value, p.value / 1000.0, x_label.clone(), false).of_stored(p.value));
                        // The served rate, with what was offered and the
                        // response times' spread around it.
                        let text = format!(
                            "{} → {} ({}–{})",
                            sig3(rate.value),
                            sig3(thr.value),
                            sig3(p50.value / 1000.0),
                            sig3(p.value / 1000.0)
                        );
                        row.push(ctx.cell(run, thr, &name, &x_label, text, star));
                    }
                    rows.push(row);
                    served.push(Series { name: name.clone(), shape: Shape::Line, colour: None, marks: line });
                    p99.push(Series { name, shape: Shape::Line, colour: None, marks: tail });
                }
            }
            let p99_values: Vec<f64> = p99.iter().flat_map(|s| s.marks.iter().map(|m| m.y)).collect();
            let throughput = Plot {
                title: format!("Served against offered, {place}"),
                x: XAxis::Numeric(Axis::new("offered rate (req/s)", Scale::Linear, &sig3)),
                y: Axis::new("served (req/s)", Scale::Linear, &sig3),
                series: served,
                size: svg::PANEL,
            };
            let latency = Plot {
                title: format!("p99 against offered, {place}"),
                x: XAxis::Numeric(Axis::new("offered rate (req/s)", Scale::Linear, &sig3)),
                y: Axis::new("p99 response time (ms)", Scale::for_values(p99_values), &sig3),
                series: p99,
                size: svg::PANEL,
            };
            Figure {
                id: format!("panel-{cpus}cpu-cgi{share}"),
                title: format!("{place}: throughput and p99 against the rate offered"),
                charts: vec![svg::draw(&throughput), svg::draw(&latency)],
                table: Table { head, rows },
                note: "Each model's steps offer a fraction of its own capacity (a closed-loop probe); ★ the \
                       saturation point, the most a step carried (95 % of the rate offered, p99 within the SLO, \
                       nothing failed). p50 to p99: the spread of the response times, from each request's \
                       intended send time."
                    .into(),
            }
        })
        .collect()
}

/// The ranking: per model, the configurations where it had the highest
/// saturation point, and its mean place.
fn ranking_figure(ctx: &Ctx) -> Figure {
    let mut rows = Vec::new();
    let mut bars = Vec::new();
    let mut groups: Vec<String> = Vec::new();
    for run in ctx.runs {
        let v = Values::of(run);
        let places = places(run);
        let mut ranks: Vec<(&str, Vec<usize>)> = Vec::new();
        for (_, _, place) in &places {
            let mut s = saturations(&v, place);
            s.sort_by(|a, b| b.1.value.total_cmp(&a.1.value));
            for (rank, (model, _)) in s.iter().enumerate() {
                match ranks.iter_mut().find(|r| r.0 == *model) {
                    Some(r) => r.1.push(rank + 1),
                    None => ranks.push((model, vec![rank + 1])),
                }
            }
        }
        let mut marks = Vec::new();
        for (model, places) in &ranks {
            let mean = places.iter().sum::<usize>() as f64 / places.len() as f64;
            let firsts = places.iter().filter(|r| **r == 1).count();
            if !groups.iter().any(|g| g == model) {
                groups.push(model.to_string());
            }
            let x = groups.iter().position(|g| g == model).unwrap_or(0) as f64;
            marks.push(Mark::new(x, mean, *model, false));
            let name = ctx.series(run, model);
            rows.push(vec![
                Cell::label(name.clone()),
                Cell {
                    value: Some(firsts as f64),
                    series: name.clone(),
                    x: "first".into(),
                    ..Cell::label(firsts.to_string())
                },
                Cell { value: Some(mean), series: name, x: "mean place".into(), ..Cell::label(sig3(mean)) },
            ]);
        }
        bars.push(Series { name: ctx.series(run, "mean place"), shape: Shape::Bar, colour: None, marks });
    }
    let plot = Plot {
        title: "Mean place by saturation point (1: the highest)".into(),
        x: XAxis::Groups(groups, "model".into()),
        y: Axis::new("mean place over the configurations (lower is better)", Scale::Linear, &sig3),
        series: bars,
        size: svg::WIDE,
    };
    Figure {
        id: "ranking".into(),
        title: "The ranking: each model's place by saturation point, over every configuration".into(),
        charts: vec![svg::draw(&plot)],
        table: Table { head: vec!["model".into(), "configurations first".into(), "mean place".into()], rows },
        note: "Ties are not merged: of two equal saturation points the one stored first is placed first. The \
               study (4-CPU SMP): the thread pool best overall."
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::reading::tests::run;
    use super::*;

    /// Saturation points: (model, cpus, share, value).
    fn stored(points: &[(&str, u64, u32, f64)]) -> Run {
        let subjects: Vec<String> = points
            .iter()
            .map(|(model, cpus, share, _)| {
                format!("{model}, {cpus} CPU{}, CGI {share} %", if *cpus > 1 { "s" } else { "" })
            })
            .collect();
        let ms: Vec<(&str, &str, f64, &str, Option<u64>)> =
            points.iter().zip(&subjects).map(|(p, s)| (s.as_str(), "saturation", p.3, "req/s", None)).collect();
        let mut r = run(3, "e3", &ms);
        for (m, p) in r.data.measurements.iter_mut().zip(points) {
            m.cpus = Some(p.1);
        }
        r
    }

    #[test]
    fn the_model_leading_most_configurations_is_ranked_first() {
        let r = stored(&[
            ("event", 1, 0, 40_000.0),
            ("pool", 1, 0, 30_000.0),
            ("event", 1, 100, 1_000.0),
            ("pool", 1, 100, 1_500.0),
            ("event", 2, 0, 41_000.0),
            ("pool", 2, 0, 20_000.0),
            ("event", 2, 100, 1_900.0),
            ("pool", 2, 100, 1_950.0),
        ]);
        let (sentence, here, agrees) = ranking_words(&r);
        assert!(
            sentence.starts_with("event had the highest saturation point in 2 of 4 configurations (1 CPU, CGI 0 %; 2 CPUs, CGI 0 %), pool in 1 CPU, CGI 100 %; within 5 % of each other in 2 CPUs, CGI 100 %."),
            "{sentence}"
        );
        assert_eq!(here, "configurations led: event 2, pool 1");
        assert_eq!(agrees, Some(false));
        let (sentence, _, agrees) = scaling_words(&r);
        assert!(
            sentence.contains("static-only saturation point moved +2.50 % and the best CGI-only +30 %"),
            "{sentence}"
        );
        assert_eq!(agrees, Some(true), "static flat, CGI grew");
    }

    #[test]
    fn a_tie_everywhere_leads_nowhere() {
        let r = stored(&[("event", 1, 0, 40_000.0), ("pool", 1, 0, 39_000.0)]);
        let (sentence, _, agrees) = ranking_words(&r);
        assert!(sentence.starts_with("No model carried more than the others past the noise"), "{sentence}");
        assert_eq!(agrees, None);
    }
}
