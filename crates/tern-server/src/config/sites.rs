//! Reading `[[site]]` tables: a site's own keys, its settings and its
//! locations, and its sections laid over the top-level ones.
//!
//! serde cannot split one table between two structs and still refuse
//! unknown keys, so the site tables are read from the document as parsed
//! with its spans (`toml::de::DeTable`): each table is split by key, and
//! every part is deserialised from the original text's values, so an error
//! names its line wherever the value came from. A section of a site is the
//! top-level table with the site's keys laid over it, then deserialised
//! whole: `[site.static] charset = "latin1"` changes that key only.

use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use crate::access_log::Log;
use crate::compress::config::Compression;
use crate::site::cgi::config::Cgi;
use crate::site::config::{LocationConfig, LocationSettings, Match, SiteConfig, SiteKeys, SiteSections};
use crate::site::fastcgi::config::FastCgi;
use crate::static_io::StaticFiles;
use crate::tls::Tls;

/// The sections a site may override, with the keys it may set in each:
/// the rest are the whole server's (one cache, one pool, one listener).
const SECTIONS: [(&str, &[&str]); 6] = [
    ("static", StaticFiles::SITE_KEYS),
    ("compression", Compression::SITE_KEYS),
    ("cgi", Cgi::SITE_KEYS),
    ("fastcgi", FastCgi::SITE_KEYS),
    ("log", Log::SITE_KEYS),
    ("tls", Tls::SITE_KEYS),
];

/// Every `[[site]]` of `text` (already checked to parse as a `Config`).
/// `Err`: the message, with its line.
pub fn read(text: &str) -> Result<Vec<SiteConfig>, String> {
    let doc = DeTable::parse(text).map_err(|e| e.to_string())?.into_inner();
    let Some(sites) = doc.get("site") else { return Ok(Vec::new()) };
    let DeValue::Array(sites) = sites.get_ref() else {
        return Err(at(text, sites.span(), "`site` is a list of tables: write each site as [[site]]"));
    };
    let wrong = |e: toml::de::Error| with_input(e, text);
    let lines = Lines::new(text);
    let mut out = Vec::with_capacity(sites.len());
    for site in sites {
        let table = as_table(text, site, "[[site]]")?;
        // `compression = false` is the site's switch, `[site.compression]`
        // its section: a table goes to the sections.
        let mut parts = Parts::split(table, &[fields_of::<SiteKeys>(), &["location"], &section_names()]);
        let switches = fields_of::<LocationSettings>();
        parts.give_back(2, |k, v| switches.contains(&k) && !matches!(v, DeValue::Table(_)));
        let keys: SiteKeys = deserialize(parts.take(0), site.span()).map_err(wrong)?;
        let settings: LocationSettings = deserialize(parts.rest, site.span()).map_err(wrong)?;
        let mut locations = Vec::new();
        if let Some(list) = parts.picked[1].get("location") {
            let DeValue::Array(list) = list.get_ref() else {
                return Err(at(text, list.span(), "`location` is a list of tables: write each as [[site.location]]"));
            };
            for loc in list {
                let table = as_table(text, loc, "[[site.location]]")?;
                let mut parts = Parts::split(table, &[fields_of::<Match>()]);
                let matching: Match = deserialize(parts.take(0), loc.span()).map_err(wrong)?;
                let settings: LocationSettings = deserialize(parts.rest, loc.span()).map_err(wrong)?;
                locations.push(LocationConfig { matching, settings, line: lines.of(loc.span()) });
            }
        }
        let sections = sections(text, &doc, &parts.picked[2])?;
        out.push(SiteConfig { keys, settings, locations, sections, line: lines.of(site.span()) });
    }
    Ok(out)
}

