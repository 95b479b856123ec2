//! Strict decoding of `Transfer-Encoding: chunked` bodies: request bodies,
//! and the upstream responses the reverse proxy relays.
//!
//! The data comes out as it is decoded; extensions are checked and
//! dropped; the trailer section is checked and kept, whole, for the caller
//! to read once the body is done ([`ChunkedDecoder::trailers`]): which of
//! its fields may go on is the caller's to decide (RFC 9110 §6.5.1). The
//! decoder sets no limit on the body's size; its caller does (a request's
//! maximum body; none for a response relayed as it streams).
//!
//! A byte-at-a-time state machine for the framing (sizes, extensions,
//! trailers) and bulk slices for the data, so a body split anywhere decodes
//! the same. Everything RFC 9112 §7.1 does not allow is an error: a size
//! that overflows, stray bytes after a size, an extension without a name, a
//! bad byte in an extension or trailer, a missing CRLF after data.

use crate::request::is_tchar;

/// Longest run of whitespace accepted around a chunk size or extension
/// (RFC 9112 `BWS`; Apache accepts a few, a long run is refused).
pub const MAX_BWS: u8 = 8;
/// Most bytes of extensions on one chunk-size line.
pub const MAX_EXTENSION_BYTES: usize = 4096;
/// Most bytes of trailer section (its lines' CRLFs counted), kept until
/// the body is done.
pub const MAX_TRAILER_BYTES: usize = 8192;
/// 16 hex digits fill a u64.
const MAX_SIZE_DIGITS: u8 = 16;

/// A framing error: a request is answered `400`, an upstream response `502`;
/// the connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

/// What one call to [`ChunkedDecoder::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Body bytes.
    Data(&'a [u8]),
    /// The input ended inside the framing: feed more bytes.
    NeedMore,
    /// The last chunk and trailer section were read.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Size,
    SizeBws,
    ExtBeforeName,
    ExtName,
    ExtAfterName,
    ExtBeforeValue,
    ExtToken,
    ExtQuoted,
    ExtQuotedEscape,
    ExtAfterValue,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerLineStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    FinalLf,
    Done,
}

