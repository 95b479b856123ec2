//! The FastCGI 1.0 wire format, sans I/O: records to bytes and bytes to
//! events. Nothing here touches a socket, so every rule is tested on byte
//! strings.

/// Record types (FastCGI 1.0 §8).
pub const BEGIN_REQUEST: u8 = 1;
pub const ABORT_REQUEST: u8 = 2;
pub const END_REQUEST: u8 = 3;
pub const PARAMS: u8 = 4;
pub const STDIN: u8 = 5;
pub const STDOUT: u8 = 6;
pub const STDERR: u8 = 7;

/// The one request id used: a connection carries one request at a time.
pub const ID: u16 = 1;

const VERSION: u8 = 1;
const HEADER_LEN: usize = 8;
/// The largest content one record carries.
pub const MAX_CONTENT: usize = 0xffff;
const ROLE_RESPONDER: u16 = 1;
const FLAG_KEEP_CONN: u8 = 1;
/// `protocolStatus` of an `END_REQUEST` that completed the request.
pub const REQUEST_COMPLETE: u8 = 0;

/// A record's header, for content of `len` bytes (at most 65,535) that the
/// caller appends.
pub fn header(buf: &mut Vec<u8>, kind: u8, id: u16, len: usize) {
    debug_assert!(len <= MAX_CONTENT);
    let [ih, il] = id.to_be_bytes();
    let [lh, ll] = (len as u16).to_be_bytes();
    buf.extend_from_slice(&[VERSION, kind, ih, il, lh, ll, 0, 0]);
}

/// `BEGIN_REQUEST` for a responder; `keep_conn` asks the application to
/// leave the connection open after the request.
pub fn begin_request(buf: &mut Vec<u8>, id: u16, keep_conn: bool) {
    header(buf, BEGIN_REQUEST, id, 8);
    let [rh, rl] = ROLE_RESPONDER.to_be_bytes();
    buf.extend_from_slice(&[rh, rl, if keep_conn { FLAG_KEEP_CONN } else { 0 }, 0, 0, 0, 0, 0]);
}

pub fn abort_request(buf: &mut Vec<u8>, id: u16) {
    header(buf, ABORT_REQUEST, id, 0);
}

/// Appends `data` to stream `kind` in as few records as fit (none for an
/// empty `data`: use [`end_stream`] for the closing empty record).
pub fn stream(buf: &mut Vec<u8>, kind: u8, id: u16, data: &[u8]) {
    buf.reserve(data.len() + data.len().div_ceil(MAX_CONTENT) * HEADER_LEN);
    for piece in data.chunks(MAX_CONTENT) {
        header(buf, kind, id, piece.len());
        buf.extend_from_slice(piece);
    }
}

/// The empty record that ends stream `kind`.
pub fn end_stream(buf: &mut Vec<u8>, kind: u8, id: u16) {
    header(buf, kind, id, 0);
}

/// Writes the `PARAMS` stream straight into `buf`: name-value pairs are
/// appended after a provisional record header, and [`Params::finish`]
/// splits the content into records only when it exceeds one record's
/// 64 KiB (so a usual request's parameters take one record).
pub struct Params<'a> {
    buf: &'a mut Vec<u8>,
    id: u16,
    start: usize,
}

