//! `[fastcgi]`: the backends and what each answers (the section, its
//! defaults and the values only it takes; `backends.rs` prepares it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::site::upstream::address::Address;

use crate::values::{NonZero, Seconds, UrlPrefix};

/// `[fastcgi]`: FastCGI applications (php-fpm), each a named backend
/// reached over pooled, kept-alive connections. Default: none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FastCgi {
    /// `[fastcgi.backends.NAME]`, tried in name order for each request.
    /// Default: none.
    pub backends: BTreeMap<String, FastCgiBackend>,
}

impl FastCgi {
    /// The keys a `[[site]]` may set in `[site.fastcgi]`: its backends,
    /// each replacing the top-level one of its name.
    pub const SITE_KEYS: &'static [&'static str] = &["backends"];
}

/// `[fastcgi.backends.NAME]`: one FastCGI application and what it answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastCgiBackend {
    /// `"unix:/run/php/php-fpm.sock"` or `"127.0.0.1:9000"`. Required.
    pub address: Address,
    /// Script extensions it runs, e.g. `[".php"]`. Default `[]`.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// URL path prefixes it answers whatever the extension, e.g.
    /// `["/app"]`. Default `[]`.
    #[serde(default)]
    pub prefixes: Vec<UrlPrefix>,
    /// Splits a path into the script and `PATH_INFO` (two captures, as
    /// nginx's `fastcgi_split_path_info`); a path it does not match is all
    /// script. Default `"^(.+?\\.php)(/.*)$"`.
    #[serde(default = "default_split_path_info")]
    pub split_path_info: Pattern,
    /// The script must be a regular file under the root (else `404`), so
    /// `/upload/x.jpg/y.php` never runs a non-PHP file. Default true.
    #[serde(default = "yes")]
    pub check_file: bool,
    /// The document root as the application sees it (`DOCUMENT_ROOT`,
    /// `SCRIPT_FILENAME`). Default: `server.root`.
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// Connections open at once (the pool's size); a request past it waits
    /// in a queue (`site/fastcgi/pool.rs`); keep it at most php-fpm's
    /// `pm.max_children`. Default 8.
    #[serde(default = "default_fastcgi_connections")]
    pub max_connections: NonZero,
    /// Keep connections open between requests (`FCGI_KEEP_CONN`).
    /// Default true.
    #[serde(default = "yes")]
    pub keep_conn: bool,
    /// Past it a connection attempt is answered `502`. Default `"2s"`.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Seconds,
    /// Longest silence from the application while answering; past it
    /// `504`. Default `"60s"`.
    #[serde(default = "default_read_timeout")]
    pub read_timeout: Seconds,
    /// Longest wait for a free connection; past it `503`. Default `"5s"`.
    #[serde(default = "default_queue_timeout")]
    pub queue_timeout: Seconds,
}

fn yes() -> bool {
    true
}
fn default_split_path_info() -> Pattern {
    Pattern::parse(r"^(.+?\.php)(/.*)$").expect("valid literal")
}
fn default_fastcgi_connections() -> NonZero {
    NonZero(8)
}
fn default_connect_timeout() -> Seconds {
    Seconds(Duration::from_secs(2))
}
fn default_read_timeout() -> Seconds {
    Seconds(Duration::from_secs(60))
}
fn default_queue_timeout() -> Seconds {
    Seconds(Duration::from_secs(5))
}

/// A regular expression with two captures (script, path info).
#[derive(Clone, Debug)]
pub struct Pattern(pub regex::bytes::Regex);

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let re = regex::bytes::Regex::new(s).map_err(|e| format!("`{s}` is not a valid pattern: {e}"))?;
        if re.captures_len() != 3 {
            return Err(format!("`{s}` needs exactly two captures: the script and the path info"));
        }
        Ok(Pattern(re))
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Pattern::parse(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}
