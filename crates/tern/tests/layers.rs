//! Imports run one way in every crate of the workspace, and crates depend
//! only on crates below them (ARCHITECTURE.md, "Layers").
//!
//! The layer tables are ARCHITECTURE.md's: in its "Layers" section, a
//! `### crate-name` heading, then rows `| # | Layer | Modules |`, top to
//! bottom, naming each top-level module of the crate's `src/` as
//! `` `x.rs` `` or `` `x/` `` (names inside parentheses are remarks). In a
//! crate with a table every file belongs to the layer of its top-level
//! module (`site/cgi.rs` → `site`; the crate root, `lib.rs` or `main.rs`,
//! is above all) and may import from its own layer and the ones below,
//! never from one above. In every crate, table or not, no files import
//! each other in a circle. The workspace's members are listed bottom to
//! top in its `Cargo.toml`; a crate depends only on members before it.
//!
//! Read from the source text: `use` trees (`crate::`, `super::`, `self::`
//! and child modules), inline `crate::…`/`super::…` paths (macro paths such
//! as `crate::log!` included), and `mod x;` declarations (a parent depends
//! on its children, so a child importing its parent's items is a circle).
//! Comments and literals are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[test]
fn imports_run_down_the_layers_without_circles() {
    let workspace = workspace();
    let doc = std::fs::read_to_string(workspace.join("ARCHITECTURE.md")).unwrap();
    let tables = tables(&doc).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    let members = members(&workspace);
    let mut problems: Vec<String> = tables
        .keys()
        .filter(|name| !members.iter().any(|m| &m.name == *name))
        .map(|name| format!("ARCHITECTURE.md has layers for {name}, no crate of the workspace"))
        .collect();
    for m in &members {
        let src = m.dir.join("src");
        let mut files = Vec::new();
        collect(&src, &src, &mut files);
        assert!(!files.is_empty(), "no files under {}", src.display());
        let found = check(&files, tables.get(&m.name).map(Vec::as_slice));
        problems.extend(found.into_iter().map(|p| format!("{}: {p}", m.name)));
    }
    assert!(members.len() > 4, "found only {} crates", members.len());
    assert!(problems.is_empty(), "layer violations:\n{}", problems.join("\n"));
}

