//! The documentation holds together: every relative link in `README.md`,
//! `ARCHITECTURE.md` and `docs/*.md` names a file that exists, and every
//! `#anchor` a heading of its target (GitHub's slugs); every page of
//! `docs/` is in its index; the README stays a page (under 200 lines) and
//! the codemap a ten-minute read (under 250).
//!
//! A link that leaves the repository (the shared spec beside it) is
//! checked only where that place exists: a clean clone may live alone.
//! The configuration reference's keys and freshness are
//! `tern-server`'s `tests/config_reference.rs`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

#[test]
fn links_resolve_and_pages_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(&root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    pages.extend(docs.iter().cloned());

    let text: BTreeMap<PathBuf, String> =
        pages.iter().map(|p| (p.clone(), std::fs::read_to_string(root.join(p)).unwrap())).collect();
    let mut problems = Vec::new();
    for (page, body) in &text {
        for (line, target) in links(body) {
            if let Err(why) = resolve(&root, page, &target) {
                problems.push(format!("{}:{line}: ({target}) {why}", page.display()));
            }
        }
    }

    let index = &text[Path::new("docs/README.md")];
    let linked: Vec<String> = links(index).into_iter().map(|(_, t)| t).collect();
    for page in docs.iter().filter(|p| p.file_name().unwrap() != "README.md") {
        let name = page.file_name().unwrap().to_str().unwrap();
        if !linked.iter().any(|t| t.split('#').next() == Some(name)) {
            problems.push(format!("docs/README.md: {name} is not in the index"));
        }
    }

    for (page, most) in [("README.md", 200), ("ARCHITECTURE.md", 250)] {
        let lines = text[Path::new(page)].lines().count();
        if lines >= most {
            problems.push(format!("{page} has {lines} lines: keep it under {most} (the rest belongs in docs/)"));
        }
    }
    assert!(problems.is_empty(), "the documentation:\n{}", problems.join("\n"));
}

/// Whether a link `target` written in `page` names an existing file (and
/// heading).
fn resolve(root: &Path, page: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() { page.to_path_buf() } else { normalise(&page.parent().unwrap().join(path)) };
    if file.starts_with("..") {
        // Out of the repository: checked where the place it leads to exists.
        let ups = file.components().take_while(|c| *c == Component::ParentDir).count();
        let place: PathBuf = file.components().take(ups + 1).collect();
        if root.join(&place).exists() && !root.join(&file).exists() {
            return Err("leads out of the repository to nothing".into());
        }
        return Ok(());
    }
    let full = root.join(&file);
    if !full.exists() {
        return Err("no such file".into());
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if full.extension().is_none_or(|e| e != "md") {
        return Err("an anchor into a file that is not Markdown".into());
    }
    let slugs = headings(&std::fs::read_to_string(&full).unwrap());
    if !slugs.iter().any(|s| s == anchor) {
        return Err(format!("no heading #{anchor} in {}", file.display()));
    }
    Ok(())
}

/// `a/./b/../c` as `a/c`; leading `..` kept.
fn normalise(path: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if out.last().is_some_and(|l| *l != Component::ParentDir) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.iter().collect()
}

/// The relative links of a Markdown text, with their line numbers: every
/// `[text](target)` outside code blocks and code spans (which may run on
/// to the next line of their paragraph), except URLs with a scheme.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let (mut fenced, mut code) = (false, false);
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        code &= !line.trim().is_empty();
        if fenced {
            continue;
        }
        let mut prose = String::new();
        for c in line.chars() {
            match c {
                '`' => code = !code,
                c if !code => prose.push(c),
                _ => {}
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            if !target.contains("://") && !target.starts_with("mailto:") {
                out.push((i + 1, target.to_string()));
            }
            rest = &after[end..];
        }
    }
    out
}

/// The anchors of a Markdown text's headings, as GitHub makes them: the
/// heading's text (link targets, code ticks and emphasis dropped),
/// lowercased, with everything but letters, digits, `-`, `_` and spaces
/// removed and spaces made `-`; a repeated slug gets `-1`, `-2`, ….
fn headings(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !fenced).map(|t| t.trim_start_matches('#')) else {
            continue;
        };
        if !title.starts_with(' ') {
            continue;
        }
        let slug = slug(title.trim());
        let repeats = out.iter().filter(|s| **s == slug || s.strip_prefix(&slug).is_some_and(is_repeat)).count();
        out.push(if repeats == 0 { slug } else { format!("{slug}-{repeats}") });
    }
    out
}

fn is_repeat(suffix: &str) -> bool {
    suffix.strip_prefix('-').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn slug(title: &str) -> String {
    let mut text = String::new();
    let mut rest = title;
    // A link keeps its text, loses its target.
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        rest = rest[at + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The checker itself: slugs as GitHub makes them, links found where
/// they are and nowhere else.
#[test]
fn the_checker_reads_markdown_as_github_does() {
    assert_eq!(slug("Checking a configuration: `--check`"), "checking-a-configuration---check");
    assert_eq!(
        slug("`static.io = \"auto\"` (the default): measured on this host"),
        "staticio--auto-the-default-measured-on-this-host"
    );
    assert_eq!(slug("`[fastcgi.backends.NAME]`"), "fastcgibackendsname");
    assert_eq!(slug("See [the lab](lab.md) — E1–E5"), "see-the-lab--e1e5");
    let text = "# A\n\n## A\n\n```sh\n# not a heading [x](nowhere.md)\n```\n\n### A\n\nsee [b](b.md#a-1), `[c](c.md)`, [web](https://example.com), `a\n[d](d.md)` [e](e.md)\n";
    assert_eq!(headings(text), ["a", "a-1", "a-2"]);
    assert_eq!(links(text), [(11, "b.md#a-1".to_string()), (12, "e.md".to_string())]);
    assert_eq!(normalise(Path::new("docs/../bench/./RESULTS.md")), Path::new("bench/RESULTS.md"));
    assert_eq!(normalise(Path::new("../shared/SPEC.md")), Path::new("../shared/SPEC.md"));
}
