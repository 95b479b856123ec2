//! The fields that cross the proxy, both ways: hop-by-hop fields removed
//! (`Connection` and every field it names, `Keep-Alive`, `TE`, `Trailer`,
//! `Transfer-Encoding`, `Upgrade` unless upgrading, `Proxy-*`), and on the
//! way up `X-Forwarded-For`, `-Proto`, `-Host`, RFC 7239 `Forwarded` and
//! `Via` — kept and extended when the client is a trusted proxy, replaced
//! otherwise, so a client cannot claim another address.
//!
//! A client's `TE: trailers` is the exception among hop-by-hop fields: it
//! goes up as `TE: trailers` (named in `Connection`, as RFC 9110 §10.1.4
//! has it), since tern relays a response's trailer fields — those that
//! [`trailer_relayed`] lets by — and a server such as a gRPC one sends
//! them only to a client that says it takes them.

use std::net::IpAddr;

use tern_http::response::field;
use tern_http::Request;

use crate::values::Network;

/// Fields that describe one connection, never forwarded.
const HOP_BY_HOP: [&str; 7] =
    ["connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "proxy-connection"];

/// Fields tern writes itself on the way up.
const REWRITTEN: [&str; 8] = [
    "host",
    "content-length",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
    "via",
    "expect",
];

/// Fields a trailer section must not carry (RFC 9110 §6.5.1): they frame,
/// route, authenticate or describe the whole message, which fields coming
/// after its body cannot change (a client would apply them too late, or
/// not at all).
const NEVER_TRAILERS: [&str; 24] = [
    "content-length",
    "content-encoding",
    "content-type",
    "content-range",
    "host",
    "authorization",
    "www-authenticate",
    "cookie",
    "set-cookie",
    "cache-control",
    "expires",
    "age",
    "date",
    "vary",
    "location",
    "retry-after",
    "expect",
    "max-forwards",
    "range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
];

/// Is `name` a hop-by-hop field, given the tokens of the message's
/// `Connection` fields?
pub fn hop_by_hop(name: &[u8], connection: &[&[u8]]) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
        || name.len() > 6 && name[..6].eq_ignore_ascii_case(b"proxy-")
        || connection.iter().any(|c| name.eq_ignore_ascii_case(c))
}

/// May trailer field `name` of a response be relayed? Not a hop-by-hop
/// one, nor one of [`NEVER_TRAILERS`].
pub fn trailer_relayed(name: &[u8]) -> bool {
    !hop_by_hop(name, &[]) && !NEVER_TRAILERS.iter().any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

/// Whether a request's `TE` fields list `trailers`.
fn takes_trailers<'a>(te: impl Iterator<Item = &'a [u8]>) -> bool {
    connection_tokens(te).iter().any(|t| t.eq_ignore_ascii_case(b"trailers"))
}

/// The tokens of every `Connection` field of a message.
pub fn connection_tokens<'a>(fields: impl Iterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    fields.flat_map(|v| v.split(|&b| b == b',')).map(<[u8]>::trim_ascii).filter(|t| !t.is_empty()).collect()
}

/// What the upstream request says of the client.
pub struct Client<'a> {
    pub peer: IpAddr,
    pub https: bool,
    /// The client's address is a proxy whose forwarding fields are kept.
    pub trusted: bool,
    /// The `Host` the upstream gets.
    pub host: &'a [u8],
    /// The body's length, when there is one.
    pub body: Option<u64>,
    /// Asking to switch protocols (`Upgrade` forwarded, `Connection: upgrade`).
    pub upgrade: bool,
}

