//! The configuration reference, `docs/configuration.md`, is generated from
//! the doc comments of the structs a `Config` is made of: one source of
//! truth, next to the code that reads each key.
//!
//! How: the sources under `src/` are parsed with `syn` (a dev-dependency,
//! so the product code stays plain: no schema derive, nothing at run
//! time). From `Config`, each field is followed to its type among the
//! crate's types that deserialize (derived, or by hand: the value types),
//! honouring `#[serde(rename)]`, `rename_all`, `skip` and `default`. A
//! struct is a table, a map of structs a table per name
//! (`[fastcgi.backends.NAME]`), a list of structs an array of tables
//! (`[[tls.certificates]]`); an enum lists its accepted values; a type with
//! a hand-written `Deserialize` is a value type, described once at the end.
//!
//! Every key's doc comment states its default ("Default …") unless the key
//! is required. A default written as TOML (in backticks, or a bare number
//! or boolean) is shown as the key's value in the listing at the top, and
//! is parsed back through `Config::parse`: it must give the real default.
//!
//! The test fails when a key has no documentation or states no default,
//! when a stated default is not the real one, or when
//! `docs/configuration.md` is not what this generates;
//! `TERN_BLESS=1 cargo test -p tern-server --test config_reference`
//! rewrites it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use tern_server::Config;

#[test]
fn the_reference_is_generated_from_the_doc_comments() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let types = read_types(&root.join("src"));
    let mut reference = Reference { types: &types, problems: Vec::new(), tables: Vec::new(), values: Vec::new() };
    reference.table(&[], &types["Config"], Shape::Table, "");
    assert!(reference.problems.is_empty(), "the configuration's doc comments:\n{}", reference.problems.join("\n"));
    let text = reference.render();

    let path = root.join("../../docs/configuration.md");
    if std::env::var_os("TERN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == text,
        "docs/configuration.md is stale (or was edited by hand): it is generated from the configuration's doc \
         comments; run TERN_BLESS=1 cargo test -p tern-server --test config_reference"
    );
}

/// A type of the crate that deserializes.
struct Type {
    doc: String,
    kind: Kind,
}

enum Kind {
    /// Named fields, derived `Deserialize`; `defaults`: `#[serde(default)]`
    /// on the struct.
    Struct { fields: Vec<Field>, defaults: bool },
    /// Unit variants, derived: `(accepted value, doc)`.
    Enum(Vec<(String, String)>),
    /// A hand-written `Deserialize`: described by its doc comment.
    Value,
}

struct Field {
    key: String,
    doc: String,
    ty: syn::Type,
    skip: bool,
    /// `#[serde(default)]` or `#[serde(default = "…")]` on the field.
    default: bool,
}

