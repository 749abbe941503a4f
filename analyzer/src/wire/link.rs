//! Link layers: which link types a capture may carry, and how each is
//! peeled down to a network-layer type and its bytes. The link-type numbers
//! and their framing follow libpcap's LINKTYPE_* list (tcpdump.org
//! linktypes.html) and Wireshark's dissectors of the same names.

use super::wifi;
use super::{be16, DecodeError, ETH_IPV4, ETH_IPV6};

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
    /// LINKTYPE_PPP (9): PPP (RFC 1661), with or without the 0xff 0x03
    /// address and control bytes (RFC 1662), protocol field compressed or not.
    Ppp,
    /// LINKTYPE_PPP_HDLC (50): PPP in HDLC-like framing (RFC 1662), or Cisco
    /// PPP in HDLC framing (RFC 1547 4.3.1: first byte 0x0f or 0x8f).
    PppHdlc,
    /// LINKTYPE_PPP_ETHER (51): a PPPoE session header (RFC 2516), then PPP.
    PppEther,
    /// LINKTYPE_PPP_PPPD (166): PPP in HDLC-like framing whose address
    /// byte is a direction.
    PppPppd,
    /// LINKTYPE_PPP_WITH_DIR (204): a direction byte, then PPP as LINKTYPE_PPP.
    PppWithDir,
    /// LINKTYPE_C_HDLC (104): Cisco HDLC: address, control, Ethernet type.
    CiscoHdlc,
    /// LINKTYPE_C_HDLC_WITH_DIR (205): a direction byte, then Cisco HDLC.
    CiscoHdlcWithDir,
    /// LINKTYPE_ATM_RFC1483 (100): an LLC/SNAP header (RFC 1483), then the packet.
    AtmRfc1483,
    /// LINKTYPE_IEEE802_11 (105): 802.11 frames; data frames (QoS or not,
    /// 3 or 4 addresses) with LLC/SNAP are read, protected ones counted.
    Ieee80211,
    /// LINKTYPE_IEEE802_11_PRISM (119): a Prism (or AVS) header, then 802.11.
    Ieee80211Prism,
    /// LINKTYPE_IEEE802_11_RADIOTAP (127): a radiotap header, then 802.11.
    Ieee80211Radiotap,
    /// LINKTYPE_IEEE802_11_AVS (163): an AVS header, then 802.11.
    Ieee80211Avs,
    /// LINKTYPE_PPI (192): a Per-Packet Information header naming the link
    /// type that follows (802.11 or Ethernet).
    Ppi,
    /// LINKTYPE_NFLOG (239): Linux netfilter log messages (TLVs), the
    /// packet in the payload TLV.
    Nflog,
    /// A link type tlsrum does not read, by its number: its frames are
    /// counted (`unknown_link_frames`), never decoded.
    Unknown(u16),
}

/// Every link type read: number, variant, what it is in plain words. The
/// first number of a variant is the one written back (`--write-pcap`).
const LINK_TYPES: &[(u16, LinkType, &str)] = &[
    (1, LinkType::Ethernet, "Ethernet (VLAN/QinQ, PPPoE, MPLS)"),
    (113, LinkType::LinuxSll, "Linux cooked v1"),
    (276, LinkType::LinuxSll2, "Linux cooked v2"),
    (101, LinkType::RawIp, "raw IP"),
    (12, LinkType::RawIp, "raw IP"),
    (14, LinkType::RawIp, "raw IP"),
    (228, LinkType::RawIp, "raw IPv4"),
    (229, LinkType::RawIp, "raw IPv6"),
    (0, LinkType::Null, "BSD loopback"),
    (108, LinkType::Loop, "OpenBSD loopback"),
    (9, LinkType::Ppp, "PPP"),
    (50, LinkType::PppHdlc, "PPP in HDLC framing"),
    (51, LinkType::PppEther, "PPPoE"),
    (166, LinkType::PppPppd, "PPP (pppd)"),
    (204, LinkType::PppWithDir, "PPP with direction"),
    (104, LinkType::CiscoHdlc, "Cisco HDLC"),
    (205, LinkType::CiscoHdlcWithDir, "Cisco HDLC with direction"),
    (100, LinkType::AtmRfc1483, "ATM LLC/SNAP"),
    // libpcap hands LINKTYPE_ATM_RFC1483 over as its DLT_ATM_RFC1483.
    (11, LinkType::AtmRfc1483, "ATM LLC/SNAP"),
    (105, LinkType::Ieee80211, "802.11"),
    (119, LinkType::Ieee80211Prism, "802.11 with Prism header"),
    (127, LinkType::Ieee80211Radiotap, "802.11 with radiotap"),
    (163, LinkType::Ieee80211Avs, "802.11 with AVS header"),
    (192, LinkType::Ppi, "PPI"),
    (239, LinkType::Nflog, "Linux NFLOG"),
];

