//! `[[site]]` and `[[site.location]]`: virtual hosts and the locations
//! inside them (the sections, their defaults and their rules; `config/`
//! reads them from the file, `site/` builds the routing table).
//!
//! A site table holds three kinds of keys: its own ([`SiteKeys`]: name,
//! hosts, default), the settings every request of the site gets unless a
//! location says otherwise ([`LocationSettings`]), and overrides of the per-site
//! keys of the top-level sections (`[site.static]`, `[site.compression]`,
//! `[site.cgi]`, `[site.fastcgi]`, `[site.log]`, `[site.tls]`), laid over
//! the top-level tables key by key. A location holds how it matches
//! ([`Match`]) and its own [`LocationSettings`], inherited from the site's where
//! unset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer};
use serde::Deserialize;

use super::cgi::config::Cgi;
use super::fastcgi::config::FastCgi;
use super::locations::Pattern;
use crate::access_log::Log;
use crate::compress::config::Compression;
use crate::resolve::Symlinks;
use crate::static_io::StaticFiles;
use crate::tls::TlsCertificate;
use crate::values::{rebase, Seconds};

/// `[[site]]`: a virtual host. Its table holds its own keys (below), the
/// keys of a location (what every request of the site gets unless one of
/// its `[[site.location]]`s says otherwise), and overrides of the top-level
/// sections in `[site.static]`, `[site.compression]`, `[site.cgi]`,
/// `[site.fastcgi]`, `[site.log]` and `[site.tls]`: each key set there
/// replaces the top-level one for this site (a FastCGI backend replaces the
/// top-level backend of its name whole). Without any `[[site]]`, the
/// top-level settings are one site that answers every host.
///
/// `config/` reads the table apart, key by key, so this type only marks
/// where sites stand in a `Config`.
#[derive(Clone, Debug)]
pub struct SiteTable;

impl<'de> Deserialize<'de> for SiteTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de::IgnoredAny::deserialize(d).map(|_| SiteTable)
    }
}

/// A site's own keys: the names it answers, and whether it answers the
/// names no site lists.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteKeys {
    /// The site's name in logs, metrics, `/_tern/status` and `tern route`;
    /// unique. Default: its first host name (`"default"` for a default
    /// site without hosts).
    pub name: String,
    /// Host names the site answers: exact (`"shop.example"`) or a wildcard
    /// of one or more leading labels (`"*.shop.example"`, which does not
    /// cover `shop.example` itself); the port is ignored and case does not
    /// matter. Exact names win over wildcards, a longer wildcard over a
    /// shorter one. Default `[]`.
    pub hosts: Vec<String>,
    /// The site for requests whose host no site lists (and for HTTP/1.0
    /// requests without one); at most one site. Without a default site
    /// such requests get `server.unknown_host`. Default false.
    pub default: bool,
    /// Which symlinks a path below the site's roots may follow
    /// (`"inside-root"`, `"never"`, `"any"`). Default: `server.symlinks`.
    pub symlinks: Option<Symlinks>,
}

/// How a `[[site.location]]` names its paths: exactly one of `exact`,
/// `prefix` and `regex`. Paths are compared decoded and normalised; an
/// exact match ends the search, else the longest prefix is noted, then
/// the regex locations are tried in order and the first match answers,
/// else the longest prefix does (nginx's order).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Match {
    /// This path only, e.g. `"/favicon.ico"`. Default: none.
    pub exact: Option<String>,
    /// Paths starting with this text, e.g. `"/static/"` (textual: `"/img"`
    /// also covers `"/imgs/a"`). Default: none.
    pub prefix: Option<String>,
    /// Paths this regular expression matches (unanchored; `(?i)` for any
    /// case), e.g. `'\.php$'`, tried in the order written. Default: none.
    pub regex: Option<Regex>,
    /// With `prefix`: when this is the longest prefix matched, the regex
    /// locations are not tried (nginx's `^~`). Default false.
    pub skip_regex: bool,
}

