//! E1 cgi-output: the gateway's CPU time per output discipline and buffer
//! size on the bulletin-board pages (grouped bars, one group per buffer
//! size, one colour per discipline), and per file method by file size;
//! the best of each workload starred; the study's Linux best beside this
//! host's.
//!
//! Measurements (from gwbench): `board_cpu` of `① stdio, 8 KiB buffer`
//! (µs of gateway CPU per repetition of the five pages, size = buffer) and
//! `file_cpu` of `⑦ read, 1 MiB file` (µs per file sent, size = file), the
//! medians of the runs, each with its quartiles (`_q1`, `_q3`).

use crate::probe::figure::Better;
use crate::store::{Measurement, Run};

use super::super::svg::{bytes, sig3, Shape};
use super::by_size::{best_at_size, by_size, plain, Look};
use super::page::{Figure, Finding, Story};
use super::reading::{lead, series_of, Ctx, Spread, Values};
use super::words::{listed, more_or_less, percent};

/// The buffer stdio gets without trying (glibc's `BUFSIZ`): the baseline.
const STDIO_DEFAULT: u64 = 8192;
/// The file size the study compared mmap and read/write at.
const COMPARED_AT: u64 = 1 << 20;

pub(super) fn story(ctx: &Ctx) -> Story {
    let mut summary = Vec::new();
    let mut findings = Vec::new();
    for run in ctx.runs {
        let (board, file) = (board_words(run), file_words(run));
        summary.push(format!("{}{} {}", ctx.whose(run), board.0, file.0));
        findings.push(Finding {
            what: format!("{}best output discipline, board pages", ctx.whose(run)),
            published: "① stdio, 16 KiB buffer: +2.4 % over the stdio default (Linux)".into(),
            here: board.1,
            agrees: board.2,
        });
        findings.push(Finding {
            what: format!("{}⑧ mmap against ⑦ read/write, 1 MiB file", ctx.whose(run)),
            published: "mmap 54 % faster (Linux)".into(),
            here: file.1,
            agrees: file.2,
        });
    }
    Story {
        title: "E1 cgi-output: how a CGI program's output discipline changes its CPU cost".into(),
        summary,
        findings,
        figures: vec![board_figure(ctx), file_figure(ctx)],
        kind: String::new(),
    }
}

fn spread(v: &Values, metric: &str, subject: &str) -> Option<Spread> {
    v.spread(metric, subject, "_q1", "_q3")
}

/// The board's sentence, the finding's "here" and whether it agrees.
fn board_words(run: &Run) -> (String, String, Option<bool>) {
    let v = Values::of(run);
    // Each discipline's best buffer size: the candidates.
    let mut best: Vec<(&str, Spread)> = Vec::new();
    for m in v.metric("board_cpu") {
        let Some(s) = spread(&v, "board_cpu", &m.subject) else { continue };
        let series = series_of(&m.subject);
        match best.iter_mut().find(|(b, _)| series_of(b) == series) {
            Some(b) if b.1.value <= s.value => {}
            Some(b) => *b = (&m.subject, s),
            None => best.push((&m.subject, s)),
        }
    }
    let Some(l) = lead(&best, Better::Lower) else {
        return ("No board workload was measured.".into(), "not measured".into(), None);
    };
    let base = v.at("board_cpu", "① stdio", STDIO_DEFAULT);
    let default = format!("stdio's default (① {})", bytes(STDIO_DEFAULT as f64));
    let against =
        base.map_or(String::new(), |b| format!(", {} CPU than {default}", more_or_less(l.spread.value, b.value)));
    let here = base.map_or(short(l.name), |b| {
        format!("{}, {} CPU against {default}", short(l.name), percent(l.spread.value, b.value))
    });
    let (runner, runner_v) = l.runner_up.map_or(("", 0.0), |(n, s)| (n, s.value));
    // Tied leaders that are not stdio still differ from the study, when
    // stdio's best is clearly behind them.
    let stdio = best.iter().find(|(b, _)| series_of(b).starts_with('①'));
    let stdio_behind = stdio.is_some_and(|&(name, s)| {
        name != l.name && lead(&[(l.name, l.spread), (name, s)], Better::Lower).is_some_and(|o| o.clear)
    });
    if !l.clear {
        let verdict =
            if stdio_behind { "; stdio's best is behind them past the noise, so this host differs" } else { "" };
        return (
            format!(
                "No output discipline leads past the noise on the board pages: {} ({} µs per repetition) and {} \
                 ({} µs) overlap in their quartiles{against}; the study's Linux best was ① stdio with 16 KiB at \
                 +2.4 %{verdict}.",
                short(l.name),
                sig3(l.spread.value),
                short(runner),
                sig3(runner_v)
            ),
            format!("{here}; no lead past the noise"),
            stdio_behind.then_some(false),
        );
    }
    let agrees = series_of(l.name).starts_with('①');
    (
        format!(
            "{} used the least gateway CPU on the board pages: {} µs per repetition{against}, {} below the next \
             discipline ({}); the study's Linux best was ① stdio with 16 KiB at +2.4 %, so this host {}.",
            short(l.name),
            sig3(l.spread.value),
            l.margin().map_or(String::new(), |m| format!("{} %", sig3(m))),
            short(runner),
            if agrees { "agrees" } else { "differs" }
        ),
        here,
        Some(agrees),
    )
}

