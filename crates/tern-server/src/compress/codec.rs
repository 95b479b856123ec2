//! The three encoders, whole buffer in, whole buffer out.
//!
//! Libraries chosen by measurement on this machine (`shared/DEPS.md`):
//! libdeflate for gzip (its level 6 is ~3× system zlib's speed at the same
//! ratio), the pure-Rust `brotli`, and `zstd`. Compressor objects and the
//! input/output buffers live in a thread-local and are reused: a fresh
//! compressor per call halves throughput. (The `brotli` crate has no way to
//! reset an encoder, so its state is built per call; that happens once per
//! file and coding, never per response, because results are cached.)

use std::cell::RefCell;
use std::io;

use tern_http::accept_encoding::Coding;

/// Compression levels, one per codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    pub gzip: u32,
    pub br: u32,
    pub zstd: u32,
}

/// One thread's reusable encoders and buffers.
struct Codecs {
    levels: Levels,
    gzip: libdeflater::Compressor,
    zstd: zstd::bulk::Compressor<'static>,
    /// The file being compressed.
    input: Vec<u8>,
    /// The encoder's output, copied out at its exact size afterwards.
    output: Vec<u8>,
}

impl Codecs {
    fn new(levels: Levels) -> io::Result<Codecs> {
        let level = libdeflater::CompressionLvl::new(levels.gzip as i32)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "gzip level out of range"))?;
        Ok(Codecs {
            levels,
            gzip: libdeflater::Compressor::new(level),
            zstd: zstd::bulk::Compressor::new(levels.zstd as i32)?,
            input: Vec::new(),
            output: Vec::new(),
        })
    }

    fn encode(&mut self, coding: Coding) -> io::Result<&[u8]> {
        let input = &self.input;
        let out = &mut self.output;
        out.clear();
        match coding {
            Coding::Gzip => {
                out.resize(self.gzip.gzip_compress_bound(input.len()), 0);
                let n = self.gzip.gzip_compress(input, out).map_err(|e| io::Error::other(format!("gzip: {e:?}")))?;
                out.truncate(n);
            }
            Coding::Zstd => {
                out.reserve(zstd::zstd_safe::compress_bound(input.len()));
                self.zstd.compress_to_buffer(input, out)?;
            }
            Coding::Br => {
                let params = brotli::enc::BrotliEncoderParams {
                    quality: self.levels.br as i32,
                    size_hint: input.len(),
                    ..Default::default()
                };
                brotli::BrotliCompress(&mut &input[..], out, &params)?;
            }
            Coding::Identity => out.extend_from_slice(input),
        }
        Ok(out)
    }
}

thread_local! {
    static CODECS: RefCell<Option<Codecs>> = const { RefCell::new(None) };
}

/// Fills this thread's input buffer with `fill` and encodes it with
/// `coding`; `done` gets the encoded bytes. The buffers stay with the thread
/// for the next call.
pub fn with_encoded<R>(
    levels: Levels,
    coding: Coding,
    fill: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
    done: impl FnOnce(&[u8], &[u8]) -> R,
) -> io::Result<R> {
    CODECS.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|c| c.levels != levels) {
            *slot = Some(Codecs::new(levels)?);
        }
        let codecs = slot.as_mut().expect("just set");
        codecs.input.clear();
        fill(&mut codecs.input)?;
        codecs.encode(coding)?;
        let result = done(&codecs.input, &codecs.output);
        // A one-off huge file should not pin its buffers to the thread.
        const KEEP: usize = 1 << 20;
        if codecs.input.capacity() > KEEP {
            codecs.input = Vec::new();
        }
        if codecs.output.capacity() > KEEP {
            codecs.output = Vec::new();
        }
        Ok(result)
    })
}

/// The file extension of a precompressed sidecar for `coding`.
pub fn sidecar_suffix(coding: Coding) -> &'static str {
    match coding {
        Coding::Gzip => ".gz",
        Coding::Br => ".br",
        Coding::Zstd => ".zst",
        Coding::Identity => "",
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    const LEVELS: Levels = Levels { gzip: 6, br: 5, zstd: 3 };

    fn page() -> Vec<u8> {
        let mut s = String::from("<!DOCTYPE html><html><head><title>codec test</title></head><body>\n");
        for i in 0..2000 {
            s.push_str(&format!("<p class=\"row-{}\">item {i} of the list, value {}</p>\n", i % 7, i * 31 % 1009));
        }
        s.push_str("</body></html>\n");
        s.into_bytes()
    }

    fn encode(coding: Coding, data: &[u8]) -> Vec<u8> {
        with_encoded(
            LEVELS,
            coding,
            |buf| {
                buf.extend_from_slice(data);
                Ok(())
            },
            |input, out| {
                assert_eq!(input, data);
                out.to_vec()
            },
        )
        .unwrap()
    }

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => flate2::read::GzDecoder::new(data).read_to_end(&mut out).map(drop),
            Coding::Br => brotli::Decompressor::new(data, 4096).read_to_end(&mut out).map(drop),
            Coding::Zstd => zstd::stream::read::Decoder::new(data).and_then(|mut d| d.read_to_end(&mut out)).map(drop),
            Coding::Identity => {
                out.extend_from_slice(data);
                Ok(())
            }
        }
        .unwrap();
        out
    }

    #[test]
    fn each_codec_round_trips_exactly() {
        let page = page();
        let mut noise = vec![0u8; 70_000];
        let mut x = 0x9e37_79b9_u32;
        for b in &mut noise {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        for data in [page.as_slice(), &noise, b"", b"a"] {
            for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
                let encoded = encode(coding, data);
                assert_eq!(decode(coding, &encoded), data, "{coding:?} of {} bytes", data.len());
                if data.len() > 10_000 && data[0] == b'<' {
                    assert!(encoded.len() * 4 < data.len(), "{coding:?} compresses a page well");
                }
            }
        }
    }

    #[test]
    fn buffers_are_reused_across_calls() {
        let page = page();
        for _ in 0..3 {
            for coding in [Coding::Gzip, Coding::Zstd] {
                assert_eq!(decode(coding, &encode(coding, &page)), page);
            }
        }
        CODECS.with(|c| assert!(c.borrow().as_ref().unwrap().output.capacity() > 0));
    }
}
