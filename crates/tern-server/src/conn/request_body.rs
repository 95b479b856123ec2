//! Reading a request body off the connection: by length or chunked, with a
//! size limit (kept in a `spool::Spool` until a backend takes it).
//!
//! Sans-I/O: it decodes the bytes `request.rs` feeds it and hands on what
//! it decoded; it never reads the socket or stores the body itself.

use tern_http::chunked::{Chunk, ChunkError, ChunkedDecoder};
use tern_http::request::BodyFraming;

/// Why a body could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Bad chunked framing (`400`).
    Framing(&'static str),
    /// More than the configured maximum (`413`).
    TooLarge,
}

impl From<ChunkError> for BodyError {
    fn from(e: ChunkError) -> Self {
        BodyError::Framing(e.0)
    }
}

pub struct BodyReader {
    /// Bytes still expected for a `Content-Length` body.
    remaining: u64,
    /// Some for a chunked body.
    chunked: Option<ChunkedDecoder>,
    /// Decoded bytes so far.
    pub received: u64,
    limit: u64,
}

impl BodyReader {
    /// A reader for `framing`, or `None` when there is no body.
    pub fn new(framing: BodyFraming, limit: u64) -> Option<BodyReader> {
        match framing {
            BodyFraming::None | BodyFraming::Length(0) => None,
            BodyFraming::Length(n) => Some(BodyReader { remaining: n, chunked: None, received: 0, limit }),
            BodyFraming::Chunked => {
                Some(BodyReader { remaining: 0, chunked: Some(ChunkedDecoder::new()), received: 0, limit })
            }
        }
    }

    /// Feeds received bytes; decoded body bytes go to `sink`. Returns how
    /// many input bytes were consumed and whether the body is complete.
    pub fn feed(&mut self, input: &[u8], mut sink: impl FnMut(&[u8])) -> Result<(usize, bool), BodyError> {
        let Some(decoder) = &mut self.chunked else {
            let n = (input.len() as u64).min(self.remaining) as usize;
            self.remaining -= n as u64;
            self.received += n as u64;
            sink(&input[..n]);
            return Ok((n, self.remaining == 0));
        };
        let mut pos = 0;
        loop {
            let (n, chunk) = decoder.decode(&input[pos..])?;
            pos += n;
            match chunk {
                Chunk::Data(data) => {
                    self.received += data.len() as u64;
                    if self.received > self.limit {
                        return Err(BodyError::TooLarge);
                    }
                    sink(data);
                }
                Chunk::NeedMore => return Ok((pos, false)),
                Chunk::Done => return Ok((pos, true)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_and_chunked() {
        let mut r = BodyReader::new(BodyFraming::Length(5), 100).unwrap();
        let mut got = Vec::new();
        assert_eq!(r.feed(b"hel", |d| got.extend_from_slice(d)), Ok((3, false)));
        assert_eq!(r.feed(b"loGET", |d| got.extend_from_slice(d)), Ok((2, true)));
        assert_eq!(got, b"hello");

        let mut r = BodyReader::new(BodyFraming::Chunked, 100).unwrap();
        let mut got = Vec::new();
        assert_eq!(r.feed(b"3\r\nabc\r\n0\r\n\r\nX", |d| got.extend_from_slice(d)), Ok((13, true)));
        assert_eq!(got, b"abc");

        let mut r = BodyReader::new(BodyFraming::Chunked, 2).unwrap();
        assert_eq!(r.feed(b"3\r\nabc\r\n", |_| {}), Err(BodyError::TooLarge));
        assert!(BodyReader::new(BodyFraming::Length(0), 10).is_none());
    }
}
