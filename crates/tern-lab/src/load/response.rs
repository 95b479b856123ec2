//! The generator's HTTP/1.1 response parser: sans-I/O and deliberately minimal.
//!
//! A load generator must not be slower than the server it measures, so it
//! parses only what it needs to *frame* responses — the status code, the body
//! length (`Content-Length`, `chunked`, or "until the server closes") and
//! whether the connection stays open. Header values other than those are
//! skipped without being copied. Body bytes are counted, never stored.
//!
//! The parser never buffers: it consumes whole lines of the head (status line,
//! headers, chunk-size lines, trailers) and any number of body bytes. When a
//! line is incomplete it stops and reports how much it consumed; the caller
//! keeps the unconsumed tail and presents it again, followed by the next bytes
//! read. This keeps per-connection state to a few integers.

use memchr::memchr;

/// A line of the head longer than this is refused: no sane server sends one,
/// and it bounds the bytes a connection has to carry between reads.
pub const MAX_LINE: usize = 16 * 1024;

/// Why a response could not be framed. Any of these ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed status line")]
    StatusLine,
    #[error("malformed header line")]
    Header,
    #[error("invalid Content-Length")]
    ContentLength,
    #[error("invalid chunk size line")]
    ChunkSize,
    #[error("missing CRLF after chunk data")]
    ChunkEnd,
    #[error("head line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("connection closed in the middle of a response")]
    Truncated,
}

/// One complete response, as far as the generator cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Status code of the final (non-1xx) response.
    pub status: u16,
    /// Payload bytes: the body after de-chunking.
    pub body_bytes: u64,
    /// Bytes on the wire for this response: head, framing and body, including
    /// any interim 1xx responses before it.
    pub wire_bytes: u64,
    /// The server will close the connection after this response
    /// (`Connection: close`, HTTP/1.0 without keep-alive, or a close-delimited
    /// body), so requests pipelined behind it were never processed.
    pub close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    StatusLine,
    Headers,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkDataEnd,
    Trailers,
    UntilClose,
}

