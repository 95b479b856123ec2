//! `tern lab run e1 … e5 --quick` end to end: each starts its own tern
//! servers (and the gateway's programs, or an agent), measures, prints its
//! table and stores its run(s), whose measurements are the table's; then
//! the page whose address it printed is loaded in headless Chromium from
//! `tern lab serve`: the experiment's figure (series, axis titles, tick
//! labels, every plotted value the stored one), the sentence naming the
//! winner the data gives; a screenshot of it under target/lab-artifacts.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::lab::{attr, chromium, screenshot, tags, texts, Dashboard};

fn tern(args: &[&str], store: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern")).args(args).arg("--store").arg(store).output().unwrap()
}

/// The gateway's programs E1, E2 and E3 run, built once for all tests.
fn gateway() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        let gateway = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../gateway");
        let made = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&gateway)
            .args(["build/gwbench", "build/fcgi-files", "build/hello.cgi"])
            .status()
            .unwrap();
        assert!(made.success(), "make -C gateway (fcgi-files needs libfcgi-dev)");
        gateway.join("build").to_str().unwrap().to_string()
    })
}

fn run(name: &str, store: &Path) -> (String, serde_json::Value) {
    run_with(name, store, &[])
}

fn run_with(name: &str, store: &Path, extra: &[&str]) -> (String, serde_json::Value) {
    let mut args = vec!["lab", "run", name, "--quick"];
    args.extend(extra);
    let out = tern(&args, store);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout.lines().find(|l| l.starts_with("stored as run ")).unwrap_or_else(|| panic!("{stdout}"));
    let id = line["stored as run ".len()..].split(';').next().unwrap().to_string();
    let export = tern(&["lab", "export", &id], store);
    let doc: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    (stdout, doc["runs"][0].clone())
}

fn values<'a>(run: &'a serde_json::Value, metric: &str) -> Vec<&'a serde_json::Value> {
    run["measurements"].as_array().unwrap().iter().filter(|m| m["metric"] == metric).collect()
}

/// The run's page, at the address `tern lab run` printed, from a dashboard
/// on `store`: checked against the stored `runs` (see [`check_story`]), a
/// screenshot left as target/lab-artifacts/lab-NAME.png. Its DOM.
fn page(stdout: &str, store: &Path, runs: &[&serde_json::Value], name: &str) -> String {
    let printed = stdout.lines().find_map(|l| l.split("its page: ").nth(1)).unwrap_or_else(|| panic!("{stdout}"));
    let printed = printed.split(' ').next().unwrap();
    assert!(printed.starts_with("http://127.0.0.1:8686/run/"), "{printed}");
    let dash = Dashboard::start(store);
    let url = dash.at(printed);
    let dom = chromium(&url, None);
    check_story(&dom, runs);
    screenshot(&url, &format!("lab-{name}.png"), 2600);
    dom
}

/// The story's sentences.
fn sentences(dom: &str) -> Vec<String> {
    let found = texts(dom, "p", "class=\"sentence\"");
    assert!(!found.is_empty(), "no summary sentence: {dom}");
    found
}

