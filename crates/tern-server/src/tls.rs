//! HTTPS: rustls as a layer inside the connection, not a second kind of
//! connection.
//!
//! rustls is sans-I/O: the connection hands it the socket's bytes
//! (`read_tls`) on the same readiness that drives plain HTTP, takes
//! plaintext out into its receive buffer, and encrypts the output queue's
//! segments into records it writes to the socket. So the handshake runs
//! under the header clock and its minimum rate (a client that never
//! finishes one is cut off like a slowloris), and every engine gets TLS.
//!
//! [`Setup`] is what a server builds from `[tls]` at start and reload: the
//! certificates (a bad or mismatched key fails the start, so a reload keeps
//! the running server), the session cache and ticket keys shared by all
//! workers, and which listening addresses speak TLS or redirect to it.

use std::io::{self, IoSlice, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{HandshakeKind, ProtocolVersion, ServerConfig, ServerConnection, SupportedCipherSuite};
use serde::Deserialize;

use crate::error_log::{log, Level};
use crate::listeners::{covers, Listen};
use crate::metrics::WorkerStats;
use crate::sys;
use crate::values::first_broken;

/// `[tls]`: HTTPS (rustls). Off until `listen` names an address.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tls {
    /// Addresses served over HTTPS, in the forms of `server.listen`; a
    /// table entry says whether its addresses offer h2, in place of
    /// `http2.protocols`: `{ address = "[::]:443", protocols = [] }` for
    /// HTTPS without HTTP/2 there. Default `[]`.
    pub listen: Vec<Listen>,
    /// Certificate chains with their keys (PEM files, relative to the
    /// config file's directory), e.g. `[{ cert = "a.pem", key = "a.key",
    /// names = ["a.example"] }]`. The first is the default, sent to a
    /// client that names no host or one no entry lists. Default `[]`
    /// (needed when `listen` is set).
    pub certificates: Vec<TlsCertificate>,
    /// Addresses that answer every request with `308` to the same URL over
    /// HTTPS (on the first `listen` port). Default `[]`.
    pub redirect: Vec<Listen>,
    /// The `Strict-Transport-Security` value sent with every HTTPS
    /// response (`"max-age=63072000"`); empty for none. Default `""`.
    pub hsts: String,
    /// The oldest protocol accepted: `"1.2"` or `"1.3"`. Default `"1.2"`.
    pub min_version: TlsVersion,
    /// Sessions remembered for resumption, shared by all workers (0: none).
    /// Default 4096.
    pub session_cache: usize,
    /// Stateless session tickets (resumption without the cache; the keys
    /// change every 6 hours and on reload). Default true.
    pub tickets: bool,
    /// TLS 1.3 tickets sent after each handshake, full or resumed (1–16).
    /// One is enough for a client that resumes one connection after
    /// another (each resumption brings the next ticket), and every ticket
    /// costs an OpenSSL 3 client about 27 µs to take in (measured): OpenSSL servers
    /// send one after a resumed handshake (two after a full one, which
    /// rustls cannot tell apart here). Default 1.
    pub tickets_per_handshake: usize,
}

impl Default for Tls {
    fn default() -> Self {
        Tls {
            listen: Vec::new(),
            certificates: Vec::new(),
            redirect: Vec::new(),
            hsts: String::new(),
            min_version: TlsVersion::V1_2,
            session_cache: 4096,
            tickets: true,
            tickets_per_handshake: 1,
        }
    }
}

/// One `tls.certificates` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertificate {
    /// The chain: the server's certificate first, then intermediates.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Host names (SNI) this chain is sent for; `*.example.com` covers one
    /// label. Default `[]` (only as the default certificate).
    #[serde(default)]
    pub names: Vec<String>,
}

/// `tls.min_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl Tls {
    /// The keys a `[[site]]` may set in `[site.tls]`: its certificates
    /// (sent for its host names unless an entry names others); the rest
    /// belongs to the listeners.
    pub const SITE_KEYS: &'static [&'static str] = &["certificates"];

    /// The first rule of `[tls]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (
                !self.listen.is_empty() && self.certificates.is_empty(),
                "certificates",
                "tls.listen needs at least one certificate",
            ),
            (!self.redirect.is_empty() && self.listen.is_empty(), "redirect", "redirects to HTTPS need tls.listen"),
            (
                self.hsts.bytes().any(|b| b.is_ascii_control()),
                "hsts",
                "must be a header value without control characters",
            ),
            (!(1..=16).contains(&self.tickets_per_handshake), "tickets_per_handshake", "must be between 1 and 16"),
        ])
    }
}