/// The site's sections: each top-level table with the site's keys over it.
fn sections(text: &str, doc: &DeTable<'_>, site: &DeTable<'_>) -> Result<SiteSections, String> {
    for (name, value) in site.iter() {
        let Some((_, allowed)) = SECTIONS.iter().find(|(s, _)| *s == name.get_ref().as_ref()) else { continue };
        let DeValue::Table(table) = value.get_ref() else {
            return Err(at(
                text,
                value.span(),
                &format!("`{}` is a table: write it as [site.{}]", name.get_ref(), name.get_ref()),
            ));
        };
        if let Some((key, _)) = table.iter().find(|(k, _)| !allowed.contains(&k.get_ref().as_ref())) {
            return Err(at(
                text,
                key.span(),
                &format!(
                    "`{}.{}` is the whole server's: set it in [{}], not in a site (a site may set {})",
                    name.get_ref(),
                    key.get_ref(),
                    name.get_ref(),
                    allowed.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    let wrong = |e: toml::de::Error| with_input(e, text);
    Ok(SiteSections {
        static_files: overlaid(doc, site, "static").map_err(wrong)?,
        compression: overlaid(doc, site, "compression").map_err(wrong)?,
        cgi: overlaid(doc, site, "cgi").map_err(wrong)?,
        fastcgi: overlaid(doc, site, "fastcgi").map_err(wrong)?,
        log: overlaid(doc, site, "log").map_err(wrong)?,
        certificates: {
            let own = DeTable::new();
            let tls: Tls = overlaid(&own, site, "tls").map_err(wrong)?;
            tls.certificates
        },
        own_backends: own_backends(site),
    })
}

/// The names in the site's `[site.fastcgi.backends]`.
fn own_backends(site: &DeTable<'_>) -> Vec<String> {
    let Some(DeValue::Table(fastcgi)) = site.get("fastcgi").map(Spanned::get_ref) else { return Vec::new() };
    let Some(DeValue::Table(backends)) = fastcgi.get("backends").map(Spanned::get_ref) else { return Vec::new() };
    backends.iter().map(|(name, _)| name.get_ref().to_string()).collect()
}

/// `[name]` of the document with the site's `[site.name]` keys over it.
/// FastCGI backends are laid over one by one: a site's backend replaces
/// the top-level one of its name whole.
fn overlaid<T: for<'de> Deserialize<'de>>(
    doc: &DeTable<'_>,
    site: &DeTable<'_>,
    name: &str,
) -> Result<T, toml::de::Error> {
    let mut merged = match doc.get(name).map(Spanned::get_ref) {
        Some(DeValue::Table(t)) => t.clone(),
        _ => DeTable::new(),
    };
    let mut span = doc.get(name).map_or(0..0, Spanned::span);
    if let Some(over) = site.get(name) {
        span = over.span();
        if let DeValue::Table(over) = over.get_ref() {
            for (key, value) in over.iter() {
                match (merged.get_mut(key.get_ref().as_ref()), value.get_ref()) {
                    (Some(mine), DeValue::Table(theirs)) if name == "fastcgi" => {
                        if let DeValue::Table(mine) = mine.get_mut() {
                            mine.extend(theirs.iter().map(|(k, v)| (k.clone(), v.clone())));
                        }
                    }
                    _ => {
                        merged.insert(key.clone(), value.clone());
                    }
                }
            }
        }
    }
    deserialize(merged, span)
}

fn deserialize<T: for<'de> Deserialize<'de>>(table: DeTable<'_>, span: Range<usize>) -> Result<T, toml::de::Error> {
    T::deserialize(ValueDeserializer::from(Spanned::new(span, DeValue::Table(table))))
}

/// A table's keys sorted into the groups named, and the rest.
struct Parts<'i> {
    picked: Vec<DeTable<'i>>,
    rest: DeTable<'i>,
}

impl<'i> Parts<'i> {
    fn split(table: &DeTable<'i>, groups: &[&[&str]]) -> Parts<'i> {
        let mut parts = Parts { picked: vec![DeTable::new(); groups.len()], rest: DeTable::new() };
        for (key, value) in table.iter() {
            let group = groups.iter().position(|g| g.contains(&key.get_ref().as_ref()));
            let into = group.map_or(&mut parts.rest, |g| &mut parts.picked[g]);
            into.insert(key.clone(), value.clone());
        }
        parts
    }

    /// Moves the keys of group `group` whose value `back` picks to the rest.
    fn give_back(&mut self, group: usize, back: impl Fn(&str, &DeValue<'i>) -> bool) {
        let picked = std::mem::take(&mut self.picked[group]);
        for (key, value) in picked {
            let into = if back(key.get_ref(), value.get_ref()) { &mut self.rest } else { &mut self.picked[group] };
            into.insert(key, value);
        }
    }

    fn take(&mut self, group: usize) -> DeTable<'i> {
        std::mem::take(&mut self.picked[group])
    }
}

fn section_names() -> [&'static str; 6] {
    SECTIONS.map(|(name, _)| name)
}

fn as_table<'a, 'i>(text: &str, value: &'a Spanned<DeValue<'i>>, what: &str) -> Result<&'a DeTable<'i>, String> {
    match value.get_ref() {
        DeValue::Table(t) => Ok(t),
        _ => Err(at(text, value.span(), &format!("each {what} is a table"))),
    }
}

fn with_input(mut e: toml::de::Error, text: &str) -> String {
    e.set_input(Some(text));
    e.to_string()
}

/// Where a text's lines start: its newlines, found once, so numbering the
/// tables of a file of a thousand sites (tens of thousands of locations)
/// is a binary search each rather than a scan from the start.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        Lines(memchr::memchr_iter(b'\n', text.as_bytes()).collect())
    }

    /// The 1-based line of the byte at `span.start`.
    fn of(&self, span: Range<usize>) -> usize {
        self.0.partition_point(|&newline| newline < span.start) + 1
    }
}

fn at(text: &str, span: Range<usize>, message: &str) -> String {
    format!("line {}: {message}", Lines::new(text).of(span))
}

/// The keys a derived `Deserialize` struct accepts, as serde's derive
/// lists them: asked by deserialising from a deserializer that only
/// records the list it is shown.
fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Shown;
    impl std::fmt::Display for Shown {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("fields shown")
        }
    }
    impl std::error::Error for Shown {}
    impl de::Error for Shown {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Shown
        }
    }
    impl<'de> Deserializer<'de> for &mut Fields {
        type Error = Shown;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Shown> {
            Err(Shown)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Shown> {
            self.0 = Some(fields);
            Err(Shown)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields = Fields(None);
    let _ = T::deserialize(&mut fields);
    fields.0.unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_from_one() {
        let lines = Lines::new("a\nbc\n\nd");
        let at = |i: usize| lines.of(i..i + 1);
        assert_eq!([at(0), at(1), at(2), at(4), at(5), at(6), at(7)], [1, 1, 2, 2, 3, 4, 4]);
        assert_eq!(Lines::new("").of(0..0), 1);
    }

    #[test]
    fn serde_shows_a_structs_keys() {
        assert_eq!(fields_of::<SiteKeys>(), ["name", "hosts", "default", "symlinks"]);
        assert_eq!(fields_of::<Match>(), ["exact", "prefix", "regex", "skip_regex"]);
    }
}
