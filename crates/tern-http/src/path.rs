//! Request paths: percent-decoded once and normalised once, before anything
//! looks at the file system.
//!
//! The result is relative (no leading `/`), has no empty, `.` or `..`
//! segments, and no byte that could mean something else to the layers
//! below: NUL, backslash or any other control byte is refused. Decoding
//! happens exactly once, so `%252e%252e` is the literal name `%2e%2e`, never
//! `..`. A `..` that would climb above the root is refused, not clamped.

/// Why a path was refused (answered `400`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathError(pub &'static str);

/// A normalised path written into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalized {
    /// The request named a directory (trailing `/`, or ending in `.`/`..`).
    pub trailing_slash: bool,
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Decodes and normalises `raw` (which must start with `/`) into `out`,
/// which is cleared first and reused to avoid an allocation per request.
pub fn normalize(raw: &str, out: &mut Vec<u8>) -> Result<Normalized, PathError> {
    out.clear();
    let raw = raw.as_bytes();
    if raw.first() != Some(&b'/') {
        return Err(PathError("path does not start with /"));
    }
    // While building, every kept segment is followed by `/`.
    let mut i = 1;
    loop {
        let seg_start = out.len();
        let mut at_end = true;
        while i < raw.len() {
            let mut b = raw[i];
            if b == b'%' {
                let (Some(hi), Some(lo)) = (raw.get(i + 1).and_then(|&h| hex(h)), raw.get(i + 2).and_then(|&l| hex(l)))
                else {
                    return Err(PathError("malformed percent-encoding"));
                };
                b = hi << 4 | lo;
                i += 2;
            }
            i += 1;
            match b {
                0 => return Err(PathError("NUL in path")),
                b'\\' => return Err(PathError("backslash in path")),
                0x01..=0x1f | 0x7f => return Err(PathError("control byte in path")),
                b'/' => {
                    at_end = false;
                    break;
                }
                _ => out.push(b),
            }
        }
        let is_dir = match &out[seg_start..] {
            b"" | b"." => {
                out.truncate(seg_start);
                true
            }
            b".." => {
                out.truncate(seg_start);
                if out.pop().is_none() {
                    return Err(PathError("path climbs above the root"));
                }
                out.truncate(memchr::memrchr(b'/', out).map_or(0, |p| p + 1));
                true
            }
            _ => {
                out.push(b'/');
                false
            }
        };
        if at_end {
            out.pop_if(|b| *b == b'/');
            return Ok(Normalized { trailing_slash: is_dir });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(raw: &str) -> Result<(String, bool), PathError> {
        let mut out = Vec::new();
        let n = normalize(raw, &mut out)?;
        Ok((String::from_utf8(out).unwrap(), n.trailing_slash))
    }

    #[test]
    fn normalises() {
        assert_eq!(norm("/").unwrap(), (String::new(), true));
        assert_eq!(norm("/a/b.html").unwrap(), ("a/b.html".into(), false));
        assert_eq!(norm("/a//b/./c/").unwrap(), ("a/b/c".into(), true));
        assert_eq!(norm("/a/b/../c").unwrap(), ("a/c".into(), false));
        assert_eq!(norm("/a/b/..").unwrap(), ("a".into(), true));
        assert_eq!(norm("/a/..").unwrap(), (String::new(), true));
        assert_eq!(norm("/hello%20world.txt").unwrap(), ("hello world.txt".into(), false));
        assert_eq!(norm("/%252e%252e/x").unwrap(), ("%2e%2e/x".into(), false));
        assert_eq!(norm("/a%2fb").unwrap(), ("a/b".into(), false));
        assert_eq!(norm("/%C3%A9").unwrap(), ("é".into(), false));
    }

    #[test]
    fn refuses_escapes_and_bad_bytes() {
        for bad in [
            "/..",
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/etc/passwd",
            "/%2E%2E%2Fetc",
            "/a/%2e%2e/%2e%2e/b",
            "/a%00b",
            "/a%5cb",
            "/a\\b",
            "/%0a",
            "/%zz",
            "/%4",
            "x",
        ] {
            assert!(norm(bad).is_err(), "{bad}");
        }
    }
}
