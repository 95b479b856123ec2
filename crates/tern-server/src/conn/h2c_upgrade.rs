//! `Upgrade: h2c` (RFC 7540 §3.2, `http2.upgrade`): an HTTP/1.1 request on
//! an address that speaks h2c asks to go on in HTTP/2; the server answers
//! `101 Switching Protocols`, and the request becomes stream 1 of the
//! session, answered there.
//!
//! The h2 crate cannot open a server connection on an upgraded request, so
//! the request is handed to it as the frame a client would have sent for
//! it: a `HEADERS` frame for stream 1, ending the stream, spliced in after
//! the client's preface and first `SETTINGS` (`Session::upgraded`). Its
//! fields are coded as HPACK literals that are never indexed, so the
//! dynamic table the client's own frames assume is untouched.
//!
//! Upgraded only when nothing else must be read first: no request body
//! (RFC 7540 §3.2 lets the server decline; such a request is answered in
//! HTTP/1.1), exactly one `HTTP2-Settings` that decodes. Its settings are
//! not applied separately: the client states them again in its preface's
//! `SETTINGS`, and the crate would acknowledge a second frame, which the
//! client does not expect.

use base64::Engine;
use tern_http::request::{BodyFraming, Request};

use super::h2::CONNECTION_FIELDS;

/// Largest frame the server accepts before `SETTINGS` say otherwise (RFC
/// 9113 §4.2): a request whose fields code to more is not upgraded.
const MAX_FRAME: usize = 16_384;

/// Fields the upgrade consumed or carries otherwise (`Host` as
/// `:authority`), not kept besides HTTP/1.1's connection fields (RFC 9113
/// §8.2.2).
const CONSUMED: [&str; 3] = ["http2-settings", "host", "te"];

/// The `HEADERS` frame standing for `req` on stream 1, when `req` asks to
/// upgrade to h2c and may.
pub(super) fn upgrade_frame(req: &Request<'_>) -> Option<Vec<u8>> {
    let upgrade = req.values("upgrade").flat_map(list).any(|t| t.eq_ignore_ascii_case(b"h2c"));
    let connection: Vec<&[u8]> = req.values("connection").flat_map(list).collect();
    let names = |name: &[u8]| connection.iter().any(|t| t.eq_ignore_ascii_case(name));
    let mut settings = req.values("http2-settings");
    let settings_ok = match (settings.next(), settings.next()) {
        (Some(s), None) => {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).is_ok_and(|payload| payload.len() % 6 == 0)
        }
        _ => false,
    };
    if !(upgrade && names(b"upgrade") && names(b"http2-settings") && settings_ok) || req.framing != BodyFraming::None {
        return None;
    }
    let mut block = Vec::with_capacity(256);
    // `:method`, `:scheme`, `:path`, `:authority`: literals naming static
    // table entries 2, 6, 4 and 1.
    literal_indexed(&mut block, 2, req.method_token.as_bytes());
    literal_indexed(&mut block, 6, b"http");
    let path = match req.query {
        Some(q) => format!("{}?{q}", req.path),
        None => req.path.to_string(),
    };
    literal_indexed(&mut block, 4, path.as_bytes());
    if let Some(host) = req.host {
        literal_indexed(&mut block, 1, host.as_bytes());
    }
    let dropped = |name: &str| CONNECTION_FIELDS.iter().chain(&CONSUMED).any(|d| name.eq_ignore_ascii_case(d));
    for h in req.headers.iter().filter(|h| !dropped(h.name)) {
        literal_new(&mut block, h.name.to_ascii_lowercase().as_bytes(), h.value);
    }
    if block.len() > MAX_FRAME {
        return None;
    }
    let mut frame = (block.len() as u32).to_be_bytes()[1..].to_vec();
    // HEADERS, END_STREAM | END_HEADERS, stream 1.
    frame.extend_from_slice(&[0x1, 0x5, 0, 0, 0, 1]);
    frame.extend_from_slice(&block);
    Some(frame)
}

/// The `101` that switches the connection.
pub(super) const SWITCHING: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";

/// The members of a comma-separated field value, trimmed.
fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty())
}

/// A literal field never indexed (RFC 7541 §6.2.3) naming static entry
/// `index`.
fn literal_indexed(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    integer(out, 4, 0x10, index);
    string(out, value);
}

/// A literal field never indexed with a new name (RFC 7541 §6.2.3).
fn literal_new(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x10);
    string(out, name);
    string(out, value);
}

/// A string literal, not Huffman-coded (RFC 7541 §5.2).
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 7, 0, s.len());
    out.extend_from_slice(s);
}

/// An integer with an `n`-bit prefix after the bits of `first` (RFC 7541
/// §5.1).
fn integer(out: &mut Vec<u8>, n: u32, first: u8, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_http::request::{parse_head, Head, Limits, MAX_HEADERS};

    fn frame_of(head: &str) -> Option<Vec<u8>> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let limits = Limits { max_request_line: 8192, max_head_bytes: 16384, max_headers: 100 };
        let Ok(Head::Complete(req)) = parse_head(head.as_bytes(), &limits, &mut fields) else { panic!("{head}") };
        upgrade_frame(&req)
    }

    const UPGRADE: &str = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAA\r\n";

    #[test]
    fn a_request_asking_to_upgrade_becomes_a_headers_frame_of_never_indexed_literals() {
        let got = frame_of(&format!("GET /a?b=1 HTTP/1.1\r\nHost: ex.org\r\n{UPGRADE}Accept: */*\r\n\r\n")).unwrap();
        let mut block = b"\x12\x03GET\x16\x04http\x14\x06/a?b=1\x11\x06ex.org".to_vec();
        block.extend_from_slice(b"\x10\x06accept\x03*/*");
        let mut want = vec![0, 0, block.len() as u8, 1, 5, 0, 0, 0, 1];
        want.extend_from_slice(&block);
        assert_eq!(got, want);
    }

    #[test]
    fn only_a_whole_upgrade_without_a_body_is_taken() {
        let ask = |extra: &str| frame_of(&format!("GET / HTTP/1.1\r\nHost: x\r\n{extra}\r\n")).is_some();
        assert!(ask(UPGRADE));
        assert!(ask("Connection: upgrade,http2-settings\r\nUpgrade: websocket, H2C\r\nHTTP2-Settings: \r\n"));
        assert!(!ask("Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAA\r\n"));
        assert!(!ask("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"));
        assert!(!ask("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2\r\nHTTP2-Settings: AAMAAABk\r\n"));
        assert!(!ask(&format!("{UPGRADE}HTTP2-Settings: AAMAAABkAAQAoAAA\r\n")));
        assert!(!ask("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAA\r\n"));
        assert!(!ask(&format!("{UPGRADE}Content-Length: 3\r\n")));
    }

    #[test]
    fn integers_past_their_prefix_take_more_bytes() {
        let mut out = Vec::new();
        integer(&mut out, 5, 0, 1337);
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        integer(&mut out, 7, 0, 127);
        assert_eq!(out, [127, 0]);
    }
}
