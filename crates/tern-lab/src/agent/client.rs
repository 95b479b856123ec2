//! The master's side of an agent: synchronous calls, each with a deadline,
//! errors that name the agent, and the timed loops the rpc suite measures.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use super::access::Access;
use super::proto::agent_client::AgentClient;
use super::proto::{BenchRequest, Empty, FetchRequest, Need, PeerPorts, PeerRequest, ProbeRequest};
use super::timeouts::{CALL_TIMEOUT, CONNECT_TIMEOUT, KEEPALIVE, SLACK};
use crate::probe::report::ProbeReport;
use crate::probe::stopwatch::{now_ns, Interval};
use crate::probe::suites::net::PeerAddrs;

/// Puts the token on every call.
#[derive(Clone)]
struct Auth(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// A connected agent.
pub struct Agent {
    /// As the user named it (HOST:PORT).
    pub name: String,
    rt: tokio::runtime::Runtime,
    client: AgentClient<InterceptedService<Channel, Auth>>,
}

/// An error about agent `name`, saying what failed.
fn failed(name: &str, what: &str, status: &Status) -> io::Error {
    let kind = match status.code() {
        tonic::Code::Unauthenticated => io::ErrorKind::PermissionDenied,
        tonic::Code::DeadlineExceeded => io::ErrorKind::TimedOut,
        tonic::Code::Unavailable => io::ErrorKind::ConnectionAborted,
        _ => io::ErrorKind::Other,
    };
    let why = match status.code() {
        tonic::Code::Unauthenticated => format!("refused: {}", status.message()),
        tonic::Code::Unavailable => format!("unreachable or gone ({})", status.message()),
        tonic::Code::DeadlineExceeded => "no answer before the deadline".to_string(),
        _ => match std::error::Error::source(status) {
            Some(cause) => format!("{}: {}", status.message(), causes(cause)),
            None => status.message().to_string(),
        },
    };
    io::Error::new(kind, format!("agent {name}: {what}: {why}"))
}

/// An error and its causes, outermost first, without repeats (the rustls
/// reason for a refused certificate is a few levels down).
fn causes(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

impl Agent {
    /// Connects to the agent at `addr` (HOST:PORT): over TLS, verified
    /// against `access.ca_pem`, when that is given, else in plain HTTP/2.
    pub fn connect(addr: &str, access: &Access) -> io::Result<Agent> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let scheme = if access.ca_pem.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("agent {addr}: bad address: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true);
        if let Some(ca) = &access.ca_pem {
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            endpoint = endpoint.tls_config(tls).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("agent {addr}: TLS: {}", causes(&e)))
            })?;
        }
        let channel = rt.block_on(endpoint.connect()).map_err(|e| {
            io::Error::new(io::ErrorKind::ConnectionRefused, format!("agent {addr}: cannot connect: {}", causes(&e)))
        })?;
        let bearer: MetadataValue<_> = format!("Bearer {}", access.token)
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the token is not valid in a header"))?;
        let auth = Auth(bearer);
        let limit = super::server::MAX_TRANSFER as usize + 1024;
        let client = AgentClient::with_interceptor(channel, auth)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        let mut agent = Agent { name: addr.to_string(), rt, client };
        // A first call checks the token; and an agent that speaks TLS,
        // called in plaintext, fails here, where the reason can be guessed.
        agent.null().map_err(|e| match access.ca_pem {
            None if e.kind() != io::ErrorKind::PermissionDenied => {
                io::Error::new(e.kind(), format!("{e} (if the agent uses TLS, give --agent-ca)"))
            }
            _ => e,
        })?;
        Ok(agent)
    }

    /// Runs `call` with a deadline: sent to the agent (grpc-timeout) and
    /// enforced here, so a silent agent cannot hang the master.
    fn within<T>(
        &mut self,
        deadline: Duration,
        what: &str,
        call: impl Future<Output = Result<T, Status>>,
    ) -> io::Result<T> {
        match self.rt.block_on(async { tokio::time::timeout(deadline, call).await }) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(status)) => Err(failed(&self.name, what, &status)),
            Err(_) => Err(failed(&self.name, what, &Status::deadline_exceeded(""))),
        }
    }

    fn request<T>(msg: T, deadline: Duration) -> Request<T> {
        let mut req = Request::new(msg);
        req.set_timeout(deadline);
        req
    }

    /// One null call (also how a connection's token is checked).
    pub fn null(&mut self) -> io::Result<()> {
        let mut c = self.client.clone();
        self.within(CALL_TIMEOUT, "null call", async move { c.null(Self::request(Empty {}, CALL_TIMEOUT)).await })?;
        Ok(())
    }

    /// `n` null calls in one interval.
    pub fn timed_null(&mut self, n: u64) -> io::Result<Interval> {
        let mut c = self.client.clone();
        let deadline = CALL_TIMEOUT + CALL_TIMEOUT * (n as u32 / 1000);
        self.within(deadline, "null calls", async move {
            let t0 = now_ns();
            for _ in 0..n {
                c.null(Self::request(Empty {}, CALL_TIMEOUT)).await?;
            }
            Ok(Interval { ns: now_ns() - t0, clock_pairs: 1, loop_iters: n })
        })
    }

    /// `n` eager fetches of `size` bytes in one interval.
    pub fn timed_fetch(&mut self, n: u64, size: u64) -> io::Result<Interval> {
        let mut c = self.client.clone();
        let deadline = CALL_TIMEOUT + CALL_TIMEOUT * (n as u32 / 100);
        self.within(deadline, "fetch", async move {
            let t0 = now_ns();
            for _ in 0..n {
                let got = c.fetch(Self::request(FetchRequest { size }, CALL_TIMEOUT)).await?.into_inner();
                if got.data.len() as u64 != size {
                    return Err(Status::data_loss(format!("asked {size} bytes, got {}", got.data.len())));
                }
            }
            Ok(Interval { ns: now_ns() - t0, clock_pairs: 1, loop_iters: n })
        })
    }

    /// `n` lazy transfers in one interval, each one call in which the agent
    /// answers `pieces` needs of `size` bytes, one after the other.
    pub fn timed_lazy(&mut self, n: u64, pieces: u64, size: u64) -> io::Result<Interval> {
        let mut c = self.client.clone();
        let deadline = CALL_TIMEOUT + CALL_TIMEOUT * ((n * pieces) as u32 / 100);
        self.within(deadline, "lazy transfer", async move {
            let t0 = now_ns();
            for _ in 0..n {
                let (tx, rx) = tokio::sync::mpsc::channel::<Need>(1);
                let needs = tokio_stream::wrappers::ReceiverStream::new(rx);
                tx.send(Need { size }).await.map_err(|_| Status::aborted("stream closed"))?;
                let mut replies = c.lazy(Self::request(needs, CALL_TIMEOUT)).await?.into_inner();
                for i in 0..pieces {
                    let piece = replies.message().await?.ok_or_else(|| Status::data_loss("stream ended early"))?;
                    if piece.data.len() as u64 != size {
                        return Err(Status::data_loss("short piece"));
                    }
                    if i + 1 < pieces {
                        tx.send(Need { size }).await.map_err(|_| Status::aborted("stream closed"))?;
                    }
                }
                drop(tx);
                while replies.message().await?.is_some() {}
            }
            Ok(Interval { ns: now_ns() - t0, clock_pairs: 1, loop_iters: n })
        })
    }

    /// Runs probe suites on the agent.
    pub fn probe(
        &mut self,
        suites: &[String],
        samples: usize,
        interval: Duration,
        quick: bool,
    ) -> io::Result<ProbeReport> {
        let deadline = SLACK + Duration::from_secs(600);
        let req = ProbeRequest {
            suites: suites.to_vec(),
            samples: samples as u32,
            interval_ns: interval.as_nanos() as u64,
            quick,
        };
        let mut c = self.client.clone();
        let json = self
            .within(deadline, "probe", async move { c.probe(Self::request(req, deadline)).await })?
            .into_inner()
            .json;
        let mut report: ProbeReport = serde_json::from_str(&json)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("agent {}: bad report: {e}", self.name)))?;
        report.host = self.name.clone();
        Ok(report)
    }

    /// Asks the agent for a net suite peer living at most `lifetime`, and
    /// keeps the call open until `stop` fires or the agent ends it; `ready`
    /// gets the peer's ports first. The call is the peer's lifeline: the
    /// agent stops the peer when it ends, whichever side ends it.
    fn hold_peer(
        &mut self,
        lifetime: Duration,
        ready: std::sync::mpsc::Sender<io::Result<PeerPorts>>,
        stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        let mut c = self.client.clone();
        let req = Self::request(PeerRequest { seconds: lifetime.as_secs() as u32 }, lifetime + SLACK);
        let started = self.within(CALL_TIMEOUT, "start the net peer", async move {
            let mut replies = c.peer(req).await?.into_inner();
            let ports = replies.message().await?.ok_or_else(|| Status::data_loss("no ports in the reply"))?;
            Ok((ports, replies))
        });
        let mut replies = match started {
            Ok((ports, replies)) => {
                let _ = ready.send(Ok(ports));
                replies
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        self.rt.block_on(async move {
            tokio::select! {
                _ = stop => {}
                _ = async { while let Ok(Some(_)) = replies.message().await {} } => {}
            }
        });
    }

    /// Runs `tern bench ARGS` on the agent, starting at `start_unix_ns`; the
    /// report's JSON comes back. `expected` is how long the run should take.
    pub fn bench(&mut self, args: Vec<String>, start_unix_ns: u64, expected: Duration) -> io::Result<String> {
        let deadline = expected + SLACK;
        let mut c = self.client.clone();
        let req = BenchRequest { args, start_unix_ns };
        Ok(self
            .within(deadline, "load run", async move { c.bench(Self::request(req, deadline)).await })?
            .into_inner()
            .json)
    }
}

/// A net suite peer running on an agent, stopped when dropped. Its call
/// runs on a thread of its own, so the connection keeps answering the
/// agent's keep-alive pings while the master measures.
pub struct PeerLease {
    pub addrs: PeerAddrs,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeerLease {
    /// Starts a peer on the agent at `addr` for at most `lifetime`; it listens
    /// on the agent's address, reached here by the address `addr` names.
    pub fn start(addr: &str, access: &Access, lifetime: Duration) -> io::Result<PeerLease> {
        let ip = addr
            .to_socket_addrs()
            .map_err(|e| io::Error::new(e.kind(), format!("agent {addr}: cannot resolve: {e}")))?
            .next()
            .ok_or_else(|| io::Error::other(format!("agent {addr}: no address")))?
            .ip();
        let mut agent = Agent::connect(addr, access)?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("tern-peer-lease".into())
            .spawn(move || agent.hold_peer(lifetime, ready_tx, stopped))?;
        let ports =
            ready_rx.recv().unwrap_or_else(|_| Err(io::Error::other(format!("agent {addr}: the peer call ended"))));
        let ports = match ports {
            Ok(ports) => ports,
            Err(e) => {
                // The thread reported its failure and returned.
                let _ = thread.join();
                return Err(e);
            }
        };
        let at = |port: u32| SocketAddr::new(ip, port as u16);
        Ok(PeerLease {
            addrs: PeerAddrs {
                tcp_echo: at(ports.tcp_echo),
                tcp_accept: at(ports.tcp_accept),
                udp_echo: at(ports.udp_echo),
                tcp_source: at(ports.tcp_source),
            },
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for PeerLease {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