#[test]
fn crates_depend_only_on_crates_below() {
    let members = members(&workspace());
    let problems = upward_dependencies(&members);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself finds what it must: an import from above, a path
/// through the crate root, a circle inside one layer, a file in no layer,
/// a table naming a module that is gone, and a crate that depends on one
/// above it.
#[test]
fn the_checker_catches_upward_imports_and_circles() {
    let doc = "# Doc\n\n## Layers\n\nText.\n\n### other\n\n| # | Layer | Modules |\n|---|---|---|\n\
        | 1 | all | `a.rs` |\n\n### demo\n\n| # | Layer | Modules (`src/`) |\n|---|-------|---------|\n\
        | 1 | composition root | `server.rs` (starts `engine.rs`) |\n| 2 | connection | `conn.rs`, `shared.rs` |\n\
        | 3 | site | `site/` (`mod.rs` routes; `cgi.rs`) |\n| 4 | what a worker lends, output | `worker.rs`, `gone.rs` |\n\
        \n## Invariants\n\n| 1 | not | `a table.rs` |\n";
    let tables = tables(doc).unwrap();
    assert_eq!(tables.keys().collect::<Vec<_>>(), ["demo", "other"]);
    let files: Vec<(String, String)> = [
        ("lib.rs", "pub mod server; pub mod worker; pub mod site; pub mod conn; pub mod shared; mod extra;"),
        ("server.rs", "use crate::worker::Worker;"),
        ("worker.rs", "use crate::server::Shared; // use crate::conn::Conn;\nfn f() { crate::log!(\"{\"); }"),
        ("site/mod.rs", "pub mod cgi;\nuse std::io;"),
        (
            "site/cgi.rs",
            "const S: &str = \"use crate::server::X;\";\nfn f<'a>(c: &'a u8) -> char { 'x' }\nuse super::Site;",
        ),
        ("conn.rs", "use crate::shared::{Shared, self};\nmod tests { use super::*; }"),
        ("shared.rs", "fn f(_: crate::conn::Conn) {}"),
        ("extra.rs", ""),
    ]
    .iter()
    .map(|(p, s)| (p.to_string(), s.to_string()))
    .collect();
    let problems = check(&files, Some(&tables["demo"]));
    let expected = [
        "`gone` (layer \"what a worker lends, output\") is no module of src/",
        "extra.rs is in no layer: add its module to the crate's table in ARCHITECTURE.md",
        "worker.rs:1 imports `crate::server::Shared` (server.rs, layer \"composition root\") from above its layer \"what a worker lends, output\"",
        "worker.rs:2 imports `crate::log` (lib.rs, the crate root) from above its layer \"what a worker lends, output\"",
        "circle: conn.rs -> shared.rs (line 1: `crate::shared::Shared`) -> conn.rs (line 1: `crate::conn::Conn`)",
        "circle: lib.rs -> worker.rs (line 1: `mod worker`) -> lib.rs (line 2: `crate::log`)",
        "circle: server.rs -> worker.rs (line 1: `crate::worker::Worker`) -> server.rs (line 1: `crate::server::Shared`)",
        "circle: site/cgi.rs -> site/mod.rs (line 3: `super::Site`) -> site/cgi.rs (line 1: `mod cgi`)",
    ];
    for e in expected {
        assert!(problems.iter().any(|p| p == e), "missing {e:?} in:\n{}", problems.join("\n"));
    }
    assert_eq!(problems.len(), expected.len(), "unexpected problems:\n{}", problems.join("\n"));
    // Without a table only the circles count.
    assert_eq!(check(&files, None).len(), 4);
    let member = |name: &str, deps: &[&str]| Member {
        name: name.into(),
        dir: PathBuf::new(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
    };
    let members = [member("low", &[]), member("mid", &["low", "top"]), member("top", &["mid"])];
    assert_eq!(upward_dependencies(&members), ["mid depends on top, listed after it in the workspace's members"]);
}

/// One layer of a crate's table.
struct Layer {
    name: String,
    /// Its top-level modules: `site` for `` `site/` ``, `conn` for `` `conn.rs` ``.
    modules: Vec<String>,
}

/// The tables of `doc`'s "Layers" section, by crate.
fn tables(doc: &str) -> Result<BTreeMap<String, Vec<Layer>>, String> {
    let section = doc.split("\n## Layers\n").nth(1).ok_or("no \"## Layers\" section")?;
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut out: BTreeMap<String, Vec<Layer>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        if let Some(name) = line.strip_prefix("### ") {
            current = Some(name.trim().trim_matches('`').to_string());
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(Ok(k)) = cells.get(1).filter(|_| line.starts_with('|')).map(|c| c.parse::<usize>()) else {
            continue;
        };
        let name = current.clone().ok_or_else(|| format!("the row {line:?} comes before any \"### crate\" heading"))?;
        let layers = out.entry(name.clone()).or_default();
        if k != layers.len() + 1 || cells.len() < 4 {
            return Err(format!("{name}: row {line:?} should be layer {}", layers.len() + 1));
        }
        layers.push(Layer { name: cells[2].to_string(), modules: modules(&cells[3..].join("|")) });
    }
    Ok(out)
}

/// The modules a cell names outside parentheses: `` `x.rs` `` and `` `x/` ``.
fn modules(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut quoted: Option<String> = None;
    for c in cell.chars() {
        match (c, &mut quoted) {
            ('`', Some(q)) => {
                if depth == 0 {
                    if let Some(m) = q.strip_suffix(".rs").or_else(|| q.strip_suffix('/')) {
                        out.push(m.to_string());
                    }
                }
                quoted = None;
            }
            (_, Some(q)) => q.push(c),
            ('`', None) => quoted = Some(String::new()),
            ('(', None) => depth += 1,
            (')', None) => depth -= 1,
            _ => {}
        }
    }
    out
}

/// A crate of the workspace.
struct Member {
    name: String,
    dir: PathBuf,
    /// The workspace's crates it depends on (normal, build and dev).
    deps: Vec<String>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The workspace's members, in the order its `Cargo.toml` lists them.
fn members(workspace: &Path) -> Vec<Member> {
    let read = |p: &Path| -> toml::Table {
        toml::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
    };
    let root = read(&workspace.join("Cargo.toml"));
    let dirs: Vec<PathBuf> = root["workspace"]["members"]
        .as_array()
        .expect("workspace.members")
        .iter()
        .map(|m| workspace.join(m.as_str().unwrap()))
        .collect();
    let manifests: Vec<toml::Table> = dirs.iter().map(|d| read(&d.join("Cargo.toml"))).collect();
    let names: Vec<String> = manifests.iter().map(|t| t["package"]["name"].as_str().unwrap().to_string()).collect();
    dirs.into_iter()
        .zip(manifests)
        .zip(&names)
        .map(|((dir, manifest), name)| {
            let deps = ["dependencies", "build-dependencies", "dev-dependencies"]
                .iter()
                .filter_map(|s| manifest.get(*s).and_then(toml::Value::as_table))
                .flat_map(|t| t.keys())
                .filter(|k| names.contains(k))
                .cloned()
                .collect();
            Member { name: name.clone(), dir, deps }
        })
        .collect()
}

/// Each dependency of a member on a member listed after it.
fn upward_dependencies(members: &[Member]) -> Vec<String> {
    let position = |name: &str| members.iter().position(|m| m.name == name);
    let mut out = Vec::new();
    for (k, m) in members.iter().enumerate() {
        for d in &m.deps {
            if position(d).is_some_and(|p| p >= k) {
                out.push(format!("{} depends on {d}, listed after it in the workspace's members", m.name));
            }
        }
    }
    out
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

/// A crate's files (paths under `src/`) and its root among them.
struct Crate<'a> {
    files: BTreeSet<&'a str>,
    root: &'a str,
}

impl<'a> Crate<'a> {
    fn new(files: &'a [(String, String)]) -> Crate<'a> {
        let files: BTreeSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        let root = if files.contains("lib.rs") { "lib.rs" } else { "main.rs" };
        Crate { files, root }
    }

    /// The module path of a file: `site/mod.rs` → `[site]`, the root → `[]`.
    fn module_of(&self, file: &str) -> Vec<String> {
        if file == self.root {
            return Vec::new();
        }
        let mut parts: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_string).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    }

    /// The file that defines module `path`, if it is one of the crate's.
    fn file_of(&self, path: &[String]) -> Option<String> {
        if path.is_empty() {
            return Some(self.root.to_string());
        }
        let base = path.join("/");
        [format!("{base}.rs"), format!("{base}/mod.rs")].into_iter().find(|f| self.files.contains(f.as_str()))
    }

    /// The layer of `file` in `layers` (1 = the top; 0 the crate root).
    fn layer_of(&self, file: &str, layers: &[Layer]) -> Option<usize> {
        if file == self.root {
            return Some(0);
        }
        let top = file.split('/').next().unwrap().trim_end_matches(".rs");
        layers.iter().position(|l| l.modules.iter().any(|m| m == top)).map(|i| i + 1)
    }
}

fn layer_name(layers: &[Layer], layer: usize) -> String {
    if layer == 0 {
        "the crate root".to_string()
    } else {
        format!("layer {:?}", layers[layer - 1].name)
    }
}

/// Every problem of one crate's files against its table (`None`: circles
/// only), one line each.
fn check(files: &[(String, String)], layers: Option<&[Layer]>) -> Vec<String> {
    let known = Crate::new(files);
    let mut problems = Vec::new();
    for l in layers.into_iter().flatten() {
        for m in l.modules.iter().filter(|m| known.file_of(&[m.to_string()]).is_none()) {
            problems.push(format!("`{m}` (layer {:?}) is no module of src/", l.name));
        }
    }
    let mut graph: BTreeMap<&str, Vec<Import>> = BTreeMap::new();
    for (file, source) in files {
        let imports = imports(file, source, &known);
        if let Some(layers) = layers {
            let Some(own) = known.layer_of(file, layers) else {
                problems.push(format!("{file} is in no layer: add its module to the crate's table in ARCHITECTURE.md"));
                graph.insert(file, imports);
                continue;
            };
            for i in &imports {
                let Some(theirs) = known.layer_of(&i.target, layers) else { continue };
                if theirs < own {
                    problems.push(format!(
                        "{file}:{} imports `{}` ({}, {}) from above its {}",
                        i.line,
                        i.path,
                        i.target,
                        layer_name(layers, theirs),
                        layer_name(layers, own)
                    ));
                }
            }
        }
        graph.insert(file, imports);
    }
    problems.extend(circles(&graph));
    problems
}

/// One import: the file it leads to, the path as written, and its line.
struct Import {
    target: String,
    path: String,
    line: usize,
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
fn imports(file: &str, source: &str, known: &Crate) -> Vec<Import> {
    let module = known.module_of(file);
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

/// A written path made absolute from module `here`; `None` for paths into
/// other crates.
fn absolute(here: &[String], path: &[String], known: &Crate) -> Option<Vec<String>> {
    let first = path.first()?.as_str();
    let (mut abs, rest) = match first {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (here.to_vec(), &path[1..]),
        "super" => (here.to_vec(), path),
        // A child module named without `self::`, or another crate.
        child => {
            let mut p = here.to_vec();
            p.push(child.to_string());
            known.file_of(&p)?;
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
fn resolve(path: &[String], written: &str, line: usize, file: &str, known: &Crate, out: &mut Vec<Import>) {
    let target = (0..=path.len()).rev().find_map(|n| known.file_of(&path[..n])).unwrap();
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
