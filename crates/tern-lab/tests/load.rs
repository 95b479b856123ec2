//! The load generator against a real server: the tiny independent one in
//! `support/`, in this process or (to be stopped with SIGSTOP) in its own.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use base64::Engine;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use support::tiny_server::TinyServer;
use tern_lab::load::{self, LoadError, Options, Plan, Report, RequestSpec, Stop, Url};

fn plan(url: &str) -> Plan {
    Plan::build(&[RequestSpec::new("GET", Url::parse(url).unwrap())], &[], true).unwrap()
}

fn opts(connections: usize, threads: usize, stop: Stop) -> Options {
    Options { connections, threads, stop, ..Options::default() }
}

fn run(plan: &Plan, opts: &Options) -> Report {
    load::run(plan, opts, &AtomicBool::new(false)).unwrap()
}

fn no_errors(r: &Report) {
    assert_eq!(r.errors.total(), 0, "errors: {:?}", r.errors);
}

#[test]
fn request_counts_agree_with_the_server() {
    let server = TinyServer::start();
    let r = run(&plan(&server.url("/count")), &opts(8, 2, Stop::Requests(1000)));
    no_errors(&r);
    assert_eq!(r.requests, 1000);
    assert_eq!(r.successes, 1000);
    assert_eq!(server.requests(), 1000);
    assert_eq!(r.latency.service.count, 1000);
    // Keep-alive: one connection per slot, no more.
    assert_eq!(r.connects, 8);
    assert_eq!(server.connections(), 8);
    assert_eq!(r.body_bytes, 1000 * 100);
}

#[test]
fn latency_percentiles_match_a_known_server_delay() {
    let server = TinyServer::start();
    let r = run(&plan(&server.url("/slow?delay_ms=25")), &opts(4, 2, Stop::Requests(120)));
    no_errors(&r);
    let s = &r.latency.service;
    assert_eq!(s.count, 120);
    // Never faster than the delay; the median within a few ms of it (sleep
    // overshoot and a busy shared machine), the tail not far behind.
    assert!(s.min_us >= 25_000, "min {}us", s.min_us);
    assert!((25_000..30_000).contains(&s.p50_us), "p50 {}us", s.p50_us);
    assert!(s.p99_us < 60_000, "p99 {}us", s.p99_us);
    // 4 connections, 25 ms each: about 160 req/s, never more.
    assert!(r.requests_per_s <= 4.0 * 1000.0 / 25.0, "{} req/s", r.requests_per_s);
    assert!(r.requests_per_s > 100.0, "{} req/s", r.requests_per_s);
}

#[test]
fn pipelined_requests_are_counted_exactly() {
    let server = TinyServer::start();
    let mut o = opts(3, 1, Stop::Requests(1003));
    o.pipeline = 8;
    let r = run(&plan(&server.url("/p")), &o);
    no_errors(&r);
    assert_eq!(r.requests, 1003);
    assert_eq!(server.requests(), 1003);
    assert_eq!(r.connects, 3);
    // The server really found requests queued behind each other.
    assert!(server.pipelined() > 100, "only {} pipelined", server.pipelined());
}

#[test]
fn no_keepalive_opens_a_connection_per_request() {
    let server = TinyServer::start();
    let mut o = opts(4, 2, Stop::Requests(300));
    o.keepalive = false;
    let r = run(&plan(&server.url("/nk")), &o);
    no_errors(&r);
    assert_eq!(r.requests, 300);
    assert_eq!(r.connects, 300);
    assert_eq!(server.requests(), 300);
    assert_eq!(server.connections(), 300);
}

#[test]
fn chunked_bodies_are_parsed_and_counted_exactly() {
    let server = TinyServer::start();
    let r = run(&plan(&server.url("/c?mode=chunked&size=100000&chunk=777")), &opts(2, 1, Stop::Requests(50)));
    no_errors(&r);
    assert_eq!(r.requests, 50);
    assert_eq!(r.body_bytes, 50 * 100_000);
    assert!(r.wire_bytes > r.body_bytes + 50 * 129 * 5, "framing bytes missing: {}", r.wire_bytes);
    assert_eq!(r.connects, 2, "chunked responses keep the connection");
}

#[test]
fn close_delimited_bodies_are_parsed_and_counted_exactly() {
    let server = TinyServer::start();
    let r = run(&plan(&server.url("/d?mode=close&size=12345")), &opts(3, 1, Stop::Requests(100)));
    no_errors(&r);
    assert_eq!(r.requests, 100);
    assert_eq!(r.body_bytes, 100 * 12_345);
    assert_eq!(r.connects, 100, "each close-delimited response ends its connection");
    assert_eq!(server.requests(), 100);
}

#[test]
fn head_responses_have_no_body() {
    let server = TinyServer::start();
    let spec = RequestSpec::new("HEAD", Url::parse(&server.url("/h?size=5000")).unwrap());
    let plan = Plan::build(&[spec], &[], true).unwrap();
    let r = run(&plan, &opts(2, 1, Stop::Requests(40)));
    no_errors(&r);
    assert_eq!((r.requests, r.body_bytes, r.connects), (40, 0, 2));
}

