//! The header section, shared by request and response heads: where it ends,
//! its line endings, its fields (tokenised by `httparse`, which refuses
//! obs-fold and invalid bytes in names and values), and the value helpers
//! both parsers apply to them.

use memchr::{memchr2_iter, memmem};

/// Why a header section was refused; each parser names its own answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SectionError {
    /// Over `max_head_bytes` or `max_headers`.
    TooLarge,
    /// Malformed; the text says why, for the error log.
    Invalid(&'static str),
}

/// The header section after a start line whose LF is at `line_end`, the
/// head having begun at `start`: `None` while its end has not arrived
/// (bytes already invalid are refused early, so a slow peer learns at
/// once), else the fields and the end of the head. The head may take
/// `max_head_bytes` and `max_headers` fields (at most `fields.len()`).
pub(crate) fn parse_section<'a>(
    buf: &'a [u8],
    start: usize,
    line_end: usize,
    max_head_bytes: usize,
    max_headers: usize,
    fields: &'a mut [httparse::Header<'a>],
) -> Result<Option<(&'a [httparse::Header<'a>], usize)>, SectionError> {
    let fields_start = line_end + 1;
    let max = max_headers.min(fields.len());
    // The head ends at the first empty line; the start line's own CRLF may
    // be the first half of it.
    let Some(blank) = memmem::find(&buf[line_end - 1..], b"\r\n\r\n") else {
        if buf.len() - start > max_head_bytes {
            return Err(SectionError::TooLarge);
        }
        let bytes = &buf[fields_start..];
        let complete_lines = memchr::memrchr(b'\n', bytes).map_or(0, |i| i + 1);
        if !line_endings_ok(&bytes[..complete_lines], true) {
            return Err(SectionError::Invalid("bare CR or LF in header section"));
        }
        return match httparse::parse_headers(bytes, &mut fields[..max]) {
            Err(err) => Err(field_error(err)),
            Ok(_) => Ok(None),
        };
    };
    let head_end = line_end - 1 + blank + 4;
    if head_end - start > max_head_bytes {
        return Err(SectionError::TooLarge);
    }
    let block = &buf[fields_start..head_end];
    if !line_endings_ok(block, false) {
        return Err(SectionError::Invalid("bare CR or LF in header section"));
    }
    match httparse::parse_headers(block, &mut fields[..max]) {
        Ok(httparse::Status::Complete((_, headers))) => Ok(Some((headers, head_end))),
        Ok(httparse::Status::Partial) => Err(SectionError::Invalid("malformed header section")),
        Err(err) => Err(field_error(err)),
    }
}

fn field_error(err: httparse::Error) -> SectionError {
    match err {
        httparse::Error::TooManyHeaders => SectionError::TooLarge,
        httparse::Error::HeaderName => SectionError::Invalid("invalid header field name"),
        httparse::Error::HeaderValue => SectionError::Invalid("invalid header field value"),
        _ => SectionError::Invalid("malformed header section"),
    }
}

/// Every CR is followed by LF and every LF preceded by CR. With `partial`,
/// a CR may end the bytes (its LF has not arrived yet).
fn line_endings_ok(bytes: &[u8], partial: bool) -> bool {
    let mut hits = memchr2_iter(b'\r', b'\n', bytes);
    while let Some(i) = hits.next() {
        if bytes[i] != b'\r' {
            return false;
        }
        match hits.next() {
            Some(j) if j == i + 1 && bytes[j] == b'\n' => {}
            None if partial && i + 1 == bytes.len() => {}
            _ => return false,
        }
    }
    true
}

/// A field value without its optional whitespace (RFC 9110 §5.5).
pub(crate) fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The elements of a comma-separated list field, trimmed.
pub(crate) fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows)
}

/// The `Connection` options that decide whether a connection persists,
/// gathered over every `Connection` field of a head.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnectionOptions {
    close: bool,
    keep_alive: bool,
}

impl ConnectionOptions {
    /// Takes in one `Connection` field's value.
    pub(crate) fn add(&mut self, value: &[u8]) {
        for token in list(value) {
            self.close |= token.eq_ignore_ascii_case(b"close");
            self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
        }
    }

    /// HTTP/1.1 persists unless `close`; HTTP/1.0 only with `keep-alive`
    /// and without `close` (RFC 9112 §9.3).
    pub(crate) fn persistent(self, http10: bool) -> bool {
        !self.close && (self.keep_alive || !http10)
    }
}

/// Decimal `Content-Length` without sign, spaces or overflow.
pub(crate) fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(
        0u64,
        |n, &d| if d.is_ascii_digit() { n.checked_mul(10)?.checked_add(u64::from(d - b'0')) } else { None },
    )
}
