//! `Range: bytes=…` evaluation against a representation length
//! (RFC 9110 §14).

/// An inclusive byte range within the representation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What to answer a request carrying `Range`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeDecision {
    /// Ignore the field: send the whole representation with `200`
    /// (unknown unit, bad syntax, or more ranges than allowed).
    Full,
    /// `206` with one part, or `multipart/byteranges` for several.
    Partial(Vec<ByteRange>),
    /// `416` with `Content-Range: bytes */len`.
    Unsatisfiable,
}

fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Evaluates a `Range` value for a representation of `len` bytes. More than
/// `max_ranges` satisfiable ranges are ignored (a many-range request is a
/// known amplification attack); overlapping ranges are coalesced.
pub fn evaluate(value: &[u8], len: u64, max_ranges: usize) -> RangeDecision {
    let Some(set) = value.get(..6).filter(|u| u.eq_ignore_ascii_case(b"bytes=")).map(|_| &value[6..]) else {
        return RangeDecision::Full;
    };
    let mut ranges = Vec::new();
    let mut any = false;
    for spec in set.split(|&b| b == b',').map(trim).filter(|s| !s.is_empty()) {
        any = true;
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return RangeDecision::Full;
        };
        let (first, last) = (&spec[..dash], &spec[dash + 1..]);
        let range = if first.is_empty() {
            let Some(suffix) = digits(last) else { return RangeDecision::Full };
            (suffix > 0 && len > 0).then(|| ByteRange { start: len.saturating_sub(suffix), end: len - 1 })
        } else {
            let Some(start) = digits(first) else { return RangeDecision::Full };
            let end = if last.is_empty() {
                u64::MAX
            } else {
                match digits(last) {
                    Some(end) if end >= start => end,
                    _ => return RangeDecision::Full,
                }
            };
            (start < len).then(|| ByteRange { start, end: end.min(len - 1) })
        };
        ranges.extend(range);
    }
    if !any {
        return RangeDecision::Full;
    }
    if ranges.is_empty() {
        return RangeDecision::Unsatisfiable;
    }
    if ranges.len() > max_ranges {
        return RangeDecision::Full;
    }
    if overlapping(&ranges) {
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<ByteRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(m) if r.start <= m.end.saturating_add(1) => m.end = m.end.max(r.end),
                _ => merged.push(r),
            }
        }
        ranges = merged;
    }
    RangeDecision::Partial(ranges)
}

fn overlapping(ranges: &[ByteRange]) -> bool {
    ranges.iter().enumerate().any(|(i, a)| ranges[i + 1..].iter().any(|b| a.start <= b.end && b.start <= a.end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeDecision::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(evaluate(b"bytes=0-499", 10_000, 16), Partial(vec![r(0, 499)]));
        assert_eq!(evaluate(b"bytes=9500-", 10_000, 16), Partial(vec![r(9500, 9999)]));
        assert_eq!(evaluate(b"bytes=-500", 10_000, 16), Partial(vec![r(9500, 9999)]));
        assert_eq!(evaluate(b"bytes=-50000", 10_000, 16), Partial(vec![r(0, 9999)]));
        assert_eq!(evaluate(b"BYTES=0-99999999999999999999999", 10, 16), Partial(vec![r(0, 9)]));
    }

    #[test]
    fn multiple_and_coalesced() {
        assert_eq!(evaluate(b"bytes=0-0, -1", 10, 16), Partial(vec![r(0, 0), r(9, 9)]));
        assert_eq!(evaluate(b"bytes=500-600,601-999", 10_000, 16), Partial(vec![r(500, 600), r(601, 999)]));
        assert_eq!(evaluate(b"bytes=500-700, 601-999", 10_000, 16), Partial(vec![r(500, 999)]));
        assert_eq!(evaluate(b"bytes=0-1,,4-5", 10, 16), Partial(vec![r(0, 1), r(4, 5)]));
        assert_eq!(evaluate(b"bytes=0-1,2-3,4-5", 10, 2), Full);
    }

    #[test]
    fn unsatisfiable_and_invalid() {
        assert_eq!(evaluate(b"bytes=10-", 10, 16), Unsatisfiable);
        assert_eq!(evaluate(b"bytes=-0", 10, 16), Unsatisfiable);
        assert_eq!(evaluate(b"bytes=0-", 0, 16), Unsatisfiable);
        assert_eq!(evaluate(b"bytes=5-1", 10, 16), Full);
        assert_eq!(evaluate(b"bytes=abc", 10, 16), Full);
        assert_eq!(evaluate(b"items=0-1", 10, 16), Full);
        assert_eq!(evaluate(b"bytes=", 10, 16), Full);
        assert_eq!(evaluate(b"bytes=1-2-3", 10, 16), Full);
    }
}
