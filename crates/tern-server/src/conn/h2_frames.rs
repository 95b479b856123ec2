//! The frames the h2 crate drops, read off the client's bytes on their
//! way to it: `PRIORITY_UPDATE` (RFC 9218 §7.1), which the crate does not
//! know and so ignores. Only frame boundaries are followed (a 9-byte head
//! each); every frame still goes to the crate, which checks them all.

/// `PRIORITY_UPDATE`'s frame type.
const PRIORITY_UPDATE: u8 = 0x10;

/// Longest `PRIORITY_UPDATE` payload read (a stream id and a short
/// Structured Fields dictionary); a longer one is skipped.
const MAX_UPDATE: usize = 256;

/// Where the scan is in the client's bytes.
pub(super) struct FrameScan {
    /// Bytes of the connection preface still to pass.
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to pass.
    left: usize,
    /// The current frame's payload, when it is one to read.
    payload: Option<Vec<u8>>,
}

impl FrameScan {
    /// A scan of a connection's bytes from their start (its preface).
    pub(super) fn new(preface: usize) -> FrameScan {
        FrameScan { preface_left: preface, head: [0; 9], head_len: 0, left: 0, payload: None }
    }

    /// Follows `bytes`, the next the client sent; hands `update` each
    /// `PRIORITY_UPDATE` completed in them: the stream it is for, and its
    /// priority field value.
    pub(super) fn scan(&mut self, mut bytes: &[u8], update: &mut impl FnMut(u32, &[u8])) {
        let n = self.preface_left.min(bytes.len());
        self.preface_left -= n;
        bytes = &bytes[n..];
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                if let Some(p) = self.payload.as_mut() {
                    p.extend_from_slice(&bytes[..n]);
                }
                self.left -= n;
                bytes = &bytes[n..];
            } else {
                let n = (9 - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                self.head_len += n;
                bytes = &bytes[n..];
                if self.head_len < 9 {
                    return;
                }
                self.head_len = 0;
                let h = self.head;
                self.left = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                // On stream 0 only (RFC 9218 §7.1); others are the crate's
                // to refuse.
                let read = h[3] == PRIORITY_UPDATE && h[5..9] == [0; 4] && self.left <= MAX_UPDATE;
                self.payload = read.then(|| Vec::with_capacity(self.left));
            }
            if self.left == 0 {
                if let Some(p) = self.payload.take().filter(|p| p.len() >= 4) {
                    let stream = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
                    update(stream, &p[4..]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, 0]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn priority_updates_are_found_however_the_bytes_are_cut() {
        let mut bytes = b"PREFACE".to_vec();
        bytes.extend(frame(4, 0, &[0, 4, 0, 0, 0, 1]));
        bytes.extend(frame(0x10, 0, b"\x00\x00\x00\x03u=0, i"));
        bytes.extend(frame(0, 1, &[0x10; 40]));
        bytes.extend(frame(0x10, 5, b"\x00\x00\x00\x07u=1"));
        bytes.extend(frame(0x10, 0, b"\x80\x00\x00\x09u=6"));
        for cut in [1, 2, 7, 9, 10, 16, bytes.len()] {
            let (mut scan, mut got) = (FrameScan::new(7), Vec::new());
            for piece in bytes.chunks(cut) {
                scan.scan(piece, &mut |stream, value| got.push((stream, value.to_vec())));
            }
            assert_eq!(got, [(3, b"u=0, i".to_vec()), (9, b"u=6".to_vec())], "in pieces of {cut}");
        }
    }
}
