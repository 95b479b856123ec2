//! Redirect targets with placeholders (`redirect = "https://{host}{path}"`),
//! parsed once when the configuration is read and rendered per request
//! without allocating.
//!
//! Placeholders: `{scheme}`, `{host}` (as sent, port included), `{hostname}`
//! (without the port, `[v6]` kept bracketed), `{path}` (as sent,
//! percent-encoded), `{query}` (`?` and the query, or nothing), `{rest}`
//! (the decoded path after the location's prefix, percent-encoded here);
//! `{{` and `}}` stand for braces. A target with no `?` of its own and no
//! `{query}` gets the request's query, before its `#fragment` if it has one.
//!
//! The result goes into a `Location` header, so no byte of it may end the
//! header: the configured text may hold no control character, and every
//! byte of a request part outside visible ASCII is percent-encoded.

use percent_encoding::{percent_encode, AsciiSet, CONTROLS};
use tern_http::host::without_port;

/// The request's parts a target may name.
#[derive(Clone, Copy, Debug)]
pub struct Parts<'a> {
    /// `http` or `https`.
    pub scheme: &'a [u8],
    /// The `Host` as sent.
    pub host: &'a [u8],
    /// The path as sent (percent-encoded).
    pub path: &'a [u8],
    /// The query as sent, without its `?`.
    pub query: Option<&'a [u8]>,
    /// The decoded, normalised path after the location's prefix.
    pub rest: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Box<[u8]>),
    Scheme,
    Host,
    Hostname,
    Path,
    Query,
    Rest,
}

/// A parsed target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

const PLACEHOLDERS: [(&str, Piece); 6] = [
    ("scheme", Piece::Scheme),
    ("host", Piece::Host),
    ("hostname", Piece::Hostname),
    ("path", Piece::Path),
    ("query", Piece::Query),
    ("rest", Piece::Rest),
];

/// Request parts that are already URI text: only what could break the
/// header or is not ASCII is encoded.
const AS_SENT: &AsciiSet = &CONTROLS.add(b' ');

/// A decoded path put back into a URI: also what would end the path or
/// change its meaning (`\` is a `/` to browsers).
const DECODED: &AsciiSet =
    &AS_SENT.add(b'"').add(b'#').add(b'%').add(b'<').add(b'>').add(b'?').add(b'\\').add(b'`').add(b'{').add(b'}');

impl Template {
    /// Parses `target`; an error names the unknown placeholder or the
    /// stray brace.
    pub fn parse(target: &str) -> Result<Template, String> {
        if target.is_empty() {
            return Err("the target is empty".to_string());
        }
        if let Some(c) = target.chars().find(|c| c.is_control()) {
            return Err(format!("control character {c:?} in target {target:?}"));
        }
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = target;
        while let Some(i) = rest.find(['{', '}']) {
            text.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("{{").or_else(|| tail.strip_prefix("}}")) {
                text.push_str(&tail[..1]);
                rest = after;
                continue;
            }
            if tail.starts_with('}') {
                return Err(format!("`}}` without `{{` in {target:?} (write `}}}}` for a brace)"));
            }
            let Some(close) = tail.find('}') else {
                return Err(format!("`{{` without `}}` in {target:?} (write `{{{{` for a brace)"));
            };
            let name = &tail[1..close];
            let Some((_, piece)) = PLACEHOLDERS.iter().find(|(n, _)| *n == name) else {
                return Err(format!(
                    "unknown placeholder `{{{name}}}` in {target:?} (known: {{scheme}}, {{host}}, {{hostname}}, \
                     {{path}}, {{query}}, {{rest}})"
                ));
            };
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text).into_bytes().into()));
            }
            pieces.push(piece.clone());
            rest = &tail[close + 1..];
        }
        text.push_str(rest);
        if !text.is_empty() {
            pieces.push(Piece::Text(text.into_bytes().into()));
        }
        let own_query = pieces.iter().any(|p| matches!(p, Piece::Text(t) if t.contains(&b'?')));
        if !own_query && !pieces.contains(&Piece::Query) {
            pieces = with_query_before_fragment(pieces);
        }
        Ok(Template { pieces })
    }

    /// Appends the target for `parts` to `out`.
    pub fn render(&self, parts: &Parts<'_>, out: &mut Vec<u8>) {
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.extend_from_slice(t),
                Piece::Scheme => put(out, parts.scheme, AS_SENT),
                Piece::Host => put(out, parts.host, AS_SENT),
                Piece::Hostname => put(out, without_port(parts.host), AS_SENT),
                Piece::Path => put(out, parts.path, AS_SENT),
                Piece::Query => {
                    if let Some(q) = parts.query.filter(|q| !q.is_empty()) {
                        out.push(b'?');
                        put(out, q, AS_SENT);
                    }
                }
                Piece::Rest => put(out, parts.rest, DECODED),
            }
        }
    }
}

