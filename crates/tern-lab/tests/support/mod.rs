//! Test support: servers the generator is measured against.

pub mod tiny_server;
