//! Tunnels inside IP: GRE (with ERSPAN mirror sessions and PPTP's PPP),
//! and VXLAN, GENEVE, GTP-U and CAPWAP data over UDP. Each hands its inner
//! frame back to [`decode_net`] one level deeper.

use super::link::{self, ip_version, peel_ethernet, peel_ethertype};
use super::{be16, decode_net, wifi, DecodeError, Packet};

const ETH_BRIDGED: u16 = 0x6558;
/// ERSPAN type II (and type I, which has no ERSPAN header).
const GRE_ERSPAN_2: u16 = 0x88be;
const GRE_ERSPAN_3: u16 = 0x22eb;
/// PPP in enhanced GRE (RFC 2637: PPTP).
const GRE_PPP: u16 = 0x880b;

pub(super) const UDP_VXLAN: u16 = 4789;
pub(super) const UDP_GENEVE: u16 = 6081;
pub(super) const UDP_GTP_U: u16 = 2152;
/// CAPWAP data channel (RFC 5415 15.7); the AC's port, so on one side.
pub(super) const UDP_CAPWAP_DATA: u16 = 5247;

/// True if a UDP datagram between these ports may be a tunnel packet
/// (which [`decode_udp_tunnel`] looks inside).
pub(super) fn maybe_udp_tunnel(src_port: u16, dst_port: u16) -> bool {
    matches!(dst_port, UDP_VXLAN | UDP_GENEVE | UDP_GTP_U)
        || src_port == UDP_CAPWAP_DATA
        || dst_port == UDP_CAPWAP_DATA
}

/// GRE (RFC 2784/2890; version 1 is PPTP's enhanced GRE, RFC 2637):
/// optional checksum, key, sequence and acknowledgement words, then the
/// payload, whose protocol is an Ethernet type.
pub(super) fn decode_gre(b: &[u8], depth: u8) -> Result<Packet<'_>, DecodeError> {
    let flags = be16(b, 0).ok_or(DecodeError::Malformed)?;
    let proto = be16(b, 2).ok_or(DecodeError::Malformed)?;
    let (checksum, routing, key, seq) = (
        flags & 0x8000 != 0,
        flags & 0x4000 != 0,
        flags & 0x2000 != 0,
        flags & 0x1000 != 0,
    );
    let version = flags & 0x0007;
    if routing || version > 1 {
        return Err(DecodeError::Malformed); // RFC 1701 source routes: not in use
    }
    let ack = version == 1 && flags & 0x0080 != 0;
    let words = [checksum, key, seq, ack].iter().filter(|f| **f).count();
    let mut inner = b.get(4 + 4 * words..).ok_or(DecodeError::Malformed)?;
    if version == 1 {
        // The key word holds the payload length (and the call ID).
        let len = usize::from(be16(b, 4).ok_or(DecodeError::Malformed)?);
        inner = inner.get(..len).unwrap_or(inner);
    }
    let (et, net) = match proto {
        ETH_BRIDGED => peel_ethernet(inner)?,
        GRE_PPP => link::peel_ppp(inner)?,
        // Type I has no ERSPAN header and no sequence number.
        GRE_ERSPAN_2 if !seq => peel_ethernet(inner)?,
        GRE_ERSPAN_2 => peel_erspan_2(inner)?,
        GRE_ERSPAN_3 => peel_erspan_3(inner)?,
        _ => peel_ethertype(proto, inner)?,
    };
    decode_net(et, net, depth)
}

/// ERSPAN type II (draft-foschiano-erspan 4.1): version 1, VLAN, CoS,
/// encapsulation, truncation, session ID, index: 8 bytes, then the
/// mirrored Ethernet frame.
fn peel_erspan_2(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    if b.first().map(|v| v >> 4) != Some(1) {
        return Err(DecodeError::Malformed);
    }
    peel_ethernet(b.get(8..).ok_or(DecodeError::Malformed)?)
}