/// `pieces` with a `{query}` before the first `#` of the text, or at the end.
fn with_query_before_fragment(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out = Vec::with_capacity(pieces.len() + 2);
    let mut placed = false;
    for piece in pieces {
        match piece {
            Piece::Text(t) if !placed && t.contains(&b'#') => {
                let at = t.iter().position(|&b| b == b'#').expect("contains #");
                if at > 0 {
                    out.push(Piece::Text(t[..at].into()));
                }
                out.push(Piece::Query);
                out.push(Piece::Text(t[at..].into()));
                placed = true;
            }
            other => out.push(other),
        }
    }
    if !placed {
        out.push(Piece::Query);
    }
    out
}

fn put(out: &mut Vec<u8>, bytes: &[u8], set: &'static AsciiSet) {
    for chunk in percent_encode(bytes, set) {
        out.extend_from_slice(chunk.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTS: Parts<'static> = Parts {
        scheme: b"http",
        host: b"Shop.example:8080",
        path: b"/old/a%20b",
        query: Some(b"x=1&y=%3F"),
        rest: b"a b",
    };

    fn render(target: &str, parts: &Parts<'_>) -> String {
        let mut out = b"Location: ".to_vec();
        Template::parse(target).unwrap().render(parts, &mut out);
        String::from_utf8(out).unwrap().strip_prefix("Location: ").unwrap().to_string()
    }

    #[test]
    fn placeholders() {
        assert_eq!(render("https://{host}{path}", &PARTS), "https://Shop.example:8080/old/a%20b?x=1&y=%3F");
        assert_eq!(render("{scheme}://{hostname}/new/{rest}", &PARTS), "http://Shop.example/new/a%20b?x=1&y=%3F");
        assert_eq!(render("/x{query}", &PARTS), "/x?x=1&y=%3F");
        assert_eq!(render("/{{literal}}/{rest}{{", &PARTS), "/{literal}/a%20b{?x=1&y=%3F");
        assert_eq!(render("/static", &PARTS), "/static?x=1&y=%3F");
        let bare = Parts { query: None, ..PARTS };
        assert_eq!(render("/static", &bare), "/static");
        assert_eq!(render("/x{query}", &bare), "/x");
        let empty = Parts { query: Some(b""), ..PARTS };
        assert_eq!(render("/x", &empty), "/x");
    }

    #[test]
    fn the_query_is_appended_only_without_a_question_mark_or_placeholder() {
        assert_eq!(render("/search?q=1", &PARTS), "/search?q=1");
        assert_eq!(render("/a{query}/b", &PARTS), "/a?x=1&y=%3F/b");
        assert_eq!(render("/page#top", &PARTS), "/page?x=1&y=%3F#top");
        assert_eq!(render("#top{path}", &PARTS), "?x=1&y=%3F#top/old/a%20b");
        assert_eq!(render("/a?b#c", &PARTS), "/a?b#c");
    }

    #[test]
    fn hostname_drops_the_port() {
        let v6 = Parts { host: b"[::1]:8443", ..PARTS };
        assert_eq!(render("https://{hostname}:443{path}", &v6), "https://[::1]:443/old/a%20b?x=1&y=%3F");
    }

    #[test]
    fn no_part_can_end_the_header() {
        let hostile = Parts {
            scheme: b"http\r\n",
            host: b"h\r\nSet-Cookie: a=b",
            path: b"/a\nb\0c d",
            query: Some(b"q=\r\n\x7f\xff"),
            rest: b"x\r\n?#%\\\"<>`{}\xc3\xa9/y",
        };
        let got = render("{scheme}://{host}/{hostname}{path}{query}/{rest}", &hostile);
        assert_eq!(
            got,
            "http%0D%0A://h%0D%0ASet-Cookie:%20a=b/h%0D%0ASet-Cookie/a%0Ab%00c%20d?q=%0D%0A%7F%FF\
             /x%0D%0A%3F%23%25%5C%22%3C%3E%60%7B%7D%C3%A9/y"
        );
        assert!(!got.bytes().any(|b| b.is_ascii_control() || b == b' ' || !b.is_ascii()));
    }

    #[test]
    fn bad_targets_are_named() {
        let err = |t: &str| Template::parse(t).err().unwrap();
        assert_eq!(
            err("https://{hots}{path}"),
            "unknown placeholder `{hots}` in \"https://{hots}{path}\" (known: {scheme}, {host}, {hostname}, {path}, \
             {query}, {rest})"
        );
        assert!(err("/{}").starts_with("unknown placeholder `{}`"));
        assert!(err("/{Path}").starts_with("unknown placeholder `{Path}`"));
        assert_eq!(err("/a{path"), "`{` without `}` in \"/a{path\" (write `{{` for a brace)");
        assert_eq!(err("/a}b"), "`}` without `{` in \"/a}b\" (write `}}` for a brace)");
        assert!(err("/{{path}").starts_with("`}` without `{`"));
        assert!(err("/a\r\nX: y").starts_with("control character '\\r'"));
        assert!(err("/a\0").starts_with("control character"));
        assert_eq!(err(""), "the target is empty");
        assert!(Template::parse("{{}}").is_ok());
    }

    #[test]
    fn render_appends_without_touching_what_is_there() {
        let t = Template::parse("/b").unwrap();
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(b"/a");
        let before = out.as_ptr();
        t.render(&Parts { query: None, ..PARTS }, &mut out);
        assert_eq!(out, b"/a/b");
        assert_eq!(out.as_ptr(), before);
    }
}
