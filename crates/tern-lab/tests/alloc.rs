//! The hot path allocates nothing per request: a run of ten times the
//! requests makes no more allocations (the server is another process, so
//! every allocation counted here is the generator's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tern_lab::load::{self, Options, Plan, RequestSpec, Stop, Url};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn allocations_do_not_grow_with_the_request_count() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_tiny-http-server")).stdout(Stdio::piped()).spawn().unwrap();
    let mut addr = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut addr).unwrap();
    let url = Url::parse(&format!("http://{}/a?mode=chunked&size=3000&chunk=500", addr.trim())).unwrap();
    let plan = Plan::build(&[RequestSpec::new("GET", url)], &[], true).unwrap();
    let allocations = |requests: u64, pipeline: usize| {
        let opts =
            Options { connections: 4, threads: 2, pipeline, stop: Stop::Requests(requests), ..Options::default() };
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let report = load::run(&plan, &opts, &AtomicBool::new(false)).unwrap();
        assert_eq!(report.requests, requests);
        ALLOCATIONS.load(Ordering::Relaxed) - before
    };
    for pipeline in [1, 4] {
        let small = allocations(300, pipeline);
        let large = allocations(3000, pipeline);
        // The same fixed cost (threads, buffers, histograms, report), give or
        // take a few amortised growths; never one per request.
        assert!(large < small + 50, "pipeline {pipeline}: {small} allocations for 300 requests, {large} for 3000");
    }
    server.kill().unwrap();
    server.wait().unwrap();
}
