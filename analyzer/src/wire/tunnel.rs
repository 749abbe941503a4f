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
