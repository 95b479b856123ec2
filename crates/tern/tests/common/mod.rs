//! Shared helpers for end-to-end tests: start the real `tern` binary on an
//! ephemeral port, talk to it over real sockets.
#![allow(dead_code)] // each test file uses its own subset

pub mod chromium;
pub mod h2;
pub mod lab;
pub mod php_fpm;
pub mod tls;
pub mod upstream;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every static I/O method the suite's model sends with: `uring` reads
/// through the `uring` engine's ring, so only under that model.
pub fn io_methods() -> Vec<&'static str> {
    let mut methods = vec!["sendfile", "mmap", "read"];
    if model().as_deref() == Some("uring") {
        methods.push("uring");
    }
    methods
}

/// The shared HTTP/1.1 request corpus: `$TERN_HTTP1_CORPUS`, else
/// `../shared/http1-corpus` beside the repository, else this machine's
/// `/work/shared/http1-corpus` (a clean clone may live anywhere).
pub fn corpus_dir() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        std::env::var_os("TERN_HTTP1_CORPUS").map(PathBuf::from),
        Some(repo.join("../shared/http1-corpus")),
        Some(PathBuf::from("/work/shared/http1-corpus")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("README.md").is_file())
        .expect("the shared HTTP/1.1 corpus: set TERN_HTTP1_CORPUS to its directory")
}

/// A running `tern serve`, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Tern {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
    _config: Option<tempfile::NamedTempFile>,
}

/// The concurrency model the suite runs against: `$TERN_MODEL`
/// (`scripts/test.sh` runs the end-to-end tests once per model), else the
/// server's default.
pub fn model() -> Option<String> {
    std::env::var("TERN_MODEL").ok().filter(|m| !m.is_empty())
}

/// Every model a test that loops over models covers.
pub const MODELS: [&str; 5] = ["event", "pool", "staged", "per-request", "uring"];

pub fn tern_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tern")
}

impl Tern {
    /// Starts `tern serve ROOT --listen 127.0.0.1:0 --io IO` with an optional
    /// TOML config and extra arguments.
    pub fn start(root: &Path, io: &str, config: &str, extra: &[&str]) -> Tern {
        Tern::start_with(Command::new(tern_bin()), root, io, config, extra)
    }

    /// As [`Tern::start`], from a prepared command (e.g. under `taskset`).
    pub fn start_with(mut cmd: Command, root: &Path, io: &str, config: &str, extra: &[&str]) -> Tern {
        let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        // Tests use short timeouts unless they say otherwise.
        let base = "[log]\naccess = \"off\"\nlevel = \"warn\"\n";
        let text = if config.contains("[log]") { config.to_string() } else { format!("{base}{config}") };
        // CI runs the tests as root; the programs they start are their own.
        let text = if text.contains("allow_root") {
            text
        } else if text.contains("[cgi]\n") {
            text.replacen("[cgi]\n", "[cgi]\nallow_root = true\n", 1)
        } else {
            format!("{text}\n[cgi]\nallow_root = true\n")
        };
        file.write_all(text.as_bytes()).unwrap();
        cmd.args(["serve"]).arg(root).args(["--listen", "127.0.0.1:0", "--io", io, "--config"]).arg(file.path());
        if !extra.contains(&"--workers") {
            cmd.args(["--workers", "2"]);
        }

        cmd.args(extra);
        let mut tern = Tern::spawn(cmd);
        tern._config = Some(file);
        tern
    }

