//! Applications: pages made in memory by code outside the server (the
//! lab's dashboard), mounted at a path prefix by whoever starts the server
//! (`Server::start_with`), and served by the same engine, connection code
//! and replies as files — no second HTTP stack.
//!
//! An application answers on the worker thread, synchronously: it is meant
//! for small local pages, not for work that would hold up a worker's other
//! connections for long.

use std::sync::Arc;

use tern_http::{Method, Request};

use crate::reply::Reply;

/// A page an application made.
pub struct Page {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// Code that answers GET (and HEAD) requests below a prefix.
pub trait App: Send + Sync {
    /// `path` is the request path decoded and normalised (relative, no
    /// leading `/`, prefix included); `query` the raw query string.
    fn get(&self, path: &str, query: Option<&str>) -> Page;
}

/// The applications of a site, by path prefix.
#[derive(Clone, Default)]
pub struct Apps(Vec<(String, Arc<dyn App>)>);

impl Apps {
    /// Mounts `app` at `prefix` (e.g. `/` or `/lab`): it answers that path
    /// and every path below it. A later mount at a longer prefix wins.
    pub fn mount(mut self, prefix: &str, app: Arc<dyn App>) -> Apps {
        self.0.push((prefix.trim_matches('/').to_string(), app));
        self.0.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        self
    }

    /// The application answering the normalised path `rel`, if any.
    pub fn find(&self, rel: &[u8]) -> Option<&dyn App> {
        self.0.iter().find_map(|(prefix, app)| {
            let p = prefix.as_bytes();
            let below = rel.starts_with(p) && (p.is_empty() || rel.len() == p.len() || rel[p.len()] == b'/');
            below.then_some(app.as_ref())
        })
    }
}

/// Answers `req` with `app`'s page: GET and HEAD only, never cached by the
/// client (the pages show live data).
pub fn answer(app: &dyn App, req: &Request<'_>, rel: &[u8], reply: &mut Reply<'_>) {
    if !req.method.is_get_or_head() {
        reply.head(405);
        reply.header("Allow", b"GET, HEAD");
        reply.header("Content-Type", b"text/html; charset=utf-8");
        return reply.end_head(0);
    }
    let page = app.get(&String::from_utf8_lossy(rel), req.query);
    reply.head(page.status);
    reply.header("Content-Type", page.content_type.as_bytes());
    reply.header("Cache-Control", b"no-store");
    reply.end_head(page.body.len() as u64);
    if req.method != Method::Head {
        reply.body(&page.body);
    }
}
