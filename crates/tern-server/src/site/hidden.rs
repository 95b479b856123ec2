//! Hidden paths: a segment starting with `.` (`/.git/config`,
//! `/.htpasswd`, `/a/.env`) names what a tree keeps beside its content, not
//! content. Decided once per request on the normalised path (after
//! percent-decoding, so `/%2egit/` is the same path), before every handler
//! (static files, CGI, FastCGI); refused as `404`, so nothing tells that it exists.

use crate::static_io::{Hidden, StaticFiles};

pub struct Rule {
    deny: bool,
    /// Normalised relative paths (`.well-known`) served although hidden.
    allow: Vec<Vec<u8>>,
}

impl Rule {
    pub fn new(st: &StaticFiles) -> Rule {
        Rule {
            deny: st.hidden == Hidden::Deny,
            allow: st.hidden_allow.iter().map(|p| p.trim_matches('/').as_bytes().to_vec()).collect(),
        }
    }

    /// Is the normalised relative path `rel` (no leading `/`) refused? The
    /// part of it inside an allowed path is not looked at; hidden names
    /// below that path still are.
    pub fn refuses(&self, rel: &[u8]) -> bool {
        if !self.deny {
            return false;
        }
        let rest = self
            .allow
            .iter()
            .filter_map(|p| match rel.strip_prefix(p.as_slice()) {
                Some(rest) if rest.is_empty() || rest[0] == b'/' => Some(rest),
                _ => None,
            })
            .min_by_key(|rest| rest.len())
            .unwrap_or(rel);
        has_hidden_segment(rest)
    }
}

fn has_hidden_segment(path: &[u8]) -> bool {
    path.first() == Some(&b'.') || path.windows(2).any(|w| w == b"/.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(hidden: &str, allow: &[&str]) -> Rule {
        let st = StaticFiles {
            hidden: if hidden == "deny" { Hidden::Deny } else { Hidden::Allow },
            hidden_allow: allow.iter().map(|s| (*s).to_string()).collect(),
            ..StaticFiles::default()
        };
        Rule::new(&st)
    }

    #[test]
    fn hidden_segments_anywhere_except_allowed_paths() {
        let r = rule("deny", &["/.well-known"]);
        for refused in
            [&b".git/config"[..], b".htpasswd", b"a/.env", b"a/b/.x/c", b".well-knownx/a", b".well-known/.git"]
        {
            assert!(r.refuses(refused), "{}", String::from_utf8_lossy(refused));
        }
        for served in [&b""[..], b"index.html", b"a/b.c", b"a./b", b".well-known", b".well-known/acme/tok"] {
            assert!(!r.refuses(served), "{}", String::from_utf8_lossy(served));
        }
        assert!(!rule("allow", &[]).refuses(b".git/config"));
        assert!(rule("deny", &[]).refuses(b".well-known/x"));
        assert!(!rule("deny", &["/a/.b/"]).refuses(b"a/.b/c"));
    }
}
