//! Request heads: framing, strict validation, and the few fields the server
//! reads on every request.
//!
//! Header fields are tokenised by `httparse`; the request line (so that
//! `HTTP/1.2` or `HTTP/2.0` can be answered as HTTP/1.1, as RFC 9112 §2.3
//! asks) and the framing rules that make smuggling possible are ours: bare CR
//! or LF, obs-fold, duplicate or malformed `Content-Length`, `Content-Length`
//! with `Transfer-Encoding`, a coding after `chunked`, a missing or repeated
//! `Host` — each is an error and the connection is closed after the answer.

use memchr::memchr;

use crate::fields::{list, parse_content_length, parse_section, trim_ows, ConnectionOptions, SectionError};
use crate::host::valid_authority;
use crate::method::Method;

/// Size limits applied while a head arrives.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest request line; longer is `414`.
    pub max_request_line: usize,
    /// Largest whole head (request line and fields); larger is `431`.
    pub max_head_bytes: usize,
    /// Most header fields; more is `431`. At most [`MAX_HEADERS`].
    pub max_headers: usize,
}

/// The most header fields a head may carry, whatever the configuration
/// (the parser's field table lives on the stack).
pub const MAX_HEADERS: usize = 128;

impl Default for Limits {
    fn default() -> Self {
        Limits { max_request_line: 8192, max_head_bytes: 16384, max_headers: 100 }
    }
}

/// Why a head was refused. Every variant but [`Error::Http09`] is answered
/// with its status and the connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// `400`; the text says why, for the error log.
    BadRequest(&'static str),
    /// `400`: the request line's version token is not `HTTP/d.d`. Told
    /// apart from [`Error::BadRequest`] because such a line is not HTTP/1.x
    /// at all: where HTTP/2 is spoken in clear text it is a broken preface.
    BadVersion,
    /// `414`.
    UriTooLong,
    /// `431`.
    HeadersTooLarge,
    /// `501`: an unregistered method or an unsupported transfer coding.
    NotImplemented(&'static str),
    /// `505`: HTTP/0.x with a version token.
    VersionNotSupported,
    /// `417`: an `Expect` other than `100-continue`.
    ExpectationFailed,
    /// A version-less (HTTP/0.9) request line: nothing can be answered to it,
    /// so the connection is dropped.
    Http09,
}

impl Error {
    /// The status to answer with, or `None` to close silently.
    pub fn status(self) -> Option<u16> {
        Some(match self {
            Error::BadRequest(_) | Error::BadVersion => 400,
            Error::UriTooLong => 414,
            Error::HeadersTooLarge => 431,
            Error::NotImplemented(_) => 501,
            Error::VersionNotSupported => 505,
            Error::ExpectationFailed => 417,
            Error::Http09 => return None,
        })
    }

    /// A short reason for the error log.
    pub fn reason(self) -> &'static str {
        match self {
            Error::BadRequest(why) | Error::NotImplemented(why) => why,
            Error::BadVersion => "invalid HTTP version",
            Error::UriTooLong => "request line too long",
            Error::HeadersTooLarge => "request head too large",
            Error::VersionNotSupported => "unsupported HTTP version",
            Error::ExpectationFailed => "unsupported expectation",
            Error::Http09 => "HTTP/0.9 request",
        }
    }
}

/// The protocol version a request is handled under. Any `HTTP/1.x` with
/// x ≥ 1 and any higher major version are handled as HTTP/1.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How the request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// The four request-target forms of RFC 9112 §3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetForm {
    Origin,
    Absolute,
    Authority,
    Asterisk,
}

/// Single-valued fields the server consults on most requests, found in the
/// one pass that validates the head.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fields<'a> {
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub if_unmodified_since: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
    pub content_type: Option<&'a [u8]>,
    /// List fields may repeat: these only say whether to look, with
    /// [`Request::values`].
    pub has_if_match: bool,
    pub has_if_none_match: bool,
    pub has_accept_encoding: bool,
}

