//! FastCGI: the request record stream a backend gets for a request. Which
//! backend answers is `backends.rs`, the exchange itself `exchange.rs`, the
//! connections `pool.rs`, the wire format `proto.rs`, how replies are read
//! off a kept-alive link `reply.rs`.

pub mod backends;
pub mod config;
pub mod exchange;
pub mod proto;
pub mod reply;

use tern_http::Request;

use super::cgi::{self, Meta};
use crate::spool::Spool;
pub use backends::{Route, Settings};
use exchange::Exchange;
use proto::ID;

/// What a request needs to start an exchange, beyond the request itself.
pub struct Launch<'a> {
    pub route: Route,
    /// The directory the request's location serves, as an absolute path:
    /// `DOCUMENT_ROOT` unless the backend sets its own.
    pub doc_root: &'a [u8],
    pub rel: &'a [u8],
    pub trailing_slash: bool,
    pub body: Spool,
    /// The most of a spooled body held in memory at once
    /// (`limits.body_buffer`).
    pub window: usize,
    pub peer: std::net::SocketAddr,
    pub local: std::net::SocketAddr,
    /// The reactor's doorbell (see [`pool`]), if the engine has one.
    pub doorbell: Option<&'a std::sync::Arc<crate::worker::Doorbell>>,
}

/// Encodes the request's records (with a body held in memory; a spooled
/// one follows from its file a window at a time) and takes a connection (or
/// a place in the queue). `Err`: the status to answer at once.
pub fn start(req: &Request<'_>, l: Launch<'_>) -> Result<Exchange, u16> {
    let backend = l.route.backend;
    let script = &l.rel[..l.route.script_len];
    let root = backend.root.as_deref().unwrap_or(l.doc_root);
    let mut filename = Vec::with_capacity(root.len() + script.len() + 1);
    filename.extend_from_slice(root);
    filename.push(b'/');
    filename.extend_from_slice(script);
    let meta = Meta {
        root,
        script_name: script,
        filename: &filename,
        path_info: &l.rel[l.route.script_len..],
        trailing_slash: l.trailing_slash,
        body_len: Some(l.body.len()).filter(|&n| n > 0 || req.has_body()),
        peer: l.peer,
        local: l.local,
    };
    let inline = &l.body.mem;
    let mut records = Vec::with_capacity(1024 + inline.len() + inline.len() / 0xffff * 8);
    proto::begin_request(&mut records, ID, backend.keep_conn);
    let mut params = proto::Params::new(&mut records, ID);
    cgi::meta_variables(req, &meta, &mut |k, v| params.pair(k, v));
    params.finish();
    let len = l.body.len();
    let upload = match l.body.file {
        Some(file) => Some(exchange::Upload::new(file, len, l.window)),
        None => {
            proto::stream(&mut records, proto::STDIN, ID, inline);
            proto::end_stream(&mut records, proto::STDIN, ID);
            None
        }
    };
    Exchange::start(backend, req, records, upload, l.doorbell)
}
