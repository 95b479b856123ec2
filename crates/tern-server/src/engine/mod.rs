//! Engines decide who runs the connection code and how it waits, never
//! what it does: every engine drives the same `Conn` and site.
//!
//! An engine is handed the server's `Shared` and needs nothing else: it
//! takes each worker's `Worker` from `Shared::worker` (lending its own
//! `Watcher` for backend descriptors) and calls `Conn` with `&Shared` and
//! that `Worker`.

pub mod event;
