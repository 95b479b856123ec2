//! What FastCGI backends and HTTP upstreams share: where a backend listens
//! (`address.rs`) and its pool of kept-alive connections (`pool.rs`).

pub mod address;
pub mod pool;