/// Every figure of the story: each chart titled, both axes titled and
/// ticked, a legend entry per series when there are several, marks whose
/// values are stored ones; each table cell with a number a stored one.
/// Not checked against the store: the ranking (places computed from the
/// saturation points) and the study's own series (published numbers).
fn check_story(dom: &str, runs: &[&serde_json::Value]) {
    let stored: Vec<f64> = runs
        .iter()
        .flat_map(|r| r["measurements"].as_array().unwrap().iter().map(|m| m["value"].as_f64().unwrap()))
        .collect();
    let is_stored = |v: f64| stored.contains(&v);
    let figures: Vec<&str> = dom.split("<figure class=\"story-figure\" ").skip(1).collect();
    assert!(!figures.is_empty(), "no figure: {dom}");
    for fig in figures {
        let fig = &fig[..fig.find("</figure>").unwrap()];
        let id = fig.split('"').nth(1).unwrap();
        for svg in fig.split("<svg").skip(1) {
            let svg = &svg[..svg.find("</svg>").unwrap()];
            assert_eq!(texts(svg, "text", "class=\"chart-title\"").len(), 1, "{id}: {svg}");
            for axis in ["x", "y"] {
                let title = texts(svg, "text", &format!("class=\"axis-title\" data-axis=\"{axis}\""));
                assert!(title.len() == 1 && !title[0].is_empty(), "{id}: {axis} axis title: {svg}");
                let ticks = texts(svg, "text", &format!("class=\"tick\" data-axis=\"{axis}\""));
                assert!(ticks.iter().filter(|t| !t.is_empty()).count() >= 2, "{id}: {axis} ticks {ticks:?}");
            }
            let marks: Vec<Vec<(String, String)>> = ["rect", "circle"]
                .iter()
                .flat_map(|t| tags(svg, t))
                .filter(|t| attr(t, "class") == Some("mark"))
                .collect();
            assert!(!marks.is_empty(), "{id}: nothing drawn: {svg}");
            let mut series: Vec<&str> = marks.iter().map(|m| attr(m, "data-series").unwrap()).collect();
            series.sort_unstable();
            series.dedup();
            if series.len() > 1 {
                let legend = texts(svg, "text", "class=\"legend-label\"");
                for s in &series {
                    assert!(legend.iter().any(|l| l == s), "{id}: {s} not in the legend {legend:?}");
                }
            }
            for m in &marks {
                let value: f64 = attr(m, "data-value").unwrap().parse().unwrap();
                if id != "ranking" && !attr(m, "data-series").unwrap().starts_with("the study") {
                    assert!(is_stored(value), "{id}: a mark draws {value}, which is not stored: {m:?}");
                }
            }
        }
        for cell in tags(fig, "td").iter().filter_map(|t| attr(t, "data-value")) {
            let value: f64 = cell.parse().unwrap();
            if id != "ranking" {
                assert!(is_stored(value) || fig.contains("the study"), "{id}: a cell shows {value}, not stored");
            }
        }
    }
}

/// E1 is gwbench: every discipline at every buffer size, every file
/// method at every file size, the median between its quartiles; its page
/// draws them and names the least CPU on the board pages.
#[test]
fn e1_measures_the_cgi_output_disciplines_and_its_page_draws_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (stdout, run) = run_with("e1", &store, &["--gateway", gateway()]);
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e1"), Some("complete")));
    let board = values(&run, "board_cpu");
    assert_eq!(board.len(), 6 * 7, "6 disciplines x 7 buffer sizes");
    let files = values(&run, "file_cpu");
    assert_eq!(files.len(), 4 * 7, "4 methods x 7 file sizes");
    let of = |metric: &str, subject: &str| {
        values(&run, metric).iter().find(|m| m["subject"] == subject).unwrap()["value"].as_f64().unwrap()
    };
    for (metric, ms, what) in [("board_cpu", &board, "buffer"), ("file_cpu", &files, "file")] {
        for m in ms {
            let subject = m["subject"].as_str().unwrap();
            assert!(subject.ends_with(&format!(" {what}")), "{subject}");
            let v = m["value"].as_f64().unwrap();
            assert!(v > 0.0, "{subject}");
            let (q1, q3) = (of(&format!("{metric}_q1"), subject), of(&format!("{metric}_q3"), subject));
            assert!(q1 <= v && v <= q3, "{subject}: {q1} {v} {q3}");
        }
    }
    for subject in
        ["① stdio, 8 KiB buffer", "⑥ overflow-mmap, 64 KiB buffer", "⑧ mmap, 1 MiB file", "splice, 3 MiB file"]
    {
        assert!(board.iter().chain(&files).any(|m| m["subject"] == subject), "{subject}");
    }
    assert!(stdout.lines().any(|l| l.contains("board") && l.contains("① stdio") && l.contains("8 KiB")), "{stdout}");

    let dom = page(&stdout, &store, &[&run], "e1");
    // The grouped bars: a series per discipline, a bar per buffer size.
    let board_fig = &dom[dom.find("data-figure=\"board\"").unwrap()..];
    let bars: Vec<_> = tags(&board_fig[..board_fig.find("</svg>").unwrap()], "rect")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("mark"))
        .collect();
    assert_eq!(bars.len(), 42);
    let legend = texts(&board_fig[..board_fig.find("</svg>").unwrap()], "text", "class=\"legend-label\"");
    assert_eq!(&legend[..6], ["① stdio", "② stdio-mmap", "③ exact", "④ overflow", "⑤ exact-mmap", "⑥ overflow-mmap"]);
    // The sentence names the least CPU on the board pages.
    let least =
        board.iter().min_by(|a, b| a["value"].as_f64().unwrap().total_cmp(&b["value"].as_f64().unwrap())).unwrap();
    let (series, place) = least["subject"].as_str().unwrap().split_once(", ").unwrap();
    let first = &sentences(&dom)[0];
    assert!(first.contains(&format!("{series} with a {place}")), "{least}: {first}");
    assert!(first.contains("16 KiB") && first.contains("54 %"), "the published findings beside: {first}");
}