impl<'a> Params<'a> {
    pub fn new(buf: &'a mut Vec<u8>, id: u16) -> Params<'a> {
        let start = buf.len();
        header(buf, PARAMS, id, 0);
        Params { buf, id, start }
    }

    /// One name-value pair (lengths below 128 take one byte, else four).
    pub fn pair(&mut self, name: &[u8], value: &[u8]) {
        for len in [name.len(), value.len()] {
            if len < 0x80 {
                self.buf.push(len as u8);
            } else {
                self.buf.extend_from_slice(&((len as u32 & 0x7fff_ffff) | 0x8000_0000).to_be_bytes());
            }
        }
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
    }

    /// Closes the stream (its records, then the empty one). Content that
    /// fits one record stays where it was written: only the provisional
    /// header's length is filled in.
    pub fn finish(self) {
        let content_at = self.start + HEADER_LEN;
        let len = self.buf.len() - content_at;
        if len == 0 {
            self.buf.truncate(self.start);
        } else if len <= MAX_CONTENT {
            self.buf[self.start + 4..self.start + 6].copy_from_slice(&(len as u16).to_be_bytes());
        } else {
            let content = self.buf.split_off(content_at);
            self.buf.truncate(self.start);
            stream(self.buf, PARAMS, self.id, &content);
        }
        end_stream(self.buf, PARAMS, self.id);
    }
}

/// What the application sent, as decoded so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Content of an `STDOUT` (or `STDERR`) record, possibly a part of
    /// one: a record's content is passed on as it arrives.
    Stdout(&'a [u8]),
    Stderr(&'a [u8]),
    /// `END_REQUEST`: the response is complete.
    End {
        app_status: u32,
        protocol_status: u8,
    },
}

/// A protocol violation: the connection cannot be trusted further.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation(pub &'static str);

#[derive(Clone, Copy, Debug)]
enum State {
    Header,
    Content { kind: u8, left: usize, padding: usize },
    Padding(usize),
}

/// Decodes the records of one request from a byte stream, in pieces of any
/// size.
#[derive(Debug)]
pub struct Decoder {
    id: u16,
    state: State,
    /// The 8 bytes of an `END_REQUEST` body, collected across reads.
    end: [u8; 8],
    end_len: usize,
}

impl Decoder {
    pub fn new(id: u16) -> Decoder {
        Decoder { id, state: State::Header, end: [0; 8], end_len: 0 }
    }

    /// Decodes from the start of `input`: how many bytes were consumed and
    /// the event they completed, if any (`None`: more bytes needed, all of
    /// `input` consumed or kept). Call again with the rest.
    pub fn decode<'i>(&mut self, input: &'i [u8]) -> Result<(usize, Option<Event<'i>>), Violation> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Header => {
                    let Some(h) = input.get(pos..pos + HEADER_LEN) else { return Ok((pos, None)) };
                    if h[0] != VERSION {
                        return Err(Violation("unknown FastCGI version"));
                    }
                    let (kind, id) = (h[1], u16::from_be_bytes([h[2], h[3]]));
                    let left = usize::from(u16::from_be_bytes([h[4], h[5]]));
                    let padding = usize::from(h[6]);
                    pos += HEADER_LEN;
                    match kind {
                        STDOUT | STDERR | END_REQUEST if id == self.id => {}
                        STDOUT | STDERR | END_REQUEST => return Err(Violation("a record for another request")),
                        // Management records (id 0), e.g. UNKNOWN_TYPE: skipped.
                        _ if id == 0 => {}
                        _ => return Err(Violation("an unexpected record type")),
                    }
                    if kind == END_REQUEST && left != 8 {
                        return Err(Violation("END_REQUEST of the wrong length"));
                    }
                    self.end_len = 0;
                    self.state = State::Content { kind, left, padding };
                }
                State::Content { kind, left, padding } => {
                    if left == 0 {
                        self.state = State::Padding(padding);
                        if kind == END_REQUEST {
                            let b = self.end;
                            let app_status = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                            return Ok((pos, Some(Event::End { app_status, protocol_status: b[4] })));
                        }
                        continue;
                    }
                    let n = left.min(input.len() - pos);
                    if n == 0 {
                        return Ok((pos, None));
                    }
                    let data = &input[pos..pos + n];
                    pos += n;
                    self.state = State::Content { kind, left: left - n, padding };
                    match kind {
                        STDOUT => return Ok((pos, Some(Event::Stdout(data)))),
                        STDERR => return Ok((pos, Some(Event::Stderr(data)))),
                        END_REQUEST => {
                            self.end[self.end_len..self.end_len + n].copy_from_slice(data);
                            self.end_len += n;
                        }
                        _ => {}
                    }
                }
                State::Padding(left) => {
                    let n = left.min(input.len() - pos);
                    pos += n;
                    if n < left {
                        self.state = State::Padding(left - n);
                        return Ok((pos, None));
                    }
                    self.state = State::Header;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Joined stdout, joined stderr, and the end's `(app, protocol)` status.
    type Decoded = (Vec<u8>, Vec<u8>, Option<(u32, u8)>);

    /// Every event of `input`, fed in pieces of `step` bytes.
    fn decode_all(input: &[u8], step: usize) -> Result<Decoded, Violation> {
        let mut d = Decoder::new(1);
        let (mut out, mut err, mut end) = (Vec::new(), Vec::new(), None);
        let mut pending: Vec<u8> = Vec::new();
        for piece in input.chunks(step.max(1)) {
            pending.extend_from_slice(piece);
            loop {
                let (n, ev) = d.decode(&pending)?;
                let ev = ev.map(|e| match e {
                    Event::Stdout(b) => (0, b.to_vec(), None),
                    Event::Stderr(b) => (1, b.to_vec(), None),
                    Event::End { app_status, protocol_status } => (2, Vec::new(), Some((app_status, protocol_status))),
                });
                pending.drain(..n);
                match ev {
                    Some((0, b, _)) => out.extend(b),
                    Some((1, b, _)) => err.extend(b),
                    Some((_, _, e)) => end = e,
                    None => break,
                }
            }
        }
        Ok((out, err, end))
    }

    fn record(kind: u8, id: u16, content: &[u8], padding: u8) -> Vec<u8> {
        let mut r =
            vec![1, kind, (id >> 8) as u8, id as u8, (content.len() >> 8) as u8, content.len() as u8, padding, 0];
        r.extend_from_slice(content);
        r.extend(std::iter::repeat_n(0xAA, usize::from(padding)));
        r
    }

    #[test]
    fn encodes_begin_params_and_streams() {
        let mut buf = Vec::new();
        begin_request(&mut buf, 1, true);
        assert_eq!(buf, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
        buf.clear();
        let mut p = Params::new(&mut buf, 1);
        p.pair(b"A", b"bc");
        p.pair(&[b'N'; 200], b"");
        p.finish();
        let mut expected =
            vec![1, 4, 0, 1, 0, 2 + 1 + 2 + 4 + 1 + 200, 0, 0, 1, 2, b'A', b'b', b'c', 0x80, 0, 0, 200, 0];
        expected.extend([b'N'; 200]);
        expected.extend([1, 4, 0, 1, 0, 0, 0, 0]);
        assert_eq!(buf, expected);

        // Content over 64 KiB: two records, the pair split between them,
        // then the empty one.
        buf.clear();
        let big = vec![b'v'; 70_000];
        let mut p = Params::new(&mut buf, 3);
        p.pair(b"BIG", &big);
        p.finish();
        let content_len = 1 + 4 + 3 + 70_000;
        assert_eq!(buf.len(), content_len + 3 * 8);
        assert_eq!(&buf[..8], [1, 4, 0, 3, 0xff, 0xff, 0, 0]);
        assert_eq!(&buf[8..16], [3, 0x80, 0x01, 0x11, 0x70, b'B', b'I', b'G']);
        let second = 8 + 0xffff;
        assert_eq!(
            &buf[second..second + 8],
            [1, 4, 0, 3, ((content_len - 0xffff) >> 8) as u8, (content_len - 0xffff) as u8, 0, 0]
        );
        assert_eq!(&buf[buf.len() - 8..], [1, 4, 0, 3, 0, 0, 0, 0]);

        // No pairs: just the closing record.
        buf.clear();
        Params::new(&mut buf, 1).finish();
        assert_eq!(buf, [1, 4, 0, 1, 0, 0, 0, 0]);

        buf.clear();
        stream(&mut buf, STDIN, 1, b"xy");
        stream(&mut buf, STDIN, 1, b"");
        end_stream(&mut buf, STDIN, 1);
        abort_request(&mut buf, 1);
        assert_eq!(buf, [1, 5, 0, 1, 0, 2, 0, 0, b'x', b'y', 1, 5, 0, 1, 0, 0, 0, 0, 1, 2, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn decodes_in_pieces_of_any_size() {
        let mut input = record(STDOUT, 1, b"Status: 200\r\n\r\nhello", 3);
        input.extend(record(9, 0, b"mgmt", 0)); // a management record: skipped
        input.extend(record(STDERR, 1, b"warning", 1));
        input.extend(record(STDOUT, 1, b" world", 0));
        input.extend(record(STDOUT, 1, b"", 0));
        input.extend(record(END_REQUEST, 1, &[0, 0, 1, 2, REQUEST_COMPLETE, 0, 0, 0], 0));
        for step in [1, 2, 3, 7, 8, 9, 64, 10_000] {
            let (out, err, end) = decode_all(&input, step).unwrap();
            assert_eq!(out, b"Status: 200\r\n\r\nhello world", "step {step}");
            assert_eq!(err, b"warning");
            assert_eq!(end, Some((258, REQUEST_COMPLETE)));
        }
    }

    #[test]
    fn refuses_violations() {
        let mut bad = record(STDOUT, 1, b"x", 0);
        bad[0] = 2;
        assert_eq!(decode_all(&bad, 100), Err(Violation("unknown FastCGI version")));
        assert_eq!(decode_all(&record(STDOUT, 2, b"x", 0), 100), Err(Violation("a record for another request")));
        assert_eq!(decode_all(&record(STDIN, 1, b"x", 0), 100), Err(Violation("an unexpected record type")));
        assert_eq!(
            decode_all(&record(END_REQUEST, 1, b"short", 0), 100),
            Err(Violation("END_REQUEST of the wrong length"))
        );
    }
}
