//! What FastCGI backends and HTTP upstreams share: where a backend listens
//! (`address.rs`), its pool of kept-alive connections (`pool.rs`), a
//! request's hold on one of them (`hold.rs`), and TLS to an HTTPS upstream
//! (`tls.rs`).

pub mod address;
pub mod hold;
pub mod pool;
pub mod tls;
