//! Configuration: one TOML file, every setting optional.
//!
//! Each section is declared beside the code that reads it — its struct,
//! its documented defaults and its rules (`[compression]` in
//! `compress/config.rs`, `[tls]` in `tls.rs`, …; `[server]`, whose one
//! owner is the composition root above, in `server.rs` here). This module
//! assembles them into [`Config`], loads a file, names a broken value by
//! key and line, checks the rules that span sections, and hands each part
//! of the server what it reads ([`Config::engine`], [`Config::site`],
//! [`Config::lent`]): nothing below this layer reads the whole.
//!
//! Values are checked while they are deserialised, so every error carries
//! the key and line (`toml` reports both); unknown keys are errors too, so
//! a typo never silently falls back to a default. The reference,
//! `docs/configuration.md`, is generated from the sections' doc comments
//! (`tests/config_reference.rs`).

mod server;
mod sites;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::access_log::{AccessFormat, Log};
use crate::compress::config::Compression;
use crate::engine;
use crate::engine::staged::Staged;
use crate::http2::{Http2, Protocol};
use crate::limits::{Limits, Timeouts};
use crate::site;
use crate::site::cgi::config::Cgi;
use crate::site::config::{SiteConfig, SiteKeys, SiteSections, SiteTable};
use crate::site::fastcgi::config::FastCgi;
use crate::site::internal::Status;
use crate::site::proxy::config::Upstream;
use crate::static_io::StaticFiles;
use crate::tls::Tls;
use crate::values::{rebase, Origin};
use crate::worker;

