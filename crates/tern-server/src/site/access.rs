//! Access by client address, as nginx's `allow`/`deny`: rules such as
//! `"allow 10.0.0.0/8"`, `"deny 192.168.1.7"`, `"allow 2001:db8::/32"`,
//! `"deny all"`, tried in order; the first that matches decides, and an
//! address no rule matches is allowed.
//!
//! A peer on a dual-stack socket arrives as an IPv4-mapped IPv6 address
//! (`::ffff:10.1.2.3`); it is matched as the IPv4 address it is, so one
//! IPv4 rule covers both kinds of socket. For the same reason a rule may not
//! be written in the mapped form: it would never match.
//!
//! A network written with host bits set (`10.1.2.3/8`) is refused rather
//! than masked (nginx masks it and warns): whether `/8` or the address was
//! meant cannot be told, and in an access list a silent guess is the wrong
//! default.

use std::net::IpAddr;

use ipnet::IpNet;

/// One rule: whether it allows, and the addresses it matches (`None`: all).
struct Rule {
    allow: bool,
    net: Option<IpNet>,
}

/// The rules of a location, in order.
pub struct Access {
    rules: Vec<Rule>,
}

impl Access {
    /// Parses the rules; an error names the first bad one.
    pub fn new<S: AsRef<str>>(rules: &[S]) -> Result<Access, String> {
        let rules = rules.iter().map(|r| parse(r.as_ref())).collect::<Result<_, _>>()?;
        Ok(Access { rules })
    }

    /// Is a client at `peer` let in? Allocates nothing.
    pub fn permits(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.rules.iter().find(|r| r.net.is_none_or(|net| net.contains(&peer))).is_none_or(|r| r.allow)
    }
}

fn parse(rule: &str) -> Result<Rule, String> {
    let bad = |why: &str| format!("access rule `{rule}`: {why}");
    let mut words = rule.split_whitespace();
    let (Some(verb), Some(what), None) = (words.next(), words.next(), words.next()) else {
        return Err(bad("expected `allow ADDRESS` or `deny ADDRESS` (an address, a network, or `all`)"));
    };
    let allow = match verb {
        "allow" => true,
        "deny" => false,
        _ => return Err(bad("expected `allow` or `deny` first")),
    };
    if what == "all" {
        return Ok(Rule { allow, net: None });
    }
    let net = match what.parse::<IpAddr>() {
        Ok(addr) => IpNet::from(addr),
        Err(_) => what.parse::<IpNet>().map_err(|_| bad("not an address, a network (a.b.c.d/n, x::/n) or `all`"))?,
    };
    if net.addr() != net.network() {
        return Err(bad(&format!(
            "host bits are set; write {}/{} for the network or {} for the one address",
            net.network(),
            net.prefix_len(),
            net.addr()
        )));
    }
    if let IpNet::V6(v6) = net {
        if v6.prefix_len() >= 96 && v6.addr().to_ipv4_mapped().is_some() {
            return Err(bad("IPv4-mapped addresses are matched as IPv4: write the rule in IPv4 form"));
        }
    }
    Ok(Rule { allow, net: Some(net) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(rules: &[&str]) -> Access {
        Access::new(rules).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn first_match_wins_and_no_match_allows() {
        let a = access(&["deny 10.1.2.3", "allow 10.0.0.0/8", "allow 2001:db8::/32", "deny all"]);
        assert!(!a.permits(ip("10.1.2.3")));
        assert!(a.permits(ip("10.1.2.4")));
        assert!(a.permits(ip("10.255.255.255")));
        assert!(!a.permits(ip("11.0.0.0")));
        assert!(a.permits(ip("2001:db8:ffff::1")));
        assert!(!a.permits(ip("2001:db9::1")));
        assert!(!a.permits(ip("::1")));

        let open = access(&["deny 192.168.1.7"]);
        assert!(!open.permits(ip("192.168.1.7")));
        assert!(open.permits(ip("192.168.1.8")));
        assert!(open.permits(ip("::1")));
        assert!(access(&[]).permits(ip("1.2.3.4")));
        assert!(access(&["allow all", "deny all"]).permits(ip("1.2.3.4")));
        assert!(!access(&["deny all", "allow all"]).permits(ip("::")));
    }

    #[test]
    fn mapped_peers_are_matched_as_ipv4() {
        let a = access(&["allow 10.0.0.0/8", "deny all"]);
        assert!(a.permits(ip("::ffff:10.9.8.7")));
        assert!(!a.permits(ip("::ffff:11.9.8.7")));
        let d = access(&["deny 127.0.0.1"]);
        assert!(!d.permits(ip("::ffff:127.0.0.1")));
        // Only the mapped form is IPv4; the deprecated compatible form is not.
        assert!(d.permits(ip("::127.0.0.1")));
    }

    #[test]
    fn prefix_lengths_at_the_ends() {
        let everything4 = access(&["deny 0.0.0.0/0"]);
        assert!(!everything4.permits(ip("255.255.255.255")));
        assert!(!everything4.permits(ip("::ffff:1.2.3.4")));
        assert!(everything4.permits(ip("::1")), "an IPv4 network holds no IPv6 address");
        let everything6 = access(&["deny ::/0"]);
        assert!(!everything6.permits(ip("2001:db8::1")));
        assert!(everything6.permits(ip("1.2.3.4")));
        let one4 = access(&["deny 1.2.3.4/32"]);
        assert!(!one4.permits(ip("1.2.3.4")));
        assert!(one4.permits(ip("1.2.3.5")));
        let one6 = access(&["deny 2001:db8::1/128"]);
        assert!(!one6.permits(ip("2001:db8::1")));
        assert!(one6.permits(ip("2001:db8::2")));
        let host6 = access(&["deny 2001:db8::1"]);
        assert!(!host6.permits(ip("2001:db8::1")));
        assert!(host6.permits(ip("2001:db8::2")));
    }

    #[test]
    fn bad_rules_are_named() {
        let err = |r: &str| Access::new(&["allow all", r]).err().unwrap();
        assert_eq!(
            err("allow 10.1.2.3/8"),
            "access rule `allow 10.1.2.3/8`: host bits are set; write 10.0.0.0/8 for the network or 10.1.2.3 for the one address"
        );
        assert!(err("allow 2001:db8::1/32").contains("write 2001:db8::/32"));
        for bad in [
            "",
            "allow",
            "permit 1.2.3.4",
            "Allow 1.2.3.4",
            "allow 1.2.3.4 5.6.7.8",
            "allow 1.2.3",
            "allow 1.2.3.4/33",
            "allow ::/129",
            "allow 10.0.0.0/",
            "deny ALL",
            "deny fe80::1%eth0",
            "allow example.com",
            "allow ::ffff:10.0.0.1",
            "allow ::ffff:10.0.0.0/104",
        ] {
            let e = err(bad);
            assert!(e.starts_with(&format!("access rule `{bad}`: ")), "{bad:?}: {e}");
        }
        assert!(Access::new(&["  deny\t1.2.3.4  "]).is_ok());
    }
}
