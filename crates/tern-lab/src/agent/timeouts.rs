//! How long the master waits for an agent, on both sides of the service.

use std::time::Duration;

/// A connection to an agent not made within this long fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A small call (null, fetch, lazy piece) not answered within this long fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Probes and load runs get their expected length plus this much.
pub const SLACK: Duration = Duration::from_secs(30);
/// HTTP/2 pings on idle connections: an agent that vanished (no reset, host
/// down) is noticed within interval + timeout even during a long call.
pub const KEEPALIVE: Duration = Duration::from_secs(2);
