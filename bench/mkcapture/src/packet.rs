//! Byte-level helpers: IPv4/IPv6 + TCP/UDP parsing, Internet checksums
//! (full and incremental, RFC 1071 / RFC 1624) and a small TCP packet builder.

use std::net::IpAddr;

pub const ETH_HLEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

#[inline]
pub fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}
#[inline]
pub fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Why a packet was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    UnsupportedLinkType,
    NotIp,
    Fragment,
    NotTcpUdp,
    TooShort,
}

/// Offsets of an IP packet (all relative to the first byte of the IP header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip {
    pub v6: bool,
    pub proto: u8,
    /// Offset of the TCP/UDP header.
    pub l4: usize,
    /// Total IP length according to the IP header (what was on the wire).
    pub wire_len: usize,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
}

impl Ip {
    /// Length of the TCP header (or 8 for UDP).
    pub fn l4_hlen(&self, ip: &[u8]) -> usize {
        if self.proto == PROTO_TCP {
            ((ip[self.l4 + 12] >> 4) as usize) * 4
        } else {
            8
        }
    }
    /// Offset of the L4 payload.
    pub fn payload_off(&self, ip: &[u8]) -> usize {
        self.l4 + self.l4_hlen(ip)
    }
    /// Payload length on the wire.
    pub fn payload_wire_len(&self, ip: &[u8]) -> usize {
        self.wire_len.saturating_sub(self.payload_off(ip))
    }
    /// Offset of the TCP/UDP checksum field.
    pub fn csum_off(&self) -> usize {
        if self.proto == PROTO_TCP {
            self.l4 + 16
        } else {
            self.l4 + 6
        }
    }
    /// Offsets of the source and destination address fields.
    pub fn addr_offs(&self) -> (usize, usize, usize) {
        if self.v6 {
            (8, 24, 16)
        } else {
            (12, 16, 4)
        }
    }
}

/// Parses an IP packet that starts at `ip[0]`. `ip` may be truncated (snaplen) but must hold the
/// full IP and TCP/UDP headers.
pub fn parse_ip(ip: &[u8]) -> Result<Ip, Skip> {
    if ip.is_empty() {
        return Err(Skip::TooShort);
    }
    let (v6, mut proto, mut l4, wire_len, src, dst) = match ip[0] >> 4 {
        4 => {
            if ip.len() < 20 {
                return Err(Skip::TooShort);
            }
            let ihl = ((ip[0] & 0x0f) as usize) * 4;
            if ihl < 20 || ip.len() < ihl {
                return Err(Skip::TooShort);
            }
            if be16(ip, 6) & 0x3fff != 0 {
                return Err(Skip::Fragment);
            }
            let mut total = be16(ip, 2) as usize;
            if total == 0 && ip.len() <= 0xffff {
                // Captured on a TSO sender: the NIC fills in the length. Use what was captured.
                total = ip.len();
            }
            if total < ihl {
                return Err(Skip::TooShort);
            }
            let s: [u8; 4] = ip[12..16].try_into().unwrap();
            let d: [u8; 4] = ip[16..20].try_into().unwrap();
            (false, ip[9], ihl, total, IpAddr::from(s), IpAddr::from(d))
        }
        6 => {
            if ip.len() < 40 {
                return Err(Skip::TooShort);
            }
            let plen = be16(ip, 4) as usize;
            if plen == 0 {
                return Err(Skip::NotTcpUdp); // jumbogram or no payload
            }
            let s: [u8; 16] = ip[8..24].try_into().unwrap();
            let d: [u8; 16] = ip[24..40].try_into().unwrap();
            (true, ip[6], 40, 40 + plen, IpAddr::from(s), IpAddr::from(d))
        }
        _ => return Err(Skip::NotIp),
    };
    if v6 {
        // Walk the common extension headers.
        loop {
            match proto {
                0 | 43 | 60 => {
                    if ip.len() < l4 + 8 {
                        return Err(Skip::TooShort);
                    }
                    proto = ip[l4];
                    l4 += (ip[l4 + 1] as usize + 1) * 8;
                }
                51 => {
                    if ip.len() < l4 + 8 {
                        return Err(Skip::TooShort);
                    }
                    proto = ip[l4];
                    l4 += (ip[l4 + 1] as usize + 2) * 4;
                }
                44 => return Err(Skip::Fragment),
                _ => break,
            }
        }
    }
    let need = match proto {
        PROTO_TCP => 20,
        PROTO_UDP => 8,
        _ => return Err(Skip::NotTcpUdp),
    };
    if ip.len() < l4 + need || wire_len < l4 + need {
        return Err(Skip::TooShort);
    }
    if proto == PROTO_TCP {
        let hl = ((ip[l4 + 12] >> 4) as usize) * 4;
        if hl < 20 || ip.len() < l4 + hl || wire_len < l4 + hl {
            return Err(Skip::TooShort);
        }
    }
    Ok(Ip { v6, proto, l4, wire_len, src, dst, sport: be16(ip, l4), dport: be16(ip, l4 + 2) })
}

