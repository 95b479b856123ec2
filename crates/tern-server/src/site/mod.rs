//! The site: routes a request to the handler that answers it.

pub mod internal;
pub mod open_files;
pub mod resolve;
pub mod static_files;

use std::net::SocketAddr;

use tern_http::Request;

use crate::compress::Compression;
use crate::config::Config;
use crate::reply::Reply;
use crate::worker::Worker;
use resolve::Root;

pub struct Site {
    pub root: Root,
    pub static_files: static_files::Settings,
    pub compression: Compression,
}

impl Site {
    /// `compression` is started by the server (its background threads).
    pub fn new(config: &Config, compression: Compression) -> std::io::Result<Site> {
        let s = &config.server;
        let root = Root::open(&s.root, s.symlinks, s.index.clone()).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot open document root {}: {e}", s.root.display()))
        })?;
        Ok(Site { root, static_files: static_files::Settings::new(config), compression })
    }

    /// Answers `req` into `reply`.
    pub fn respond(&self, req: &Request<'_>, peer: SocketAddr, reply: &mut Reply<'_>, w: &mut Worker<'_>) {
        let status = &w.shared.config.status;
        if status.enabled && (req.path == status.path || req.path == status.metrics_path) {
            return internal::serve(req, peer, reply, w);
        }
        static_files::serve(self, req, reply, w);
    }
}
