//! Engines decide who runs the connection code and how it waits, never
//! what it does: every engine drives the same `Conn` and site.

pub mod event;