#[test]
fn mixes_hit_each_url_in_proportion() {
    let server = TinyServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.mix");
    std::fs::write(
        &path,
        "# static and dynamic\n70 /static\n20 POST /cgi\n    Content-Type: text/plain\n    @body hello\n10 /other?status=404\n",
    )
    .unwrap();
    let base = Url::parse(&server.url("/")).unwrap();
    let specs = load::plan::parse_mix_file(&path, Some(&base), "GET").unwrap();
    let plan = Plan::build(&specs, &[], true).unwrap();
    let n = 2000;
    let r = run(&plan, &opts(6, 2, Stop::Requests(n)));
    assert_eq!(r.requests, n);
    for (path, share, entry) in [("/static", 0.7, 0), ("/cgi", 0.2, 1), ("/other", 0.1, 2)] {
        let seen = server.path_count(path);
        let expected = share * n as f64;
        assert!((seen as f64 - expected).abs() <= 0.01 * n as f64, "{path}: {seen}, expected {expected}");
        assert_eq!(r.mix[entry].responses, seen, "{path}: generator and server disagree");
    }
    // The 404s are status errors, broken down by code.
    assert_eq!(r.errors.status, server.path_count("/other"));
    assert_eq!(r.status.get(&404).copied(), Some(server.path_count("/other")));
    assert_eq!(r.successes + r.errors.status, n);
}

#[test]
fn timeouts_are_counted_and_bounded() {
    let server = TinyServer::start();
    let mut o = opts(4, 1, Stop::Requests(4));
    o.timeout = Duration::from_millis(200);
    let started = Instant::now();
    let r = run(&plan(&server.url("/t?delay_ms=3000")), &o);
    assert_eq!(r.errors.timeout, 4);
    assert_eq!(r.requests, 0);
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[test]
fn warmup_requests_are_not_measured() {
    let server = TinyServer::start();
    let mut o = opts(2, 1, Stop::Requests(100));
    o.warmup = Duration::from_millis(300);
    let r = run(&plan(&server.url("/w")), &o);
    no_errors(&r);
    assert_eq!(r.requests, 100);
    assert!(server.requests() > 150, "warm-up sent only {}", server.requests() - 100);
}

#[test]
fn open_loop_keeps_its_rate() {
    let server = TinyServer::start();
    let mut o = opts(8, 2, Stop::Duration(Duration::from_secs(1)));
    o.rate = Some(400.0);
    let r = run(&plan(&server.url("/r")), &o);
    no_errors(&r);
    assert!((380..=420).contains(&r.requests), "{} requests at 400/s for 1 s", r.requests);
    let response = r.latency.response.as_ref().expect("open loop has a response histogram");
    assert_eq!(response.count, r.requests);
    assert!(response.p50_us >= r.latency.service.p50_us);
    assert!(r.late.is_some());
}

#[test]
fn open_loop_count_mode_sends_exactly_n_at_the_rate() {
    let server = TinyServer::start();
    let mut o = opts(4, 2, Stop::Requests(200));
    o.rate = Some(1000.0);
    let started = Instant::now();
    let r = run(&plan(&server.url("/rn")), &o);
    no_errors(&r);
    assert_eq!((r.requests, server.requests()), (200, 200));
    // 200 requests at 1000/s take 0.2 s, not less.
    assert!(started.elapsed() >= Duration::from_millis(190), "{:?}", started.elapsed());
}

#[test]
fn an_unreachable_server_is_an_error_not_a_run() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = load::run(&plan(&format!("http://127.0.0.1:{port}/")), &Options::default(), &AtomicBool::new(false))
        .unwrap_err();
    assert!(matches!(err, LoadError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("refused"), "{err}");
}

#[test]
fn timeline_has_one_row_per_request() {
    let server = TinyServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timeline.csv");
    let mut o = opts(3, 2, Stop::Requests(150));
    o.timeline = Some(path.clone());
    let r = run(&plan(&server.url("/tl?size=321")), &o);
    no_errors(&r);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(load::timeline::HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 150);
    let mut last_start = 0.0;
    for row in &rows {
        let (start, end): (f64, f64) = (row[0].parse().unwrap(), row[1].parse().unwrap());
        assert!(end >= start && start >= last_start, "{row:?}");
        last_start = start;
        assert_eq!((row[3], row[4]), ("200", "321"));
        assert!(row[5].parse::<u32>().unwrap() < 3);
    }
}

fn decode(text: &str) -> Histogram<u64> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).unwrap();
    Deserializer::new().deserialize(&mut bytes.as_slice()).unwrap()
}

