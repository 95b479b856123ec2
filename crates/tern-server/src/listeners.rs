//! Listening sockets: one `SO_REUSEPORT` socket per worker and address,
//! and each address this server's alone.
//!
//! `SO_REUSEPORT` lets any process of the same user bind a port already
//! bound with it, and the kernel then spreads new connections over both: a
//! second server started by mistake on a taken port would silently answer
//! part of the first one's traffic. Every other overlap the kernel refuses
//! itself (`EADDRINUSE`); for this one the listening TCP sockets of the
//! network namespace are read (`/proc/net/tcp`, `/proc/net/tcp6`), and an
//! address that a socket outside this process also listens on (the same
//! address, or a wildcard of the same family covering it) is refused.
//! Sockets of this process are its own, so a reload's handover is never
//! taken for a stranger.
//!
//! The check runs twice: after binding, before `listen(2)` (a refused start
//! never holds a connection meant for the server already there), and after
//! it (two servers starting at the same moment each see the other and both
//! refuse, rather than share). It reads every TCP socket of the namespace,
//! so it runs at start and reload only.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;

use serde::de::{self, Deserializer};
use serde::Deserialize;

/// A form of HTTP/2 in `http2.protocols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Protocol {
    /// Over TLS, chosen by ALPN (RFC 9113 §3.2).
    #[serde(rename = "h2")]
    H2,
    /// In clear text, by prior knowledge: a connection on a plain address
    /// that opens with the HTTP/2 preface (RFC 9113 §3.3).
    #[serde(rename = "h2c")]
    H2c,
}

/// One `server.listen` (or `tls.listen`, `tls.redirect`) entry: the
/// addresses it names, all on one port (with port 0 the first address
/// picks it and the others follow). Written as operators type it for
/// nginx or Caddy: `"127.0.0.1:8080"` or `"[::1]:8080"` is that address,
/// `"0.0.0.0:8080"` every IPv4 address, `"[::]:8080"` every IPv6 address,
/// `"localhost:8080"` both loopback addresses (`127.0.0.1` and `::1`), and
/// `"8080"`, `":8080"` or `"*:8080"` every IPv4 *and* IPv6 address
/// (reachable from other machines). Other host names are refused: what a
/// server listens on must not depend on DNS.
///
/// An entry may also be a table that says which forms of HTTP/2 its
/// addresses speak, in place of `http2.protocols` (HTTP/1.1 is always
/// spoken): `{ address = "127.0.0.1:8081", protocols = ["h2c"] }` on
/// `server.listen`, `{ address = "[::]:443", protocols = [] }` on
/// `tls.listen` for HTTPS without HTTP/2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    pub addrs: Vec<SocketAddr>,
    /// The forms of HTTP/2 its addresses speak, when the entry says
    /// (otherwise `http2.protocols`).
    pub protocols: Option<Vec<Protocol>>,
}

impl Listen {
    /// One address.
    pub fn addr(addr: SocketAddr) -> Listen {
        Listen { addrs: vec![addr], protocols: None }
    }
}

/// The forms of [`Listen`].
impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Listen, String> {
        let both = |v4: std::net::Ipv4Addr, v6: std::net::Ipv6Addr, port: u16| Listen {
            addrs: vec![SocketAddr::from((v4, port)), SocketAddr::from((v6, port))],
            protocols: None,
        };
        let wrong = || {
            format!("`{s}` is not a listen address (PORT, :PORT, IP:PORT, [IPv6]:PORT or localhost:PORT; a port is 0-65535)")
        };
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Listen::addr(addr));
        }
        let (host, port) = s.rsplit_once(':').unwrap_or(("", s));
        let port: u16 = match port.parse() {
            Ok(p) if port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(wrong()),
        };
        match host {
            "" | "*" => Ok(both(std::net::Ipv4Addr::UNSPECIFIED, std::net::Ipv6Addr::UNSPECIFIED, port)),
            "localhost" => Ok(both(std::net::Ipv4Addr::LOCALHOST, std::net::Ipv6Addr::LOCALHOST, port)),
            _ => Err(wrong()),
        }
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListenVisitor)
    }
}

