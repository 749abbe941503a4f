//! This host's addresses, to tell a connection's `role` (DESIGN.md):
//! `inbound` when this host is its TLS server, `outbound` when it is the
//! client, `transit` when neither (a tap or a router). Replay takes them
//! from `--local ADDR|CIDR`; live from the host's interfaces, kept current.

use std::net::{IpAddr, SocketAddr};

use crate::record::Role;

/// Addresses and networks counted as this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalNets {
    nets: Vec<(IpAddr, u8)>,
}

impl LocalNets {
    /// The given addresses, each a host of its own (/32, /128).
    pub fn from_addrs(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut nets: Vec<_> = addrs
            .into_iter()
            .map(|a| (a, if a.is_ipv4() { 32 } else { 128 }))
            .collect();
        nets.sort_unstable();
        nets.dedup();
        LocalNets { nets }
    }

    /// Adds `ADDR` or `ADDR/LEN` (`--local`).
    pub fn add(&mut self, s: &str) -> Result<(), String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| {
                format!("{s:?} is not an address or CIDR (10.0.0.1, 10.0.0.0/8, 2001:db8::/32)")
            })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{s:?}: prefix length must be 0..={max}")),
            },
        };
        self.nets.push((addr, len));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|&(net, len)| in_net(ip, net, len))
    }

    /// The role of a connection from `client` to `server`: a server
    /// address of this host makes it `inbound` (also when both ends are
    /// local: the TLS server is this host's too).
    pub fn role(&self, client: IpAddr, server: IpAddr) -> Role {
        if self.contains(server) {
            Role::Inbound
        } else if self.contains(client) {
            Role::Outbound
        } else {
            Role::Transit
        }
    }

    /// [`role`](Self::role) of a record's `ip:port` endpoints.
    pub fn role_of(&self, client: &str, server: &str) -> Option<Role> {
        let c: SocketAddr = client.parse().ok()?;
        let s: SocketAddr = server.parse().ok()?;
        Some(self.role(c.ip(), s.ip()))
    }
}

fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    fn masked(a: u128, bits: u32, len: u8) -> u128 {
        if len == 0 {
            0
        } else {
            a >> (bits - u32::from(len))
        }
    }
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            masked(u32::from(a).into(), 32, len) == masked(u32::from(n).into(), 32, len)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            masked(u128::from(a), 128, len) == masked(u128::from(n), 128, len)
        }
        // An IPv4-mapped IPv6 address (a dual-stack socket's view) is the
        // IPv4 host.
        (IpAddr::V6(a), IpAddr::V4(_)) => a
            .to_ipv4_mapped()
            .is_some_and(|v4| in_net(IpAddr::V4(v4), net, len)),
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_from_addresses_and_networks() {
        let mut l = LocalNets::default();
        l.add("10.0.0.1").unwrap();
        l.add("2001:db8::/32").unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(l.role(ip("192.0.2.7"), ip("10.0.0.1")), Role::Inbound);
        assert_eq!(l.role(ip("10.0.0.1"), ip("192.0.2.7")), Role::Outbound);
        assert_eq!(l.role(ip("192.0.2.7"), ip("10.0.0.2")), Role::Transit);
        assert_eq!(
            l.role(ip("2001:db8:1::5"), ip("2001:db9::1")),
            Role::Outbound
        );
        assert_eq!(l.role(ip("10.0.0.1"), ip("10.0.0.1")), Role::Inbound);
        assert_eq!(
            l.role(ip("::ffff:10.0.0.1"), ip("192.0.2.7")),
            Role::Outbound
        );
        assert_eq!(
            l.role_of("[2001:db8::9]:443", "198.51.100.1:443"),
            Some(Role::Outbound)
        );
        let mut all = LocalNets::default();
        all.add("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!(!all.contains(ip("::1")));
        for bad in ["10.0.0.1/33", "host", "::/129", "10.0.0.1/x"] {
            assert!(LocalNets::default().add(bad).is_err(), "{bad}");
        }
    }
}