/// Incremental parser for a stream of responses on one connection.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    state: State,
    status: u16,
    content_length: Option<u64>,
    chunked: bool,
    /// `Transfer-Encoding` present but not ending in `chunked`: the body runs
    /// until the connection closes (RFC 9112 §6.3).
    other_coding: bool,
    close: bool,
    keep_alive: bool,
    http10: bool,
    body_bytes: u64,
    wire_bytes: u64,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseParser {
    pub fn new() -> Self {
        ResponseParser {
            state: State::StatusLine,
            status: 0,
            content_length: None,
            chunked: false,
            other_coding: false,
            close: false,
            keep_alive: false,
            http10: false,
            body_bytes: 0,
            wire_bytes: 0,
        }
    }

    /// True when no byte of the next response has been seen: a connection the
    /// server closes in this state lost no response in progress.
    pub fn is_idle(&self) -> bool {
        self.state == State::StatusLine && self.wire_bytes == 0
    }

    /// Parses from `input` until one response completes or the input runs out.
    ///
    /// `head_request` says whether the request this response answers was a
    /// `HEAD` (whose response has no body whatever its headers say). Returns
    /// the bytes consumed and the response if it completed; after a response
    /// the caller may call again with the rest of the input for the next one.
    /// Unconsumed bytes are an incomplete line: present them again with more.
    pub fn parse(&mut self, input: &[u8], head_request: bool) -> Result<(usize, Option<Response>), ParseError> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Body(remaining) | State::ChunkData(remaining) => {
                    let take = remaining.min((input.len() - pos) as u64);
                    pos += take as usize;
                    self.body_bytes += take;
                    self.wire_bytes += take;
                    let left = remaining - take;
                    if left > 0 {
                        self.state = match self.state {
                            State::Body(_) => State::Body(left),
                            _ => State::ChunkData(left),
                        };
                        return Ok((pos, None));
                    }
                    if let State::Body(_) = self.state {
                        return Ok((pos, Some(self.complete())));
                    }
                    self.state = State::ChunkDataEnd;
                }
                State::UntilClose => {
                    let take = (input.len() - pos) as u64;
                    self.body_bytes += take;
                    self.wire_bytes += take;
                    return Ok((input.len(), None));
                }
                _ => {
                    let rest = &input[pos..];
                    let Some(nl) = memchr(b'\n', rest) else {
                        if rest.len() > MAX_LINE {
                            return Err(ParseError::LineTooLong);
                        }
                        return Ok((pos, None));
                    };
                    if nl > MAX_LINE {
                        return Err(ParseError::LineTooLong);
                    }
                    let line = &rest[..nl];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    pos += nl + 1;
                    self.wire_bytes += nl as u64 + 1;
                    if let Some(done) = self.line(line, head_request)? {
                        return Ok((pos, Some(done)));
                    }
                }
            }
        }
    }

    /// The server closed the connection. Completes a close-delimited body;
    /// anything else in progress was cut short.
    pub fn finish(&mut self) -> Result<Option<Response>, ParseError> {
        match self.state {
            State::UntilClose => Ok(Some(self.complete())),
            State::StatusLine if self.wire_bytes == 0 => Ok(None),
            _ => Err(ParseError::Truncated),
        }
    }

    /// Handles one head line (without its line ending). Returns a response
    /// when the line completes one.
    fn line(&mut self, line: &[u8], head_request: bool) -> Result<Option<Response>, ParseError> {
        match self.state {
            State::StatusLine => {
                self.status_line(line)?;
                self.state = State::Headers;
                Ok(None)
            }
            State::Headers if line.is_empty() => Ok(self.end_of_head(head_request)),
            State::Headers => {
                self.header(line)?;
                Ok(None)
            }
            State::ChunkSize => {
                let size = chunk_size(line)?;
                self.state = if size == 0 { State::Trailers } else { State::ChunkData(size) };
                Ok(None)
            }
            State::ChunkDataEnd => {
                if !line.is_empty() {
                    return Err(ParseError::ChunkEnd);
                }
                self.state = State::ChunkSize;
                Ok(None)
            }
            State::Trailers if line.is_empty() => Ok(Some(self.complete())),
            State::Trailers => Ok(None),
            State::Body(_) | State::ChunkData(_) | State::UntilClose => {
                unreachable!("body states are handled in parse")
            }
        }
    }

    fn status_line(&mut self, line: &[u8]) -> Result<(), ParseError> {
        // "HTTP/1.1 200 OK": version, space, three digits, then space or end.
        if line.len() < 12 || !line.starts_with(b"HTTP/1.") || line[8] != b' ' {
            return Err(ParseError::StatusLine);
        }
        self.http10 = match line[7] {
            b'0' => true,
            b'1' => false,
            _ => return Err(ParseError::StatusLine),
        };
        let code = &line[9..12];
        if !code.iter().all(u8::is_ascii_digit) || (line.len() > 12 && line[12] != b' ') {
            return Err(ParseError::StatusLine);
        }
        self.status = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
        if self.status < 100 {
            return Err(ParseError::StatusLine);
        }
        Ok(())
    }

    fn header(&mut self, line: &[u8]) -> Result<(), ParseError> {
        let colon = memchr(b':', line).ok_or(ParseError::Header)?;
        let name = &line[..colon];
        if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
            return Err(ParseError::Header);
        }
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value).ok_or(ParseError::ContentLength)?;
            if self.content_length.is_some_and(|old| old != n) {
                return Err(ParseError::ContentLength);
            }
            self.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only the last coding decides the framing.
            let last = value.rsplit(|&b| b == b',').next().unwrap_or(b"").trim_ascii();
            self.chunked = last.eq_ignore_ascii_case(b"chunked");
            self.other_coding = !self.chunked;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    self.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    self.keep_alive = true;
                }
            }
        }
        Ok(())
    }

    /// The blank line after the headers: decide how the body is framed
    /// (RFC 9112 §6.3, in its order).
    fn end_of_head(&mut self, head_request: bool) -> Option<Response> {
        if (100..200).contains(&self.status) && self.status != 101 {
            // Interim response (100 Continue, 103 Early Hints): the real one follows.
            let wire = self.wire_bytes;
            self.reset();
            self.wire_bytes = wire;
            return None;
        }
        if self.http10 && !self.keep_alive {
            self.close = true;
        }
        if head_request || self.status == 204 || self.status == 304 || self.status == 101 {
            return Some(self.complete());
        }
        if self.chunked {
            self.state = State::ChunkSize;
            None
        } else if self.other_coding {
            self.close = true;
            self.state = State::UntilClose;
            None
        } else {
            match self.content_length {
                Some(0) => Some(self.complete()),
                Some(n) => {
                    self.state = State::Body(n);
                    None
                }
                None => {
                    self.close = true;
                    self.state = State::UntilClose;
                    None
                }
            }
        }
    }

    fn complete(&mut self) -> Response {
        let done = Response {
            status: self.status,
            body_bytes: self.body_bytes,
            wire_bytes: self.wire_bytes,
            close: self.close,
        };
        self.reset();
        done
    }

    fn reset(&mut self) {
        *self = ResponseParser::new();
    }
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// "1a2b" or "1a2b;ext=val": the hexadecimal size of the next chunk.
fn chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let end = memchr(b';', line).unwrap_or(line.len());
    let hex = line[..end].trim_ascii();
    if hex.is_empty() || hex.len() > 15 {
        return Err(ParseError::ChunkSize);
    }
    hex.iter().try_fold(0u64, |n, &b| {
        let digit = (b as char).to_digit(16).ok_or(ParseError::ChunkSize)?;
        Ok(n * 16 + u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces split at `cuts`, the way a caller does: the
    /// unconsumed tail is carried and presented again with the next piece.
    fn run(input: &[u8], cuts: &[usize], head: bool) -> Result<Vec<Response>, ParseError> {
        let mut parser = ResponseParser::new();
        let mut done = Vec::new();
        let mut carry: Vec<u8> = Vec::new();
        let mut bounds = cuts.to_vec();
        bounds.push(input.len());
        let mut from = 0;
        for to in bounds {
            carry.extend_from_slice(&input[from..to]);
            from = to;
            let mut pos = 0;
            loop {
                let (used, response) = parser.parse(&carry[pos..], head)?;
                pos += used;
                match response {
                    Some(r) => done.push(r),
                    None => break,
                }
            }
            carry.drain(..pos);
        }
        // An incomplete line at the close is a response cut short, as the
        // worker treats it.
        if !carry.is_empty() {
            return Err(ParseError::Truncated);
        }
        if let Some(r) = parser.finish()? {
            done.push(r);
        }
        Ok(done)
    }

    fn whole(input: &[u8]) -> Vec<Response> {
        run(input, &[], false).unwrap()
    }

    /// Every split of the input into two pieces parses to the same responses.
    fn every_split(input: &[u8], head: bool) -> Vec<Response> {
        let expected = run(input, &[], head).unwrap();
        for cut in 0..=input.len() {
            assert_eq!(run(input, &[cut], head).unwrap(), expected, "split at byte {cut}");
        }
        // And one byte at a time.
        let singles: Vec<usize> = (1..input.len()).collect();
        assert_eq!(run(input, &singles, head).unwrap(), expected, "byte by byte");
        expected
    }

    #[test]
    fn content_length_body() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello";
        let r = every_split(input, false);
        assert_eq!(r, vec![Response { status: 200, body_bytes: 5, wire_bytes: input.len() as u64, close: false }]);
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let input = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n\
            5;name=val\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";
        let r = every_split(input, false);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].body_bytes, 31);
        assert_eq!(r[0].wire_bytes, input.len() as u64);
        assert!(!r[0].close);
    }

    #[test]
    fn close_delimited_body() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end";
        let r = every_split(input, false);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].body_bytes, 13);
        assert!(r[0].close);
    }

    #[test]
    fn pipelined_responses_back_to_back() {
        let one = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".as_slice();
        let two = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nno\r\n0\r\n\r\n";
        let three = b"HTTP/1.1 204 No Content\r\n\r\n";
        let input = [one, two.as_slice(), three.as_slice()].concat();
        let r = every_split(&input, false);
        let statuses: Vec<u16> = r.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [200, 404, 204]);
        assert_eq!(r.iter().map(|r| r.body_bytes).collect::<Vec<_>>(), [3, 2, 0]);
        assert_eq!(r.iter().map(|r| r.wire_bytes).sum::<u64>(), input.len() as u64);
    }

    #[test]
    fn head_response_has_no_body() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n";
        let r = every_split(input, true);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.body_bytes == 0 && !r.close));
    }

    #[test]
    fn not_modified_ignores_content_length() {
        let r = whole(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n");
        assert_eq!((r[0].status, r[0].body_bytes), (304, 0));
    }

    #[test]
    fn interim_responses_are_skipped() {
        let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        let r = every_split(input, false);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, 201);
        assert_eq!(r[0].wire_bytes, input.len() as u64);
    }

    #[test]
    fn connection_close_and_http10() {
        let r = whole(b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, close\r\nContent-Length: 0\r\n\r\n");
        assert!(r[0].close);
        let r = whole(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(r[0].close);
        let r = whole(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
        assert!(!r[0].close);
    }

    #[test]
    fn bare_lf_line_endings_are_accepted() {
        let r = whole(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok");
        assert_eq!(r[0].body_bytes, 2);
    }

    #[test]
    fn malformed_input_is_refused() {
        let bad: [(&[u8], ParseError); 8] = [
            (b"HTTP/2 200 OK\r\n\r\n", ParseError::StatusLine),
            (b"HTTP/1.1 2x0 OK\r\n\r\n", ParseError::StatusLine),
            (b"HTTP/1.1 2000 OK\r\n\r\n", ParseError::StatusLine),
            (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", ParseError::Header),
            (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", ParseError::ContentLength),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", ParseError::ContentLength),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ParseError::ChunkSize),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", ParseError::ChunkEnd),
        ];
        for (input, err) in bad {
            assert_eq!(run(input, &[], false), Err(err), "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn truncated_response_is_an_error_at_close() {
        assert_eq!(run(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", &[], false), Err(ParseError::Truncated));
        assert_eq!(run(b"HTTP/1.1 200 O", &[], false), Err(ParseError::Truncated));
        // A clean close between responses loses nothing.
        assert_eq!(run(b"", &[], false), Ok(vec![]));
    }

    #[test]
    fn overlong_line_is_refused() {
        let mut input = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
        input.resize(input.len() + MAX_LINE + 10, b'a');
        let mut parser = ResponseParser::new();
        assert_eq!(parser.parse(&input, false), Err(ParseError::LineTooLong));
        // A long line still in progress is kept (not refused) until it passes the limit.
        let mut parser = ResponseParser::new();
        assert_eq!(parser.parse(&input[..MAX_LINE], false), Ok((17, None)));
    }

    #[test]
    fn idle_only_before_the_first_byte() {
        let mut parser = ResponseParser::new();
        assert!(parser.is_idle());
        parser.parse(b"HTTP/1.1 200 OK\r\n", false).unwrap();
        assert!(!parser.is_idle());
        parser.parse(b"Content-Length: 0\r\n\r\n", false).unwrap();
        assert!(parser.is_idle());
    }
}
