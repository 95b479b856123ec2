//! Which location of a site answers a path, by nginx's rules:
//!
//! 1. an exact location whose path is the request's ends the search;
//! 2. else the longest prefix location the path starts with is noted
//!    (textually: `/img` covers `/images`); if it skips regexes (nginx's
//!    `^~`), it answers;
//! 3. else the regex locations, in the order written: the first that
//!    matches answers;
//! 4. else the prefix noted in 2, if any; else the site itself.
//!
//! Paths are the normalised, decoded ones (`tern_http::path`): relative,
//! with the request's trailing slash as a flag. Exact and prefix lookups
//! compare bytes in place; only a site with regex locations writes the
//! path out (into the worker's scratch buffer) to match them.

use std::collections::HashMap;

use regex::bytes::Regex;

use super::trace::Trace;

/// How a location names the paths it answers.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// `exact = "/favicon.ico"`.
    Exact(String),
    /// `prefix = "/static/"`; `skip_regex` when it answers as the longest
    /// prefix even if a regex location matches too.
    Prefix { prefix: String, skip_regex: bool },
    /// `regex = '\.php$'`, matched against the `/`-rooted decoded path.
    Regex(Regex),
}

impl Pattern {
    /// As written in the configuration, for notes and errors.
    pub fn describe(&self) -> String {
        match self {
            Pattern::Exact(p) => format!("exact `{p}`"),
            Pattern::Prefix { prefix, skip_regex: false } => format!("prefix `{prefix}`"),
            Pattern::Prefix { prefix, skip_regex: true } => format!("prefix `{prefix}` (skips regexes)"),
            Pattern::Regex(r) => format!("regex `{}`", r.as_str()),
        }
    }
}

/// A site's locations, indexed for lookup.
#[derive(Debug, Default)]
pub struct Locations {
    /// Exact paths (without their leading `/` and trailing slash) to the
    /// location numbers of the path without and with its slash.
    exact: HashMap<Box<[u8]>, [Option<usize>; 2]>,
    /// Prefixes (without their leading `/`), longest first.
    prefixes: Vec<(Box<[u8]>, usize, bool)>,
    /// In the order written.
    regexes: Vec<(Regex, usize)>,
    /// What each location was written as.
    described: Vec<String>,
}

