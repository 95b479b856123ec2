//! Dates: the `Date` header and the access-log timestamp, formatted at most
//! once a second, HTTP-date parsing for conditional requests, and RFC 3339
//! for directory listings.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT` and `06/Nov/1994:08:49:37 +0000`,
/// recomputed only when the second changes.
#[derive(Clone, Debug)]
pub struct DateCache {
    second: u64,
    http: [u8; 29],
    clf: [u8; 26],
}

impl DateCache {
    pub fn new(now: SystemTime) -> Self {
        let mut cache = DateCache { second: u64::MAX, http: [0; 29], clf: [0; 26] };
        cache.update(now);
        cache
    }

    /// Brings the cache to `now`; cheap when the second has not changed.
    pub fn update(&mut self, now: SystemTime) {
        let second = unix_seconds(now);
        if second == self.second {
            return;
        }
        self.second = second;
        let rounded = UNIX_EPOCH + Duration::from_secs(second);
        self.http.copy_from_slice(httpdate::fmt_http_date(rounded).as_bytes());
        self.clf = format_clf(second);
    }

    /// The IMF-fixdate for the `Date` header.
    pub fn http(&self) -> &[u8; 29] {
        &self.http
    }

    /// The second it holds, since the epoch.
    pub fn second(&self) -> u64 {
        self.second
    }

    /// The Common Log Format timestamp (UTC), without brackets.
    pub fn clf(&self) -> &[u8; 26] {
        &self.clf
    }
}

/// Whole seconds since the epoch (0 for times before it).
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Parses any of the three HTTP-date forms to whole seconds since the epoch.
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?;
    httpdate::parse_http_date(s).ok().map(unix_seconds)
}

/// Formats whole seconds since the epoch as an IMF-fixdate.
pub fn format_http_date(secs: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

const MONTHS: [&[u8; 3]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `v` (below 100) as two digits at `out[at..at + 2]`.
fn two_digits(out: &mut [u8], at: usize, v: u64) {
    out[at] = b'0' + (v / 10) as u8;
    out[at + 1] = b'0' + (v % 10) as u8;
}

/// Year (clamped to four digits), month, day, hour, minute, second.
fn civil(second: u64) -> (u64, u32, u32, u64, u64, u64) {
    let (year, month, day) = civil_from_days((second / 86_400) as i64);
    let rem = second % 86_400;
    (year.clamp(0, 9999) as u64, month, day, rem / 3600, rem / 60 % 60, rem % 60)
}

fn format_clf(second: u64) -> [u8; 26] {
    let (year, month, day, h, m, s) = civil(second);
    let mut out = *b"00/Jan/0000:00:00:00 +0000";
    two_digits(&mut out, 0, u64::from(day));
    out[3..6].copy_from_slice(MONTHS[month as usize - 1]);
    two_digits(&mut out, 7, year / 100);
    two_digits(&mut out, 9, year % 100);
    two_digits(&mut out, 12, h);
    two_digits(&mut out, 15, m);
    two_digits(&mut out, 18, s);
    out
}

/// Whole seconds since the epoch as an RFC 3339 UTC timestamp,
/// `1994-11-06T08:49:37Z`.
pub fn format_rfc3339(second: u64) -> [u8; 20] {
    let (year, month, day, h, m, s) = civil(second);
    let mut out = *b"0000-00-00T00:00:00Z";
    two_digits(&mut out, 0, year / 100);
    two_digits(&mut out, 2, year % 100);
    two_digits(&mut out, 5, u64::from(month));
    two_digits(&mut out, 8, u64::from(day));
    two_digits(&mut out, 11, h);
    two_digits(&mut out, 14, m);
    two_digits(&mut out, 17, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_both_forms() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let cache = DateCache::new(t);
        assert_eq!(cache.http(), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(cache.clf(), b"06/Nov/1994:08:49:37 +0000");
        let leap = DateCache::new(UNIX_EPOCH + Duration::from_secs(951_782_400));
        assert_eq!(leap.clf(), b"29/Feb/2000:00:00:00 +0000");
        assert_eq!(&format_rfc3339(784_111_777), b"1994-11-06T08:49:37Z");
        assert_eq!(&format_rfc3339(951_782_400), b"2000-02-29T00:00:00Z");
        assert_eq!(&format_rfc3339(0), b"1970-01-01T00:00:00Z");
    }

    #[test]
    fn parses_all_three_forms() {
        for s in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            assert_eq!(parse_http_date(s.as_bytes()), Some(784_111_777), "{s}");
        }
        assert_eq!(parse_http_date(b"yesterday"), None);
    }
}