/// Every type under `src/` that deserializes, by name (names are unique
/// among them; a clash is an error). A hand-written `Deserialize` is
/// looked for in the file of its type.
fn read_types(src: &Path) -> BTreeMap<String, Type> {
    let mut types = BTreeMap::new();
    for file in rust_files(src) {
        let ast = syn::parse_file(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let (mut found, mut by_hand) = (Vec::new(), Vec::new());
        collect(&ast.items, &mut found, &mut by_hand);
        for (name, doc, kind) in found {
            let kind = match kind {
                _ if by_hand.contains(&name) => Kind::Value,
                Some(kind) => kind,
                None => continue,
            };
            assert!(types.insert(name.clone(), Type { doc, kind }).is_none(), "two configuration types named {name}");
        }
    }
    types
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Every struct and enum: its name, its doc and, if it derives
/// `Deserialize`, its shape; and the names with a hand-written one.
fn collect(items: &[syn::Item], found: &mut Vec<(String, String, Option<Kind>)>, by_hand: &mut Vec<String>) {
    for item in items {
        match item {
            syn::Item::Struct(s) => {
                let kind = derives_deserialize(&s.attrs).then(|| match &s.fields {
                    syn::Fields::Named(named) => {
                        let rename_all = serde_value(&s.attrs, "rename_all");
                        let fields = named.named.iter().map(|f| field(f, rename_all.as_deref())).collect();
                        Kind::Struct { fields, defaults: serde_flag(&s.attrs, "default") }
                    }
                    _ => Kind::Value,
                });
                found.push((s.ident.to_string(), doc(&s.attrs), kind));
            }
            syn::Item::Enum(e) => {
                let rename_all = serde_value(&e.attrs, "rename_all");
                let variants = e
                    .variants
                    .iter()
                    .map(|v| {
                        let name = serde_value(&v.attrs, "rename")
                            .unwrap_or_else(|| renamed(&v.ident.to_string(), rename_all.as_deref()));
                        (name, doc(&v.attrs))
                    })
                    .collect();
                let kind = derives_deserialize(&e.attrs).then_some(Kind::Enum(variants));
                found.push((e.ident.to_string(), doc(&e.attrs), kind));
            }
            syn::Item::Impl(i) if is_deserialize_impl(i) => {
                if let syn::Type::Path(p) = &*i.self_ty {
                    by_hand.push(p.path.segments.last().unwrap().ident.to_string());
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    collect(items, found, by_hand);
                }
            }
            _ => {}
        }
    }
}

fn field(f: &syn::Field, rename_all: Option<&str>) -> Field {
    let name = f.ident.as_ref().unwrap().to_string();
    Field {
        key: serde_value(&f.attrs, "rename").unwrap_or_else(|| renamed(&name, rename_all)),
        doc: doc(&f.attrs),
        ty: f.ty.clone(),
        skip: serde_flag(&f.attrs, "skip"),
        default: serde_flag(&f.attrs, "default") || serde_value(&f.attrs, "default").is_some(),
    }
}

fn is_deserialize_impl(i: &syn::ItemImpl) -> bool {
    i.trait_.as_ref().is_some_and(|(_, path, _)| path.segments.last().is_some_and(|s| s.ident == "Deserialize"))
}

fn derives_deserialize(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().filter(|a| a.path().is_ident("derive")).any(|a| {
        let mut found = false;
        let _ = a.parse_nested_meta(|m| {
            found |= m.path.segments.last().is_some_and(|s| s.ident == "Deserialize");
            Ok(())
        });
        found
    })
}

/// `#[serde(name = "value")]`.
fn serde_value(attrs: &[syn::Attribute], name: &str) -> Option<String> {
    let mut value = None;
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            if m.path.is_ident(name) {
                if let Ok(v) = m.value() {
                    value = Some(v.parse::<syn::LitStr>()?.value());
                }
            } else if m.input.peek(syn::Token![=]) {
                m.value()?.parse::<syn::Expr>()?;
            }
            Ok(())
        });
    }
    value
}

/// `#[serde(name)]`, without a value.
fn serde_flag(attrs: &[syn::Attribute], name: &str) -> bool {
    let mut found = false;
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            if m.input.peek(syn::Token![=]) {
                m.value()?.parse::<syn::Expr>()?;
            } else {
                found |= m.path.is_ident(name);
            }
            Ok(())
        });
    }
    found
}

/// A Rust name as serde spells it under `rename_all`.
fn renamed(name: &str, rename_all: Option<&str>) -> String {
    let words = || {
        let mut words: Vec<String> = Vec::new();
        for c in name.chars() {
            if c.is_uppercase() || words.is_empty() {
                words.push(String::new());
            }
            words.last_mut().unwrap().extend(c.to_lowercase());
        }
        words
    };
    match rename_all {
        None => name.to_string(),
        Some("lowercase") => name.to_lowercase(),
        Some("kebab-case") => words().join("-"),
        Some("snake_case") => words().join("_"),
        Some(other) => panic!("rename_all = {other:?} is not known to the reference generator"),
    }
}

/// The doc comment, one string per line (rustdoc's leading space removed).
fn doc(attrs: &[syn::Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|l| l.strip_prefix(' ').unwrap_or(&l).to_string())
        .collect();
    lines.join("\n")
}

/// How a struct appears in the file.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// `[a.b]`, or the top level.
    Table,
    /// `[a.b.NAME]`, one per name, none by default.
    PerName,
    /// `[[a.b]]`, an entry per table, none by default.
    Entries,
}

/// One table as rendered: its header, its doc and its keys.
struct Table {
    path: Vec<String>,
    shape: Shape,
    doc: String,
    keys: Vec<Key>,
}

struct Key {
    key: String,
    doc: String,
    /// How the type reads: `integer`, ``list of [`Bytes`](#bytes)``, …
    ty: String,
    /// Accepted values of an enum: `(value, doc)`.
    values: Vec<(String, String)>,
    default: Stated,
}

enum Stated {
    /// Written as TOML: shown as the key's value.
    Toml(String),
    /// Said in words (`none`, `server.root`).
    Words(String),
    Required,
}

struct Reference<'a> {
    types: &'a BTreeMap<String, Type>,
    problems: Vec<String>,
    tables: Vec<Table>,
    /// The value types met, in order.
    values: Vec<String>,
}