/// A parsed and validated request head, borrowing the receive buffer.
#[derive(Debug)]
pub struct Request<'a> {
    /// The request line as received, without its CRLF (for the access log).
    pub request_line: &'a str,
    pub method: Method,
    pub method_token: &'a str,
    /// The request-target exactly as received.
    pub target: &'a str,
    pub form: TargetForm,
    /// The path, still percent-encoded (`/` for an absolute-form target
    /// without one, `*` for asterisk-form).
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub version: Version,
    /// The authority of an absolute-form target, else the `Host` field
    /// (RFC 9112 §3.2.2); `None` for HTTP/1.0 without either.
    pub host: Option<&'a str>,
    pub headers: &'a [httparse::Header<'a>],
    pub fields: Fields<'a>,
    pub framing: BodyFraming,
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// Bytes of the buffer the head occupied, leading empty lines included.
    pub head_len: usize,
}

impl<'a> Request<'a> {
    /// Every value of the field `name` (case-insensitive), in order.
    pub fn values<'r>(&'r self, name: &'r str) -> impl Iterator<Item = &'a [u8]> + 'r {
        self.headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name)).map(|h| trim_ows(h.value))
    }

    /// Does the request carry a body?
    pub fn has_body(&self) -> bool {
        !matches!(self.framing, BodyFraming::None | BodyFraming::Length(0))
    }
}

/// The result of looking at the bytes received so far.
#[allow(clippy::large_enum_variant)] // returned once per head, never stored
#[derive(Debug)]
pub enum Head<'a> {
    /// More bytes are needed. `line_complete` says whether a valid request
    /// line has arrived: a peer that closes now sent a truncated request
    /// (answered `400`); before that, a close is answered with silence.
    Partial {
        line_complete: bool,
    },
    Complete(Request<'a>),
}

/// Parses the head at the start of `buf`. `fields` is the caller's storage
/// for header fields (at least `limits.max_headers` long).
pub fn parse_head<'a>(
    buf: &'a [u8],
    limits: &Limits,
    fields: &'a mut [httparse::Header<'a>],
) -> Result<Head<'a>, Error> {
    // RFC 9112 §2.2: empty lines before a request line are ignored.
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    match buf.get(start) {
        Some(b'\n') => return Err(Error::BadRequest("bare LF")),
        None => return Ok(Head::Partial { line_complete: false }),
        Some(_) => {}
    }

    let Some(lf) = memchr(b'\n', &buf[start..]) else {
        if buf.len() - start > limits.max_request_line {
            return Err(Error::UriTooLong);
        }
        return Ok(Head::Partial { line_complete: false });
    };
    let line_end = start + lf;
    if lf == 0 || buf[line_end - 1] != b'\r' {
        return Err(Error::BadRequest("bare LF"));
    }
    if lf - 1 > limits.max_request_line {
        return Err(Error::UriTooLong);
    }
    let line = parse_request_line(&buf[start..line_end - 1])?;
    match parse_section(buf, start, line_end, limits.max_head_bytes, limits.max_headers, fields)? {
        None => Ok(Head::Partial { line_complete: true }),
        Some((headers, head_end)) => build_request(line, headers, head_end).map(Head::Complete),
    }
}

impl From<SectionError> for Error {
    fn from(err: SectionError) -> Self {
        match err {
            SectionError::TooLarge => Error::HeadersTooLarge,
            SectionError::Invalid(why) => Error::BadRequest(why),
        }
    }
}

struct RequestLine<'a> {
    line: &'a str,
    method: Method,
    method_token: &'a str,
    target: &'a str,
    version: Version,
}

/// `tchar` of RFC 9110 §5.6.2.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_target_byte(b: u8) -> bool {
    // Visible ASCII. A fragment should not be sent (RFC 9112 §3.2), but
    // user agents do; it is dropped, as every mainstream server does.
    (0x21..=0x7e).contains(&b)
}