impl LinkType {
    /// Maps a pcap link-type number; None for link types tlsrum cannot decode.
    pub fn from_linktype(n: i32) -> Option<Self> {
        LINK_TYPES
            .iter()
            .find(|(num, _, _)| i32::from(*num) == n)
            .map(|(_, l, _)| *l)
    }

    /// The link type for a number, [`LinkType::Unknown`] if tlsrum does
    /// not read it (numbers beyond 16 bits, which pcap does not use, too).
    pub fn from_number(n: i32) -> Self {
        Self::from_linktype(n).unwrap_or(Self::Unknown(u16::try_from(n).unwrap_or(u16::MAX)))
    }

    /// The pcap LINKTYPE_* number frames of this type are written with.
    pub fn number(self) -> u16 {
        if let Self::Unknown(n) = self {
            return n;
        }
        LINK_TYPES
            .iter()
            .find(|(_, l, _)| *l == self)
            .map_or(101, |(n, _, _)| *n)
    }

    /// Every link type read, each once, in the table's order (Ethernet,
    /// Linux cooked v1 and v2, raw IP, BSD loopback, OpenBSD loopback come
    /// first: fuzz seeds index them).
    pub fn all() -> impl Iterator<Item = LinkType> {
        LINK_TYPES
            .iter()
            .enumerate()
            .filter(|(i, (_, l, _))| !LINK_TYPES[..*i].iter().any(|(_, m, _)| m == l))
            .map(|(_, (_, l, _))| *l)
    }

    /// Every link type read, in plain words, for messages (from the one table).
    pub fn supported() -> String {
        let mut names: Vec<&str> = Vec::new();
        for (_, _, name) in LINK_TYPES {
            if !names.contains(name) {
                names.push(name);
            }
        }
        names.join(", ")
    }
}

pub(super) const ETH_VLAN: [u16; 3] = [0x8100, 0x88a8, 0x9100];
pub(super) const ETH_MPLS: [u16; 2] = [0x8847, 0x8848];
pub(super) const ETH_PPPOE_SESSION: u16 = 0x8864;

/// Tags and shims below IP, peeled at most this many times per frame.
const MAX_SHIMS: usize = 8;
/// MPLS labels read before giving up on finding the bottom of the stack.
const MAX_MPLS_LABELS: usize = 16;

/// Peels an Ethernet header, then [`peel_ethertype`].
#[inline]
pub(super) fn peel_ethernet(frame: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let ethertype = be16(frame, 12).ok_or(DecodeError::ShortLink)?;
    let rest = frame.get(14..).ok_or(DecodeError::ShortLink)?;
    peel_ethertype(ethertype, rest)
}

/// Peels 802.1Q/QinQ tags, PPPoE and MPLS down to what they carry: the
/// Ethernet type of what follows (IPv4 or IPv6 when it is IP) and its bytes.
/// Plain IP, most frames, is answered in place, without a call.
#[inline]
pub(super) fn peel_ethertype(ethertype: u16, rest: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    if ethertype == ETH_IPV4 || ethertype == ETH_IPV6 {
        return Ok((ethertype, rest));
    }
    peel_shims(ethertype, rest)
}

