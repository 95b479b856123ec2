//! Internal pages: `/_tern/status` (JSON) and `/metrics` (Prometheus text
//! format), readable from the configured networks only.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use serde::Deserialize;
use tern_http::{Method, Request};

use super::proxy::group::Group;
use super::upstream::pool::Pools;
use crate::access_log;
use crate::compress::config::WhenFull;
use crate::compress::Compression;
use crate::metrics::{Ending, ServerStats, SiteCounters, StageStats, Totals, GOAWAY_REASONS, RESET_BY};
use crate::reply::Reply;
use crate::service_records::STAGES;
use crate::static_io::METHODS;
use crate::tls;
use crate::values::{first_broken, Network};
use crate::worker::{self, Worker};

/// `[status]`: the internal JSON status page and Prometheus metrics.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Status {
    /// Whether the status page and the metrics are served. Default true.
    pub enabled: bool,
    /// The JSON status page: a URL path (starting with `/`). Default
    /// `"/_tern/status"`.
    pub path: String,
    /// The metrics, in Prometheus text format: a URL path (starting with
    /// `/`). Default `"/metrics"`.
    pub metrics_path: String,
    /// Client networks allowed to read them. Default
    /// `["127.0.0.0/8", "::1/128"]`: loopback only.
    pub allow: Vec<Network>,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            enabled: true,
            path: "/_tern/status".into(),
            metrics_path: "/metrics".into(),
            allow: vec![
                Network::parse("127.0.0.0/8").expect("valid literal"),
                Network::parse("::1/128").expect("valid literal"),
            ],
        }
    }
}

impl Status {
    /// The first rule of `[status]` a value breaks: `(key, message)`.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str)> {
        first_broken([
            (!self.path.starts_with('/'), "path", "must be a URL path starting with /"),
            (!self.metrics_path.starts_with('/'), "metrics_path", "must be a URL path starting with /"),
        ])
    }
}

const TIMEOUT_NAMES: [&str; 4] = ["idle", "header", "body", "send"];
/// In the order of `compress::cache::coding_index`.
const CODING_NAMES: [&str; 3] = ["gzip", "br", "zstd"];

/// What the internal pages show of the configuration (`Site::new`).
pub struct Settings {
    pub status: Status,
    /// `server.model`'s name; stage statistics are shown under `staged`.
    pub model: &'static str,
    pub staged: bool,
    /// Threads of the blocking I/O pool.
    pub io_pool_threads: usize,
    /// `compression.enabled` of the top-level configuration.
    pub compression_enabled: bool,
}

/// What the pages show beside the workers' counters: the server's shared
/// machinery.
#[derive(Clone, Copy)]
pub struct Shown<'a> {
    pub compression: &'a Compression,
    pub pools: &'a Pools,
    pub groups: &'a [Arc<Group>],
}