/// What a listening address serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Http,
    Https,
    /// Plain HTTP answering `308` to the HTTPS URL.
    Redirect,
}

impl Role {
    pub fn scheme(self) -> &'static str {
        if self == Role::Https {
            "https"
        } else {
            "http"
        }
    }
}

/// HTTP/2's name in ALPN.
const ALPN_H2: &[u8] = b"h2";

/// The server's TLS configuration, shared by its workers.
pub struct Setup {
    /// Offering `h2` before `http/1.1` by ALPN.
    config: Arc<ServerConfig>,
    /// Offering `http/1.1` alone, for an address that does not speak h2.
    http1: Arc<ServerConfig>,
    /// Bound addresses that are not plain HTTP.
    roles: Vec<(SocketAddr, Role)>,
    /// `Strict-Transport-Security: …\r\n`, or empty.
    hsts: Arc<[u8]>,
    /// Where redirects point (the first HTTPS address's port).
    https_port: u16,
}

impl Setup {
    /// Reads the certificates and keys and builds the rustls configuration;
    /// `None` when no address is served over HTTPS. Errors name the file
    /// and what is wrong with it.
    pub fn load(tls: &Tls) -> Result<Option<Setup>, String> {
        if tls.listen.is_empty() {
            return Ok(None);
        }
        // aws-lc-rs, not ring: its handshakes and AES-GCM are faster
        // (measured: bench/tls-providers.sh; the workspace Cargo.toml says
        // by how much).
        let provider = Arc::new(CryptoProvider {
            cipher_suites: cipher_suites(aes_hardware()),
            ..rustls::crypto::aws_lc_rs::default_provider()
        });
        let mut certs = Vec::with_capacity(tls.certificates.len());
        for c in &tls.certificates {
            let key = load_pair(&c.cert, &c.key, &provider)?;
            let names = c.names.iter().map(|n| n.trim_end_matches('.').to_ascii_lowercase()).collect();
            certs.push((names, Arc::new(key)));
        }
        let versions: &[&'static rustls::SupportedProtocolVersion] = match tls.min_version {
            TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::V1_3 => &[&rustls::version::TLS13],
        };
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .map_err(|e| format!("tls: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(BySni(certs)));
        // The server's suite order, not the client's: a client cannot pick
        // a slower suite than the server would (testssl's "server cipher
        // order").
        config.ignore_client_order = true;
        config.session_storage = if tls.session_cache == 0 {
            Arc::new(NoServerSessionStorage {})
        } else {
            ServerSessionMemoryCache::new(tls.session_cache)
        };
        // Tickets carry the session itself, or (without `tickets`) a key to
        // it in the cache.
        config.send_tls13_tickets = tls.tickets_per_handshake;
        if tls.tickets {
            config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| format!("tls.tickets: {e}"))?;
        }
        let hsts = if tls.hsts.is_empty() {
            Arc::from(&[][..])
        } else {
            Arc::from(format!("Strict-Transport-Security: {}\r\n", tls.hsts).into_bytes())
        };
        // HTTP/2 first where it is spoken (a client that offers both gets
        // it); `http/1.1` named either way. Sessions and tickets are
        // shared by both.
        let mut http1 = config.clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.alpn_protocols = vec![ALPN_H2.to_vec(), b"http/1.1".to_vec()];
        let (config, http1) = (Arc::new(config), Arc::new(http1));
        Ok(Some(Setup { config, http1, roles: Vec::new(), hsts, https_port: 443 }))
    }

    /// Records the bound addresses (ports chosen by the kernel included).
    pub fn bound(&mut self, addrs: &[(SocketAddr, Role)]) {
        self.roles = addrs.iter().copied().filter(|(_, r)| *r != Role::Http).collect();
        if let Some((a, _)) = addrs.iter().find(|(_, r)| *r == Role::Https) {
            self.https_port = a.port();
        }
    }

    /// What a connection accepted on `local` is for.
    pub fn role(&self, local: SocketAddr) -> Role {
        self.roles.iter().find(|(l, _)| covers(*l, local)).map_or(Role::Http, |(_, r)| *r)
    }

    pub fn https_port(&self) -> u16 {
        self.https_port
    }

    /// A session for a new connection.
    pub fn session(&self, stats: &WorkerStats, h2: bool) -> Option<Box<Session>> {
        let config = if h2 { &self.config } else { &self.http1 };
        match ServerConnection::new(config.clone()) {
            Ok(mut conn) => {
                // `write_plain` bounds what is encrypted at once; a limit
                // here would cut records short of `FULL_RECORD`.
                conn.set_buffer_limit(None);
                stats.tls_active.add(1);
                Some(Box::new(Session {
                    conn,
                    hsts: self.hsts.clone(),
                    small: 0,
                    small_len: 0,
                    last_flush: None,
                    started: false,
                    done: false,
                    held: false,
                }))
            }
            Err(e) => {
                log!(Level::Error, "cannot start a TLS session: {e}");
                None
            }
        }
    }
}

/// The cipher suites in the server's order of preference (TLS 1.3's, then
/// 1.2's with forward secrecy, the same set as aws-lc-rs's defaults):
/// AES-128-GCM first, then AES-256-GCM (both are safe; 128-bit keys take
/// 10 rounds a block against 14, so bulk transfer costs the server less;
/// Mozilla's TLS 1.2 lists order them so), and ChaCha20-Poly1305 last
/// where the CPU has AES instructions, first where it has none (there it
/// is the faster one, and constant-time without tables).
fn cipher_suites(aes_hardware: bool) -> Vec<SupportedCipherSuite> {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    let mut suites = vec![
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ];
    if !aes_hardware {
        // Stable: the order within each group stays.
        suites.sort_by_key(|s| !matches!(s.suite().as_str(), Some(name) if name.contains("CHACHA20")));
    }
    suites
}

/// Whether this CPU has AES (and carry-less multiply, for GCM)
/// instructions.
fn aes_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq");
    #[cfg(target_arch = "aarch64")]
    return std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull");
    #[allow(unreachable_code)]
    false
}