#[test]
fn json_carries_histograms_that_merge_exactly() {
    let server = TinyServer::start();
    let p = plan(&server.url("/j?delay_ms=2"));
    let a = run(&p, &opts(2, 1, Stop::Requests(60)));
    let b = run(&p, &opts(2, 1, Stop::Requests(40)));
    let json: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
    assert_eq!(json["requests"], 60);
    assert_eq!(json["mode"], "closed");
    assert_eq!(json["histograms"]["encoding"], load::report::HISTOGRAM_ENCODING);
    let ha = decode(json["histograms"]["service"].as_str().unwrap());
    assert_eq!(ha.len(), 60);
    assert_eq!(ha.value_at_quantile(0.99), a.latency.service.p99_us);
    assert_eq!(ha.max(), a.latency.service.max_us);
    // Two machines' results merge into the histogram of all requests.
    let mut merged = ha;
    merged.add(decode(&b.histograms.service)).unwrap();
    assert_eq!(merged.len(), 100);
    assert_eq!(merged.max(), a.latency.service.max_us.max(b.latency.service.max_us));
}

#[test]
fn an_interrupt_ends_the_run_with_what_was_measured() {
    let server = TinyServer::start();
    let interrupt = AtomicBool::new(false);
    let started = Instant::now();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(400));
            interrupt.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        load::run(&plan(&server.url("/i")), &opts(2, 1, Stop::Duration(Duration::from_secs(30))), &interrupt).unwrap()
    });
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(r.run.interrupted);
    assert!(r.requests > 0 && r.requests <= server.requests());
    assert!(r.run.elapsed_s < 3.0);
}

/// The tiny server in a process of its own; killed when dropped.
struct ServerProcess {
    child: Child,
    addr: String,
}

impl ServerProcess {
    fn start() -> ServerProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tiny-http-server"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the tiny server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        ServerProcess { child, addr: line.trim().to_string() }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, signal) }, 0);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-second server stall (SIGSTOP … SIGCONT) during a fixed-rate run is
/// in the open loop's p99, while the closed loop running at the same time
/// against the same server hides it in a handful of samples.
#[test]
fn a_server_stall_shows_in_open_loop_p99_and_hides_in_closed_loop() {
    let server = ServerProcess::start();
    let p = plan(&format!("http://{}/stall", server.addr));
    let mut open = opts(32, 1, Stop::Duration(Duration::from_secs(3)));
    open.rate = Some(500.0);
    let closed = opts(4, 1, Stop::Duration(Duration::from_secs(3)));
    let (open, closed) = std::thread::scope(|s| {
        let o = s.spawn(|| run(&p, &open));
        let c = s.spawn(|| run(&p, &closed));
        std::thread::sleep(Duration::from_millis(1000));
        server.signal(libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(1000));
        server.signal(libc::SIGCONT);
        (o.join().unwrap(), c.join().unwrap())
    });
    no_errors(&open);
    no_errors(&closed);
    let response = open.latency.response.as_ref().unwrap();
    eprintln!(
        "open: p50 {}us p99 {}us max {}us late {:?}; closed: {} requests p50 {}us p99 {}us max {}us",
        response.p50_us,
        response.p99_us,
        response.max_us,
        open.late,
        closed.requests,
        closed.latency.service.p50_us,
        closed.latency.service.p99_us,
        closed.latency.service.max_us
    );
    // About a third of the open loop's requests were due during the stall.
    assert!(response.p99_us >= 500_000, "open-loop p99 {}us hides the stall", response.p99_us);
    assert!(response.p90_us >= 300_000, "open-loop p90 {}us", response.p90_us);
    assert!(open.late.unwrap() > 100, "late: {:?}", open.late);
    assert!((1400..=1600).contains(&open.requests), "open loop sent {} requests, not 3 s × 500/s", open.requests);
    // The closed loop saw the stall (its max) but its p99 does not show it.
    assert!(closed.latency.service.max_us >= 800_000, "closed max {}us", closed.latency.service.max_us);
    assert!(closed.latency.service.p99_us < 100_000, "closed-loop p99 {}us", closed.latency.service.p99_us);
    assert!(closed.latency.service.p99_us * 5 < response.p99_us);
}

/// A server that goes away mid-run: the requests it swallowed are read
/// errors, reconnecting is refused (connect errors, paced by the back-off
/// rather than spinning), and the run still ends on time.
#[test]
fn a_vanishing_server_gives_read_and_connect_errors() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/gone", listener.local_addr().unwrap());
    let mut o = opts(2, 1, Stop::Duration(Duration::from_millis(600)));
    o.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let r = std::thread::scope(|s| {
        s.spawn(move || {
            // Accepts nothing, then closes: queued connections are reset.
            std::thread::sleep(Duration::from_millis(200));
            drop(listener);
        });
        run(&plan(&url), &o)
    });
    assert!(started.elapsed() < Duration::from_millis(1500), "took {:?}", started.elapsed());
    assert_eq!(r.requests, 0);
    assert!(r.errors.read >= 1, "{:?}", r.errors);
    assert!(r.errors.connect >= 10, "{:?}", r.errors);
    assert!(r.errors.connect <= 200, "reconnects are not paced: {:?}", r.errors);
    assert_eq!(r.errors.timeout, 0, "{:?}", r.errors);
}
