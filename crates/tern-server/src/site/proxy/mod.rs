//! The reverse proxy: a location's `proxy` sends its requests to an
//! upstream group (`[upstream.NAME]`) of HTTP/1.1 servers. `config.rs` is
//! the section, `group.rs` a group as it runs (servers, pools, timeouts),
//! `balance.rs` which server, `health.rs` whether a server may be used,
//! `headers.rs` the fields that cross, `exchange.rs` one request's
//! exchange (the upstream's response head read strictly by `tern-http`'s
//! `response_head`). `docs/proxy.md` is the operator's account.

pub mod balance;
pub mod config;
pub mod exchange;
pub mod group;
pub mod headers;
pub mod health;