/// Reads a chain and its key, and checks that they belong together.
fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls.certificates: {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("tls.certificates: {}: no certificate in the file", cert.display()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("tls.certificates: {}: {e}", key.display()))?;
    CertifiedKey::from_der(chain, der, provider)
        .map_err(|e| format!("tls.certificates: {} does not go with {}: {e}", key.display(), cert.display()))
}

/// The certificate for the name a client asks for (SNI), else the first.
#[derive(Debug)]
struct BySni(Vec<(Vec<String>, Arc<CertifiedKey>)>);

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let fallback = self.0.first().map(|(_, k)| k.clone());
        let Some(name) = hello.server_name() else { return fallback };
        let wildcard = name.split_once('.').map(|(_, parent)| parent);
        let matches =
            |n: &String| n.eq_ignore_ascii_case(name) || n.strip_prefix("*.").is_some_and(|p| Some(p) == wildcard);
        self.0.iter().find(|(names, _)| names.iter().any(matches)).map(|(_, k)| k.clone()).or(fallback)
    }
}

/// Plaintext encrypted per round before the records are written (the
/// output queue drains rustls's buffer before handing it more, so this
/// bounds what a connection holds encrypted).
const SEND_BUFFER: usize = 64 * 1024;
/// The plaintext of a full record (TLS's largest).
const FULL_RECORD: usize = 16 * 1024;
/// What a record adds to its plaintext at most: the header (5), TLS 1.2's
/// explicit nonce (8) and the AEAD tag (16); TLS 1.3 adds 22.
const RECORD_OVERHEAD: usize = 29;
/// After an idle moment the first records each fit one TCP segment of the
/// path, so a client can start on each as it arrives, for about TCP's
/// initial congestion window (RFC 6928: ten segments); then full records.
const SMALL_RECORDS: usize = 10;
/// Output silent this long counts as an idle moment (the congestion window
/// may have shrunk again; the next response is likely a new page's).
const IDLE: Duration = Duration::from_secs(1);
/// Most slices [`Session::write_plain`] takes at once.
pub const MAX_BUFS: usize = 32;

/// The answer to plain HTTP on an HTTPS port (as nginx's).
pub const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 51\r\nConnection: close\r\n\r\nThe plain HTTP request was sent to an HTTPS port.\r\n";

