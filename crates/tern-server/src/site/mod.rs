//! The sites: which virtual host answers a request (`hosts.rs`), which of
//! its locations (`locations.rs`), and the handler that answers it
//! (`vhost.rs`: static files, CGI, FastCGI, redirects, fixed responses).
//! The status page and mounted applications answer for every host.

pub mod access;
pub mod app;

pub mod backend;
pub mod cgi;
pub mod config;
pub mod explain;
pub mod fastcgi;
pub mod hidden;
pub mod hosts;
pub mod internal;
pub mod listing;
pub mod location;
pub mod locations;
pub mod proxy;
pub mod request;
pub mod static_files;
pub mod template;
pub mod trace;
pub mod upstream;
pub mod vhost;

use std::path::PathBuf;
use std::sync::Arc;

use tern_http::request::TargetForm;
use tern_http::{path, Request};

use crate::compress::{Compression, Policy};
use crate::error_log::{log, Level};
use crate::limits::Limits;
use crate::reply::Reply;
use crate::resolve::Symlinks;
use crate::spool::Spool;
use crate::values::Origin;
use crate::worker::Worker;
use config::SiteConfig;
use hosts::Hosts;
use internal::Status;
use location::Build;
use locations::{Locations, Pattern};
use upstream::pool::Inherited;
use vhost::{Common, Site};

pub use request::{Answer, Ends, Peers};

/// What the sites are built from (`Config::sites`): the `[[site]]`s — or,
/// without any, the top-level settings as one site answering every host —
/// and what the whole server sets. `config/` sits above the site layer, so
/// the sites read this instead.
pub struct Plan<'a> {
    pub sites: Vec<SiteConfig>,
    /// `server.root`, `server.index`, `server.symlinks`: the defaults.
    pub root: PathBuf,
    pub index: Vec<String>,
    pub symlinks: Symlinks,
    /// `server.unknown_host`.
    pub unknown_host: u16,
    pub limits: &'a Limits,
    pub status: &'a Status,
    /// `server.model`'s name, and whether it is the staged engine, for the
    /// status page.
    pub model: &'static str,
    pub staged: bool,
    /// Threads of the blocking I/O pool (`Config::io_pool_threads`).
    pub io_pool_threads: usize,
    /// Where the configuration came from: errors name key and line, and
    /// the file itself is never served.
    pub origin: &'a Origin,
    /// `[upstream.NAME]`: the groups the locations' `proxy` names.
    pub upstreams: &'a std::collections::BTreeMap<String, proxy::config::Upstream>,
}

/// Every site of a server, and the routing table to them.
pub struct Sites {
    hosts: Hosts,
    pub sites: Vec<Site>,
    /// The FastCGI pools of every site.
    pub pools: upstream::pool::Pools,
    pub compression: Compression,
    unknown_host: u16,
    /// The status page and metrics (`[status]`).
    internal: internal::Settings,
    /// `limits.body_buffer`: the most of a spooled body a FastCGI exchange
    /// holds in memory at once.
    body_buffer: usize,
    /// Applications mounted by the composition root (none for `tern serve`).
    pub apps: app::Apps,
    /// The upstream groups (`[upstream.NAME]`).
    pub groups: Vec<Arc<proxy::group::Group>>,
}

impl Sites {
    /// Opens every site's directories and files; `compression` is started
    /// by the server (its background threads); the pools of backends kept
    /// as they were are taken over from `inherited` (a reload's). An error
    /// names the site, its line and what is wrong.
    pub fn new(plan: Plan<'_>, compression: Compression, inherited: Inherited) -> std::io::Result<Sites> {
        let mut pools = upstream::pool::Pools::inheriting(inherited);
        let mut groups = Vec::with_capacity(plan.upstreams.len());
        for (name, u) in plan.upstreams {
            groups.push(Arc::new(proxy::group::Group::new(name, u, &mut pools)?));
        }
        let mut sites = Vec::with_capacity(plan.sites.len());
        let mut names = Vec::with_capacity(plan.sites.len());
        let mut default = None;
        // The implicit site of a file without `[[site]]` (line 0) has no
        // table to point at: its errors speak of the top-level keys.
        let fail = |sc: &SiteConfig, what: String| match &plan.origin.path {
            Some(path) if sc.line > 0 => {
                std::io::Error::other(format!("{}: line {}: site `{}`: {what}", path.display(), sc.line, site_name(sc)))
            }
            _ => std::io::Error::other(what),
        };
        for (i, sc) in plan.sites.iter().enumerate() {
            let fail = |what| fail(sc, what);
            if sc.keys.default {
                if let Some(first) = default.replace(i) {
                    return Err(fail(format!(
                        "`default`: site `{}` is the default already",
                        site_name(&plan.sites[first])
                    )));
                }
            }
            if names.contains(&site_name(sc)) {
                return Err(fail("`name`: another site has this name".into()));
            }
            names.push(site_name(sc));
            if sc.keys.hosts.is_empty() && !sc.keys.default {
                return Err(fail("`hosts`: a site needs host names, or `default = true`".into()));
            }
            sites.push(build(&plan, sc, &mut pools, &groups).map_err(fail)?);
        }
        let listed: Vec<(&str, &[String])> =
            plan.sites.iter().map(|sc| (site_name(sc), sc.keys.hosts.as_slice())).collect();
        let hosts = Hosts::new(&listed, default).map_err(|(i, e)| fail(&plan.sites[i], format!("`hosts`: {e}")))?;
        pools.settle();
        Ok(Sites {
            hosts,
            sites,
            pools,
            compression,
            unknown_host: plan.unknown_host,
            internal: internal::Settings {
                status: plan.status.clone(),
                model: plan.model,
                staged: plan.staged,
                io_pool_threads: plan.io_pool_threads,
                compression_enabled: plan.sites.iter().any(|s| s.sections.compression.enabled),
            },
            body_buffer: plan.limits.body_buffer.usize(),
            apps: app::Apps::default(),
            groups,
        })
    }