#[test]
fn e4_stores_the_compression_gain_per_page_and_coding() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run("e4", &store);
    assert_eq!(run["kind"], "e4");
    let steady = |metric: &str| -> Vec<&serde_json::Value> {
        values(&run, metric).into_iter().filter(|m| !m["subject"].as_str().unwrap().ends_with("cold burst")).collect()
    };
    let bytes = steady("response_bytes");
    assert_eq!(bytes.len(), 32, "4 pages x 4 codings x sequential and concurrent");
    let of = |metric: &str, coding: &str, page: u64, conns: u64| {
        let subject = format!("{coding}, {page} B page, {conns} connection{}", if conns > 1 { "s" } else { "" });
        let found: Vec<_> = steady(metric)
            .into_iter()
            .filter(|m| m["subject"] == subject.as_str() && m["size"] == page && m["concurrency"] == conns)
            .collect();
        assert_eq!(found.len(), 1, "{metric} {coding} {page} {conns}");
        found[0]["value"].as_f64().unwrap()
    };
    for page in [6_040u64, 11_426, 22_132, 41_518] {
        // Sequential (1 connection) and concurrent (16).
        for conns in [1, 16] {
            assert_eq!(of("response_bytes", "identity", page, conns), page as f64, "identity is the page itself");
            for coding in ["identity", "gzip", "br", "zstd"] {
                if coding != "identity" {
                    let bytes = of("response_bytes", coding, page, conns);
                    assert!(bytes < page as f64 * 0.8, "{coding} on {page}: {bytes}");
                }
                assert!(of("requests_per_s", coding, page, conns) > 0.0, "{coding} {page} {conns}");
                assert!(of("latency_mean", coding, page, conns) > 0.0, "{coding} {page} {conns}");
                let row = [&page.to_string(), coding, &conns.to_string()];
                assert!(table.lines().any(|l| l.split_whitespace().take(3).eq(row)), "{row:?}: {table}");
            }
        }
    }
    let gzip = of("compression_gain", "gzip", 41_518, 16);
    let expected = 100.0 * (1.0 - of("response_bytes", "gzip", 41_518, 16) / 41_518.0);
    assert!((gzip - expected).abs() < 1e-9);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["page", "coding", "conns", "bytes", "gain", "req/s", "mean", "us", "p99", "us"], "{table}");

    // The cold burst: every page once, so "off" sends the mean page, and
    // inline compresses every one of them.
    let mean_page = (6_040 + 11_426 + 22_132 + 41_518) as f64 / 4.0;
    let burst = |mode: &str, metric: &str| {
        let subject = format!("{mode}, cold burst");
        let found: Vec<_> = values(&run, metric).into_iter().filter(|m| m["subject"] == subject.as_str()).collect();
        assert_eq!(found.len(), 1, "{subject} {metric}");
        found[0]["value"].as_f64().unwrap()
    };
    for mode in ["off", "inline", "adaptive"] {
        assert!(burst(mode, "requests_per_s") > 0.0, "{mode}");
        assert_eq!(burst(mode, "errors"), 0.0, "{mode}");
        let bytes = burst(mode, "response_bytes");
        assert!(bytes <= mean_page * 1.01, "{mode}: {bytes}");
        assert!(table.lines().any(|l| l.split_whitespace().take(3).eq(["burst", mode, "64"])), "{mode}: {table}");
    }
    assert!((burst("off", "response_bytes") - mean_page).abs() < mean_page * 0.01, "off sends the pages");
    assert!(burst("inline", "response_bytes") < mean_page * 0.8, "inline compresses every page");

    // The page: bytes saved and requests/s per page and coding, the burst;
    // the coding the sentence names saved the most on as many pages as it
    // says.
    let dom = page(&table, &store, &[&run], "e4");
    let first = &sentences(&dom)[0];
    let (coding, rest) = first.split_once(" saved the most bytes on ").unwrap_or_else(|| panic!("{first}"));
    let count: usize = rest.split(' ').next().unwrap().parse().unwrap();
    let pages_won = [6_040u64, 11_426, 22_132, 41_518]
        .iter()
        .filter(|&&page| {
            let gain = |c: &str| of("compression_gain", c, page, 16);
            ["gzip", "br", "zstd"].iter().all(|c| gain(c) <= gain(coding))
        })
        .count();
    assert_eq!(pages_won, count, "{first}");
    assert!(first.contains("+21 % to +64 %") && first.contains("cold burst"), "{first}");
    for id in ["saving", "rate-16", "rate-1", "burst"] {
        assert!(dom.contains(&format!("data-figure=\"{id}\"")), "{id}");
    }
}