/// Decoder for one chunked body.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    digits: u8,
    bws: u8,
    ext_bytes: usize,
    /// The trailer section's field lines as they came, CRLFs included.
    trailer: Vec<u8>,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder { state: State::Size, size: 0, digits: 0, bws: 0, ext_bytes: 0, trailer: Vec::new() }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The trailer fields, once the body is done (none before): names as
    /// sent, values without the whitespace around them.
    pub fn trailers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let section = if self.is_done() { &self.trailer[..] } else { &[] };
        section.split(|&b| b == b'\n').filter_map(|line| {
            let line = line.strip_suffix(b"\r")?;
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii()))
        })
    }

    /// Decodes from `input`; returns the bytes consumed and what was found.
    /// Call again with the rest of the input after `Chunk::Data`.
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Chunk<'a>), ChunkError> {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data {
                let n = (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                self.size -= n as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                return Ok((i + n, Chunk::Data(&input[i..i + n])));
            }
            let b = input[i];
            i += 1;
            self.step(b)?;
            if self.state == State::Done {
                return Ok((i, Chunk::Done));
            }
        }
        Ok((i, if self.state == State::Done { Chunk::Done } else { Chunk::NeedMore }))
    }

    fn bws(&mut self) -> Result<(), ChunkError> {
        self.bws += 1;
        if self.bws > MAX_BWS {
            return Err(ChunkError("too much whitespace in chunk line"));
        }
        Ok(())
    }

    fn ext_byte(&mut self) -> Result<(), ChunkError> {
        self.ext_bytes += 1;
        if self.ext_bytes > MAX_EXTENSION_BYTES {
            return Err(ChunkError("chunk extensions too long"));
        }
        Ok(())
    }

    fn end_of_size_line(&mut self) {
        self.state = State::SizeLf;
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        let is_ws = b == b' ' || b == b'\t';
        match self.state {
            Size => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    self.digits += 1;
                    if self.digits > MAX_SIZE_DIGITS {
                        return Err(ChunkError("chunk size too large"));
                    }
                    let d = (b as char).to_digit(16).unwrap_or(0);
                    self.size = (self.size << 4) | u64::from(d);
                }
                _ if self.digits == 0 => return Err(ChunkError("missing chunk size")),
                b'\r' => self.end_of_size_line(),
                b';' => self.state = ExtBeforeName,
                _ if is_ws => {
                    self.bws = 0;
                    self.bws()?;
                    self.state = SizeBws;
                }
                _ => return Err(ChunkError("invalid byte after chunk size")),
            },
            SizeBws => match b {
                _ if is_ws => self.bws()?,
                b'\r' => self.end_of_size_line(),
                b';' => self.state = ExtBeforeName,
                _ => return Err(ChunkError("invalid byte after chunk size")),
            },
            ExtBeforeName => {
                self.ext_byte()?;
                match b {
                    _ if is_ws => self.bws()?,
                    _ if is_tchar(b) => self.state = ExtName,
                    _ => return Err(ChunkError("missing chunk extension name")),
                }
            }
            ExtName => {
                self.ext_byte()?;
                match b {
                    _ if is_tchar(b) => {}
                    b'=' => self.state = ExtBeforeValue,
                    b';' => self.state = ExtBeforeName,
                    b'\r' => self.end_of_size_line(),
                    _ if is_ws => {
                        self.bws = 0;
                        self.bws()?;
                        self.state = ExtAfterName;
                    }
                    _ => return Err(ChunkError("invalid byte in chunk extension")),
                }
            }
            ExtAfterName => {
                self.ext_byte()?;
                match b {
                    _ if is_ws => self.bws()?,
                    b'=' => self.state = ExtBeforeValue,
                    b';' => self.state = ExtBeforeName,
                    b'\r' => self.end_of_size_line(),
                    _ => return Err(ChunkError("invalid byte in chunk extension")),
                }
            }
            ExtBeforeValue => {
                self.ext_byte()?;
                match b {
                    _ if is_ws => self.bws()?,
                    b'"' => self.state = ExtQuoted,
                    _ if is_tchar(b) => self.state = ExtToken,
                    _ => return Err(ChunkError("missing chunk extension value")),
                }
            }
            ExtToken => {
                self.ext_byte()?;
                match b {
                    _ if is_tchar(b) => {}
                    b';' => self.state = ExtBeforeName,
                    b'\r' => self.end_of_size_line(),
                    _ if is_ws => {
                        self.bws = 0;
                        self.bws()?;
                        self.state = ExtAfterValue;
                    }
                    _ => return Err(ChunkError("invalid byte in chunk extension")),
                }
            }
            ExtQuoted => {
                self.ext_byte()?;
                match b {
                    b'"' => self.state = ExtAfterValue,
                    b'\\' => self.state = ExtQuotedEscape,
                    b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => {}
                    _ => return Err(ChunkError("invalid byte in quoted chunk extension")),
                }
            }
            ExtQuotedEscape => {
                self.ext_byte()?;
                match b {
                    b'\t' | b' '..=0x7e | 0x80..=0xff => self.state = ExtQuoted,
                    _ => return Err(ChunkError("invalid escape in chunk extension")),
                }
            }
            ExtAfterValue => {
                self.ext_byte()?;
                match b {
                    _ if is_ws => self.bws()?,
                    b';' => self.state = ExtBeforeName,
                    b'\r' => self.end_of_size_line(),
                    _ => return Err(ChunkError("invalid byte after chunk extension")),
                }
            }
            SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError("bare CR in chunk line"));
                }
                self.digits = 0;
                self.ext_bytes = 0;
                self.state = if self.size == 0 { TrailerLineStart } else { Data };
            }
            Data => unreachable!("data is consumed in bulk"),
            DataCr => {
                if b != b'\r' {
                    return Err(ChunkError("missing CRLF after chunk data"));
                }
                self.state = DataLf;
            }
            DataLf => {
                if b != b'\n' {
                    return Err(ChunkError("missing CRLF after chunk data"));
                }
                self.state = Size;
            }
            TrailerLineStart => match b {
                b'\r' => self.state = FinalLf,
                _ if is_tchar(b) => self.trailer(b, TrailerName)?,
                _ => return Err(ChunkError("invalid trailer field")),
            },
            TrailerName => match b {
                _ if is_tchar(b) => self.trailer(b, TrailerName)?,
                b':' => self.trailer(b, TrailerValue)?,
                _ => return Err(ChunkError("invalid trailer field name")),
            },
            TrailerValue => match b {
                b'\r' => self.trailer(b, TrailerLf)?,
                b'\t' | b' '..=0x7e | 0x80..=0xff => self.trailer(b, TrailerValue)?,
                _ => return Err(ChunkError("invalid trailer field value")),
            },
            TrailerLf => {
                if b != b'\n' {
                    return Err(ChunkError("bare CR in trailer"));
                }
                self.trailer(b, TrailerLineStart)?;
            }
            FinalLf => {
                if b != b'\n' {
                    return Err(ChunkError("bare CR after trailer"));
                }
                self.state = Done;
            }
            Done => return Err(ChunkError("data after last chunk")),
        }
        Ok(())
    }

    fn trailer(&mut self, b: u8, next: State) -> Result<(), ChunkError> {
        if self.trailer.len() >= MAX_TRAILER_BYTES {
            return Err(ChunkError("trailer section too large"));
        }
        self.trailer.push(b);
        self.state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes: the data, whether the
    /// body ended, and the bytes it took.
    fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, bool, usize), ChunkError> {
        let (data, dec, used) = decoder_in_steps(input, step)?;
        Ok((data, dec.is_done(), used))
    }

    /// As [`decode_in_steps`], with the decoder as it was left.
    fn decoder_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, ChunkedDecoder, usize), ChunkError> {
        let mut dec = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut fed = 0;
        let mut pending: Vec<u8> = Vec::new();
        while fed < input.len() {
            let end = (fed + step).min(input.len());
            pending.extend_from_slice(&input[fed..end]);
            fed = end;
            let mut pos = 0;
            loop {
                let (n, chunk) = dec.decode(&pending[pos..])?;
                pos += n;
                match chunk {
                    Chunk::Data(d) => out.extend_from_slice(d),
                    Chunk::NeedMore => break,
                    Chunk::Done => {
                        let used = fed - (pending.len() - pos);
                        return Ok((out, dec, used));
                    }
                }
            }
            pending.drain(..pos);
        }
        Ok((out, dec, fed))
    }

    fn trailers(dec: &ChunkedDecoder) -> Vec<(String, String)> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        dec.trailers().map(|(name, value)| (text(name), text(value))).collect()
    }

    /// The trailer section comes out whole however it was split, names as
    /// sent and values trimmed; a body without one has none.
    #[test]
    fn keeps_the_trailer_section_at_every_split() {
        let body = b"3\r\nabc\r\n0\r\nX-Checksum: abc\r\nserver-timing:db;dur=53 \t\r\nEmpty:\r\n\r\nNEXT";
        let want = [("X-Checksum", "abc"), ("server-timing", "db;dur=53"), ("Empty", "")];
        let want: Vec<(String, String)> = want.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        for step in 1..body.len() {
            let (data, dec, used) = decoder_in_steps(body, step).unwrap();
            assert_eq!((data.as_slice(), used), (&b"abc"[..], body.len() - 4), "step {step}");
            assert_eq!(trailers(&dec), want, "step {step}");
        }
        let (_, dec, _) = decoder_in_steps(b"3\r\nabc\r\n0\r\n\r\n", 1).unwrap();
        assert_eq!(trailers(&dec), []);
        // Not before the section's end: a field may be cut.
        let (_, dec, _) = decoder_in_steps(b"0\r\nX-Checksum: ab", 4096).unwrap();
        assert_eq!((dec.is_done(), trailers(&dec)), (false, vec![]));
    }

    /// The section's bytes, CRLFs counted, are bounded.
    #[test]
    fn refuses_a_trailer_section_past_its_limit() {
        let section = |len: usize| {
            let line = format!("X: {}\r\n", "v".repeat(len - 5));
            format!("0\r\n{line}\r\n").into_bytes()
        };
        let (_, dec, _) = decoder_in_steps(&section(MAX_TRAILER_BYTES), 100).unwrap();
        assert_eq!(trailers(&dec)[0].1.len(), MAX_TRAILER_BYTES - 5);
        let err = decoder_in_steps(&section(MAX_TRAILER_BYTES + 1), 100).err();
        assert_eq!(err, Some(ChunkError("trailer section too large")));
    }

    #[test]
    fn decodes_at_every_split() {
        let body = b"5\r\nhello\r\n6;ext=\"a \\\"q\\\"\";x\r\n world\r\n000\r\nX-Trailer: 1\r\n\r\nNEXT";
        for step in 1..body.len() {
            let (data, done, used) = decode_in_steps(body, step).unwrap();
            assert_eq!(data, b"hello world");
            assert!(done);
            assert_eq!(used, body.len() - 4, "step {step}");
        }
    }

    #[test]
    fn accepts_limited_bws_and_extensions() {
        for ok in [
            &b"A    \r\n1234567890\r\n0\r\n\r\n"[..],
            b"A; ext=val\r\n1234567890\r\n0\r\n\r\n",
            b"a;foo=bar\r\n0123456789\r\n0\r\n\r\n",
        ] {
            let (data, done, _) = decode_in_steps(ok, 4096).unwrap();
            assert_eq!(data.len(), 10);
            assert!(done);
        }
    }

    #[test]
    fn refuses_malformed_framing() {
        for bad in [
            &b"A           \r\n1234567890\r\n0\r\n\r\n"[..],
            b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\r\n\r\n",
            b"A; ext=\x7fval\r\n1234567890\r\n0\r\n\r\n",
            b" A\r\n",
            b"2 erfrferferf\r\naa\r\n",
            b"2;\r\naa\r\n0\r\n\r\n",
            b"5;a=\"abc\r\nhello\r\n",
            b"5\r\nABCDE0\r\n",
            b"5\r\r;ABCD\r\n34\r\nE\r\n0\r\n\r\n",
            b"3 \n  \r\nfoo\r\n",
            b"3\r\nfoo\r\n\r\n",
            b"0\r\nBad Name: x\r\n\r\n",
            b"0\r\nX: a\x01b\r\n\r\n",
            b"-1\r\n",
        ] {
            assert!(decode_in_steps(bad, 4096).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// An upstream's body: chunks far larger than a request's body limit
    /// stream through in slices, the trailer is kept apart, the next
    /// response starts right after.
    #[test]
    fn decodes_response_bodies() {
        let mut dec = ChunkedDecoder::new();
        assert_eq!(dec.decode(b"7FFFFFFFFFFFFFFF\r\n").unwrap(), (18, Chunk::NeedMore));
        assert_eq!(dec.decode(b"abc").unwrap(), (3, Chunk::Data(b"abc")));
        assert!(!dec.is_done());

        let body = b"10000\r\n".iter().chain(&[b'x'; 0x10000]).chain(b"\r\n0\r\nServer-Timing: db;dur=53\r\n\r\n");
        let body: Vec<u8> = body.copied().collect();
        let (data, done, used) = decode_in_steps(&[&body[..], b"HTTP/1.1 200 OK\r\n"].concat(), 1000).unwrap();
        assert_eq!((data.len(), done, used), (0x10000, true, body.len()));

        for bad in [&b"zz\r\nhello\r\n0\r\n\r\n"[..], b"0x5\r\nhello\r\n", b"5\r\nhello!\r\n", b"10000000000000000\r\n"]
        {
            assert!(decode_in_steps(bad, 4096).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
