//! A location as the server runs it: its settings resolved (the
//! location's own, else its site's, else the defaults) and prepared once —
//! directories opened, templates parsed, htpasswd files read, header
//! changes formatted, error pages loaded.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern_http::response;

use super::access::Access;
use super::config::{Headers, LocationSettings, Respond};
use super::proxy::group::Group;
use super::static_files;
use super::template::Template;
use crate::compress::Policy;
use crate::htpasswd::{self, Htpasswd};
use crate::reply::Dressing;
use crate::resolve::{Found, Root, Symlinks};

/// Error pages larger than this are refused (they are held in memory).
const MAX_ERROR_PAGE: u64 = 1 << 20;

/// What a location does with a request.
pub enum Action {
    /// Serves what its directory holds: files, CGI programs, FastCGI.
    Files(Dir),
    /// Redirects every request.
    Redirect { to: Template, status: u16 },
    /// Answers every request with a fixed response.
    Respond { status: u16, content_type: String, body: Vec<u8> },
    /// Sends every request to an upstream group.
    Proxy { group: Arc<Group>, host: ProxyHost },
}

/// The `Host` of a proxied request (`proxy_host`).
pub enum ProxyHost {
    /// The client's.
    Pass,
    /// The upstream group's name.
    Upstream,
    /// This name.
    Name(Vec<u8>),
}

/// Where a location's files are, and how they are served.
pub struct Dir {
    pub root: Arc<Root>,
    /// The directory as an absolute path: where CGI programs run,
    /// `DOCUMENT_ROOT`.
    pub path: PathBuf,
    /// With `alias`: the location's prefix (relative, as request paths
    /// are), replaced by the directory.
    pub alias: Option<Box<[u8]>>,
    pub policy: Arc<Policy>,
    pub list: bool,
    pub try_files: Vec<TryFile>,
}

/// One `try_files` entry.
pub enum TryFile {
    /// A path to try, `{path}` (the request's) between `before` and
    /// `after` when `with_path`.
    Path { before: Box<[u8]>, with_path: bool, after: Box<[u8]> },
    /// The last entry as `=CODE`.
    Status(u16),
}

/// HTTP Basic authentication of a location.
pub struct Guard {
    pub file: Arc<Htpasswd>,
    /// The `WWW-Authenticate` value of a `401`.
    pub challenge: String,
}

/// A location, ready to answer.
pub struct Location {
    /// How notes name it: `location 3 (prefix `/api/`)`, or the site's own
    /// settings.
    pub described: String,
    /// The length of its prefix (`/` included), for a prefix location:
    /// `{rest}` of a redirect is what follows.
    pub prefix_len: usize,
    pub action: Action,
    pub dressing: Option<Arc<Dressing>>,
    pub access: Option<Access>,
    pub auth: Option<Guard>,
    pub cgi: bool,
    pub fastcgi: bool,
}

/// A directory opened for serving: its path, index files, and whether
/// its files are compressed.
type RootKey = (PathBuf, Vec<String>, bool);

/// What building a site's locations shares: its defaults, and the
/// directories and htpasswd files already opened (a directory opened once
/// per way it is served, so the open-file table keeps one entry per file).
pub struct Build<'a> {
    pub root: &'a Path,
    pub index: &'a [String],
    pub symlinks: Symlinks,
    pub static_files: &'a static_files::Settings,
    /// The site's compression.
    pub policy: Arc<Policy>,
    pub roots: Vec<(RootKey, Arc<Root>)>,
    pub htpasswd: Vec<((PathBuf, bool), Arc<Htpasswd>)>,
    /// The upstream groups a `proxy` may name.
    pub groups: &'a [Arc<Group>],
}

