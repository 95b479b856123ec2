//! `tern bench --h2`: HTTP/2 over TLS (ALPN `h2`) or over TCP by prior
//! knowledge (h2c), one session per connection of the worker.
//!
//! # Why the `h2` crate, driven without a runtime
//!
//! Framing, HPACK, stream states and flow control come from hyperium's `h2`
//! client, the implementation hyper, tonic and most of the Rust ecosystem
//! use: well kept, conformant, and already in the tree (tonic depends on
//! it), so `--h2` adds no crate to the build. The Rust sans-I/O HPACK and
//! frame crates are unmaintained (`hpack`, last released 2016) or one
//! project's internals. What they would save is the encoding of each
//! request's HEADERS (a block could be encoded once and replayed): about
//! 6 % of the generator's CPU in a profile (HPACK encoding and the header
//! map's clone), bought with stream states, flow control and the
//! RST_STREAM/GOAWAY rules written here — the part a benchmark must not get
//! wrong.
//!
//! `h2` is written for async runtimes, but needs none: its futures only
//! need their transport's `poll_read`/`poll_write`. `Wire` gives it the
//! worker's own non-blocking mio socket (through rustls for `https://`),
//! turning `WouldBlock` into `Pending`; the worker polls the session again
//! on the socket's next readiness event, so the waker is a no-op and no
//! thread, timer or channel is added. Each poll reads until the socket is
//! drained or writes until it is full, as the edge-triggered loop requires
//! (`h2` stops reading only when a read is pending or its write buffer is
//! full, and then a writable edge follows).
//!
//! What it costs: per request, a request head cloned into an
//! `http::Request` (a header map allocation), HPACK encoding (indexed after
//! the first request) and decoding, `h2`'s stream store behind a mutex
//! nobody else takes, and a poll of each stream in flight on the
//! connection after each read. Measured against h2o (1 KiB over TLS, 32
//! connections, one thread each, five seconds a run, six rounds in two
//! sessions, beside a running soak; process CPU from `time`): with 10
//! streams a connection 5.7–6.7 µs of CPU per request, h2load 4.7–5.4 µs
//! (1.18–1.27×: user time 4.0–4.9 µs against its 2.9–3.3, system time
//! about the same), at 0.95–1.5× h2load's requests/s; over HTTP/1.1
//! 8.0–10.6 µs pipelined 10 deep, 12.9–15.8 µs one request at a time (more
//! system calls per request).

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use h2::client::{Builder, Connection, ResponseFuture, SendRequest};
use h2::{Reason, RecvStream};
use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Uri};
use mio::net::TcpStream;
use rustls::{AlertDescription, ClientConnection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::plan::Plan;
use super::stats::ErrorClass;
use super::tls;

/// The ALPN protocol name of HTTP/2 over TLS.
pub const ALPN: &[u8] = b"h2";

/// Flow-control windows the client grants, per stream and per connection:
/// 2^30 - 1, as h2load's defaults, so that the server never waits for a
/// window update and the client sends one rarely.
const WINDOW: u32 = (1 << 30) - 1;

/// Header fields HTTP/2 forbids (RFC 9113 §8.2.2; `TE` too, but for
/// `trailers`); `Host` becomes `:authority`.
const CONNECTION_SPECIFIC: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"];

/// What every connection of the run shares: the planned requests as
/// HTTP/2 request heads, and the client's settings.
pub struct Client {
    requests: Vec<(Parts, Option<Bytes>)>,
    builder: Builder,
}

impl Client {
    /// The plan's requests as HTTP/2 heads: the URL's scheme, `Host` (or
    /// the URL's authority) as `:authority`, the other fields as given, less
    /// those HTTP/2 forbids (`Connection: close` of `--no-keepalive` among
    /// them: a connection then carries one request anyway).
    pub fn new(plan: &Plan) -> Result<Client, String> {
        let scheme = if plan.url.tls { "https" } else { "http" };
        let requests = plan
            .requests
            .iter()
            .map(|r| {
                let authority = r
                    .fields
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                    .map_or_else(|| plan.url.authority(), |(_, v)| v.clone());
                let uri = Uri::try_from(format!("{scheme}://{authority}{}", r.target))
                    .map_err(|e| format!("{}: not a URI for HTTP/2: {e}", r.label))?;
                let method = Method::from_bytes(r.method.as_bytes()).map_err(|e| format!("{}: {e}", r.label))?;
                let (mut parts, ()) =
                    Request::builder().method(method).uri(uri).body(()).expect("valid parts").into_parts();
                for (name, value) in &r.fields {
                    let te = name.eq_ignore_ascii_case("te") && !value.eq_ignore_ascii_case("trailers");
                    if te || CONNECTION_SPECIFIC.iter().any(|c| name.eq_ignore_ascii_case(c)) {
                        continue;
                    }
                    let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("{name}: {e}"))?;
                    let value = HeaderValue::from_str(value).map_err(|e| format!("{name}: {value:?}: {e}"))?;
                    parts.headers.append(name, value);
                }
                let body = (r.body_len > 0).then(|| Bytes::copy_from_slice(r.body()));
                Ok((parts, body))
            })
            .collect::<Result<_, String>>()?;
        let mut builder = Builder::new();
        builder.initial_window_size(WINDOW).initial_connection_window_size(WINDOW).enable_push(false);
        Ok(Client { requests, builder })
    }
}

