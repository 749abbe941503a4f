//! Packet decode: link layer -> tunnels -> IPv4/IPv6 -> TCP/UDP. The IP
//! and transport headers go through `etherparse` (lax mode, so
//! snaplen-cut packets still yield their headers); link layers
//! ([`link`], [`wifi`]) and tunnels ([`tunnel`]) are peeled here by hand.
//!
//! The innermost declared length wins: a PPPoE payload length, an IP total
//! length, a UDP length each cut off what follows them (Ethernet padding,
//! trailers, an FCS), so such bytes never become TCP payload.

mod link;
mod tunnel;
mod wifi;

use std::net::IpAddr;

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};

pub use link::LinkType;

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
    /// The segment also carried bytes that reached the analyzer before (a
    /// retransmission), left out of `payload`. Only the eBPF source sets
    /// it: the kernel forwards each stream byte once, and says so; from a
    /// capture the analyzer sees the copies itself.
    pub seen_before: bool,
}

impl Packet<'_> {
    /// A hash of the connection this packet belongs to, the same for both
    /// directions: the two endpoints are XORed, so no order is needed.
    /// TCP and UDP alike (a QUIC connection's every connection ID travels
    /// on one address pair until it migrates). Sharded replay picks a
    /// shard by it, on its one reading thread: sorting the two endpoints
    /// and hashing the pair cost ~57 instructions a frame, this ~20.
    pub fn connection_hash(&self) -> u64 {
        fn bits(ip: IpAddr) -> u64 {
            match ip {
                IpAddr::V4(a) => u64::from(u32::from(a)),
                IpAddr::V6(a) => {
                    let x = u128::from(a);
                    (x >> 64) as u64 ^ x as u64
                }
            }
        }
        let (sp, dp) = match self.transport {
            Transport::Tcp(h) => (h.src_port, h.dst_port),
            Transport::Udp { src_port, dst_port } => (src_port, dst_port),
        };
        let mut k = (bits(self.src) ^ bits(self.dst)).rotate_left(16) ^ u64::from(sp ^ dp);
        // MurmurHash3's finalizer: every bit of the key moves every bit of
        // the hash, the low ones a shard is picked by included (a multiply
        // alone leaves them to the low bits of the key).
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ k >> 33
    }
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
    #[error("link type not read")]
    UnknownLink,
    #[error("encrypted at the link layer")]
    Encrypted,
    #[error("802.11 A-MSDU aggregate")]
    Aggregate,
}

/// Encapsulations peeled before giving up (tunnel in tunnel in tunnel).
const MAX_DEPTH: u8 = 4;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Decodes one frame of the given link type, looking inside IP-in-IP, GRE
/// (ERSPAN, PPTP), VXLAN, GENEVE, GTP-U and CAPWAP tunnels: the inner packet
/// is the one returned.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let (ethertype, net) = link::peel_link(link, frame)?;
    decode_net(ethertype, net, 0)
}

/// The common case — IPv4 without options or fragmentation, or IPv6 with
/// no extension header, carrying TCP or UDP — decoded directly; anything
/// else (options, extension headers, tunnels, damage) goes to etherparse.
/// This is most packets, and etherparse's general cursor costs several
/// times more per packet.
/// What [`decode_plain`] answers for a packet it leaves to the general
/// path (never handed out). An error of the result's own type, so that
/// a plain packet is built where `decode` returns it, not copied there.
const NOT_PLAIN: DecodeError = DecodeError::Malformed;

