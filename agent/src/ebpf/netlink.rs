//! Interfaces by name in the caller's network namespace, and the one
//! rtnetlink job aya does not do: removing a clsact qdisc, and only when
//! no filter is left on it (someone else may have added some after we
//! created it).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, Result};

/// The interface's index in the caller's network namespace (not sysfs,
/// which shows the namespace it was mounted in); None if there is none.
pub fn ifindex(iface: &str) -> Option<u32> {
    let name = std::ffi::CString::new(iface).ok()?;
    // SAFETY: a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// Every network namespace's loopback device has index 1 (LOOPBACK_IFINDEX).
pub(crate) fn is_loopback(iface: &str) -> bool {
    ifindex(iface) == Some(1)
}

const RTM_DELQDISC: u16 = 37;
const RTM_NEWTFILTER: u16 = 44;
const RTM_GETTFILTER: u16 = 46;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const TCA_KIND: u16 = 1;
const TC_H_CLSACT: u32 = 0xffff_fff1;
const TC_H_MIN_INGRESS: u32 = 0xfff2;
const TC_H_MIN_EGRESS: u32 = 0xfff3;
const NLMSG_HDRLEN: usize = 16;
const TCMSG_LEN: usize = 20;

struct Socket(OwnedFd);

impl Socket {
    fn open() -> io::Result<Self> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: msg is valid for its length; the kernel is the peer.
        let r = unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads replies until the ACK (or NLMSG_DONE of a dump); returns
    /// how many messages of type `count_type` came.
    fn replies(&self, count_type: u16) -> io::Result<usize> {
        let mut buf = vec![0u8; 32 * 1024];
        let mut counted = 0;
        loop {
            // SAFETY: buf is valid for writes of its length.
            let r =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut msgs = &buf[..r as usize];
            while msgs.len() >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes(msgs[0..4].try_into().expect("4 bytes")) as usize;
                let ty = u16::from_ne_bytes(msgs[4..6].try_into().expect("2 bytes"));
                if len < NLMSG_HDRLEN || len > msgs.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "bad netlink message",
                    ));
                }
                match ty {
                    NLMSG_ERROR => {
                        let code = msgs
                            .get(16..20)
                            .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                            .unwrap_or(-libc::EINVAL);
                        return if code == 0 {
                            Ok(counted)
                        } else {
                            Err(io::Error::from_raw_os_error(-code))
                        };
                    }
                    NLMSG_DONE => return Ok(counted),
                    t if t == count_type => counted += 1,
                    _ => {}
                }
                msgs = &msgs[(len + 3) & !3..];
                if msgs.len() < NLMSG_HDRLEN {
                    break;
                }
            }
        }
    }
}

fn request(
    ty: u16,
    flags: u16,
    ifindex: i32,
    handle: u32,
    parent: u32,
    kind: Option<&str>,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&0u32.to_ne_bytes()); // length, set below
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid
                                              // struct tcmsg
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    m.extend_from_slice(&ifindex.to_ne_bytes());
    m.extend_from_slice(&handle.to_ne_bytes());
    m.extend_from_slice(&parent.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // tcm_info
    debug_assert_eq!(m.len(), NLMSG_HDRLEN + TCMSG_LEN);
    if let Some(kind) = kind {
        let len = 4 + kind.len() + 1;
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&TCA_KIND.to_ne_bytes());
        m.extend_from_slice(kind.as_bytes());
        m.push(0);
        while m.len() % 4 != 0 {
            m.push(0);
        }
    }
    let total = m.len() as u32;
    m[0..4].copy_from_slice(&total.to_ne_bytes());
    m
}

fn ifindex_of(iface: &str) -> Result<i32> {
    ifindex(iface)
        .map(|i| i as i32)
        .with_context(|| format!("no interface {iface:?}"))
}

/// Filters on the clsact hooks of `iface` (ours already removed).
fn filters(iface: &str) -> Result<usize> {
    let idx = ifindex_of(iface)?;
    let mut n = 0;
    for min in [TC_H_MIN_INGRESS, TC_H_MIN_EGRESS] {
        let sock = Socket::open()?;
        let parent = (TC_H_CLSACT & 0xffff_0000) | min;
        sock.send(&request(
            RTM_GETTFILTER,
            NLM_F_REQUEST | NLM_F_DUMP,
            idx,
            0,
            parent,
            None,
        ))?;
        n += sock.replies(RTM_NEWTFILTER)?;
    }
    Ok(n)
}

pub(crate) fn remove_clsact_if_unused(iface: &str) -> Result<()> {
    let left = filters(iface)?;
    if left > 0 {
        log::info!("keeping the clsact qdisc of {iface}: {left} filters of others are on it");
        return Ok(());
    }
    let sock = Socket::open()?;
    let idx = ifindex_of(iface)?;
    sock.send(&request(
        RTM_DELQDISC,
        NLM_F_REQUEST | NLM_F_ACK,
        idx,
        0xffff_0000,
        TC_H_CLSACT,
        Some("clsact"),
    ))?;
    sock.replies(0).map(|_| ()).context("RTM_DELQDISC")
}
