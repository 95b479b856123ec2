//! The gateway's FastCGI file server (`gateway/fcgi/fcgi_files.c`, on
//! libfcgi) behind tern, in both its modes: byte-exact files from 1 byte to
//! 64 MiB, files replaced or truncated on disk served fresh, a file
//! truncated while it is being sent from its mapping (SIGBUS caught), and
//! path traversal refused when asked directly over FastCGI.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{get, pattern, Tern};
use tern_server::site::fastcgi::proto;

fn binary() -> PathBuf {
    let gateway = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../gateway");
    let built = Command::new("make").arg("-s").arg("-C").arg(&gateway).arg("build/fcgi-files").status().unwrap();
    assert!(built.success(), "make -C gateway build/fcgi-files (needs libfcgi-dev)");
    gateway.join("build/fcgi-files")
}

/// A running `fcgi-files`, killed when dropped.
struct FileServer {
    child: Child,
    socket: PathBuf,
    stderr: PathBuf,
}

impl FileServer {
    fn start(dir: &Path, root: &Path, mode: &str) -> FileServer {
        let socket = dir.join(format!("files-{mode}.sock"));
        let stderr = dir.join(format!("files-{mode}.log"));
        let child = Command::new(binary())
            .args(["--mode", mode, "--prefix", "/fs", "--threads", "4", "--root"])
            .arg(root)
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while !socket.exists() {
            assert!(start.elapsed() < Duration::from_secs(10), "fcgi-files did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        FileServer { child, socket, stderr }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tern_for(root: &Path, server: &FileServer) -> Tern {
    let config = format!(
        "[fastcgi.backends.files]\naddress = \"unix:{}\"\nprefixes = [\"/fs\"]\ncheck_file = false\nmax_connections = 4\n",
        server.socket.display()
    );
    Tern::start(root, "sendfile", &config, &[])
}

#[test]
fn byte_exact_from_1_byte_to_64_mib_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    let www = dir.path().join("www");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(&www).unwrap();
    let sizes = [1usize, 4095, 4096, 4097, 65_537, 1 << 20, 64 << 20];
    let data: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, n as u64)).collect();
    for (n, d) in sizes.iter().zip(&data) {
        std::fs::write(files.join(format!("f{n}.bin")), d).unwrap();
    }
    std::fs::write(files.join("empty.txt"), "").unwrap();
    for mode in ["mmap", "read"] {
        let server = FileServer::start(dir.path(), &files, mode);
        let tern = tern_for(&www, &server);
        for _round in 0..2 {
            // The second round comes from the open-file table.
            for (n, d) in sizes.iter().zip(&data) {
                let r = get(tern.addr, &format!("/fs/f{n}.bin"), "");
                assert_eq!((r.status, r.header("content-length")), (200, Some(n.to_string().as_str())), "{mode} {n}");
                assert!(r.body == *d, "{mode}: {n} bytes differ (got {})", r.body.len());
            }
        }
        let r = get(tern.addr, "/fs/empty.txt", "");
        assert_eq!((r.status, r.body.len(), r.header("content-type")), (200, 0, Some("text/plain")));
        assert_eq!(get(tern.addr, "/fs/missing.bin", "").status, 404);
    }
}

#[test]
fn replaced_and_truncated_files_are_served_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let path = files.join("f.bin");
    let first = pattern(1 << 20, 1);
    std::fs::write(&path, &first).unwrap();
    for mode in ["mmap", "read"] {
        std::fs::write(&path, &first).unwrap();
        let server = FileServer::start(dir.path(), &files, mode);
        let tern = tern_for(dir.path(), &server);
        assert!(get(tern.addr, "/fs/f.bin", "").body == first, "{mode}");
        // Replaced by rename: same size, another inode.
        let second = pattern(1 << 20, 2);
        std::fs::write(files.join("new.tmp"), &second).unwrap();
        std::fs::rename(files.join("new.tmp"), &path).unwrap();
        assert!(get(tern.addr, "/fs/f.bin", "").body == second, "{mode}: the replaced file");
        // Truncated in place: the same inode, shorter.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1000).unwrap();
        let r = get(tern.addr, "/fs/f.bin", "");
        assert_eq!((r.status, r.body.as_slice()), (200, &second[..1000]), "{mode}: the truncated file");
    }
}

