//! Response heads from an upstream, parsed as strictly as requests.
//!
//! The reverse proxy relays what an upstream answers, so an upstream that
//! frames a response ambiguously could split responses or smuggle one past
//! tern. Every rule below refuses such a head; the proxy answers `502`,
//! closes the upstream connection and relays nothing of it:
//!
//! - the status line is `HTTP/1.x SP 3DIGIT SP reason-phrase` with a status
//!   of 100–599 and a reason of `HTAB / SP / VCHAR / obs-text` (RFC 9112 §4,
//!   RFC 9110 §15); the reason is ignored (RFC 9112 §4), so a line ending
//!   after the status is accepted, as nginx, HAProxy and Go's client do;
//! - fields as for requests (RFC 9112 §5): invalid bytes in names or values
//!   (RFC 9110 §5.1, §5.5), obs-fold (RFC 9112 §5.2), bare CR or LF
//!   (RFC 9112 §2.2), a head over the [`Limits`];
//! - `Content-Length` repeated, or a list of differing values, or not a
//!   number (RFC 9110 §8.6, RFC 9112 §6.3 rule 5);
//! - `Content-Length` with `Transfer-Encoding` (RFC 9112 §6.3 rule 3: a
//!   smuggling signal, so refused rather than letting chunked win);
//! - `Transfer-Encoding` other than exactly `chunked` (RFC 9112 §6.1: the
//!   proxy decodes chunked only), or in an HTTP/1.0 response (RFC 9112 §6.1:
//!   framing faulty);
//! - a 1xx with `Content-Length` or `Transfer-Encoding` (RFC 9110 §8.6,
//!   RFC 9112 §6.1): the proxy relays interim responses, and a recipient
//!   must not be led to expect a body after one;
//! - a `101` to a request that did not ask to upgrade (RFC 9110 §15.2.2).
//!
//! The body's framing then follows RFC 9112 §6.3: none after 1xx, 204, 304
//! or for a HEAD request; a tunnel after a `101` to an upgrade or a 2xx to
//! CONNECT; chunked; a single valid length; else until the upstream closes.

use memchr::memchr;

use crate::fields::{list, parse_content_length, parse_section, trim_ows, ConnectionOptions, SectionError};
use crate::request::{Limits, Version};

/// The request a response answers, as far as it decides the response's
/// framing (RFC 9112 §6.3 rules 1 and 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// Any other request.
    Plain,
    /// `HEAD`: no body, whatever the fields say.
    Head,
    /// `CONNECT`: a 2xx makes the connection a tunnel.
    Connect,
    /// A request with `Upgrade`: a `101` makes the connection a tunnel.
    Upgrade,
}

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body: 1xx, 204, 304, or the answer to HEAD.
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes; the connection cannot be reused.
    Close,
    /// No body: after the head the connection carries another protocol, both
    /// ways (a `101` to an upgrade, a 2xx to CONNECT).
    Tunnel,
}

/// Why a response head was refused. Each is answered `502`, the upstream
/// connection closed and nothing of the response relayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseError {
    /// Not `HTTP/1.x SP 3DIGIT SP reason` with a status of 100–599.
    StatusLine(&'static str),
    /// The head is over the [`Limits`].
    TooLarge,
    /// A malformed field: invalid bytes, obs-fold, bare CR or LF.
    Field(&'static str),
    /// Ambiguous or unsupported body framing, or an unasked-for `101`.
    Framing(&'static str),
}

impl ResponseError {
    /// A short reason for the error log.
    pub fn reason(self) -> &'static str {
        match self {
            ResponseError::StatusLine(why) | ResponseError::Field(why) | ResponseError::Framing(why) => why,
            ResponseError::TooLarge => "upstream response head too large",
        }
    }
}

impl From<SectionError> for ResponseError {
    fn from(err: SectionError) -> Self {
        match err {
            SectionError::TooLarge => ResponseError::TooLarge,
            SectionError::Invalid(why) => ResponseError::Field(why),
        }
    }
}

/// A parsed and validated response head, borrowing the receive buffer.
#[derive(Debug)]
pub struct ResponseHead<'a> {
    /// `HTTP/1.0`, or `HTTP/1.1` for any later minor version.
    pub version: Version,
    pub status: u16,
    /// As received (possibly empty, possibly obs-text).
    pub reason: &'a [u8],
    pub headers: &'a [httparse::Header<'a>],
    pub framing: Framing,
    /// Bytes of the buffer the head occupied.
    pub head_len: usize,
    /// The upstream connection may carry another exchange after this
    /// response's body: the version and `Connection` allow it and the body
    /// does not end with the connection.
    pub keep_alive: bool,
}

