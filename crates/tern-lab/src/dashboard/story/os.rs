//! E5 os: the probe suites, one column per host (this one and each agent
//! run beside it), each figure beside its reference tool where one was
//! run; and the round trips on one CPU against across CPUs, which explain
//! much of what every loopback benchmark here measures.
//!
//! Measurements: `value` of `ipc/pipe round trip, 1 byte` (the corrected
//! median, in the figure's unit) and, where a reference tool was run,
//! `reference` of the same subject (the tool is named in the run's
//! settings, `references`).

use crate::probe::figure::Better;
use crate::store::{Measurement, Run};

use super::super::svg::{self, sig3, Axis, Mark, Plot, Scale, Series, Shape, XAxis};
use super::page::{Cell, Figure, Finding, Story, Table};
use super::reading::{run_name, Ctx, Values};
use super::words::with_unit;

/// The figures of the round-trip chart: (subject, what the chart calls it).
const ROUND_TRIPS: [(&str, &str); 5] = [
    ("ipc/pipe round trip, 1 byte", "pipe, 1 CPU"),
    ("ipc/pipe round trip, 1 byte, across CPUs", "pipe, across CPUs"),
    ("net/TCP round trip, 1 KiB", "TCP 1 KiB, 1 CPU"),
    ("net/TCP round trip, 1 KiB, across CPUs", "TCP 1 KiB, across CPUs"),
    ("net/TCP connect+close", "TCP connect+close"),
];

pub(super) fn story(ctx: &Ctx) -> Story {
    let mut summary: Vec<String> = ctx.runs.iter().map(|r| format!("{}{}", ctx.whose(r), cpu_words(r))).collect();
    if ctx.runs.len() > 1 {
        summary.push(hosts_words(ctx.runs));
    }
    let mut findings = Vec::new();
    for run in ctx.runs {
        let v = Values::of(run);
        for r in v.metric("reference") {
            let Some(ours) = v.get("value", &r.subject) else { continue };
            let tool = run.data.config["settings"]["references"][&r.subject].as_str().unwrap_or("reference");
            let ratio = ours.value / r.value;
            findings.push(Finding {
                what: format!("{}{}", ctx.whose(run), r.subject),
                published: format!("{}: {}", tool, with_unit(r.value, &r.unit)),
                here: format!("tern probe: {} ({} × the reference)", with_unit(ours.value, &ours.unit), sig3(ratio)),
                agrees: Some((ratio - 1.0).abs() <= 0.10),
            });
        }
    }
    if findings.is_empty() {
        summary.push(
            "No reference tool was run with this run: bench/probe.sh sets every figure beside its reference on one \
             CPU."
                .into(),
        );
    }
    Story {
        title: "E5 os: what the operating system costs, host beside host".into(),
        summary,
        findings,
        figures: vec![round_trip_figure(ctx), all_figure(ctx)],
        kind: String::new(),
    }
}

/// `m` in µs (the probe picks a unit per figure).
fn micros(m: &Measurement) -> Option<f64> {
    let scale = match m.unit.as_str() {
        "ns" => 1e-3,
        "µs" | "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        _ => return None,
    };
    Some(m.value * scale)
}