impl Match {
    /// The pattern, or what is wrong with the keys.
    pub fn pattern(&self) -> Result<Pattern, &'static str> {
        match (&self.exact, &self.prefix, &self.regex) {
            (Some(p), None, None) if !self.skip_regex => Ok(Pattern::Exact(p.clone())),
            (None, Some(p), None) => Ok(Pattern::Prefix { prefix: p.clone(), skip_regex: self.skip_regex }),
            (None, None, Some(r)) if !self.skip_regex => Ok(Pattern::Regex(r.0.clone())),
            (None, None, None) => Err("a location needs one of `exact`, `prefix` and `regex`"),
            _ if self.skip_regex && self.prefix.is_none() => Err("`skip_regex` goes with `prefix` only"),
            _ => Err("a location takes one of `exact`, `prefix` and `regex`, not two"),
        }
    }
}

/// What a site, or one of its locations, does with a request. Every key
/// of a location left unset takes the site's value, and the site's the
/// default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocationSettings {
    /// Directory the request's path is looked up under (the whole path is
    /// appended), relative to the config file's directory. Default: the
    /// site's, and the site's is `server.root`.
    pub root: Option<PathBuf>,
    /// Prefix locations only: the directory the part of the path
    /// after the location's prefix is looked up under (nginx's `alias`).
    /// With a prefix that does not end in `/`, the rest of the path must be
    /// empty or start with `/` (else 404), so `/img../secret` never leaves
    /// the directory. Default: none.
    pub alias: Option<PathBuf>,
    /// Files tried, in order, for a request naming a directory. Default:
    /// the site's, and the site's is `server.index`.
    pub index: Option<Vec<String>>,
    /// A directory without an index file is listed (HTML, or JSON for a
    /// client that prefers `application/json`) instead of answered 403.
    /// Names starting with `.` are never listed. Default false.
    pub list_directories: Option<bool>,
    /// Paths tried in order instead of the request's own, `{path}` standing
    /// for it (`"{path}/"` for its directory's index); the first that is a
    /// file answers. The last entry is the fallback: a path answered from
    /// the same directory (not routed again), or `"=CODE"` for a status,
    /// e.g. `["{path}", "/index.html"]` for a single-page app. Default `[]`:
    /// the path itself.
    pub try_files: Option<Vec<String>>,
    /// Answers every request with a redirect to this target, whose
    /// placeholders are filled from the request: `{scheme}`, `{host}` (as
    /// sent, port included), `{hostname}` (without the port), `{path}` (as
    /// sent), `{query}` (`?…` or nothing), `{rest}` (the path after the
    /// location's prefix), `{{` and `}}`. The request's query is appended
    /// when the target has neither `?` nor `{query}`. Default: none.
    pub redirect: Option<String>,
    /// The redirect's status: 301, 302, 303, 307 or 308. Default 302.
    pub redirect_status: Option<u16>,
    /// Answers every request with this fixed response. Default: none.
    pub respond: Option<Respond>,
    /// Header fields set on, added to or removed from every response of the
    /// site or location (error pages included). Default: none.
    pub headers: Option<Headers>,
    /// How long a response may be cached: `Expires` and `Cache-Control:
    /// max-age` (replacing the response's own `Cache-Control`), e.g.
    /// `"1h"`, on responses below 400 (a cache must not keep an error);
    /// `0` for none. Default 0.
    pub expires: Option<Seconds>,
    /// HTTP Basic authentication against an htpasswd file; `htpasswd = ""`
    /// turns off one inherited from the site. Default: none.
    pub auth: Option<Auth>,
    /// Client addresses let in or refused, first match wins, no match lets
    /// in: `"allow 10.0.0.0/8"`, `"deny 192.0.2.7"`, `"allow 2001:db8::/32"`,
    /// `"deny all"`. A refused client gets 403 (before authentication).
    /// Default `[]`: everyone.
    pub access: Option<Vec<String>>,
    /// Pages sent for error statuses, by status: a path below the site's
    /// root, sent with the error's own status (a custom 404 page is a 404),
    /// e.g. `{ 404 = "/errors/404.html" }`. Read at start and on reload.
    /// Default `{}`: tern's own short pages.
    pub error_pages: Option<BTreeMap<String, String>>,
    /// False: responses are never compressed here. Default true.
    pub compression: Option<bool>,
    /// False: no file here is run as a CGI program; one that would be is
    /// answered 403, never sent as a file. Default true.
    pub cgi: Option<bool>,
    /// False: no request here goes to a FastCGI backend. Default true.
    pub fastcgi: Option<bool>,
    /// Sends every request to this upstream group (`[upstream.NAME]`): the
    /// location is a reverse proxy. Default: none.
    pub proxy: Option<String>,
    /// The `Host` a proxied request carries: `"pass"` (the client's),
    /// `"upstream"` (the group's name, as nginx's `$proxy_host`) or a name
    /// to send. Default `"pass"`.
    pub proxy_host: Option<String>,
}