impl Build<'_> {
    /// The location with `own` settings over the site's (`site`); `prefix`:
    /// its prefix, for a prefix location (an alias needs one). An error
    /// names the key.
    pub fn location(
        &mut self,
        described: String,
        own: &LocationSettings,
        site: &LocationSettings,
        prefix: Option<&str>,
    ) -> Result<Location, String> {
        macro_rules! pick {
            ($key:ident) => {
                own.$key.as_ref().or(site.$key.as_ref())
            };
        }
        let compression = pick!(compression).copied().unwrap_or(true);
        let action = match (pick!(redirect), pick!(respond), pick!(proxy)) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                return Err("only one of `redirect`, `respond` and `proxy` can answer".into())
            }
            (None, None, Some(name)) => Action::Proxy {
                group: self
                    .groups
                    .iter()
                    .find(|g| g.name == *name)
                    .cloned()
                    .ok_or_else(|| format!("proxy: no [upstream.{name}] is configured"))?,
                host: match pick!(proxy_host).map(String::as_str) {
                    None | Some("pass") => ProxyHost::Pass,
                    Some("upstream") => ProxyHost::Upstream,
                    Some(name) if !name.is_empty() && tern_http::host::valid_authority(name.as_bytes(), false) => {
                        ProxyHost::Name(name.as_bytes().to_vec())
                    }
                    Some(name) => return Err(format!("proxy_host: `{name}` is not \"pass\", \"upstream\" or a host")),
                },
            },
            (Some(to), None, None) => Action::Redirect {
                to: Template::parse(to).map_err(|e| format!("redirect: {e}"))?,
                status: match pick!(redirect_status).copied().unwrap_or(302) {
                    s @ (301 | 302 | 303 | 307 | 308) => s,
                    s => return Err(format!("redirect_status: {s} is not 301, 302, 303, 307 or 308")),
                },
            },
            (None, Some(r), None) => respond(r)?,
            (None, None, None) => Action::Files(self.dir(own, site, prefix, compression)?),
        };
        let access = match pick!(access) {
            Some(rules) if !rules.is_empty() => Some(Access::new(rules).map_err(|e| format!("access: {e}"))?),
            _ => None,
        };
        let auth = match pick!(auth) {
            Some(a) if !a.htpasswd.as_os_str().is_empty() => Some(Guard {
                file: self.htpasswd(&a.htpasswd, a.remember).map_err(|e| format!("auth.htpasswd: {e}"))?,
                challenge: htpasswd::challenge(&a.realm).map_err(|e| format!("auth.realm: {e}"))?,
            }),
            _ => None,
        };
        let dressing = self.dressing(pick!(headers), pick!(expires).map(|s| s.0.as_secs()), pick!(error_pages))?;
        Ok(Location {
            described,
            prefix_len: prefix.map_or(0, str::len),
            action,
            dressing: (!dressing.is_empty()).then(|| Arc::new(dressing)),
            access,
            auth,
            cgi: pick!(cgi).copied().unwrap_or(true),
            fastcgi: pick!(fastcgi).copied().unwrap_or(true),
        })
    }

    fn dir(
        &mut self,
        own: &LocationSettings,
        site: &LocationSettings,
        prefix: Option<&str>,
        compression: bool,
    ) -> Result<Dir, String> {
        let index = own.index.as_deref().or(site.index.as_deref()).unwrap_or(self.index);
        let (path, alias) = match (&own.alias, &own.root) {
            (Some(_), Some(_)) => return Err("`alias` and `root` cannot both be set".into()),
            (Some(dir), None) => {
                let Some(prefix) = prefix else {
                    return Err("`alias` needs a prefix location (and a site has none)".into());
                };
                (dir.clone(), Some(prefix.trim_start_matches('/').as_bytes().into()))
            }
            (None, Some(dir)) => (dir.clone(), None),
            (None, None) => (site.root.clone().unwrap_or_else(|| self.root.to_path_buf()), None),
        };
        let try_files = match own.try_files.as_ref().or(site.try_files.as_ref()) {
            Some(list) => try_files(list)?,
            None => Vec::new(),
        };
        let policy = if compression { self.policy.clone() } else { Arc::new(Policy::off()) };
        let (root, path) = self.root_of(&path, index, compression).map_err(|e| {
            let what = if alias.is_some() { "alias" } else { "document root" };
            format!("cannot open {what} {}: {e}", path.display())
        })?;
        let list = own.list_directories.or(site.list_directories).unwrap_or(false);
        Ok(Dir { root, path, alias, policy, list, try_files })
    }

    /// The directory `path` opened for serving with `index` (once per way).
    fn root_of(&mut self, path: &Path, index: &[String], compression: bool) -> std::io::Result<(Arc<Root>, PathBuf)> {
        let path = std::fs::canonicalize(path)?;
        let key = (path.clone(), index.to_vec(), compression);
        if let Some((_, root)) = self.roots.iter().find(|(k, _)| *k == key) {
            return Ok((root.clone(), path));
        }
        let root = Arc::new(Root::open(&path, self.symlinks, index.to_vec())?);
        self.roots.push((key, root.clone()));
        Ok((root, path))
    }

    fn htpasswd(&mut self, path: &Path, remember: bool) -> Result<Arc<Htpasswd>, String> {
        let key = (path.to_path_buf(), remember);
        if let Some((_, file)) = self.htpasswd.iter().find(|(k, _)| *k == key) {
            return Ok(file.clone());
        }
        let file = Arc::new(Htpasswd::open(path)?.remembering(remember));
        self.htpasswd.push((key, file.clone()));
        Ok(file)
    }

    fn dressing(
        &mut self,
        headers: Option<&Headers>,
        expires: Option<u64>,
        pages: Option<&BTreeMap<String, String>>,
    ) -> Result<Dressing, String> {
        let mut d = Dressing { expires: expires.filter(|&s| s > 0), ..Dressing::default() };
        if let Some(h) = headers {
            for name in h.remove.iter().chain(h.set.keys()) {
                d.removed.push(field_name(name)?.to_ascii_lowercase());
            }
            for (name, value) in h.set.iter().chain(&h.add) {
                if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
                    return Err(format!("headers: the value of `{name}` has a control character"));
                }
                response::header(&mut d.lines, field_name(name)?, value.as_bytes());
            }
        }
        for (status, page) in pages.into_iter().flatten() {
            let code = match status.parse::<u16>() {
                Ok(code @ 400..=599) => code,
                _ => return Err(format!("error_pages: `{status}` is not an error status (400-599)")),
            };
            let (content_type, body) = self.error_page(page).map_err(|e| format!("error_pages.{status}: {e}"))?;
            d.pages.push((code, content_type.into(), body.into()));
        }
        Ok(d)
    }

    /// Reads the error page at `url` (a path below the site's root).
    fn error_page(&mut self, url: &str) -> Result<(String, Vec<u8>), String> {
        let mut rel = Vec::new();
        let norm = tern_http::path::normalize(url, &mut rel).map_err(|e| format!("`{url}`: {}", e.0))?;
        let site_root = self.root;
        let (root, _) = self.root_of(site_root, &[], false).map_err(|e| e.to_string())?;
        let file = match root.find(&rel, norm.trailing_slash, &mut Vec::new()) {
            Ok(Found::File { file, stat, .. }) if (stat.st_size as u64) <= MAX_ERROR_PAGE => file,
            Ok(Found::File { .. }) => return Err(format!("`{url}` is larger than 1 MiB")),
            _ => return Err(format!("`{url}` is not a file below {}", self.root.display())),
        };
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut body).map_err(|e| format!("`{url}`: {e}"))?;
        Ok((self.static_files.content_type(&rel), body))
    }
}

