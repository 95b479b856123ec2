//! Conditional requests (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since` and `If-Range`, evaluated in the
//! order §13.2.2 prescribes.

use crate::date::parse_http_date;
use crate::method::Method;
use crate::request::Request;

/// The validators of the selected representation.
#[derive(Clone, Copy, Debug)]
pub struct Validators<'a> {
    /// The strong entity tag, quotes included: `"5f3a-1c2"`.
    pub etag: &'a [u8],
    /// Last modification, seconds since the epoch.
    pub last_modified: u64,
}

/// The outcome of the preconditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Proceed,
    /// `304` (GET/HEAD only).
    NotModified,
    /// `412`.
    PreconditionFailed,
}

/// Splits an entity-tag list into tags; `*` is returned as itself.
fn tags(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',').map(|t| t.trim_ascii()).filter(|t| !t.is_empty())
}

fn opaque(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

fn strong_match(tag: &[u8], etag: &[u8]) -> bool {
    !tag.starts_with(b"W/") && tag == etag
}

fn weak_match(tag: &[u8], etag: &[u8]) -> bool {
    opaque(tag) == opaque(etag)
}

fn any_tag<'a>(values: impl Iterator<Item = &'a [u8]>, matches: impl Fn(&[u8]) -> bool) -> bool {
    values.flat_map(tags).any(|t| t == b"*" || matches(t))
}

/// Evaluates the request's preconditions against `v`.
pub fn evaluate(req: &Request<'_>, v: &Validators<'_>) -> Outcome {
    let f = &req.fields;
    if f.has_if_match {
        if !any_tag(req.values("if-match"), |t| strong_match(t, v.etag)) {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(date) = f.if_unmodified_since.and_then(parse_http_date) {
        if v.last_modified > date {
            return Outcome::PreconditionFailed;
        }
    }
    if f.has_if_none_match {
        if any_tag(req.values("if-none-match"), |t| weak_match(t, v.etag)) {
            return if req.method.is_get_or_head() { Outcome::NotModified } else { Outcome::PreconditionFailed };
        }
    } else if req.method.is_get_or_head() {
        if let Some(date) = f.if_modified_since.and_then(parse_http_date) {
            if v.last_modified <= date {
                return Outcome::NotModified;
            }
        }
    }
    Outcome::Proceed
}

/// Should a `Range` be honoured, given `If-Range`? Only on GET, and only when
/// the validator still matches: a strong ETag, or exactly the
/// `Last-Modified` date.
pub fn range_applies(req: &Request<'_>, v: &Validators<'_>) -> bool {
    if req.method != Method::Get {
        return false;
    }
    match req.fields.if_range {
        None => true,
        Some(value) if value.starts_with(b"\"") || value.starts_with(b"W/") => strong_match(value, v.etag),
        Some(value) => parse_http_date(value) == Some(v.last_modified),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{parse_head, Head, Limits, MAX_HEADERS};

    const LM: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
    const V: Validators<'static> = Validators { etag: b"\"abc\"", last_modified: LM };

    fn with<R>(head: &str, f: impl FnOnce(&Request<'_>) -> R) -> R {
        let raw = format!("{head}\r\n\r\n");
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match parse_head(raw.as_bytes(), &Limits::default(), &mut fields) {
            Ok(Head::Complete(req)) => f(&req),
            other => panic!("{other:?}"),
        }
    }

    fn outcome(head: &str) -> Outcome {
        with(head, |r| evaluate(r, &V))
    }

    #[test]
    fn if_none_match_and_since() {
        use Outcome::*;
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"abc\""), NotModified);
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\", W/\"abc\""), NotModified);
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\"\r\nIf-None-Match: *"), NotModified);
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\""), Proceed);
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            outcome(
                "GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT"
            ),
            Proceed
        );
        assert_eq!(
            outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT"),
            NotModified
        );
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:36 GMT"), Proceed);
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: garbage"), Proceed);
        assert_eq!(outcome("POST / HTTP/1.1\r\nHost: a\r\nIf-None-Match: *"), PreconditionFailed);
    }

    #[test]
    fn if_match_and_unmodified_since() {
        use Outcome::*;
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Match: \"abc\""), Proceed);
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Match: W/\"abc\""), PreconditionFailed);
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Match: *"), Proceed);
        assert_eq!(
            outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Unmodified-Since: Sun, 06 Nov 1994 08:49:36 GMT"),
            PreconditionFailed
        );
        assert_eq!(outcome("GET / HTTP/1.1\r\nHost: a\r\nIf-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT"), Proceed);
    }

    #[test]
    fn if_range() {
        let applies = |h: &str| with(h, |r| range_applies(r, &V));
        assert!(applies("GET / HTTP/1.1\r\nHost: a\r\nRange: bytes=0-1"));
        assert!(applies("GET / HTTP/1.1\r\nHost: a\r\nIf-Range: \"abc\""));
        assert!(!applies("GET / HTTP/1.1\r\nHost: a\r\nIf-Range: W/\"abc\""));
        assert!(!applies("GET / HTTP/1.1\r\nHost: a\r\nIf-Range: \"old\""));
        assert!(applies("GET / HTTP/1.1\r\nHost: a\r\nIf-Range: Sun, 06 Nov 1994 08:49:37 GMT"));
        assert!(!applies("GET / HTTP/1.1\r\nHost: a\r\nIf-Range: Sun, 06 Nov 1994 08:49:38 GMT"));
        assert!(!applies("HEAD / HTTP/1.1\r\nHost: a"));
    }
}