/// `respond`: a fixed response.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Respond {
    /// Its status, 200–599. Default 200.
    #[serde(default = "ok")]
    pub status: u16,
    /// Its body. Default `""`.
    #[serde(default)]
    pub body: String,
    /// Its `Content-Type`. Default `"text/plain; charset=utf-8"`.
    #[serde(default = "plain_text")]
    pub content_type: String,
}

fn ok() -> u16 {
    200
}

fn plain_text() -> String {
    "text/plain; charset=utf-8".into()
}

/// `headers`: changes to every response's header fields.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Headers {
    /// Fields set, replacing any the response has, e.g.
    /// `{ "X-Frame-Options" = "DENY" }`. Default `{}`.
    pub set: BTreeMap<String, String>,
    /// Fields added beside any the response has. Default `{}`.
    pub add: BTreeMap<String, String>,
    /// Fields removed, e.g. `["Server"]`. Default `[]`.
    pub remove: Vec<String>,
}

/// `auth`: HTTP Basic authentication.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// The realm named in the `401`'s `WWW-Authenticate`. Default
    /// `"Restricted"`.
    #[serde(default = "restricted")]
    pub realm: String,
    /// The htpasswd file (bcrypt or SHA-crypt hashes: `htpasswd -B`,
    /// `openssl passwd -6`), relative to the config file's directory; read
    /// again when it changes. Required; `""` turns authentication off.
    pub htpasswd: PathBuf,
    /// Each worker remembers the last 256 credentials it let in (until the
    /// file changes), so a client sending them again costs a lookup, not a
    /// hash of milliseconds; false hashes every request (as nginx does).
    /// Default true.
    #[serde(default = "yes")]
    pub remember: bool,
}

fn yes() -> bool {
    true
}

fn restricted() -> String {
    "Restricted".into()
}

/// A regular expression matched against a location's paths.
#[derive(Clone, Debug)]
pub struct Regex(pub regex::bytes::Regex);

impl<'de> Deserialize<'de> for Regex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        regex::bytes::Regex::new(&s).map(Regex).map_err(|e| de::Error::custom(format!("`{s}`: {e}")))
    }
}

/// A `[[site]]` as read from the file (`config/` reads it: one table's
/// keys go to several structs).
#[derive(Clone, Debug, Default)]
pub struct SiteConfig {
    pub keys: SiteKeys,
    /// Its settings: what its locations inherit.
    pub settings: LocationSettings,
    pub locations: Vec<LocationConfig>,
    /// The top-level sections with the site's keys laid over them.
    pub sections: SiteSections,
    /// Where the site's table starts in the file, for errors.
    pub line: usize,
}

impl SiteConfig {
    /// Makes its relative paths (roots, aliases, htpasswd files,
    /// certificates) relative to `dir`, the configuration file's directory.
    pub fn rebase(&mut self, dir: &Path) {
        for settings in std::iter::once(&mut self.settings).chain(self.locations.iter_mut().map(|l| &mut l.settings)) {
            for path in [&mut settings.root, &mut settings.alias].into_iter().flatten() {
                rebase(path, dir);
            }
            if let Some(auth) = &mut settings.auth {
                rebase(&mut auth.htpasswd, dir);
            }
        }
    }
}

/// A `[[site.location]]` as read.
#[derive(Clone, Debug, Default)]
pub struct LocationConfig {
    pub matching: Match,
    pub settings: LocationSettings,
    pub line: usize,
}

/// The sections as one site sees them.
#[derive(Clone, Debug, Default)]
pub struct SiteSections {
    pub static_files: StaticFiles,
    pub compression: Compression,
    pub cgi: Cgi,
    pub fastcgi: FastCgi,
    pub log: Log,
    /// The site's own certificates (`[[site.tls.certificates]]`); `config/`
    /// moves them into `tls.certificates`, sent for the site's hosts unless
    /// an entry names others.
    pub certificates: Vec<TlsCertificate>,
    /// The FastCGI backends the site defines itself (the others are the
    /// top-level ones, whose pools it shares).
    pub own_backends: Vec<String>,
}