impl<'a> ResponseHead<'a> {
    /// Every value of the field `name` (case-insensitive), in order.
    pub fn values<'r>(&'r self, name: &'r str) -> impl Iterator<Item = &'a [u8]> + 'r {
        self.headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name)).map(|h| trim_ows(h.value))
    }

    /// An interim response (`100 Continue`, `103 Early Hints`, …): the final
    /// response follows on the same connection.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.framing != Framing::Tunnel
    }
}

/// The result of looking at the bytes received so far.
#[allow(clippy::large_enum_variant)] // returned once per head, never stored
#[derive(Debug)]
pub enum Parsed<'a> {
    /// More bytes are needed.
    Partial,
    Complete(ResponseHead<'a>),
}

/// Parses the response head at the start of `buf`, the answer to a
/// `request` of that kind. `fields` is the caller's storage for header
/// fields; `limits.max_request_line` bounds the status line.
pub fn parse_response<'a>(
    buf: &'a [u8],
    limits: &Limits,
    fields: &'a mut [httparse::Header<'a>],
    request: RequestKind,
) -> Result<Parsed<'a>, ResponseError> {
    // Whatever is not the start of an HTTP/1 response is refused at once,
    // not after a timeout.
    let prefix = buf.len().min(b"HTTP/1.".len());
    if buf[..prefix] != b"HTTP/1."[..prefix] {
        return Err(ResponseError::StatusLine("not an HTTP/1 status line"));
    }
    let Some(line_end) = memchr(b'\n', buf) else {
        if buf.len() > limits.max_request_line {
            return Err(ResponseError::TooLarge);
        }
        return Ok(Parsed::Partial);
    };
    if line_end == 0 || buf[line_end - 1] != b'\r' {
        return Err(ResponseError::StatusLine("bare LF"));
    }
    if line_end - 1 > limits.max_request_line {
        return Err(ResponseError::TooLarge);
    }
    let (version, status, reason) = parse_status_line(&buf[..line_end - 1])?;
    match parse_section(buf, 0, line_end, limits.max_head_bytes, limits.max_headers, fields)? {
        None => Ok(Parsed::Partial),
        Some((headers, head_len)) => {
            let (framing, keep_alive) = framing(version, status, headers, request)?;
            Ok(Parsed::Complete(ResponseHead { version, status, reason, headers, framing, head_len, keep_alive }))
        }
    }
}

/// `HTTP/1.x SP 3DIGIT [SP reason]` (RFC 9112 §4).
fn parse_status_line(line: &[u8]) -> Result<(Version, u16, &[u8]), ResponseError> {
    let (version, rest) = match line {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor @ b'0'..=b'9', b' ', rest @ ..] => {
            (if *minor == b'0' { Version::Http10 } else { Version::Http11 }, rest)
        }
        _ => return Err(ResponseError::StatusLine("invalid HTTP version")),
    };
    let (digits, reason) = match rest {
        [a, b, c] => ([*a, *b, *c], &rest[3..]),
        [a, b, c, b' ', reason @ ..] => ([*a, *b, *c], reason),
        _ => return Err(ResponseError::StatusLine("status is not three digits")),
    };
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(ResponseError::StatusLine("status is not three digits"));
    }
    let status = digits.iter().fold(0, |n, d| n * 10 + u16::from(d - b'0'));
    if !(100..=599).contains(&status) {
        return Err(ResponseError::StatusLine("status out of range"));
    }
    if !reason.iter().all(|&b| b == b'\t' || b >= b' ' && b != 0x7f) {
        return Err(ResponseError::StatusLine("invalid byte in reason phrase"));
    }
    Ok((version, status, reason))
}

