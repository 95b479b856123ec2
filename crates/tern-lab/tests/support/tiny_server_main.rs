//! The tiny test server as its own process, so a test can SIGSTOP it to
//! simulate a server stall. Prints its address on stdout, serves forever.

#[path = "tiny_server.rs"]
mod tiny_server;

use std::io::Write;

fn main() {
    let server = tiny_server::TinyServer::start();
    let mut out = std::io::stdout();
    writeln!(out, "{}", server.addr).expect("stdout");
    out.flush().expect("stdout");
    loop {
        std::thread::park();
    }
}