fn peel_shims(mut ethertype: u16, mut rest: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    for _ in 0..MAX_SHIMS {
        if ethertype == ETH_IPV4 || ethertype == ETH_IPV6 {
            break;
        }
        if ETH_VLAN.contains(&ethertype) {
            ethertype = be16(rest, 2).ok_or(DecodeError::ShortLink)?;
            rest = rest.get(4..).ok_or(DecodeError::ShortLink)?;
        } else if ethertype == ETH_PPPOE_SESSION {
            (ethertype, rest) = peel_pppoe(rest)?;
        } else if ETH_MPLS.contains(&ethertype) {
            // Labels until bottom-of-stack; the IP version nibble says which IP.
            let mut i = 0;
            loop {
                let bos = rest.get(i + 2).ok_or(DecodeError::ShortLink)? & 1;
                i += 4;
                if bos == 1 || i >= 4 * MAX_MPLS_LABELS {
                    break;
                }
            }
            rest = rest.get(i..).ok_or(DecodeError::ShortLink)?;
            ethertype = match rest.first().map(|b| b >> 4) {
                Some(4) => ETH_IPV4,
                Some(6) => ETH_IPV6,
                _ => return Err(DecodeError::NotIp),
            };
        } else {
            break;
        }
    }
    Ok((ethertype, rest))
}

/// A PPPoE session header (RFC 2516): version/type, code, session, payload
/// length; then PPP. The payload length cuts off what follows it (Ethernet
/// padding), unless the capture holds less.
fn peel_pppoe(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let len = usize::from(be16(b, 4).ok_or(DecodeError::ShortLink)?);
    let payload = b.get(6..).ok_or(DecodeError::ShortLink)?;
    let payload = payload.get(..len).unwrap_or(payload);
    peel_ppp(payload)
}

/// PPP (RFC 1661): the optional 0xff 0x03 address and control bytes (RFC
/// 1662), then the protocol field, one byte when compressed (its low bit
/// set: RFC 1661 6.5) or two.
pub(super) fn peel_ppp(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let b = match b {
        [0xff, 0x03, rest @ ..] => rest,
        _ => b,
    };
    let (proto, rest) = match b {
        [p, rest @ ..] if p & 1 == 1 => (u16::from(*p), rest),
        [hi, lo, rest @ ..] => (u16::from_be_bytes([*hi, *lo]), rest),
        _ => return Err(DecodeError::ShortLink),
    };
    let ethertype = match proto {
        0x0021 => ETH_IPV4,
        0x0057 => ETH_IPV6,
        0x0281 => ETH_MPLS[0],
        0x0283 => ETH_MPLS[1],
        // LCP, IPCP, Van Jacobson compressed TCP, CCP-compressed datagrams...
        _ => return Err(DecodeError::NotIp),
    };
    peel_ethertype(ethertype, rest)
}

/// Cisco HDLC: address (0x0f unicast, 0x8f broadcast), control, then an
/// Ethernet type.
fn peel_cisco_hdlc(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let et = be16(b, 2).ok_or(DecodeError::ShortLink)?;
    peel_ethertype(et, b.get(4..).ok_or(DecodeError::ShortLink)?)
}

/// An 802.2 LLC header with SNAP (0xaa 0xaa 0x03, an OUI, an Ethernet
/// type), as 802.11 and RFC 1483 carry IP. The OUI is 0 (RFC 1042) or
/// 00-00-f8 (802.1H bridge tunnel): either way an Ethernet type follows.
pub(super) fn peel_llc_snap(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    match b {
        [0xaa, 0xaa, 0x03, 0, 0, 0 | 0xf8, hi, lo, rest @ ..] => {
            peel_ethertype(u16::from_be_bytes([*hi, *lo]), rest)
        }
        _ if b.len() < 8 => Err(DecodeError::ShortLink),
        // Another OUI, or LLC without SNAP (STP, IPX, ...).
        _ => Err(DecodeError::NotIp),
    }
}

