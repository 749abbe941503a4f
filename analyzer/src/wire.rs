//! Packet decode: link layer -> IPv4/IPv6 -> TCP/UDP, through `etherparse`
//! (lax mode, so snaplen-cut packets still yield their headers). Only the
//! link types etherparse lacks (Linux cooked v2, BSD loopback) are peeled
//! here by hand.

use std::net::IpAddr;

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};

/// Link types a capture may carry (pcap LINKTYPE_* values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkType {
    /// LINKTYPE_ETHERNET (1), with 802.1Q / QinQ tags.
    Ethernet,
    /// LINKTYPE_LINUX_SLL (113).
    LinuxSll,
    /// LINKTYPE_LINUX_SLL2 (276).
    LinuxSll2,
    /// LINKTYPE_RAW (101), DLT_RAW (12/14), LINKTYPE_IPV4 (228), LINKTYPE_IPV6 (229).
    RawIp,
    /// LINKTYPE_NULL (0): 4-byte address family in the capturing host's byte order.
    Null,
    /// LINKTYPE_LOOP (108): 4-byte address family in network byte order.
    Loop,
}

impl LinkType {
    /// Maps a pcap link-type number; None for link types tlsrum cannot decode.
    pub fn from_linktype(n: i32) -> Option<Self> {
        Some(match n {
            1 => Self::Ethernet,
            113 => Self::LinuxSll,
            276 => Self::LinuxSll2,
            12 | 14 | 101 | 228 | 229 => Self::RawIp,
            0 => Self::Null,
            108 => Self::Loop,
            _ => return None,
        })
    }
}

/// TCP header fields the analyzer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpHeader {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub syn: bool,
    pub ack_flag: bool,
    pub fin: bool,
    pub rst: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp(TcpHeader),
    Udp { src_port: u16, dst_port: u16 },
}

/// A decoded packet; `payload` borrows from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub transport: Transport,
    pub payload: &'a [u8],
    /// The capture cut the payload short (snaplen): its bytes are not all here.
    pub truncated: bool,
}

/// Why a frame yielded no TCP/UDP packet. Counted by the analyzer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("frame too short for its link header")]
    ShortLink,
    #[error("not IP")]
    NotIp,
    #[error("malformed IP or transport header")]
    Malformed,
    #[error("IP fragment")]
    Fragment,
    #[error("not TCP or UDP")]
    OtherTransport,
}

/// Decodes one frame of the given link type.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let sliced = match link {
        LinkType::Ethernet => LaxSlicedPacket::from_ethernet(frame).map_err(|_| DecodeError::ShortLink)?,
        LinkType::LinuxSll => {
            let proto = frame.get(14..16).ok_or(DecodeError::ShortLink)?;
            let rest = frame.get(16..).ok_or(DecodeError::ShortLink)?;
            LaxSlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([proto[0], proto[1]])), rest)
        }
        LinkType::LinuxSll2 => {
            let proto = frame.get(0..2).ok_or(DecodeError::ShortLink)?;
            let rest = frame.get(20..).ok_or(DecodeError::ShortLink)?;
            LaxSlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([proto[0], proto[1]])), rest)
        }
        LinkType::RawIp => LaxSlicedPacket::from_ip(frame).map_err(|_| DecodeError::Malformed)?,
        // The address family's byte order varies; the IP version nibble does not.
        LinkType::Null | LinkType::Loop => {
            let rest = frame.get(4..).ok_or(DecodeError::ShortLink)?;
            LaxSlicedPacket::from_ip(rest).map_err(|_| DecodeError::Malformed)?
        }
    };
    let (src, dst, ip_payload) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), v4.payload())
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), v6.payload())
        }
        None => return Err(DecodeError::NotIp),
    };
    if ip_payload.fragmented {
        return Err(DecodeError::Fragment);
    }
    let truncated = ip_payload.incomplete;
    match sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => Ok(Packet {
            src,
            dst,
            transport: Transport::Tcp(TcpHeader {
                src_port: tcp.source_port(),
                dst_port: tcp.destination_port(),
                seq: tcp.sequence_number(),
                ack: tcp.acknowledgment_number(),
                syn: tcp.syn(),
                ack_flag: tcp.ack(),
                fin: tcp.fin(),
                rst: tcp.rst(),
            }),
            payload: tcp.payload(),
            truncated,
        }),
        Some(TransportSlice::Udp(udp)) => Ok(Packet {
            src,
            dst,
            transport: Transport::Udp { src_port: udp.source_port(), dst_port: udp.destination_port() },
            payload: udp.payload(),
            truncated,
        }),
        Some(_) => Err(DecodeError::OtherTransport),
        None if sliced.stop_err.is_some() => Err(DecodeError::Malformed),
        None => Err(DecodeError::OtherTransport),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4/TCP 10.0.0.1:40000 -> 10.0.0.2:443, SYN, seq 1, with payload "hi".
    fn ipv4_tcp() -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 42, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let tcp = [0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0];
        ip.extend(tcp);
        ip.extend(b"hi");
        ip
    }

    #[test]
    fn every_link_type() {
        let ip = ipv4_tcp();
        let mut eth = vec![0; 12];
        eth.extend([0x81, 0x00, 0, 5, 0x88, 0xa8, 0, 6, 0x08, 0x00]); // 802.1Q then QinQ-ish
        eth.extend(&ip);
        let mut eth_qinq = vec![0; 12];
        eth_qinq.extend([0x88, 0xa8, 0, 5, 0x81, 0x00, 0, 6, 0x08, 0x00]);
        eth_qinq.extend(&ip);
        let mut sll = vec![0; 14];
        sll.extend([0x08, 0x00]);
        sll.extend(&ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend([0; 18]);
        sll2.extend(&ip);
        let mut null = vec![2, 0, 0, 0];
        null.extend(&ip);
        for (link, frame) in [
            (LinkType::Ethernet, eth_qinq),
            (LinkType::LinuxSll, sll),
            (LinkType::LinuxSll2, sll2),
            (LinkType::RawIp, ip.clone()),
            (LinkType::Null, null.clone()),
            (LinkType::Loop, null),
        ] {
            let p = decode(link, &frame).unwrap_or_else(|e| panic!("{link:?}: {e}"));
            assert_eq!(p.payload, b"hi", "{link:?}");
            assert_eq!(p.src.to_string(), "10.0.0.1");
            let Transport::Tcp(t) = p.transport else { panic!() };
            assert_eq!((t.src_port, t.dst_port, t.seq, t.syn), (40000, 443, 1, true));
        }
        let _ = eth;
    }

    #[test]
    fn snaplen_cut_payload_is_marked() {
        let ip = ipv4_tcp();
        let p = decode(LinkType::RawIp, &ip[..41]).unwrap();
        assert!(p.truncated);
        assert_eq!(p.payload, b"h");
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678u32;
        for len in 0..200 {
            let frame: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2, LinkType::RawIp, LinkType::Null] {
                let _ = decode(link, &frame);
            }
        }
    }
}
