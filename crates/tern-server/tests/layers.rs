//! The layers of `tern-server` run one way (ARCHITECTURE.md, "Layers"):
//! every file of `src/` may import from its own layer and the ones below,
//! never from one above, and no files import each other in a circle.
//!
//! Read from the source text: `use` trees (`crate::`, `super::`, `self::`
//! and child modules), inline `crate::…`/`super::…` paths (macro paths such
//! as `crate::log!` included), and `mod x;` declarations (a parent depends
//! on its children, so a child importing its parent's items is a circle).
//! Comments and literals are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top to bottom. A file belongs to the layer of its top-level module
/// (`site/cgi.rs` → `site`); `lib.rs` is the crate root, above all.
const LAYERS: &[(&str, &[&str])] = &[
    ("composition root", &["server"]),
    ("engines", &["engine"]),
    ("connection", &["conn", "shared", "handover", "per_ip", "room"]),
    ("site", &["site"]),
    ("compression", &["compress"]),
    ("what a worker lends, output", &["worker", "reply", "body", "tls", "static_io", "calibrate"]),
    (
        "files and records",
        &[
            "open_files",
            "resolve",
            "offload",
            "reaper",
            "access_log",
            "service_records",
            "metrics",
            "error_log",
            "config",
            "privileges",
            "listeners",
            "spool",
            "sys",
        ],
    ),
];

const ROOT: &str = "lib.rs";

#[test]
fn imports_run_down_the_layers_without_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &src, &mut files);
    assert!(files.len() > 20, "found only {} files under {}", files.len(), src.display());
    let problems = check(&files);
    assert!(problems.is_empty(), "layer violations:\n{}", problems.join("\n"));
}

/// ARCHITECTURE.md's layer table is this one: same order, same names,
/// every module in its row.
#[test]
fn architecture_md_shows_the_same_layers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let section = doc.split("\n## Layers\n").nth(1).expect("ARCHITECTURE.md has a \"## Layers\" section");
    let rows: Vec<&str> =
        section.lines().filter(|l| l.strip_prefix("| ").is_some_and(|r| r.starts_with(char::is_numeric))).collect();
    assert_eq!(rows.len(), LAYERS.len(), "layer rows in ARCHITECTURE.md: {rows:#?}");
    for (k, ((name, modules), row)) in LAYERS.iter().zip(&rows).enumerate() {
        assert!(row.starts_with(&format!("| {} | {name} |", k + 1)), "row {}: {row}", k + 1);
        for m in *modules {
            assert!(row.contains(&format!("`{m}.rs`")) || row.contains(&format!("`{m}/`")), "{m} missing from {row}");
        }
    }
}

