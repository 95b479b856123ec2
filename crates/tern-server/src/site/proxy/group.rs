//! An upstream group as the server runs it: its servers (each with its
//! pool, health and requests in flight), how one is chosen, the timeouts
//! and the retry budget.

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_http::Request;

use super::balance::Balancer;
use super::config::{Balance, Upstream};
use super::health::{Checker, Health};
use crate::site::upstream::address::Address;
use crate::site::upstream::pool::{Pool, Pools};
use crate::site::upstream::tls;
use crate::values::Network;

/// One server of a group.
pub struct Server {
    pub address: Address,
    pub pool: Arc<Pool>,
    pub health: Arc<Health>,
    /// For an HTTPS server: how its sessions start.
    pub tls: Option<tls::Client>,
}

/// The key of `balance = "hash"`.
enum HashKey {
    Client,
    Uri,
    Header(String),
}

/// The timeouts of an exchange.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub queue: Duration,
    pub connect: Duration,
    pub send: Duration,
    pub read: Duration,
    /// `None`: no limit.
    pub total: Option<Duration>,
}

pub struct Group {
    pub name: String,
    pub servers: Vec<Server>,
    balancer: Balancer,
    /// With `balance = "hash"`: its key.
    hash: Option<HashKey>,
    pub timeouts: Timeouts,
    pub retries: usize,
    pub retry_within: Duration,
    pub trusted: Vec<Network>,
    /// The active check's thread, stopped with the group.
    _checker: Option<Checker>,
}

impl Group {
    /// Builds group `name`, its pools taken from `pools`.
    pub fn new(name: &str, c: &Upstream, pools: &mut Pools) -> std::io::Result<Group> {
        let mut servers = Vec::with_capacity(c.servers.len());
        for (i, s) in c.servers.iter().enumerate() {
            let tls = match (s.tls, &s.address) {
                (false, _) => None,
                (true, Address::Tcp(addr)) => {
                    let name = s.tls_name.clone().unwrap_or_else(|| addr.ip().to_string());
                    let client = tls::Client::new(&name, s.ca.as_deref(), s.verify);
                    Some(client.map_err(|e| std::io::Error::other(format!("upstream {name}: {e}")))?)
                }
                (true, Address::Unix(_)) => None,
            };
            let (key, cap) = (format!("upstream {name}/{i}"), s.max_connections.0);
            // TLS sessions verified under a replaced server's settings are
            // not taken over by a reload.
            let pool =
                if tls.is_some() { pools.get_new(key, &s.address, cap) } else { pools.get(key, &s.address, cap) };
            servers.push(Server {
                address: s.address.clone(),
                pool,
                health: Arc::new(Health::new(c.fail_after.0, c.fail_window.0, c.down_for.0)),
                tls,
            });
        }
        let weights: Vec<usize> = c.servers.iter().map(|s| s.weight.0).collect();
        let labels: Vec<String> = servers.iter().map(|s| s.address.to_string()).collect();
        let checker = match &c.check {
            Some(check) => {
                let watched = servers.iter().map(|s| (s.address.clone(), s.health.clone())).collect();
                Some(Checker::start(name.to_string(), check.clone(), watched)?)
            }
            None => None,
        };
        let hash = match c.hash.as_str() {
            "uri" => HashKey::Uri,
            "client" => HashKey::Client,
            header => HashKey::Header(header.trim_start_matches("header:").to_string()),
        };
        Ok(Group {
            name: name.to_string(),
            servers,
            balancer: Balancer::new(c.balance, &weights, &labels),
            hash: (c.balance == Balance::Hash).then_some(hash),
            timeouts: Timeouts {
                queue: c.queue_timeout.0,
                connect: c.connect_timeout.0,
                send: c.send_timeout.0,
                read: c.read_timeout.0,
                total: (!c.total_timeout.0.is_zero()).then_some(c.total_timeout.0),
            },
            retries: c.retries,
            retry_within: c.retry_within.0,
            trusted: c.trusted_proxies.clone(),
            _checker: checker,
        })
    }

    /// The server for `req` from `peer`, passing over those marked down
    /// and those in `tried`; `None`: none is left.
    pub fn choose(&self, req: &Request<'_>, peer: IpAddr, tried: &[usize], now: Instant) -> Option<usize> {
        let octets = match peer {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let key: &[u8] = match &self.hash {
            None => b"",
            Some(HashKey::Client) => &octets,
            Some(HashKey::Uri) => req.target.as_bytes(),
            Some(HashKey::Header(name)) => req.values(name).next().unwrap_or_default(),
        };
        let active = |i: usize| self.servers[i].pool.in_flight.load(Relaxed);
        let pick = self.balancer.pick(key, active, |i| !tried.contains(&i) && self.servers[i].health.usable(now));
        // Every server down: the one that failed longest ago is tried
        // rather than none (a group that is all down answers nothing).
        pick.or_else(|| (0..self.servers.len()).find(|i| !tried.contains(i)).filter(|_| tried.is_empty()))
    }
}
