//! Where a request body waits between the connection that reads it and
//! the backend (CGI program, FastCGI application) that takes it.

use std::fs::File;
use std::io::{self, Write};

/// A request body as read so far: in memory up to a window
/// (`limits.body_buffer`), beyond it in an unnamed temporary file, as
/// nginx keeps a body in its client body buffer and then its temp file.
/// So an upload of any allowed size never holds more than the window in
/// memory, and a chunked body's length is known (`CONTENT_LENGTH`) before
/// a backend gets it.
#[derive(Default)]
pub struct Spool {
    /// The body while it fits the window; once it outgrew it, the bytes
    /// not yet written to `file` (written a window at a time).
    pub mem: Vec<u8>,
    /// The body once it outgrew the window (all of it after
    /// [`Spool::finish`]).
    pub file: Option<File>,
    len: u64,
}

impl Spool {
    /// Appends decoded body bytes: gathered in memory, and written to the
    /// temporary file a full window at a time (one `write` per window,
    /// whatever size the reads off the socket were).
    pub fn push(&mut self, mut data: &[u8], window: usize) -> io::Result<()> {
        self.len += data.len() as u64;
        loop {
            let n = window.saturating_sub(self.mem.len()).min(data.len());
            self.mem.extend_from_slice(&data[..n]);
            data = &data[n..];
            if data.is_empty() {
                return Ok(());
            }
            self.spill()?;
        }
    }

    /// The body is complete: a spilled body's last bytes join the file, so
    /// a backend finds it whole either in `mem` or in `file`.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.file.is_some() && !self.mem.is_empty() {
            self.spill()?;
        }
        if self.file.is_some() {
            self.mem = Vec::new();
        }
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        let file = match &mut self.file {
            Some(file) => file,
            // O_TMPFILE where the file system has it: nothing to clean up.
            None => self.file.insert(tempfile::tempfile()?),
        };
        file.write_all(&self.mem)?;
        self.mem.clear();
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes the body out for a backend, leaving the spool empty.
    pub fn take(&mut self) -> Spool {
        std::mem::take(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_past_the_window_spills_to_a_file() {
        use std::os::unix::fs::FileExt;
        let mut s = Spool::default();
        s.push(b"abcd", 8).unwrap();
        s.push(b"efgh", 8).unwrap();
        assert_eq!((s.mem.as_slice(), s.file.is_none(), s.len()), (b"abcdefgh".as_slice(), true, 8));
        s.push(b"ij", 8).unwrap();
        s.push(b"klmnopqrs", 8).unwrap();
        // A window went to the file; the rest waits for a full one.
        assert_eq!((s.mem.as_slice(), s.len()), (b"qrs".as_slice(), 19));
        s.finish().unwrap();
        let body = s.take();
        assert!(s.is_empty() && s.file.is_none() && s.mem.is_empty());
        assert_eq!((body.mem.len(), body.len()), (0, 19));
        let mut got = [0u8; 19];
        body.file.as_ref().unwrap().read_exact_at(&mut got, 0).unwrap();
        assert_eq!(&got, b"abcdefghijklmnopqrs");
    }
}