#[test]
fn e2_compares_tern_and_the_fastcgi_file_server_by_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run_with("e2", &store, &["--gateway", gateway()]);
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e2"), Some("complete")));
    let rps = values(&run, "requests_per_s");
    assert_eq!(rps.len(), 15, "5 methods x 3 sizes");
    let label = |size: u64| match size {
        1024 => "1 KiB",
        65_536 => "64 KiB",
        _ => "1 MiB",
    };
    let of = |metric: &str, method: &str, size: u64| {
        let subject = format!("{method}, {}", label(size));
        let m = values(&run, metric).into_iter().find(|m| m["subject"] == subject.as_str() && m["size"] == size);
        m.unwrap_or_else(|| panic!("{metric} {subject}"))["value"].as_f64().unwrap()
    };
    for method in ["fcgi-files mmap", "fcgi-files read", "tern read", "tern mmap", "tern sendfile"] {
        for size in [1024, 65_536, 1_048_576] {
            let median = of("requests_per_s", method, size);
            assert!(median > 0.0, "{method} served {size}");
            let (q1, q3) = (of("requests_per_s_q1", method, size), of("requests_per_s_q3", method, size));
            assert!(q1 <= median && median <= q3, "{method} {size}: the median run within the runs' quartiles");
        }
    }
    let ratios = values(&run, "mmap_read_ratio");
    assert_eq!(ratios.len(), 6, "2 servers x 3 sizes");
    for r in &ratios {
        let (subject, size) = (r["subject"].as_str().unwrap(), r["size"].as_u64().unwrap());
        let family = subject.split(',').next().unwrap();
        assert_eq!(subject, format!("{family}, {}", label(size)));
        let expected = of("requests_per_s", &format!("{family} mmap"), size)
            / of("requests_per_s", &format!("{family} read"), size);
        assert!((r["value"].as_f64().unwrap() - expected).abs() < 1e-9, "{family} {size}: {r}");
    }
    let header = table.lines().next().unwrap();
    for column in
        ["fcgi mmap", "fcgi read", "fcgi mmap/read", "tern read", "tern mmap", "tern sendfile", "tern mmap/read"]
    {
        assert!(header.contains(column), "{table}");
    }
    for size in ["1 KiB", "64 KiB", "1 MiB"] {
        assert!(table.lines().any(|l| l.trim_start().starts_with(size)), "{size}: {table}");
    }

    // The page: requests/s against file size per method, the ratios; the
    // sentence names, when one leads, a method that served the most at some
    // size.
    let dom = page(&table, &store, &[&run], "e2");
    let first = &sentences(&dom)[0];
    assert!(first.starts_with("On requests/s, "), "{first}");
    if let Some((winner, _)) = first["On requests/s, ".len()..].split_once(" led at ") {
        let most = |size: u64| {
            rps.iter()
                .filter(|m| m["size"] == size)
                .max_by(|a, b| a["value"].as_f64().unwrap().total_cmp(&b["value"].as_f64().unwrap()))
                .unwrap()
        };
        assert!(
            [1024, 65_536, 1_048_576]
                .iter()
                .any(|&s| most(s)["subject"].as_str().unwrap().starts_with(&format!("{winner},"))),
            "{winner}: {first}"
        );
    } else {
        assert!(first.contains("no method leads past the noise"), "{first}");
    }
    assert!(sentences(&dom).iter().any(|s| s.contains("the study found mmap faster at every size")), "{dom}");

    // Each value links to its history on this host: the run's value there.
    let cell = &dom[dom.find("<td class=\"num").unwrap()..];
    let value: f64 = attr(&tags(cell, "td")[0], "data-value").unwrap().parse().unwrap();
    let link = attr(&tags(cell, "a")[0], "href").unwrap().to_string();
    assert!(link.starts_with("/chart?view=history&") && link.contains("&kind=e2&host="), "{link}");
    let dash = Dashboard::start(&store);
    let history = chromium(&format!("{}{link}", dash.base), None);
    let rows: Vec<f64> = tags(&history, "tr").iter().filter_map(|t| attr(t, "data-value")?.parse().ok()).collect();
    assert_eq!(rows, [value], "one run of e2 on this host: {history}");
}