pub fn serve(
    req: &Request<'_>,
    peer: SocketAddr,
    settings: &Settings,
    shown: Shown<'_>,
    reply: &mut Reply<'_>,
    w: &mut Worker<'_>,
) {
    let Shown { compression, pools, groups } = shown;
    let (config, server) = (w.config, w.server);
    let status = &settings.status;
    if !status.allow.iter().any(|n| n.contains(peer.ip())) {
        return reply.error(403);
    }
    if !req.method.is_get_or_head() {
        reply.head(405);
        reply.header("Allow", b"GET, HEAD");
        reply.header("Content-Type", b"text/html; charset=utf-8");
        return reply.end_head(0);
    }
    // The current worker's table size is exact; other workers report theirs
    // on their next tick.
    w.stats.open_files.set(w.files.len() as u64);
    let t = Totals::sum(&server.workers);
    let uptime = w.now.saturating_duration_since(server.started).as_secs();
    let tick_ages = tick_ages(server, w);
    if req.path == status.path {
        let body = serde_json::json!({
            "server": "tern",
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": uptime,
            "model": settings.model,
            "io": w.io.json(),
            "workers": server.worker_threads,
            "shutting_down": server.ending() != Ending::Running,
            "connections": {
                "active": t.active,
                "accepted": t.accepted,
                "rejected": t.rejected,
                "evicted": t.evicted,
                "fast_readers": t.fast_readers,
                "fast_readers_slowed": t.fast_readers_slowed,
                "max": config.max_connections,
            },
            "requests": {
                "total": t.requests,
                "1xx": t.status[0], "2xx": t.status[1], "3xx": t.status[2], "4xx": t.status[3], "5xx": t.status[4],
            },
            "bytes_sent": t.bytes_sent,
            "access_log": { "lines_lost": access_log::lines_lost() },
            "watchdog": { "tick_age_ms": tick_ages },
            "cgi": {
                "running": server.cgi_running.load(Relaxed),
                "started": t.cgi_started,
                "rejected": t.cgi_rejected,
                "failed": t.cgi_failed,
                "timeouts": t.cgi_timeouts,
            },
            "timeouts": {
                "idle": t.timeouts[0], "header": t.timeouts[1], "body": t.timeouts[2], "send": t.timeouts[3],
            },
            "open_file_cache": {
                "hits": t.open_file_hits,
                "misses": t.open_file_misses,
                "entries": t.open_files,
                "hit_rate": if t.open_file_hits + t.open_file_misses == 0 { 0.0 }
                            else { t.open_file_hits as f64 / (t.open_file_hits + t.open_file_misses) as f64 },
            },
            "io_pool": {
                "threads": settings.io_pool_threads,
                "opens": t.offloaded_opens,
                "reads": t.offloaded_reads,
            },
            "compression": compression_json(compression, settings.compression_enabled, &t),
            "fastcgi": fastcgi_json(pools),
            "sites": sites_json(config, server),
            "upstreams": upstreams_json(groups),
            "stages": settings.staged.then(|| stages_json(server)),
            "http2": {
                "connections": t.h2_connections,
                "streams": t.h2_streams,
                "errors": t.h2_errors,
                "goaways": GOAWAY_REASONS.iter().zip(t.h2_goaways).map(|(r, n)| (r.to_string(), n.into())).collect::<serde_json::Map<_, _>>(),
                "resets": RESET_BY.iter().zip(t.h2_resets).map(|(r, n)| (r.to_string(), n.into())).collect::<serde_json::Map<_, _>>(),
            },
            "tls": {
                "connections": t.tls_active,
                "handshakes": { "full": t.tls_full, "resumed": t.tls_resumed, "failed": t.tls_failed },
                "versions": { "TLSv1.2": t.tls_versions[0], "TLSv1.3": t.tls_versions[1] },
                "ktls": if tls::kernel_tls() { "offered by the kernel, not used yet" }
                        else { "not available: this kernel does not offer the tls ULP" },
            },
        });
        let mut text = serde_json::to_vec_pretty(&body).unwrap_or_default();
        text.push(b'\n');
        reply.head(200);
        reply.header("Content-Type", b"application/json");
        reply.header("Cache-Control", b"no-store");
        reply.end_head(text.len() as u64);
        reply.body(&text);
        return;
    }
    let mut text = prometheus(&t, uptime, server.worker_threads, server.cgi_running.load(Relaxed) as u64);
    watchdog_prometheus(&mut text, &tick_ages);
    compression_prometheus(&mut text, compression, &t);
    fastcgi_prometheus(&mut text, pools);
    sites_prometheus(&mut text, config, server);
    upstreams_prometheus(&mut text, groups);
    if settings.staged {
        stages_prometheus(&mut text, server);
    }
    reply.head(200);
    reply.header("Content-Type", b"text/plain; version=0.0.4; charset=utf-8");
    reply.header("Cache-Control", b"no-store");
    reply.end_head(text.len() as u64);
    if req.method != Method::Head {
        reply.body(text.as_bytes());
    }
}