/// Adds big-endian 16-bit words of `data` to `acc` (odd last byte padded with zero).
#[inline]
pub fn sum16(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u64
            + u16::from_be_bytes([c[2], c[3]]) as u64
            + u16::from_be_bytes([c[4], c[5]]) as u64
            + u16::from_be_bytes([c[6], c[7]]) as u64;
    }
    let rem = chunks.remainder();
    let mut words = rem.chunks_exact(2);
    for w in &mut words {
        acc += u16::from_be_bytes([w[0], w[1]]) as u64;
    }
    if let [b] = words.remainder() {
        acc += (*b as u64) << 8;
    }
    acc
}

/// Folds a 64-bit one's-complement accumulator into 16 bits (not inverted).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Recomputes the IPv4 header checksum in place (`ip` starts at the IP header).
pub fn fix_ipv4_checksum(ip: &mut [u8]) {
    let ihl = ((ip[0] & 0x0f) as usize) * 4;
    put16(ip, 10, 0);
    let c = !fold(sum16(&ip[..ihl], 0));
    put16(ip, 10, c);
}

/// True if the IPv4 header checksum verifies.
#[cfg(test)]
pub fn ipv4_checksum_ok(ip: &[u8]) -> bool {
    let ihl = ((ip[0] & 0x0f) as usize) * 4;
    fold(sum16(&ip[..ihl], 0)) == 0xffff
}

/// Computes the TCP/UDP checksum of a complete (untruncated) packet; the checksum field itself
/// is ignored. Returns the value to store.
pub fn l4_checksum(ip: &[u8], p: &Ip) -> u16 {
    let (s, d, alen) = p.addr_offs();
    let l4len = p.wire_len - p.l4;
    let mut acc = sum16(&ip[s..s + alen], 0);
    acc = sum16(&ip[d..d + alen], acc);
    acc += p.proto as u64 + l4len as u64;
    let co = p.csum_off();
    acc = sum16(&ip[p.l4..co], acc);
    acc = sum16(&ip[co + 2..p.wire_len], acc);
    let c = !fold(acc);
    if c == 0 && p.proto == PROTO_UDP {
        0xffff
    } else {
        c
    }
}

/// True if the TCP/UDP checksum of a complete packet verifies (UDP/IPv4 checksum 0 = none).
#[cfg(test)]
pub fn l4_checksum_ok(ip: &[u8], p: &Ip) -> bool {
    let stored = be16(ip, p.csum_off());
    if p.proto == PROTO_UDP && !p.v6 && stored == 0 {
        return true;
    }
    l4_checksum(ip, p) == stored
}

/// One's-complement difference for an incremental update (RFC 1624, eqn. 3) when the 16-bit
/// words of `old` are replaced by those of `new` (both of even, equal length).
pub fn csum_delta(old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    let mut acc = 0u64;
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += (!u16::from_be_bytes([o[0], o[1]])) as u64;
        acc += u16::from_be_bytes([n[0], n[1]]) as u64;
    }
    fold(acc)
}

