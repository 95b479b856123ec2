//! Upstream servers for the reverse-proxy tests, each a real server in a
//! child process: the Go and Node servers written for the tests
//! (`tests/upstreams/`, their endpoints documented there), Python's
//! `http.server` (HTTP/1.0, a connection per response; CGI output without a
//! length) and a WebSocket echo server (Debian's python3-websockets). Each
//! starts on a free port, is waited for until it answers, and is killed
//! when dropped:
//!
//! ```ignore
//! let up = Upstream::go()?;
//! let r = common::get(up.addr(), "/bytes?n=1000&chunked=1", "");
//! assert_eq!(r.body, upstream::pattern(1000));
//! ```

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The test upstreams' sources.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams");

/// Debian's Python, which sees Debian's python3-websockets (a `python3`
/// earlier on PATH, pyenv's say, may not).
const PYTHON: &str = "/usr/bin/python3";

/// The Go upstream's malformed responses, by their `/raw?case=` name.
pub const RAW_CASES: [&str; 7] = [
    "two-content-lengths",
    "content-length-and-chunked",
    "bad-chunk-size",
    "obs-fold",
    "nul-in-field",
    "status-2000",
    "cut-short",
];

#[derive(Clone, Debug)]
enum Kind {
    Go,
    Node,
    PythonHttp(PathBuf),
    WebSocket,
}

/// A running upstream server, killed when dropped.
pub struct Upstream {
    kind: Kind,
    addr: SocketAddr,
    child: Option<Child>,
    output: Arc<Mutex<String>>,
    /// One message from each output-copying thread when it has copied all.
    drained: mpsc::Receiver<()>,
}

impl Upstream {
    /// The Go `net/http` upstream (built on first use).
    pub fn go() -> io::Result<Upstream> {
        Upstream::start(Kind::Go, 0)
    }

    /// The Node `http` upstream.
    pub fn node() -> io::Result<Upstream> {
        Upstream::start(Kind::Node, 0)
    }

    /// `python3 -m http.server --cgi` serving the files under `root`, and
    /// running the programs under `root/cgi-bin/` (as `nobody` when run as
    /// root), whose output it sends without a length, ended by closing.
    pub fn python_http(root: &Path) -> io::Result<Upstream> {
        Upstream::start(Kind::PythonHttp(root.to_path_buf()), 0)
    }

    /// The WebSocket echo server (any path).
    pub fn websocket() -> io::Result<Upstream> {
        Upstream::start(Kind::WebSocket, 0)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What the server printed, for a failing test's message.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Kills the server at once (SIGKILL, as a crash) and reaps it; what it
    /// printed is then all in [`Upstream::output`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            for _ in 0..2 {
                let _ = self.drained.recv_timeout(Duration::from_secs(5));
            }
        }
    }

    /// Starts the server again on the same port (after [`Upstream::kill`]),
    /// its state fresh; its output goes on after the previous run's.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let before = self.output();
        *self = Upstream::start(self.kind.clone(), self.addr.port())?;
        self.output.lock().unwrap().insert_str(0, &before);
        Ok(())
    }

    /// The requests the Go upstream received over all its runs, by `METHOD
    /// /path` (its "request" lines; the path as sent, percent-encoded).
    pub fn received(&self) -> HashMap<String, usize> {
        let mut received = HashMap::new();
        for request in self.output().lines().filter_map(|l| l.strip_prefix("request ")) {
            *received.entry(request.to_string()).or_default() += 1;
        }
        received
    }

    /// How many `METHOD /path` requests the Go or Node upstream received
    /// (the path as sent, percent-encoded).
    pub fn count(&self, method: &str, path: &str) -> u64 {
        let r = super::get(self.addr, "/count", "");
        let counts: serde_json::Value = serde_json::from_slice(&r.body).expect("/count answers JSON");
        counts[format!("{method} {path}")].as_u64().unwrap_or(0)
    }

    fn start(kind: Kind, port: u16) -> io::Result<Upstream> {
        let mut cmd = match &kind {
            Kind::Go => {
                let mut cmd = Command::new(go_binary()?);
                cmd.arg("-listen").arg(format!("127.0.0.1:{port}"));
                cmd
            }
            Kind::Node => {
                let mut cmd = Command::new("node");
                cmd.arg(format!("{SOURCES}/node/server.js")).arg(port.to_string());
                cmd
            }
            Kind::PythonHttp(root) => {
                let mut cmd = Command::new(PYTHON);
                cmd.args(["-u", "-m", "http.server", "--cgi", "--bind", "127.0.0.1", "--directory"]).arg(root);
                cmd.arg(port.to_string());
                cmd
            }
            Kind::WebSocket => {
                let mut cmd = Command::new(PYTHON);
                cmd.arg(format!("{SOURCES}/python/ws_echo.py")).arg(port.to_string());
                cmd
            }
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("starting the {kind:?} upstream: {e}")))?;
        let output = Arc::new(Mutex::new(String::new()));
        // The first number on stdout is the port: alone on its line, or in
        // http.server's "Serving HTTP on 127.0.0.1 port N (…) ...".
        let (tx, rx) = mpsc::channel();
        let (done, drained) = mpsc::channel();
        drain(child.stdout.take().unwrap(), output.clone(), Some(tx), done.clone());
        drain(child.stderr.take().unwrap(), output.clone(), None, done);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut upstream = Upstream { kind, addr, child: Some(child), output, drained };
        let started = Instant::now();
        let port = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| upstream.failed("printed no port"))?;
        upstream.addr.set_port(port);
        while TcpStream::connect(upstream.addr).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(upstream.failed("does not accept connections"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(upstream)
    }

    fn failed(&mut self, what: &str) -> io::Error {
        self.kill();
        io::Error::other(format!("the {:?} upstream {what}: {}", self.kind, self.output()))
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Copies a child's output into `output` line by line, the first number
/// found sent on `port`; says `done` at the end of it.
fn drain(
    from: impl Read + Send + 'static,
    output: Arc<Mutex<String>>,
    mut port: Option<mpsc::Sender<u16>>,
    done: mpsc::Sender<()>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if let Some(n) = port.as_ref().and_then(|_| line.split_whitespace().find_map(|w| w.parse().ok())) {
                let _ = port.take().unwrap().send(n);
            }
            let mut out = output.lock().unwrap();
            out.push_str(&line);
            out.push('\n');
        }
        let _ = done.send(());
    });
}

