//! `tern agent`, `tern probe --agent` and `tern bench --agent` for real
//! across network namespaces (the tests run as root, as CI does): a master
//! namespace, two agents' namespaces and a server's namespace, joined by veth
//! pairs with private test addresses (10.203.x.y) that exist only inside
//! them. Every namespace is deleted when the test ends, passing or failing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
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
const MASTER_TO_B_IP: &str = "10.203.3.1";
const AGENT_B_IP: &str = "10.203.3.2";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2, installed by scripts/test.sh)");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Four namespaces: master —(10.203.1.0/24)— agents —(10.203.2.0/24)— server,
/// and master —(10.203.3.0/24)— agents_b, a second agent host.
struct Lab {
    master: String,
    agents: String,
    server: String,
    agents_b: String,
    children: Vec<Child>,
}

impl Lab {
    fn new(test: &str) -> Lab {
        let base = format!("tern-h10-{}-{test}", std::process::id());
        let lab = Lab {
            master: format!("{base}-m"),
            agents: format!("{base}-a"),
            server: format!("{base}-s"),
            agents_b: format!("{base}-b"),
            children: Vec::new(),
        };
        for ns in lab.namespaces() {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let pairs = [
            (&lab.master, MASTER_IP, &lab.agents, AGENT_IP),
            (&lab.agents, AGENT_SIDE_IP, &lab.server, SERVER_IP),
            (&lab.master, MASTER_TO_B_IP, &lab.agents_b, AGENT_B_IP),
        ];
        for (i, (left, lip, right, rip)) in pairs.into_iter().enumerate() {
            // Created inside the namespaces: the names never meet the host's.
            let (l, r) = (format!("l{i}"), format!("r{i}"));
            ip(&["-n", left, "link", "add", &l, "type", "veth", "peer", "name", &r, "netns", right]);
            ip(&["-n", left, "addr", "add", &format!("{lip}/24"), "dev", &l]);
            ip(&["-n", right, "addr", "add", &format!("{rip}/24"), "dev", &r]);
            ip(&["-n", left, "link", "set", &l, "up"]);
            ip(&["-n", right, "link", "set", &r, "up"]);
        }
        lab
    }

    fn namespaces(&self) -> [&String; 4] {
        [&self.master, &self.agents, &self.server, &self.agents_b]
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
        self.agent_at(&self.agents.clone(), AGENT_IP, token, &[])
    }

    /// `tern agent` on `ip` in `ns`, with `extra` arguments.
    fn agent_at(&mut self, ns: &str, ip: &str, token: &Path, extra: &[&str]) -> (String, usize) {
        let listen = format!("{ip}:0");
        let mut args = vec!["agent", "--listen", &listen, "--token-file", token.to_str().unwrap()];
        args.extend(extra);
        let (addr, index) = self.spawn(ns, &args, "listening on ");
        (addr.split(' ').next().unwrap().to_string(), index)
    }

    /// Whether something in the master namespace can open a TCP connection
    /// to `addr` (bash's /dev/tcp: refused at once when nothing listens).
    fn reachable(&self, addr: &str) -> bool {
        let (host, port) = addr.rsplit_once(':').unwrap();
        let probe = format!("exec 3<>/dev/tcp/{host}/{port}");
        let status = Command::new("ip")
            .args(["netns", "exec", &self.master, "timeout", "10", "bash", "-c", &probe])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        status.success()
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
        for ns in self.namespaces() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
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
fn site(dir: &Path) -> PathBuf {
    let root = dir.join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello from the server namespace\n").unwrap();
    root
}

/// Two agents load the server; one is killed mid-run: the master fails at
/// once, naming that one, while the other's run would still go on.
#[test]
fn an_agent_killed_mid_run_is_named_and_the_master_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "kill-test");
    let root = site(dir.path());
    let mut lab = Lab::new("kill");
    let server = lab.serve(&root);
    let (alive, _) = lab.agent(&token);
    let (killed, index) = lab.agent(&token);
    let url = format!("http://{server}/index.html");
    let t = token.to_str().unwrap();
    let args =
        ["bench", "--agent", &alive, "--agent", &killed, "--token-file", t, "-c", "2", "-t", "1", "-d", "30s", &url];
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
    assert!(err.contains(&format!("agent {killed}: load run:")), "{err}");
    assert!(!err.contains(&format!("agent {alive}:")), "the living agent is not blamed: {err}");
    assert!(took < Duration::from_secs(20), "took {took:?} after the agent died");
}

/// `tern probe --agent A --agent B`: two hosts (agents in two namespaces)
/// side by side in one table; with B killed, B is named, A still reported.
#[test]
fn two_agent_hosts_side_by_side_and_a_dead_one_named() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "side-by-side");
    let t = token.to_str().unwrap();
    let mut lab = Lab::new("side");
    let (a, _) = lab.agent(&token);
    let agents_b = lab.agents_b.clone();
    let (b, b_index) = lab.agent_at(&agents_b, AGENT_B_IP, &token, &[]);
    assert!(b.starts_with(AGENT_B_IP), "{b}");
    let args = ["probe", "--agent", &a, "--agent", &b, "--token-file", t, "syscalls", "--quick"];
    let (out, _) = lab.master(&args, Duration::from_secs(120));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // The side-by-side table: a header with both hosts, a value under each.
    let header = text.lines().find(|l| l.contains("figure") && l.contains(&a) && l.contains(&b));
    assert!(header.is_some(), "no side-by-side header for {a} and {b}:\n{text}");
    let getppid = text.lines().rfind(|l| l.trim_start().starts_with("getppid ")).unwrap();
    let cells: Vec<f64> = getppid.split_whitespace().filter_map(|w| w.replace(',', "").parse().ok()).collect();
    assert_eq!(cells.len(), 2, "one value per host: {getppid}");
    assert!(cells.iter().all(|&v| v > 0.0), "{getppid}");

    let pid = lab.children[b_index].id() as i32;
    // SAFETY: killing the agent process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = lab.children[b_index].wait();
    let args = ["probe", "--agent", &a, "--agent", &b, "--token-file", t, "syscalls", "--quick", "--json"];
    let (out, _) = lab.master(&args, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 of 2 agents failed") && err.contains(&format!("agent {b}: cannot connect")), "{err}");
    let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hosts: Vec<_> = reports.as_array().unwrap().iter().map(|r| r["host"].as_str().unwrap()).collect();
    assert_eq!(hosts, [a.as_str()], "the living agent's report still printed");
}