impl Reference<'_> {
    /// Renders struct `t` as the table at `path`; `field_doc`: the doc of
    /// the field that holds it, said after the struct's own.
    fn table(&mut self, path: &[String], t: &Type, shape: Shape, field_doc: &str) {
        let at = self.header(path, &t.doc, shape, field_doc);
        self.keys(at, path, t, shape);
    }

    /// Starts the table at `path`; returns its number.
    fn header(&mut self, path: &[String], doc: &str, shape: Shape, field_doc: &str) -> usize {
        let doc = [doc.trim(), field_doc.trim()].into_iter().filter(|d| !d.is_empty()).collect::<Vec<_>>();
        self.tables.push(Table { path: path.to_vec(), shape, doc: doc.join("\n\n"), keys: Vec::new() });
        self.tables.len() - 1
    }

    /// `[[site]]` and `[[site.location]]`: their tables are read apart, key
    /// by key, into several structs (`config/sites.rs`), so they are shown
    /// as the union of those structs' keys.
    fn sites(&mut self, path: &[String], field_doc: &str) {
        let t = &self.types["SiteTable"];
        let mut doc = format!("{}\n\n{field_doc}\n\nThe keys a site may set in its sections:\n", t.doc);
        for (section, keys) in [
            ("static", tern_server::static_io::StaticFiles::SITE_KEYS),
            ("compression", tern_server::compress::config::Compression::SITE_KEYS),
            ("cgi", tern_server::site::cgi::config::Cgi::SITE_KEYS),
            ("fastcgi", tern_server::site::fastcgi::config::FastCgi::SITE_KEYS),
            ("log", tern_server::access_log::Log::SITE_KEYS),
            ("tls", tern_server::tls::Tls::SITE_KEYS),
        ] {
            let keys = keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
            let _ = write!(doc, "\n- `[site.{section}]`: {keys}");
        }
        let at = self.header(path, &doc, Shape::Entries, "");
        self.keys(at, path, &self.types["SiteKeys"], Shape::Entries);
        self.keys(at, path, &self.types["LocationSettings"], Shape::Entries);
        let mut location = path.to_vec();
        location.push("location".into());
        let at = self.header(&location, &self.types["Match"].doc, Shape::Entries, "");
        self.keys(at, &location, &self.types["Match"], Shape::Entries);
        self.keys(at, &location, &self.types["LocationSettings"], Shape::Entries);
    }

    /// Adds the keys of struct `t` to table `at`.
    fn keys(&mut self, at: usize, path: &[String], t: &Type, shape: Shape) {
        let Kind::Struct { fields, defaults } = &t.kind else { panic!("{path:?} is not a struct") };
        for f in fields.iter().filter(|f| !f.skip) {
            let mut sub = path.to_vec();
            // A table inside a per-name table is the name's.
            if shape == Shape::PerName {
                sub.push(PER_NAME.into());
            }
            sub.push(f.key.clone());
            if split(&f.ty).1.first().is_some_and(|t| split(t).0 == "SiteTable") {
                self.sites(&sub, &f.doc);
                continue;
            }
            if let Some((s, shape)) = self.nested(&f.ty) {
                let s = &self.types[&s];
                self.table(&sub, s, shape, &f.doc);
                continue;
            }
            let name = sub.join(".");
            if f.doc.trim().is_empty() {
                self.problems.push(format!("{name}: no doc comment"));
                continue;
            }
            let (ty, values) = self.describe(&f.ty);
            let default = if !defaults && !f.default {
                Stated::Required
            } else {
                match stated_default(&f.doc) {
                    Some(d) => d,
                    None => {
                        self.problems.push(format!("{name}: the doc comment states no default (\"Default …\")"));
                        continue;
                    }
                }
            };
            // A site's keys cannot be set alone: their defaults are the
            // top-level values they inherit, said in words; nor can those
            // of a table inside a per-name one.
            if let (Stated::Toml(value), Shape::Table, false) = (&default, shape, optional(path)) {
                self.check_default(path, &f.key, value);
            }
            self.tables[at].keys.push(Key { key: f.key.clone(), doc: f.doc.clone(), ty, values, default });
        }
    }

    /// A field that is a table of its own: a struct, a map of structs or a
    /// list of structs.
    fn nested(&self, ty: &syn::Type) -> Option<(String, Shape)> {
        let (name, args) = split(ty);
        let is_struct = |n: &str| matches!(self.types.get(n), Some(Type { kind: Kind::Struct { .. }, .. }));
        match (name.as_str(), args.as_slice()) {
            (n, []) if is_struct(n) => Some((n.to_string(), Shape::Table)),
            ("Option", [v]) if is_struct(&split(v).0) => Some((split(v).0, Shape::Table)),
            ("BTreeMap", [_, v]) if is_struct(&split(v).0) => Some((split(v).0, Shape::PerName)),
            ("Vec", [v]) if is_struct(&split(v).0) => Some((split(v).0, Shape::Entries)),
            _ => None,
        }
    }

    /// The type as the reference says it, and an enum's accepted values.
    fn describe(&mut self, ty: &syn::Type) -> (String, Vec<(String, String)>) {
        let (name, args) = split(ty);
        let plain = |s: &str| (s.to_string(), Vec::new());
        match (name.as_str(), args.as_slice()) {
            ("usize" | "u16" | "u32" | "u64" | "i32", []) => plain("integer"),
            ("bool", []) => plain("boolean"),
            ("String", []) => plain("string"),
            ("PathBuf", []) => plain("path (string)"),
            ("Option", [t]) => self.describe(t),
            ("Vec", [t]) => {
                let (inner, values) = self.describe(t);
                (format!("list of {inner}"), values)
            }
            ("BTreeMap", [_, v]) => {
                let (inner, values) = self.describe(v);
                (format!("table of {inner}"), values)
            }
            (n, []) => match self.types.get(n).map(|t| &t.kind) {
                Some(Kind::Enum(variants)) => {
                    let list = variants.iter().map(|(v, _)| format!("`\"{v}\"`")).collect::<Vec<_>>().join(" \\| ");
                    (format!("string: {list}"), variants.clone())
                }
                Some(Kind::Value) => {
                    if !self.values.iter().any(|v| v == n) {
                        self.values.push(n.to_string());
                    }
                    (format!("[`{n}`](#{})", n.to_lowercase()), Vec::new())
                }
                _ => panic!("{n}: a type the reference generator does not know"),
            },
            _ => panic!("{name}: a type the reference generator does not know"),
        }
    }

    /// A default stated as TOML must be the real one: the key set to it
    /// parses to the configuration that leaving it out gives.
    fn check_default(&mut self, path: &[String], key: &str, value: &str) {
        let parse = |text: &str| {
            Config::parse(text, Path::new("/etc/tern/tern.toml")).map(|mut c| {
                c.origin = Default::default();
                format!("{c:?}")
            })
        };
        let header = if path.is_empty() { String::new() } else { format!("[{}]\n", path.join(".")) };
        let stated = parse(&format!("{header}{key} = {value}\n"));
        if stated.as_ref().ok() != parse("").as_ref().ok() {
            let name = path.iter().chain([&key.to_string()]).cloned().collect::<Vec<_>>().join(".");
            let why = stated.err().map_or("it is not the default".into(), |e| e.to_string());
            self.problems.push(format!("{name}: the doc comment says Default `{value}`, but {why}"));
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# Configuration reference\n\n\
             <!-- Generated from the doc comments of the configuration's structs by \
             `TERN_BLESS=1 cargo test -p tern-server --test config_reference`; edit those, not this file. -->\n\n\
             One TOML file (`tern serve --config FILE`); every key is optional unless marked required, and is \
             shown here with its default. An error names the file, the key and the line; unknown keys are \
             errors.\n\n## Every key with its default\n\n```toml\n",
        );
        for t in &self.tables[1..] {
            self.listing(&mut out, t);
        }
        out.push_str("```\n");
        for t in &self.tables[1..] {
            self.section(&mut out, t);
        }
        out.push_str("\n## Value types\n");
        for name in &self.values {
            let _ = write!(out, "\n### `{name}`\n\n{}\n", prose(&self.types[name].doc));
        }
        out
    }

    /// The table in the annotated listing.
    fn listing(&self, out: &mut String, t: &Table) {
        let off = if t.shape == Shape::Table && !optional(&t.path) { "" } else { "# " };
        let header = match t.shape {
            Shape::Table => format!("[{}]", t.path.join(".")),
            Shape::PerName => format!("[{}.NAME]", t.path.join(".")),
            Shape::Entries => format!("[[{}]]", t.path.join(".")),
        };
        if !out.ends_with("```toml\n") {
            out.push('\n');
        }
        let named = regex::Regex::new(r"^`\[\[?[^`]*\]\]?`[:.]?\s*").unwrap();
        let _ = writeln!(out, "{off}{}", pad(&header, &first_sentence(&named.replace(&t.doc, ""))));
        for k in &t.keys {
            let (line, note) = match &k.default {
                Stated::Toml(v) => (format!("{off}{} = {v}", k.key), first_sentence(&k.doc)),
                Stated::Words(w) => (format!("# {} =", k.key), format!("{} (default: {w})", first_sentence(&k.doc))),
                Stated::Required => (format!("# {} =", k.key), format!("required: {}", first_sentence(&k.doc))),
            };
            let _ = writeln!(out, "{}", pad(&line, &note));
        }
    }

    /// The table's section: its doc, then each key.
    fn section(&self, out: &mut String, t: &Table) {
        let name = t.path.join(".");
        let (header, prefix) = match t.shape {
            Shape::Table => (format!("[{name}]"), name.clone()),
            Shape::PerName => (format!("[{name}.NAME]"), format!("{name}.NAME")),
            Shape::Entries => (format!("[[{name}]]"), name.clone()),
        };
        let _ = write!(out, "\n## `{header}`\n\n{}\n", prose(&t.doc));
        for k in &t.keys {
            let default = match &k.default {
                Stated::Toml(v) => format!("`{v}`"),
                Stated::Words(w) => w.clone(),
                Stated::Required => "none: required".to_string(),
            };
            let _ = write!(out, "\n### `{prefix}.{}`\n\n{} · default {default}\n\n{}\n", k.key, k.ty, prose(&k.doc));
            // The values are in the type already; listed again for their docs.
            let documented = k.values.iter().any(|(_, doc)| !doc.is_empty());
            for (value, doc) in k.values.iter().filter(|_| documented) {
                let doc = prose(doc).replace('\n', " ");
                let _ =
                    writeln!(out, "- `\"{value}\"`{}", if doc.is_empty() { String::new() } else { format!(": {doc}") });
            }
        }
    }
}