#[test]
fn e2_without_the_gateway_names_what_to_build_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let missing = dir.path().join("no-gateway");
    let out = tern(&["lab", "run", "e2", "--quick", "--gateway", missing.to_str().unwrap()], &store);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-gateway/fcgi-files") && stderr.contains("make -C gateway"), "{stderr}");
    let list = String::from_utf8(tern(&["lab", "list"], &store).stdout).unwrap();
    assert_eq!(list.lines().count(), 1, "only the header: {list}");
}

#[test]
fn e3_finds_each_models_saturation_point_by_cgi_share_and_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (table, run) = run_with("e3", &store, &["--gateway", gateway()]);
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e3"), Some("complete")));
    let cpus: Vec<u64> = if std::thread::available_parallelism().unwrap().get() >= 2 { vec![1, 2] } else { vec![1] };
    // The subject names every dimension: model, CPUs, CGI share.
    let subject_of =
        |model: &str, n: u64, share: u32| format!("{model}, {n} CPU{}, CGI {share} %", if n > 1 { "s" } else { "" });
    let one = |subject: &str, metric: &str, n: u64| {
        let found: Vec<_> =
            values(&run, metric).into_iter().filter(|m| m["subject"] == subject && m["cpus"] == n).collect();
        assert_eq!(found.len(), 1, "{subject} {metric} on {n} CPUs");
        found[0]["value"].as_f64().unwrap()
    };
    let capacities = values(&run, "capacity");
    let models: std::collections::BTreeSet<&str> =
        capacities.iter().map(|m| m["subject"].as_str().unwrap().split(',').next().unwrap()).collect();
    for model in ["event", "pool", "per-request"] {
        assert!(models.contains(model), "{model} measured: {models:?}");
    }
    assert_eq!(capacities.len(), models.len() * 3 * cpus.len(), "every model x 3 shares x CPU counts");
    for model in &models {
        for share in [0, 50, 100] {
            for &n in &cpus {
                let subject = subject_of(model, n, share);
                let capacity = one(&subject, "capacity", n);
                assert!(capacity > 0.0, "{subject} on {n} CPUs");
                // The steps are fractions of the probed capacity.
                assert_eq!(one(&subject, "rate@1x", n), capacity.floor(), "{subject}");
                assert_eq!(one(&subject, "rate@0.5x", n), (capacity * 0.5).floor(), "{subject}");
                assert!(one(&subject, "requests_per_s@0.5x", n) > 0.0, "{subject}");
                assert!(one(&subject, "latency_p50@0.5x", n) <= one(&subject, "latency_p99@0.5x", n), "{subject}");
                assert_eq!(one(&subject, "failed@0.5x", n), 0.0, "{subject} lost requests at half its capacity");
                // The saturation point: the most a step carried (95 % of its
                // rate, p99 within 500 ms, nothing failed).
                let carried = ["0.5", "1", "1.25"]
                    .iter()
                    .map(|f| {
                        let at = |metric: &str| one(&subject, &format!("{metric}@{f}x"), n);
                        let served = at("requests_per_s");
                        let ok = served >= 0.95 * at("rate") && at("latency_p99") <= 500_000.0 && at("failed") == 0.0;
                        if ok {
                            served
                        } else {
                            0.0
                        }
                    })
                    .fold(0.0, f64::max);
                assert_eq!(one(&subject, "saturation", n), carried, "{subject} on {n} CPUs");
            }
            assert!(
                table.lines().any(|l| l.contains(&format!("highest saturation point on 1 CPU, CGI {share}%"))),
                "{table}"
            );
        }
        let rows = table.lines().filter(|l| l.split_whitespace().nth(2) == Some(model)).count();
        assert_eq!(rows, 3 * cpus.len(), "a row per share and CPU count: {table}");
    }
    let header = table.lines().next().unwrap();
    for column in ["cpus", "cgi", "model", "capacity", "0.5x", "1x", "1.25x", "saturation"] {
        assert!(header.contains(column), "{header}");
    }

    // The page: a panel per CPU count and share (throughput and p99 against
    // the rate offered); the sentence's leader had the highest saturation
    // point in every configuration it names.
    let dom = page(&table, &store, &[&run], "e3");
    for &n in &cpus {
        for share in [0, 50, 100] {
            let panel = format!("data-figure=\"panel-{n}cpu-cgi{share}\"");
            assert!(dom.contains(&panel), "{panel}");
        }
    }
    let first = &sentences(&dom)[0];
    if let Some((leader, rest)) = first.split_once(" had the highest saturation point in ") {
        let named = rest.split_once('(').unwrap().1.split_once(')').unwrap().0;
        for place in named.split("; ") {
            let at = |model: &str| {
                values(&run, "saturation").iter().find(|m| m["subject"] == format!("{model}, {place}")).unwrap()
                    ["value"]
                    .as_f64()
                    .unwrap()
            };
            assert!(models.iter().all(|m| at(m) <= at(leader)), "{leader} at {place}: {first}");
        }
    } else {
        assert!(first.starts_with("No model carried more"), "{first}");
    }
}