    /// Explains what routing does with the request whose head is `head`
    /// (`tern route`); `https`: it came over TLS, asking for `sni`.
    pub fn explain(&self, head: &[u8], https: bool, sni: Option<&str>) -> explain::Route {
        let table = explain::Table { hosts: &self.hosts, sites: &self.sites, unknown_host: self.unknown_host };
        table.explain(head, https, sni)
    }

    /// Answers `req` (whose body, if any, is `body`: a backend takes it)
    /// into `reply`.
    pub fn respond<'s>(
        &'s self,
        req: &Request<'_>,
        body: &mut Spool,
        ends: Ends<'_>,
        reply: &mut Reply<'s>,
        w: &mut Worker<'_>,
    ) -> Answer {
        let status = &self.internal.status;
        if status.enabled && (req.path == status.path || req.path == status.metrics_path) {
            let shown = internal::Shown { compression: &self.compression, pools: &self.pools, groups: &self.groups };
            internal::serve(req, ends.peer(), &self.internal, shown, reply, w);
            return Answer::Done;
        }
        if req.form == TargetForm::Asterisk || req.form == TargetForm::Authority {
            static_files::allow(reply, if req.form == TargetForm::Asterisk { 200 } else { 405 });
            return Answer::Done;
        }
        let Some(index) = self.hosts.find(req.host.map(str::as_bytes), &mut ()).site() else {
            reply.error(self.unknown_host);
            return Answer::Done;
        };
        // A client must not reach one site with the certificate of another.
        if ends.sni.is_some_and(|sni| self.hosts.find(Some(sni.as_bytes()), &mut ()).site() != Some(index)) {
            reply.error(421);
            return Answer::Done;
        }
        reply.site = Some(index as u32);
        let norm = match path::normalize(req.path, &mut w.path) {
            Ok(n) => n,
            Err(err) => {
                log!(Level::Info, "refused path {:?}: {}", req.path, err.0);
                reply.error(400);
                return Answer::Done;
            }
        };
        if let Some(app) = self.apps.find(&w.path) {
            app::answer(app, req, &w.path, reply);
            return Answer::Done;
        }
        let common = Common { compression: &self.compression, body_buffer: self.body_buffer };
        self.sites[index].serve(req, norm, body, ends, reply, w, common)
    }

    /// Stops what runs beside the workers (the compression threads).
    pub fn stop(&self) {
        self.compression.stop();
    }
}

/// A site's name: its own, else its first host, else `default`.
pub fn site_name(sc: &SiteConfig) -> &str {
    match (sc.keys.name.as_str(), sc.keys.hosts.first()) {
        ("", Some(host)) => host,
        ("", None) => "default",
        (name, _) => name,
    }
}

/// One site, its directories opened and its locations prepared.
fn build(
    plan: &Plan<'_>,
    sc: &SiteConfig,
    pools: &mut upstream::pool::Pools,
    groups: &[Arc<proxy::group::Group>],
) -> Result<Site, String> {
    let symlinks = sc.keys.symlinks.unwrap_or(plan.symlinks);
    let root = sc.settings.root.clone().unwrap_or_else(|| plan.root.clone());
    let index = sc.settings.index.clone().unwrap_or_else(|| plan.index.clone());
    let sections = &sc.sections;
    let config_file = static_files::running_config(plan.origin, &root, symlinks);
    let static_files =
        static_files::Settings::new(&sections.static_files, plan.limits, plan.io_pool_threads, config_file);
    let name = site_name(sc).to_string();
    let mut build = Build {
        root: &root,
        index: &index,
        symlinks,
        static_files: &static_files,
        policy: Arc::new(Policy::new(&sections.compression)),
        roots: Vec::new(),
        htpasswd: Vec::new(),
        groups,
    };
    let base = build.location("the site's own settings".into(), &sc.settings, &sc.settings, None)?;
    if let location::Action::Files(dir) = &base.action {
        cgi::check(&sections.cgi, &dir.root, plan.origin).map_err(|e| e.to_string())?;
    }
    let mut patterns = Vec::with_capacity(sc.locations.len());
    let mut locations = Vec::with_capacity(sc.locations.len());
    for (i, lc) in sc.locations.iter().enumerate() {
        let at = |e: String| format!("location {} (line {}): {e}", i + 1, lc.line);
        let pattern = lc.matching.pattern().map_err(|e| at(e.to_string()))?;
        let prefix = match &pattern {
            Pattern::Prefix { prefix, .. } => Some(prefix.as_str()),
            _ => None,
        };
        let described = format!("location {} ({})", i + 1, pattern.describe());
        locations.push(build.location(described, &lc.settings, &sc.settings, prefix).map_err(at)?);
        patterns.push(pattern);
    }
    Ok(Site {
        fastcgi: fastcgi::Settings::new(&sections.fastcgi, &name, &sections.own_backends, pools),
        name,
        static_files,
        cgi: cgi::Settings::new(&sections.cgi),
        hidden: hidden::Rule::new(&sections.static_files),
        index: Locations::new(&patterns)
            .map_err(|(i, e)| format!("location {} (line {}): {e}", i + 1, sc.locations[i].line))?,
        locations,
        base,
    })
}
