//! `https://` for `tern bench`: a rustls client session per connection,
//! driven on the same non-blocking socket and readiness as plain HTTP.
//!
//! One client configuration serves every connection of a run, so its
//! session store (when resumption is on) lets a new connection resume the
//! session of an earlier one, as a browser would; with `--no-resumption`
//! every connection makes a full handshake.

use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How to trust the server and whether to resume sessions.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// Accept any certificate (a test server's self-signed one).
    pub insecure: bool,
    /// Trust these CA certificates (PEM) instead of the system's.
    pub cacert: Option<PathBuf>,
    /// Resume sessions of earlier connections (tickets or IDs).
    pub no_resumption: bool,
}

/// The system's trust anchors (Debian's bundle).
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The client configuration every connection of the run shares; `alpn` is
/// the one protocol offered (`http/1.1`, or `h2`).
pub fn client_config(opts: &TlsOptions, alpn: &[u8]) -> Result<Arc<ClientConfig>, String> {
    // aws-lc-rs as the server (see the workspace Cargo.toml): its faster
    // handshakes and AES-GCM leave more of the machine to the server measured.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = if opts.insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))).with_no_client_auth()
    } else {
        let path = opts.cacert.as_deref().unwrap_or(Path::new(SYSTEM_CAS));
        let mut roots = RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read CA certificates from {}: {e}", path.display()))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("no usable CA certificate in {}", path.display()));
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    if opts.no_resumption {
        config.resumption = Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// A new session for `host` (the URL's host: SNI and the name checked).
pub fn session(config: &Arc<ClientConfig>, host: &str) -> io::Result<Box<ClientConnection>> {
    let name = ServerName::try_from(host.to_string()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    ClientConnection::new(config.clone(), name).map(Box::new).map_err(io::Error::other)
}

/// Makes one handshake with the server (blocking, before the run) and
/// returns the protocol it selected by ALPN.
pub fn negotiate(
    config: &Arc<ClientConfig>,
    host: &str,
    addr: SocketAddr,
    timeout: Duration,
) -> io::Result<Option<Vec<u8>>> {
    let mut tls = session(config, host)?;
    let mut socket = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut socket)?;
    }
    Ok(tls.alpn_protocol().map(<[u8]>::to_vec))
}

/// Encrypts `iov` (as much as the session buffers) and writes what the
/// socket takes; returns the plaintext bytes taken.
pub fn write(tls: &mut ClientConnection, stream: &mut TcpStream, iov: &[IoSlice<'_>]) -> io::Result<usize> {
    let n = tls.writer().write_vectored(iov)?;
    send(tls, stream)?;
    Ok(n)
}

/// Writes the records the session holds, until the socket is full.
pub fn send(tls: &mut ClientConnection, stream: &mut TcpStream) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(stream) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads plaintext: what the session holds, else what the socket brings
/// (`WouldBlock` once it is drained; `Ok(0)` when the server closed).
pub fn read(tls: &mut ClientConnection, stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match tls.reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // Closed without close_notify: an end like any other here.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) => return Err(e),
        }
        match tls.read_tls(stream) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        tls.process_new_packets().map_err(io::Error::other)?;
        // The handshake's next flight, and requests held until it ended.
        send(tls, stream)?;
    }
}

/// `--insecure`: any certificate is accepted (signatures still checked).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