/// The body's framing (RFC 9112 §6.3) and whether the connection outlives
/// it, after the framing fields are checked.
fn framing(
    version: Version,
    status: u16,
    headers: &[httparse::Header<'_>],
    request: RequestKind,
) -> Result<(Framing, bool), ResponseError> {
    let mut content_length = None;
    let mut transfer_encoding = false;
    let mut connection = ConnectionOptions::default();
    for h in headers {
        let value = trim_ows(h.value);
        if h.name.eq_ignore_ascii_case("content-length") {
            if content_length.is_some() {
                return Err(ResponseError::Framing("repeated Content-Length"));
            }
            // RFC 9110 §8.6: a list of one value repeated is that value.
            let mut values = list(value).map(parse_content_length);
            let first = values.next().flatten().ok_or(ResponseError::Framing("invalid Content-Length"))?;
            if !values.all(|n| n == Some(first)) {
                return Err(ResponseError::Framing("invalid Content-Length"));
            }
            content_length = Some(first);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if transfer_encoding || !value.eq_ignore_ascii_case(b"chunked") {
                return Err(ResponseError::Framing("Transfer-Encoding other than chunked"));
            }
            transfer_encoding = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            connection.add(value);
        }
    }
    if transfer_encoding && content_length.is_some() {
        return Err(ResponseError::Framing("Content-Length with Transfer-Encoding"));
    }
    if transfer_encoding && version == Version::Http10 {
        return Err(ResponseError::Framing("Transfer-Encoding in HTTP/1.0"));
    }
    let interim = (100..200).contains(&status);
    if interim && (transfer_encoding || content_length.is_some()) {
        return Err(ResponseError::Framing("1xx with body framing"));
    }
    let framing = match (status, request) {
        (101, RequestKind::Upgrade) => Framing::Tunnel,
        (101, _) => return Err(ResponseError::Framing("101 without an upgrade request")),
        (200..=299, RequestKind::Connect) => Framing::Tunnel,
        (_, RequestKind::Head) | (204 | 304, _) => Framing::None,
        _ if interim => Framing::None,
        _ if transfer_encoding => Framing::Chunked,
        _ => content_length.map_or(Framing::Close, Framing::Length),
    };
    let persistent = connection.persistent(version == Version::Http10);
    Ok((framing, persistent && !matches!(framing, Framing::Close | Framing::Tunnel)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::MAX_HEADERS;

    fn parse(bytes: &[u8], request: RequestKind) -> Result<Parsed<'_>, ResponseError> {
        // Leaked so the borrow can outlive this helper in tests.
        let fields = Box::leak(Box::new([httparse::EMPTY_HEADER; MAX_HEADERS]));
        parse_response(bytes, &Limits::default(), fields, request)
    }

    fn complete_as(bytes: &[u8], request: RequestKind) -> ResponseHead<'_> {
        match parse(bytes, request) {
            Ok(Parsed::Complete(r)) => r,
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    fn complete(bytes: &[u8]) -> ResponseHead<'_> {
        complete_as(bytes, RequestKind::Plain)
    }

    fn refused(bytes: &[u8]) -> ResponseError {
        match parse(bytes, RequestKind::Plain) {
            Err(e) => e,
            Ok(h) => panic!("accepted {h:?} for {:?}", String::from_utf8_lossy(bytes)),
        }
    }

    /// Each of `heads` is refused with an error of the kind `is_kind` accepts.
    fn refuse_each(heads: &[&[u8]], is_kind: fn(ResponseError) -> bool) {
        for head in heads {
            assert!(is_kind(refused(head)), "{:?}: {:?}", String::from_utf8_lossy(head), refused(head));
        }
    }

    #[test]
    fn simple_response() {
        let r = complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello");
        assert_eq!((r.version, r.status, r.reason), (Version::Http11, 200, &b"OK"[..]));
        assert_eq!(r.framing, Framing::Length(5));
        assert_eq!(r.head_len, 46);
        assert!(r.keep_alive);
        assert_eq!(r.values("x-a").collect::<Vec<_>>(), [b"b"]);
        assert!(!r.is_interim());
    }

    #[test]
    fn partial_heads() {
        for partial in [&b""[..], b"HT", b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nA: b\r\n\r"] {
            assert!(matches!(parse(partial, RequestKind::Plain), Ok(Parsed::Partial)), "{partial:?}");
        }
        // Refused before the head is complete.
        assert_eq!(refused(b"HTTP/2"), ResponseError::StatusLine("not an HTTP/1 status line"));
        assert_eq!(refused(b"SSH-2.0-OpenSSH"), ResponseError::StatusLine("not an HTTP/1 status line"));
        assert!(matches!(refused(b"HTTP/1.1 200 OK\r\nA\x01: b\r\n"), ResponseError::Field(_)));
    }

    #[test]
    fn status_lines() {
        assert_eq!(complete(b"HTTP/1.0 404 Not Found\r\n\r\n").version, Version::Http10);
        assert_eq!(complete(b"HTTP/1.2 200 OK\r\n\r\n").version, Version::Http11);
        assert_eq!(complete(b"HTTP/1.1 599 \r\n\r\n").reason, b"");
        assert_eq!(complete(b"HTTP/1.1 200\r\n\r\n").status, 200);
        assert_eq!(complete(b"HTTP/1.1 200 D\xe9j\xe0 vu\tok\r\n\r\n").reason, b"D\xe9j\xe0 vu\tok");
        refuse_each(
            &[
                &b"HTTP/1.1 2000 OK\r\n\r\n"[..],
                b"HTTP/1.1 20 OK\r\n\r\n",
                b"HTTP/1.1 099 OK\r\n\r\n",
                b"HTTP/1.1 600 OK\r\n\r\n",
                b"HTTP/1.1 2x0 OK\r\n\r\n",
                b"HTTP/1.1  200 OK\r\n\r\n",
                b"HTTP/1.1 200\tOK\r\n\r\n",
                b"HTTP/1.1 200 O\x00K\r\n\r\n",
                b"HTTP/1.1 200 O\x7fK\r\n\r\n",
                b"HTTP/1.1 200 O\rK\r\n\r\n",
                b"HTTP/1.10 200 OK\r\n\r\n",
                b"HTTP/1.1\r\n\r\n",
                b"HTTP/2.0 200 OK\r\n\r\n",
                b"HTTP/1.1 200 OK\n\r\n",
                b"http/1.1 200 OK\r\n\r\n",
            ],
            |e| matches!(e, ResponseError::StatusLine(_)),
        );
    }

    #[test]
    fn fields() {
        refuse_each(
            &[
                &b"HTTP/1.1 200 OK\r\nX-A: a\r\n folded\r\nContent-Length: 0\r\n\r\n"[..],
                b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nX A: b\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nX-A : b\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nX-A: b\nX-B: c\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nX-A: b\rX-B: c\r\n\r\n",
                b"HTTP/1.1 200 OK\r\n: b\r\n\r\n",
            ],
            |e| matches!(e, ResponseError::Field(_)),
        );
        assert_eq!(
            complete(b"HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\n\r\n").values("X-A").next(),
            Some(&b"caf\xc3\xa9"[..])
        );
    }

    #[test]
    fn limits() {
        let limits = Limits { max_request_line: 20, max_head_bytes: 64, max_headers: 2 };
        let mut fields = [httparse::EMPTY_HEADER; 4];
        let r = parse_response(b"HTTP/1.1 200 OOOOOOOOOOOOOOOOOOOOOOOOOO", &limits, &mut fields, RequestKind::Plain);
        assert_eq!(r.unwrap_err(), ResponseError::TooLarge);
        let mut fields = [httparse::EMPTY_HEADER; 4];
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n",
            &limits,
            &mut fields,
            RequestKind::Plain,
        );
        assert_eq!(r.unwrap_err(), ResponseError::TooLarge);
        let mut fields = [httparse::EMPTY_HEADER; 4];
        let long = b"HTTP/1.1 200 OK\r\nA: 11111111111111111111111111111111111111111111111111";
        let r = parse_response(long, &limits, &mut fields, RequestKind::Plain);
        assert_eq!(r.unwrap_err(), ResponseError::TooLarge);
    }

    #[test]
    fn framing_by_fields() {
        let framing = |b| complete(b).framing;
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n"), Framing::Length(7));
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n"), Framing::Length(7));
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"), Framing::Chunked);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\n\r\n"), Framing::Close);
        assert_eq!(framing(b"HTTP/1.0 200 OK\r\n\r\n"), Framing::Close);
        refuse_each(
            &[
                &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 5,\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
                b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"HTTP/1.1 103 Early Hints\r\nContent-Length: 0\r\n\r\n",
                b"HTTP/1.1 100 Continue\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
            ],
            |e| matches!(e, ResponseError::Framing(_)),
        );
        // The framing fields are checked even where no body follows.
        let head =
            parse(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", RequestKind::Head);
        assert!(matches!(head, Err(ResponseError::Framing(_))));
    }

    #[test]
    fn framing_by_status_and_request() {
        let framing = |b, kind| complete_as(b, kind).framing;
        use RequestKind::*;
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Head), Framing::None);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Head), Framing::None);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\n\r\n", Head), Framing::None);
        assert_eq!(framing(b"HTTP/1.1 204 No Content\r\n\r\n", Plain), Framing::None);
        assert_eq!(framing(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", Plain), Framing::None);
        assert_eq!(framing(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", Upgrade), Framing::Tunnel);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Upgrade), Framing::Length(5));
        assert_eq!(framing(b"HTTP/1.1 200 Connection established\r\n\r\n", Connect), Framing::Tunnel);
        assert_eq!(framing(b"HTTP/1.1 407 Auth\r\nContent-Length: 2\r\n\r\n", Connect), Framing::Length(2));
        let early = complete(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n");
        assert_eq!((early.framing, early.is_interim()), (Framing::None, true));
        assert!(complete(b"HTTP/1.1 100 Continue\r\n\r\n").is_interim());
        assert!(!complete_as(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", Upgrade).is_interim());
    }

    #[test]
    fn keep_alive_rules() {
        let keep_alive = |b| complete(b).keep_alive;
        assert!(keep_alive(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(keep_alive(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
        assert!(keep_alive(b"HTTP/1.1 204 No Content\r\n\r\n"));
        assert!(!keep_alive(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: x, Close\r\n\r\n"));
        assert!(!keep_alive(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!keep_alive(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(keep_alive(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!keep_alive(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!complete_as(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", RequestKind::Upgrade).keep_alive);
    }
}