/// "③ exact with a 64 KiB buffer" from "③ exact, 64 KiB buffer".
fn short(subject: &str) -> String {
    match subject.split_once(", ") {
        Some((series, place)) => format!("{series} with a {place}"),
        None => subject.to_string(),
    }
}

/// The files' sentence, the finding's "here" and whether it agrees.
fn file_words(run: &Run) -> (String, String, Option<bool>) {
    let v = Values::of(run);
    let methods = v.series("file_cpu");
    let sizes = v.sizes("file_cpu");
    let mut wins: Vec<(String, Vec<u64>)> = Vec::new();
    let mut ties = Vec::new();
    for &size in &sizes {
        let candidates: Vec<(&str, Spread)> = methods
            .iter()
            .filter_map(|name| {
                let m = v.at("file_cpu", name, size)?;
                Some((name.as_str(), spread(&v, "file_cpu", &m.subject)?))
            })
            .collect();
        match lead(&candidates, Better::Lower) {
            Some(l) if l.clear => match wins.iter_mut().find(|(n, _)| n == l.name) {
                Some(w) => w.1.push(size),
                None => wins.push((l.name.to_string(), vec![size])),
            },
            Some(_) => ties.push(bytes(size as f64)),
            None => {}
        }
    }
    wins.sort_by_key(|w| std::cmp::Reverse(w.1.len()));
    let mut sentence = match wins.first() {
        Some((name, at)) => {
            let others: Vec<String> = wins[1..]
                .iter()
                .map(|(n, at)| format!("{n} at {}", listed(&at.iter().map(|s| bytes(*s as f64)).collect::<Vec<_>>())))
                .collect();
            format!(
                "For files, {name} used the least CPU at {} of {} sizes{}",
                at.len(),
                sizes.len(),
                if others.is_empty() { String::new() } else { format!(" ({})", listed(&others)) }
            )
        }
        None => "For files, no method leads past the noise at any size".into(),
    };
    if !ties.is_empty() && !wins.is_empty() {
        sentence.push_str(&format!("; no method leads past the noise at {}", listed(&ties)));
    }
    sentence.push('.');
    let pair = |name: &str| {
        let m = v.at("file_cpu", name, COMPARED_AT)?;
        Some((m.value, spread(&v, "file_cpu", &m.subject)?))
    };
    let (Some((mmap, ms)), Some((read, rs))) = (pair("⑧ mmap"), pair("⑦ read")) else {
        return (sentence, "not measured at 1 MiB".into(), None);
    };
    let l = lead(&[("mmap", ms), ("read", rs)], Better::Lower).expect("two candidates");
    let here = format!("⑧ mmap {} CPU against ⑦ read", percent(mmap, read));
    let agrees = l.clear.then_some(l.name == "mmap");
    sentence.push_str(&format!(
        " At 1 MiB ⑧ mmap used {} CPU than ⑦ read/write, where the study found mmap 54 % faster on Linux: {}.",
        more_or_less(mmap, read),
        match agrees {
            Some(true) => "this host agrees",
            Some(false) => "this host differs",
            None => "within the noise here",
        }
    ));
    (sentence, here, agrees)
}

fn board_figure(ctx: &Ctx) -> Figure {
    // The least CPU of the whole board workload is starred.
    let least =
        |v: &Values, m: &Measurement| m.value == v.metric("board_cpu").map(|o| o.value).fold(f64::INFINITY, f64::min);
    let quartiles = |v: &Values, m: &Measurement| match spread(v, "board_cpu", &m.subject) {
        Some(s) => format!("{} ({}–{})", sig3(m.value), sig3(s.low), sig3(s.high)),
        None => sig3(m.value),
    };
    by_size(ctx, "board_cpu", Shape::Bar, &least, &quartiles).figure(&Look {
        id: "board",
        title: "Output disciplines ①–⑥ by buffer size, bulletin-board pages (lower is better)",
        chart: "Gateway CPU per repetition of the five board pages",
        rows: "discipline",
        x: "output buffer size",
        y: "gateway CPU per repetition (µs)",
        note: "Each cell: the median over the runs of the gateway's user + system CPU (getrusage) per repetition \
               of the five pages, each page one CGI run (open, render, close), with the quartiles in brackets; ★ \
               the least. ① stdio full buffering, ② stdio with its buffer in an anonymous mmap, ③ own buffer \
               writing exactly one buffer when full, ④ own buffer writing buffer and overflow in one writev, ⑤ \
               ③ in mmap, ⑥ ④ in mmap.",
    })
}