/// A string, or a table of `address` and `protocols`: each refused with
/// what is wrong, where an untagged enum would say only that neither fits.
struct ListenVisitor;

impl<'de> de::Visitor<'de> for ListenVisitor {
    type Value = Listen;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an address (\"127.0.0.1:8080\") or { address = \"...\", protocols = [...] }")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Listen, E> {
        s.parse().map_err(E::custom)
    }

    fn visit_map<M: de::MapAccess<'de>>(self, mut map: M) -> Result<Listen, M::Error> {
        let (mut address, mut protocols) = (None::<String>, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "address" => address = Some(map.next_value()?),
                "protocols" => protocols = Some(map.next_value()?),
                other => return Err(de::Error::unknown_field(other, &["address", "protocols"])),
            }
        }
        let address = address.ok_or_else(|| de::Error::missing_field("address"))?;
        let listen: Listen = address.parse().map_err(de::Error::custom)?;
        Ok(Listen { protocols, ..listen })
    }
}

use socket2::{Domain, Socket, Type};

/// Whether a socket bound to `bound` accepts connections to `local` (the
/// same address, or a wildcard of its family on its port).
pub fn covers(bound: SocketAddr, local: SocketAddr) -> bool {
    bound.port() == local.port()
        && (bound.ip() == local.ip() || (bound.ip().is_unspecified() && bound.is_ipv4() == local.is_ipv4()))
}

/// Which forms of HTTP/2 each bound address speaks: `http2.protocols`, or
/// what its `listen` entry says.
#[derive(Debug, Default)]
pub struct Spoken {
    default: Vec<Protocol>,
    /// The addresses whose entry says. None: every address speaks
    /// `default`, and a connection's own address is not looked up.
    by_addr: Vec<(SocketAddr, Vec<Protocol>)>,
}

impl Spoken {
    /// From `http2.protocols` and the bound addresses with what their
    /// entries say.
    pub fn new(default: &[Protocol], bound: Vec<(SocketAddr, Option<Vec<Protocol>>)>) -> Spoken {
        let by_addr = bound.into_iter().filter_map(|(a, p)| Some((a, p?))).collect();
        Spoken { default: default.to_vec(), by_addr }
    }

    /// Whether some address speaks otherwise than `http2.protocols`.
    pub fn per_address(&self) -> bool {
        !self.by_addr.is_empty()
    }

    /// What a connection accepted on `local` speaks.
    pub fn at(&self, local: SocketAddr) -> &[Protocol] {
        self.by_addr.iter().find(|(a, _)| covers(*a, local)).map_or(&self.default, |(_, p)| p)
    }

    /// Whether some address speaks `protocol`.
    pub fn anywhere(&self, protocol: Protocol) -> bool {
        self.default.contains(&protocol) || self.by_addr.iter().any(|(_, p)| p.contains(&protocol))
    }
}

/// A non-blocking `SO_REUSEPORT` socket bound to `addr`, not yet
/// listening.
pub fn bind(addr: SocketAddr) -> io::Result<Socket> {
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking().cloexec(), Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// The first of `ours`' addresses on which a socket outside this process
/// listens too. `ours` are the sockets about to serve (their inodes are
/// skipped without a look at this process's descriptors). Without
/// `/proc/net` (not mounted) nothing can be seen: `None`.
pub fn taken(ours: &[&Socket]) -> io::Result<Option<SocketAddr>> {
    let mut mine = HashSet::new();
    let mut addrs = Vec::new();
    for s in ours {
        mine.insert(inode(s.as_raw_fd())?);
        if let Some(a) = s.local_addr()?.as_socket() {
            addrs.push(a);
        }
    }
    let mut strangers = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match std::fs::read_to_string(table) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for (addr, ino) in text.lines().skip(1).filter_map(listener) {
            if mine.contains(&ino) {
                continue;
            }
            if let Some(ours) = addrs.iter().find(|a| overlaps(**a, addr)) {
                strangers.push((*ours, ino));
            }
        }
    }
    if strangers.is_empty() {
        return Ok(None);
    }
    // Rare: another socket listens there. It may still be this process's
    // own (a server being replaced), which only its descriptors tell.
    let held = process_sockets()?;
    Ok(strangers.into_iter().find(|(_, ino)| !held.contains(ino)).map(|(a, _)| a))
}

