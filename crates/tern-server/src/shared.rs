//! What all workers of one server share, read-mostly: built by `server.rs`,
//! handed to an engine, and passed by the engine to every connection it
//! drives. An engine needs nothing else to run, so it never learns how the
//! server was assembled.

use std::sync::{Arc, OnceLock};

use tern_http::request::Limits;

use crate::access_log::AccessTarget;
use crate::handover::Doors;
use crate::metrics::ServerStats;
use crate::offload::Offload;
use crate::per_ip::PerIp;
use crate::room::Room;
use crate::service_records::RecordTarget;
use crate::site::Sites;
use crate::static_io::StaticIo;
use crate::tls;
use crate::worker::{Settings, Watcher, Worker};

pub struct Shared {
    /// What the workers lend their connections of the configuration.
    pub config: Settings,
    pub http_limits: Limits,
    pub site: Sites,
    pub server: ServerStats,
    /// The access logs (the server's first, then the sites' own).
    pub access: Vec<AccessTarget>,
    /// Where per-request service records go (`log.service_records`).
    pub records: RecordTarget,
    /// Which I/O method sends which file (a calibration thread may
    /// update it after start).
    pub io: std::sync::Arc<StaticIo>,
    /// The blocking I/O pool (`static.io_threads`; `None` when 0), lent to
    /// the connections of engines that are reactors.
    pub offload: Option<Offload>,
    /// Connections per client address, when `limits.max_connections_per_ip`
    /// is set.
    pub per_ip: Option<PerIp>,
    /// Certificates and session state when some address serves HTTPS
    /// (or redirects to it).
    pub tls: Option<tls::Setup>,
    /// Which forms of HTTP/2 each listening address speaks.
    pub http2: crate::listeners::Spoken,
    /// Idle connections per worker, so one at the connection cap can ask
    /// another to make room.
    pub room: Room,
    /// The ways into this server's workers (set once they have started),
    /// and through them the server that replaces it on reload: where its
    /// connections go once idle.
    pub doors: OnceLock<Arc<Doors>>,
}

impl Shared {
    /// The server that replaced this one (set before the workers are told
    /// to hand over).
    pub fn successor(&self) -> Option<&Arc<Doors>> {
        self.doors.get()?.successor()
    }

    /// What worker `index` lends its connections; `watcher` is how its
    /// engine watches backend descriptors.
    pub fn worker(&self, index: usize, watcher: Box<dyn Watcher>) -> Worker<'_> {
        Worker::new(&self.config, &self.server, (&self.access, &self.records), &self.io, index, watcher)
    }
}
