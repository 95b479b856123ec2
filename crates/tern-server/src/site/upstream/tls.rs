//! HTTPS to an upstream: a rustls client session over a pooled
//! connection, driven on the same non-blocking socket and readiness as
//! plain HTTP. The session stays with its connection in the pool, so a
//! kept-alive connection does not pay a handshake again.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The system's trust anchors (Debian's bundle).
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How connections to one upstream server speak TLS.
pub struct Client {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl Client {
    /// `name`: sent as SNI and checked against the certificate (a DNS name
    /// or an IP address); `ca`: PEM trust anchors instead of the system's;
    /// `verify = false` accepts any certificate (a lab's self-signed one).
    pub fn new(name: &str, ca: Option<&Path>, verify: bool) -> Result<Client, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let mut config = if verify {
            let path = ca.unwrap_or(Path::new(SYSTEM_CAS));
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("cannot read CA certificates from {}: {e}", path.display()))?;
            let mut roots = RootCertStore::empty();
            if roots.add_parsable_certificates(certs).0 == 0 {
                return Err(format!("no usable CA certificate in {}", path.display()));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(name.to_string()).map_err(|e| format!("`{name}`: {e}"))?;
        Ok(Client { config: Arc::new(config), name })
    }

    /// A session for a new connection.
    pub fn session(&self) -> io::Result<Box<ClientConnection>> {
        ClientConnection::new(self.config.clone(), self.name.clone()).map(Box::new).map_err(io::Error::other)
    }
}

/// A socket as `Read` and `Write`, for rustls's record I/O.
struct Socket<'a>(BorrowedFd<'a>);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        rustix::io::read(self.0, buf).map_err(io::Error::from)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        rustix::net::send(self.0, buf, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Takes `plain` into the session and writes the records it can; returns
/// the plaintext taken (0 when the session is full: wait for room).
pub fn send(tls: &mut ClientConnection, fd: impl AsFd, plain: &[u8]) -> io::Result<usize> {
    let n = tls.writer().write(plain)?;
    flush(tls, fd)?;
    Ok(n)
}

/// Writes the records the session holds until the socket is full; true
/// when none are left.
pub fn flush(tls: &mut ClientConnection, fd: impl AsFd) -> io::Result<bool> {
    let mut sock = Socket(fd.as_fd());
    while tls.wants_write() {
        match tls.write_tls(&mut sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads plaintext into `buf`'s spare capacity: what the session holds,
/// else what the socket brings (`WouldBlock` once drained; `Ok(0)` when the
/// server closed). Handshake records are answered on the way.
pub fn recv(tls: &mut ClientConnection, fd: impl AsFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    let fd = fd.as_fd();
    loop {
        let at = buf.len();
        buf.resize(buf.capacity().max(at + 4096), 0);
        let got = tls.reader().read(&mut buf[at..]);
        buf.truncate(at + *got.as_ref().unwrap_or(&0));
        match got {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) => return Err(e),
        }
        match tls.read_tls(&mut Socket(fd)) {
            Ok(0) => return Ok(0),
            Ok(_) => {
                tls.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                flush(tls, fd)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `verify = false`: any certificate, for a lab's self-signed upstream.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
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
