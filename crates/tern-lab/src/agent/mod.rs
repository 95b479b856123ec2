//! `tern agent`: a gRPC service (tonic; the .proto is compiled by protox in
//! build.rs, no protoc) that runs tern's built-in probes and load on another
//! host, and nothing else.
//!
//! - [`server`]: the agent. Every call must carry the shared token
//!   (`authorization: Bearer TOKEN`); anything else is refused. Given a
//!   certificate pair it speaks TLS only (rustls).
//! - [`client`]: the master's side, synchronous, with a deadline on every
//!   call and errors that name the agent.
//! - [`distributed`]: `tern bench --agent A --agent B`: the same load from
//!   several agents at a coordinated start, histograms merged exactly.
//! - [`access`] (token, CA, the agent to measure against), [`proto`] (the
//!   generated stubs) and [`timeouts`]: what both sides share.
//!
//! The agent runs probe suites, but measuring through agents (the rpc
//! suite, the net suite's remote peer, a probe run for an agent) is above
//! it, in `crate::remote`.
//!
//! tokio lives here, in the lab's control plane only; the server core never
//! sees it.

pub mod access;
pub mod client;
pub mod distributed;
pub mod proto;
pub mod server;
pub mod timeouts;