fn respond(r: &Respond) -> Result<Action, String> {
    if !(200..=599).contains(&r.status) {
        return Err(format!("respond.status: {} is not a status of 200-599", r.status));
    }
    if r.content_type.bytes().any(|b| b.is_ascii_control()) {
        return Err("respond.content_type has a control character".into());
    }
    Ok(Action::Respond { status: r.status, content_type: r.content_type.clone(), body: r.body.clone().into_bytes() })
}

fn try_files(list: &[String]) -> Result<Vec<TryFile>, String> {
    let mut out = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        if let Some(code) = entry.strip_prefix('=') {
            match code.parse::<u16>() {
                Ok(code @ 200..=599) if i + 1 == list.len() => out.push(TryFile::Status(code)),
                Ok(200..=599) => return Err(format!("try_files: `{entry}` can only be the last entry")),
                _ => return Err(format!("try_files: `{entry}` is not =CODE with a status of 200-599")),
            }
            continue;
        }
        let (before, after, with_path) = match entry.split_once("{path}") {
            Some((b, a)) => (b, a, true),
            None => (entry.as_str(), "", false),
        };
        if after.contains("{path}") || !(before.starts_with('/') || (with_path && before.is_empty())) {
            return Err(format!("try_files: `{entry}` is not a path starting with `/` or `{{path}}`"));
        }
        out.push(TryFile::Path { before: before.as_bytes().into(), with_path, after: after.as_bytes().into() });
    }
    Ok(out)
}

/// `name` if it is a field name a location may change: a token, and not
/// one of the fields the server frames a response with.
fn field_name(name: &str) -> Result<&str, String> {
    let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(format!("headers: `{name}` is not a field name"));
    }
    const FRAMING: [&str; 4] = ["content-length", "transfer-encoding", "connection", "keep-alive"];
    if FRAMING.iter().any(|f| f.eq_ignore_ascii_case(name)) {
        return Err(format!("headers: `{name}` frames the response: the server sets it"));
    }
    Ok(name)
}

impl Dir {
    /// The directory as bytes (FastCGI's `DOCUMENT_ROOT`).
    pub fn path_bytes(&self) -> &[u8] {
        self.path.as_os_str().as_bytes()
    }
}