/// The checker itself finds what it must: an import from above, a path
/// through the crate root, and a circle inside one layer.
#[test]
fn the_checker_catches_upward_imports_and_circles() {
    let files: Vec<(String, String)> = [
        ("lib.rs", "pub mod server; pub mod worker; pub mod site; pub mod conn; pub mod shared;"),
        ("server.rs", "use crate::worker::Worker;"),
        ("worker.rs", "use crate::server::Shared; // use crate::conn::Conn;\nfn f() { crate::log!(\"{\"); }"),
        ("site/mod.rs", "pub mod cgi;\nuse std::io;"),
        (
            "site/cgi.rs",
            "const S: &str = \"use crate::server::X;\";\nfn f<'a>(c: &'a u8) -> char { 'x' }\nuse super::Site;",
        ),
        ("conn.rs", "use crate::shared::{Shared, self};\nmod tests { use super::*; }"),
        ("shared.rs", "fn f(_: crate::conn::Conn) {}"),
    ]
    .iter()
    .map(|(p, s)| (p.to_string(), s.to_string()))
    .collect();
    let problems = check(&files);
    let expected = [
        "worker.rs:1 imports `crate::server::Shared` (server.rs, layer \"composition root\") from above its layer \"what a worker lends, output\"",
        "worker.rs:2 imports `crate::log` (lib.rs, the crate root) from above its layer \"what a worker lends, output\"",
        "circle: lib.rs -> worker.rs (line 1: `mod worker`) -> lib.rs (line 2: `crate::log`)",
        "circle: server.rs -> worker.rs (line 1: `crate::worker::Worker`) -> server.rs (line 1: `crate::server::Shared`)",
        "circle: site/cgi.rs -> site/mod.rs (line 3: `super::Site`) -> site/cgi.rs (line 1: `mod cgi`)",
        "circle: conn.rs -> shared.rs (line 1: `crate::shared::Shared`) -> conn.rs (line 1: `crate::conn::Conn`)",
    ];
    for e in expected {
        assert!(problems.iter().any(|p| p == e), "missing {e:?} in:\n{}", problems.join("\n"));
    }
    assert_eq!(problems.len(), expected.len(), "unexpected problems:\n{}", problems.join("\n"));
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// One import: the file it leads to, the path as written, and its line.
struct Import {
    target: String,
    path: String,
    line: usize,
}

fn layer_of(file: &str) -> Option<usize> {
    if file == ROOT {
        return Some(0);
    }
    let top = file.split('/').next().unwrap().trim_end_matches(".rs");
    LAYERS.iter().position(|(_, modules)| modules.contains(&top)).map(|i| i + 1)
}

fn layer_name(layer: usize) -> String {
    if layer == 0 {
        "the crate root".to_string()
    } else {
        format!("layer {:?}", LAYERS[layer - 1].0)
    }
}

/// Every problem found, one line each.
fn check(files: &[(String, String)]) -> Vec<String> {
    let known: BTreeSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    let mut problems = Vec::new();
    let mut graph: BTreeMap<&str, Vec<Import>> = BTreeMap::new();
    for (file, source) in files {
        let Some(own) = layer_of(file) else {
            problems.push(format!("{file} is in no layer: add its module to LAYERS in tests/layers.rs"));
            continue;
        };
        let imports = imports(file, source, &known);
        for i in &imports {
            let Some(theirs) = layer_of(&i.target) else { continue };
            if theirs < own {
                problems.push(format!(
                    "{file}:{} imports `{}` ({}, {}) from above its {}",
                    i.line,
                    i.path,
                    i.target,
                    layer_name(theirs),
                    layer_name(own)
                ));
            }
        }
        graph.insert(file, imports);
    }
    problems.extend(circles(&graph));
    problems
}

/// The file-level circles: one per strongly connected component, shown as
/// one closed walk through it with the import behind each step.
fn circles(graph: &BTreeMap<&str, Vec<Import>>) -> Vec<String> {
    let mut out = Vec::new();
    let mut reported: BTreeSet<&str> = BTreeSet::new();
    for &start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        // Shortest way back to `start` (breadth first), if any.
        let mut came_from: BTreeMap<&str, (&str, &Import)> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut closing: Option<(&str, &Import)> = None;
        'search: while let Some(at) = queue.pop_front() {
            for i in graph.get(at).into_iter().flatten() {
                let next = i.target.as_str();
                if next == start {
                    closing = Some((at, i));
                    break 'search;
                }
                if graph.contains_key(next) && !came_from.contains_key(next) {
                    came_from.insert(next, (at, i));
                    queue.push_back(next);
                }
            }
        }
        let Some((mut at, last)) = closing else { continue };
        let mut steps = vec![(at, last)];
        while at != start {
            let (prev, i) = came_from[at];
            steps.push((prev, i));
            at = prev;
        }
        steps.reverse();
        let mut text = format!("circle: {start}");
        for (_, i) in &steps {
            text.push_str(&format!(" -> {} (line {}: `{}`)", i.target, i.line, i.path));
            reported.insert(i.target.as_str());
        }
        reported.insert(start);
        out.push(text);
    }
    out
}

