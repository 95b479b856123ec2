//! rustls's two crypto providers, ring and aws-lc-rs, measured for what a
//! TLS server does (issue 15: "its provider chosen by measurement"): full
//! TLS 1.3 handshakes per second with an ECDSA P-256 and an RSA-2048
//! certificate (X25519 key exchange, session tickets issued as tern does),
//! and bulk encryption of full 16 KiB records per TLS 1.3 cipher suite.
//!
//! Client and server run in memory on one thread; only the server's calls
//! are timed, so the figures are the server's cost alone, and in the
//! thread's CPU time, so other work on the machine does not count (it still
//! shares the caches).
//!
//! Usage: tls-providers DIR SECONDS
//!   DIR holds ecdsa.pem, ecdsa.key, rsa.pem and rsa.key; SECONDS per figure.
//! Prints one tab-separated line per figure: provider, what, value, unit.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache};
use rustls::{
    CipherSuite, ClientConfig, ClientConnection, Connection, DigitallySignedStruct, Error, ServerConfig,
    ServerConnection, SignatureScheme,
};

type Tickets = fn() -> Result<Arc<dyn ProducesTickets>, Error>;

struct Provider {
    name: &'static str,
    provider: CryptoProvider,
    x25519: &'static dyn SupportedKxGroup,
    tickets: Tickets,
}

fn providers() -> [Provider; 2] {
    [
        Provider {
            name: "ring",
            provider: rustls::crypto::ring::default_provider(),
            x25519: rustls::crypto::ring::kx_group::X25519,
            tickets: rustls::crypto::ring::Ticketer::new,
        },
        Provider {
            name: "aws-lc-rs",
            provider: rustls::crypto::aws_lc_rs::default_provider(),
            x25519: rustls::crypto::aws_lc_rs::kx_group::X25519,
            tickets: rustls::crypto::aws_lc_rs::Ticketer::new,
        },
    ]
}

/// The client checks the server's handshake signature (with the same
/// provider) but trusts any certificate: its cost is not measured anyway.
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
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The server's configuration for the key pair `DIR/KIND.pem`/`.key`.
fn server_config(p: &Provider, dir: &str, kind: &str) -> Arc<ServerConfig> {
    let chain = CertificateDer::pem_file_iter(format!("{dir}/{kind}.pem"))
        .expect("certificate file")
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate");
    let key = PrivateKeyDer::from_pem_file(format!("{dir}/{kind}.key")).expect("key");
    let mut provider = p.provider.clone();
    provider.kx_groups = vec![p.x25519];
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("key pair");
    config.session_storage = ServerSessionMemoryCache::new(4096);
    config.ticketer = (p.tickets)().expect("ticketer");
    Arc::new(config)
}

/// A client offering only `suite` (any, if `None`), without resumption.
fn client_config(p: &Provider, suite: Option<CipherSuite>) -> Arc<ClientConfig> {
    let mut provider = p.provider.clone();
    provider.kx_groups = vec![p.x25519];
    if let Some(suite) = suite {
        provider.cipher_suites.retain(|s| s.suite() == suite);
    }
    let provider = Arc::new(provider);
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.resumption = Resumption::disabled();
    Arc::new(config)
}

/// This thread's CPU time.
fn cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Moves what `from` has to send into `to`; returns the time the server's
/// side of it took (`from`'s writes or `to`'s reads).
fn pump(from: &mut Connection, to: &mut Connection, wire: &mut Vec<u8>) -> Duration {
    let start = cpu();
    wire.clear();
    while from.wants_write() {
        from.write_tls(wire).expect("write_tls");
    }
    let wrote = cpu() - start;
    let start = cpu();
    let mut rest = &wire[..];
    while !rest.is_empty() {
        to.read_tls(&mut rest).expect("read_tls");
        to.process_new_packets().expect("TLS");
    }
    let read = cpu() - start;
    if matches!(from, Connection::Server(_)) {
        wrote
    } else {
        read
    }
}

/// A client and a server connection with the handshake done (the server's
/// tickets received too); returns them and the server's time.
fn handshake(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>) -> (Connection, Connection, Duration) {
    let name = ServerName::try_from("localhost").expect("name");
    let mut c = Connection::Client(ClientConnection::new(client.clone(), name).expect("client"));
    let mut s = Connection::Server(ServerConnection::new(server.clone()).expect("server"));
    let (mut wire, mut busy) = (Vec::new(), Duration::ZERO);
    while c.is_handshaking() || s.is_handshaking() || c.wants_write() || s.wants_write() {
        busy += pump(&mut c, &mut s, &mut wire);
        busy += pump(&mut s, &mut c, &mut wire);
    }
    (c, s, busy)
}

/// Full handshakes per second of the server's time.
fn handshake_rate(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>, seconds: Duration) -> f64 {
    let (mut count, mut busy) = (0u64, Duration::ZERO);
    let end = cpu() + seconds;
    while cpu() < end {
        busy += handshake(server, client).2;
        count += 1;
    }
    count as f64 / busy.as_secs_f64()
}

/// Plaintext MB/s the server encrypts into full records (and writes to a
/// sink) under the suite the client offers.
fn encrypt_rate(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>, seconds: Duration) -> f64 {
    let (_c, mut s, _) = handshake(server, client);
    let record = vec![0x5a; 16384];
    let mut bytes = 0u64;
    let start = cpu();
    while cpu() - start < seconds {
        for _ in 0..64 {
            s.writer().write_all(&record).expect("encrypt");
            while s.wants_write() {
                s.write_tls(&mut std::io::sink()).expect("write_tls");
            }
        }
        bytes += 64 * record.len() as u64;
    }
    bytes as f64 / (cpu() - start).as_secs_f64() / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: tls-providers DIR SECONDS");
        std::process::exit(2);
    }
    let (dir, seconds) = (&args[1], Duration::from_secs_f64(args[2].parse().expect("SECONDS")));
    println!("provider\twhat\tvalue\tunit");
    for p in providers() {
        for kind in ["ecdsa", "rsa"] {
            let rate = handshake_rate(&server_config(&p, dir, kind), &client_config(&p, None), seconds);
            println!("{}\thandshakes {kind}\t{rate:.0}\tper s", p.name);
        }
        let server = server_config(&p, dir, "ecdsa");
        for suite in [
            CipherSuite::TLS13_AES_128_GCM_SHA256,
            CipherSuite::TLS13_AES_256_GCM_SHA384,
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        ] {
            let rate = encrypt_rate(&server, &client_config(&p, Some(suite)), seconds);
            println!("{}\tencrypt {suite:?}\t{rate:.0}\tMB/s", p.name);
        }
    }
}
