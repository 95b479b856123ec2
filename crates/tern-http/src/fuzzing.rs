//! The properties the fuzz targets check (`fuzz/`), kept here so a short
//! smoke run of them is an ordinary test.

use crate::accept_encoding::{Coding, Preferences};
use crate::chunked::{Chunk, ChunkedDecoder};
use crate::request::{parse_head, Head, Limits, MAX_HEADERS};
use crate::response_head::{parse_response, Framing, Parsed, RequestKind};
use crate::{path, range};

/// Runs every parser on `data` and panics if a property fails.
pub fn check(data: &[u8]) {
    let limits = Limits::default();
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    if let Ok(Head::Complete(req)) = parse_head(data, &limits, &mut fields) {
        assert!(req.head_len <= data.len());
        assert!(req.path.starts_with('/') || req.path == "*" || req.path.is_empty());
        assert!(!req.request_line.contains('\r') && !req.request_line.contains('\n'));
        if req.path.starts_with('/') {
            let mut out = Vec::new();
            if path::normalize(req.path, &mut out).is_ok() {
                assert!(!out.starts_with(b"/") && !out.ends_with(b"/"));
                assert!(out.is_empty() || out.split(|&b| b == b'/').all(|s| !s.is_empty() && s != b"." && s != b".."));
                assert!(!out.iter().any(|&b| b == 0 || b == b'\\'));
            }
        }
        if let Some(value) = req.fields.range {
            let len = data.len() as u64;
            if let range::RangeDecision::Partial(ranges) = range::evaluate(value, len, 16) {
                assert!(!ranges.is_empty() && ranges.len() <= 16);
                assert!(ranges.iter().all(|r| r.start <= r.end && r.end < len));
            }
        }
        let offered = [Coding::Br, Coding::Gzip, Coding::Identity];
        if let Some(c) = Preferences::parse(req.values("accept-encoding")).choose(&offered) {
            assert!(offered.contains(&c));
        }
        check_chunked(&data[req.head_len..]);
    }
    check_chunked(data);
}

/// Runs the response parser on `data`, as the answer to each kind of
/// request, and panics if a property fails.
pub fn check_response(data: &[u8]) {
    let limits = Limits::default();
    for kind in [RequestKind::Plain, RequestKind::Head, RequestKind::Connect, RequestKind::Upgrade] {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let Ok(Parsed::Complete(r)) = parse_response(data, &limits, &mut fields, kind) else { continue };
        assert!(data[..r.head_len].ends_with(b"\r\n\r\n"));
        assert!((100..=599).contains(&r.status));
        assert!(!r.reason.iter().any(|&b| b == b'\r' || b == b'\n'));
        assert!(r.headers.iter().all(|h| !h.value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)));
        let count = |name| r.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).count();
        match r.framing {
            Framing::Chunked => assert_eq!((count("transfer-encoding"), count("content-length")), (1, 0)),
            Framing::Length(_) => assert_eq!((count("transfer-encoding"), count("content-length")), (0, 1)),
            Framing::Close | Framing::Tunnel => assert!(!r.keep_alive),
            Framing::None => {}
        }
        if kind == RequestKind::Head || r.is_interim() {
            assert_eq!(r.framing, Framing::None);
        }
        // The head alone parses the same, and one byte less is incomplete:
        // the partial and complete paths agree.
        let mut again = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match parse_response(&data[..r.head_len], &limits, &mut again, kind) {
            Ok(Parsed::Complete(same)) => assert_eq!((same.head_len, same.framing), (r.head_len, r.framing)),
            other => panic!("the head alone gave {other:?}"),
        }
        let mut again = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let shorter = parse_response(&data[..r.head_len - 1], &limits, &mut again, kind);
        assert!(matches!(shorter, Ok(Parsed::Partial)), "one byte short gave {shorter:?}");
        if r.framing == Framing::Chunked {
            check_chunked(&data[r.head_len..]);
        }
    }
}

/// Decoding must not depend on how the input is split.
fn check_chunked(body: &[u8]) {
    let whole = decode(body, body.len().max(1));
    assert!(whole.as_ref().is_ok_and(|(out, _)| out.len() <= body.len()) || whole.is_err());
    for step in [1, 3, 7] {
        assert_eq!(decode(body, step), whole, "split every {step} bytes");
    }
}

fn decode(body: &[u8], step: usize) -> Result<(Vec<u8>, bool), ()> {
    let mut dec = ChunkedDecoder::new();
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for piece in body.chunks(step) {
        pending.extend_from_slice(piece);
        let mut pos = 0;
        loop {
            match dec.decode(&pending[pos..]).map_err(|_| ())? {
                (n, Chunk::Data(d)) => {
                    out.extend_from_slice(d);
                    pos += n;
                }
                (n, Chunk::NeedMore) => {
                    pos += n;
                    break;
                }
                (_, Chunk::Done) => return Ok((out, true)),
            }
        }
        pending.drain(..pos);
    }
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    /// A short, deterministic fuzz smoke of the requests below, mutated by
    /// a fixed PRNG. The real campaign is `fuzz/`.
    #[test]
    fn fuzz_smoke() {
        smoke(
            &[
                b"GET /a/../b?x=1 HTTP/1.1\r\nHost: a\r\nRange: bytes=0-5,3-9,-2\r\nAccept-Encoding: gzip;q=0.5, br\r\n\r\n",
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\"\r\nhello\r\n0\r\nT: 1\r\n\r\n",
                b"GET http://[::1]:80/%2e%2e/x HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
            ],
            200_000,
            super::check,
        );
    }

    /// The same for upstream responses.
    #[test]
    fn fuzz_smoke_responses() {
        smoke(
            &[
                b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\nConnection: keep-alive\r\n\r\nhello",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\"\r\nhello\r\n0\r\nT: 1\r\n\r\n",
                b"HTTP/1.0 101 Switching Protocols\r\nUpgrade: x\r\n\r\n\x00\x01",
                b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 304 Not Modified\r\n\r\n",
            ],
            100_000,
            super::check_response,
        );
    }

    fn smoke(seeds: &[&[u8]], rounds: usize, check: fn(&[u8])) {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..rounds {
            let seed = seeds[(next() % seeds.len() as u64) as usize];
            let mut data = seed.to_vec();
            for _ in 0..1 + next() % 6 {
                let at = (next() % data.len() as u64) as usize;
                match next() % 4 {
                    0 => data[at] = next() as u8,
                    1 => data.insert(at, b"\r\n:;=-,/%\" \t0aF"[(next() % 15) as usize]),
                    2 => {
                        data.remove(at);
                    }
                    _ => data.truncate(at),
                }
                if data.is_empty() {
                    data.push(b'G');
                }
            }
            check(&data);
        }
    }
}
