//! tern's performance lab: the tools that measure servers and hosts.
//!
//! [`load`] is the HTTP load generator behind `tern bench`: closed and open
//! loop, request mixes, pipelining, exact mergeable latency histograms. It is
//! what every performance claim of the project is measured with, so it is
//! built to be trusted before it is built to be fast.

pub mod agent;
pub mod dashboard;
pub mod load;
pub mod probe;
pub mod remote;
pub mod store;