/// Applies a delta from [`csum_delta`] to a stored checksum: HC' = ~(~HC + delta).
#[inline]
pub fn csum_apply(hc: u16, delta: u16) -> u16 {
    !fold((!hc) as u64 + delta as u64)
}

/// Fields for [`build_tcp`].
pub struct TcpSpec<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub ttl: u8,
    pub ip_id: u16,
    pub payload: &'a [u8],
}

/// Builds an Ethernet frame holding an IPv4/IPv6 + TCP packet (no options) with valid checksums.
pub fn build_tcp(out: &mut Vec<u8>, macs: &[u8; 12], t: &TcpSpec) {
    out.clear();
    out.extend_from_slice(macs);
    let l4len = 20 + t.payload.len();
    match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&((20 + l4len) as u16).to_be_bytes());
            out.extend_from_slice(&t.ip_id.to_be_bytes());
            out.extend_from_slice(&[0x40, 0, t.ttl, PROTO_TCP, 0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&(l4len as u16).to_be_bytes());
            out.extend_from_slice(&[PROTO_TCP, t.ttl]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        _ => panic!("build_tcp: mixed address families"),
    }
    out.extend_from_slice(&t.sport.to_be_bytes());
    out.extend_from_slice(&t.dport.to_be_bytes());
    out.extend_from_slice(&t.seq.to_be_bytes());
    out.extend_from_slice(&t.ack.to_be_bytes());
    out.extend_from_slice(&[0x50, t.flags]);
    out.extend_from_slice(&t.window.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(t.payload);
    let ip = &mut out[ETH_HLEN..];
    let p = parse_ip(ip).expect("build_tcp produced an unparsable packet");
    if !p.v6 {
        fix_ipv4_checksum(ip);
    }
    let c = l4_checksum(ip, &p);
    put16(ip, p.csum_off(), c);
}

/// Returns `a - b` interpreted as a signed sequence-number distance.
#[inline]
pub fn seq_diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

/// SplitMix64: tiny deterministic PRNG (no external dependency needed).
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_matches_full() {
        let mut f = Vec::new();
        let spec = TcpSpec {
            src: "192.0.2.1".parse().unwrap(),
            dst: "198.51.100.7".parse().unwrap(),
            sport: 51000,
            dport: 443,
            seq: 1,
            ack: 2,
            flags: TCP_ACK,
            window: 100,
            ttl: 64,
            ip_id: 1,
            payload: b"hello world!",
        };
        build_tcp(&mut f, &[0; 12], &spec);
        let ip = &mut f[ETH_HLEN..];
        let p = parse_ip(ip).unwrap();
        assert!(ipv4_checksum_ok(ip));
        assert!(l4_checksum_ok(ip, &p));
        let old = ip[12..16].to_vec();
        let new = [10u8, 1, 2, 3];
        let d = csum_delta(&old, &new);
        ip[12..16].copy_from_slice(&new);
        let c = csum_apply(be16(ip, p.csum_off()), d);
        put16(ip, p.csum_off(), c);
        let p = parse_ip(ip).unwrap();
        assert!(l4_checksum_ok(ip, &p));
    }

    #[test]
    fn parse_rejects_fragments() {
        let mut f = Vec::new();
        let spec = TcpSpec {
            src: "192.0.2.1".parse().unwrap(),
            dst: "198.51.100.7".parse().unwrap(),
            sport: 1,
            dport: 2,
            seq: 0,
            ack: 0,
            flags: TCP_SYN,
            window: 1,
            ttl: 1,
            ip_id: 0,
            payload: b"",
        };
        build_tcp(&mut f, &[0; 12], &spec);
        f[ETH_HLEN + 6] = 0x20; // MF
        assert_eq!(parse_ip(&f[ETH_HLEN..]), Err(Skip::Fragment));
    }
}