/// `h2`'s transport: the worker's socket, and the TLS session over it.
///
/// Reads and writes never block: `WouldBlock` is `Pending`, and the worker
/// polls again when epoll reports the socket ready (the no-op waker is
/// never needed).
struct Wire {
    stream: TcpStream,
    tls: Option<Box<ClientConnection>>,
    /// The server's ALPN choice has been checked.
    alpn_checked: bool,
    /// Bytes read (frames, after TLS), for the report's transfer figure.
    received: Rc<Cell<u64>>,
}

fn pending_on_block<T>(result: io::Result<T>) -> Poll<io::Result<T>> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        other => Poll::Ready(other),
    }
}

impl Wire {
    /// Over TLS, the server must have chosen HTTP/2: an HTTP/1.1 answer
    /// is not a session, and a clear error says so.
    fn check_alpn(&mut self) -> io::Result<()> {
        if let Some(tls) = self.tls.as_ref().filter(|t| !self.alpn_checked && !t.is_handshaking()) {
            if tls.alpn_protocol() != Some(ALPN) {
                return Err(io::Error::other("the server did not select h2 by ALPN"));
            }
            self.alpn_checked = true;
        }
        Ok(())
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = match self.tls.as_mut() {
                Some(tls) => tls::read(tls, &mut self.stream, buf),
                None => self.stream.read(buf),
            };
            match n {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(n) => {
                    self.check_alpn()?;
                    self.received.set(self.received.get() + n as u64);
                    return Ok(n);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn write(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_mut() else {
            return self.stream.write_vectored(iov);
        };
        loop {
            let n = tls::write(tls, &mut self.stream, iov)?;
            // Nothing taken: the session's buffer is full of records the
            // socket did not take. Retry if it took them meanwhile.
            if n > 0 || iov.iter().all(|b| b.is_empty()) {
                return Ok(n);
            }
            if tls.wants_write() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }
}

impl AsyncRead for Wire {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let wire = self.get_mut();
        let n = std::task::ready!(pending_on_block(wire.read(buf.initialize_unfilled())))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        pending_on_block(self.get_mut().write(&[IoSlice::new(buf)]))
    }

    fn poll_write_vectored(self: Pin<&mut Self>, _: &mut Context<'_>, iov: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        pending_on_block(self.get_mut().write(iov))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let wire = self.get_mut();
        match wire.tls.as_mut() {
            Some(tls) => {
                tls::send(tls, &mut wire.stream)?;
                if tls.wants_write() {
                    Poll::Pending
                } else {
                    Poll::Ready(Ok(()))
                }
            }
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

type Handshake = Pin<Box<dyn Future<Output = Result<(SendRequest<Bytes>, Connection<Wire, Bytes>), h2::Error>>>>;

enum State {
    /// The preface and SETTINGS are on their way.
    Handshake(Handshake),
    /// (The connection boxed: it is most of the session's size, and a
    /// worker's connections are kept side by side.)
    Open { send: SendRequest<Bytes>, conn: Box<Connection<Wire, Bytes>> },
    /// The connection ended (its streams have their errors).
    Ended,
}

/// A request sent, until its response is complete.
enum Exchange {
    Head(ResponseFuture),
    Body { status: u16, body: RecvStream, bytes: u64 },
}

/// A complete response.
pub struct Answer {
    pub status: u16,
    pub body_bytes: u64,
}

/// One HTTP/2 connection: the `h2` session and its requests in flight, in
/// the order they were sent.
pub struct Session {
    state: State,
    exchanges: VecDeque<Exchange>,
    received: Rc<Cell<u64>>,
    /// The server sent GOAWAY: no new stream may start here.
    going_away: bool,
}

/// Polls with a waker that does nothing: the worker's event loop, not a
/// wake-up, decides when to poll again.
fn context() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

impl Session {
    /// Starts the session on a connected socket.
    pub fn start(client: &Client, stream: TcpStream, tls: Option<Box<ClientConnection>>) -> Session {
        let received = Rc::new(Cell::new(0));
        let wire = Wire { stream, tls, alpn_checked: false, received: received.clone() };
        let handshake = Box::pin(client.builder.handshake(wire));
        Session { state: State::Handshake(handshake), exchanges: VecDeque::new(), received, going_away: false }
    }

    /// Through the handshake.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Requests sent and not yet complete.
    pub fn in_flight(&self) -> usize {
        self.exchanges.len()
    }

    /// No new request may be sent on this connection.
    pub fn going_away(&self) -> bool {
        self.going_away
    }

    /// Bytes read since the last call.
    pub fn take_received(&self) -> u64 {
        self.received.replace(0)
    }

    /// Sends planned request `req` as a new stream, if the session can take
    /// one now (open, and under the server's concurrent-stream limit).
    /// Frames are written by the next [`Session::drive`].
    pub fn send(&mut self, client: &Client, req: usize) -> Result<bool, h2::Error> {
        let State::Open { send, .. } = &mut self.state else { return Ok(false) };
        match send.poll_ready(&mut context()) {
            Poll::Pending => return Ok(false),
            Poll::Ready(Err(e)) => {
                self.going_away = true;
                return Err(e);
            }
            Poll::Ready(Ok(())) => {}
        }
        let (parts, body) = &client.requests[req];
        let (response, mut stream) = send.send_request(Request::from_parts(parts.clone(), ()), body.is_none())?;
        if let Some(body) = body {
            stream.send_data(body.clone(), true)?;
        }
        self.exchanges.push_back(Exchange::Head(response));
        Ok(true)
    }

    /// Reads and writes what the socket allows. `Ok(true)`: the
    /// connection is still open.
    pub fn drive(&mut self) -> Result<bool, h2::Error> {
        let mut cx = context();
        if let State::Handshake(handshake) = &mut self.state {
            match handshake.as_mut().poll(&mut cx) {
                Poll::Pending => return Ok(true),
                Poll::Ready(Ok((send, conn))) => self.state = State::Open { send, conn: Box::new(conn) },
                Poll::Ready(Err(e)) => {
                    self.state = State::Ended;
                    return Err(e);
                }
            }
        }
        let State::Open { send, conn } = &mut self.state else { return Ok(false) };
        let result = Pin::new(&mut **conn).poll(&mut cx);
        // A GOAWAY shows in the next request's readiness.
        if matches!(send.poll_ready(&mut cx), Poll::Ready(Err(_))) {
            self.going_away = true;
        }
        match result {
            Poll::Pending => Ok(true),
            Poll::Ready(result) => {
                self.state = State::Ended;
                self.going_away = true;
                result.map(|()| false)
            }
        }
    }

    /// The response to the `i`-th request in flight, when complete; it then
    /// leaves the session.
    pub fn poll_exchange(&mut self, i: usize) -> Poll<Result<Answer, h2::Error>> {
        let result = poll_exchange(&mut self.exchanges[i]);
        if result.is_ready() {
            self.exchanges.remove(i);
        }
        result
    }
}

fn poll_exchange(exchange: &mut Exchange) -> Poll<Result<Answer, h2::Error>> {
    let mut cx = context();
    if let Exchange::Head(response) = exchange {
        let response = std::task::ready!(Pin::new(response).poll(&mut cx))?;
        let status = response.status().as_u16();
        *exchange = Exchange::Body { status, body: response.into_body(), bytes: 0 };
    }
    let Exchange::Body { status, body, bytes } = exchange else { unreachable!("the head was taken above") };
    loop {
        match std::task::ready!(body.poll_data(&mut cx)) {
            Some(data) => {
                let n = data?.len();
                *bytes += n as u64;
                // Give the window back, or a large body stalls.
                body.flow_control().release_capacity(n)?;
            }
            None => return Poll::Ready(Ok(Answer { status: *status, body_bytes: *bytes })),
        }
    }
}

/// What a failed request counts as; `None`: the server did not process it
/// (a graceful GOAWAY's streams above its last one), so it is sent again
/// on another connection, as after HTTP/1.1's `Connection: close`.
pub fn verdict(error: &h2::Error) -> Option<ErrorClass> {
    if error.is_go_away() && error.is_remote() && error.reason() == Some(Reason::NO_ERROR) {
        None
    } else if error.is_reset() && error.is_remote() {
        Some(ErrorClass::Reset)
    } else if error.is_go_away() && error.is_remote() {
        Some(ErrorClass::GoAway)
    } else {
        Some(ErrorClass::Read)
    }
}

/// Checks, before the run, that the server speaks HTTP/2, so that one
/// that does not is one clear error rather than a run of failures: over
/// TLS it must select `h2` by ALPN; over TCP (h2c) it must not answer the
/// connection preface in HTTP/1.x or close on it.
pub fn check_server(
    tls: Option<&Arc<rustls::ClientConfig>>,
    host: &str,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(), String> {
    let no = |why: String| Err(format!("the server at {addr} does not speak HTTP/2 {why}"));
    let Some(config) = tls else { return check_prior_knowledge(addr, timeout).or_else(no) };
    match tls::negotiate(config, host, addr, timeout) {
        Ok(Some(chosen)) if chosen == ALPN => Ok(()),
        Ok(Some(other)) => {
            no(format!("over TLS: it selected {:?} by ALPN, not \"h2\"", String::from_utf8_lossy(&other)))
        }
        Ok(None) => no("over TLS: it selected no protocol by ALPN (\"h2\" was offered)".into()),
        Err(e)
            if e.get_ref().and_then(|e| e.downcast_ref())
                == Some(&rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol)) =>
        {
            no("over TLS: it refused ALPN \"h2\" (alert no_application_protocol)".into())
        }
        Err(e) => Err(format!("TLS handshake with {addr}: {e}")),
    }
}

/// The client connection preface (RFC 9113 §3.4) and an empty SETTINGS
/// frame: what the probe sends, the only HTTP/2 bytes written here by hand.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// h2c by prior knowledge: an HTTP/1.x server answers the preface with an
/// HTTP/1.x error, or closes. A silent server is left to the run.
fn check_prior_knowledge(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    let fail = |e: io::Error| format!("(h2c): {e}");
    let mut socket = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(fail)?;
    socket.set_read_timeout(Some(timeout)).map_err(fail)?;
    socket.write_all(PREFACE).map_err(fail)?;
    let mut reply = [0u8; 8];
    match socket.read(&mut reply) {
        Ok(0) => Err("by prior knowledge (h2c): it closed the connection on the HTTP/2 preface".into()),
        Ok(n) if reply[..n].starts_with(b"HTTP/") => {
            Err("by prior knowledge (h2c): it answered the HTTP/2 preface in HTTP/1.x".into())
        }
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(()),
        Err(e) => Err(fail(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::plan::{RequestSpec, Url};

    #[test]
    fn requests_become_http2_heads() {
        let mut post = RequestSpec::new("POST", Url::parse("https://h:8443/form?x=1").unwrap());
        post.body = b"abc".to_vec();
        post.headers.push(("Host".into(), "example.org".into()));
        let get = RequestSpec::new("GET", Url::parse("https://h:8443/").unwrap());
        let extra = [("TE".to_string(), "gzip".to_string()), ("Accept".to_string(), "*/*".to_string())];
        // No keep-alive: the HTTP/1.1 form says Connection: close.
        let plan = Plan::build(&[post, get], &extra, false).unwrap();
        let client = Client::new(&plan).unwrap();
        let (parts, body) = &client.requests[0];
        assert_eq!(parts.method, Method::POST);
        assert_eq!(parts.uri, "https://example.org/form?x=1");
        let names: Vec<&str> = parts.headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["user-agent", "accept", "content-length"]);
        assert_eq!(parts.headers["content-length"], "3");
        assert_eq!(body.as_deref(), Some(&b"abc"[..]));
        let (parts, body) = &client.requests[1];
        assert_eq!((parts.method.as_str(), parts.uri.to_string().as_str()), ("GET", "https://h:8443/"));
        assert!(body.is_none());
    }
}