/// What a read through TLS brought.
pub enum Got {
    /// Plaintext was added to the buffer.
    Data,
    Wait,
    Eof,
    Failed,
    /// The first bytes were not TLS but (very likely) an HTTP request.
    PlainHttp,
}

/// One connection's TLS state.
pub struct Session {
    conn: ServerConnection,
    /// Header lines for every response (HSTS).
    hsts: Arc<[u8]>,
    /// Small records still to send (see [`SMALL_RECORDS`]) and the
    /// plaintext each holds.
    small: usize,
    small_len: usize,
    /// When output was last flushed (`None`: never).
    last_flush: Option<Instant>,
    /// A byte of the client's arrived.
    started: bool,
    /// The handshake completed (and was counted).
    done: bool,
    /// Records held back to leave with the next output (see `fill`).
    held: bool,
}

/// The socket as rustls reads it, telling whether a read was short (the
/// socket drained: the next readiness edge says when more comes) and what
/// the first byte was.
struct Reader<'a> {
    sock: &'a TcpStream,
    short: bool,
    first: Option<u8>,
}

impl Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (&mut &*self.sock).read(buf)?;
        self.short = n < buf.len();
        if n > 0 && self.first.is_none() {
            self.first = Some(buf[0]);
        }
        Ok(n)
    }
}

impl Session {
    /// The host name the client asked for in its hello (SNI), if any.
    pub fn server_name(&self) -> Option<&str> {
        self.conn.server_name()
    }

    /// Whether the client chose HTTP/2 by ALPN, once the handshake is
    /// done (the choice is made from its hello, but nothing may be sent
    /// before the handshake ends).
    pub fn chose_h2(&self) -> bool {
        !self.conn.is_handshaking() && self.conn.alpn_protocol() == Some(ALPN_H2)
    }

