//! E2 file-io: requests/s against file size (log x) per way of sending a
//! file — tern's read, mmap and sendfile, the C FastCGI file server's mmap
//! and read behind tern — and the mmap/read ratio per size, beside the
//! published "mmap faster at every size, the gap growing with size".
//!
//! Measurements: `requests_per_s` of `tern read, 64 KiB` (size = file; the
//! median run, with the runs' quartiles as `_q1` and `_q3`) and
//! `mmap_read_ratio` of `fcgi-files, 64 KiB`.

use crate::probe::figure::Better;
use crate::store::Run;

use super::super::svg::{bytes, sig3, Shape};
use super::by_size::{best_at_size, by_size, plain, Look};
use super::page::{Figure, Finding, Story};
use super::reading::{lead, Ctx, Spread, Values};
use super::words::listed;

const RPS: &str = "requests_per_s";
const RATIO: &str = "mmap_read_ratio";
/// The server the study measured.
const FCGI: &str = "fcgi-files";

pub(super) fn story(ctx: &Ctx) -> Story {
    let mut summary = Vec::new();
    let mut findings = Vec::new();
    for run in ctx.runs {
        let (sentence, here, agrees) = gap_words(run);
        summary.push(format!("{}{} {sentence}", ctx.whose(run), winner_words(run)));
        findings.push(Finding {
            what: format!("{}the FastCGI file server, mmap against read, by file size", ctx.whose(run)),
            published: "mmap faster at every size (1 KiB – 1 MiB), the gap growing with size".into(),
            here,
            agrees,
        });
    }
    Story {
        title: "E2 file-io: how a file's bytes reach the socket, by file size".into(),
        summary,
        findings,
        figures: vec![rate_figure(ctx), ratio_figure(ctx)],
        kind: String::new(),
    }
}

fn spread(v: &Values, subject: &str) -> Option<Spread> {
    v.spread(RPS, subject, "_q1", "_q3")
}

/// Who served the most requests/s at how many sizes.
fn winner_words(run: &Run) -> String {
    let v = Values::of(run);
    let methods = v.series(RPS);
    let sizes = v.sizes(RPS);
    let mut wins: Vec<(String, Vec<String>)> = Vec::new();
    let mut ties = Vec::new();
    for &size in &sizes {
        let candidates: Vec<(&str, Spread)> = methods
            .iter()
            .filter_map(|name| Some((name.as_str(), spread(&v, &v.at(RPS, name, size)?.subject)?)))
            .collect();
        match lead(&candidates, Better::Higher) {
            Some(l) if l.clear => {
                let at = format!("{} by {} %", bytes(size as f64), l.margin().map_or("-".into(), sig3));
                match wins.iter_mut().find(|(n, _)| n == l.name) {
                    Some(w) => w.1.push(at),
                    None => wins.push((l.name.to_string(), vec![at])),
                }
            }
            Some(_) => ties.push(bytes(size as f64)),
            None => {}
        }
    }
    wins.sort_by_key(|w| std::cmp::Reverse(w.1.len()));
    let mut parts: Vec<String> = wins
        .iter()
        .map(|(name, at)| format!("{name} led at {} of {} sizes ({})", at.len(), sizes.len(), listed(at)))
        .collect();
    if !ties.is_empty() {
        parts.push(format!("no method leads past the noise at {}", listed(&ties)));
    }
    if parts.is_empty() {
        return "Nothing was measured.".into();
    }
    format!("On requests/s, {}.", parts.join("; "))
}

/// The FastCGI server's mmap/read gap: the sentence, the finding's "here"
/// and whether it agrees (mmap ahead past the noise at every size, the
/// ratio larger at the largest size than at the smallest).
fn gap_words(run: &Run) -> (String, String, Option<bool>) {
    let v = Values::of(run);
    let sizes = v.sizes(RPS);
    let mut ahead = 0;
    let mut behind = 0;
    for &size in &sizes {
        let of = |method: &str| spread(&v, &v.at(RPS, &format!("{FCGI} {method}"), size)?.subject);
        if let (Some(m), Some(r)) = (of("mmap"), of("read")) {
            let l = lead(&[("mmap", m), ("read", r)], Better::Higher).expect("two candidates");
            match (l.clear, l.name) {
                (true, "mmap") => ahead += 1,
                (true, _) => behind += 1,
                _ => {}
            }
        }
    }
    let ratios: Vec<(u64, f64)> = sizes.iter().filter_map(|&s| Some((s, v.at(RATIO, FCGI, s)?.value))).collect();
    let (Some(first), Some(last)) = (ratios.first(), ratios.last()) else {
        return ("The FastCGI file server was not measured.".into(), "not measured".into(), None);
    };
    let growing = last.1 > first.1;
    let here = format!(
        "mmap/read {} at {} to {} at {}; mmap ahead past the noise at {ahead} of {} sizes, behind at {behind}",
        sig3(first.1),
        bytes(first.0 as f64),
        sig3(last.1),
        bytes(last.0 as f64),
        sizes.len()
    );
    let agrees = if ahead == sizes.len() {
        Some(growing)
    } else if behind > 0 {
        Some(false)
    } else {
        None
    };
    let sentence = format!(
        "The FastCGI file server's mmap/read ratio went from {} at {} to {} at {} (mmap ahead past the noise at \
         {ahead} of {} sizes); the study found mmap faster at every size, the gap growing with size: {}.",
        sig3(first.1),
        bytes(first.0 as f64),
        sig3(last.1),
        bytes(last.0 as f64),
        sizes.len(),
        match agrees {
            Some(true) => "this host agrees",
            Some(false) => "this host differs",
            None => "within the noise here",
        }
    );
    (sentence, here, agrees)
}

