//! `tern agent`, `tern probe --agent` and `tern bench --agent` for real
//! across network namespaces (the tests run as root, as CI does): a master
//! namespace, an agents' namespace and a server's namespace, joined by veth
//! pairs with private test addresses (10.203.x.y) that exist only inside
//! them. Every namespace is deleted when the test ends, passing or failing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const MASTER_IP: &str = "10.203.1.1";
const AGENT_IP: &str = "10.203.1.2";
const AGENT_SIDE_IP: &str = "10.203.2.1";
const SERVER_IP: &str = "10.203.2.2";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2, installed by scripts/test.sh)");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Three namespaces: master —(10.203.1.0/24)— agents —(10.203.2.0/24)— server.
struct Lab {
    master: String,
    agents: String,
    server: String,
    children: Vec<Child>,
}

impl Lab {
    fn new(test: &str) -> Lab {
        let base = format!("tern-h10-{}-{test}", std::process::id());
        let lab = Lab {
            master: format!("{base}-m"),
            agents: format!("{base}-a"),
            server: format!("{base}-s"),
            children: Vec::new(),
        };
        for ns in [&lab.master, &lab.agents, &lab.server] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        for (left, lip, right, rip) in
            [(&lab.master, MASTER_IP, &lab.agents, AGENT_IP), (&lab.agents, AGENT_SIDE_IP, &lab.server, SERVER_IP)]
        {
            // Created inside the namespaces: the names never meet the host's.
            ip(&["-n", left, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", right]);
            ip(&["-n", left, "addr", "add", &format!("{lip}/24"), "dev", "v0"]);
            ip(&["-n", right, "addr", "add", &format!("{rip}/24"), "dev", "v1"]);
            ip(&["-n", left, "link", "set", "v0", "up"]);
            ip(&["-n", right, "link", "set", "v1", "up"]);
        }
        lab
    }

    fn command(ns: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, TERN]);
        cmd
    }

    /// `tern serve ROOT` in the server namespace; its address.
    fn serve(&mut self, root: &Path) -> String {
        let listen = format!("{SERVER_IP}:0");
        let ns = self.server.clone();
        let args = ["serve", root.to_str().unwrap(), "--listen", &listen, "--access-log", "off"];
        self.spawn(&ns, &args, "listening on http://").0
    }

    /// Starts a long-running tern in `ns` and waits for the address it
    /// prints after `marker`.
    fn spawn(&mut self, ns: &str, args: &[&str], marker: &str) -> (String, usize) {
        let mut child = Lab::command(ns)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let marker = marker.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split(&marker).nth(1) {
                    let _ = tx.send(rest.trim_end_matches('/').split('/').next().unwrap().to_string());
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("{args:?} did not start"));
        self.children.push(child);
        (addr, self.children.len() - 1)
    }

    fn agent(&mut self, token: &Path) -> (String, usize) {
        let listen = format!("{AGENT_IP}:0");
        self.spawn(
            &self.agents.clone(),
            &["agent", "--listen", &listen, "--token-file", token.to_str().unwrap()],
            "listening on ",
        )
    }