/// Do a listener on `theirs` and one on `ours` share connections?
fn overlaps(ours: SocketAddr, theirs: SocketAddr) -> bool {
    ours.port() == theirs.port()
        && ours.is_ipv4() == theirs.is_ipv4()
        && (ours.ip() == theirs.ip() || ours.ip().is_unspecified() || theirs.ip().is_unspecified())
}

/// A line of `/proc/net/tcp{,6}` for a socket in state `LISTEN`: its local
/// address and inode.
fn listener(line: &str) -> Option<(SocketAddr, u64)> {
    const LISTEN: &str = "0A";
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(3) != Some(&LISTEN) {
        return None;
    }
    let (ip, port) = fields.get(1)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // The address is printed as 32-bit words in host byte order.
    let mut bytes = Vec::with_capacity(16);
    for word in ip.as_bytes().chunks(8) {
        let word = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), fields.get(9)?.parse().ok()?))
}

fn inode(fd: i32) -> io::Result<u64> {
    // SAFETY: fstat on a descriptor the caller holds, into a local buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_ino)
}

/// Inodes of every socket this process holds.
fn process_sockets() -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(target) = std::fs::read_link(entry?.path()) else { continue };
        let target = target.to_string_lossy();
        if let Some(ino) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
            inodes.extend(ino.parse::<u64>());
        }
    }
    Ok(inodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        let addrs = |s: &str| s.parse::<Listen>().map(|l| l.addrs.iter().map(ToString::to_string).collect::<Vec<_>>());
        let all = Ok(vec!["0.0.0.0:8080".to_string(), "[::]:8080".to_string()]);
        assert_eq!(addrs("8080"), all);
        assert_eq!(addrs(":8080"), all);
        assert_eq!(addrs("*:8080"), all);
        assert_eq!(addrs("localhost:8080"), Ok(vec!["127.0.0.1:8080".into(), "[::1]:8080".into()]));
        assert_eq!(addrs("[::]:8080"), Ok(vec!["[::]:8080".into()]));
        assert_eq!(addrs("0.0.0.0:8080"), Ok(vec!["0.0.0.0:8080".into()]));
        assert_eq!(addrs("127.0.0.1:0"), Ok(vec!["127.0.0.1:0".into()]));
        assert_eq!(addrs("[::1]:443"), Ok(vec!["[::1]:443".into()]));
        for bad in
            ["", ":", "localhost", "localhost:", "8080x", "65536", ":-1", "+80", "example.com:80", "::1:80", "[::1]"]
        {
            assert!(addrs(bad).unwrap_err().contains("is not a listen address"), "{bad:?}");
        }
    }

    #[test]
    fn reads_listening_lines() {
        let v4 = "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listener(v4), Some(("127.0.0.1:8080".parse().unwrap(), 4242)));
        let v6 = "   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listener(v6), Some(("[::1]:80".parse().unwrap(), 77)));
        let established = v4.replace(" 0A ", " 01 ");
        assert_eq!(listener(&established), None);
    }

    #[test]
    fn wildcards_cover_their_family() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(overlaps(a("127.0.0.1:80"), a("0.0.0.0:80")));
        assert!(overlaps(a("0.0.0.0:80"), a("10.0.0.1:80")));
        assert!(!overlaps(a("127.0.0.1:80"), a("127.0.0.2:80")));
        assert!(!overlaps(a("127.0.0.1:80"), a("127.0.0.1:81")));
        assert!(!overlaps(a("0.0.0.0:80"), a("[::]:80")));
    }
}
