//! What the servers under measurement serve: files of a pattern and HTML
//! pages that compress like real ones.

/// A file's bytes: a pattern that is neither all zeros nor compressible
/// to nothing.
pub fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

/// An HTML page of exactly `size` bytes, varied enough that it compresses
/// like a real one rather than like a repeated line.
pub fn page(size: usize) -> Vec<u8> {
    let words = ["server", "request", "latency", "buffer", "kernel", "socket", "tern", "static", "file", "chunk"];
    let mut out = String::from("<!DOCTYPE html><html><head><title>page</title></head><body>\n");
    let mut i = 0usize;
    while out.len() < size {
        let w = |k: usize| words[(i * 7 + k * 3 + i / 5) % words.len()];
        out.push_str(&format!("<p class=\"p{}\">{} {} {} {} #{}</p>\n", i % 13, w(1), w(2), w(3), w(4), i * 37 % 1009));
        i += 1;
    }
    let mut bytes = out.into_bytes();
    bytes.truncate(size);
    bytes
}
