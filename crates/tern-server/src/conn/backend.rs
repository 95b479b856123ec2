//! What the connection keeps of a request a backend answers — the job and
//! what its log line and its head need — whether the connection's one
//! (HTTP/1.1, `relay.rs`) or an HTTP/2 stream's (`stream_relay.rs`). Data
//! only, apart from both users so neither the session nor the connection's
//! state reaches back into the other.

use std::sync::Arc;

use crate::reply::Dressing;
use crate::site::backend::Job;

/// A request being answered by a backend, with what its log line needs
/// (the request buffer is gone by the time the answer ends).
pub(super) struct Backend {
    pub(super) job: Job,
    pub(super) request_line: String,
    pub(super) referer: Option<Vec<u8>>,
    pub(super) user_agent: Option<Vec<u8>>,
    pub(super) host: String,
    pub(super) head_only: bool,
    pub(super) http10: bool,
    /// Answered on an HTTP/2 stream ([`crate::reply::Params::stream`]).
    pub(super) stream: bool,
    /// The answering location's dressing of its response.
    pub(super) dressing: Option<Arc<Dressing>>,
    /// The site that answers (`Reply::site`).
    pub(super) site: Option<u32>,
}
