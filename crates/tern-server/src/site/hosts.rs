//! Which site answers a request: its host name looked up among the sites'
//! names.
//!
//! A name is exact (`shop.example`) or a wildcard of one or more leading
//! labels (`*.shop.example` covers `a.shop.example` and
//! `a.b.shop.example`, not `shop.example` itself). Exact names win over
//! wildcards, and a longer wildcard over a shorter one, as in nginx. The
//! port is ignored, case does not matter and a trailing dot is dropped.
//! A lookup is one hash-map probe for the exact name and one per label for
//! wildcards, with no allocation: the name is lowered into a stack buffer.

use std::collections::HashMap;

use super::trace::Trace;

/// The longest host name looked up (RFC 1035: 253 characters); a longer
/// one is no site's.
const MAX_NAME: usize = 253;

/// Host names to site numbers.
#[derive(Debug, Default)]
pub struct Hosts {
    exact: HashMap<Box<[u8]>, usize>,
    /// `*.shop.example` is kept as `.shop.example`.
    wildcards: HashMap<Box<[u8]>, usize>,
    default: Option<usize>,
    /// Each site's name, for the notes of a trace.
    names: Vec<Box<str>>,
}

/// How a host found its site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Listed by its exact name.
    Exact(usize),
    /// Covered by a wildcard.
    Wildcard(usize),
    /// No site lists it (or the request named no host): the default site.
    Default(usize),
    /// No site lists it and none is the default.
    Unknown,
}

impl Found {
    /// The site, if any.
    pub fn site(self) -> Option<usize> {
        match self {
            Found::Exact(s) | Found::Wildcard(s) | Found::Default(s) => Some(s),
            Found::Unknown => None,
        }
    }
}

impl Hosts {
    /// Builds the table from each site's name and host names (in site
    /// order) and the default site. A host name listed twice, by one site
    /// or two, is an error naming the sites, with the number of the site
    /// where it was found.
    pub fn new<S: AsRef<str>>(sites: &[(&str, &[S])], default: Option<usize>) -> Result<Hosts, (usize, String)> {
        let names = sites.iter().map(|(name, _)| Box::from(*name)).collect();
        let mut hosts = Hosts { default, names, ..Hosts::default() };
        for (site, (_, list)) in sites.iter().enumerate() {
            for name in list.iter() {
                let name = name.as_ref();
                let (table, key) = match name.strip_prefix('*') {
                    Some(rest) if rest.starts_with('.') => {
                        (&mut hosts.wildcards, normal(rest, name).map_err(|e| (site, e))?)
                    }
                    _ => (&mut hosts.exact, normal(name, name).map_err(|e| (site, e))?),
                };
                if let Some(first) = table.insert(key.into(), site) {
                    let (first, this) = (&hosts.names[first], &hosts.names[site]);
                    return Err((
                        site,
                        if first == this {
                            format!("host `{name}` is listed twice by site `{this}`")
                        } else {
                            format!("host `{name}` is listed by sites `{first}` and `{this}`")
                        },
                    ));
                }
            }
        }
        Ok(hosts)
    }

    /// The site for `host` (a `Host` value or an absolute-form authority,
    /// port and all; `None` when the request named none).
    pub fn find(&self, host: Option<&[u8]>, trace: &mut impl Trace) -> Found {
        let mut buf = [0u8; MAX_NAME];
        let name = host.and_then(|h| lowered(h, &mut buf));
        if let Some(name) = name {
            if let Some(&site) = self.exact.get(name) {
                trace.note(|| format!("host `{}` is listed by site `{}`", show(name), self.names[site]));
                return Found::Exact(site);
            }
            // `a.b.shop.example` tries `.b.shop.example`, `.shop.example`,
            // `.example`: the longest wildcard first.
            let mut at = 0;
            while let Some(dot) = name[at..].iter().position(|&b| b == b'.') {
                let suffix = &name[at + dot..];
                if let Some(&site) = self.wildcards.get(suffix) {
                    trace.note(|| {
                        format!(
                            "host `{}` is covered by `*{}` of site `{}`",
                            show(name),
                            show(suffix),
                            self.names[site]
                        )
                    });
                    return Found::Wildcard(site);
                }
                at += dot + 1;
            }
            trace.note(|| format!("host `{}` is listed by no site", show(name)));
        } else {
            trace.note(|| "the request names no host".to_string());
        }
        match self.default {
            Some(site) => {
                trace.note(|| format!("site `{}` is the default", self.names[site]));
                Found::Default(site)
            }
            None => {
                trace.note(|| "no site is the default".to_string());
                Found::Unknown
            }
        }
    }
}