/// NFLOG TLV types (linux/netfilter/nfnetlink_log.h).
const NFULA_PAYLOAD: u16 = 9;
/// The TLV type bits (without NLA_F_NESTED and NLA_F_NET_BYTEORDER).
const NLA_TYPE_MASK: u16 = 0x3fff;
/// TLVs read before giving up on finding the payload.
const MAX_NFLOG_TLVS: usize = 64;

/// NFLOG: family, version, resource id, then TLVs (length including the
/// 4-byte TLV header, type; both in the capturing host's byte order; each
/// padded to 4 bytes) until the payload TLV, which holds the IP packet.
/// The byte order is the one under which the TLVs walk to the payload.
fn peel_nflog(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let family = *b.first().ok_or(DecodeError::ShortLink)?;
    let tlvs = b.get(4..).ok_or(DecodeError::ShortLink)?;
    let payload = nflog_payload(tlvs, u16::from_le_bytes)
        .or_else(|| nflog_payload(tlvs, u16::from_be_bytes))
        .ok_or(DecodeError::NotIp)?;
    let ethertype = match family {
        2 => ETH_IPV4,  // AF_INET
        10 => ETH_IPV6, // AF_INET6
        _ => ip_version(payload),
    };
    Ok((ethertype, payload))
}

fn nflog_payload(mut b: &[u8], read: fn([u8; 2]) -> u16) -> Option<&[u8]> {
    for _ in 0..MAX_NFLOG_TLVS {
        let len = usize::from(read([*b.first()?, *b.get(1)?]));
        let ty = read([*b.get(2)?, *b.get(3)?]) & NLA_TYPE_MASK;
        if len < 4 {
            return None;
        }
        let value = b.get(4..len)?;
        if ty == NFULA_PAYLOAD {
            return Some(value);
        }
        b = b.get(len.next_multiple_of(4)..)?;
    }
    None
}

/// IPv6 if the version nibble says 6, else IPv4 (the IP layer checks).
pub(super) fn ip_version(b: &[u8]) -> u16 {
    match b.first().map(|v| v >> 4) {
        Some(6) => ETH_IPV6,
        _ => ETH_IPV4,
    }
}

