//! The agent: serves null calls, fetches, lazy callbacks, built-in probes,
//! the net suite's peer and load runs to callers that present the token;
//! over TLS only when it has a certificate pair.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_stream::{Stream, StreamExt};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use super::proto::agent_server::{Agent, AgentServer};
use super::proto::{BenchRequest, Bytes, Empty, FetchRequest, Json, Need, PeerPorts, PeerRequest, ProbeRequest};
use super::timeouts::KEEPALIVE;
use crate::probe::ctx::Options;
use crate::probe::report::ProbeReport;
use crate::probe::suites::net::Peer;
use crate::probe::suites::Suite;

/// Largest fetch or piece served: bigger ones would only measure memory.
pub const MAX_TRANSFER: u64 = 64 << 20;

/// The longest a net suite's peer lives, whatever the caller asks.
pub const MAX_PEER_LIFETIME: Duration = Duration::from_secs(600);

/// What a load run on an agent does: parse `tern bench` arguments and run
/// them, returning the report as JSON. Given by the CLI, which owns the
/// arguments' syntax.
pub type BenchRunner = std::sync::Arc<dyn Fn(Vec<String>) -> Result<String, String> + Send + Sync>;

/// What a probe on an agent does: run the suites on this host. Given by
/// what starts the agent (`crate::remote::run`): the rpc suite among them
/// itself calls an agent, so the suites are dispatched above this module.
pub type ProbeRunner = fn(&[Suite], &Options) -> std::io::Result<ProbeReport>;

/// What an agent runs for its master, handed to it by what starts it.
#[derive(Clone)]
pub struct Work {
    pub bench: BenchRunner,
    pub probe: ProbeRunner,
}

struct Service {
    work: Work,
    /// The address the agent listens on: its peers listen there too, so a
    /// master that reaches the agent reaches them by the same route.
    ip: IpAddr,
}

fn bytes(size: u64) -> Result<Bytes, Status> {
    if size > MAX_TRANSFER {
        return Err(Status::invalid_argument(format!("at most {MAX_TRANSFER} bytes per transfer")));
    }
    Ok(Bytes { data: vec![0x5a; size as usize] })
}

#[tonic::async_trait]
impl Agent for Service {
    async fn null(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn fetch(&self, req: Request<FetchRequest>) -> Result<Response<Bytes>, Status> {
        bytes(req.into_inner().size).map(Response::new)
    }

    type LazyStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

    async fn lazy(&self, req: Request<Streaming<Need>>) -> Result<Response<Self::LazyStream>, Status> {
        let needs = req.into_inner();
        let pieces = needs.map(|need| bytes(need?.size));
        Ok(Response::new(Box::pin(pieces)))
    }

    async fn probe(&self, req: Request<ProbeRequest>) -> Result<Response<Json>, Status> {
        let r = req.into_inner();
        let suites = r
            .suites
            .iter()
            .map(|s| Suite::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Status::invalid_argument)?;
        let mut opts = Options {
            samples: (r.samples as usize).max(1),
            interval: Duration::from_nanos(r.interval_ns.max(1_000)),
            ..Options::default()
        };
        if r.quick {
            opts = opts.quick();
        }
        let probe = self.work.probe;
        let report = tokio::task::spawn_blocking(move || probe(&suites, &opts))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(Json { json: report.to_json() }))
    }

    async fn bench(&self, req: Request<BenchRequest>) -> Result<Response<Json>, Status> {
        let r = req.into_inner();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let start = Duration::from_nanos(r.start_unix_ns);
        if start > now + Duration::from_secs(60) {
            return Err(Status::invalid_argument("the start time is more than 60 s away: are the clocks in sync?"));
        }
        tokio::time::sleep(start.saturating_sub(now)).await;
        let runner = self.work.bench.clone();
        let json = tokio::task::spawn_blocking(move || runner(r.args))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(Status::failed_precondition)?;
        Ok(Response::new(Json { json }))
    }

    type PeerStream = tokio_stream::wrappers::ReceiverStream<Result<PeerPorts, Status>>;

