//! The PROXY protocol header (HAProxy's spec, versions 1 and 2) that load
//! balancers (HAProxy `send-proxy`, nginx `proxy_protocol on`, cloud load
//! balancers) put in front of the bytes they forward to a backend: it names
//! the original client. A TLS backend's capture shows it just before the
//! ClientHello.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::flow::table::Endpoint;

/// Version 2's 12-byte signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A version 1 line is at most 107 bytes, CRLF included.
const V1_MAX: usize = 107;

/// What the start of a stream holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// No PROXY header starts here.
    None,
    /// A header starts here but is cut short (it goes on in a later
    /// segment) or is malformed.
    Bad,
    /// A whole header of `len` bytes; `client` is the original source it
    /// names (None for `UNKNOWN`, `LOCAL` and non-IP families).
    Read {
        len: usize,
        client: Option<Endpoint>,
    },
}

/// Reads a PROXY header at the start of `b`.
pub fn parse(b: &[u8]) -> Header {
    if b.starts_with(b"PROXY ") {
        v1(b)
    } else if b.starts_with(V2_SIGNATURE) {
        v2(b)
    } else {
        Header::None
    }
}

/// `PROXY TCP4|TCP6|UNKNOWN <src> <dst> <sport> <dport>\r\n`.
fn v1(b: &[u8]) -> Header {
    let Some(end) = b[..b.len().min(V1_MAX)]
        .windows(2)
        .position(|w| w == b"\r\n")
    else {
        return Header::Bad;
    };
    let Ok(line) = std::str::from_utf8(&b[6..end]) else {
        return Header::Bad;
    };
    let len = end + 2;
    let mut f = line.split(' ');
    let client = match f.next() {
        Some("UNKNOWN") => None,
        Some(proto @ ("TCP4" | "TCP6")) => {
            let (Some(src), Some(_dst), Some(sport), Some(_dport), None) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                return Header::Bad;
            };
            let ip: Option<IpAddr> = if proto == "TCP4" {
                src.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
            } else {
                src.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
            };
            match (ip, sport.parse::<u16>()) {
                (Some(ip), Ok(port)) => Some((ip, port)),
                _ => return Header::Bad,
            }
        }
        _ => return Header::Bad,
    };
    Header::Read { len, client }
}

/// Signature, version/command, family/protocol, length, addresses, TLVs.
fn v2(b: &[u8]) -> Header {
    let Some(&[ver_cmd, fam, hi, lo]) = b.get(12..16) else {
        return Header::Bad;
    };
    if ver_cmd >> 4 != 2 {
        return Header::Bad;
    }
    let len = 16 + usize::from(u16::from_be_bytes([hi, lo]));
    let Some(body) = b.get(16..len) else {
        return Header::Bad;
    };
    // Command 1 (PROXY) over TCP names a client; LOCAL (0) and other
    // families are read and skipped.
    let client = match (ver_cmd & 0x0f, fam) {
        (1, 0x11) if body.len() >= 12 => {
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            Some((IpAddr::V4(ip), u16::from_be_bytes([body[8], body[9]])))
        }
        (1, 0x21) if body.len() >= 36 => {
            let mut a = [0; 16];
            a.copy_from_slice(&body[..16]);
            Some((
                IpAddr::V6(Ipv6Addr::from(a)),
                u16::from_be_bytes([body[32], body[33]]),
            ))
        }
        (0 | 1, _) => None,
        _ => return Header::Bad,
    };
    Header::Read { len, client }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1() {
        let h = b"PROXY TCP4 198.51.100.7 192.0.2.1 56324 443\r\n\x16\x03\x01";
        assert_eq!(
            parse(h),
            Header::Read {
                len: h.len() - 3,
                client: Some(("198.51.100.7".parse().unwrap(), 56324))
            }
        );
        let h = b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 443\r\n";
        assert_eq!(
            parse(h),
            Header::Read {
                len: h.len(),
                client: Some(("2001:db8::7".parse().unwrap(), 4000))
            }
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Header::Read {
                len: 15,
                client: None
            }
        );
        assert_eq!(
            parse(b"PROXY TCP4 198.51.100.7 192.0.2.1 56324"),
            Header::Bad,
            "cut short"
        );
        assert_eq!(
            parse(b"PROXY TCP4 300.1.1.1 192.0.2.1 1 2\r\n"),
            Header::Bad
        );
        assert_eq!(
            parse(b"PROXY TCP4 1.1.1.1 192.0.2.1 1 2 3\r\n"),
            Header::Bad
        );
        assert_eq!(parse(b"\x16\x03\x01\x02\x00"), Header::None);
    }

    #[test]
    fn version_2() {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([0x21, 0x11, 0, 12 + 7]);
        h.extend([198, 51, 100, 7, 192, 0, 2, 1]);
        h.extend(56324u16.to_be_bytes());
        h.extend(443u16.to_be_bytes());
        h.extend([0x04, 0, 4, 1, 2, 3, 4]); // a TLV (PP2_TYPE_NOOP), skipped
        let len = h.len();
        h.extend([0x16, 3, 1]);
        assert_eq!(
            parse(&h),
            Header::Read {
                len,
                client: Some(("198.51.100.7".parse().unwrap(), 56324))
            }
        );
        assert_eq!(parse(&h[..len - 1]), Header::Bad, "cut short");
        let mut local = V2_SIGNATURE.to_vec();
        local.extend([0x20, 0x00, 0, 0]);
        assert_eq!(
            parse(&local),
            Header::Read {
                len: 16,
                client: None
            }
        );
        let mut v3 = V2_SIGNATURE.to_vec();
        v3.extend([0x31, 0x11, 0, 0]);
        assert_eq!(parse(&v3), Header::Bad);
    }

    #[test]
    fn garbage_never_panics() {
        let mut b = V2_SIGNATURE.to_vec();
        for n in 0..64u8 {
            b.push(n.wrapping_mul(37));
            let _ = parse(&b);
            let mut v1 = b"PROXY ".to_vec();
            v1.extend(&b);
            let _ = parse(&v1);
        }
    }
}
