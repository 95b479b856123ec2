//! An upstream's response head, read as strictly as a client's request:
//! a status line `HTTP/1.x NNN reason`, fields httparse accepts (no
//! obs-fold, no invalid bytes), and framing without ambiguity (RFC 9112
//! §6.3): a response with two Content-Lengths, Content-Length beside
//! Transfer-Encoding, or a Transfer-Encoding other than `chunked` is
//! refused, so nothing of it can be smuggled through the proxy.

/// How the body of a response is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (1xx, 204, 304, the answer to HEAD).
    None,
    Length(u64),
    Chunked,
    /// Until the server closes.
    Close,
}

/// A complete head, by byte ranges into the buffer it was read from.
#[derive(Debug)]
pub struct Parsed {
    pub status: u16,
    pub head_len: usize,
    pub framing: Framing,
    /// The `Content-Length` announced (also for a body-less answer to HEAD).
    pub length: Option<u64>,
    /// The connection may carry another request.
    pub keep_alive: bool,
    fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl Parsed {
    /// Every field, as `(name, value)` within `buf`.
    pub fn fields<'b>(&self, buf: &'b [u8]) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + use<'_, 'b> {
        self.fields.iter().map(move |(n, v)| (&buf[n.clone()], &buf[v.clone()]))
    }

    /// The values of the fields named `name`.
    pub fn values<'b>(&self, buf: &'b [u8], name: &'b [u8]) -> impl Iterator<Item = &'b [u8]> + use<'_, 'b> {
        self.fields(buf).filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }
}

/// Most header fields in a response head.
const MAX_FIELDS: usize = 128;

/// The head at the start of `buf`: `Ok(None)` while incomplete, `Err` with
/// why it is refused. `head_request`: the request was a HEAD (no body).
pub fn parse(buf: &[u8], head_request: bool) -> Result<Option<Parsed>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut res = httparse::Response::new(&mut headers);
    let head_len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err("too many header fields"),
        Err(_) => return Err("a malformed response head"),
    };
    let status = res.code.ok_or("no status")?;
    if !(100..=599).contains(&status) {
        return Err("a status out of range");
    }
    // httparse reads `HTTP/1.x` only; it lets a status line without a
    // reason through, which RFC 9112 allows (the space stays).
    let version = res.version.ok_or("no version")?;
    let base = buf.as_ptr() as usize;
    let range = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        start..start + s.len()
    };
    let mut fields = Vec::with_capacity(res.headers.len());
    let (mut length, mut chunked, mut close, mut keep) = (None::<u64>, false, false, false);
    for h in res.headers.iter() {
        let value = h.value;
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err("a forbidden byte in a field value");
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            for part in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                let n = decimal(part).ok_or("an invalid Content-Length")?;
                if length.is_some_and(|l| l != n) {
                    return Err("two different Content-Lengths");
                }
                length = Some(n);
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if chunked || !value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err("a Transfer-Encoding other than chunked");
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        fields.push((range(h.name.as_bytes()), range(value)));
    }
    if chunked && length.is_some() {
        return Err("Content-Length with Transfer-Encoding");
    }
    let bodiless = head_request || status < 200 || status == 204 || status == 304;
    let framing = match (bodiless, chunked, length) {
        (true, _, _) => Framing::None,
        (false, true, _) => Framing::Chunked,
        (false, false, Some(n)) => Framing::Length(n),
        (false, false, None) => Framing::Close,
    };
    let keep_alive = framing != Framing::Close && !close && (version == 1 || keep);
    Ok(Some(Parsed { status, head_len, framing, length, keep_alive, fields }))
}

fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing(head: &str) -> Result<Framing, &'static str> {
        parse(head.as_bytes(), false).map(|p| p.expect("a complete head").framing)
    }

    #[test]
    fn framing_by_rfc_9112() {
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), Ok(Framing::Length(5)));
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n"), Ok(Framing::Length(5)));
        assert_eq!(framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), Ok(Framing::Chunked));
        assert_eq!(framing("HTTP/1.0 200 OK\r\n\r\n"), Ok(Framing::Close));
        assert_eq!(framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"), Ok(Framing::None));
        let head = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).unwrap().unwrap();
        assert_eq!((head.framing, head.length), (Framing::None, Some(9)));
        assert!(matches!(parse(b"HTTP/1.1 200 OK\r\nContent-Len", false), Ok(None)));
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/2.0 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX\0: a\r\n\r\n",
        ] {
            assert!(parse(bad.as_bytes(), false).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn keep_alive_by_version_and_connection() {
        let ka = |h: &str| parse(h.as_bytes(), false).unwrap().unwrap().keep_alive;
        assert!(ka("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(!ka("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"));
        assert!(!ka("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(ka("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"));
        assert!(!ka("HTTP/1.1 200 OK\r\n\r\n"));
    }
}