    /// Runs tern in the master namespace, killed if it takes over `limit`.
    fn master(&self, args: &[&str], limit: Duration) -> (Output, Duration) {
        let started = Instant::now();
        let mut child =
            Lab::command(&self.master).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > limit {
                child.kill().unwrap();
                panic!("tern {args:?} still running after {limit:?}: the master hangs");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (child.wait_with_output().unwrap(), started.elapsed())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.master, &self.agents, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn token_file(dir: &Path, name: &str, token: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn remote_probes_arrive_and_null_rpc_is_subtracted() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "s3cret-for-the-probe-test");
    let mut lab = Lab::new("probe");
    let (agent, _) = lab.agent(&token);
    assert!(agent.starts_with(AGENT_IP), "{agent}");
    let args =
        ["probe", "--agent", &agent, "--token-file", token.to_str().unwrap(), "syscalls", "rpc", "--quick", "--json"];
    let (out, _) = lab.master(&args, Duration::from_secs(120));
    let reports = json(&out);
    let r = &reports.as_array().expect("one report per agent")[0];
    assert_eq!(r["host"], agent.as_str());
    let syscalls = r["suites"].as_array().unwrap().iter().find(|s| s["suite"] == "syscalls").expect("remote syscalls");
    let getppid = syscalls["figures"].as_array().unwrap().iter().find(|f| f["name"] == "getppid").unwrap();
    assert!(getppid["corrected_ns"]["median"].as_f64().unwrap() > 0.0, "{getppid}");
    // The rpc suite was timed from the master over the veth pair, the null
    // call subtracted from each transfer and reported.
    let null = r["rpc_null_ns"].as_f64().expect("null RPC reported");
    assert!(null > 1_000.0, "a null call over the network costs µs: {null} ns");
    let rpc = r["suites"].as_array().unwrap().iter().find(|s| s["suite"] == "rpc").expect("rpc suite");
    let fetch = rpc["figures"].as_array().unwrap().iter().find(|f| f["name"] == "eager fetch 1 MiB").unwrap();
    assert!(fetch["overhead_ns"].as_f64().unwrap() >= null, "null not subtracted: {fetch}");
    assert!(fetch["corrected_ns"]["median"].as_f64().unwrap() > 0.0, "{fetch}");
    assert!(rpc["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("crossover 1 MiB")));
}

#[test]
fn a_wrong_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "the-right-one");
    let wrong = token_file(dir.path(), "wrong", "not-the-right-one");
    let mut lab = Lab::new("token");
    let (agent, _) = lab.agent(&token);
    let args = ["probe", "--agent", &agent, "--token-file", wrong.to_str().unwrap(), "syscalls", "--quick"];
    let (out, _) = lab.master(&args, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("agent {agent}")) && err.contains("refused: wrong token"), "{err}");
    assert!(out.stdout.is_empty(), "no results for a refused master");
}

/// A site for the server namespace.
fn site(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello from the server namespace\n").unwrap();
    root
}

#[test]
fn an_agent_killed_mid_run_is_named_and_the_master_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "kill-test");
    let root = site(dir.path());
    let mut lab = Lab::new("kill");
    let server = lab.serve(&root);
    let (agent, index) = lab.agent(&token);
    let url = format!("http://{server}/index.html");
    let args =
        ["bench", "--agent", &agent, "--token-file", token.to_str().unwrap(), "-c", "2", "-t", "1", "-d", "30s", &url];
    let pid = lab.children[index].id() as i32;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        // SAFETY: killing the agent process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let (out, took) = lab.master(&args, Duration::from_secs(25));
    killer.join().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("agent {agent}: load run:")), "{err}");
    assert!(took < Duration::from_secs(20), "took {took:?} after the agent died");
}

fn decode(b64: &str) -> Histogram<u64> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    Deserializer::new().deserialize(&mut bytes.as_slice()).unwrap()
}

#[test]
fn two_agents_load_a_server_and_their_histograms_merge_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "two-agents");
    let root = site(dir.path());
    let mut lab = Lab::new("two");
    let server = lab.serve(&root);
    let (a, _) = lab.agent(&token);
    let (b, _) = lab.agent(&token);
    let url = format!("http://{server}/index.html");
    let t = token.to_str().unwrap();
    let args =
        ["bench", "--agent", &a, "--agent", &b, "--token-file", t, "-c", "2", "-t", "1", "-d", "2s", "--json", &url];
    let (out, _) = lab.master(&args, Duration::from_secs(60));
    let r = json(&out);
    let agents = r["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0]["agent"], a.as_str());
    assert_eq!(agents[1]["agent"], b.as_str());
    // One histogram fed every sample of both agents.
    let mut every = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    let mut sum = 0;
    for run in agents {
        let report = &run["report"];
        assert!(report["requests"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(report["status"]["200"], report["requests"], "every response a 200");
        let h = decode(report["histograms"]["service"].as_str().unwrap());
        for v in h.iter_recorded() {
            every.record_n(v.value_iterated_to(), v.count_at_value()).unwrap();
        }
        sum += run["requests"].as_u64().unwrap();
    }
    let total = &r["total"];
    assert_eq!(total["requests"].as_u64().unwrap(), sum, "merged count is the sum");
    let lat = &total["latency"];
    assert_eq!(lat["count"].as_u64().unwrap(), every.len());
    for (key, q) in [("p50_us", 0.5), ("p90_us", 0.9), ("p99_us", 0.99), ("p999_us", 0.999)] {
        assert_eq!(lat[key].as_u64().unwrap(), every.value_at_quantile(q), "{key}");
    }
    assert_eq!(lat["max_us"].as_u64().unwrap(), every.max());
    assert_eq!(lat["min_us"].as_u64().unwrap(), every.min());
    let merged = decode(total["histogram"].as_str().unwrap());
    assert_eq!(merged.len(), every.len());
    // Both agents started at the coordinated time and ran concurrently.
    let rate: f64 = agents.iter().map(|x| x["requests_per_s"].as_f64().unwrap()).sum();
    assert!((total["requests_per_s"].as_f64().unwrap() - rate).abs() < 1e-6);
}