impl Locations {
    /// Indexes `patterns` (location `i` is `patterns[i]`). A location no
    /// request can reach is an error: its number (from 0), for the caller
    /// to name its line, and why — a path written twice, a path that is
    /// not in normal form (`//`, `.`, `..`, no leading `/`: no normalised
    /// request path has them), or a place behind a regex that matches any
    /// path.
    pub fn new(patterns: &[Pattern]) -> Result<Locations, (usize, String)> {
        let mut locs = Locations { described: patterns.iter().map(Pattern::describe).collect(), ..Default::default() };
        let mut catch_all: Option<usize> = None;
        for (i, pattern) in patterns.iter().enumerate() {
            match pattern {
                Pattern::Exact(path) => {
                    let rel = relative(path).map_err(|why| locs.never(i, why))?;
                    let (key, dir) = match rel.strip_suffix(b"/") {
                        Some(key) => (key, 1),
                        None => (rel, 0),
                    };
                    if let Some(first) = locs.exact.entry(key.into()).or_default()[dir].replace(i) {
                        return Err(locs.twice(first, i));
                    }
                }
                Pattern::Prefix { prefix, skip_regex } => {
                    let rel = relative(prefix).map_err(|why| locs.never(i, why))?;
                    if let Some(&(_, first, _)) = locs.prefixes.iter().find(|(p, _, _)| **p == *rel) {
                        return Err(locs.twice(first, i));
                    }
                    locs.prefixes.push((rel.into(), i, *skip_regex));
                }
                Pattern::Regex(re) => {
                    if let Some(by) = catch_all {
                        return Err(locs.never(i, locs.reason_after(by)));
                    }
                    if let Some(&(_, first)) = locs.regexes.iter().find(|(r, _)| r.as_str() == re.as_str()) {
                        return Err(locs.twice(first, i));
                    }
                    if matches_every_path(re) {
                        catch_all = Some(i);
                    }
                    locs.regexes.push((re.clone(), i));
                }
            }
        }
        if let Some(by) = catch_all {
            if let Some(&(_, i, _)) = locs.prefixes.iter().find(|(_, _, skip)| !skip) {
                return Err(locs.never(i, locs.reason_after(by)));
            }
        }
        // Longest first; a stable sort keeps equal lengths in file order.
        locs.prefixes.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.len()));
        Ok(locs)
    }

    /// Location `i` cannot be reached, `why`.
    fn never(&self, i: usize, why: String) -> (usize, String) {
        (i, format!("{} can never be reached: {why}", self.described[i]))
    }

    fn twice(&self, first: usize, again: usize) -> (usize, String) {
        self.never(again, format!("location {} has the same path", first + 1))
    }

    fn reason_after(&self, by: usize) -> String {
        format!("location {} ({}) matches every path first", by + 1, self.described[by])
    }

    /// The location answering the normalised path `rel` (with the request's
    /// trailing slash, `slash`); `None`: the site itself answers. `scratch`
    /// holds the `/`-rooted path while regexes are tried.
    pub fn find(&self, rel: &[u8], slash: bool, scratch: &mut Vec<u8>, trace: &mut impl Trace) -> Option<usize> {
        // The path as a location sees it: `rel`, plus `/` for a directory
        // below the root.
        let slash = slash && !rel.is_empty();
        if let Some(i) = self.exact.get(rel).and_then(|slots| slots[usize::from(slash)]) {
            trace.note(|| format!("location {} ({}) is the exact path: it answers", i + 1, self.described[i]));
            return Some(i);
        }
        let prefix = self.prefixes.iter().find(|(p, _, _)| starts_with(rel, slash, p));
        match prefix {
            Some(&(_, i, skip)) if skip || self.regexes.is_empty() => {
                let why = if skip { "and skips regexes" } else { "(no regex location)" };
                trace.note(|| {
                    format!("location {} ({}) is the longest prefix {why}: it answers", i + 1, self.described[i])
                });
                return Some(i);
            }
            Some(&(_, i, _)) => {
                trace.note(|| {
                    format!("location {} ({}) is the longest prefix; regexes come first", i + 1, self.described[i])
                });
            }
            None if !self.prefixes.is_empty() => trace.note(|| "no prefix location matches".to_string()),
            None => {}
        }
        if !self.regexes.is_empty() {
            scratch.clear();
            scratch.push(b'/');
            scratch.extend_from_slice(rel);
            if slash {
                scratch.push(b'/');
            }
            for (re, i) in &self.regexes {
                if re.is_match(scratch) {
                    trace.note(|| format!("location {} ({}) matches: it answers", i + 1, self.described[*i]));
                    return Some(*i);
                }
                trace.note(|| format!("location {} ({}) does not match", i + 1, self.described[*i]));
            }
        }
        match prefix {
            Some(&(_, i, _)) => {
                trace.note(|| format!("location {} ({}) answers, as the longest prefix", i + 1, self.described[i]));
                Some(i)
            }
            None => {
                trace.note(|| "no location matches: the site's own settings answer".to_string());
                None
            }
        }
    }
}

/// Does `rel` (plus `/` when `slash`) start with `prefix`?
fn starts_with(rel: &[u8], slash: bool, prefix: &[u8]) -> bool {
    if prefix.len() <= rel.len() {
        rel.starts_with(prefix)
    } else {
        slash && prefix.len() == rel.len() + 1 && prefix.starts_with(rel) && prefix.ends_with(b"/")
    }
}

/// A configured path without its leading `/`, if it is in the normal form
/// request paths are compared in; else why no request path is ever it.
fn relative(path: &str) -> Result<&[u8], String> {
    let mut normal = Vec::new();
    let form = tern_http::path::normalize(path, &mut normal);
    let dir = path.len() > 1 && path.ends_with('/');
    let rel = &path.as_bytes()[1.min(path.len())..];
    let same = form.is_ok() && (if dir { &rel[..rel.len() - 1] } else { rel }) == normal.as_slice();
    if !same || path.contains("/./") || path.ends_with("/.") {
        return Err(
            "a request path is compared decoded and normalised (a leading `/`, no `//`, `.` or `..` segments)".into()
        );
    }
    Ok(rel)
}

