//! The HTTP/2 floods of 2019–2024, each sent by a hostile client beside an
//! honest one (`tern bench --h2`, open loop): the honest client gets at
//! least 90 % of what it asked for, every answer a `200`, and the server's
//! memory stays bounded while the attacker sends as fast as loopback
//! allows and reads nothing.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::h2::{flood, frame, GET_ROOT};
use common::Tern;

/// What the honest client asks for: requests a second, for how long.
const RATE: u64 = 300;
const SPAN: Duration = Duration::from_secs(3);

fn serve(site: &common::Site, extra: &str) -> Tern {
    let config = format!("[http2]\nprotocols = [\"h2c\"]\n{extra}");
    Tern::start(&site.root, "auto", &config, &[])
}

/// `VmRSS` or `VmHWM` (the peak) of `pid`, in KiB.
fn memory_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The honest client's run (`tern bench --h2`, open loop at `RATE` for
/// `SPAN`, 2 connections of 4 streams) while `unit` floods the server:
/// its requests, its `200`s and its errors.
fn honest_beside(addr: SocketAddr, unit: &[u8]) -> (u64, u64, u64) {
    let url = format!("http://{addr}/small.txt");
    let bench = std::thread::spawn(move || {
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["bench", "--no-store", "--h2", "--json", "-c", "2", "-t", "1", "--streams", "4"])
            .args(["-R", &RATE.to_string(), "-d", &format!("{}s", SPAN.as_secs()), &url])
            .output()
            .expect("tern bench")
    });
    let sent = flood(addr, unit, SPAN + Duration::from_millis(500));
    assert!(sent > 0, "the flood could not even start");
    let out = bench.join().unwrap();
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let errors = r["errors"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    (r["requests"].as_u64().unwrap(), r["status"]["200"].as_u64().unwrap_or(0), errors)
}

/// Floods `unit` beside the honest client; checks what it got and that
/// the server's peak memory grew by less than 32 MiB.
fn survives(tern: &Tern, name: &str, unit: &[u8]) {
    let before = memory_kib(tern.pid(), "VmRSS");
    let (requests, ok, errors) = honest_beside(tern.addr, unit);
    let peak = memory_kib(tern.pid(), "VmHWM");
    let asked = RATE * SPAN.as_secs();
    assert!(
        requests * 10 >= asked * 9 && ok == requests && errors == 0,
        "{name}: the honest client got {ok} of {requests} answered 200 ({errors} errors), {asked} asked"
    );
    assert!(peak < before + 32 * 1024, "{name}: memory grew from {before} KiB to a peak of {peak} KiB");
}

#[test]
fn control_frame_floods_leave_an_honest_client_its_rate_in_bounded_memory() {
    let site = common::site();
    let tern = serve(&site, "");
    // PING: each asks for a PING ack (2019, CVE-2019-9512).
    survives(&tern, "PING flood", &frame(6, 0, 0, b"12345678"));
    // SETTINGS: each asks for a SETTINGS ack (CVE-2019-9515).
    survives(&tern, "SETTINGS flood", &frame(4, 0, 0, &[0, 4, 0, 1, 0, 0]));
    // WINDOW_UPDATE of the connection by 1, answered by nothing.
    survives(&tern, "WINDOW_UPDATE flood", &frame(8, 0, 0, &1u32.to_be_bytes()));
    // PRIORITY for streams never opened (CVE-2019-9513's kind of churn).
    let mut priorities = Vec::new();
    for i in 0..1000u32 {
        priorities.extend(frame(2, 0, 2 * i + 101, &[0, 0, 0, 0, 16]));
    }
    survives(&tern, "PRIORITY flood", &priorities);
    // Empty DATA frames on a stream left open (CVE-2019-9518).
    let mut open = frame(1, 0x4, 1, GET_ROOT);
    open.extend(frame(0, 0, 1, b"").repeat(1000));
    survives(&tern, "empty frames", &open);
}

#[test]
fn stream_floods_leave_an_honest_client_its_rate_in_bounded_memory() {
    let site = common::site();
    let tern = serve(&site, "");
    // Rapid reset (CVE-2023-44487): streams opened and cancelled at once.
    let mut resets = Vec::new();
    for i in 0..1000u32 {
        resets.extend(frame(1, 0x5, 2 * i + 1, GET_ROOT));
        resets.extend(frame(3, 0, 2 * i + 1, &8u32.to_be_bytes()));
    }
    survives(&tern, "rapid reset", &resets);
    // An HPACK bomb: a field of 4,000 bytes put in the dynamic table, then
    // named by its index (one byte) 4,000 times per block: 16 MB decoded
    // from 4 KB.
    let mut bombs = Vec::new();
    for i in 0..100u32 {
        let mut block = GET_ROOT.to_vec();
        if i == 0 {
            // Literal with incremental indexing, name `x`, value 4,000 bytes
            // (127 + 3,873: 0x7f, then 3,873 in 7-bit groups).
            block.extend_from_slice(b"\x40\x01x\x7f\xa1\x1e");
            block.extend(vec![b'b'; 4000]);
        }
        block.extend(std::iter::repeat_n(0xbe, 4000)); // index 62: that field
        bombs.extend(frame(1, 0x5, 2 * i + 1, &block));
    }
    survives(&tern, "HPACK bomb", &bombs);
    // CONTINUATION flood (2024): one header block that never ends.
    let mut flood = frame(1, 0x1, 1, GET_ROOT);
    let field = [b"\x00\x03x-a\x64".as_slice(), &[b'v'; 100]].concat().repeat(10);
    flood.extend(frame(9, 0, 1, &field).repeat(1000));
    survives(&tern, "CONTINUATION flood", &flood);
}

/// Past `max_concurrent_streams`, a stream is refused (`REFUSED_STREAM`,
/// which a client may retry) and the connection goes on.
#[test]
fn a_stream_past_the_concurrent_limit_is_refused() {
    use std::io::{Read, Write};
    let site = common::site();
    let tern = serve(&site, "max_concurrent_streams = 4\n");
    let mut s = std::net::TcpStream::connect(tern.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    // Five requests whose bodies never come: the fifth is one too many.
    let mut out = common::h2::preface();
    for i in 0..5u32 {
        out.extend(frame(1, 0x4, 2 * i + 1, b"\x83\x86\x84\x41\x09localhost"));
    }
    s.write_all(&out).unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    let resets: Vec<(u32, u32)> = common::h2::frames(&got)
        .into_iter()
        .filter(|(kind, _, _, p)| *kind == 3 && p.len() == 4)
        .map(|(_, _, stream, p)| (stream, u32::from_be_bytes(p.try_into().unwrap())))
        .collect();
    assert_eq!(resets, [(9, 7)], "RST_STREAM (stream, code) seen");
    assert!(common::h2::frames(&got).iter().all(|(kind, ..)| *kind != 7), "no GOAWAY");
}