/// Writes the head of the request sent upstream for `req` into `out`.
pub fn request_head(req: &Request<'_>, client: &Client<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(req.method_token.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path.as_bytes());
    if let Some(q) = req.query {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(client.host);
    out.extend_from_slice(b"\r\n");
    let connection = connection_tokens(req.values("connection"));
    for h in req.headers {
        let name = h.name.as_bytes();
        let upgrade = client.upgrade && name.eq_ignore_ascii_case(b"upgrade");
        if (hop_by_hop(name, &connection) && !upgrade)
            || REWRITTEN.iter().any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
        {
            continue;
        }
        field(out, name, h.value);
    }
    let trailers = takes_trailers(req.values("te"));
    if trailers {
        out.extend_from_slice(b"TE: trailers\r\n");
    }
    out.extend_from_slice(match (client.upgrade, trailers) {
        (true, true) => b"Connection: upgrade, te\r\n",
        (true, false) => b"Connection: upgrade\r\n",
        (false, true) => b"Connection: te\r\n",
        (false, false) => b"",
    });
    if let Some(n) = client.body {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    forwarding(req, client, out);
    out.extend_from_slice(b"\r\n");
}

/// `X-Forwarded-*`, `Forwarded` and `Via`, written straight into `out`
/// (nothing allocated on the way: this runs for every proxied request).
fn forwarding(req: &Request<'_>, client: &Client<'_>, out: &mut Vec<u8>) {
    use std::io::Write;
    let proto: &[u8] = if client.https { b"https" } else { b"http" };
    let host = req.host.unwrap_or_default().as_bytes();
    // A trusted proxy's own forwarding values are kept, and extended.
    let kept = |out: &mut Vec<u8>, name: &str| client.trusted && joined(out, req.values(name));

    out.extend_from_slice(b"X-Forwarded-For: ");
    if kept(out, "x-forwarded-for") {
        out.extend_from_slice(b", ");
    }
    let _ = write!(out, "{}\r\n", client.peer);
    out.extend_from_slice(b"X-Forwarded-Proto: ");
    if !kept(out, "x-forwarded-proto") {
        out.extend_from_slice(proto);
    }
    out.extend_from_slice(b"\r\nX-Forwarded-Host: ");
    if !kept(out, "x-forwarded-host") {
        out.extend_from_slice(host);
    }
    // RFC 7239: an IPv6 address is quoted and bracketed; a host that is
    // not a token is quoted.
    out.extend_from_slice(b"\r\nForwarded: ");
    if kept(out, "forwarded") {
        out.extend_from_slice(b", ");
    }
    let _ = match client.peer {
        IpAddr::V4(peer) => write!(out, "for={peer}"),
        IpAddr::V6(peer) => write!(out, "for=\"[{peer}]\""),
    };
    if !host.is_empty() {
        let token = host.iter().all(|&b| tern_http::request::is_tchar(b));
        out.extend_from_slice(b";host=");
        if token {
            out.extend_from_slice(host);
        } else {
            out.push(b'"');
            out.extend_from_slice(host);
            out.push(b'"');
        }
    }
    out.extend_from_slice(b";proto=");
    out.extend_from_slice(proto);
    out.extend_from_slice(b"\r\nVia: ");
    if joined(out, req.values("via")) {
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(if req.version == tern_http::request::Version::Http10 { b"1.0 tern" } else { b"1.1 tern" });
    out.extend_from_slice(b"\r\n");
}

/// Writes `values` joined by ", " into `out`; whether there was any.
fn joined<'a>(out: &mut Vec<u8>, values: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut any = false;
    for v in values {
        if any {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v);
        any = true;
    }
    any
}

/// Is `peer` one of `trusted`?
pub fn trusted(peer: IpAddr, trusted: &[Network]) -> bool {
    trusted.iter().any(|n| n.contains(peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_http::request::{parse_head, Head, Limits};

    fn upstream_head(raw: &str, trusted: bool) -> String {
        let limits = Limits { max_request_line: 8192, max_head_bytes: 16384, max_headers: 64 };
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let Ok(Head::Complete(req)) = parse_head(raw.as_bytes(), &limits, &mut fields) else { panic!("a request") };
        let client = Client {
            peer: "192.0.2.7".parse().unwrap(),
            https: true,
            trusted,
            host: b"app.internal",
            body: Some(5),
            upgrade: false,
        };
        let mut out = Vec::new();
        request_head(&req, &client, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn hop_by_hop_fields_go_and_forwarding_fields_are_replaced_for_an_untrusted_client() {
        let head = upstream_head(
            "POST /a?b=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n\
             Keep-Alive: 5\r\nTE: trailers\r\nProxy-Authorization: x\r\nX-Forwarded-For: 10.9.9.9\r\n\
             Forwarded: for=10.9.9.9\r\nContent-Length: 5\r\nAccept: */*\r\nUpgrade: h2c\r\n\r\nhello",
            false,
        );
        assert_eq!(
            head,
            "POST /a?b=1 HTTP/1.1\r\nHost: app.internal\r\nAccept: */*\r\nTE: trailers\r\nConnection: te\r\n\
             Content-Length: 5\r\n\
             X-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: shop.example\r\n\
             Forwarded: for=192.0.2.7;host=shop.example;proto=https\r\nVia: 1.1 tern\r\n\r\n"
        );
    }

    #[test]
    fn a_trusted_proxys_forwarding_fields_are_extended() {
        let head = upstream_head(
            "GET / HTTP/1.1\r\nHost: shop.example\r\nX-Forwarded-For: 203.0.113.1\r\nX-Forwarded-Proto: http\r\n\
             Forwarded: for=203.0.113.1\r\nVia: 1.1 edge\r\n\r\n",
            true,
        );
        assert!(head.contains("X-Forwarded-For: 203.0.113.1, 192.0.2.7\r\n"), "{head}");
        assert!(head.contains("X-Forwarded-Proto: http\r\n"), "{head}");
        assert!(head.contains("Forwarded: for=203.0.113.1, for=192.0.2.7;host=shop.example;proto=https\r\n"), "{head}");
        assert!(head.contains("Via: 1.1 edge, 1.1 tern\r\n"), "{head}");
    }

    #[test]
    fn te_goes_up_only_as_trailers_and_named_in_connection() {
        let te = |te: &str| upstream_head(&format!("GET / HTTP/1.1\r\nHost: a\r\nTE: {te}\r\n\r\n"), false);
        for takes in ["trailers", "gzip;q=0.5, Trailers", "deflate ,trailers"] {
            let head = te(takes);
            assert!(head.contains("\r\nTE: trailers\r\nConnection: te\r\n"), "{takes}: {head}");
        }
        let head = te("gzip, trailersx");
        assert!(!head.contains("TE:") && !head.contains("Connection"), "{head}");
    }

    #[test]
    fn trailer_fields_that_frame_route_or_authenticate_are_not_relayed() {
        for kept in ["X-Checksum", "grpc-status", "Server-Timing", "ETag"] {
            assert!(trailer_relayed(kept.as_bytes()), "{kept}");
        }
        for dropped in ["Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Connection", "Proxy-Foo", "Content-Length"]
            .iter()
            .chain(&["host", "Content-Type", "content-encoding", "Set-Cookie", "Authorization", "Cache-Control"])
        {
            assert!(!trailer_relayed(dropped.as_bytes()), "{dropped}");
        }
    }
}