/// `tern lab report` holds each experiment's page, as the dashboard shows
/// it, in one file that opens from a file:// URL with nothing fetched; and
/// runs of one experiment compare on one page, each run its own series.
#[test]
fn the_report_holds_every_experiment_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let (_, e1) = run_with("e1", &store, &["--gateway", gateway()]);
    let (_, e5) = run("e5", &store);
    let (_, again) = run_with("e1", &store, &["--gateway", gateway()]);
    let report = common::lab::artifacts().join("lab-report-experiments.html");
    let ids = [e1["id"].to_string(), e5["id"].to_string()];
    let out = tern(&["lab", "report", &ids[0], &ids[1], "-o", report.to_str().unwrap()], &store);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!text.contains("src=") && !text.contains("href="), "self-contained: no links, no fetched resources");
    let dom = chromium(&format!("file://{}", report.display()), None);
    let kinds: Vec<String> =
        tags(&dom, "section").iter().filter_map(|t| attr(t, "data-kind").map(str::to_string)).collect();
    assert_eq!(kinds, ["e1", "e5"]);
    check_story(&dom, &[&e1, &e5]);
    assert!(sentences(&dom).len() >= 2, "each experiment's sentences");

    // Two runs of E1 compared: each its own series on one chart, a
    // sentence each.
    let dash = Dashboard::start(&store);
    let dom = chromium(&format!("{}/compare?run={}&run={}", dash.base, ids[0], again["id"]), None);
    check_story(&dom, &[&e1, &again]);
    let legend = texts(&dom, "text", "class=\"legend-label\"");
    for id in [&ids[0], &again["id"].to_string()] {
        assert!(
            legend.iter().any(|l| l.starts_with("① stdio · #") && l.contains(&format!("#{id} "))),
            "{id}: {legend:?}"
        );
        assert!(sentences(&dom).iter().any(|s| s.starts_with(&format!("#{id} "))), "{id}");
    }
}