/// The Go upstream's binary, built once per version of its source into
/// `target/<profile>/upstreams/` (one file, no module dependencies: offline,
/// seconds once Go's build cache is warm).
fn go_binary() -> io::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(|| build_go().map_err(|e| e.to_string())).clone().map_err(io::Error::other)
}

fn build_go() -> io::Result<PathBuf> {
    let dir = Path::new(SOURCES).join("go");
    let mut hasher = DefaultHasher::new();
    for file in ["go.mod", "main.go"] {
        std::fs::read(dir.join(file))?.hash(&mut hasher);
    }
    let cache = Path::new(super::tern_bin()).parent().unwrap().join("upstreams");
    let name = format!("go-upstream-{:016x}", hasher.finish());
    let bin = cache.join(&name);
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&cache)?;
    // Built aside and renamed into place, so a concurrent run never starts
    // a half-written binary.
    let partial = cache.join(format!(".{name}.{}", std::process::id()));
    let build = |go: &str| {
        Command::new(go)
            .args(["build", "-trimpath", "-o"])
            .arg(&partial)
            .arg(".")
            .current_dir(&dir)
            .env("GOFLAGS", "-mod=mod -buildvcs=false")
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local")
            .env("GOWORK", "off")
            .env("CGO_ENABLED", "0")
            .output()
    };
    let out = match build("go") {
        Err(e) if e.kind() == io::ErrorKind::NotFound => build("/usr/local/go/bin/go"),
        out => out,
    }?;
    if !out.status.success() {
        return Err(io::Error::other(format!("go build: {}", String::from_utf8_lossy(&out.stderr))));
    }
    std::fs::rename(&partial, &bin)?;
    // Binaries of older sources are of no further use.
    for entry in std::fs::read_dir(&cache)?.flatten() {
        let file = entry.file_name();
        if file.to_string_lossy().starts_with("go-upstream-") && file != name.as_str() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(bin)
}

/// The first `n` bytes of the pattern the Go and Node upstreams' `/bytes`
/// answer and the WebSocket client's `binary:N` sends: byte i is i % 251.
pub fn pattern(n: usize) -> Vec<u8> {
    // Whole periods copied: a 100 MiB body is made in milliseconds even
    // in an unoptimised test build.
    let period: Vec<u8> = (0..251).collect();
    let mut out = Vec::with_capacity(n + 251);
    while out.len() < n {
        out.extend_from_slice(&period);
    }
    out.truncate(n);
    out
}

/// The SHA-256 of `bytes` in hex, as `/echo` reports a body's.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the WebSocket client (`tests/upstreams/python/ws_client.py`)
/// against `url`: each message sent and its echo awaited, `binary:N` as N
/// bytes of [`pattern`]. Returns the lines it printed, one per message
/// echoed intact, so a good run returns `messages`.
pub fn websocket_client(url: &str, messages: &[&str]) -> io::Result<Vec<String>> {
    let out = Command::new(PYTHON)
        .arg(format!("{SOURCES}/python/ws_client.py"))
        .arg(url)
        .args(messages)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!("ws_client.py: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}