    /// Moves what the socket has through TLS into `rbuf` (as far as its
    /// capacity goes); `may_read` is the connection's edge state, `raw`
    /// counts the bytes read (for the minimum rates).
    pub fn fill(
        &mut self,
        sock: &TcpStream,
        may_read: &mut bool,
        eof_pending: bool,
        rbuf: &mut Vec<u8>,
        raw: &mut u64,
        stats: &WorkerStats,
    ) -> Got {
        // Handshake records (or tickets) held back by a full socket.
        if self.send_pending(sock).is_err() {
            return Got::Failed;
        }
        loop {
            let len = rbuf.len();
            rbuf.resize(rbuf.capacity(), 0);
            let read = self.conn.reader().read(&mut rbuf[len..]);
            match read {
                Ok(0) => {
                    rbuf.truncate(len);
                    // close_notify, or nothing to read into.
                    return if rbuf.capacity() > len { Got::Eof } else { Got::Wait };
                }
                Ok(n) => {
                    rbuf.truncate(len + n);
                    return Got::Data;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => rbuf.truncate(len),
                Err(_) => {
                    // The peer closed without close_notify.
                    rbuf.truncate(len);
                    return Got::Eof;
                }
            }
            if !*may_read {
                return Got::Wait;
            }
            let mut reader = Reader { sock, short: false, first: None };
            match self.conn.read_tls(&mut reader) {
                Ok(0) => *may_read = false,
                Ok(n) => {
                    *raw += n as u64;
                    if reader.short && !eof_pending {
                        *may_read = false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *may_read = false;
                    return Got::Wait;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Got::Failed,
            }
            if !self.started && reader.first.is_some() {
                self.started = true;
                // Every TLS connection opens with a handshake record (22);
                // a letter is a request line.
                if reader.first.is_some_and(|b| b.is_ascii_alphabetic()) {
                    stats.tls_failed.incr();
                    self.done = true;
                    return Got::PlainHttp;
                }
            }
            let state = match self.conn.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    log!(Level::Debug, "TLS: {e}");
                    // The alert rustls queued, best effort.
                    let _ = self.send_pending(sock);
                    stats.tls_failed.incr();
                    self.done = true;
                    return Got::Failed;
                }
            };
            if !self.done && !self.conn.is_handshaking() {
                self.done = true;
                self.count_handshake(stats);
            }
            // The session tickets that follow a handshake wait for the
            // answer to the request that came with the client's Finished:
            // one write for both, not two (a client's read and a segment
            // saved per new connection).
            if !self.conn.is_handshaking() && state.plaintext_bytes_to_read() > 0 {
                self.held = self.conn.wants_write();
            } else if self.send_pending(sock).is_err() {
                return Got::Failed;
            }
        }
    }

    fn count_handshake(&self, stats: &WorkerStats) {
        if self.conn.handshake_kind() == Some(HandshakeKind::Resumed) {
            stats.tls_resumed.incr();
        } else {
            stats.tls_full.incr();
        }
        if self.conn.protocol_version() == Some(ProtocolVersion::TLSv1_3) {
            stats.tls_versions[1].incr();
        } else {
            stats.tls_versions[0].incr();
        }
    }

    /// Writes the records rustls holds; `Ok(false)` when the socket is
    /// full.
    pub fn send_pending(&mut self, sock: &TcpStream) -> io::Result<bool> {
        self.held = false;
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut &*sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Whether records were held back for the output about to be
    /// encrypted (then they leave with it, in its first write); clears it.
    pub fn take_held(&mut self) -> bool {
        std::mem::take(&mut self.held)
    }

    /// Header lines every response over this session carries.
    pub fn fields(&self) -> &[u8] {
        &self.hsts
    }

    /// A flush begins at `now`: after an idle moment (nothing sent for
    /// [`IDLE`], nothing held back by a full socket) the next records are
    /// small ones, each the size of one TCP segment of this connection's
    /// path — none where a segment holds a full record, as on loopback.
    pub fn start_flush(&mut self, sock: &TcpStream, now: Instant) {
        let idle = self.last_flush.is_none_or(|t| now.saturating_duration_since(t) >= IDLE);
        self.last_flush = Some(now);
        if idle && (self.held || !self.conn.wants_write()) {
            self.small_len = sys::segment_size(sock.as_fd()).saturating_sub(RECORD_OVERHEAD);
            self.small = if (1..FULL_RECORD).contains(&self.small_len) { SMALL_RECORDS } else { 0 };
        }
    }

    /// How many plaintext bytes the next [`Session::write_plain`] should be
    /// handed: the small records left, then whole full records, about
    /// [`SEND_BUFFER`] in all. Handed exactly this much (or the end of the
    /// output), every record but the output's last is small or full.
    pub fn room(&self) -> usize {
        let small = self.small.min(SEND_BUFFER / self.small_len.max(1)) * self.small_len;
        small + (SEND_BUFFER - small) / FULL_RECORD * FULL_RECORD
    }

    /// Encrypts `bufs` (at most [`MAX_BUFS`] slices, at most
    /// [`Session::room`] bytes) into records that may span slices, so a
    /// head and its body share one: the small records left first, then
    /// full ones. Returns the plaintext bytes taken (all of them; 0 while
    /// the handshake is not done).
    pub fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> usize {
        use std::io::Write;
        if self.conn.is_handshaking() {
            return 0;
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut window = [IoSlice::new(&[]); MAX_BUFS];
        let mut taken = 0;
        while taken < total {
            let most = if self.small > 0 { self.small_len } else { usize::MAX };
            let n = slices(bufs, taken, most, &mut window);
            match self.conn.writer().write_vectored(&window[..n]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    taken += n;
                    self.small = self.small.saturating_sub(1);
                }
            }
        }
        taken
    }

    /// Sends `close_notify` (before the socket's output is shut down).
    pub fn close(&mut self, sock: &TcpStream) {
        self.conn.send_close_notify();
        let _ = self.send_pending(sock);
    }

    /// The session ends with its connection: counted as failed if the
    /// handshake never completed.
    pub fn end(&self, stats: &WorkerStats) {
        if !self.done && self.started {
            stats.tls_failed.incr();
        }
        stats.tls_active.set(stats.tls_active.get().saturating_sub(1));
    }

    /// Leaves this worker (handed to another server's worker on reload).
    pub fn leave(&self, stats: &WorkerStats) {
        stats.tls_active.set(stats.tls_active.get().saturating_sub(1));
    }

    /// Joins a worker (after [`Session::leave`]).
    pub fn join(&self, stats: &WorkerStats) {
        stats.tls_active.add(1);
    }
}

/// Fills `out` with the part of `bufs` that starts `skip` bytes in and is
/// at most `most` bytes long; returns how many slices it holds.
fn slices<'a>(bufs: &'a [IoSlice<'_>], mut skip: usize, mut most: usize, out: &mut [IoSlice<'a>]) -> usize {
    let mut count = 0;
    for b in bufs {
        if count == out.len() || most == 0 {
            break;
        }
        let bytes: &'a [u8] = b;
        if skip >= bytes.len() {
            skip -= bytes.len();
            continue;
        }
        let piece = &bytes[skip..][..most.min(bytes.len() - skip)];
        skip = 0;
        most -= piece.len();
        out[count] = IoSlice::new(piece);
        count += 1;
    }
    count
}

/// Whether this kernel offers kTLS (`tls` among the TCP upper-layer
/// protocols), read once. tern does not use it yet: where it is missing,
/// the status page says so.
pub fn kernel_tls() -> bool {
    static OFFERED: OnceLock<bool> = OnceLock::new();
    *OFFERED.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
            .is_ok_and(|ulps| ulps.split_whitespace().any(|u| u == "tls"))
    })
}

