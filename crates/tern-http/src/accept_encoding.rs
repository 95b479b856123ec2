//! `Accept-Encoding` negotiation with q-values (RFC 9110 §12.5.3).

use crate::qlist::{self, Quality};

/// The content codings tern can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    Identity,
    Gzip,
    Br,
    Zstd,
}

impl Coding {
    /// The token for `Content-Encoding` (empty for identity).
    pub fn token(self) -> &'static str {
        match self {
            Coding::Identity => "",
            Coding::Gzip => "gzip",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn from_token(t: &[u8]) -> Option<Coding> {
        let is = |s: &str| t.eq_ignore_ascii_case(s.as_bytes());
        Some(if is("identity") {
            Coding::Identity
        } else if is("gzip") || is("x-gzip") {
            Coding::Gzip
        } else if is("br") {
            Coding::Br
        } else if is("zstd") {
            Coding::Zstd
        } else {
            return None;
        })
    }
}

/// The client's stated preferences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preferences {
    explicit: [Option<Quality>; 4],
    star: Option<Quality>,
    /// No `Accept-Encoding` at all: any coding is acceptable, but tern then
    /// sends identity, as every mainstream server does.
    absent: bool,
}

impl Preferences {
    /// Parses every `Accept-Encoding` value of a request (none: `absent`).
    pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> Preferences {
        let mut p = Preferences { explicit: [None; 4], star: None, absent: true };
        for value in values {
            p.absent = false;
            for (coding, q) in qlist::elements(value) {
                if coding == b"*" {
                    p.star = Some(q);
                } else if let Some(c) = Coding::from_token(coding) {
                    p.explicit[c.index()] = Some(q);
                }
            }
        }
        p
    }

    /// The quality the client gives `coding`.
    pub fn quality(&self, coding: Coding) -> Quality {
        if self.absent {
            return if coding == Coding::Identity { 1000 } else { 0 };
        }
        match (self.explicit[coding.index()], self.star, coding) {
            (Some(q), _, _) => q,
            (None, Some(q), _) => q,
            // Identity is acceptable unless excluded (explicitly or by `*`).
            (None, None, Coding::Identity) => 1000,
            (None, None, _) => 0,
        }
    }

    /// The best of `offered` (the server's order breaks ties), preferring any
    /// acceptable compressed coding over identity; `None` when nothing
    /// offered is acceptable.
    pub fn choose(&self, offered: &[Coding]) -> Option<Coding> {
        let mut best: Option<(Coding, Quality)> = None;
        for &c in offered.iter().filter(|&&c| c != Coding::Identity) {
            let q = self.quality(c);
            if q > 0 && best.is_none_or(|(_, bq)| q > bq) {
                best = Some((c, q));
            }
        }
        match best {
            Some((c, _)) => Some(c),
            None => (self.quality(Coding::Identity) > 0).then_some(Coding::Identity),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    const ALL: &[Coding] = &[Br, Zstd, Gzip, Identity];

    fn choose(values: &[&str]) -> Option<Coding> {
        Preferences::parse(values.iter().map(|v| v.as_bytes())).choose(ALL)
    }

    #[test]
    fn negotiation_matrix() {
        assert_eq!(choose(&[]), Some(Identity));
        assert_eq!(choose(&[""]), Some(Identity));
        assert_eq!(choose(&["gzip"]), Some(Gzip));
        assert_eq!(choose(&["x-gzip"]), Some(Gzip));
        assert_eq!(choose(&["gzip, deflate, br"]), Some(Br));
        assert_eq!(choose(&["gzip;q=1.0, br;q=0.5"]), Some(Gzip));
        assert_eq!(choose(&["gzip;q=0, br;q=0"]), Some(Identity));
        assert_eq!(choose(&["*"]), Some(Br));
        assert_eq!(choose(&["*;q=0.1, gzip;q=0.5"]), Some(Gzip));
        assert_eq!(choose(&["deflate, compress"]), Some(Identity));
        assert_eq!(choose(&["identity;q=0"]), None);
        assert_eq!(choose(&["*;q=0"]), None);
        assert_eq!(choose(&["*;q=0, identity"]), Some(Identity));
        assert_eq!(choose(&["gzip;q=2"]), Some(Identity));
        assert_eq!(choose(&["gzip;q=0.001"]), Some(Gzip));
        assert_eq!(choose(&["zstd;q=0.9", "gzip;q=0.8"]), Some(Zstd));
    }
}