/// `host` without its port and trailing dot, lowered into `buf`; `None`
/// when it is empty or too long to be any site's.
fn lowered<'b>(host: &[u8], buf: &'b mut [u8; MAX_NAME]) -> Option<&'b [u8]> {
    let name = tern_http::host::without_port(host);
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() || name.len() > MAX_NAME {
        return None;
    }
    let out = &mut buf[..name.len()];
    for (o, b) in out.iter_mut().zip(name) {
        *o = b.to_ascii_lowercase();
    }
    Some(out)
}

/// `name` (the configured `written`, or its part after `*`) as it is
/// looked up; an empty one, a port or a character no host name has is an
/// error naming it.
fn normal(name: &str, written: &str) -> Result<Vec<u8>, String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    let valid = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':');
    let bracketed = bare.starts_with('[') && bare.ends_with(']');
    if bare.trim_start_matches('.').is_empty()
        || bare.len() > MAX_NAME
        || !bare.bytes().all(valid)
        || (bare.contains(':') && !bracketed)
    {
        return Err(format!(
            "`{written}` is not a host name (a name such as `shop.example`, `*.shop.example`, an IPv4 address or `[IPv6]`, without a port)"
        ));
    }
    Ok(bare.to_ascii_lowercase().into_bytes())
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(default: Option<usize>) -> Hosts {
        let sites: [(&str, &[&str]); 3] = [
            ("shop", &["shop.example", "www.shop.example"]),
            ("any", &["*.shop.example"]),
            ("b", &["*.b.shop.example", "127.0.0.1", "[::1]"]),
        ];
        Hosts::new(&sites, default).unwrap()
    }

    #[test]
    fn exact_then_the_longest_wildcard_then_the_default() {
        let hosts = table(Some(0));
        let find = |h: &str| hosts.find(Some(h.as_bytes()), &mut ());
        assert_eq!(find("shop.example"), Found::Exact(0));
        assert_eq!(find("WWW.Shop.Example:8080"), Found::Exact(0));
        assert_eq!(find("shop.example."), Found::Exact(0));
        assert_eq!(find("a.shop.example"), Found::Wildcard(1));
        assert_eq!(find("a.c.shop.example"), Found::Wildcard(1));
        assert_eq!(find("a.b.shop.example"), Found::Wildcard(2));
        assert_eq!(find("b.shop.example"), Found::Wildcard(1));
        assert_eq!(find("127.0.0.1:80"), Found::Exact(2));
        assert_eq!(find("[::1]:8080"), Found::Exact(2));
        assert_eq!(find("other.example"), Found::Default(0));
        assert_eq!(find("example"), Found::Default(0));
        assert_eq!(hosts.find(None, &mut ()), Found::Default(0));
        assert_eq!(table(None).find(Some(b"other.example"), &mut ()), Found::Unknown);
    }

    #[test]
    fn a_wildcard_does_not_cover_its_own_base_name() {
        let hosts = Hosts::new(&[("s", &["*.shop.example"][..])], None).unwrap();
        assert_eq!(hosts.find(Some(b"shop.example"), &mut ()), Found::Unknown);
    }

    #[test]
    fn names_listed_twice_and_bad_names_are_refused() {
        let err = Hosts::new(&[("a", &["a.example"][..]), ("b", &["A.example."])], None).unwrap_err();
        assert_eq!(err, (1, "host `A.example.` is listed by sites `a` and `b`".into()));
        let err = Hosts::new(&[("a", &["*.a.example", "*.a.example"][..])], None).unwrap_err();
        assert_eq!(err, (0, "host `*.a.example` is listed twice by site `a`".into()));
        for bad in ["", "a.example:80", "a b", "*", "*.", "a/b"] {
            let (_, err) = Hosts::new(&[("a", &[bad][..])], None).unwrap_err();
            assert!(err.starts_with(&format!("`{bad}` is not a host name")), "{bad}: {err}");
        }
    }

    #[test]
    fn a_trace_says_why() {
        let hosts = table(Some(1));
        let mut notes = Vec::new();
        hosts.find(Some(b"a.b.shop.example"), &mut notes);
        assert_eq!(notes, ["host `a.b.shop.example` is covered by `*.b.shop.example` of site `b`"]);
        notes.clear();
        hosts.find(Some(b"nowhere"), &mut notes);
        assert_eq!(notes, ["host `nowhere` is listed by no site", "site `any` is the default"]);
    }
}