/// Each upstream group's servers: up or down, requests in flight.
fn upstreams_json(groups: &[Arc<Group>]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for g in groups {
        let servers: Vec<_> = g
            .servers
            .iter()
            .map(|s| {
                serde_json::json!({
                    "address": s.address.to_string(),
                    "up": !s.health.down(),
                    "active": s.pool.in_flight.load(Relaxed),
                    "open": s.pool.snapshot().open,
                })
            })
            .collect();
        out.insert(g.name.clone(), serde_json::json!({ "servers": servers }));
    }
    serde_json::Value::Object(out)
}

fn upstreams_prometheus(text: &mut String, groups: &[Arc<Group>]) {
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(
        text,
        "# HELP tern_upstream_up Whether an upstream server may get requests.\n# TYPE tern_upstream_up gauge"
    );
    for g in groups {
        for s in &g.servers {
            let up = u8::from(!s.health.down());
            let _ = writeln!(text, "tern_upstream_up{{upstream=\"{}\",server=\"{}\"}} {up}", label(&g.name), s.address);
        }
    }
    let _ = writeln!(
        text,
        "# HELP tern_upstream_active Requests in flight to an upstream server.\n# TYPE tern_upstream_active gauge"
    );
    for g in groups {
        for s in &g.servers {
            let n = s.pool.in_flight.load(Relaxed);
            let _ =
                writeln!(text, "tern_upstream_active{{upstream=\"{}\",server=\"{}\"}} {n}", label(&g.name), s.address);
        }
    }
}

/// Each site's answers by status class, and the body bytes they announced.
fn sites_json(config: &worker::Settings, server: &ServerStats) -> serde_json::Value {
    let mut sites = serde_json::Map::new();
    for (i, site) in config.sites.iter().enumerate() {
        let (s, bytes) = SiteCounters::sum(&server.workers, i);
        sites.insert(
            site.name.to_string(),
            serde_json::json!({
                "requests": {
                    "total": s.iter().sum::<u64>(),
                    "1xx": s[0], "2xx": s[1], "3xx": s[2], "4xx": s[3], "5xx": s[4],
                },
                "bytes": bytes,
            }),
        );
    }
    serde_json::Value::Object(sites)
}