fn rate_figure(ctx: &Ctx) -> Figure {
    by_size(ctx, RPS, Shape::Line, &best_at_size, &plain).figure(&Look {
        id: "rate",
        title: "Requests/s against file size, per server and I/O method (higher is better)",
        chart: "Requests/s by file size",
        rows: "server and method",
        x: "file size",
        y: "requests/s",
        note: "Each cell: requests/s of the median of several runs of a fixed number of requests over 4 \
               connections; ★ the most at its size. tern sends the file itself (read, mmap, sendfile); fcgi-files \
               is the C FastCGI file server behind tern, answering from a mapping (mmap) or with pread (read).",
    })
}

fn ratio_figure(ctx: &Ctx) -> Figure {
    by_size(ctx, RATIO, Shape::Line, &|_, _| false, &plain).figure(&Look {
        id: "ratio",
        title: "mmap against read per server, by file size",
        chart: "mmap/read by file size",
        rows: "server",
        x: "file size",
        y: "mmap/read requests/s (above 1: mmap ahead)",
        note: "The study: the mmap file server faster at every size, the gap growing with size.",
    })
}

#[cfg(test)]
mod tests {
    use super::super::reading::tests::run;
    use super::*;

    /// (subject, size, median, q1, q3) of requests/s, and the ratios.
    fn stored(rates: &[(&str, u64, f64, f64, f64)]) -> Run {
        let mut ms: Vec<(String, &str, f64, &str, Option<u64>)> = Vec::new();
        for &(subject, size, median, q1, q3) in rates {
            let s = format!("{subject}, {}", bytes(size as f64));
            ms.push((s.clone(), RPS, median, "req/s", Some(size)));
            ms.push((s.clone(), "requests_per_s_q1", q1, "req/s", Some(size)));
            ms.push((s, "requests_per_s_q3", q3, "req/s", Some(size)));
        }
        for &size in &[1024u64, 1 << 20] {
            let of = |m: &str| rates.iter().find(|r| r.0 == format!("{FCGI} {m}") && r.1 == size).map(|r| r.2);
            if let (Some(m), Some(r)) = (of("mmap"), of("read")) {
                ms.push((format!("{FCGI}, {}", bytes(size as f64)), RATIO, m / r, "x", Some(size)));
            }
        }
        let borrowed: Vec<(&str, &str, f64, &str, Option<u64>)> =
            ms.iter().map(|(s, m, v, u, z)| (s.as_str(), *m, *v, *u, *z)).collect();
        run(2, "e2", &borrowed)
    }

    #[test]
    fn mmap_ahead_at_every_size_with_a_growing_gap_agrees() {
        let r = stored(&[
            ("fcgi-files mmap", 1024, 10_500.0, 10_300.0, 10_700.0),
            ("fcgi-files read", 1024, 10_000.0, 9_900.0, 10_100.0),
            ("fcgi-files mmap", 1 << 20, 1_300.0, 1_280.0, 1_320.0),
            ("fcgi-files read", 1 << 20, 1_000.0, 990.0, 1_010.0),
            ("tern sendfile", 1024, 20_000.0, 19_000.0, 21_000.0),
            ("tern sendfile", 1 << 20, 3_000.0, 2_900.0, 3_100.0),
        ]);
        assert_eq!(
            winner_words(&r),
            "On requests/s, tern sendfile led at 2 of 2 sizes (1 KiB by 90.5 % and 1 MiB by 131 %)."
        );
        let (sentence, here, agrees) = gap_words(&r);
        assert_eq!(agrees, Some(true), "{sentence}");
        assert!(sentence.contains("went from 1.05 at 1 KiB to 1.30 at 1 MiB (mmap ahead past the noise at 2 of 2"));
        assert!(here.starts_with("mmap/read 1.05 at 1 KiB to 1.30 at 1 MiB"), "{here}");
    }

    #[test]
    fn overlapping_runs_lead_nowhere() {
        let r = stored(&[
            ("fcgi-files mmap", 1024, 10_100.0, 9_800.0, 10_400.0),
            ("fcgi-files read", 1024, 10_000.0, 9_700.0, 10_300.0),
            ("fcgi-files mmap", 1 << 20, 1_000.0, 950.0, 1_050.0),
            ("fcgi-files read", 1 << 20, 1_010.0, 960.0, 1_060.0),
        ]);
        assert_eq!(winner_words(&r), "On requests/s, no method leads past the noise at 1 KiB and 1 MiB.");
        assert_eq!(gap_words(&r).2, None);
    }
}
