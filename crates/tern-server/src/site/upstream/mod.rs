//! What FastCGI backends and HTTP upstreams share: where a backend listens
//! (`address.rs`), its pool of kept-alive connections (`pool.rs`), and TLS
//! to an HTTPS upstream (`tls.rs`).

pub mod address;
pub mod pool;
pub mod tls;