    async fn peer(&self, req: Request<PeerRequest>) -> Result<Response<Self::PeerStream>, Status> {
        let lifetime = Duration::from_secs(req.into_inner().seconds.into()).min(MAX_PEER_LIFETIME);
        let ip = self.ip;
        let peer = tokio::task::spawn_blocking(move || Peer::start(ip))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(format!("cannot start the peer: {e}")))?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let a = peer.addrs;
        let ports = PeerPorts {
            tcp_echo: a.tcp_echo.port().into(),
            udp_echo: a.udp_echo.port().into(),
            tcp_source: a.tcp_source.port().into(),
            tcp_accept: a.tcp_accept.port().into(),
        };
        tx.send(Ok(ports)).await.map_err(|_| Status::cancelled("the caller left"))?;
        // The peer lives until the caller ends the call (its stream is
        // dropped) or the lifetime is up; then it stops (which joins threads,
        // so off the runtime's threads) and the stream ends.
        tokio::spawn(async move {
            tokio::select! {
                _ = tx.closed() => {}
                _ = tokio::time::sleep(lifetime) => {}
            }
            let _ = tokio::task::spawn_blocking(move || drop(peer)).await;
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// Refuses calls without the token ("Bearer TOKEN").
#[derive(Clone)]
struct TokenCheck(String);

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        match req.metadata().get("authorization").and_then(|v| v.to_str().ok()) {
            Some(got) if got == self.0 => Ok(req),
            Some(_) => Err(Status::unauthenticated("wrong token")),
            None => Err(Status::unauthenticated("no token")),
        }
    }
}

/// The accepted connections, with Nagle's algorithm off: small replies
/// must not wait for the caller's delayed acknowledgement.
fn accepted(listener: tokio::net::TcpListener) -> impl Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

/// The service with its limits and the token check in front.
fn service(work: Work, token: String, ip: IpAddr) -> InterceptedService<AgentServer<Service>, TokenCheck> {
    let limit = MAX_TRANSFER as usize + 1024;
    let server =
        AgentServer::new(Service { work, ip }).max_decoding_message_size(limit).max_encoding_message_size(limit);
    InterceptedService::new(server, TokenCheck(format!("Bearer {token}")))
}

/// The agent's certificate and private key (PEM).
pub struct TlsPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Runs the agent on `addr` until the process ends, over TLS only when
/// `tls` is given; `ready` is called with the bound address once it accepts
/// calls.
pub fn serve(
    addr: SocketAddr,
    token: String,
    tls: Option<TlsPair>,
    work: Work,
    ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE));
    if let Some(pair) = tls {
        let identity = tonic::transport::Identity::from_pem(pair.cert_pem, pair.key_pem);
        // Builds the rustls configuration now: a key that does not match or
        // does not parse fails the start, not the first handshake.
        builder = builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity)).map_err(|e| {
            let why = std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_else(|| e.to_string());
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the certificate pair is not usable: {why}"))
        })?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        ready(bound);
        let incoming = accepted(listener);
        builder
            .add_service(service(work, token, bound.ip()))
            .serve_with_incoming(incoming)
            .await
            .map_err(std::io::Error::other)
    })
}

/// An agent on a thread of this process (for the local rpc suite), stopped
/// when dropped. It answers the rpc suite's calls only: it runs no load and
/// no probes.
pub struct LocalAgent {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LocalAgent {
    pub fn start(token: &str) -> std::io::Result<LocalAgent> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let work = Work {
            bench: std::sync::Arc::new(|_| Err("no load runs on a local agent".into())),
            probe: |_, _| Err(std::io::Error::other("no probes on a local agent")),
        };
        let service = service(work, token.to_string(), addr.ip());
        let thread = std::thread::Builder::new().name("tern-local-agent".into()).spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else { return };
                let incoming = accepted(listener);
                let _ = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = rx.await;
                    })
                    .await;
            })
        })?;
        Ok(LocalAgent { addr, stop: Some(tx), thread: Some(thread) })
    }
}

impl Drop for LocalAgent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
