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
    /// The body while it fits the window (empty once it spilled).
    pub mem: Vec<u8>,
    /// The whole body once it outgrew the window.
    pub file: Option<File>,
    len: u64,
}

impl Spool {
    /// Appends decoded body bytes.
    pub fn push(&mut self, data: &[u8], window: usize) -> io::Result<()> {
        self.len += data.len() as u64;
        if let Some(file) = &mut self.file {
            return file.write_all(data);
        }
        if self.mem.len() + data.len() <= window {
            self.mem.extend_from_slice(data);
            return Ok(());
        }
        // O_TMPFILE where the file system has it: nothing to clean up.
        let mut file = tempfile::tempfile()?;
        file.write_all(&self.mem)?;
        file.write_all(data)?;
        self.mem = Vec::new();
        self.file = Some(file);
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
        s.push(b"kl", 8).unwrap();
        let body = s.take();
        assert!(s.is_empty() && s.file.is_none() && s.mem.is_empty());
        assert_eq!((body.mem.len(), body.len()), (0, 12));
        let mut got = [0u8; 12];
        body.file.as_ref().unwrap().read_exact_at(&mut got, 0).unwrap();
        assert_eq!(&got, b"abcdefghijkl");
    }
}