#[inline(always)]
fn decode_plain(ethertype: u16, b: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let (src, dst, proto, l4) = match ethertype {
        ETH_IPV4 => {
            let h = b.get(..20).ok_or(NOT_PLAIN)?;
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            // Version 4, IHL 5, no MF flag and zero fragment offset.
            if h[0] != 0x45 || (u16::from_be_bytes([h[6], h[7]]) & 0x3fff) != 0 || total < 20 {
                return Err(NOT_PLAIN);
            }
            let src = IpAddr::from(<[u8; 4]>::try_from(&h[12..16]).map_err(|_| NOT_PLAIN)?);
            let dst = IpAddr::from(<[u8; 4]>::try_from(&h[16..20]).map_err(|_| NOT_PLAIN)?);
            (src, dst, h[9], b.get(20..total.max(20)).ok_or(NOT_PLAIN)?)
        }
        ETH_IPV6 => {
            let h = b.get(..40).ok_or(NOT_PLAIN)?;
            if h[0] >> 4 != 6 {
                return Err(NOT_PLAIN);
            }
            let len = u16::from_be_bytes([h[4], h[5]]) as usize;
            let src = IpAddr::from(<[u8; 16]>::try_from(&h[8..24]).map_err(|_| NOT_PLAIN)?);
            let dst = IpAddr::from(<[u8; 16]>::try_from(&h[24..40]).map_err(|_| NOT_PLAIN)?);
            (src, dst, h[6], b.get(40..40 + len).ok_or(NOT_PLAIN)?)
        }
        _ => return Err(NOT_PLAIN),
    };
    match proto {
        6 => {
            let t = l4.get(..20).ok_or(NOT_PLAIN)?;
            let off = ((t[12] >> 4) as usize) * 4;
            if off < 20 {
                return Err(NOT_PLAIN);
            }
            let flags = t[13];
            Ok(Packet {
                src,
                dst,
                transport: Transport::Tcp(TcpHeader {
                    src_port: u16::from_be_bytes([t[0], t[1]]),
                    dst_port: u16::from_be_bytes([t[2], t[3]]),
                    seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
                    ack: u32::from_be_bytes([t[8], t[9], t[10], t[11]]),
                    syn: flags & 0x02 != 0,
                    ack_flag: flags & 0x10 != 0,
                    fin: flags & 0x01 != 0,
                    rst: flags & 0x04 != 0,
                }),
                payload: l4.get(off..).ok_or(NOT_PLAIN)?,
                truncated: false,
                seen_before: false,
            })
        }
        17 => {
            let u = l4.get(..8).ok_or(NOT_PLAIN)?;
            let src_port = u16::from_be_bytes([u[0], u[1]]);
            let dst_port = u16::from_be_bytes([u[2], u[3]]);
            if tunnel::maybe_udp_tunnel(src_port, dst_port) {
                return Err(NOT_PLAIN); // the general path looks inside
            }
            let len = (u16::from_be_bytes([u[4], u[5]]) as usize).clamp(8, l4.len());
            Ok(Packet {
                src,
                dst,
                transport: Transport::Udp { src_port, dst_port },
                payload: l4.get(8..len).ok_or(NOT_PLAIN)?,
                truncated: false,
                seen_before: false,
            })
        }
        _ => Err(NOT_PLAIN),
    }
}

/// A network-layer packet (a frame's, or one a tunnel carried at `depth`).
/// Inlined: most packets are plain and never make the call into the
/// general path (whose frame and copy of the result cost a tenth of a
/// plain packet's decoding).
#[inline]
fn decode_net(ethertype: u16, bytes: &[u8], depth: u8) -> Result<Packet<'_>, DecodeError> {
    let plain = decode_plain(ethertype, bytes);
    if plain.is_err() {
        return decode_general(ethertype, bytes, depth);
    }
    plain
}

