//! Raw HTTP/2 frames for the tests that play a hostile client: what no
//! well-behaved client library would send.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The connection preface (RFC 9113 §3.4) and an empty `SETTINGS`.
pub fn preface() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, b""));
    out
}

/// An HTTP/2 frame: its 9-byte header and `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `GET /` for `localhost`, HPACK-coded (indexed `:method`, `:scheme`,
/// `:path`; `:authority` literal).
pub const GET_ROOT: &[u8] = b"\x82\x86\x84\x41\x09localhost";

/// Opens an h2c connection to `addr`, sends the preface and `attack`, and
/// reads until the server closes (or 10 s pass); returns the `GOAWAY`'s
/// error code, if one came, and the `HEADERS` frames that came.
pub fn attack(addr: SocketAddr, attack: &[u8]) -> (Option<u32>, usize) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = preface();
    out.extend_from_slice(attack);
    // The server may stop reading (and close) before all of it is sent.
    let _ = s.write_all(&out);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let (mut goaway, mut headers) = (None, 0);
    for (kind, _, _, payload) in frames(&got) {
        match kind {
            1 => headers += 1,
            7 if payload.len() >= 8 => goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap())),
            _ => {}
        }
    }
    (goaway, headers)
}

/// The frames in `bytes`: kind, flags, stream and payload (the last one's
/// cut short when not all of it is there).
pub fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, &[u8])> {
    let (mut at, mut out) = (0, Vec::new());
    while at + 9 <= bytes.len() {
        let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
        let stream = u32::from_be_bytes(bytes[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        out.push((bytes[at + 3], bytes[at + 4], stream, &bytes[at + 9..(at + 9 + len).min(bytes.len())]));
        at += 9 + len;
    }
    out
}

/// Sends `unit` over and over on an h2c connection to `addr` for `span`,
/// reading nothing (the server's answers pile up on its side); returns the
/// bytes it could send.
pub fn flood(addr: SocketAddr, unit: &[u8], span: Duration) -> usize {
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = socket2::SockRef::from(&s).set_recv_buffer_size(4096);
    s.set_write_timeout(Some(Duration::from_millis(100))).unwrap();
    let batch = unit.repeat((64 * 1024 / unit.len()).max(1));
    let mut sent = 0;
    if s.write_all(&preface()).is_err() {
        return 0;
    }
    let end = Instant::now() + span;
    while Instant::now() < end {
        match s.write(&batch) {
            Ok(n) => sent += n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    sent
}