    /// Runs a prepared `tern serve` command line as it is and waits for its
    /// first "listening" line.
    pub fn spawn(mut cmd: Command) -> Tern {
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        if let Some(m) = model().filter(|_| args.iter().any(|a| a == "serve") && !args.iter().any(|a| a == "--model")) {
            cmd.args(["--model", &m]);
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
        let mut child = cmd.spawn().expect("spawn tern");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    if let Some(tx) = tx.take() {
                        let addr = rest.split('/').next().unwrap().to_string();
                        let _ = tx.send(addr);
                    }
                }
                log2.lock().unwrap().push_str(&line);
                log2.lock().unwrap().push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => addr.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                panic!("tern did not start: {}", log.lock().unwrap());
            }
        };
        Tern { child, addr, stderr: log, _config: None }
    }

    /// The configuration file the server was started with.
    pub fn config_path(&self) -> &Path {
        self._config.as_ref().expect("started with a config file").path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The server's `/_tern/status` document.
    pub fn status(&self) -> serde_json::Value {
        let r = get(self.addr, "/_tern/status", "");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("status is JSON")
    }

    /// Sends SIGTERM and waits for the exit (at most `limit`).
    pub fn terminate(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Is the process still running?
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Tern {
    fn drop(&mut self) {
        if self.alive() && self.terminate(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `bytes` on a fresh connection, half-closes, and reads until the
/// server closes or `silence` passes with nothing new (the corpus replay
/// rule).
pub fn exchange(addr: SocketAddr, bytes: &[u8], silence: Duration) -> Vec<u8> {
    exchange_until_close(addr, bytes, silence).0
}

/// As [`exchange`]; also says whether the server closed the connection
/// (rather than falling silent).
pub fn exchange_until_close(addr: SocketAddr, bytes: &[u8], silence: Duration) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(silence)).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
}

/// Reads until EOF, an error, or a read timeout.
pub fn read_until_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Every status code at the start of a response line, in order.
pub fn statuses(response: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(pos) = find(&response[i..], b"HTTP/1.") {
        let at = i + pos;
        let line_start = at == 0 || response[..at].ends_with(b"\r\n");
        let tail = &response[at..];
        if line_start && tail.len() >= 12 && (tail[7] == b'0' || tail[7] == b'1') && tail[8] == b' ' {
            if let Ok(code) = std::str::from_utf8(&tail[9..12]).unwrap_or("").parse::<u16>() {
                out.push(code);
            }
        }
        i = at + 7;
    }
    out
}

/// The fields of `/proc/net/tcp`'s row for the IPv4 socket from `local`
/// to `remote` ("sl local_address rem_address st tx_queue:rx_queue … uid
/// timeout inode"; addresses as 8 hex digits, a colon, 4 of the port).
pub fn proc_tcp_row(local: SocketAddr, remote: SocketAddr) -> Option<Vec<String>> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port()),
        SocketAddr::V6(_) => unreachable!("IPv4 only"),
    };
    let (local, remote) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.len() > 9 && f[1] == local && f[2] == remote)
}

/// Bytes the kernel holds to send on the IPv4 connection from `local` to
/// `remote` (`tx_queue` of /proc/net/tcp: written, not yet acknowledged).
pub fn send_queue(local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let f = proc_tcp_row(local, remote)?;
    Some(u64::from_str_radix(f[4].split(':').next().unwrap(), 16).unwrap())
}

/// How many descriptor numbers below `limit` (`tern`'s `RLIMIT_NOFILE`)
/// are free: numbers, not a count of open ones, which also holds those
/// inherited above the limit (cargo's jobserver pipes).
pub fn free_descriptors(tern: &Tern, limit: usize) -> usize {
    (0..limit).filter(|n| !Path::new(&format!("/proc/{}/fd/{n}", tern.pid())).exists()).count()
}

