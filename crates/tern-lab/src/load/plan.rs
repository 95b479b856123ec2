//! What to send: URLs, request mixes, and the request bytes, serialised once.
//!
//! Everything a worker sends is decided here, before the run, so the hot path
//! only copies bytes it already has: each distinct request is serialised into
//! one buffer, and the order in which a weighted mix is drawn is precomputed
//! into a [`Plan::schedule`] table that workers walk with a cursor — no random
//! numbers, no formatting, no allocation per request, and the proportions are
//! exact over every cycle of the table rather than only on average.

use std::fmt;
use std::path::{Path, PathBuf};

/// The largest cycle of the weighted schedule (sum of weights divided by
/// their greatest common divisor). Bounds the table's memory and build time.
pub const MAX_SCHEDULE: u64 = 100_000;

/// Why the requests could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("bad URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("bad header {header:?}: {reason}")]
    Header { header: String, reason: String },
    #[error("bad method {0:?}: a method is a token such as GET or POST")]
    Method(String),
    #[error("{path}:{line}: {reason}")]
    Mix { path: PathBuf, line: usize, reason: String },
    #[error("cannot read {what} {path}: {error}")]
    Read { what: &'static str, path: PathBuf, error: std::io::Error },
    #[error("mix file {0} lists no request")]
    EmptyMix(PathBuf),
    #[error("all requests must go to one server (one connection pool), but {first} and {other} differ")]
    MixedServers { first: String, other: String },
    #[error("the weights' sum divided by their common divisor is {0}; at most {MAX_SCHEDULE} is allowed")]
    ScheduleTooLong(u64),
}

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `https://`: requests go over TLS.
    pub tls: bool,
    /// Host as written, IPv6 literals keeping their brackets (as in `Host:`).
    pub host: String,
    pub port: u16,
    /// Path and query, always starting with `/`; the fragment is dropped.
    pub target: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, PlanError> {
        let fail = |reason: &str| PlanError::Url { url: url.to_string(), reason: reason.to_string() };
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("http://") {
            (false, &url[7..])
        } else if lower.starts_with("https://") {
            (true, &url[8..])
        } else {
            return Err(fail("it must start with http:// or https://"));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, mut target) = rest.split_at(end);
        if authority.contains('@') {
            return Err(fail("user information in URLs is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let close = v6.find(']').ok_or_else(|| fail("unclosed '[' in the host"))?;
            (&authority[..close + 2], &v6[close + 1..])
        } else {
            match authority.rfind(':') {
                Some(colon) => (&authority[..colon], &authority[colon..]),
                None => (authority, ""),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(fail("no host"));
        }
        let port = match port {
            "" if tls => 443,
            "" => 80,
            p => {
                let digits = p.strip_prefix(':').ok_or_else(|| fail("junk after the host"))?;
                match digits.parse::<u16>() {
                    Ok(n) if n > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => n,
                    _ => return Err(fail("the port must be a number from 1 to 65535")),
                }
            }
        };
        if let Some(hash) = target.find('#') {
            target = &target[..hash];
        }
        let target = match target {
            "" => "/".to_string(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_string(),
        };
        if target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(fail("spaces and control characters must be percent-encoded"));
        }
        Ok(Url { tls, host: host.to_string(), port, target })
    }

    /// `host` or `host:port`, as the `Host` header and connection key.
    pub fn authority(&self) -> String {
        if self.port == if self.tls { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The host without IPv6 brackets, for name resolution.
    pub fn host_for_lookup(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// A URL on the same server with another path and query.
    pub fn with_target(&self, target: &str) -> Url {
        Url { target: target.to_string(), ..self.clone() }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.target)
    }
}

/// One kind of request, before serialisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    /// Relative weight in the mix (a single URL has weight 1).
    pub weight: u32,
    pub method: String,
    pub url: Url,
    /// Headers in order, as `(name, value)`.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RequestSpec {
    /// A GET (or `method`) of `url` with no body and no extra headers.
    pub fn new(method: &str, url: Url) -> RequestSpec {
        RequestSpec { weight: 1, method: method.to_string(), url, headers: Vec::new(), body: Vec::new() }
    }
}

/// One request ready to send.
#[derive(Debug, Clone)]
pub struct PlannedRequest {
    /// `METHOD URL`, for reports.
    pub label: String,
    pub weight: u32,
    /// The complete HTTP/1.1 request: head and body.
    pub bytes: Box<[u8]>,
    /// A `HEAD` request: its response has a head only.
    pub head: bool,
    /// The same request as fields, for HTTP/2 ([`super::h2`]): method,
    /// path and query, and the header fields in the order sent (`Host`
    /// included: it becomes `:authority`).
    pub method: String,
    pub target: String,
    pub fields: Vec<(String, String)>,
    /// The body: the last `body_len` bytes of `bytes`.
    pub body_len: usize,
}

impl PlannedRequest {
    pub fn body(&self) -> &[u8] {
        &self.bytes[self.bytes.len() - self.body_len..]
    }
}

/// Everything the workers send: the requests and the order to draw them in.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The server all requests go to.
    pub url: Url,
    pub requests: Vec<PlannedRequest>,
    /// One cycle of the weighted mix: indices into `requests`, interleaved
    /// smoothly (70/30 gives 0,1,0,0,0,1,0,0,1,0 rather than 7×0 then 3×1).
    pub schedule: Box<[u32]>,
}

impl Plan {
    /// Serialises `specs`. `extra_headers` go on every request unless the
    /// request sets a header of the same name itself; `keepalive: false` adds
    /// `Connection: close` so the server closes after each response.
    pub fn build(
        specs: &[RequestSpec],
        extra_headers: &[(String, String)],
        keepalive: bool,
    ) -> Result<Plan, PlanError> {
        let first = specs.first().expect("a plan has at least one request");
        for spec in specs {
            if spec.url.host != first.url.host || spec.url.port != first.url.port || spec.url.tls != first.url.tls {
                let server = |u: &Url| u.with_target("").to_string();
                return Err(PlanError::MixedServers { first: server(&first.url), other: server(&spec.url) });
            }
        }
        let requests =
            specs.iter().map(|spec| serialize(spec, extra_headers, keepalive)).collect::<Result<Vec<_>, _>>()?;
        let schedule = schedule(&specs.iter().map(|s| s.weight).collect::<Vec<_>>())?;
        Ok(Plan { url: first.url.clone(), requests, schedule })
    }
}

/// A method: a token that starts with a letter (so "-3" is not one).
fn is_method(s: &str) -> bool {
    is_token(s) && s.starts_with(|c: char| c.is_ascii_alphabetic())
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses `Name: value` (as given to `-H` or in a mix file).
pub fn parse_header(line: &str) -> Result<(String, String), PlanError> {
    let fail = |reason: &str| PlanError::Header { header: line.to_string(), reason: reason.to_string() };
    let (name, value) = line.split_once(':').ok_or_else(|| fail("expected \"Name: value\""))?;
    if !is_token(name) {
        return Err(fail("the name must be a token (letters, digits, -), with no space before ':'"));
    }
    let value = value.trim();
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(fail("the value contains CR, LF or NUL"));
    }
    for framing in ["content-length", "transfer-encoding"] {
        if name.eq_ignore_ascii_case(framing) {
            return Err(fail("tern bench frames bodies itself; give the body with --body or @body"));
        }
    }
    Ok((name.to_string(), value.to_string()))
}

fn serialize(
    spec: &RequestSpec,
    extra_headers: &[(String, String)],
    keepalive: bool,
) -> Result<PlannedRequest, PlanError> {
    if !is_method(&spec.method) {
        return Err(PlanError::Method(spec.method.clone()));
    }
    let has = |name: &str| spec.headers.iter().chain(extra_headers).any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut fields = Vec::new();
    if !has("host") {
        fields.push(("Host".to_string(), spec.url.authority()));
    }
    if !has("user-agent") {
        fields.push(("User-Agent".to_string(), "tern-bench".to_string()));
    }
    let overridden = |name: &str| spec.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    fields.extend(extra_headers.iter().filter(|(n, _)| !overridden(n)).chain(&spec.headers).cloned());
    if !spec.body.is_empty() || matches!(spec.method.as_str(), "POST" | "PUT" | "PATCH") {
        fields.push(("Content-Length".to_string(), spec.body.len().to_string()));
    }
    if !keepalive && !has("connection") {
        fields.push(("Connection".to_string(), "close".to_string()));
    }
    let mut head = format!("{} {} HTTP/1.1\r\n", spec.method, spec.url.target);
    for (name, value) in &fields {
        head += &format!("{name}: {value}\r\n");
    }
    head += "\r\n";
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&spec.body);
    Ok(PlannedRequest {
        label: format!("{} {}", spec.method, spec.url),
        weight: spec.weight,
        bytes: bytes.into_boxed_slice(),
        head: spec.method == "HEAD",
        method: spec.method.clone(),
        target: spec.url.target.clone(),
        fields,
        body_len: spec.body.len(),
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Smooth weighted round robin (as nginx balances upstreams): each step adds
/// every weight to its credit and picks the largest credit, which then pays
/// the total. Over one cycle each index appears exactly weight/gcd times.
fn schedule(weights: &[u32]) -> Result<Box<[u32]>, PlanError> {
    let divisor = weights.iter().fold(0, |g, &w| gcd(g, u64::from(w)));
    let scaled: Vec<i64> = weights.iter().map(|&w| (u64::from(w) / divisor) as i64).collect();
    let total: i64 = scaled.iter().sum();
    if total as u64 > MAX_SCHEDULE {
        return Err(PlanError::ScheduleTooLong(total as u64));
    }
    let mut credit = vec![0i64; scaled.len()];
    let mut table = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in credit.iter_mut().zip(&scaled) {
            *c += w;
        }
        let (best, _) =
            credit.iter().enumerate().max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i))).expect("at least one weight");
        credit[best] -= total;
        table.push(best as u32);
    }
    Ok(table.into_boxed_slice())
}