fn parse_request_line(line: &[u8]) -> Result<RequestLine<'_>, Error> {
    let sp1 = memchr(b' ', line).ok_or(Error::BadRequest("malformed request line"))?;
    let method_token = &line[..sp1];
    if method_token.is_empty() || !method_token.iter().all(|&b| is_tchar(b)) {
        return Err(Error::BadRequest("invalid method"));
    }
    let rest = &line[sp1 + 1..];
    let Some(sp2) = memchr(b' ', rest) else {
        return Err(if !rest.is_empty() && rest.iter().all(|&b| is_target_byte(b)) {
            Error::Http09
        } else {
            Error::BadRequest("malformed request line")
        });
    };
    let target = &rest[..sp2];
    if target.is_empty() || !target.iter().all(|&b| is_target_byte(b)) {
        return Err(Error::BadRequest("invalid request target"));
    }
    let version = match &rest[sp2 + 1..] {
        [b'H', b'T', b'T', b'P', b'/', major @ b'0'..=b'9', b'.', minor @ b'0'..=b'9'] => match (major, minor) {
            (b'0', _) => return Err(Error::VersionNotSupported),
            (b'1', b'0') => Version::Http10,
            _ => Version::Http11,
        },
        _ => return Err(Error::BadVersion),
    };
    let method = Method::from_token(method_token).ok_or(Error::NotImplemented("unknown method"))?;
    // Both were checked to be ASCII above.
    let as_str = |b| std::str::from_utf8(b).map_err(|_| Error::BadRequest("non-ASCII request line"));
    Ok(RequestLine {
        line: as_str(line)?,
        method,
        method_token: as_str(method_token)?,
        target: as_str(target)?,
        version,
    })
}

struct Target<'a> {
    form: TargetForm,
    path: &'a str,
    query: Option<&'a str>,
    authority: Option<&'a str>,
}

/// Splits `path?query#fragment`, dropping the fragment.
fn split_query(s: &str) -> (&str, Option<&str>) {
    let s = s.split_once('#').map_or(s, |(before, _)| before);
    match s.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (s, None),
    }
}

fn classify_target(method: Method, target: &str) -> Result<Target<'_>, Error> {
    if target.starts_with('/') {
        let (path, query) = split_query(target);
        return Ok(Target { form: TargetForm::Origin, path, query, authority: None });
    }
    if target == "*" {
        if method != Method::Options {
            return Err(Error::BadRequest("asterisk-form is only for OPTIONS"));
        }
        return Ok(Target { form: TargetForm::Asterisk, path: "*", query: None, authority: None });
    }
    if method == Method::Connect {
        let port_present = target.rsplit_once(':').is_some_and(|(_, p)| !p.is_empty());
        if !port_present || !valid_authority(target.as_bytes(), false) {
            return Err(Error::BadRequest("invalid authority-form target"));
        }
        return Ok(Target { form: TargetForm::Authority, path: "", query: None, authority: Some(target) });
    }
    let (scheme, rest) = target.split_once("://").ok_or(Error::BadRequest("invalid request target"))?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(Error::BadRequest("unsupported URI scheme"));
    }
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    // RFC 9110 §4.2.4: userinfo in an http(s) URI is treated as an error.
    if authority.contains('@') {
        return Err(Error::BadRequest("userinfo in request target"));
    }
    if !valid_authority(authority.as_bytes(), false) {
        return Err(Error::BadRequest("invalid authority in request target"));
    }
    let (path, query) = split_query(&rest[auth_end..]);
    let path = if path.is_empty() { "/" } else { path };
    Ok(Target { form: TargetForm::Absolute, path, query, authority: Some(authority) })
}

