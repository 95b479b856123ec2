//! HTTPS helpers: certificates made at test time (rcgen), a server started
//! with `[tls]`, and a rustls client for raw exchanges.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use super::Tern;

/// A certificate authority of the test's own.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes `DIR/STEM.pem` (leaf then this CA: a chain) and
    /// `DIR/STEM.key` for a leaf valid for `names`; returns both paths and
    /// the leaf's PEM.
    pub fn leaf(&self, dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf, String) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        std::fs::write(&cert_path, format!("{}{}", cert.pem(), self.pem())).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path, cert.pem())
    }

    /// Writes the CA certificate to `DIR/STEM-ca.pem`.
    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}-ca.pem"));
        std::fs::write(&path, self.pem()).unwrap();
        path
    }

    fn der(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.issuer.der().clone()
    }
}

/// The `[tls]` section for one HTTPS address on port 0 with the given
/// certificate and key (more keys appended by the caller).
pub fn section(cert: &Path, key: &Path) -> String {
    format!(
        "[tls]\nlisten = [\"127.0.0.1:0\"]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n",
        cert.display(),
        key.display()
    )
}

/// The first address the server said it serves with `scheme` (`https`, or
/// `http` with a marker such as `redirecting`).
pub fn listening(tern: &Tern, scheme: &str, marker: &str) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = tern.stderr.lock().unwrap().clone();
        let found = log
            .lines()
            .filter(|l| l.contains(marker))
            .find_map(|l| l.split(&format!("listening on {scheme}://")).nth(1))
            .map(|rest| rest.split('/').next().unwrap().parse().unwrap());
        if let Some(addr) = found {
            return addr;
        }
        assert!(Instant::now() < deadline, "no {scheme} listener in:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The HTTPS address of a server started with a `[tls]` section.
pub fn https_addr(tern: &Tern) -> SocketAddr {
    listening(tern, "https", "")
}

/// A rustls client trusting `ca`.
pub fn client(ca: &Ca) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// As `common::exchange_until_close`, over TLS for `localhost`: sends
/// `bytes`, then `close_notify` and a half-close, and reads until the
/// server closes or `silence` passes.
pub fn exchange_until_close(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    bytes: &[u8],
    silence: Duration,
) -> (Vec<u8>, bool) {
    exchange_as(config, addr, "localhost", bytes, silence)
}

/// As [`exchange_until_close`], asking for the server name `name` (SNI;
/// the certificate must be valid for it).
pub fn exchange_as(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    name: &str,
    bytes: &[u8],
    silence: Duration,
) -> (Vec<u8>, bool) {
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(silence)).unwrap();
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let _ = tls.write_all(bytes);
    tls.conn.send_close_notify();
    let _ = tls.flush();
    let _ = tls.conn.complete_io(&mut tls.sock);
    let _ = tls.sock.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
}