fn file_figure(ctx: &Ctx) -> Figure {
    by_size(ctx, "file_cpu", Shape::Line, &best_at_size, &plain).figure(&Look {
        id: "files",
        title: "File output ⑦ read/write, ⑧ mmap+write, sendfile, splice, by file size (lower is better)",
        chart: "Gateway CPU per file sent",
        rows: "method",
        x: "file size",
        y: "gateway CPU per file (µs)",
        note: "Each cell: the median over the runs of the gateway's CPU per file sent (open, send, close) into \
               the pipe; ★ the least at its size.",
    })
}

#[cfg(test)]
mod tests {
    use super::super::reading::tests::run;
    use super::*;

    /// gwbench's figures: (discipline, buffer, median, q1, q3).
    fn board(rows: &[(&str, u64, f64, f64, f64)]) -> Vec<(String, &'static str, f64, u64)> {
        let mut out = Vec::new();
        for &(d, size, median, q1, q3) in rows {
            let subject = format!("{d}, {} buffer", bytes(size as f64));
            out.push((subject.clone(), "board_cpu", median, size));
            out.push((subject.clone(), "board_cpu_q1", q1, size));
            out.push((subject, "board_cpu_q3", q3, size));
        }
        out
    }

    fn stored(rows: &[(String, &'static str, f64, u64)]) -> Run {
        let ms: Vec<(&str, &str, f64, &str, Option<u64>)> =
            rows.iter().map(|(s, m, v, size)| (s.as_str(), *m, *v, "µs", Some(*size))).collect();
        run(1, "e1", &ms)
    }

    #[test]
    fn the_least_cpu_leads_when_clear_of_the_next_discipline() {
        let r = stored(&board(&[
            ("① stdio", 8192, 155.0, 150.0, 160.0),
            ("① stdio", 16384, 152.0, 148.0, 158.0),
            ("③ exact", 65536, 116.8, 115.0, 120.0),
            ("③ exact", 8192, 141.5, 135.0, 150.0),
            ("④ overflow", 32768, 125.0, 122.0, 128.0),
        ]));
        let (sentence, here, agrees) = board_words(&r);
        assert!(sentence.starts_with("③ exact with a 64 KiB buffer used the least gateway CPU"), "{sentence}");
        assert!(sentence.contains("24.6 % less CPU than stdio's default (① 8 KiB)"), "{sentence}");
        assert!(sentence.contains("6.56 % below the next discipline (④ overflow with a 32 KiB buffer)"), "{sentence}");
        assert!(sentence.ends_with("so this host differs."), "{sentence}");
        assert_eq!(here, "③ exact with a 64 KiB buffer, −24.6 % CPU against stdio's default (① 8 KiB)");
        assert_eq!(agrees, Some(false));
    }

    #[test]
    fn a_tie_within_the_quartiles_leads_nowhere() {
        let r = stored(&board(&[
            ("① stdio", 8192, 155.0, 150.0, 160.0),
            ("③ exact", 65536, 116.8, 110.0, 126.0),
            ("④ overflow", 32768, 119.5, 114.0, 128.0),
        ]));
        let (sentence, _, agrees) = board_words(&r);
        assert!(sentence.starts_with("No output discipline leads past the noise on the board pages"), "{sentence}");
        assert!(sentence.ends_with("behind them past the noise, so this host differs."), "{sentence}");
        assert_eq!(agrees, Some(false), "a tie of ③ and ④, both clear of ①");
        // With stdio in the tie, the data cannot tell.
        let r = stored(&board(&[("① stdio", 16384, 118.0, 112.0, 125.0), ("③ exact", 65536, 116.8, 110.0, 126.0)]));
        assert_eq!(board_words(&r).2, None);
    }

    #[test]
    fn files_count_the_sizes_each_method_leads_and_compare_mmap_with_read() {
        let mut rows = Vec::new();
        for (method, cpu) in [("⑦ read", [6.9, 166.6]), ("⑧ mmap", [16.0, 211.5]), ("sendfile", [6.8, 56.2])] {
            for (size, median) in [(1024u64, cpu[0]), (1 << 20, cpu[1])] {
                let subject = format!("{method}, {} file", bytes(size as f64));
                rows.push((subject.clone(), "file_cpu", median, size));
                rows.push((subject.clone(), "file_cpu_q1", median * 0.97, size));
                rows.push((subject, "file_cpu_q3", median * 1.03, size));
            }
        }
        let (sentence, here, agrees) = file_words(&stored(&rows));
        assert!(sentence.starts_with("For files, sendfile used the least CPU at 1 of 2 sizes"), "{sentence}");
        assert!(sentence.contains("no method leads past the noise at 1 KiB"), "6.8 and 6.9 overlap: {sentence}");
        assert!(sentence.contains("At 1 MiB ⑧ mmap used 27.0 % more CPU than ⑦ read/write"), "{sentence}");
        assert!(sentence.ends_with("this host differs."), "{sentence}");
        assert_eq!(here, "⑧ mmap +27.0 % CPU against ⑦ read");
        assert_eq!(agrees, Some(false));
    }
}
