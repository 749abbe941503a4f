//! This host's own addresses for `tlsrum live`'s `role` (issue 16): every
//! interface's, read with getifaddrs(3) and read again whenever the kernel
//! announces an address added or removed (an rtnetlink subscription to
//! RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR), plus `--local` extras.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use analyzer::local_nets::LocalNets;
use anyhow::{Context, Result};

/// Every address on every interface of the caller's network namespace.
pub fn interface_addrs() -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its type.
            match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
                libc::AF_INET => {
                    // SAFETY: AF_INET: a sockaddr_in.
                    let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                    out.push(IpAddr::from(
                        u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                    ));
                }
                libc::AF_INET6 => {
                    // SAFETY: AF_INET6: a sockaddr_in6.
                    let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                    out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                }
                _ => {}
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// rtnetlink multicast groups (linux/rtnetlink.h RTMGRP_*).
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;

/// A non-blocking rtnetlink socket subscribed to address changes.
struct AddrEvents(OwnedFd);

impl AddrEvents {
    fn open() -> io::Result<Self> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let sock = Self(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: zeroed sockaddr_nl is valid; fields set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        sa.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
        // SAFETY: sa is a valid sockaddr_nl of the given size.
        let r = unsafe {
            libc::bind(
                sock.0.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sock)
    }

    /// Drains what the kernel sent; true if anything came (a new or
    /// deleted address, or an overrun that lost some: read again anyway).
    fn changed(&self) -> bool {
        let mut buf = [0u8; 8192];
        let mut any = false;
        loop {
            // SAFETY: buf is valid for writes of its length.
            let r =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if r > 0 {
                any = true;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOBUFS) => any = true,
                _ => {}
            }
            return any;
        }
    }
}

/// The host's addresses, kept current: [`HostAddrs::refresh`] reads them
/// again when the subscription says they changed (or, if the subscription
/// could not be opened, at most once a call: the caller calls it about
/// once a second).
pub struct HostAddrs {
    extra: Vec<String>,
    events: Option<AddrEvents>,
    current: LocalNets,
}

impl HostAddrs {
    /// `extra`: `--local ADDR|CIDR` values, checked here.
    pub fn new(extra: &[String]) -> Result<Self> {
        let events = match AddrEvents::open() {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!(
                    "tlsrum: no address-change subscription ({e}); reading addresses every second"
                );
                None
            }
        };
        let mut h = HostAddrs {
            extra: extra.to_vec(),
            events,
            current: LocalNets::default(),
        };
        h.current = h.read()?;
        Ok(h)
    }

    fn read(&self) -> Result<LocalNets> {
        let mut nets = LocalNets::from_addrs(
            interface_addrs().context("reading this host's addresses (getifaddrs)")?,
        );
        for e in &self.extra {
            nets.add(e).map_err(anyhow::Error::msg).context("--local")?;
        }
        Ok(nets)
    }

    pub fn current(&self) -> &LocalNets {
        &self.current
    }

    /// `Some(addresses)` when they changed since the last call.
    pub fn refresh(&mut self, periodic: bool) -> Option<&LocalNets> {
        let due = match &self.events {
            Some(ev) => ev.changed(),
            None => periodic,
        };
        if !due {
            return None;
        }
        match self.read() {
            Ok(nets) if nets != self.current => {
                self.current = nets;
                Some(&self.current)
            }
            Ok(_) => None,
            Err(e) => {
                eprintln!("tlsrum: {e:#}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every namespace has loopback: 127.0.0.1 is among the addresses.
    #[test]
    fn loopback_is_among_the_host_addrs() {
        let addrs = interface_addrs().unwrap();
        assert!(addrs.contains(&"127.0.0.1".parse().unwrap()), "{addrs:?}");
        let h = HostAddrs::new(&["203.0.113.0/24".into()]).unwrap();
        assert!(h.current().contains("127.0.0.1".parse().unwrap()));
        assert!(h.current().contains("203.0.113.9".parse().unwrap()));
        assert!(HostAddrs::new(&["not-an-address".into()]).is_err());
    }
}