fn build_request<'a>(
    line: RequestLine<'a>,
    headers: &'a [httparse::Header<'a>],
    head_len: usize,
) -> Result<Request<'a>, Error> {
    let target = classify_target(line.method, line.target)?;
    let mut fields = Fields::default();
    let mut host_field: Option<&[u8]> = None;
    let mut hosts = 0;
    let mut content_length: Option<u64> = None;
    let mut lengths = 0;
    let mut transfer_encoding = false;
    let mut chunked_last = false;
    let mut chunked_count = 0;
    let mut other_codings = false;
    let mut connection = ConnectionOptions::default();
    let mut expect_continue = false;

    for h in headers {
        let value = trim_ows(h.value);
        let name = h.name;
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        match name.len() {
            4 if is("host") => {
                hosts += 1;
                host_field = Some(value);
            }
            5 if is("range") => fields.range = Some(value),
            6 if is("expect") => {
                if !value.eq_ignore_ascii_case(b"100-continue") {
                    return Err(Error::ExpectationFailed);
                }
                expect_continue = true;
            }
            7 if is("referer") => fields.referer = Some(value),
            8 if is("if-match") => fields.has_if_match = true,
            8 if is("if-range") => fields.if_range = Some(value),
            10 if is("connection") => connection.add(value),
            10 if is("user-agent") => fields.user_agent = Some(value),
            12 if is("content-type") => fields.content_type = Some(value),
            13 if is("if-none-match") => fields.has_if_none_match = true,
            14 if is("content-length") => {
                lengths += 1;
                content_length = Some(parse_content_length(value).ok_or(Error::BadRequest("invalid Content-Length"))?);
            }
            15 if is("accept-encoding") => fields.has_accept_encoding = true,
            17 if is("transfer-encoding") => {
                transfer_encoding = true;
                if value.is_empty() {
                    return Err(Error::BadRequest("empty Transfer-Encoding"));
                }
                for coding in list(value).filter(|c| !c.is_empty()) {
                    chunked_last = coding.eq_ignore_ascii_case(b"chunked");
                    if chunked_last {
                        chunked_count += 1;
                    } else {
                        other_codings = true;
                    }
                }
            }
            17 if is("if-modified-since") => fields.if_modified_since = Some(value),
            19 if is("if-unmodified-since") => fields.if_unmodified_since = Some(value),
            _ => {}
        }
    }

    if hosts > 1 {
        return Err(Error::BadRequest("repeated Host"));
    }
    if line.version == Version::Http11 && hosts == 0 {
        return Err(Error::BadRequest("HTTP/1.1 request without Host"));
    }
    let host_field = match host_field {
        Some(v) if !valid_authority(v, true) => return Err(Error::BadRequest("invalid Host")),
        // Validated as ASCII reg-name or literal characters.
        Some(v) => Some(std::str::from_utf8(v).map_err(|_| Error::BadRequest("invalid Host"))?),
        None => None,
    };
    if lengths > 1 {
        return Err(Error::BadRequest("repeated Content-Length"));
    }
    let framing = if transfer_encoding {
        if lengths > 0 {
            return Err(Error::BadRequest("Content-Length with Transfer-Encoding"));
        }
        if line.version == Version::Http10 {
            return Err(Error::BadRequest("Transfer-Encoding in HTTP/1.0"));
        }
        if !chunked_last || chunked_count != 1 {
            return Err(Error::BadRequest("chunked is not the final transfer coding"));
        }
        if other_codings {
            return Err(Error::NotImplemented("unsupported transfer coding"));
        }
        BodyFraming::Chunked
    } else {
        match content_length {
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::None,
        }
    };
    let keep_alive = connection.persistent(line.version == Version::Http10);
    Ok(Request {
        request_line: line.line,
        method: line.method,
        method_token: line.method_token,
        target: line.target,
        form: target.form,
        path: target.path,
        query: target.query,
        version: line.version,
        host: target.authority.or(host_field),
        headers,
        fields,
        framing,
        keep_alive,
        expect_continue,
        head_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Head<'_>, Error> {
        // Leaked so the borrow can outlive this helper in tests.
        let fields = Box::leak(Box::new([httparse::EMPTY_HEADER; MAX_HEADERS]));
        parse_head(bytes, &Limits::default(), fields)
    }

    fn complete(bytes: &[u8]) -> Request<'_> {
        match parse(bytes) {
            Ok(Head::Complete(r)) => r,
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    fn status(bytes: &[u8]) -> Option<u16> {
        match parse(bytes) {
            Err(e) => e.status(),
            Ok(h) => panic!("accepted {h:?}"),
        }
    }

    #[test]
    fn simple_get() {
        let r = complete(b"GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nIf-None-Match: \"x\"\r\n\r\nNEXT");
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.path, "/a/b");
        assert_eq!(r.query, Some("x=1"));
        assert_eq!(r.host, Some("example.com"));
        assert!(r.keep_alive);
        assert!(r.fields.has_if_none_match);
        assert_eq!(r.head_len, 64);
        assert_eq!(r.framing, BodyFraming::None);
    }

    #[test]
    fn partial_heads() {
        assert!(matches!(parse(b"GET / HT"), Ok(Head::Partial { line_complete: false })));
        assert!(matches!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(Head::Partial { line_complete: true })));
        assert!(matches!(parse(b"\r\n\r"), Ok(Head::Partial { line_complete: false })));
        // An invalid field is refused before the head is complete.
        assert_eq!(status(b"GET / HTTP/1.1\r\nFoo\x01: x\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/1.1\r\nFoo: x\rBar"), Some(400));
    }

    #[test]
    fn versions() {
        assert_eq!(complete(b"GET / HTTP/1.0\r\n\r\n").version, Version::Http10);
        assert_eq!(complete(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n").version, Version::Http11);
        assert_eq!(complete(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n").version, Version::Http11);
        assert_eq!(status(b"GET / HTTP/0.9\r\n\r\n"), Some(505));
        assert_eq!(status(b"GET / HTTP/1.11\r\nHost: a\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/10.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/1.0  \r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / RTSP/1.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET /\r\n"), None);
        // h2spec's invalid HTTP/2 preface: a bad version, not any other 400.
        assert_eq!(parse(b"INVALID CONNECTION PREFACE\r\n\r\n").unwrap_err(), Error::BadVersion);
        assert_eq!(parse(b"GET /a b HTTP/1.1\r\n\r\n").unwrap_err(), Error::BadVersion);
        assert_eq!(parse(b"GET /\x01 HTTP/1.1\r\n\r\n").unwrap_err(), Error::BadRequest("invalid request target"));
    }

    #[test]
    fn request_line_errors() {
        assert_eq!(status(b"get / HTTP/1.0\r\n\r\n"), Some(501));
        assert_eq!(status(b"G ET / HTTP/1.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET\t/ HTTP/1.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/1.0\n\n"), Some(400));
        assert_eq!(status(b"GET /\x01 HTTP/1.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET /foo bar/ HTTP/1.1\r\n\r\n"), Some(400));
        assert_eq!(status(b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET http://foo@localhost/ HTTP/1.0\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET ftp://x/ HTTP/1.0\r\n\r\n"), Some(400));
    }

    #[test]
    fn target_forms() {
        let r = complete(b"GET http://hypnotoad.org?hail=all HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assert_eq!(
            (r.form, r.path, r.query, r.host),
            (TargetForm::Absolute, "/", Some("hail=all"), Some("hypnotoad.org"))
        );
        let r = complete(b"GET /a?b=1#frag HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((r.path, r.query), ("/a", Some("b=1")));
        let r = complete(b"GET /a#frag?x HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((r.path, r.query), ("/a", None));
        let r = complete(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(r.form, TargetForm::Asterisk);
        let r = complete(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
        assert_eq!(r.form, TargetForm::Authority);
    }

    #[test]
    fn framing() {
        let r = complete(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 003\r\n\r\nabc");
        assert_eq!(r.framing, BodyFraming::Length(3));
        let r = complete(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(r.framing, BodyFraming::Chunked);
        let bad: &[&[u8]] = &[
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nFoo: bar\r\n Content-Length: 38\r\n\r\n",
        ];
        for b in bad {
            assert_eq!(status(b), Some(400), "{:?}", String::from_utf8_lossy(b));
        }
        assert_eq!(status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), Some(501));
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: tea\r\n\r\n"), Some(417));
    }

    #[test]
    fn host_rules() {
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"), Some(400));
        assert_eq!(status(b"GET / HTTP/1.0\r\nHost: 0x7f.1\r\n\r\n"), Some(400));
        assert_eq!(complete(b"GET / HTTP/1.1\r\nHost:\r\n\r\n").host, Some(""));
        assert_eq!(complete(b"GET http://foo/ HTTP/1.0\r\nHost: bar\r\n\r\n").host, Some("foo"));
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!complete(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(!complete(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\t\r\n\r\n").keep_alive);
        assert!(!complete(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x, Close\r\n\r\n").keep_alive);
    }

    #[test]
    fn limits() {
        let limits = Limits { max_request_line: 16, max_head_bytes: 64, max_headers: 2 };
        let mut fields = [httparse::EMPTY_HEADER; 4];
        let r = parse_head(b"GET /aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n\r\n", &limits, &mut fields);
        assert_eq!(r.unwrap_err(), Error::UriTooLong);
        let mut fields = [httparse::EMPTY_HEADER; 4];
        let r = parse_head(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", &limits, &mut fields);
        assert_eq!(r.unwrap_err(), Error::HeadersTooLarge);
        let mut fields = [httparse::EMPTY_HEADER; 4];
        let r =
            parse_head(b"GET / HTTP/1.1\r\nA: 1111111111111111111111111111111111111111111111111", &limits, &mut fields);
        assert_eq!(r.unwrap_err(), Error::HeadersTooLarge);
    }
}
