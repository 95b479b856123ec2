//! The configuration `tern tune` writes: the base configuration's
//! settings (its comments are not kept) with each chosen key set, and above
//! each chosen key the evidence for it. A setting whose default was kept is
//! not written (the base's value, or tern's default, stays in force): its
//! evidence is, above the base's line or above a commented-out
//! `# key = value` line naming the value that stays.

use std::path::Path;

/// What a battery does to one key.
#[derive(Clone, Debug)]
pub enum Change {
    /// Set to this value.
    Set(toml::Value),
    /// Removed (it would contradict what was set, e.g. `io_profile`).
    Remove,
    /// Left as the base has it (the value shown in the comment).
    Keep(toml::Value),
}

/// A key a battery decided, and the evidence.
#[derive(Clone, Debug)]
pub struct Tuned {
    pub section: &'static str,
    pub key: &'static str,
    pub change: Change,
    pub comment: Vec<String>,
}

impl Tuned {
    /// Applies the change to a configuration table.
    pub fn apply(&self, t: &mut toml::Table) {
        match &self.change {
            Change::Set(v) => set(t, self.section, self.key, Some(v.clone())),
            Change::Remove => set(t, self.section, self.key, None),
            Change::Keep(_) => {}
        }
    }
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
/// decided key preceded by its evidence.
pub fn text(base: &toml::Table, tuned: &[Tuned], header: &[String]) -> anyhow::Result<String> {
    let mut table = base.clone();
    for t in tuned {
        t.apply(&mut table);
        if matches!(t.change, Change::Keep(_)) {
            table.entry(t.section).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        }
    }
    let body = toml::to_string(&table)?;
    let mut out = String::new();
    for line in header {
        out.push_str(&comment(line));
    }
    // The kept keys the section does not have: their evidence and value,
    // commented out, at the end of the section's own keys.
    let absent = |out: &mut String, section: &str| {
        let have = table.get(section).and_then(|s| s.as_table());
        for t in tuned.iter().filter(|t| t.section == section && have.is_none_or(|h| !h.contains_key(t.key))) {
            if let Change::Keep(value) = &t.change {
                for line in &t.comment {
                    out.push_str(&comment(line));
                }
                out.push_str(&comment(&format!("{} = {value}", t.key)));
            }
        }
    };
    let mut section = String::new();
    for line in body.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            absent(&mut out, &section);
            section = name.trim().to_string();
            out.push('\n');
        } else if let Some((key, _)) = trimmed.split_once('=') {
            let found = tuned
                .iter()
                .find(|t| t.section == section && t.key == key.trim() && !matches!(t.change, Change::Remove));
            for line in found.map_or(&[][..], |t| &t.comment[..]) {
                out.push_str(&comment(line));
            }
        }
        if !line.is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    absent(&mut out, &section);
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
    fn each_decided_key_is_written_under_its_evidence_and_the_rest_kept() {
        let base = base(
            "[server]\nroot = \"www\"\nworkers = 3\n[static]\nio_profile = \"io.toml\"\nio = \"auto\"\n",
            Path::new("/etc/tern"),
        )
        .unwrap();
        let tuned = [
            Tuned {
                section: "static",
                key: "read_chunk",
                change: Change::Set("16KiB".into()),
                comment: vec!["read_chunk: 1.20x the default".into()],
            },
            Tuned { section: "static", key: "io_profile", change: Change::Remove, comment: vec![] },
            Tuned {
                section: "static",
                key: "io",
                change: Change::Keep("auto".into()),
                comment: vec!["io: kept, in the base".into()],
            },
            Tuned {
                section: "server",
                key: "workers",
                change: Change::Keep(0.into()),
                comment: vec!["workers: kept".into()],
            },
            Tuned {
                section: "cgi",
                key: "pipe_buffer",
                change: Change::Keep("64KiB".into()),
                comment: vec!["pipe_buffer: kept".into(), "".into()],
            },
        ];
        let text = text(&base, &tuned, &["written by tern tune".into()]).unwrap();
        assert_eq!(
            text,
            "# written by tern tune\n\n[cgi]\n# pipe_buffer: kept\n#\n# pipe_buffer = \"64KiB\"\n\n[server]\n\
             root = \"/etc/tern/www\"\n# workers: kept\nworkers = 3\n\n[static]\n# io: kept, in the base\nio = \"auto\"\n\
             # read_chunk: 1.20x the default\nread_chunk = \"16KiB\"\n"
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert!(parsed["cgi"].as_table().unwrap().is_empty());
        assert_eq!(parsed["server"]["workers"].as_integer(), Some(3));
    }
}
