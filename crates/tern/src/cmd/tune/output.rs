//! The configuration `tern tune` writes: the base configuration's
//! settings (its comments are not kept) with each chosen key set, and above
//! each chosen key the evidence for it.

use std::path::Path;

/// A chosen key: its value (`None`: removed) and the evidence.
#[derive(Clone, Debug)]
pub struct Tuned {
    pub section: &'static str,
    pub key: &'static str,
    pub value: Option<toml::Value>,
    pub comment: Vec<String>,
}

/// Sets (or with `None` removes) `[section] key` in `t`.
pub fn set(t: &mut toml::Table, section: &str, key: &str, value: Option<toml::Value>) {
    let entry = t.entry(section).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(s) = entry {
        match value {
            Some(v) => {
                s.insert(key.to_string(), v);
            }
            None => {
                s.remove(key);
            }
        }
    }
}

/// The base configuration as a table, with the paths it gives relative to
/// its own directory made absolute, so the written file may live anywhere.
pub fn base(text: &str, dir: &Path) -> anyhow::Result<toml::Table> {
    let mut t: toml::Table = toml::from_str(text)?;
    let absolute = |v: &mut toml::Value| {
        if let Some(p) = v.as_str().filter(|p| Path::new(p).is_relative()) {
            *v = toml::Value::String(dir.join(p).display().to_string());
        }
    };
    for (section, key) in [("server", "root"), ("static", "io_profile")] {
        if let Some(v) = t.get_mut(section).and_then(|s| s.get_mut(key)) {
            absolute(v);
        }
    }
    if let Some(certs) = t.get_mut("tls").and_then(|s| s.get_mut("certificates")).and_then(|c| c.as_array_mut()) {
        for cert in certs.iter_mut().filter_map(|c| c.as_table_mut()) {
            for key in ["cert", "key"] {
                if let Some(v) = cert.get_mut(key) {
                    absolute(v);
                }
            }
        }
    }
    Ok(t)
}

/// The commented TOML: `header` lines first, then the settings, each
/// chosen key preceded by its evidence.
pub fn text(base: &toml::Table, tuned: &[Tuned], header: &[String]) -> anyhow::Result<String> {
    let mut table = base.clone();
    for t in tuned {
        set(&mut table, t.section, t.key, t.value.clone());
    }
    let body = toml::to_string(&table)?;
    let mut out = String::new();
    for line in header {
        out.push_str(&comment(line));
    }
    let mut section = "";
    for line in body.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim();
            out.push('\n');
        } else if let Some((key, _)) = trimmed.split_once('=') {
            let found = tuned.iter().find(|t| t.section == section && t.key == key.trim() && t.value.is_some());
            for line in found.map_or(&[][..], |t| &t.comment[..]) {
                out.push_str(&comment(line));
            }
        }
        if !line.is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

fn comment(line: &str) -> String {
    if line.is_empty() {
        "#\n".into()
    } else {
        format!("# {line}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_chosen_key_is_written_under_its_evidence_and_the_rest_kept() {
        let base =
            base("[server]\nroot = \"www\"\nworkers = 3\n[static]\nio_profile = \"io.toml\"\n", Path::new("/etc/tern"))
                .unwrap();
        let tuned = [
            Tuned {
                section: "static",
                key: "read_chunk",
                value: Some("16KiB".into()),
                comment: vec!["read_chunk: 1.20x the default".into()],
            },
            Tuned { section: "static", key: "io_profile", value: None, comment: vec![] },
            Tuned { section: "server", key: "workers", value: Some(1.into()), comment: vec!["workers: kept".into()] },
        ];
        let text = text(&base, &tuned, &["written by tern tune".into()]).unwrap();
        assert_eq!(
            text,
            "# written by tern tune\n\n[server]\nroot = \"/etc/tern/www\"\n# workers: kept\nworkers = 1\n\n[static]\n\
             # read_chunk: 1.20x the default\nread_chunk = \"16KiB\"\n"
        );
    }
}