/// What `file` imports from the crate (itself excluded).
fn imports(file: &str, source: &str, known: &BTreeSet<&str>) -> Vec<Import> {
    let module = module_of(file);
    let text = strip(source);
    let toks = tokens(&text);
    let mut out = Vec::new();
    // Inline modules (`mod tests { … }`) open at a brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = (toks[i].0.as_str(), toks[i].1);
        let here = || -> Vec<String> { module.iter().cloned().chain(inline.iter().map(|(m, _)| m.clone())).collect() };
        match tok {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            "mod" if i + 2 < toks.len() && is_ident(&toks[i + 1].0) => {
                let name = toks[i + 1].0.clone();
                if toks[i + 2].0 == "{" {
                    inline.push((name, depth + 1));
                    i += 2;
                    continue;
                }
                let mut path = here();
                path.push(name.clone());
                resolve(&path, &format!("mod {name}"), line, file, known, &mut out);
                i += 2;
            }
            "use" => {
                let end = toks[i..].iter().position(|t| t.0 == ";").map_or(toks.len(), |p| i + p);
                let mut paths = Vec::new();
                let mut j = i + 1;
                use_tree(&toks[..end], &mut j, Vec::new(), &mut paths);
                for p in paths {
                    if let Some(abs) = absolute(&here(), &p, known) {
                        resolve(&abs, &p.join("::"), line, file, known, &mut out);
                    }
                }
                i = end;
                continue;
            }
            "crate" | "$crate" | "super" | "self" if toks.get(i + 1).is_some_and(|t| t.0 == "::") => {
                let mut p = vec![tok.trim_start_matches('$').to_string()];
                let mut j = i + 1;
                while j + 1 < toks.len() && toks[j].0 == "::" && is_ident(&toks[j + 1].0) {
                    p.push(toks[j + 1].0.clone());
                    j += 2;
                }
                if let Some(abs) = absolute(&here(), &p, known) {
                    resolve(&abs, &p.join("::"), line, file, known, &mut out);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The module path of a file: `site/mod.rs` → `[site]`, `lib.rs` → `[]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The file that defines module `path`, if it is one of the crate's.
fn file_of(path: &[String], known: &BTreeSet<&str>) -> Option<String> {
    if path.is_empty() {
        return Some(ROOT.to_string());
    }
    let base = path.join("/");
    [format!("{base}.rs"), format!("{base}/mod.rs")].into_iter().find(|f| known.contains(f.as_str()))
}

/// A written path made absolute from module `here`; `None` for paths into
/// other crates.
fn absolute(here: &[String], path: &[String], known: &BTreeSet<&str>) -> Option<Vec<String>> {
    let first = path.first()?.as_str();
    let (mut abs, rest) = match first {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (here.to_vec(), &path[1..]),
        "super" => (here.to_vec(), path),
        // A child module named without `self::`, or another crate.
        child => {
            let mut p = here.to_vec();
            p.push(child.to_string());
            file_of(&p, known)?;
            (here.to_vec(), path)
        }
    };
    for seg in rest {
        match seg.as_str() {
            "super" => {
                abs.pop();
            }
            "self" => {}
            s => abs.push(s.to_string()),
        }
    }
    Some(abs)
}

/// Records the file behind the longest module prefix of `path`, unless it
/// is `file` itself.
fn resolve(path: &[String], written: &str, line: usize, file: &str, known: &BTreeSet<&str>, out: &mut Vec<Import>) {
    let target = (0..=path.len()).rev().find_map(|n| file_of(&path[..n], known)).unwrap();
    let written = written.strip_suffix("::self").unwrap_or(written);
    if target != file && !out.iter().any(|i| i.target == target && i.path == written) {
        out.push(Import { target, path: written.to_string(), line });
    }
}

/// Expands a `use` tree into its paths: `a::{b, c::{self, d}}` → `a::b`,
/// `a::c::self`, `a::c::d`.
fn use_tree(toks: &[(String, usize)], j: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    while *j < toks.len() {
        match toks[*j].0.as_str() {
            "{" => {
                *j += 1;
                while *j < toks.len() && toks[*j].0 != "}" {
                    use_tree(toks, j, path.clone(), out);
                    if *j < toks.len() && toks[*j].0 == "," {
                        *j += 1;
                    }
                }
                *j += 1;
                return;
            }
            "*" => {
                *j += 1;
                break;
            }
            "::" => *j += 1,
            tok => {
                path.push(tok.to_string());
                *j += 1;
                if *j < toks.len() && toks[*j].0 == "as" {
                    *j += 2;
                }
                if *j >= toks.len() || toks[*j].0 != "::" {
                    break;
                }
            }
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

fn is_ident(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
}

/// Identifiers (with `$crate`), `::` and single punctuation, with lines.
fn tokens(text: &str) -> Vec<(String, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || (i == start && c == '$')) {
                i += 1;
            }
            out.push((chars[start..i].iter().collect(), line));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(("::".to_string(), line));
            i += 2;
        } else {
            out.push((c.to_string(), line));
            i += 1;
        }
    }
    out
}

/// The source with comments, strings and character literals blanked out
/// (newlines kept, so lines still count).
fn strip(source: &str) -> String {
    let c: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        let start = i;
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut nest = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    nest += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    nest -= 1;
                    i += 2;
                    if nest == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if !prev_ident && raw_string_at(&c, i).is_some() {
            let (hashes, open) = raw_string_at(&c, i).unwrap();
            i = open + 1;
            while i < c.len()
                && !(c[i] == '"' && c[i + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes)
            {
                i += 1;
            }
            i = (i + 1 + hashes).min(c.len());
        } else if c[i] == '"' || (!prev_ident && c[i] == 'b' && c.get(i + 1) == Some(&'"')) {
            i += if c[i] == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(c.len());
        } else if c[i] == '\'' || (!prev_ident && c[i] == 'b' && c.get(i + 1) == Some(&'\'')) {
            let q = if c[i] == 'b' { i + 1 } else { i };
            if c.get(q + 1) == Some(&'\\') {
                i = q + 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i = (i + 1).min(c.len());
            } else if c.get(q + 2) == Some(&'\'') {
                i = q + 3;
            } else {
                // A lifetime.
                out.push(c[i]);
                i += 1;
                continue;
            }
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        }
        blank(&mut out, &c[start..i.min(c.len())]);
    }
    out
}

/// `r"…"`, `r#"…"#`, `br"…"`: the number of `#` and the opening quote.
fn raw_string_at(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
    (c.get(j + hashes) == Some(&'"')).then_some((hashes, j + hashes))
}