/// Parses a mix file (format in the [module docs of `load`](super)).
///
/// Paths in it (`/x`) are resolved against `base`; `@body-file` paths against
/// the directory of `path`. Entries without a method use `default_method`.
pub fn parse_mix_file(path: &Path, base: Option<&Url>, default_method: &str) -> Result<Vec<RequestSpec>, PlanError> {
    let text = std::fs::read_to_string(path).map_err(|error| PlanError::Read {
        what: "mix file",
        path: path.to_path_buf(),
        error,
    })?;
    parse_mix(&text, path, base, default_method)
}

/// Parses mix-file `text`; `path` names it in errors and anchors `@body-file`.
pub fn parse_mix(
    text: &str,
    path: &Path,
    base: Option<&Url>,
    default_method: &str,
) -> Result<Vec<RequestSpec>, PlanError> {
    let mut specs: Vec<RequestSpec> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let fail = |reason: String| PlanError::Mix { path: path.to_path_buf(), line: index + 1, reason };
        let content = raw.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            let spec = specs.last_mut().ok_or_else(|| fail("an indented line must follow a request line".into()))?;
            if let Some(text) = content.strip_prefix("@body-file") {
                let file = text.trim();
                if file.is_empty() {
                    return Err(fail("@body-file needs a path".into()));
                }
                let file = path.parent().unwrap_or(Path::new(".")).join(file);
                spec.body =
                    std::fs::read(&file).map_err(|e| fail(format!("cannot read body file {}: {e}", file.display())))?;
            } else if let Some(text) = content.strip_prefix("@body") {
                spec.body = text.strip_prefix(' ').unwrap_or(text).as_bytes().to_vec();
            } else if content.starts_with('@') {
                return Err(fail(format!("unknown directive {content:?} (expected @body or @body-file)")));
            } else {
                let header = parse_header(content).map_err(|e| fail(e.to_string()))?;
                spec.headers.push(header);
            }
            continue;
        }
        let mut words: Vec<&str> = content.split_whitespace().collect();
        let mut weight = 1;
        if words[0].bytes().all(|b| b.is_ascii_digit() || b"+-.".contains(&b)) {
            weight = words[0]
                .parse::<u32>()
                .ok()
                .filter(|&w| w > 0)
                .ok_or_else(|| fail(format!("weight {:?} must be a positive integer", words[0])))?;
            words.remove(0);
        }
        let (method, url) = match words.as_slice() {
            [url] => (default_method, *url),
            [method, url] => (*method, *url),
            _ => return Err(fail("expected \"[WEIGHT] [METHOD] URL\"".into())),
        };
        if !is_method(method) {
            return Err(fail(format!("bad method {method:?}")));
        }
        let url = if url.starts_with('/') {
            base.ok_or_else(|| {
                fail(format!("{url:?} is a path: give a base URL on the command line or write http://host{url}"))
            })?
            .with_target(url)
        } else {
            Url::parse(url).map_err(|e| fail(e.to_string()))?
        };
        if url.target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(fail("spaces and control characters must be percent-encoded".into()));
        }
        specs.push(RequestSpec { weight, ..RequestSpec::new(method, url) });
    }
    if specs.is_empty() {
        return Err(PlanError::EmptyMix(path.to_path_buf()));
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://example.com").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.target.as_str()), ("example.com", 80, "/"));
        let u = Url::parse("HTTP://127.0.0.1:8080/a/b?x=1#frag").unwrap();
        assert_eq!((u.port, u.target.as_str()), (8080, "/a/b?x=1"));
        assert_eq!(u.to_string(), "http://127.0.0.1:8080/a/b?x=1");
        let u = Url::parse("http://[::1]:81?q").unwrap();
        assert_eq!((u.host.as_str(), u.host_for_lookup(), u.port), ("[::1]", "::1", 81));
        assert_eq!(u.target, "/?q");
        assert_eq!(u.authority(), "[::1]:81");
        let u = Url::parse("https://h/x").unwrap();
        assert_eq!(
            (u.tls, u.port, u.authority(), u.to_string()),
            (true, 443, "h".to_string(), "https://h/x".to_string())
        );
        assert_eq!(Url::parse("https://h:8443").unwrap().authority(), "h:8443");
        for bad in [
            "ftp://x/",
            "example.com/",
            "http:///path",
            "http://x:0/",
            "http://x:70000/",
            "http://x:8a/",
            "http://u@x/",
            "http://[::1/",
            "http://x/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn serialised_request() {
        let mut spec = RequestSpec::new("POST", Url::parse("http://h:81/p?q").unwrap());
        spec.body = b"abc".to_vec();
        spec.headers.push(("Accept".into(), "text/plain".into()));
        let extra =
            vec![("Accept".to_string(), "*/*".to_string()), ("Accept-Encoding".to_string(), "gzip".to_string())];
        let plan = Plan::build(&[spec], &extra, false).unwrap();
        let text = String::from_utf8(plan.requests[0].bytes.to_vec()).unwrap();
        assert_eq!(
            text,
            "POST /p?q HTTP/1.1\r\nHost: h:81\r\nUser-Agent: tern-bench\r\n\
             Accept-Encoding: gzip\r\nAccept: text/plain\r\nContent-Length: 3\r\n\
             Connection: close\r\n\r\nabc"
        );
        assert_eq!(plan.requests[0].label, "POST http://h:81/p?q");
    }

    #[test]
    fn user_host_header_replaces_ours() {
        let spec = RequestSpec::new("HEAD", Url::parse("http://127.0.0.1/").unwrap());
        let plan = Plan::build(&[spec], &[parse_header("Host: example.org").unwrap()], true).unwrap();
        let text = String::from_utf8(plan.requests[0].bytes.to_vec()).unwrap();
        assert_eq!(text, "HEAD / HTTP/1.1\r\nUser-Agent: tern-bench\r\nHost: example.org\r\n\r\n");
        assert!(plan.requests[0].head);
    }

    #[test]
    fn headers_are_validated() {
        assert_eq!(
            parse_header("Accept-Encoding:  gzip ").unwrap(),
            ("Accept-Encoding".to_string(), "gzip".to_string())
        );
        for bad in ["NoColon", "Bad Name: x", ": x", "Content-Length: 5", "X: a\rb"] {
            assert!(parse_header(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn schedule_is_exact_and_interleaved() {
        let s = schedule(&[70, 30]).unwrap();
        assert_eq!(&*s, &[0, 1, 0, 0, 0, 1, 0, 0, 1, 0][..]);
        let s = schedule(&[1, 2, 3]).unwrap();
        assert_eq!(s.len(), 6);
        for (i, w) in [1, 2, 3].into_iter().enumerate() {
            assert_eq!(s.iter().filter(|&&x| x as usize == i).count(), w);
        }
        assert!(matches!(schedule(&[100_000, 1]), Err(PlanError::ScheduleTooLong(100_001))));
    }

    #[test]
    fn mix_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("payload.bin"), b"0123456789").unwrap();
        let text = "# a comment\n\
                    70 /static/115k.bin\n\
                    \n\
                    30 POST /cgi-bin/echo\n\
                    \x20   Content-Type: text/plain\n\
                    \x20   @body hello world\n\
                    PUT http://127.0.0.1:8080/up\n\
                    \t@body-file payload.bin\n";
        let base = Url::parse("http://127.0.0.1:8080/ignored").unwrap();
        let path = dir.path().join("mix.txt");
        let specs = parse_mix(text, &path, Some(&base), "GET").unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!((specs[0].weight, specs[0].method.as_str()), (70, "GET"));
        assert_eq!(specs[0].url.target, "/static/115k.bin");
        assert_eq!((specs[1].weight, specs[1].method.as_str()), (30, "POST"));
        assert_eq!(specs[1].headers, vec![("Content-Type".into(), "text/plain".into())]);
        assert_eq!(specs[1].body, b"hello world");
        assert_eq!((specs[2].weight, specs[2].method.as_str()), (1, "PUT"));
        assert_eq!(specs[2].body, b"0123456789");
    }

    #[test]
    fn mix_file_errors_name_the_line() {
        let path = Path::new("/tmp/m.mix");
        let cases = [
            ("  X: y\n", 1, "must follow"),
            ("/a\n0 /b\n", 2, "positive integer"),
            ("/a\n-3 /b\n", 2, "positive integer"),
            ("/a\n1.5 /b\n", 2, "positive integer"),
            ("/a\n1 4GET /b\n", 2, "bad method"),
            ("/a\n1 GET /b extra\n", 2, "expected"),
            ("/a\n\n  @bogus\n", 3, "unknown directive"),
            ("/a\n  Bad Header\n", 2, "Name: value"),
            ("1 G(ET /a\n", 1, "bad method"),
            ("ftp://x/\n", 1, "https://"),
            ("/a\n  @body-file does-not-exist\n", 2, "cannot read"),
        ];
        let base = Url::parse("http://h/").unwrap();
        for (text, line, needle) in cases {
            let err = parse_mix(text, path, Some(&base), "GET").unwrap_err().to_string();
            assert!(err.starts_with(&format!("/tmp/m.mix:{line}: ")), "{text:?}: {err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        let err = parse_mix("/a\n", path, None, "GET").unwrap_err().to_string();
        assert!(err.contains("base URL"), "{err}");
        assert!(matches!(parse_mix("# nothing\n", path, None, "GET"), Err(PlanError::EmptyMix(_))));
    }

    #[test]
    fn one_server_per_plan() {
        let a = RequestSpec::new("GET", Url::parse("http://a/").unwrap());
        let b = RequestSpec::new("GET", Url::parse("http://b/").unwrap());
        assert!(matches!(Plan::build(&[a, b], &[], true), Err(PlanError::MixedServers { .. })));
    }
}