/// ERSPAN type III (draft-foschiano-erspan 4.2): version 2, 12 bytes (with
/// a timestamp and the frame type), then an 8-byte platform-specific
/// subheader when the O bit is set, then the mirrored frame: Ethernet
/// (frame type 0) or IP (frame type 2).
fn peel_erspan_3(b: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    if b.first().map(|v| v >> 4) != Some(2) {
        return Err(DecodeError::Malformed);
    }
    let last = be16(b, 10).ok_or(DecodeError::Malformed)?;
    let frame_type = (last >> 10) & 0x1f;
    let len = if last & 1 != 0 { 20 } else { 12 };
    let frame = b.get(len..).ok_or(DecodeError::Malformed)?;
    match frame_type {
        0 => peel_ethernet(frame),
        2 => Ok((ip_version(frame), frame)),
        _ => Err(DecodeError::NotIp),
    }
}

/// VXLAN, GENEVE, GTP-U and CAPWAP data on their standard ports: None if
/// the payload is not a well-formed tunnel header (then the UDP packet
/// stands), else what the tunnel carries, or why that gives no packet.
pub(super) fn decode_udp_tunnel(
    src_port: u16,
    dst_port: u16,
    b: &[u8],
    depth: u8,
) -> Option<Result<Packet<'_>, DecodeError>> {
    let inner = match dst_port {
        UDP_VXLAN => {
            // Flags byte with the I bit set, then 7 bytes; an Ethernet frame follows.
            if b.first()? & 0x08 == 0 {
                return None;
            }
            peel_ethernet(b.get(8..)?)
        }
        UDP_GENEVE => {
            let opt_len = (b.first()? & 0x3f) as usize * 4;
            let proto = be16(b, 2)?;
            let inner = b.get(8 + opt_len..)?;
            if proto == ETH_BRIDGED {
                peel_ethernet(inner)
            } else {
                peel_ethertype(proto, inner)
            }
        }
        UDP_GTP_U => {
            // GTPv1-U G-PDU: 8 bytes, 4 more if E/S/PN, then extension headers.
            let flags = *b.first()?;
            if flags >> 5 != 1 || *b.get(1)? != 0xff {
                return None;
            }
            let mut at = 8;
            if flags & 0x07 != 0 {
                let mut next_ext = *b.get(11)?;
                at = 12;
                for _ in 0..8 {
                    if next_ext == 0 {
                        break;
                    }
                    let len = *b.get(at)? as usize * 4;
                    if len == 0 {
                        return None;
                    }
                    next_ext = *b.get(at + len - 1)?;
                    at += len;
                }
            }
            let inner = b.get(at..)?;
            Ok((ip_version(inner), inner))
        }
        _ if src_port == UDP_CAPWAP_DATA || dst_port == UDP_CAPWAP_DATA => capwap(b)?,
        _ => return None,
    };
    Some(inner.and_then(|(et, net)| decode_net(et, net, depth)))
}

