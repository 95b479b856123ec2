//! `tern bench` against tern's own server: the requests the generator counts
//! are exactly the lines the server writes to its access log.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(root: &std::path::Path, log: &std::path::Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .arg("serve")
            .arg(root)
            .args(["--listen", "127.0.0.1:0", "--workers", "1", "--access-log"])
            .arg(log)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tern serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("tern serve exited before listening").unwrap();
            if let Some(at) = line.find("listening on http://") {
                let rest = &line[at + "listening on ".len()..];
                break rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())].to_string();
            }
        };
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        Server { child, url }
    }

    /// SIGTERM, then wait for the graceful exit (which flushes the log).
    fn stop(mut self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "tern serve did not exit on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).arg("bench").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn request_counts_agree_with_terns_access_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("1k.html"), vec![b'a'; 1024]).unwrap();
    let log = dir.path().join("access.log");
    let server = Server::start(&root, &log);
    let url = format!("{}1k.html", server.url);

    let runs: [(&[&str], u64); 3] = [
        (&["-n", "1000", "-c", "8", "-t", "2"], 1000),
        (&["-n", "500", "-c", "2", "-t", "1", "--pipeline", "8"], 500),
        (&["-n", "200", "-c", "4", "-t", "2", "--no-keepalive"], 200),
    ];
    let mut total = 0;
    for (args, n) in runs {
        let mut args = args.to_vec();
        args.push(&url);
        let j = bench(&args);
        assert_eq!(j["requests"].as_u64(), Some(n), "{args:?}");
        assert_eq!(j["status"]["200"].as_u64(), Some(n), "{args:?}");
        assert_eq!(j["body_bytes"].as_u64(), Some(n * 1024), "{args:?}");
        total += n;
    }
    server.stop();

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() as u64, total, "access log lines vs requests counted by tern bench");
    let ours =
        lines.iter().filter(|l| l.contains("\"GET /1k.html HTTP/1.1\" 200 1024") && l.contains("tern-bench")).count();
    assert_eq!(ours as u64, total, "every line is one of our GETs, answered 200 with 1024 bytes");
}