#[test]
fn a_file_truncated_while_sent_from_its_mapping_does_not_crash() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let path = files.join("big.bin");
    std::fs::write(&path, pattern(48 << 20, 9)).unwrap();
    std::fs::write(files.join("small.txt"), "small\n").unwrap();
    let mut server = FileServer::start(dir.path(), &files, "mmap");
    let tern = tern_for(dir.path(), &server);
    // A client that reads nothing: the server blocks mid-file.
    let mut sock = TcpStream::connect(tern.addr).unwrap();
    sock.write_all(b"GET /fs/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(700));
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let _ = sock.read_to_end(&mut got);
    assert!(got.len() < 48 << 20, "the whole file arrived: it was not truncated mid-send");
    assert!(server.alive(), "fcgi-files died of the truncation");
    let log = std::fs::read_to_string(&server.stderr).unwrap();
    assert!(log.contains("big.bin changed while it was sent"), "{log}");
    assert_eq!(get(tern.addr, "/fs/small.txt", "").body, b"small\n");
    let r = get(tern.addr, "/fs/big.bin", "");
    assert_eq!((r.status, r.body.len()), (200, 4096));
}

/// One request straight over FastCGI (no server in front to normalise the
/// path): the status the file server answers.
fn fastcgi_status(socket: &Path, script_name: &str) -> u16 {
    let mut records = Vec::new();
    proto::begin_request(&mut records, proto::ID, false);
    let mut params = proto::Params::new(&mut records, proto::ID);
    params.pair(b"REQUEST_METHOD", b"GET");
    params.pair(b"SCRIPT_NAME", script_name.as_bytes());
    params.finish();
    proto::end_stream(&mut records, proto::STDIN, proto::ID);
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&records).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let mut decoder = proto::Decoder::new(proto::ID);
    let (mut out, mut pos) = (Vec::new(), 0);
    loop {
        let (n, event) = decoder.decode(&raw[pos..]).unwrap();
        pos += n;
        match event {
            Some(proto::Event::Stdout(d)) => out.extend_from_slice(d),
            Some(proto::Event::Stderr(_)) => {}
            Some(proto::Event::End { .. }) | None => break,
        }
    }
    let text = String::from_utf8_lossy(&out);
    match text.strip_prefix("Status: ") {
        Some(rest) => rest[..3].parse().unwrap(),
        None if text.contains("Content-Length:") => 200,
        None => panic!("no response: {text:?}"),
    }
}

#[test]
fn traversal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(files.join("sub")).unwrap();
    std::fs::write(files.join("sub/ok.txt"), "ok").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), files.join("link.txt")).unwrap();
    for mode in ["mmap", "read"] {
        let server = FileServer::start(dir.path(), &files, mode);
        assert_eq!(fastcgi_status(&server.socket, "/fs/sub/ok.txt"), 200);
        for bad in ["/fs/../secret.txt", "/fs/sub/../../secret.txt", "/fs/..", "/other/sub/ok.txt", "/fs/link.txt"] {
            assert_eq!(fastcgi_status(&server.socket, bad), 403, "{mode}: {bad}");
        }
        assert_eq!(fastcgi_status(&server.socket, "/fs/sub"), 403, "a directory is not a file");
        assert_eq!(fastcgi_status(&server.socket, "/fs/nope.txt"), 404);
    }
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let big = pattern(8 << 20, 5);
    std::fs::write(files.join("big.bin"), &big).unwrap();
    std::fs::write(files.join("small.txt"), "small\n").unwrap();
    let mut server = FileServer::start(dir.path(), &files, "mmap");
    let tern = tern_for(dir.path(), &server);
    // A kept-alive connection now idles in tern's pool: it must not hold
    // the stop up.
    assert_eq!(get(tern.addr, "/fs/small.txt", "").body, b"small\n");
    // A client that does not read yet: the file server blocks mid-file.
    let mut sock = TcpStream::connect(tern.addr).unwrap();
    sock.write_all(b"GET /fs/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(700));
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.alive(), "it stopped before the request in flight was answered");
    assert!(!server.socket.exists(), "the socket file is still there: new requests could still come");
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    sock.read_to_end(&mut got).unwrap();
    let r = &common::parse_responses(&got, &[false])[0];
    assert!(r.status == 200 && r.body == big, "the request in flight was cut ({} bytes)", r.body.len());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "fcgi-files ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(&server.stderr).unwrap();
    assert!(log.contains("stopped by signal 15"), "{log}");
}