/// Where a redirecting address sends a request: the same host (without its
/// port), path and query over HTTPS on `port`.
pub fn https_location(host: Option<&str>, local: SocketAddr, port: u16, path: &str, query: Option<&str>) -> String {
    let name = match host {
        Some(h) => match h.rsplit_once(':') {
            Some((name, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => name.to_string(),
            _ => h.to_string(),
        },
        None if local.is_ipv6() => format!("[{}]", local.ip()),
        None => local.ip().to_string(),
    };
    let mut url = format!("https://{name}");
    if port != 443 {
        url.push_str(&format!(":{port}"));
    }
    url.push_str(path);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `slices` over `bufs` into `room` slices, as strings.
    fn window(bufs: &[IoSlice<'_>], skip: usize, most: usize, room: usize) -> Vec<String> {
        let mut out = [IoSlice::new(&[]); MAX_BUFS];
        let n = slices(bufs, skip, most, &mut out[..room]);
        out[..n].iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
    }

    #[test]
    fn slices_cut_a_window_across_buffers() {
        let bufs = [IoSlice::new(b"head"), IoSlice::new(b""), IoSlice::new(b"body bytes")];
        assert_eq!(window(&bufs, 0, usize::MAX, MAX_BUFS), ["head", "body bytes"]);
        assert_eq!(window(&bufs, 2, 5, MAX_BUFS), ["ad", "bod"]);
        assert_eq!(window(&bufs, 6, usize::MAX, MAX_BUFS), ["dy bytes"]);
        assert!(window(&bufs, 14, usize::MAX, MAX_BUFS).is_empty());
        assert_eq!(window(&bufs, 0, usize::MAX, 1), ["head"]);
    }

    #[test]
    fn cipher_suites_are_aws_lc_rs_defaults_in_the_servers_order() {
        let names = |suites: Vec<SupportedCipherSuite>| -> Vec<&'static str> {
            suites.iter().map(|s| s.suite().as_str().unwrap()).collect()
        };
        let mut defaults = names(rustls::crypto::aws_lc_rs::DEFAULT_CIPHER_SUITES.to_vec());
        let with_aes = names(cipher_suites(true));
        let without = names(cipher_suites(false));
        assert_eq!(
            with_aes[..3],
            ["TLS13_AES_128_GCM_SHA256", "TLS13_AES_256_GCM_SHA384", "TLS13_CHACHA20_POLY1305_SHA256"]
        );
        assert_eq!(with_aes[3], "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256");
        assert_eq!(
            without[..4],
            [
                "TLS13_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                "TLS13_AES_128_GCM_SHA256"
            ]
        );
        for mut order in [with_aes, without] {
            order.sort_unstable();
            defaults.sort_unstable();
            assert_eq!(order, defaults);
        }
    }

    #[test]
    fn redirect_locations() {
        let local: SocketAddr = "127.0.0.1:80".parse().unwrap();
        assert_eq!(https_location(Some("example.com"), local, 443, "/a", None), "https://example.com/a");
        assert_eq!(
            https_location(Some("example.com:8080"), local, 8443, "/a", Some("x=1")),
            "https://example.com:8443/a?x=1"
        );
        assert_eq!(https_location(Some("[::1]:80"), local, 443, "/", None), "https://[::1]/");
        assert_eq!(https_location(Some("[::1]"), local, 443, "/", None), "https://[::1]/");
        assert_eq!(https_location(None, local, 443, "/", None), "https://127.0.0.1/");
    }
}
