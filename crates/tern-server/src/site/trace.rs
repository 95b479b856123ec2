//! What routing decided and why, for `tern route`.
//!
//! The router takes a [`Trace`] and notes every rule it looks at. Serving
//! passes `()`, whose notes are never formatted (the closure is not even
//! called), so explaining costs a request nothing.

/// Where the router's notes go.
pub trait Trace {
    /// Notes one line; `line` is called only when someone will read it.
    fn note(&mut self, line: impl FnOnce() -> String);
}

/// Serving: nobody reads the notes.
impl Trace for () {
    #[inline(always)]
    fn note(&mut self, _line: impl FnOnce() -> String) {}
}

/// Explaining: every note, in order.
impl Trace for Vec<String> {
    fn note(&mut self, line: impl FnOnce() -> String) {
        self.push(line());
    }
}