/// Does `re` match every path? Every path starts with `/`; a regex that
/// matches at the start of `/` alone, with no assertion that looks past
/// what it consumed (end anchors, word boundaries), matches there in any
/// path.
fn matches_every_path(re: &Regex) -> bool {
    let text = re.as_str();
    re.find(b"/").is_some_and(|m| m.start() == 0) && !["$", "\\z", "\\b", "\\B", "\\Z"].iter().any(|a| text.contains(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(p: &str) -> Pattern {
        Pattern::Prefix { prefix: p.into(), skip_regex: false }
    }

    fn regex(r: &str) -> Pattern {
        Pattern::Regex(Regex::new(r).unwrap())
    }

    fn site() -> Locations {
        Locations::new(&[
            Pattern::Exact("/".into()),
            prefix("/"),
            prefix("/img"),
            Pattern::Prefix { prefix: "/static/".into(), skip_regex: true },
            regex(r"\.(png|jpg)$"),
            regex(r"^/api/"),
            prefix("/api/v1/"),
            Pattern::Exact("/docs/".into()),
        ])
        .unwrap()
    }

    /// `path` as a request sends it.
    fn find(locs: &Locations, path: &str) -> Option<usize> {
        let mut rel = Vec::new();
        let norm = tern_http::path::normalize(path, &mut rel).unwrap();
        locs.find(&rel, norm.trailing_slash, &mut Vec::new(), &mut ()).map(|i| i + 1)
    }

    #[test]
    fn exact_then_skipping_prefix_then_regex_then_longest_prefix() {
        let locs = site();
        assert_eq!(find(&locs, "/"), Some(1));
        assert_eq!(find(&locs, "/index.html"), Some(2));
        assert_eq!(find(&locs, "/img/a.gif"), Some(3));
        assert_eq!(find(&locs, "/imgs/a.gif"), Some(3), "prefixes are textual");
        assert_eq!(find(&locs, "/img/a.png"), Some(5), "a regex beats a prefix");
        assert_eq!(find(&locs, "/static/a.png"), Some(4), "unless the prefix skips regexes");
        assert_eq!(find(&locs, "/api/v1/x"), Some(6), "regexes in order, before the longest prefix");
        assert_eq!(find(&locs, "/docs/"), Some(8));
        assert_eq!(find(&locs, "/docs"), Some(2), "an exact path with a slash needs the slash");
        assert_eq!(find(&locs, "/static"), Some(2), "`/static` is not under `/static/`");
        assert_eq!(find(&locs, "/static/"), Some(4), "a directory path matches its own prefix");
        assert_eq!(find(&locs, "/%69mg/x"), Some(3), "paths are compared decoded");
        assert_eq!(find(&locs, "/x/../img/y"), Some(3), "and normalised");
    }

    #[test]
    fn a_site_without_a_root_prefix_answers_itself() {
        let locs = Locations::new(&[prefix("/a/")]).unwrap();
        assert_eq!(find(&locs, "/b"), None);
        assert_eq!(Locations::default().find(b"", true, &mut Vec::new(), &mut ()), None);
    }

    #[test]
    fn unreachable_locations_are_refused() {
        let err = |p: &[Pattern]| Locations::new(p).unwrap_err();
        let same = |i, d: &str| (i, format!("{d} can never be reached: location 1 has the same path"));
        assert_eq!(err(&[prefix("/a"), prefix("/a")]), same(1, "prefix `/a`"));
        assert_eq!(err(&[Pattern::Exact("/a".into()), Pattern::Exact("/a".into())]), same(1, "exact `/a`"));
        assert_eq!(err(&[regex("x"), regex("x")]), same(1, "regex `x`"));
        assert_eq!(
            err(&[regex(".*"), regex("x")]),
            (1, "regex `x` can never be reached: location 1 (regex `.*`) matches every path first".into())
        );
        assert_eq!(
            err(&[prefix("/a/"), regex("^/")]),
            (0, "prefix `/a/` can never be reached: location 2 (regex `^/`) matches every path first".into())
        );
        for bad in ["a", "//a", "/a//b", "/a/./b", "/a/../b", "/a/."] {
            let (i, e) = err(&[prefix("/ok"), prefix(bad)]);
            assert_eq!(i, 1);
            assert!(e.starts_with(&format!("prefix `{bad}` can never be reached: a request path is")), "{bad}: {e}");
        }
        // A prefix that skips regexes stays reachable behind a catch-all.
        Locations::new(&[regex("^/"), Pattern::Prefix { prefix: "/a/".into(), skip_regex: true }]).unwrap();
        // Anchored at the end, a regex matching "" does not match every path.
        Locations::new(&[regex("^$"), regex("x")]).unwrap();
    }

    #[test]
    fn a_trace_names_every_rule_looked_at() {
        let locs = site();
        let mut notes = Vec::new();
        let mut rel = Vec::new();
        tern_http::path::normalize("/img/a.gif", &mut rel).unwrap();
        locs.find(&rel, false, &mut Vec::new(), &mut notes);
        assert_eq!(
            notes,
            [
                "location 3 (prefix `/img`) is the longest prefix; regexes come first",
                r"location 5 (regex `\.(png|jpg)$`) does not match",
                "location 6 (regex `^/api/`) does not match",
                "location 3 (prefix `/img`) answers, as the longest prefix",
            ]
        );
    }
}