fn sites_prometheus(text: &mut String, config: &worker::Settings, server: &ServerStats) {
    let sums: Vec<_> = (0..config.sites.len()).map(|i| SiteCounters::sum(&server.workers, i)).collect();
    let _ = writeln!(
        text,
        "# HELP tern_site_responses_total Responses by site and status class.\n# TYPE tern_site_responses_total counter"
    );
    for (site, (status, _)) in config.sites.iter().zip(&sums) {
        for (class, n) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().zip(status) {
            let _ = writeln!(text, "tern_site_responses_total{{site=\"{}\",class=\"{class}\"}} {n}", label(&site.name));
        }
    }
    let _ = writeln!(
        text,
        "# HELP tern_site_bytes_total Body bytes of the responses by site.\n# TYPE tern_site_bytes_total counter"
    );
    for (site, (_, bytes)) in config.sites.iter().zip(&sums) {
        let _ = writeln!(text, "tern_site_bytes_total{{site=\"{}\"}} {bytes}", label(&site.name));
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The `compression` object of the status page: per-request counters from
/// the workers, cache and per-coding counters from the shared cache (with
/// the measured speed at the configured level).
fn compression_json(c: &Compression, enabled: bool, t: &Totals) -> serde_json::Value {
    let stats = &c.cache.stats;
    let (memory, cap) = c.cache.memory();
    let mut codings = serde_json::Map::new();
    for (i, name) in CODING_NAMES.iter().enumerate() {
        let (n, bytes_in, bytes_out, nanos) = (
            stats.compressions[i].load(Relaxed),
            stats.bytes_in[i].load(Relaxed),
            stats.bytes_out[i].load(Relaxed),
            stats.nanos[i].load(Relaxed),
        );
        codings.insert(
            (*name).into(),
            serde_json::json!({
                "compressions": n,
                "bytes_in": bytes_in,
                "bytes_out": bytes_out,
                "ratio": if bytes_out == 0 { 0.0 } else { bytes_in as f64 / bytes_out as f64 },
                "mb_per_s": if nanos == 0 { 0.0 } else { bytes_in as f64 * 1e3 / nanos as f64 },
            }),
        );
    }
    let lookups = t.compress_hits + t.compress_misses;
    serde_json::json!({
        "enabled": enabled,
        "hits": t.compress_hits,
        "misses": t.compress_misses,
        "hit_rate": if lookups == 0 { 0.0 } else { t.compress_hits as f64 / lookups as f64 },
        "deferred": t.compress_deferred,
        "in_flight": t.in_flight,
        "queue": c.background.queued(),
        "bytes_in": stats.bytes_in.iter().map(|b| b.load(Relaxed)).sum::<u64>(),
        "bytes_out": stats.bytes_out.iter().map(|b| b.load(Relaxed)).sum::<u64>(),
        "memory_bytes": memory,
        "memory_cap": cap,
        "entries": stats.entries.load(Relaxed),
        "evictions": stats.evictions.load(Relaxed),
        "stale": stats.stale.load(Relaxed),
        "full": stats.full.load(Relaxed),
        "displaced": stats.displaced.load(Relaxed),
        "when_full": match c.cache.when_full() {
            WhenFull::Evict => "evict",
            WhenFull::Refuse => "refuse",
        },
        "sidecars": stats.sidecars.load(Relaxed),
        "codings": codings,
    })
}

/// One backend's pool: connections open, idle and busy, requests waiting,
/// failures, and how many requests reused a kept-alive connection.
struct PoolFigures {
    name: String,
    open: u64,
    idle: u64,
    busy: u64,
    waiting: u64,
    max: u64,
    connects: u64,
    reused: u64,
    retried: u64,
    failed: u64,
    queue_timeouts: u64,
    timeouts: u64,
}

fn pool_figures(pools: &Pools) -> Vec<PoolFigures> {
    pools
        .iter()
        .map(|(name, pool)| {
            let (p, st) = (pool.snapshot(), &pool.stats);
            PoolFigures {
                name: name.to_string(),
                open: p.open as u64,
                idle: p.idle as u64,
                busy: (p.open - p.idle) as u64,
                waiting: p.waiting as u64,
                max: pool.cap() as u64,
                connects: st.connects.load(Relaxed),
                reused: st.reused.load(Relaxed),
                retried: st.retried.load(Relaxed),
                failed: st.failed.load(Relaxed),
                queue_timeouts: st.queue_timeouts.load(Relaxed),
                timeouts: st.timeouts.load(Relaxed),
            }
        })
        .collect()
}

fn fastcgi_json(pools: &Pools) -> serde_json::Value {
    let mut backends = serde_json::Map::new();
    for p in pool_figures(pools) {
        let uses = p.reused + p.connects;
        backends.insert(
            p.name,
            serde_json::json!({
                "open": p.open,
                "idle": p.idle,
                "busy": p.busy,
                "waiting": p.waiting,
                "max_connections": p.max,
                "connects": p.connects,
                "reused": p.reused,
                "reuse_ratio": if uses == 0 { 0.0 } else { p.reused as f64 / uses as f64 },
                "retried": p.retried,
                "502": p.failed,
                "503": p.queue_timeouts,
                "504": p.timeouts,
            }),
        );
    }
    serde_json::json!({ "backends": backends })
}

fn fastcgi_prometheus(s: &mut String, pools: &Pools) {
    let figures = pool_figures(pools);
    if figures.is_empty() {
        return;
    }
    let mut metric = |name: &str, kind: &str, help: &str, value: &dyn Fn(&PoolFigures) -> u64| {
        let _ = writeln!(s, "# HELP tern_fastcgi_{name} {help}\n# TYPE tern_fastcgi_{name} {kind}");
        for p in &figures {
            let _ = writeln!(s, "tern_fastcgi_{name}{{backend=\"{}\"}} {}", p.name, value(p));
        }
    };
    metric("connections_open", "gauge", "Connections open to the backend.", &|p| p.open);
    metric("connections_idle", "gauge", "Kept-alive connections idle in the pool.", &|p| p.idle);
    metric("connections_busy", "gauge", "Connections carrying a request.", &|p| p.busy);
    metric("waiting", "gauge", "Requests waiting for a connection.", &|p| p.waiting);
    metric("connects_total", "counter", "Connections opened.", &|p| p.connects);
    metric("reused_total", "counter", "Requests sent on a kept-alive connection.", &|p| p.reused);
    metric("retried_total", "counter", "Requests retried after a kept-alive connection closed.", &|p| p.retried);
    metric("bad_gateway_total", "counter", "Requests answered 502.", &|p| p.failed);
    metric("queue_timeouts_total", "counter", "Requests answered 503 after waiting.", &|p| p.queue_timeouts);
    metric("timeouts_total", "counter", "Requests answered 504.", &|p| p.timeouts);
}

/// The staged engine's stages: threads, queue length, busy time,
/// connections taken.
fn stages_json(server: &ServerStats) -> serde_json::Value {
    let mut stages = serde_json::Map::new();
    for (name, s) in STAGES.iter().zip(&server.stages) {
        stages.insert(
            (*name).into(),
            serde_json::json!({
                "threads": s.threads.load(Relaxed),
                "queue": s.queue.load(Relaxed),
                "busy_seconds": s.busy_us.load(Relaxed) as f64 / 1e6,
                "taken": s.taken.load(Relaxed),
            }),
        );
    }
    stages.into()
}

fn stages_prometheus(s: &mut String, server: &ServerStats) {
    let mut metric = |name: &str, kind: &str, help: &str, value: &dyn Fn(&StageStats) -> String| {
        let _ = writeln!(s, "# HELP tern_stage_{name} {help}\n# TYPE tern_stage_{name} {kind}");
        for (stage, st) in STAGES.iter().zip(&server.stages) {
            let _ = writeln!(s, "tern_stage_{name}{{stage=\"{stage}\"}} {}", value(st));
        }
    };
    metric("threads", "gauge", "Threads serving the stage.", &|st| st.threads.load(Relaxed).to_string());
    metric("queue_length", "gauge", "Connections waiting in the stage's queue, as last seen.", &|st| {
        st.queue.load(Relaxed).to_string()
    });
    metric("busy_seconds_total", "counter", "Time the stage's threads spent on connections.", &|st| {
        format!("{:.6}", st.busy_us.load(Relaxed) as f64 / 1e6)
    });
    metric("taken_total", "counter", "Connections the stage took from its queue.", &|st| {
        st.taken.load(Relaxed).to_string()
    });
}

fn compression_prometheus(s: &mut String, c: &Compression, t: &Totals) {
    let stats = &c.cache.stats;
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        let _ = writeln!(s, "# HELP tern_compression_{name} {help}\n# TYPE tern_compression_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(s, "tern_compression_{name}{labels} {value}");
        }
    };
    metric("hits_total", "counter", "Compressed responses sent from the cache.", &[("", t.compress_hits)]);
    metric("misses_total", "counter", "Requests for a compressed variant not cached.", &[("", t.compress_misses)]);
    metric(
        "deferred_total",
        "counter",
        "Misses sent uncompressed under load and queued.",
        &[("", t.compress_deferred)],
    );
    metric("queue_length", "gauge", "Jobs waiting for the background threads.", &[("", c.background.queued() as u64)]);
    let labels: Vec<String> = CODING_NAMES.iter().map(|n| format!("{{coding=\"{n}\"}}")).collect();
    let per = |a: &[std::sync::atomic::AtomicU64; 3]| -> Vec<(&str, u64)> {
        labels.iter().map(String::as_str).zip(a.iter().map(|v| v.load(Relaxed))).collect()
    };
    metric("compressions_total", "counter", "Variants compressed.", &per(&stats.compressions));
    metric("in_bytes_total", "counter", "Bytes compressed.", &per(&stats.bytes_in));
    metric("out_bytes_total", "counter", "Compressed bytes produced.", &per(&stats.bytes_out));
    metric("nanoseconds_total", "counter", "Time spent compressing.", &per(&stats.nanos));
    let (memory, cap) = c.cache.memory();
    metric("cache_memory_bytes", "gauge", "Bytes held by the compressed cache.", &[("", memory)]);
    metric("cache_memory_cap_bytes", "gauge", "The cache's memory cap.", &[("", cap)]);
    metric("cache_entries", "gauge", "Cached variants.", &[("", stats.entries.load(Relaxed))]);
    metric(
        "evictions_total",
        "counter",
        "Variants freed after the idle interval.",
        &[("", stats.evictions.load(Relaxed))],
    );
    metric("stale_total", "counter", "Variants replaced because the file changed.", &[("", stats.stale.load(Relaxed))]);
    metric("full_total", "counter", "Variants not cached: memory cap reached.", &[("", stats.full.load(Relaxed))]);
    metric(
        "displaced_total",
        "counter",
        "Variants evicted to make room for more used ones.",
        &[("", stats.displaced.load(Relaxed))],
    );
    metric(
        "sidecars_total",
        "counter",
        "Variants loaded from precompressed files.",
        &[("", stats.sidecars.load(Relaxed))],
    );
}

/// Milliseconds since each thread that makes a once-a-second turn (event
/// worker, pool or staged front, per-request acceptor) last made it: a
/// watchdog sees a stuck one's grow.
fn tick_ages(server: &ServerStats, w: &Worker<'_>) -> Vec<u64> {
    let now = w.now.saturating_duration_since(server.started).as_millis() as u64 + 1;
    server.workers.iter().map(|b| b.ticked_ms.get()).filter(|&t| t > 0).map(|t| now.saturating_sub(t)).collect()
}

fn watchdog_prometheus(s: &mut String, ages: &[u64]) {
    let _ = writeln!(
        s,
        "# HELP tern_worker_tick_age_milliseconds Since the worker's last once-a-second turn.\n\
         # TYPE tern_worker_tick_age_milliseconds gauge"
    );
    for (i, age) in ages.iter().enumerate() {
        let _ = writeln!(s, "tern_worker_tick_age_milliseconds{{worker=\"{i}\"}} {age}");
    }
}

fn prometheus(t: &Totals, uptime: u64, workers: usize, cgi_running: u64) -> String {
    let mut s = String::with_capacity(2048);
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        let _ = writeln!(s, "# HELP tern_{name} {help}\n# TYPE tern_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(s, "tern_{name}{labels} {value}");
        }
    };
    metric("uptime_seconds", "gauge", "Seconds since the server started.", &[("", uptime)]);
    metric("workers", "gauge", "Worker threads.", &[("", workers as u64)]);
    metric("connections_active", "gauge", "Open client connections.", &[("", t.active)]);
    metric("connections_accepted_total", "counter", "Connections accepted.", &[("", t.accepted)]);
    metric("connections_rejected_total", "counter", "Connections refused at a limit.", &[("", t.rejected)]);
    metric(
        "connections_evicted_total",
        "counter",
        "Idle keep-alive connections closed to make room at the cap.",
        &[("", t.evicted)],
    );
    metric(
        "connections_fast_readers_total",
        "counter",
        "Connections given limits.fast_unsent_bytes: their client proved to read fast.",
        &[("", t.fast_readers)],
    );
    metric(
        "connections_fast_readers_slowed_total",
        "counter",
        "Fast readers' connections given limits.unsent_bytes back: their client slowed down.",
        &[("", t.fast_readers_slowed)],
    );
    metric("requests_total", "counter", "Requests answered.", &[("", t.requests)]);
    metric(
        "access_log_lines_lost_total",
        "counter",
        "Access-log lines dropped because their write failed (a full disk), since the process started.",
        &[("", access_log::lines_lost())],
    );
    let classes = ["{class=\"1xx\"}", "{class=\"2xx\"}", "{class=\"3xx\"}", "{class=\"4xx\"}", "{class=\"5xx\"}"];
    let by_class: Vec<(&str, u64)> = classes.iter().copied().zip(t.status).collect();
    metric("responses_total", "counter", "Responses by status class.", &by_class);
    metric("sent_bytes_total", "counter", "Bytes written to client sockets.", &[("", t.bytes_sent)]);
    let kinds: Vec<String> = TIMEOUT_NAMES.iter().map(|k| format!("{{phase=\"{k}\"}}")).collect();
    let timeouts: Vec<(&str, u64)> = kinds.iter().map(String::as_str).zip(t.timeouts).collect();
    metric("timeouts_total", "counter", "Connections closed by a timeout.", &timeouts);
    metric("open_file_cache_hits_total", "counter", "Open-file table hits.", &[("", t.open_file_hits)]);
    metric("open_file_cache_misses_total", "counter", "Open-file table misses.", &[("", t.open_file_misses)]);
    metric("open_file_cache_entries", "gauge", "Open-file table entries.", &[("", t.open_files)]);
    metric("io_pool_opens_total", "counter", "File opens done by the I/O pool.", &[("", t.offloaded_opens)]);
    metric(
        "io_pool_reads_total",
        "counter",
        "File regions not in the page cache read by the I/O pool.",
        &[("", t.offloaded_reads)],
    );
    metric("cgi_running", "gauge", "CGI programs running.", &[("", cgi_running)]);
    metric("cgi_started_total", "counter", "CGI programs started.", &[("", t.cgi_started)]);
    metric("cgi_rejected_total", "counter", "CGI requests refused at the process cap.", &[("", t.cgi_rejected)]);
    metric("cgi_failed_total", "counter", "CGI requests answered 502.", &[("", t.cgi_failed)]);
    metric("cgi_timeouts_total", "counter", "CGI programs killed at the time limit.", &[("", t.cgi_timeouts)]);
    let methods: Vec<String> = METHODS.iter().map(|m| format!("{{method=\"{}\"}}", m.name())).collect();
    let bodies: Vec<(&str, u64)> = methods.iter().map(String::as_str).zip(t.file_bodies).collect();
    metric("file_bodies_total", "counter", "Responses with a file body, by the I/O method sending it.", &bodies);
    metric("http2_connections_total", "counter", "Connections that spoke HTTP/2.", &[("", t.h2_connections)]);
    metric("http2_streams_total", "counter", "HTTP/2 streams answered.", &[("", t.h2_streams)]);
    metric("http2_errors_total", "counter", "HTTP/2 connections ended by an error.", &[("", t.h2_errors)]);
    let reasons: Vec<String> = GOAWAY_REASONS.iter().map(|r| format!("{{reason=\"{r}\"}}")).collect();
    let goaways: Vec<(&str, u64)> = reasons.iter().map(String::as_str).zip(t.h2_goaways).collect();
    metric("http2_goaways_total", "counter", "HTTP/2 GOAWAY frames sent, by reason.", &goaways);
    let by: Vec<String> = RESET_BY.iter().map(|r| format!("{{by=\"{r}\"}}")).collect();
    let resets: Vec<(&str, u64)> = by.iter().map(String::as_str).zip(t.h2_resets).collect();
    metric("http2_resets_total", "counter", "HTTP/2 streams reset, by whom.", &resets);
    metric("tls_connections_active", "gauge", "Open TLS connections.", &[("", t.tls_active)]);
    let kinds =
        [("{kind=\"full\"}", t.tls_full), ("{kind=\"resumed\"}", t.tls_resumed), ("{kind=\"failed\"}", t.tls_failed)];
    metric("tls_handshakes_total", "counter", "TLS handshakes, by outcome.", &kinds);
    let versions = [("{version=\"TLSv1.2\"}", t.tls_versions[0]), ("{version=\"TLSv1.3\"}", t.tls_versions[1])];
    metric("tls_versions_total", "counter", "Completed TLS handshakes, by protocol version.", &versions);
    s
}