/// What [`decode_plain`] does not take: options, extension headers,
/// fragments, tunnels, damage.
fn decode_general(ethertype: u16, bytes: &[u8], depth: u8) -> Result<Packet<'_>, DecodeError> {
    if ethertype != ETH_IPV4 && ethertype != ETH_IPV6 {
        return Err(DecodeError::NotIp);
    }
    let sliced = LaxSlicedPacket::from_ether_type(EtherType(ethertype), bytes);
    let (src, dst, ip_payload) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                v4.payload(),
            )
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                v6.payload(),
            )
        }
        None if sliced.stop_err.is_some() => return Err(DecodeError::Malformed),
        None => return Err(DecodeError::NotIp),
    };
    if ip_payload.fragmented {
        return Err(DecodeError::Fragment);
    }
    let truncated = ip_payload.incomplete;
    if depth < MAX_DEPTH {
        match ip_payload.ip_number.0 {
            4 => return decode_net(ETH_IPV4, ip_payload.payload, depth + 1),
            41 => return decode_net(ETH_IPV6, ip_payload.payload, depth + 1),
            47 => return tunnel::decode_gre(ip_payload.payload, depth + 1),
            _ => {}
        }
    }
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
            seen_before: false,
        }),
        Some(TransportSlice::Udp(udp)) => {
            let (src_port, dst_port) = (udp.source_port(), udp.destination_port());
            if depth < MAX_DEPTH {
                if let Some(inner) =
                    tunnel::decode_udp_tunnel(src_port, dst_port, udp.payload(), depth + 1)
                {
                    return inner;
                }
            }
            Ok(Packet {
                src,
                dst,
                transport: Transport::Udp { src_port, dst_port },
                payload: udp.payload(),
                truncated,
                seen_before: false,
            })
        }
        Some(_) => Err(DecodeError::OtherTransport),
        None if sliced.stop_err.is_some() => Err(DecodeError::Malformed),
        None => Err(DecodeError::OtherTransport),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Frames built by hand, and the builders the link and tunnel tests share.
    use super::*;

    /// IPv4/TCP 10.0.0.1:40000 -> 10.0.0.2:443, SYN, seq 1, with payload "hi".
    pub(crate) fn ipv4_tcp() -> Vec<u8> {
        let mut ip = vec![
            0x45, 0, 0, 42, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let tcp = [
            0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
        ];
        ip.extend(tcp);
        ip.extend(b"hi");
        ip
    }

    /// The same segment over IPv6 (2001:db8::1 -> 2001:db8::2).
    pub(crate) fn ipv6_tcp() -> Vec<u8> {
        let v4 = ipv4_tcp();
        let mut ip = vec![0x60, 0, 0, 0, 0, 22, 6, 64];
        for last in [1, 2] {
            ip.extend([0x20, 0x01, 0x0d, 0xb8]);
            ip.extend([0; 11]);
            ip.push(last);
        }
        ip.extend(&v4[20..]);
        ip
    }

    /// Both directions of a connection hash alike; other connections
    /// spread over shards.
    #[test]
    fn connection_hash_is_the_same_both_ways() {
        for frame in [ipv4_tcp(), ipv6_tcp()] {
            let link = LinkType::RawIp;
            let p = decode(link, &frame).unwrap();
            let Transport::Tcp(t) = p.transport else {
                panic!("not TCP")
            };
            let back = Packet {
                src: p.dst,
                dst: p.src,
                transport: Transport::Tcp(TcpHeader {
                    src_port: t.dst_port,
                    dst_port: t.src_port,
                    ..t
                }),
                ..p
            };
            assert_eq!(p.connection_hash(), back.connection_hash());
            // 1,000 client ports to one server, or 1,000 clients on one
            // port, fill two and four shards within a tenth of even.
            let client = |i: u16| match p.src {
                IpAddr::V4(a) => IpAddr::V4((u32::from(a) + u32::from(i)).into()),
                IpAddr::V6(a) => IpAddr::V6((u128::from(a) + u128::from(i)).into()),
            };
            for n in [2u64, 4] {
                let (mut ports, mut clients) = (vec![0u32; n as usize], vec![0u32; n as usize]);
                for i in 0..1000 {
                    let p = Packet {
                        transport: Transport::Tcp(TcpHeader {
                            src_port: 40_000 + i,
                            ..t
                        }),
                        ..p
                    };
                    ports[(p.connection_hash() % n) as usize] += 1;
                    let p = Packet {
                        src: client(i),
                        ..p
                    };
                    clients[(p.connection_hash() % n) as usize] += 1;
                }
                let even = 1000 / n as u32;
                for per in [ports, clients] {
                    assert!(
                        per.iter().all(|&k| k.abs_diff(even) <= even / 10),
                        "{per:?}"
                    );
                }
            }
        }
    }

    /// `frame` decodes to the segment of [`ipv4_tcp`] (or [`ipv6_tcp`]):
    /// ports, flags and exactly the payload "hi".
    #[track_caller]
    pub(crate) fn assert_hi(link: LinkType, frame: &[u8]) {
        let p = decode(link, frame).unwrap_or_else(|e| panic!("{link:?}: {e}: {frame:02x?}"));
        assert_eq!(p.payload, b"hi", "{link:?}: {frame:02x?}");
        assert!(!p.truncated);
        let Transport::Tcp(t) = p.transport else {
            panic!("{link:?}: not TCP")
        };
        assert_eq!(
            (t.src_port, t.dst_port, t.seq, t.syn),
            (40000, 443, 1, true),
            "{link:?}"
        );
    }

    /// `payload` behind an Ethernet header of type `ethertype`.
    pub(crate) fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend(ethertype.to_be_bytes());
        f.extend(payload);
        f
    }

    /// An outer IPv4 header (192.0.2.1 -> 192.0.2.2) of protocol `proto`
    /// around `payload`, its total length set.
    pub(crate) fn outer_ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        let total = (ip.len() + payload.len()) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend(payload);
        ip
    }

    /// An outer IPv4/UDP datagram between the ports, its lengths set.
    pub(crate) fn outer_udp(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
        let mut udp = Vec::new();
        udp.extend(src.to_be_bytes());
        udp.extend(dst.to_be_bytes());
        udp.extend((8 + payload.len() as u16).to_be_bytes());
        udp.extend([0, 0]);
        udp.extend(payload);
        outer_ipv4(17, &udp)
    }

    /// An IPv4 header with an option (IHL 6), so that etherparse, not the
    /// fast path, decodes it.
    pub(crate) fn ipv4_tcp_with_option() -> Vec<u8> {
        let mut ip = ipv4_tcp();
        ip[0] = 0x46;
        ip[3] += 4;
        ip.splice(20..20, [1, 1, 1, 0]); // NOP, NOP, NOP, EOL
        ip
    }

    /// Ethernet's minimum frame is 60 bytes: the sender pads short frames
    /// with zeros (and some add trailers); the IP total length says where
    /// the packet ends, so the padding never becomes TCP payload, on the
    /// fast path and on etherparse's.
    #[test]
    fn ethernet_padding_is_not_payload() {
        for ip in [ipv4_tcp(), ipv4_tcp_with_option()] {
            let mut frame = ethernet(ETH_IPV4, &ip);
            frame.resize(60, 0);
            frame.extend([0xde, 0xad, 0xbe, 0xef]); // an FCS or a vendor trailer
            assert_hi(LinkType::Ethernet, &frame);
        }
        let mut v6 = ethernet(ETH_IPV6, &ipv6_tcp());
        v6.extend([0xde, 0xad, 0xbe, 0xef]);
        assert_hi(LinkType::Ethernet, &v6);
    }

    /// A PPPoE session frame padded to 60 bytes: the PPPoE length and the
    /// IP total length both end the packet before the padding.
    #[test]
    fn pppoe_length_cuts_padding() {
        let ip = ipv4_tcp();
        let mut pppoe = vec![0x11, 0, 0, 7];
        pppoe.extend((ip.len() as u16 + 2).to_be_bytes());
        pppoe.extend([0x00, 0x21]);
        pppoe.extend(&ip);
        let mut frame = ethernet(0x8864, &pppoe);
        frame.resize(80, 0xee);
        assert_hi(LinkType::Ethernet, &frame);
        // Over VLAN, with the IP packet decoded by etherparse.
        let ip = ipv4_tcp_with_option();
        let mut tagged = vec![0, 5, 0x88, 0x64, 0x11, 0, 0, 7];
        tagged.extend((ip.len() as u16 + 2).to_be_bytes());
        tagged.extend([0x00, 0x21]);
        tagged.extend(&ip);
        tagged.extend([0xee; 9]);
        assert_hi(LinkType::Ethernet, &ethernet(0x8100, &tagged));
    }

    /// Trailers inside a tunnel and after it: each IP total length (and
    /// the UDP length) cuts its own packet's.
    #[test]
    fn trailers_inside_and_after_a_tunnel_are_not_payload() {
        let mut inner = ethernet(ETH_IPV4, &ipv4_tcp());
        inner.resize(60, 0); // the inner frame's Ethernet padding
        let mut vxlan = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
        vxlan.extend(&inner);
        let mut outer = ethernet(ETH_IPV4, &outer_udp(40000, 4789, &vxlan));
        outer.extend([0xaa; 7]);
        assert_hi(LinkType::Ethernet, &outer);
        // IP in GRE in IP, each with a trailer.
        let mut ip = ipv4_tcp_with_option();
        ip.extend([0xbb; 5]);
        let mut gre = vec![0, 0, 0x08, 0x00];
        gre.extend(&ip);
        let mut frame = outer_ipv4(47, &gre);
        frame.extend([0xcc; 3]);
        assert_hi(LinkType::RawIp, &frame);
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
            let Transport::Tcp(t) = p.transport else {
                panic!()
            };
            assert_eq!(
                (t.src_port, t.dst_port, t.seq, t.syn),
                (40000, 443, 1, true)
            );
        }
        let _ = eth;
    }

    #[test]
    fn tunnels_are_peeled() {
        let inner = ipv4_tcp();
        // IPv4-in-IPv4 (protocol 4).
        let mut ipip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 4, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        let total = (ipip.len() + inner.len()) as u16;
        ipip[2..4].copy_from_slice(&total.to_be_bytes());
        ipip.extend(&inner);
        let p = decode(LinkType::RawIp, &ipip).unwrap();
        assert_eq!(
            (p.src.to_string().as_str(), p.payload),
            ("10.0.0.1", &b"hi"[..])
        );
        // VXLAN: outer IPv4/UDP to 4789, VXLAN header, inner Ethernet.
        let mut eth = vec![0; 12];
        eth.extend([0x08, 0x00]);
        eth.extend(&inner);
        let mut udp_payload = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
        udp_payload.extend(&eth);
        let udp_len = (8 + udp_payload.len()) as u16;
        let mut outer = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        outer[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
        outer.extend([0x30, 0x39, 0x12, 0xb5]);
        outer.extend(udp_len.to_be_bytes());
        outer.extend([0, 0]);
        outer.extend(&udp_payload);
        let p = decode(LinkType::RawIp, &outer).unwrap();
        assert_eq!(
            (p.dst.to_string().as_str(), p.payload),
            ("10.0.0.2", &b"hi"[..])
        );
    }

    #[test]
    fn snaplen_cut_payload_is_marked() {
        let ip = ipv4_tcp();
        let p = decode(LinkType::RawIp, &ip[..41]).unwrap();
        assert!(p.truncated);
        assert_eq!(p.payload, b"h");
    }

    /// The fast path must agree with etherparse wherever it answers.
    #[test]
    fn fast_path_agrees_with_etherparse() {
        let mut seed = 0x9e37_79b9u32;
        let base = ipv4_tcp();
        for _ in 0..20_000 {
            let mut f = base.clone();
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let at = seed as usize % f.len();
                f[at] = (seed >> 8) as u8;
            }
            if let Ok(fast) = decode_plain(ETH_IPV4, &f) {
                let sliced = LaxSlicedPacket::from_ether_type(EtherType(ETH_IPV4), &f);
                let Some(TransportSlice::Tcp(t)) = sliced.transport else {
                    continue;
                };
                assert_eq!(fast.payload, t.payload(), "{f:?}");
                let Transport::Tcp(h) = fast.transport else {
                    panic!()
                };
                assert_eq!(
                    (h.seq, h.ack, h.src_port),
                    (
                        t.sequence_number(),
                        t.acknowledgment_number(),
                        t.source_port()
                    )
                );
            }
        }
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
            for link in LinkType::all().chain([LinkType::Unknown(189)]) {
                let _ = decode(link, &frame);
            }
        }
    }
}