/// The path segment standing for a per-name table's names.
const PER_NAME: &str = "NAME";

/// Whether the table at `path` exists only where the file writes it: a
/// site's, or one inside a per-name table.
fn optional(path: &[String]) -> bool {
    path.first().is_some_and(|p| p == "site") || path.iter().any(|p| p == PER_NAME)
}

/// A type's last path segment and its generic arguments.
fn split(ty: &syn::Type) -> (String, Vec<syn::Type>) {
    let syn::Type::Path(p) = ty else { panic!("a configuration field of an unexpected kind of type") };
    let last = p.path.segments.last().unwrap();
    let args = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|a| match a {
                syn::GenericArgument::Type(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    (last.ident.to_string(), args)
}

/// The default a doc comment states: its last sentence that starts with
/// "Default". A value in backticks, or a bare number or boolean, that
/// parses as TOML is [`Stated::Toml`]; anything else is said in words.
fn stated_default(doc: &str) -> Option<Stated> {
    let text = doc.replace('\n', " ");
    let start = text
        .match_indices("Default")
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || text[..i].trim_end().ends_with(['.', ':', ')']))
        .last()?;
    let rest = text[start + "Default".len()..].trim_start_matches(':').trim_start();
    let value = match rest.strip_prefix('`') {
        Some(code) => code.split('`').next().unwrap_or_default().to_string(),
        None => rest.split(' ').next().unwrap_or_default().trim_end_matches(['.', ',', ';', ':']).to_string(),
    };
    let is_toml = toml::from_str::<toml::Table>(&format!("x = {value}")).is_ok();
    if is_toml && (rest.starts_with('`') || value.parse::<f64>().is_ok() || value == "true" || value == "false") {
        return Some(Stated::Toml(value));
    }
    let words = match rest.strip_prefix('`') {
        Some(_) => format!("`{value}`"),
        None => rest.split(". ").next().unwrap_or_default().trim_end_matches('.').to_string(),
    };
    Some(Stated::Words(words))
}

/// The doc comment as Markdown paragraphs: rustdoc's intra-doc links made
/// plain code.
fn prose(doc: &str) -> String {
    let links = regex::Regex::new(r"\[(`[^`]+`)\]").unwrap();
    links.replace_all(doc.trim(), "$1").into_owned()
}

/// The first sentence of a doc comment, on one line (a `.` inside
/// backticks does not end it).
fn first_sentence(doc: &str) -> String {
    let text = prose(doc).replace('\n', " ");
    let mut code = false;
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '`' => code = !code,
            '.' if !code && chars.get(i + 1).is_none_or(|n| *n == ' ') => {
                let sentence: String = chars[..i].iter().collect();
                // Not an abbreviation.
                if !sentence.ends_with("e.g") && !sentence.ends_with("i.e") {
                    return sentence;
                }
            }
            _ => {}
        }
    }
    text.trim_end_matches('.').to_string()
}

/// A listing line with its comment, aligned.
fn pad(line: &str, note: &str) -> String {
    if note.is_empty() {
        return line.to_string();
    }
    format!("{line:<30} # {note}")
}