/// A `tern agent` on 127.0.0.1 with the token in `token`, stopped on drop.
struct Agent {
    child: std::process::Child,
    addr: String,
}

impl Agent {
    fn start(token: &Path) -> Agent {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["agent", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(token)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let line = lines.next().expect("the agent says where it listens").unwrap();
        let addr = line.split("listening on ").nth(1).unwrap_or_else(|| panic!("{line}"));
        let addr = addr.split(' ').next().unwrap().to_string();
        std::thread::spawn(move || lines.for_each(drop));
        Agent { child, addr }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// E5 with `--agent`: the suites here and on the agent, one column per
/// host, and one stored run per host.
#[test]
fn e5_probes_this_host_and_an_agent_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let token = dir.path().join("token");
    std::fs::write(&token, "e5-side-by-side\n").unwrap();
    let agent = Agent::start(&token);
    let t = token.to_str().unwrap();
    let out = tern(&["lab", "run", "e5", "--quick", "--agent", &agent.addr, "--token-file", t], &store);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["figure", "unit", "local", agent.addr.as_str()], "{stdout}");
    let rows: Vec<&str> =
        lines.take_while(|l| !l.starts_with("stored as run ") && !l.starts_with("reference: ")).collect();
    assert!(rows.len() > 20, "every suite's figures: {stdout}");
    for row in &rows {
        // The net suite's round trip across CPUs is this host's alone: with
        // an agent the two ends are on two hosts.
        let hosts = if row.contains("net/TCP round trip, 1 KiB, across CPUs") { 1 } else { 2 };
        let cells: Vec<&str> = row.split_whitespace().rev().skip(2 - hosts).take(hosts).collect();
        for cell in cells {
            assert!(cell.parse::<f64>().is_ok_and(|v| v >= 0.0), "both hosts measured {row:?}: {stdout}");
        }
    }
    for suite in ["syscalls/", "processes/", "ipc/", "net/", "rpc/", "files/", "disk/"] {
        assert!(rows.iter().any(|r| r.trim_start().starts_with(suite)), "{suite}: {stdout}");
    }

    // Both runs stored, kind e5, each with every figure of the table.
    let ids: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("stored as run ").or_else(|| l.split("'s run as run ").nth(1)))
        .map(|rest| rest.split(';').next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{stdout}");
    let export = tern(&["lab", "export", &ids[0], &ids[1]], &store);
    let doc: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs[0]["label"], "e5 --quick");
    assert_eq!(runs[1]["label"], format!("e5 --quick on {}", agent.addr));
    for (run, across) in runs.iter().zip([0, 1]) {
        assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("e5"), Some("complete")));
        let figures = run["measurements"].as_array().unwrap().iter().filter(|m| m["metric"] == "value").count();
        assert_eq!(figures, rows.len() - across, "{run}");
    }
    assert_eq!(runs[1]["result"]["host"], agent.addr.as_str());
    let list = String::from_utf8(tern(&["lab", "list", "--kind", "e5"], &store).stdout).unwrap();
    assert_eq!(list.lines().count(), 3, "the header and two runs: {list}");

    // The page of this host's run shows the agent's beside it, a column
    // each; the round trips on one CPU and across CPUs; the sentence the
    // stored pipe round trip.
    let dom = page(&stdout, &store, &[&runs[0], &runs[1]], "e5");
    let figures = &dom[dom.find("data-figure=\"figures\"").unwrap()..];
    let head = texts(&figures[..figures.find("</thead>").unwrap()], "th", "");
    let hosts: Vec<&String> = head.iter().filter(|h| h.starts_with('#')).collect();
    assert_eq!(hosts.len(), 2, "{head:?}");
    assert!(hosts[1].ends_with(&agent.addr), "{head:?}");
    let pipe = runs[0]["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["subject"] == "ipc/pipe round trip, 1 byte")
        .unwrap();
    let us = pipe["value"].as_f64().unwrap() * if pipe["unit"] == "ns" { 1e-3 } else { 1.0 };
    let shown = tags(&dom, "td").into_iter().find(|t| attr(t, "data-x") == Some("pipe, 1 CPU")).unwrap();
    assert_eq!(attr(&shown, "data-value").unwrap().parse::<f64>().unwrap(), pipe["value"].as_f64().unwrap());
    let first = &sentences(&dom)[0];
    assert!(first.contains(&format!("a pipe round trip took {} µs on one CPU", sig3(us))), "{us}: {first}");
    // Each reference tool this host has stands beside its figure.
    let references = values(&runs[0], "reference");
    let findings = texts(&dom, "td", "");
    for r in &references {
        let subject = r["subject"].as_str().unwrap();
        assert!(values(&runs[0], "value").iter().any(|m| m["subject"] == subject), "{subject}");
        let tool = runs[0]["config"]["settings"]["references"][subject].as_str().unwrap();
        assert!(findings.iter().any(|f| f.starts_with(tool)), "{tool}: {findings:?}");
    }
}

/// `v` to three significant figures, as the pages print it.
fn sig3(v: f64) -> String {
    let digits = |v: f64| v.abs().log10().floor() as i32;
    let unit = 10f64.powi(digits(v) - 2);
    let rounded = (v / unit).round() * unit;
    format!("{rounded:.*}", (2 - digits(rounded)).max(0) as usize)
}

/// `--no-store`: the table is printed, the store is not even created.
#[test]
fn no_store_prints_the_table_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("lab.sqlite");
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["lab", "run", "e5", "--quick", "--no-store"])
        .env("XDG_DATA_HOME", dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().next().unwrap().split_whitespace().eq(["figure", "unit", "local"]), "{stdout}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("syscalls/")), "{stdout}");
    assert!(!stdout.contains("stored"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing written: {left:?}");
    assert!(!store.exists());
    // With a store named too, it says the two contradict.
    let both = tern(&["lab", "run", "e5", "--quick", "--no-store"], &store);
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("--no-store and --store"), "{both:?}");
}
