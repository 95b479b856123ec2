//! A tiny, independent HTTP/1.1 server for testing the load generator.
//!
//! It shares no code with tern or with the generator, so the two cannot agree
//! on a mistake. Std threads and std::net only: one thread per connection,
//! keep-alive and pipelining, and every response shaped by the query string:
//!
//! - `delay_ms=N`: sleep N ms before answering (on top of the server default);
//! - `size=N`: body bytes (default 100);
//! - `mode=length|chunked|close`: Content-Length, chunked (`chunk=N` bytes a
//!   chunk, default 1000) or close-delimited (no length, then close);
//! - `status=N`: the status code (default 200).
//!
//! It counts what it serves, for the tests to compare with the generator.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::HashMap;
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
pub struct Counters {
    /// Requests answered.
    pub requests: AtomicU64,
    /// Connections that carried at least one request.
    pub connections: AtomicU64,
    /// Requests that were already buffered behind another one: pipelining.
    pub pipelined: AtomicU64,
    /// Requests by path (without the query).
    pub paths: Mutex<HashMap<String, u64>>,
}

pub struct TinyServer {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
}

impl TinyServer {
    /// Listens on 127.0.0.1, an ephemeral port; serves until the process ends.
    pub fn start() -> TinyServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        let shared = Arc::clone(&counters);
        std::thread::spawn(move || serve(listener, shared));
        TinyServer { addr, counters }
    }

    pub fn url(&self, target: &str) -> String {
        format!("http://{}{}", self.addr, target)
    }

    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> u64 {
        self.counters.connections.load(Ordering::SeqCst)
    }

    pub fn pipelined(&self) -> u64 {
        self.counters.pipelined.load(Ordering::SeqCst)
    }

    pub fn path_count(&self, path: &str) -> u64 {
        self.counters.paths.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

pub fn serve(listener: TcpListener, counters: Arc<Counters>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let counters = Arc::clone(&counters);
        std::thread::spawn(move || {
            let _ = connection(stream, &counters);
        });
    }
}

struct Request {
    target: String,
    head_only: bool,
    close: bool,
}

/// Parses one request from the front of `buf`; returns it and its length.
fn parse_request(buf: &[u8]) -> Option<(Request, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let mut parts = lines.next()?.split(' ');
    let method = parts.next()?;
    let target = parts.next()?.to_string();
    let mut body = 0;
    let mut close = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            body = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    let total = end + 4 + body;
    (buf.len() >= total).then(|| (Request { target, head_only: method == "HEAD", close }, total))
}

fn connection(mut stream: TcpStream, counters: &Counters) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut first = true;
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut out = BufWriter::new(&stream);
        let mut answered = 0;
        while let Some((request, len)) = parse_request(&buf) {
            buf.drain(..len);
            if first {
                counters.connections.fetch_add(1, Ordering::SeqCst);
                first = false;
            }
            if answered > 0 {
                counters.pipelined.fetch_add(1, Ordering::SeqCst);
            }
            answered += 1;
            let keep_open = respond(&mut out, &request, counters)?;
            if !keep_open {
                out.flush()?;
                return Ok(());
            }
        }
        out.flush()?;
    }
}

/// Writes the response; returns whether the connection stays open.
fn respond(out: &mut impl Write, request: &Request, counters: &Counters) -> std::io::Result<bool> {
    let (path, query) = request.target.split_once('?').unwrap_or((&request.target, ""));
    let params: HashMap<&str, &str> = query.split('&').filter_map(|p| p.split_once('=')).collect();
    let num = |key: &str, default: u64| params.get(key).and_then(|v| v.parse().ok()).unwrap_or(default);
    let delay = num("delay_ms", 0);
    let size = num("size", 100) as usize;
    let status = num("status", 200);
    let mode = params.get("mode").copied().unwrap_or("length");
    if delay > 0 {
        // Flush what is already answered so one slow response does not hold
        // back the ones before it.
        out.flush()?;
        std::thread::sleep(Duration::from_millis(delay));
    }
    counters.requests.fetch_add(1, Ordering::SeqCst);
    *counters.paths.lock().unwrap().entry(path.to_string()).or_insert(0) += 1;
    let body = vec![b'x'; size];
    write!(out, "HTTP/1.1 {status} Test\r\nServer: tiny\r\n")?;
    if request.close {
        write!(out, "Connection: close\r\n")?;
    }
    match mode {
        "chunked" => {
            write!(out, "Transfer-Encoding: chunked\r\n\r\n")?;
            if !request.head_only {
                for piece in body.chunks(num("chunk", 1000).max(1) as usize) {
                    write!(out, "{:x};ext=1\r\n", piece.len())?;
                    out.write_all(piece)?;
                    write!(out, "\r\n")?;
                }
                write!(out, "0\r\nX-Trailer: yes\r\n\r\n")?;
            }
        }
        "close" => {
            if !request.close {
                write!(out, "Connection: close\r\n")?;
            }
            write!(out, "\r\n")?;
            if !request.head_only {
                out.write_all(&body)?;
            }
            return Ok(false);
        }
        _ => {
            write!(out, "Content-Length: {size}\r\n\r\n")?;
            if !request.head_only {
                out.write_all(&body)?;
            }
        }
    }
    Ok(!request.close)
}