/// Connections held until every descriptor number below `limit` (`tern`'s
/// `RLIMIT_NOFILE`) is taken, each with part of a head sent so it is
/// accepted rather than deferred; dropped, they free them again.
pub fn hold_every_descriptor(tern: &Tern, limit: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    let mut held = Vec::new();
    while free_descriptors(tern, limit) > 0 {
        assert!(held.len() < 200, "{} free after {} connections", free_descriptors(tern, limit), held.len());
        let mut s = std::net::TcpStream::connect(tern.addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        held.push(s);
        let start = std::time::Instant::now();
        while free_descriptors(tern, limit) > 0 && start.elapsed() < std::time::Duration::from_millis(100) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    held
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A parsed response: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A response head's status and fields (names lower-cased).
pub fn parse_head(head: &str) -> (u16, Vec<(String, String)>) {
    let mut lines = head.trim_end().split("\r\n");
    let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    (status, headers)
}

/// Splits raw bytes holding consecutive responses into responses, decoding
/// chunked bodies; a body without length or chunking runs to the end.
/// `head_requests` marks responses to HEAD (no body whatever the head says).
pub fn parse_responses(mut raw: &[u8], head_requests: &[bool]) -> Vec<Response> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let end = find(raw, b"\r\n\r\n").expect("complete head");
        let (status, headers) = parse_head(std::str::from_utf8(&raw[..end]).unwrap());
        let value = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        raw = &raw[end + 4..];
        let bodiless = head_requests.get(out.len()).copied().unwrap_or(false) || status == 304 || status == 204;
        let mut body = Vec::new();
        if bodiless {
        } else if value("transfer-encoding") == Some("chunked") {
            loop {
                let line_end = find(raw, b"\r\n").expect("chunk size line");
                let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap(), 16).unwrap();
                raw = &raw[line_end + 2..];
                if size == 0 {
                    raw = &raw[2..];
                    break;
                }
                body.extend_from_slice(&raw[..size]);
                raw = &raw[size + 2..];
            }
        } else if let Some(len) = value("content-length") {
            let len: usize = len.parse().unwrap();
            body.extend_from_slice(&raw[..len]);
            raw = &raw[len..];
        } else {
            body.extend_from_slice(raw);
            raw = &[];
        }
        out.push(Response { status, headers, body });
    }
    out
}

/// One request on its own connection (`Connection: close`), parsed.
pub fn request(addr: SocketAddr, raw: &str) -> Response {
    let bytes = exchange(addr, raw.as_bytes(), Duration::from_secs(5));
    let head = raw.starts_with("HEAD ");
    parse_responses(&bytes, &[head]).into_iter().next().expect("a response")
}

/// A GET with extra header lines, on its own connection.
pub fn get(addr: SocketAddr, path: &str, headers: &str) -> Response {
    request(addr, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\r\n"))
}

/// Deterministic pseudo-random bytes (xorshift), for byte-exact checks.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A temporary document root with an index, a small text file, a 3 MiB
/// binary, a subdirectory and a secret next to (outside) the root.
pub struct Site {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub big: Vec<u8>,
    pub small: Vec<u8>,
}

pub const INDEX: &str = "<!DOCTYPE html><title>tern test</title><p>index</p>\n";
pub const SECRET: &str = "TOP-SECRET-OUTSIDE-ROOT";

/// The configurations the shared suites (the corpus, traversal) run under:
/// the flat one, whose top-level settings are one site, and several
/// sites whose default serves the same `root` through locations — among
/// them `/alias`, an alias of the root itself on a prefix without a
/// trailing slash, so `/alias../secret.txt` would name the secret beside
/// the root were the alias textual.
pub fn configs(root: &Path) -> [(&'static str, String); 2] {
    let r = root.display();
    let sites = format!(
        r#"[[site]]
name = "other"
hosts = ["other.test", "*.other.test"]
root = "{r}/sub"

[[site]]
name = "main"
default = true
root = "{r}"
headers = {{ set = {{ X-Site = "main" }} }}

[[site.location]]
exact = "/exact"
respond = {{ body = "exact" }}

[[site.location]]
prefix = "/alias"
alias = "{r}"

[[site.location]]
prefix = "/sub/"
list_directories = true

[[site.location]]
regex = '\.css$'
expires = "1h"
"#
    );
    [("one site", String::new()), ("sites", sites)]
}

pub fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(root.join("noindex")).unwrap();
    std::fs::write(root.join("index.html"), INDEX).unwrap();
    std::fs::write(root.join("sub/index.html"), "sub index\n").unwrap();
    let small = pattern(1000, 7);
    std::fs::write(root.join("small.txt"), &small).unwrap();
    let big = pattern(3 * 1024 * 1024 + 17, 11);
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("style.css"), "body{}\n").unwrap();
    std::fs::write(root.join("empty.txt"), "").unwrap();
    std::fs::write(dir.path().join("secret.txt"), SECRET).unwrap();
    Site { dir, root, big, small }
}