/// `tern probe --agent A net`: measured from the master across the veth
/// pair against a peer the agent starts on its own address; the peer is
/// gone once the run ends.
#[test]
fn net_against_an_agent_crosses_the_link_and_its_peer_stops_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "net-peer");
    let mut lab = Lab::new("net");
    let (agent, _) = lab.agent(&token);
    let args = ["probe", "--agent", &agent, "--token-file", token.to_str().unwrap(), "net", "--quick", "--json"];
    let (out, _) = lab.master(&args, Duration::from_secs(120));
    let r = &json(&out)[0];
    assert_eq!(r["host"], agent.as_str());
    let net = r["suites"].as_array().unwrap().iter().find(|s| s["suite"] == "net").expect("net suite");
    let figures = net["figures"].as_array().unwrap();
    assert!(figures.len() >= 6, "{net}");
    for f in figures {
        assert!(f["corrected_ns"]["median"].as_f64().unwrap() > 0.0, "{f}");
    }
    // The peer listened on the agent's address, not on loopback.
    let note = net["notes"][0].as_str().unwrap();
    let prefix = format!("from this host to a peer on agent {agent}: TCP echo ");
    let echo = note.strip_prefix(&prefix).unwrap_or_else(|| panic!("{note}")).split(',').next().unwrap();
    assert!(echo.starts_with(&format!("{AGENT_IP}:")), "{note}");
    // The agent stops its peer when the master's call ends.
    let deadline = Instant::now() + Duration::from_secs(20);
    while lab.reachable(echo) {
        assert!(Instant::now() < deadline, "the peer at {echo} still accepts after the run");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The agent itself still serves.
    assert!(lab.reachable(&agent));
}

/// A CA called `ca_name` and a certificate for `ip` signed by it (PEM):
/// (ca, cert, key).
fn certificates(ca_name: &str, ip: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![ip.to_string()]).unwrap().signed_by(&key, &Issuer::new(ca, ca_key)).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// An agent with a certificate pair speaks TLS only: a master with the CA
/// that signed it works (token still checked); one with another CA, or
/// without TLS, is refused with an error naming the agent and the reason.
#[test]
fn agent_tls_right_ca_works_wrong_ca_and_plaintext_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "token", "tls-token");
    let wrong_token = token_file(dir.path(), "wrong", "not-it");
    let (ca, cert, key) = certificates("tern test CA", AGENT_IP);
    let (other_ca, _, _) = certificates("another CA", AGENT_IP);
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (ca, other_ca, cert, key) =
        (write("ca.pem", &ca), write("other.pem", &other_ca), write("a.pem", &cert), write("a.key", &key));
    let mut lab = Lab::new("tls");
    let agents = lab.agents.clone();
    let (agent, _) = lab.agent_at(&agents, AGENT_IP, &token, &["--tls-cert", &cert, "--tls-key", &key]);
    let t = token.to_str().unwrap();
    let probe = |token: &str, ca: Option<&str>| {
        let mut args = vec!["probe", "--agent", &agent, "--token-file", token, "rpc", "--quick", "--json"];
        if let Some(ca) = ca {
            args.extend(["--agent-ca", ca]);
        }
        lab.master(&args, Duration::from_secs(120)).0
    };

    let out = probe(t, Some(&ca));
    let r = &json(&out)[0];
    assert_eq!(r["host"], agent.as_str());
    assert!(r["rpc_null_ns"].as_f64().unwrap() > 0.0, "{r}");

    let refused = |out: Output, why: &str| {
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("agent {agent}: ")) && err.contains(why), "expected {why:?}: {err}");
        assert!(out.stdout.is_empty(), "no results: {}", String::from_utf8_lossy(&out.stdout));
    };
    refused(probe(t, Some(&other_ca)), "invalid peer certificate: UnknownIssuer");
    refused(probe(t, None), "if the agent uses TLS, give --agent-ca");
    refused(probe(wrong_token.to_str().unwrap(), Some(&ca)), "refused: wrong token");
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
