//! Validation of the `Host` field and of absolute-form authorities.
//!
//! Strict in the way Apache's `HttpProtocolOptions Strict` is: a name made of
//! URI reg-name characters, a bracketed IPv6 literal, or — when the last label
//! is numeric — a canonical dotted-quad IPv4 address (no octal, hex or
//! shortened forms that different components would read differently), with
//! an optional decimal port.

use std::net::Ipv6Addr;

/// RFC 3986 `unreserved` and `sub-delims`, the characters of a reg-name
/// (percent-encoding is refused: no two components must decode differently).
fn is_reg_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        )
}

fn valid_port(port: &[u8]) -> bool {
    !port.is_empty() && port.len() <= 5 && port.iter().all(u8::is_ascii_digit) && {
        let n: u32 = port.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0'));
        n <= 65535
    }
}

fn valid_ipv4(host: &[u8]) -> bool {
    let mut parts = 0;
    for octet in host.split(|&b| b == b'.') {
        parts += 1;
        let canonical = match octet {
            [b'0'] => true,
            [b'1'..=b'9', rest @ ..] => rest.len() <= 2 && rest.iter().all(u8::is_ascii_digit),
            _ => false,
        };
        if !canonical || octet.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) > 255 {
            return false;
        }
    }
    parts == 4
}

fn valid_name(host: &[u8]) -> bool {
    if !host.iter().all(|&b| is_reg_name_byte(b)) {
        return false;
    }
    let last_label = host.rsplit(|&b| b == b'.').next().unwrap_or(b"");
    let numeric = !last_label.is_empty() && last_label.iter().all(u8::is_ascii_digit);
    !numeric || valid_ipv4(host)
}

/// Is `value` a valid `uri-host [ ":" port ]`? An empty value is valid only
/// where `allow_empty` (a `Host` field may be empty, an http URI may not).
pub fn valid_authority(value: &[u8], allow_empty: bool) -> bool {
    if value.is_empty() {
        return allow_empty;
    }
    if let Some(rest) = value.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal_ok = std::str::from_utf8(&rest[..close]).is_ok_and(|s| s.parse::<Ipv6Addr>().is_ok());
        return literal_ok
            && match &rest[close + 1..] {
                [] => true,
                [b':', port @ ..] => valid_port(port),
                _ => false,
            };
    }
    let (host, port) = match value.iter().rposition(|&b| b == b':') {
        Some(colon) => (&value[..colon], Some(&value[colon + 1..])),
        None => (value, None),
    };
    !host.is_empty() && valid_name(host) && port.is_none_or(valid_port)
}

/// The host of an authority [`valid_authority`] accepted, without its port:
/// `a.example:8080` → `a.example`, `[::1]:8080` → `[::1]`.
pub fn without_port(authority: &[u8]) -> &[u8] {
    let end = if authority.starts_with(b"[") {
        authority.iter().position(|&b| b == b']').map_or(authority.len(), |i| i + 1)
    } else {
        authority.iter().rposition(|&b| b == b':').unwrap_or(authority.len())
    };
    &authority[..end]
}

#[cfg(test)]
mod tests {
    use super::{valid_authority, without_port};

    #[test]
    fn the_port_is_dropped() {
        for (authority, host) in [
            (&b"a.example"[..], &b"a.example"[..]),
            (b"a.example:443", b"a.example"),
            (b"127.0.0.1:80", b"127.0.0.1"),
            (b"[::1]:8080", b"[::1]"),
            (b"[2001:db8::1]", b"[2001:db8::1]"),
            (b"", b""),
        ] {
            assert_eq!(without_port(authority), host, "{}", String::from_utf8_lossy(authority));
        }
    }

    #[test]
    fn accepts_names_addresses_and_literals() {
        for ok in [
            "localhost",
            "localhost:80",
            "foo-bar.example.com",
            "foo_bar.example.com",
            "127.0.0.1",
            "10.0.0.1:81",
            "0.0.0.0=5000",
            "0.0.0.0:5000",
            "[::1]",
            "[4711::abcd]:8000",
            "[4711:abcd::]",
            "239.255.255.250:1900",
        ] {
            assert!(valid_authority(ok.as_bytes(), false), "{ok}");
        }
        assert!(valid_authority(b"", true));
    }

    #[test]
    fn refuses_ambiguous_or_malformed() {
        for bad in [
            "017700000001",
            "0x7f.1",
            "127.01.0.1",
            "256.0.0.1",
            "%3127.0.0.1",
            "localhost:80 x",
            "localhost:80x",
            "localhost:80:80",
            "localhost::80",
            "foo@localhost:80",
            "4714::abcd:8001",
            "[4712::abcd::]",
            "abc\u{a0}",
            "abc\\foo",
            "localhost:",
            "localhost:99999",
            "",
        ] {
            assert!(!valid_authority(bad.as_bytes(), false), "{bad:?}");
        }
    }
}