/// The network-layer type and bytes of a frame.
pub(super) fn peel_link(link: LinkType, frame: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let after_dir = || frame.get(1..).ok_or(DecodeError::ShortLink);
    match link {
        LinkType::Ethernet => peel_ethernet(frame),
        LinkType::LinuxSll => {
            let et = be16(frame, 14).ok_or(DecodeError::ShortLink)?;
            peel_ethertype(et, frame.get(16..).ok_or(DecodeError::ShortLink)?)
        }
        LinkType::LinuxSll2 => {
            let et = be16(frame, 0).ok_or(DecodeError::ShortLink)?;
            peel_ethertype(et, frame.get(20..).ok_or(DecodeError::ShortLink)?)
        }
        LinkType::RawIp => Ok((ip_version(frame), frame)),
        // The address family's byte order varies; the IP version nibble does not.
        LinkType::Null | LinkType::Loop => {
            let rest = frame.get(4..).ok_or(DecodeError::ShortLink)?;
            Ok((ip_version(rest), rest))
        }
        LinkType::Ppp => peel_ppp(frame),
        LinkType::PppHdlc => match frame.first() {
            Some(0x0f | 0x8f) => peel_cisco_hdlc(frame),
            _ => peel_ppp(frame),
        },
        LinkType::PppEther => peel_pppoe(frame),
        LinkType::PppPppd => match frame {
            [_dir, 0x03, rest @ ..] => peel_ppp(rest),
            _ => peel_ppp(after_dir()?),
        },
        LinkType::PppWithDir => peel_ppp(after_dir()?),
        LinkType::CiscoHdlc => peel_cisco_hdlc(frame),
        LinkType::CiscoHdlcWithDir => peel_cisco_hdlc(after_dir()?),
        LinkType::AtmRfc1483 => peel_llc_snap(frame),
        LinkType::Ieee80211 => wifi::peel_80211(frame, false),
        LinkType::Ieee80211Prism => wifi::peel_prism(frame),
        LinkType::Ieee80211Radiotap => wifi::peel_radiotap(frame),
        LinkType::Ieee80211Avs => wifi::peel_avs(frame),
        LinkType::Ppi => wifi::peel_ppi(frame),
        LinkType::Nflog => peel_nflog(frame),
        LinkType::Unknown(_) => Err(DecodeError::UnknownLink),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::{assert_hi, ipv4_tcp, ipv6_tcp};
    use crate::wire::{decode, DecodeError};

    fn cat(head: &[u8], ip: &[u8]) -> Vec<u8> {
        let mut f = head.to_vec();
        f.extend(ip);
        f
    }

    /// Every number in the table maps to its link type and back to a
    /// number of the same type; an unknown number stays itself.
    #[test]
    fn link_type_numbers() {
        for (n, link, _) in LINK_TYPES {
            assert_eq!(LinkType::from_linktype(i32::from(*n)), Some(*link));
            let back = LinkType::from_linktype(i32::from(link.number()));
            assert_eq!(back, Some(*link), "{n}");
        }
        assert_eq!(LinkType::from_number(189), LinkType::Unknown(189));
        assert_eq!(LinkType::Unknown(189).number(), 189);
        assert_eq!(LinkType::from_number(1 << 20), LinkType::Unknown(u16::MAX));
        assert_eq!(
            decode(LinkType::Unknown(189), &ipv4_tcp()),
            Err(DecodeError::UnknownLink)
        );
        assert!(LinkType::supported().contains("PPP in HDLC framing"));
        let all: Vec<LinkType> = LinkType::all().collect();
        assert_eq!(
            all[..6],
            [
                LinkType::Ethernet,
                LinkType::LinuxSll,
                LinkType::LinuxSll2,
                LinkType::RawIp,
                LinkType::Null,
                LinkType::Loop
            ]
        );
        assert_eq!(all.len(), 20);
    }

    /// PPP (DLT 9) with and without the address and control bytes, the
    /// protocol field whole or compressed to one byte; IPv4 and IPv6.
    #[test]
    fn ppp_every_framing() {
        for head in [
            &[0xff, 0x03, 0x00, 0x21][..],
            &[0xff, 0x03, 0x21],
            &[0x00, 0x21],
            &[0x21],
        ] {
            assert_hi(LinkType::Ppp, &cat(head, &ipv4_tcp()));
        }
        for head in [&[0xff, 0x03, 0x00, 0x57][..], &[0x57]] {
            assert_hi(LinkType::Ppp, &cat(head, &ipv6_tcp()));
        }
        // LCP and Van Jacobson compressed TCP carry no IP packet.
        for head in [&[0xff, 0x03, 0xc0, 0x21][..], &[0x00, 0x2d], &[0x2f]] {
            assert_eq!(
                decode(LinkType::Ppp, &cat(head, &ipv4_tcp())),
                Err(DecodeError::NotIp)
            );
        }
        assert_eq!(
            decode(LinkType::Ppp, &[0xff, 0x03]),
            Err(DecodeError::ShortLink)
        );
    }

    /// The PPP variants: HDLC framing or Cisco's in DLT 50, PPPoE (51),
    /// pppd's direction byte (166), a direction pseudo-header (204); Cisco
    /// HDLC (104, 205); MPLS over PPP.
    #[test]
    fn ppp_and_hdlc_variants() {
        let ip = ipv4_tcp();
        assert_hi(LinkType::PppHdlc, &cat(&[0xff, 0x03, 0x00, 0x21], &ip));
        assert_hi(LinkType::PppHdlc, &cat(&[0x0f, 0x00, 0x08, 0x00], &ip));
        assert_hi(LinkType::PppHdlc, &cat(&[0x8f, 0x00, 0x08, 0x00], &ip));
        assert_hi(LinkType::CiscoHdlc, &cat(&[0x0f, 0x00, 0x08, 0x00], &ip));
        assert_hi(
            LinkType::CiscoHdlc,
            &cat(&[0x0f, 0x00, 0x86, 0xdd], &ipv6_tcp()),
        );
        assert_hi(
            LinkType::CiscoHdlcWithDir,
            &cat(&[1, 0x0f, 0, 0x08, 0], &ip),
        );
        assert_hi(
            LinkType::PppWithDir,
            &cat(&[0, 0xff, 0x03, 0x00, 0x21], &ip),
        );
        assert_hi(LinkType::PppWithDir, &cat(&[1, 0x00, 0x21], &ip));
        assert_hi(LinkType::PppPppd, &cat(&[1, 0x03, 0x00, 0x21], &ip));
        let mut pppoe = vec![0x11, 0, 0x12, 0x34];
        pppoe.extend((ip.len() as u16 + 2).to_be_bytes());
        pppoe.extend([0x00, 0x21]);
        pppoe.extend(&ip);
        pppoe.extend([0; 6]); // beyond the PPPoE length
        assert_hi(LinkType::PppEther, &pppoe);
        // One MPLS label (bottom of stack), then IPv4.
        assert_hi(LinkType::Ppp, &cat(&[0x02, 0x81, 0, 0x01, 0x01, 0x40], &ip));
        // SLARP keepalives are Cisco HDLC's own, not IP.
        assert_eq!(
            decode(LinkType::CiscoHdlc, &cat(&[0x8f, 0, 0x80, 0x35], &[0; 20])),
            Err(DecodeError::NotIp)
        );
    }

    /// RFC 1483 LLC/SNAP: OUI 0 and the 802.1H bridge-tunnel OUI.
    #[test]
    fn llc_snap() {
        let ip = ipv4_tcp();
        assert_hi(
            LinkType::AtmRfc1483,
            &cat(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00], &ip),
        );
        assert_hi(
            LinkType::AtmRfc1483,
            &cat(&[0xaa, 0xaa, 0x03, 0, 0, 0xf8, 0x08, 0x00], &ip),
        );
        assert_eq!(
            decode(LinkType::AtmRfc1483, &cat(&[0x42, 0x42, 0x03], &ip)),
            Err(DecodeError::NotIp)
        );
    }

    /// An NFLOG message as the kernel sends it: header, then TLVs (prefix,
    /// hardware protocol, ..., payload) in the host's byte order, padded
    /// to 4 bytes; little- and big-endian hosts.
    #[test]
    fn nflog_payload_tlv() {
        for (le, family, ip) in [
            (true, 2u8, ipv4_tcp()),
            (false, 2, ipv4_tcp()),
            (true, 10, ipv6_tcp()),
        ] {
            let tlv = |ty: u16, v: &[u8]| {
                let len = (4 + v.len()) as u16;
                let mut t = Vec::new();
                if le {
                    t.extend(len.to_le_bytes());
                    t.extend(ty.to_le_bytes());
                } else {
                    t.extend(len.to_be_bytes());
                    t.extend(ty.to_be_bytes());
                }
                t.extend(v);
                t.resize(t.len().next_multiple_of(4), 0);
                t
            };
            let mut f = vec![family, 0, 0, 5];
            f.extend(tlv(1, &[0x08, 0x00, 3, 0])); // NFULA_PACKET_HDR
            f.extend(tlv(10, b"tlsrum\0")); // NFULA_PREFIX, padded
            f.extend(tlv(11, &[0; 4])); // NFULA_UID
            f.extend(tlv(9, &ip)); // NFULA_PAYLOAD
            assert_hi(LinkType::Nflog, &f);
        }
        // No payload TLV (a message about a packet it did not copy).
        assert_eq!(
            decode(LinkType::Nflog, &[2, 0, 0, 5, 8, 0, 10, 0, 1, 2, 3, 4]),
            Err(DecodeError::NotIp)
        );
    }
}
