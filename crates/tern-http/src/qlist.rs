//! Weighted lists, as `Accept`, `Accept-Encoding` and the other `Accept-*`
//! fields carry them (RFC 9110 §12.4.2): `token;param=x;q=0.5, token2`.

/// A quality in thousandths (`q=0.5` is 500).
pub type Quality = u16;

/// The elements of one field value, in order, each with its quality (1000
/// when unstated) and without its other parameters; an element with an
/// invalid qvalue is left out.
pub fn elements(value: &[u8]) -> impl Iterator<Item = (&[u8], Quality)> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|e| !e.is_empty()).filter_map(|element| {
        let mut parts = element.split(|&b| b == b';').map(<[u8]>::trim_ascii);
        let token = parts.next().unwrap_or_default();
        let mut q = Some(1000);
        for param in parts {
            if let Some(v) = param.strip_prefix(b"q=").or_else(|| param.strip_prefix(b"Q=")) {
                q = parse_q(v);
            }
        }
        q.map(|q| (token, q))
    })
}

fn parse_q(v: &[u8]) -> Option<Quality> {
    match v {
        [b'0'] => Some(0),
        [b'1'] => Some(1000),
        [b'0', b'.', frac @ ..] if frac.len() <= 3 && frac.iter().all(u8::is_ascii_digit) => {
            let mut q = 0u16;
            for i in 0..3 {
                q = q * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
            }
            Some(q)
        }
        [b'1', b'.', zeros @ ..] if zeros.len() <= 3 && zeros.iter().all(|&d| d == b'0') => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qvalues() {
        assert_eq!(parse_q(b"0.5"), Some(500));
        assert_eq!(parse_q(b"0.125"), Some(125));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        assert_eq!(parse_q(b"1.5"), None);
        assert_eq!(parse_q(b"0.1234"), None);
        assert_eq!(parse_q(b".5"), None);
    }

    #[test]
    fn elements_with_their_qualities() {
        let got: Vec<_> = elements(b" text/html;level=1 , ,application/json;Q=0.5;x=y, a;q=2, b;q=0").collect();
        assert_eq!(got, [(&b"text/html"[..], 1000), (b"application/json", 500), (b"b", 0)]);
        assert_eq!(elements(b"").count(), 0);
    }
}