/// CAPWAP data (RFC 5415 4.3): a preamble (version 0; type 1 is a DTLS
/// record, not decrypted), then a header of HLEN words whose T bit says
/// whether the payload is an 802.3 frame or the binding's native frame
/// (802.11, WBID 1). Fragments and keep-alives carry no whole packet.
fn capwap(b: &[u8]) -> Option<Result<(u16, &[u8]), DecodeError>> {
    let w = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
    let preamble = (w >> 24) as u8;
    if preamble == 0x01 {
        return Some(Err(DecodeError::Encrypted)); // DTLS-protected data channel
    }
    let hlen = ((w >> 19) & 0x1f) as usize * 4;
    let wbid = (w >> 9) & 0x1f;
    let (native, fragment, keep_alive) = (w & 0x100 != 0, w & 0x80 != 0, w & 0x08 != 0);
    if preamble != 0 || hlen < 8 {
        return None;
    }
    let frame = b.get(hlen..)?;
    Some(match (native, wbid) {
        _ if fragment => Err(DecodeError::Fragment),
        _ if keep_alive => Err(DecodeError::NotIp),
        (false, _) => peel_ethernet(frame),
        (true, 1) => wifi::peel_80211(frame, false),
        (true, _) => Err(DecodeError::NotIp),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::{
        assert_hi, ethernet, ipv4_tcp, ipv4_tcp_with_option, ipv6_tcp, outer_ipv4, outer_udp,
    };
    use crate::wire::{decode, LinkType, Transport, ETH_IPV4, ETH_IPV6};

    fn gre(flags: u16, proto: u16, words: &[u32], payload: &[u8]) -> Vec<u8> {
        let mut g = Vec::new();
        g.extend(flags.to_be_bytes());
        g.extend(proto.to_be_bytes());
        for w in words {
            g.extend(w.to_be_bytes());
        }
        g.extend(payload);
        ethernet(ETH_IPV4, &outer_ipv4(47, &g))
    }

    /// GRE without options, with checksum, key and sequence, carrying IPv4,
    /// IPv6, an Ethernet frame (0x6558) or MPLS.
    #[test]
    fn gre_options_and_payloads() {
        let v4 = ipv4_tcp();
        assert_hi(LinkType::Ethernet, &gre(0, 0x0800, &[], &v4));
        assert_hi(LinkType::Ethernet, &gre(0xb000, 0x0800, &[0, 7, 9], &v4));
        assert_hi(LinkType::Ethernet, &gre(0x2000, 0x86dd, &[7], &ipv6_tcp()));
        let mut eth = ethernet(ETH_IPV4, &v4);
        eth.resize(60, 0);
        assert_hi(LinkType::Ethernet, &gre(0, ETH_BRIDGED, &[], &eth));
        let mut mpls = vec![0, 0x01, 0x01, 0x40];
        mpls.extend(&v4);
        assert_hi(LinkType::Ethernet, &gre(0, 0x8847, &[], &mpls));
    }

    /// ERSPAN type I (no header, no sequence number), II (8 bytes) and III
    /// (12 bytes, plus the 8-byte platform subheader when O is set;
    /// Ethernet or IP frames), as switches and the Linux kernel send them.
    #[test]
    fn erspan_types() {
        let mut mirrored = ethernet(0x8100, &[0, 9, 0x08, 0x00]);
        mirrored.extend(ipv4_tcp_with_option());
        mirrored.resize(68, 0);
        assert_hi(LinkType::Ethernet, &gre(0, GRE_ERSPAN_2, &[], &mirrored));

        let mut type2 = vec![0x10, 0x09, 0x00, 0x2a, 0, 0, 0, 3];
        type2.extend(&mirrored);
        assert_hi(LinkType::Ethernet, &gre(0x1000, GRE_ERSPAN_2, &[1], &type2));
        // With a key, as `ip link add ... type erspan key 7 erspan_ver 1` sends.
        assert_hi(
            LinkType::Ethernet,
            &gre(0x3000, GRE_ERSPAN_2, &[7, 1], &type2),
        );

        let type3 = |ft: u16, o: bool, frame: &[u8]| {
            let mut h = vec![0x20, 0x09, 0x00, 0x2a, 0x12, 0x34, 0x56, 0x78, 0, 0];
            h.extend(((ft << 10) | u16::from(o)).to_be_bytes());
            if o {
                h.extend([0x08, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd]);
            }
            h.extend(frame);
            gre(0x1000, GRE_ERSPAN_3, &[1], &h)
        };
        assert_hi(LinkType::Ethernet, &type3(0, false, &mirrored));
        assert_hi(LinkType::Ethernet, &type3(0, true, &mirrored));
        assert_hi(LinkType::Ethernet, &type3(2, false, &ipv6_tcp()));
        assert_eq!(
            decode(LinkType::Ethernet, &type3(5, false, &mirrored)),
            Err(DecodeError::NotIp)
        );
        let mut wrong_version = type2.clone();
        wrong_version[0] = 0x20;
        assert_eq!(
            decode(
                LinkType::Ethernet,
                &gre(0x1000, GRE_ERSPAN_2, &[1], &wrong_version)
            ),
            Err(DecodeError::Malformed)
        );
    }

    /// PPTP's enhanced GRE (version 1): key word = payload length and call
    /// ID, sequence and acknowledgement numbers, then PPP; the payload
    /// length cuts what follows.
    #[test]
    fn pptp_gre_carries_ppp() {
        let mut ppp = vec![0xff, 0x03, 0x00, 0x21];
        ppp.extend(ipv4_tcp_with_option());
        let key = ((ppp.len() as u32) << 16) | 0x0042;
        let mut payload = ppp.clone();
        payload.extend([0x99; 5]);
        assert_hi(
            LinkType::Ethernet,
            &gre(0x3081, GRE_PPP, &[key, 1, 0], &payload),
        );
        // Compressed PPP header, no acknowledgement.
        let mut short = vec![0x21];
        short.extend(ipv4_tcp());
        let key = ((short.len() as u32) << 16) | 0x0042;
        assert_hi(LinkType::Ethernet, &gre(0x3001, GRE_PPP, &[key, 1], &short));
    }

    fn capwap(hlen_words: u32, native: bool, wbid: u32, flags: u32, frame: &[u8]) -> Vec<u8> {
        let w = (hlen_words << 19) | (wbid << 9) | (u32::from(native) << 8) | flags;
        let mut b = w.to_be_bytes().to_vec();
        b.extend([0, 0, 0, 0]); // fragment ID and offset
        b.resize(hlen_words as usize * 4, 0); // radio MAC / wireless info
        b.extend(frame);
        b
    }

    /// CAPWAP data both ways (to and from the AC's port 5247): an 802.3
    /// frame, a native 802.11 frame (with an optional radio MAC address);
    /// DTLS-protected data, fragments and keep-alives counted.
    #[test]
    fn capwap_data() {
        let eth = ethernet(ETH_IPV6, &ipv6_tcp());
        let mut dot11 = vec![0x08, 0x01, 0, 0];
        dot11.extend([
            2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 3, 0x10, 0,
        ]);
        dot11.extend([0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
        dot11.extend(ipv4_tcp());
        for (src, dst) in [(40000, UDP_CAPWAP_DATA), (UDP_CAPWAP_DATA, 40000)] {
            let udp = |b: &[u8]| ethernet(ETH_IPV4, &outer_udp(src, dst, b));
            assert_hi(LinkType::Ethernet, &udp(&capwap(2, false, 1, 0, &eth)));
            assert_hi(LinkType::Ethernet, &udp(&capwap(2, true, 1, 0, &dot11)));
            assert_hi(LinkType::Ethernet, &udp(&capwap(4, true, 1, 0x10, &dot11)));
            let dtls = udp(&[0x01, 0, 0, 0, 0x16, 0xfe, 0xfd, 0, 0]);
            assert_eq!(
                decode(LinkType::Ethernet, &dtls),
                Err(DecodeError::Encrypted)
            );
            let frag = udp(&capwap(2, false, 1, 0x80, &eth));
            assert_eq!(
                decode(LinkType::Ethernet, &frag),
                Err(DecodeError::Fragment)
            );
            let keep_alive = udp(&capwap(2, false, 1, 0x08, &[]));
            assert_eq!(
                decode(LinkType::Ethernet, &keep_alive),
                Err(DecodeError::NotIp)
            );
        }
    }

    /// A datagram on a tunnel's port that is no tunnel packet stays a UDP
    /// datagram (QUIC on 4789 or 5247, say).
    #[test]
    fn not_a_tunnel_stays_udp() {
        let quic = [0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0];
        for (src, dst) in [(40000, UDP_VXLAN), (40000, UDP_CAPWAP_DATA)] {
            let f = outer_udp(src, dst, &quic);
            let p = decode(LinkType::RawIp, &f).unwrap();
            assert!(matches!(p.transport, Transport::Udp { .. }));
            assert_eq!(p.payload, quic);
        }
        let _ = ETH_IPV6;
    }
}
