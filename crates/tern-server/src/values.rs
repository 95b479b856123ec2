//! The value types configuration keys share — sizes and durations with
//! units, counts of at least one, URL prefixes, networks — and where a
//! configuration came from ([`Origin`]), so a section checked anywhere
//! (at parse time by `config/`, at start by its module) names its key and
//! line. Each section lives beside the code that reads it and spells its
//! values with these types, so a unit is written the same way in every key.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;

/// Where a configuration came from.
#[derive(Clone, Debug, Default)]
pub struct Origin {
    pub path: Option<PathBuf>,
    text: String,
}

impl Origin {
    pub fn new(path: &Path, text: &str) -> Origin {
        Origin { path: Some(path.to_path_buf()), text: text.to_string() }
    }

    /// Names `section.key` for an error: `FILE: line N: section.key`, as
    /// far as the file and line are known.
    pub fn at(&self, section: &str, key: &str) -> String {
        let Some(path) = &self.path else { return format!("{section}.{key}") };
        match line_of(&self.text, section, key) {
            Some(n) => format!("{}: line {n}: {section}.{key}", path.display()),
            None => format!("{}: {section}.{key}", path.display()),
        }
    }
}

/// The 1-based line where `key` is set inside `[section]`, if written there.
fn line_of(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = "";
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.trim();
        } else if current == section && line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return Some(n + 1);
        }
    }
    None
}

/// Makes a relative `path` from the configuration relative to `dir`, the
/// configuration file's directory; an empty path (a key's "none") stays
/// empty.
pub fn rebase(path: &mut PathBuf, dir: &Path) {
    if path.is_relative() && !path.as_os_str().is_empty() {
        *path = dir.join(&*path);
    }
}

/// A section's rules a value's type alone cannot express, in order:
/// `(broken, key, message)`. Returns the key and message of the first
/// broken one (what `Config::broken_rule` reports, with its section).
pub fn first_broken<const N: usize>(
    rules: [(bool, &'static str, &'static str); N],
) -> Option<(&'static str, &'static str)> {
    rules.into_iter().find(|r| r.0).map(|(_, key, message)| (key, message))
}

/// A URL path prefix (starting with `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlPrefix(pub String);

impl<'de> Deserialize<'de> for UrlPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if !s.starts_with('/') {
            return Err(de::Error::custom(format!("`{s}` must be a URL path starting with /")));
        }
        Ok(UrlPrefix(s))
    }
}

/// A count of at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonZero(pub usize);

impl<'de> Deserialize<'de> for NonZero {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match usize::deserialize(d)? {
            0 => Err(de::Error::custom("must be at least 1")),
            n => Ok(NonZero(n)),
        }
    }
}

/// An IP network in CIDR notation (`10.0.0.0/8`); a bare address is a /32
/// or /128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl Network {
    pub fn parse(s: &str) -> Option<Network> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a.parse().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (s.parse().ok()?, None),
        };
        let max = if matches!(addr, std::net::IpAddr::V4(_)) { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Network { addr, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        let bits = |a: std::net::IpAddr| -> u128 {
            match a {
                std::net::IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
                std::net::IpAddr::V6(v6) => u128::from(v6),
            }
        };
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(self.prefix)) };
        (bits(ip) & mask) == (bits(self.addr) & mask)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Network::parse(&s).ok_or_else(|| de::Error::custom(format!("`{s}` is not an address or CIDR network")))
    }
}

/// A byte size: an integer, or a string with a unit (`"64KiB"`, `"1MiB"`,
/// `"16k"`, `"2M"`, `"1G"`; powers of 1024).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl Bytes {
    pub fn parse(s: &str) -> Option<Bytes> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().ok()?;
        let mult = match unit.trim() {
            "" | "B" => 1,
            "k" | "K" | "KiB" | "KB" => 1 << 10,
            "m" | "M" | "MiB" | "MB" => 1 << 20,
            "g" | "G" | "GiB" | "GB" => 1 << 30,
            _ => return None,
        };
        n.checked_mul(mult).map(Bytes)
    }

    pub fn usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte size such as 65536 or \"64KiB\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bytes, E> {
                u64::try_from(v).map(Bytes).map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
                Bytes::parse(v)
                    .ok_or_else(|| E::custom(format!("`{v}` is not a byte size (e.g. 65536, \"64KiB\", \"1MiB\")")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration: an integer number of seconds, or a string with a unit
/// (`"50us"`, `"500ms"`, `"10s"`, `"2m"`, `"1h"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl Seconds {
    pub fn parse(s: &str) -> Option<Seconds> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().ok()?;
        let d = match unit {
            "us" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "" | "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            _ => return None,
        };
        Some(Seconds(d))
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 10 or \"10s\", \"500ms\", \"2m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                u64::try_from(v)
                    .map(|s| Seconds(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seconds, E> {
                Seconds::parse(v)
                    .ok_or_else(|| E::custom(format!("`{v}` is not a duration (e.g. 10, \"10s\", \"500ms\")")))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let n = Network::parse("127.0.0.0/8").unwrap();
        assert!(n.contains("127.1.2.3".parse().unwrap()));
        assert!(n.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!n.contains("10.0.0.1".parse().unwrap()));
        assert!(Network::parse("::1/128").unwrap().contains("::1".parse().unwrap()));
        assert!(Network::parse("10.0.0.0/33").is_none());
    }
}