/// One CPU against across CPUs, and the connect: this run's sentence.
fn cpu_words(run: &Run) -> String {
    let v = Values::of(run);
    let us = |subject: &str| v.get("value", subject).and_then(micros);
    let pair = |one: &str, across: &str, what: &str| match (us(one), us(across)) {
        (Some(a), Some(b)) => Some(format!(
            "{what} took {} µs on one CPU and {} µs with its two ends on different CPUs ({} ×)",
            sig3(a),
            sig3(b),
            sig3(b / a)
        )),
        (Some(a), None) => Some(format!("{what} took {} µs on one CPU", sig3(a))),
        _ => None,
    };
    let mut parts: Vec<String> = [
        pair(ROUND_TRIPS[0].0, ROUND_TRIPS[1].0, "a pipe round trip"),
        pair(ROUND_TRIPS[2].0, ROUND_TRIPS[3].0, "a 1 KiB TCP round trip"),
        us(ROUND_TRIPS[4].0).map(|c| format!("a TCP connect+close {} µs", sig3(c))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        return format!("{} figures measured on {}.", v.metric("value").count(), run.host.hostname);
    }
    parts[0] = format!("On {}, {}", run.host.hostname, parts[0]);
    format!("{}.", parts.join("; "))
}

/// Which host was faster in how many figures measured on all of them.
fn hosts_words(runs: &[Run]) -> String {
    let mut wins: Vec<(String, usize)> = runs.iter().map(|r| (run_name(r), 0)).collect();
    let mut compared = 0;
    for m in Values::of(&runs[0]).metric("value") {
        let values: Option<Vec<f64>> =
            runs.iter().map(|r| Values::of(r).get("value", &m.subject).map(|o| o.value)).collect();
        let Some(values) = values else { continue };
        compared += 1;
        let pick = |a: &(usize, &f64), b: &(usize, &f64)| match m.better {
            Better::Lower => a.1.total_cmp(b.1),
            Better::Higher => b.1.total_cmp(a.1),
        };
        if let Some((i, _)) = values.iter().enumerate().min_by(pick) {
            wins[i].1 += 1;
        }
    }
    let tally: Vec<String> = wins.iter().map(|(host, n)| format!("{host} in {n}")).collect();
    format!("Of the {compared} figures measured on every host, the best was {}.", tally.join(", "))
}

fn round_trip_figure(ctx: &Ctx) -> Figure {
    let groups: Vec<String> = ROUND_TRIPS.iter().map(|r| r.1.to_string()).collect();
    let mut series = Vec::new();
    let mut head = vec!["host".to_string()];
    head.extend(groups.iter().cloned());
    let mut rows = Vec::new();
    for run in ctx.runs {
        let v = Values::of(run);
        let name = run_name(run);
        let mut marks = Vec::new();
        let mut row = vec![Cell::label(name.clone())];
        for (i, (subject, label)) in ROUND_TRIPS.iter().enumerate() {
            match v.get("value", subject).and_then(|m| Some((m, micros(m)?))) {
                Some((m, us)) => {
                    marks.push(Mark::new(i as f64, us, label.to_string(), false).of_stored(m.value));
                    row.push(Cell { text: sig3(us), ..ctx.cell(run, m, &name, label, String::new(), false) });
                }
                None => row.push(Cell::label("-")),
            }
        }
        rows.push(row);
        series.push(Series { name, shape: Shape::Bar, colour: None, marks });
    }
    let values: Vec<f64> = series.iter().flat_map(|s| s.marks.iter().map(|m| m.y)).collect();
    let plot = Plot {
        title: "Round trips on one CPU and across CPUs, and a TCP connect".into(),
        x: XAxis::Groups(groups, "figure".into()),
        y: Axis::new("time (µs)", Scale::for_values(values), &sig3),
        series,
        size: svg::WIDE,
    };
    Figure {
        id: "round-trips".into(),
        title: "Round trips with both ends on one CPU and on two, per host (lower is better)".into(),
        charts: vec![svg::draw(&plot)],
        table: Table { head, rows },
        note: "On one CPU a round trip is two context switches; across CPUs each end wakes the other on another \
               CPU (an inter-processor interrupt, a CPU leaving idle), which is what a loopback benchmark with the \
               client and the server on two CPUs pays on every exchange. Values in µs."
            .into(),
    }
}

fn all_figure(ctx: &Ctx) -> Figure {
    let mut head = vec!["figure".to_string(), "unit".into()];
    head.extend(ctx.runs.iter().map(run_name));
    let first = Values::of(&ctx.runs[0]);
    let references = ctx.runs.iter().any(|r| Values::of(r).metric("reference").next().is_some());
    if references {
        head.push("reference".into());
    }
    let mut rows = Vec::new();
    for m in first.metric("value") {
        let mut row = vec![Cell::label(m.subject.clone()), Cell::label(m.unit.clone())];
        for run in ctx.runs {
            let host = run_name(run);
            match Values::of(run).get("value", &m.subject) {
                Some(o) => row.push(ctx.cell(run, o, &host, &m.subject, sig3(o.value), false)),
                None => row.push(Cell::label("-")),
            }
        }
        if references {
            match ctx.runs.iter().find_map(|r| Some((r, Values::of(r).get("reference", &m.subject)?))) {
                Some((run, r)) => row.push(ctx.cell(run, r, "reference", &m.subject, sig3(r.value), false)),
                None => row.push(Cell::label("")),
            }
        }
        rows.push(row);
    }
    Figure {
        id: "figures".into(),
        title: "Every figure, one column per host".into(),
        charts: Vec::new(),
        table: Table { head, rows },
        note: "The corrected median of each figure (the stopwatch's own cost subtracted), in the unit beside it."
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::reading::tests::run;
    use super::*;

    #[test]
    fn the_cpu_sentence_sets_one_cpu_beside_two() {
        let r = run(
            5,
            "e5",
            &[
                ("ipc/pipe round trip, 1 byte", "value", 5205.0, "ns", None),
                ("ipc/pipe round trip, 1 byte, across CPUs", "value", 42.1, "µs", None),
                ("net/TCP connect+close", "value", 40.2, "µs", None),
            ],
        );
        assert_eq!(
            cpu_words(&r),
            "On here, a pipe round trip took 5.21 µs on one CPU and 42.1 µs with its two ends on different CPUs \
             (8.09 ×); a TCP connect+close 40.2 µs."
        );
        let mut other = run(6, "e5", &[("ipc/pipe round trip, 1 byte", "value", 6000.0, "ns", None)]);
        other.host.hostname = "there".into();
        assert_eq!(
            hosts_words(&[r, other]),
            "Of the 1 figures measured on every host, the best was #5 here in 1, #6 there in 0."
        );
    }
}