pub use server::Server;
// What a program that builds or adjusts a `Config` names (the CLI, the lab).
pub use crate::compress::config::CodingName;
pub use crate::engine::Model;
pub use crate::listeners::Listen;
pub use crate::static_io::{IoChoice, IoMethod};
pub use crate::values::Seconds;

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: Server,
    #[serde(rename = "static")]
    pub static_files: StaticFiles,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub log: Log,
    pub status: Status,
    pub cgi: Cgi,
    pub fastcgi: FastCgi,
    pub compression: Compression,
    pub tls: Tls,
    pub http2: Http2,
    pub staged: Staged,
    /// Upstream groups of HTTP servers, by name, for the locations' `proxy`.
    /// Default: none.
    pub upstream: BTreeMap<String, Upstream>,
    /// Virtual hosts, each with its host names, settings and locations.
    /// Default: none.
    #[serde(rename = "site")]
    pub site_tables: Vec<SiteTable>,
    /// The sites as read. None: the top-level settings are one site that
    /// answers every host.
    #[serde(skip)]
    pub sites: Vec<SiteConfig>,
    /// The file and text this was parsed from, so errors found later (at
    /// start) still name the line.
    #[serde(skip)]
    pub origin: Origin,
}

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A broken rule, already placed by [`Config::at`].
    #[error("{0}")]
    Rule(String),
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: origin.to_path_buf(), message };
        let mut config: Config = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        config.sites = sites::read(text).map_err(invalid)?;
        // A site's certificates join the others, sent for its hosts.
        for site in &mut config.sites {
            for mut c in std::mem::take(&mut site.sections.certificates) {
                if c.names.is_empty() {
                    c.names = site.keys.hosts.clone();
                }
                config.tls.certificates.push(c);
            }
        }
        config.origin = Origin::new(origin, text);
        if let Some((section, key, message)) = config.broken_rule() {
            return Err(ConfigError::Rule(format!("{}: {message}", config.at(section, key))));
        }
        for (name, upstream) in &config.upstream {
            if let Some((key, message)) = upstream.broken_rule() {
                return Err(ConfigError::Rule(format!("{}: {message}", config.at(&format!("upstream.{name}"), key))));
            }
        }
        if let Some(dir) = origin.parent() {
            if config.server.root.is_relative() {
                config.server.root = dir.join(&config.server.root);
            }
            if let Some(profile) = config.static_files.io_profile.as_mut().filter(|p| p.is_relative()) {
                *profile = dir.join(&*profile);
            }
            for c in &mut config.tls.certificates {
                for path in [&mut c.cert, &mut c.key] {
                    rebase(path, dir);
                }
            }
            for site in &mut config.sites {
                site.rebase(dir);
            }
            for server in config.upstream.values_mut().flat_map(|u| &mut u.servers) {
                if let Some(ca) = &mut server.ca {
                    rebase(ca, dir);
                }
            }
        }
        Ok(config)
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text, path)
    }

    /// Names `section.key` for an error: `FILE: line N: section.key`, as
    /// far as the file and line are known.
    pub fn at(&self, section: &str, key: &str) -> String {
        self.origin.at(section, key)
    }

    /// Threads the blocking I/O pool gets: `static.io_threads` under the
    /// reactors (`event`, `uring`), 0 under the others, whose threads may
    /// block and so do their I/O themselves.
    pub fn io_pool_threads(&self) -> usize {
        if matches!(self.server.model, Model::Event | Model::Uring) {
            self.static_files.io_threads
        } else {
            0
        }
    }

    /// The static I/O methods this configuration's engine sends with
    /// (`uring` under the `uring` model only).
    pub fn sending_methods(&self) -> &'static [IoMethod] {
        crate::static_io::methods(self.server.model == Model::Uring)
    }

    /// Checks the rules a value's type alone cannot express (also after
    /// command-line overrides): `(section, key, message)` of the first
    /// broken one. Each section checks its own; the rules that span
    /// sections are here.
    pub fn broken_rule(&self) -> Option<(&'static str, &'static str, &'static str)> {
        if self.server.listen.is_empty() && self.tls.listen.is_empty() {
            return Some(("server", "listen", "at least one address is needed (here or in tls.listen)"));
        }
        let speaks_other = |entries: &[Listen], allowed: Option<Protocol>| {
            entries.iter().flat_map(|e| e.protocols.iter().flatten()).any(|p| Some(*p) != allowed)
        };
        if speaks_other(&self.server.listen, Some(Protocol::H2c)) {
            return Some(("server", "listen", "a plain address speaks \"h2c\" at most (h2 is over TLS: tls.listen)"));
        }
        if speaks_other(&self.tls.listen, Some(Protocol::H2)) {
            return Some((
                "tls",
                "listen",
                "an HTTPS address speaks \"h2\" at most (h2c is clear text: server.listen)",
            ));
        }
        if speaks_other(&self.tls.redirect, None) {
            return Some(("tls", "redirect", "a redirecting address answers 308 to everything: no protocols"));
        }
        let uring = IoChoice::Fixed(IoMethod::Uring);
        if self.server.model != Model::Uring {
            let needs = "\"uring\" reads through the engine's ring: it needs server.model = \"uring\"";
            if self.static_files.io == uring {
                return Some(("static", "io", needs));
            }
            if self.static_files.io_methods.contains(&uring) {
                return Some(("static", "io_methods", needs));
            }
        }
        [
            ("tls", self.tls.broken_rule()),
            ("http2", self.http2.broken_rule()),
            ("server", self.server.broken_rule()),
            ("staged", self.staged.broken_rule()),
            ("static", self.static_files.broken_rule()),
            ("limits", self.limits.broken_rule()),
            ("timeouts", self.timeouts.broken_rule()),
            ("status", self.status.broken_rule()),
            ("cgi", self.cgi.broken_rule()),
            ("compression", self.compression.broken_rule()),
        ]
        .into_iter()
        .find_map(|(section, broken)| broken.map(|(key, message)| (section, key, message)))
    }

    /// What the engines read: the model, its thread counts, `[staged]`.
    pub fn engine(&self) -> engine::Plan {
        let s = &self.server;
        engine::Plan {
            model: s.model,
            threads: s.threads,
            max_threads: s.max_threads,
            busy_poll: s.busy_poll.0,
            batch_wait: s.batch_wait.0,
            defer_accept: s.defer_accept.0,
            staged: self.staged.clone(),
        }
    }

    /// The access logs to open: the top-level one first, then each other
    /// file (and format) a site logs to, each once; and for each site of
    /// [`Config::sites`], its log's number in that list.
    pub fn access_logs(&self) -> (Vec<(String, AccessFormat)>, Vec<usize>) {
        let mut logs = vec![(self.log.access.clone(), self.log.access_format)];
        let of_sites = self
            .sites
            .iter()
            .map(|s| {
                let log = (s.sections.log.access.clone(), s.sections.log.access_format);
                logs.iter().position(|l| *l == log).unwrap_or_else(|| {
                    logs.push(log);
                    logs.len() - 1
                })
            })
            .collect();
        (logs, of_sites)
    }

    /// What the sites are built from: the `[[site]]`s, or without any
    /// the top-level settings as one site that answers every host.
    pub fn sites(&self) -> site::Plan<'_> {
        let s = &self.server;
        let sites = if self.sites.is_empty() {
            vec![SiteConfig {
                keys: SiteKeys { default: true, ..SiteKeys::default() },
                sections: SiteSections {
                    static_files: self.static_files.clone(),
                    compression: self.compression.clone(),
                    cgi: self.cgi.clone(),
                    fastcgi: self.fastcgi.clone(),
                    log: self.log.clone(),
                    certificates: Vec::new(),
                    own_backends: Vec::new(),
                },
                ..SiteConfig::default()
            }]
        } else {
            self.sites.clone()
        };
        site::Plan {
            sites,
            root: s.root.clone(),
            index: s.index.clone(),
            symlinks: s.symlinks,
            unknown_host: s.unknown_host,
            limits: &self.limits,
            status: &self.status,
            model: s.model.name(),
            staged: s.model == Model::Staged,
            io_pool_threads: self.io_pool_threads(),
            origin: &self.origin,
            upstreams: &self.upstream,
        }
    }

    /// What every worker lends the connections it runs (`Shared` keeps it).
    pub fn lent(&self) -> worker::Settings {
        worker::Settings {
            server_header: self.server.server_header.clone(),
            max_connections: self.server.max_connections,
            static_files: self.static_files.clone(),
            limits: self.limits.clone(),
            http2: self.http2.clone(),
            timeouts: self.timeouts.clone(),
            access_buffer: self.log.access_buffer.usize(),
            kill_group: self.cgi.kill_group,
            pipe_buffer: self.cgi.pipe_buffer.usize(),
            sites: {
                let plan = self.sites();
                let logs = self.access_logs().1;
                let name = |i: usize| Box::from(site::site_name(&plan.sites[i]));
                (0..plan.sites.len())
                    .map(|i| worker::SiteLog { name: name(i), log: logs.get(i).copied().unwrap_or(0) })
                    .collect()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::site::upstream::address::Address;
    use crate::values::{Bytes, NonZero, UrlPrefix};

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/tern/tern.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn an_address_may_say_which_http2_it_speaks() {
        let c = parse(
            "[server]\nlisten = [\"127.0.0.1:80\", { address = \"localhost:81\", protocols = [\"h2c\"] }]\n\
             [tls]\nlisten = [{ address = \"127.0.0.1:443\", protocols = [] }]\n\
             certificates = [{ cert = \"c.pem\", key = \"k.pem\" }]\n",
        )
        .unwrap();
        let said: Vec<_> = c.server.listen.iter().map(|l| (l.addrs.len(), l.protocols.clone())).collect();
        assert_eq!(said, [(1, None), (2, Some(vec![Protocol::H2c]))]);
        assert_eq!(c.tls.listen[0].protocols, Some(vec![]));
        for (text, error) in [
            (
                "[server]\nlisten = [{ address = \"127.0.0.1:80\", protocols = [\"h2\"] }]",
                "line 2: server.listen: a plain address speaks \"h2c\" at most",
            ),
            (
                "[tls]\ncertificates = [{ cert = \"c\", key = \"k\" }]\n\
                 listen = [{ address = \"127.0.0.1:443\", protocols = [\"h2c\"] }]",
                "line 3: tls.listen: an HTTPS address speaks \"h2\" at most",
            ),
            ("[server]\nlisten = [{ protocols = [] }]", "missing field `address`"),
            ("[server]\nlisten = [{ address = \"127.0.0.1:80\", alpn = [] }]", "unknown field `alpn`"),
            ("[server]\nlisten = [{ address = \"example.com:80\" }]", "is not a listen address"),
        ] {
            let got = parse(text).unwrap_err();
            assert!(got.contains(error), "{text:?}: {got}");
        }
    }

    #[test]
    fn defaults_need_no_file() {
        let c = parse("").unwrap();
        assert_eq!(c.static_files.io, IoChoice::Auto);
        assert_eq!(c.static_files.io_classes, [Bytes(16384), Bytes(262144)]);
        assert_eq!(c.static_files.io_profile, None);
        assert_eq!((c.static_files.io_threads, c.io_pool_threads()), (32, 32));
        assert_eq!(c.limits.max_body_bytes, Bytes(1 << 20));
        assert_eq!(c.limits.body_buffer, Bytes(64 << 10));
        assert_eq!(c.timeouts.keepalive, Seconds(Duration::from_secs(15)));
        assert_eq!(c.server.root, PathBuf::from("/etc/tern/."));
    }

    #[test]
    fn models_and_their_thread_settings() {
        let c = parse("[server]\nmodel = \"pool\"\nthreads = 8\ncpus = [0]\n").unwrap();
        assert_eq!((c.server.model, c.server.threads, c.server.cpus.as_slice()), (Model::Pool, 8, &[0][..]));
        assert_eq!(c.io_pool_threads(), 0, "a pool thread may block: no I/O pool");
        let c = parse("[server]\nmodel = \"per-request\"\nmax_threads = 100\n").unwrap();
        assert_eq!((c.server.model, c.server.max_threads), (Model::PerRequest, 100));
        assert_eq!((Config::default().server.threads, Config::default().server.max_threads), (32, 5000));
        let c = parse("[server]\nmodel = \"staged\"\n[staged]\nsend_threads = 4\nqueue = 8\n").unwrap();
        assert_eq!((c.server.model, c.staged.threads(), c.staged.queue), (Model::Staged, [2, 2, 4, 1], 8));
        assert_eq!((Config::default().staged.threads(), Config::default().staged.queue), ([2, 2, 16, 1], 256));
        assert_eq!(Config::default().server.busy_poll.0, Duration::from_micros(50));
        assert_eq!(Config::default().server.defer_accept.0, Duration::from_secs(1));
        assert_eq!(parse("[server]\ndefer_accept = 0\n").unwrap().server.defer_accept.0, Duration::ZERO);
        assert_eq!(parse("[server]\nbusy_poll = \"200us\"\n").unwrap().server.busy_poll.0, Duration::from_micros(200));
        assert_eq!(parse("[server]\nbusy_poll = 0\n").unwrap().server.busy_poll.0, Duration::ZERO);
        assert_eq!(Config::default().server.batch_wait.0, Duration::ZERO);
        assert_eq!(
            parse("[server]\nbatch_wait = \"200us\"\n").unwrap().server.batch_wait.0,
            Duration::from_micros(200)
        );
        assert!(parse("[server]\nbatch_wait = \"11ms\"\n").unwrap_err().contains("server.batch_wait: must be at most"));
        for (text, wanted) in [
            ("[server]\nthreads = 0\n", "line 2: server.threads: must be between 1 and 100000"),
            ("[staged]\nread_threads = 1\nhandle_threads = 0\n", "line 3: staged.handle_threads: must be between 1"),
            ("[staged]\nlog_threads = 100001\n", "line 2: staged.log_threads: must be between 1 and 100000"),
            ("[staged]\nsend_threads = 0\n", "line 2: staged.send_threads: must be between 1"),
            ("[staged]\n\nqueue = 0\n", "line 3: staged.queue: must be between 1 and 1000000"),
            ("[server]\nmax_threads = 0\n", "line 2: server.max_threads: must be between 1 and 100000"),
            ("[server]\ncpus = [4096]\n", "line 2: server.cpus: each must be a CPU number below 1024"),
            ("[server]\n\nbusy_poll = \"2ms\"\n", "line 3: server.busy_poll: must be at most \"1ms\""),
            ("[server]\nbusy_poll = \"50 us\"\n", "line 2"),
            ("[server]\ndefer_accept = \"500ms\"\n", "line 2: server.defer_accept: must be whole seconds"),
            ("[tls]\ntickets_per_handshake = 0\n", "line 2: tls.tickets_per_handshake: must be between 1 and 16"),
            (
                "[server]\n\ndefer_accept = \"2m\"\n",
                "line 3: server.defer_accept: must be whole seconds, at most \"60s\"",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text:?}: {e}");
        }
        let e = parse("[server]\nmodel = \"threads\"\n").unwrap_err();
        assert!(e.contains("unknown variant `threads`") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn values_with_units() {
        let c = parse("[static]\nio = \"mmap\"\nread_chunk = \"16KiB\"\n[timeouts]\nheader = \"500ms\"\nbody = 3\n")
            .unwrap();
        assert_eq!(c.static_files.io, IoChoice::Fixed(IoMethod::Mmap));
        assert_eq!(c.static_files.read_chunk, Bytes(16384));
        assert_eq!(c.timeouts.header, Seconds(Duration::from_millis(500)));
        assert_eq!(c.timeouts.body, Seconds(Duration::from_secs(3)));
    }

    #[test]
    fn io_classes_and_profile() {
        let c = parse("[static]\nio_classes = [\"4KiB\", 65536, \"1MiB\"]\nio_profile = \"io.toml\"\n").unwrap();
        assert_eq!(c.static_files.io_classes, [Bytes(4096), Bytes(65536), Bytes(1 << 20)]);
        assert_eq!(c.static_files.io_profile, Some(PathBuf::from("/etc/tern/io.toml")));
        let c = parse("[static]\nio = \"auto\"\nio_classes = []\n").unwrap();
        assert_eq!(c.static_files.io, IoChoice::Auto);
        assert!(c.static_files.io_classes.is_empty());
        for bad in ["[\"64KiB\", \"16KiB\"]", "[0]", "[\"1KiB\", \"1KiB\"]"] {
            let e = parse(&format!("[static]\nio = \"auto\"\nio_classes = {bad}\n")).unwrap_err();
            assert!(e.contains("line 3") && e.contains("static.io_classes") && e.contains("ascending"), "{bad}: {e}");
        }
        let e = parse("[static]\nio_classes = [\"lots\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("io_classes"), "{e}");
    }

    #[test]
    fn io_methods_one_per_class() {
        let c = parse("[static]\nio_methods = [\"mmap\", \"auto\", \"sendfile\"]\n").unwrap();
        assert_eq!(
            c.static_files.io_methods,
            [IoChoice::Fixed(IoMethod::Mmap), IoChoice::Auto, IoChoice::Fixed(IoMethod::Sendfile)]
        );
        assert!(parse("").unwrap().static_files.io_methods.is_empty());
        for (text, wanted) in [
            ("[static]\n\nio_methods = [\"mmap\"]\n", "line 3: static.io_methods: needs one method per size class"),
            (
                "[static]\nio_classes = [\"1MiB\"]\nio_methods = [\"mmap\", \"mmap\", \"read\"]\n",
                "line 3: static.io_methods: needs one method per size class",
            ),
            (
                "[static]\nio_profile = \"io.toml\"\nio_methods = [\"mmap\", \"mmap\", \"read\"]\n",
                "line 3: static.io_methods: cannot be combined with static.io_profile",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text:?}: {e}");
        }
        let e = parse("[static]\nio_methods = [\"mmap\", \"splice\", \"read\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("splice"), "{e}");
    }

    #[test]
    fn the_uring_method_needs_the_uring_model() {
        let c = parse("[server]\nmodel = \"uring\"\n[static]\nio = \"uring\"\n").unwrap();
        assert_eq!((c.server.model, c.static_files.io), (Model::Uring, IoChoice::Fixed(IoMethod::Uring)));
        assert_eq!(c.io_pool_threads(), 32, "a reactor: the I/O pool");
        assert!(parse("[server]\nmodel = \"uring\"\n[static]\nio_methods = [\"mmap\", \"uring\", \"uring\"]\n").is_ok());
        for (text, wanted) in [
            ("[static]\nio = \"uring\"\n", "line 2: static.io: \"uring\" reads through the engine's ring"),
            ("[static]\nio_methods = [\"mmap\", \"uring\", \"read\"]\n", "line 2: static.io_methods: \"uring\""),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted) && e.contains("server.model = \"uring\""), "{text:?}: {e}");
        }
    }

    #[test]
    fn errors_name_key_and_line() {
        let e = parse("[server]\nworkers = 2\n\n[static]\nio = \"splice\"\n").unwrap_err();
        assert!(e.contains("line 5") && e.contains("io") && e.contains("splice"), "{e}");
        let e = parse("[server]\nlisten = [\"localhost\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("listen") && e.contains("IP:PORT"), "{e}");
        let e = parse("[server]\nlisten = [\"example.com:80\"]\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("`example.com:80` is not a listen address"), "{e}");
        let e = parse("[limits]\nmax_body = 5\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("max_body"), "{e}");
        let e = parse("[timeouts]\nsend = \"fast\"\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("send"), "{e}");
        let e = parse("[server]\nworkers = 1\n[limits]\nmax_headers = 500\n").unwrap_err();
        assert!(e.contains("line 4: limits.max_headers"), "{e}");
        let e = parse("[limits]\nmax_ranges = 3\nbody_buffer = 0\n").unwrap_err();
        assert!(e.contains("line 3: limits.body_buffer"), "{e}");
    }

    #[test]
    fn compression_section() {
        let c = parse("").unwrap().compression;
        assert!(c.enabled && c.adaptive);
        assert_eq!(c.codings, [CodingName::Br, CodingName::Zstd, CodingName::Gzip]);
        let c =
            parse("[compression]\ncodings = [\"gzip\"]\ncache_memory = \"1MiB\"\nidle = \"2s\"\n").unwrap().compression;
        assert_eq!(c.codings, [CodingName::Gzip]);
        assert_eq!(c.cache_memory, Bytes(1 << 20));
        assert_eq!(c.idle, Seconds(Duration::from_secs(2)));
        let e = parse("[compression]\nenabled = true\ncodings = [\"deflate\"]\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("codings") && e.contains("deflate"), "{e}");
        let e = parse("[compression]\n\ngzip_level = 13\n").unwrap_err();
        assert!(e.contains("line 3: compression.gzip_level"), "{e}");
        let e = parse("[compression]\nmime_types = [\"html\"]\n").unwrap_err();
        assert!(e.contains("line 2: compression.mime_types"), "{e}");
    }

    #[test]
    fn user_group_and_allow_root() {
        let c = parse("").unwrap();
        assert!(c.server.user.is_empty() && c.server.group.is_empty() && !c.cgi.allow_root);
        let c = parse("[server]\nuser = \"www-data\"\ngroup = \"adm\"\n[cgi]\nallow_root = true\n").unwrap();
        assert_eq!((c.server.user.as_str(), c.server.group.as_str(), c.cgi.allow_root), ("www-data", "adm", true));
        let e = parse("[server]\n\ngroup = \"adm\"\n").unwrap_err();
        assert!(e.contains("line 3: server.group: needs server.user"), "{e}");
    }

    #[test]
    fn listen_entries() {
        let c = parse("[server]\nlisten = [\"localhost:8080\", \"9090\"]\n").unwrap();
        assert_eq!(c.server.listen.iter().map(|l| l.addrs.len()).collect::<Vec<_>>(), [2, 2]);
    }

    #[test]
    fn fastcgi_backends() {
        let c = parse(
            "[fastcgi.backends.php]\naddress = \"unix:/tmp/php.sock\"\nextensions = [\".php\"]\n\n[fastcgi.backends.app]\naddress = \"127.0.0.1:9000\"\nprefixes = [\"/app\"]\nmax_connections = 3\nread_timeout = \"500ms\"\n",
        )
        .unwrap();
        let php = &c.fastcgi.backends["php"];
        assert_eq!(php.address, Address::Unix("/tmp/php.sock".into()));
        assert_eq!((php.max_connections, php.keep_conn, php.check_file), (NonZero(8), true, true));
        assert_eq!(php.connect_timeout.0, Duration::from_secs(2));
        let app = &c.fastcgi.backends["app"];
        assert_eq!(app.address, Address::Tcp("127.0.0.1:9000".parse().unwrap()));
        assert_eq!((app.max_connections, app.read_timeout.0), (NonZero(3), Duration::from_millis(500)));
        assert_eq!(app.prefixes, [UrlPrefix("/app".into())]);
        for (text, needle) in [
            ("[fastcgi.backends.x]\nextensions = []\n", "line 1"),
            ("[fastcgi.backends.x]\naddress = \"unix:php.sock\"\n", "line 2"),
            ("[fastcgi.backends.x]\naddress = \"localhost\"\n", "neither"),
            ("[fastcgi.backends.x]\naddress = \"unix:/s\"\nmax_connections = 0\n", "line 3"),
            ("[fastcgi.backends.x]\naddress = \"unix:/s\"\nsplit_path_info = \"(a)\"\n", "two captures"),
            ("[fastcgi.backends.x]\naddress = \"unix:/s\"\nprefixes = [\"app\"]\n", "line 3"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
