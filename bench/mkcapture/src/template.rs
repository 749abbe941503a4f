//! Splitting input captures into connections and turning each connection into a template: its
//! packets as Ethernet frames oriented client/server, with relative timestamps and (for TLS over
//! TCP) `R` bulk application-data packets spliced in after the handshake.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use crate::input::{strip_link, Frame};
use crate::packet::*;

/// A captured IP packet belonging to one connection.
pub struct RawPkt {
    pub ts_ns: u64,
    /// Original Ethernet dst+src MACs, when the input was Ethernet.
    pub macs: Option<[u8; 12]>,
    /// IP packet bytes (trimmed to the IP total length; may be shorter if the capture truncated it).
    pub ip: Vec<u8>,
    pub p: Ip,
}

type Endpoint = (IpAddr, u16);
type Key = (u32, u8, Endpoint, Endpoint);

/// Groups packets of the input files into connections (5-tuple, per input file).
#[derive(Default)]
pub struct Collector {
    index: HashMap<Key, usize>,
    pub conns: Vec<(u32, Vec<RawPkt>)>,
    pub frames: u64,
    pub used: u64,
    pub skipped: BTreeMap<Skip, u64>,
    pub min_ts: Option<u64>,
}

impl Collector {
    pub fn add(&mut self, file: u32, f: &Frame) {
        self.frames += 1;
        let r = strip_link(f.linktype, f.data).and_then(|(off, macs)| {
            let ip = &f.data[off..];
            parse_ip(ip).map(|p| (off, macs, p))
        });
        let (off, macs, p) = match r {
            Ok(x) => x,
            Err(s) => {
                *self.skipped.entry(s).or_default() += 1;
                return;
            }
        };
        self.used += 1;
        self.min_ts = Some(self.min_ts.map_or(f.ts_ns, |m| m.min(f.ts_ns)));
        let ip = &f.data[off..];
        let ip = &ip[..ip.len().min(p.wire_len)];
        let a = (p.src, p.sport);
        let b = (p.dst, p.dport);
        let key = if a <= b { (file, p.proto, a, b) } else { (file, p.proto, b, a) };
        let n = self.conns.len();
        let idx = *self.index.entry(key).or_insert(n);
        if idx == n {
            self.conns.push((file, Vec::new()));
        }
        let mut ip = ip.to_vec();
        if !p.v6 && be16(&ip, 2) == 0 {
            put16(&mut ip, 2, p.wire_len as u16); // TSO capture: fill in the real length
        }
        self.conns[idx].1.push(RawPkt { ts_ns: f.ts_ns, macs, ip, p });
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    TlsTcp,
    Quic,
    OtherTcp,
    OtherUdp,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::TlsTcp, Kind::Quic, Kind::OtherTcp, Kind::OtherUdp];
    pub fn name(self) -> &'static str {
        match self {
            Kind::TlsTcp => "tls-tcp",
            Kind::Quic => "quic",
            Kind::OtherTcp => "other-tcp",
            Kind::OtherUdp => "other-udp",
        }
    }
}

/// One packet of a template, ready to be copied and rewritten.
pub struct TPkt {
    /// Time since the template's first packet.
    pub rel_ns: u64,
    /// 0 = client to server, 1 = server to client.
    pub dir: u8,
    /// Ethernet frame (14-byte header + IP packet, possibly truncated).
    pub frame: Vec<u8>,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// Offset of the TCP/UDP header within the IP packet.
    pub l4: u16,
    /// Whether the TCP/UDP checksum is to be updated when rewriting (false for UDP/IPv4 without
    /// checksum).
    pub fix_l4: bool,
    pub bulk: bool,
}

pub struct Template {
    pub kind: Kind,
    pub v6: bool,
    pub proto: u8,
    pub client: Endpoint,
    pub server: Endpoint,
    pub pkts: Vec<TPkt>,
    pub orig_pkts: usize,
    pub bulk_pkts: usize,
    /// Why a TLS template got no bulk packets.
    pub no_bulk_reason: Option<&'static str>,
    pub duration_ns: u64,
    pub file: u32,
}

#[derive(Clone)]
pub struct TemplateOpts {
    pub bulk_per_conn: usize,
    pub bulk_size: usize,
    pub bulk_gap_ns: u64,
    pub max_gap_ns: u64,
}

const WELL_KNOWN: &[u16] = &[443, 8443, 853, 993, 995, 465, 636, 990, 5061, 587, 25, 143, 110, 80, 4433, 44330];

const MAC_CLIENT: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const MAC_SERVER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// Ethernet dst+src MACs for a synthesised header.
pub fn synth_macs(dir: u8) -> [u8; 12] {
    let mut m = [0u8; 12];
    if dir == 0 {
        m[..6].copy_from_slice(&MAC_SERVER);
        m[6..].copy_from_slice(&MAC_CLIENT);
    } else {
        m[..6].copy_from_slice(&MAC_CLIENT);
        m[6..].copy_from_slice(&MAC_SERVER);
    }
    m
}

fn tcp_payload(r: &RawPkt) -> &[u8] {
    let off = r.p.payload_off(&r.ip);
    &r.ip[off.min(r.ip.len())..]
}

/// Picks the client endpoint of a connection.
fn find_client(pkts: &[RawPkt]) -> Endpoint {
    let first = &pkts[0].p;
    if first.proto == PROTO_TCP {
        // SYN sender
        for r in pkts {
            let fl = r.ip[r.p.l4 + 13];
            if fl & TCP_SYN != 0 && fl & TCP_ACK == 0 {
                return (r.p.src, r.p.sport);
            }
        }
        // ClientHello sender
        for r in pkts {
            let pl = tcp_payload(r);
            if pl.len() > 5 && pl[0] == 0x16 && pl[1] == 3 && pl[5] == 1 {
                return (r.p.src, r.p.sport);
            }
        }
    }
    // Well-known server port, else the lower port is the server, else the first sender.
    let (a, b) = ((first.src, first.sport), (first.dst, first.dport));
    match (WELL_KNOWN.contains(&a.1), WELL_KNOWN.contains(&b.1)) {
        (false, true) => a,
        (true, false) => b,
        _ if a.1 < 1024 && b.1 >= 1024 => b,
        _ => a,
    }
}

/// Incremental TLS record tracker for one direction of a TCP connection.
#[derive(Clone, Copy)]
struct Stream {
    init: bool,
    /// Next expected data sequence number.
    next: u32,
    /// Highest sequence end seen (data + SYN/FIN), valid if `init`.
    end: u32,
    synced: bool,
    rec_left: usize,
    cur_type: u8,
    hdr: [u8; 5],
    hdr_len: usize,
    first_type: Option<u8>,
    last_ack: Option<u32>,
    window: u16,
    ttl: u8,
    ip_id: u16,
    macs: Option<[u8; 12]>,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            init: false,
            next: 0,
            end: 0,
            synced: true,
            rec_left: 0,
            cur_type: 0,
            hdr: [0; 5],
            hdr_len: 0,
            first_type: None,
            last_ack: None,
            window: 502,
            ttl: 64,
            ip_id: 0,
            macs: None,
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Seen {
    handshake: bool,
    alert: bool,
}

impl Stream {
    fn at_boundary(&self) -> bool {
        self.synced && self.rec_left == 0 && self.hdr_len == 0
    }

    fn bump_end(&mut self, cand: u32) {
        if !self.init || seq_diff(cand, self.end) > 0 {
            self.end = cand;
        }
    }

    fn consume(&mut self, bytes: &[u8], seen: &mut Seen) {
        let mut i = 0;
        while i < bytes.len() {
            if self.rec_left > 0 {
                let t = self.rec_left.min(bytes.len() - i);
                i += t;
                self.rec_left -= t;
                match self.cur_type {
                    20 | 22 => seen.handshake = true,
                    21 => seen.alert = true,
                    _ => {}
                }
                continue;
            }
            self.hdr[self.hdr_len] = bytes[i];
            self.hdr_len += 1;
            i += 1;
            if self.hdr_len == 5 {
                self.hdr_len = 0;
                let t = self.hdr[0];
                let len = be16(&self.hdr, 3) as usize;
                if !(20..=24).contains(&t) || self.hdr[1] != 3 || self.hdr[2] > 4 || len > 18432 {
                    self.synced = false;
                    return;
                }
                self.first_type.get_or_insert(t);
                self.cur_type = t;
                self.rec_left = len;
                match t {
                    20 | 22 => seen.handshake = true,
                    21 => seen.alert = true,
                    _ => {}
                }
            } else if self.hdr_len == 1 {
                // a partial header still belongs to the record that is starting
                if matches!(bytes[i - 1], 20 | 22) {
                    seen.handshake = true;
                }
            }
        }
    }

    /// Feeds one TCP segment of this direction; returns what TLS content it carried.
    fn feed(&mut self, r: &RawPkt) -> Seen {
        let mut seen = Seen::default();
        let ip = &r.ip;
        let l4 = r.p.l4;
        let seq = be32(ip, l4 + 4);
        let flags = ip[l4 + 13];
        self.window = be16(ip, l4 + 14);
        if r.p.v6 {
            self.ttl = ip[7];
        } else {
            self.ttl = ip[8];
            self.ip_id = be16(ip, 4);
        }
        if let Some(m) = r.macs {
            self.macs = Some(m);
        }
        if flags & TCP_ACK != 0 {
            self.last_ack = Some(be32(ip, l4 + 8));
        }
        let syn = (flags & TCP_SYN != 0) as u32;
        let fin = (flags & TCP_FIN != 0) as u32;
        let data_seq = seq.wrapping_add(syn);
        let len = r.p.payload_wire_len(ip);
        let pl = tcp_payload(r);
        if syn == 1 && !self.init {
            self.next = data_seq;
            self.end = data_seq;
            self.init = true;
        }
        if len > 0 {
            if !self.init {
                self.next = data_seq;
                self.end = data_seq;
                self.init = true;
            }
            let off = seq_diff(self.next, data_seq);
            if off < 0 {
                self.synced = false; // a gap: bytes missing from the capture
                self.next = data_seq.wrapping_add(len as u32);
            } else if (off as usize) < len {
                if pl.len() < len {
                    self.synced = false; // snaplen-truncated payload
                } else if self.synced {
                    self.consume(&pl[off as usize..], &mut seen);
                }
                self.next = data_seq.wrapping_add(len as u32);
            }
        }
        if self.init {
            self.bump_end(data_seq.wrapping_add(len as u32 + fin));
        } else if syn == 1 || fin == 1 {
            self.end = data_seq.wrapping_add(fin);
            self.init = true;
        }
        seen
    }
}

/// Adds `delta` to the seq, ack and SACK blocks of a TCP segment.
fn shift_tcp(ip: &mut [u8], p: &Ip, seq_delta: u32, ack_delta: u32) {
    let l4 = p.l4;
    if seq_delta != 0 {
        let s = be32(ip, l4 + 4).wrapping_add(seq_delta);
        put32(ip, l4 + 4, s);
    }
    if ack_delta == 0 || ip[l4 + 13] & TCP_ACK == 0 {
        return;
    }
    let a = be32(ip, l4 + 8).wrapping_add(ack_delta);
    put32(ip, l4 + 8, a);
    let hl = p.l4_hlen(ip);
    let mut i = l4 + 20;
    let end = (l4 + hl).min(ip.len());
    while i < end {
        match ip[i] {
            0 => break,
            1 => i += 1,
            k => {
                if i + 1 >= end {
                    break;
                }
                let len = ip[i + 1] as usize;
                if len < 2 || i + len > end {
                    break;
                }
                if k == 5 {
                    let mut b = i + 2;
                    while b + 4 <= i + len {
                        let v = be32(ip, b).wrapping_add(ack_delta);
                        put32(ip, b, v);
                        b += 4;
                    }
                }
                i += len;
            }
        }
    }
}

/// Deterministic pseudo-random bytes used as "encrypted" application data.
pub fn payload_pool(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; 1 << 17];
    Rng(seed ^ 0x5eed_da7a).fill(&mut v);
    v
}

/// Fills `out` with one TLS 1.2/1.3 application-data record (header + body) of `size` bytes.
pub fn app_data_record(out: &mut Vec<u8>, size: usize, pool: &[u8], pool_off: usize) {
    out.clear();
    let body = size.saturating_sub(5);
    out.extend_from_slice(&[0x17, 0x03, 0x03]);
    out.extend_from_slice(&(body as u16).to_be_bytes());
    let mut off = pool_off % pool.len();
    while out.len() < 5 + body {
        let take = (5 + body - out.len()).min(pool.len() - off);
        out.extend_from_slice(&pool[off..off + take]);
        off = 0;
    }
}

/// Builds a template from one connection's packets.
pub fn build(pkts: Vec<RawPkt>, file: u32, o: &TemplateOpts, pool: &[u8]) -> Template {
    let client = find_client(&pkts);
    let first = pkts[0].p;
    let proto = first.proto;
    let server = if (first.src, first.sport) == client { (first.dst, first.dport) } else { (first.src, first.sport) };
    let dirs: Vec<u8> = pkts.iter().map(|r| ((r.p.src, r.p.sport) != client) as u8).collect();
    // Servers captured on loopback get a routable-looking address (the copies' clients come
    // from 10/8 and fd00::/16, and 10.x -> 127.0.0.1 would look odd to an analyzer).
    let orig_server = server.0;
    let server = (unloop(server.0), server.1);

    // Relative timestamps, with long idle gaps clamped.
    let mut rel = Vec::with_capacity(pkts.len());
    let mut t = 0u64;
    for (i, r) in pkts.iter().enumerate() {
        if i > 0 {
            let gap = r.ts_ns.saturating_sub(pkts[i - 1].ts_ns);
            t += gap.min(o.max_gap_ns);
        }
        rel.push(t);
    }

    let mut kind = if proto == PROTO_TCP { Kind::OtherTcp } else { Kind::OtherUdp };
    let mut no_bulk_reason = None;
    // Bulk insertion: (index of the packet after which to insert, stream state per direction
    // at that point, directions that may carry bulk data)
    let mut insert: Option<(usize, [Stream; 2], [bool; 2])> = None;

    if proto == PROTO_TCP {
        let mut st = [Stream::default(), Stream::default()];
        // (state after packet k, connection closing at or before packet k)
        let mut snaps: Vec<([Stream; 2], bool)> = Vec::with_capacity(pkts.len());
        let mut last_hs: Option<usize> = None;
        let mut closed = false;
        for (i, r) in pkts.iter().enumerate() {
            let d = dirs[i] as usize;
            let seen = st[d].feed(r);
            if seen.handshake {
                last_hs = Some(i);
            }
            let fl = r.ip[r.p.l4 + 13];
            if fl & (TCP_FIN | TCP_RST) != 0 || seen.alert {
                closed = true;
            }
            snaps.push((st, closed));
        }
        let is_tls = st[0].first_type == Some(22) || st[1].first_type == Some(22);
        if is_tls {
            kind = Kind::TlsTcp;
            if o.bulk_per_conn > 0 {
                let h = last_hs.unwrap_or(0);
                // Candidates: before any FIN/RST/alert, and after both sides sent handshake
                // records (no bulk after a lone ClientHello that the server refused).
                let hello_both = |k: usize| snaps[k].0.iter().all(|s| s.first_type == Some(22));
                let open: Vec<usize> = (h..pkts.len()).filter(|&k| !snaps[k].1 && hello_both(k)).collect();
                let both = |k: &usize| snaps[*k].0[0].at_boundary() && snaps[*k].0[1].at_boundary();
                let either = |k: &usize| snaps[*k].0[0].at_boundary() || snaps[*k].0[1].at_boundary();
                if let Some(&j) = open.iter().find(|k| both(k)) {
                    // Normal case: both TLS streams are between records after the handshake.
                    insert = Some((j, snaps[j].0, [true, true]));
                } else if let Some(&j) = open.iter().rev().find(|k| either(k)) {
                    // The capture stops inside a record in one direction (e.g. a capture that
                    // only kept the hello packets): add bulk only where the stream is clean.
                    let s = snaps[j].0;
                    insert = Some((j, s, [s[0].at_boundary(), s[1].at_boundary()]));
                } else {
                    no_bulk_reason = Some(if open.is_empty() {
                        "handshake not answered, or the connection closes (FIN/RST/alert) right after it"
                    } else {
                        "neither TLS stream is at a record boundary after the handshake"
                    });
                }
            }
        }
    } else {
        // QUIC: a long-header packet from the client on port 443 (or a client Initial size).
        let looks_quic = pkts.iter().zip(&dirs).any(|(r, &d)| {
            let off = r.p.l4 + 8;
            d == 0
                && r.ip.len() > off + 5
                && r.ip[off] & 0xc0 == 0xc0
                && be32(&r.ip, off + 1) != 0
                && (server.1 == 443 || r.p.wire_len - off >= 1200)
        });
        if looks_quic {
            kind = Kind::Quic;
        }
    }

    let orig_pkts = pkts.len();
    let mut out: Vec<TPkt> = Vec::with_capacity(pkts.len() + if insert.is_some() { o.bulk_per_conn } else { 0 });
    let mut shift = [0u32; 2];
    let mut time_shift = 0u64;
    let mut bulk_pkts = 0;
    for (i, r) in pkts.into_iter().enumerate() {
        let d = dirs[i];
        let RawPkt { macs, mut ip, mut p, .. } = r;
        if server.0 != orig_server {
            let (so, dof, alen) = p.addr_offs();
            let off = if d == 0 { dof } else { so };
            match server.0 {
                IpAddr::V4(a) => ip[off..off + alen].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => ip[off..off + alen].copy_from_slice(&a.octets()),
            }
            if d == 0 {
                p.dst = server.0;
            } else {
                p.src = server.0;
            }
        }
        if proto == PROTO_TCP && (shift[0] != 0 || shift[1] != 0) {
            shift_tcp(&mut ip, &p, shift[d as usize], shift[1 - d as usize]);
        }
        out.push(finish(rel[i] + time_shift, d, macs.unwrap_or_else(|| synth_macs(d)), ip, &p, false));

        if let Some((j, st, allowed)) = insert.filter(|(j, _, _)| *j == i) {
            // Next sequence number per direction at the insertion point.
            let mut next = [0u32; 2];
            for dd in 0..2 {
                next[dd] = if st[dd].init {
                    st[dd].end
                } else if let Some(a) = st[1 - dd].last_ack {
                    a
                } else {
                    0x1000_0000u32.wrapping_mul(dd as u32 + 1)
                };
            }
            let base_next = next;
            let mut rec = Vec::with_capacity(o.bulk_size);
            let mut frame = Vec::with_capacity(o.bulk_size + 80);
            let mut ip_id = [st[0].ip_id, st[1].ip_id];
            for n in 0..o.bulk_per_conn {
                // client, server, server, server, client, ... (or one side only)
                let dd: usize = match allowed {
                    [true, true] => (n % 4 != 0) as usize,
                    [true, false] => 0,
                    _ => 1,
                };
                let (src, dst) = if dd == 0 { (client, server) } else { (server, client) };
                let s = &st[dd];
                let other = &st[1 - dd];
                let macs = s
                    .macs
                    .or_else(|| {
                        other.macs.map(|m| {
                            let mut x = [0u8; 12];
                            x[..6].copy_from_slice(&m[6..]);
                            x[6..].copy_from_slice(&m[..6]);
                            x
                        })
                    })
                    .unwrap_or_else(|| synth_macs(dd as u8));
                app_data_record(&mut rec, o.bulk_size, pool, (j * 7919 + n * 1499) % pool.len());
                ip_id[dd] = ip_id[dd].wrapping_add(1);
                build_tcp(
                    &mut frame,
                    &macs,
                    &TcpSpec {
                        src: src.0,
                        dst: dst.0,
                        sport: src.1,
                        dport: dst.1,
                        seq: next[dd],
                        ack: next[1 - dd],
                        flags: TCP_ACK | TCP_PSH,
                        window: if s.init { s.window } else { other.window },
                        ttl: if s.init { s.ttl } else { other.ttl },
                        ip_id: ip_id[dd],
                        payload: &rec,
                    },
                );
                next[dd] = next[dd].wrapping_add(rec.len() as u32);
                let orig_len = frame.len() as u32;
                let l4 = if client.0.is_ipv6() { 40 } else { 20 };
                out.push(TPkt {
                    rel_ns: rel[i] + (n as u64 + 1) * o.bulk_gap_ns,
                    dir: dd as u8,
                    frame: frame.clone(),
                    orig_len,
                    l4,
                    fix_l4: true,
                    bulk: true,
                });
                bulk_pkts += 1;
            }
            shift = [next[0].wrapping_sub(base_next[0]), next[1].wrapping_sub(base_next[1])];
            time_shift = (o.bulk_per_conn as u64 + 1) * o.bulk_gap_ns;
        }
    }
    let duration_ns = out.last().map_or(0, |p| p.rel_ns);
    Template {
        kind,
        v6: client.0.is_ipv6(),
        proto,
        client,
        server,
        pkts: out,
        orig_pkts,
        bulk_pkts,
        no_bulk_reason,
        duration_ns,
        file,
    }
}

/// Maps loopback addresses into the benchmarking ranges (RFC 2544 198.18.0.0/15, RFC 5180
/// 2001:2::/48), keeping the low bits; other addresses are returned unchanged.
pub fn unloop(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V4(v) if v.is_loopback() => {
            let o = v.octets();
            IpAddr::from([198, 18, o[2], o[3]])
        }
        IpAddr::V6(v) if v.is_loopback() => IpAddr::from([0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        _ => a,
    }
}

/// Turns an (oriented) IP packet into a template frame with valid checksums.
fn finish(rel_ns: u64, dir: u8, macs: [u8; 12], ip: Vec<u8>, p: &Ip, bulk: bool) -> TPkt {
    let mut frame = Vec::with_capacity(ETH_HLEN + ip.len());
    frame.extend_from_slice(&macs);
    frame.extend_from_slice(&if p.v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 }.to_be_bytes());
    frame.extend_from_slice(&ip);
    let ipb = &mut frame[ETH_HLEN..];
    if !p.v6 {
        fix_ipv4_checksum(ipb);
    }
    let co = p.csum_off();
    let udp4_nocsum = p.proto == PROTO_UDP && !p.v6 && be16(ipb, co) == 0;
    if ipb.len() >= p.wire_len && !udp4_nocsum {
        // Complete packet: recompute, so the copies carry valid checksums even when the input
        // had offloaded (zero/garbage) ones.
        let c = l4_checksum(ipb, p);
        put16(ipb, co, c);
    }
    TPkt { rel_ns, dir, orig_len: (ETH_HLEN + p.wire_len) as u32, frame, l4: p.l4 as u16, fix_l4: !udp4_nocsum, bulk }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn raw(ts_us: u64, src: Endpoint, dst: Endpoint, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> RawPkt {
        let mut f = Vec::new();
        build_tcp(
            &mut f,
            &[0; 12],
            &TcpSpec {
                src: src.0,
                dst: dst.0,
                sport: src.1,
                dport: dst.1,
                seq,
                ack,
                flags,
                window: 1000,
                ttl: 64,
                ip_id: 7,
                payload,
            },
        );
        let ip = f[ETH_HLEN..].to_vec();
        let p = parse_ip(&ip).unwrap();
        RawPkt { ts_ns: ts_us * 1000, macs: None, ip, p }
    }

    fn rec(t: u8, len: usize) -> Vec<u8> {
        let mut v = vec![t, 3, 3];
        v.extend_from_slice(&(len as u16).to_be_bytes());
        v.extend(std::iter::repeat_n(0xab, len));
        v
    }

    /// A TLS 1.2-like connection: SYN, SYN/ACK, ACK, CH, SH+cert split over two segments,
    /// client CCS+Finished, server CCS+Finished, app data, FIN, FIN.
    pub fn tls_conn(v6: bool) -> Vec<RawPkt> {
        let (c, s): (IpAddr, IpAddr) = if v6 {
            ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap())
        } else {
            ("192.0.2.1".parse().unwrap(), "198.51.100.2".parse().unwrap())
        };
        let c = (c, 40000);
        let s = (s, 443);
        let ch = rec(22, 200);
        let sh = rec(22, 3000);
        let cfin = [rec(20, 1), rec(22, 40)].concat();
        let sfin = [rec(20, 1), rec(22, 40)].concat();
        let app = rec(23, 100);
        let (ci, si) = (1000u32, 5000u32);
        let c1 = ci + 1;
        let s1 = si + 1;
        vec![
            raw(0, c, s, ci, 0, TCP_SYN, b""),
            raw(10, s, c, si, c1, TCP_SYN | TCP_ACK, b""),
            raw(20, c, s, c1, s1, TCP_ACK, b""),
            raw(30, c, s, c1, s1, TCP_ACK | TCP_PSH, &ch),
            raw(40, s, c, s1, c1 + 205, TCP_ACK, &sh[..1500]),
            raw(41, s, c, s1 + 1500, c1 + 205, TCP_ACK | TCP_PSH, &sh[1500..]),
            raw(50, c, s, c1 + 205, s1 + 3005, TCP_ACK | TCP_PSH, &cfin),
            raw(60, s, c, s1 + 3005, c1 + 205 + 51, TCP_ACK | TCP_PSH, &sfin),
            raw(70, c, s, c1 + 256, s1 + 3056, TCP_ACK | TCP_PSH, &app),
            raw(80, s, c, s1 + 3056, c1 + 361, TCP_ACK | TCP_FIN, b""),
            raw(90, c, s, c1 + 361, s1 + 3057, TCP_ACK | TCP_FIN, b""),
        ]
    }

    pub fn opts(r: usize) -> TemplateOpts {
        TemplateOpts { bulk_per_conn: r, bulk_size: 1400, bulk_gap_ns: 50_000, max_gap_ns: 1_000_000_000 }
    }

    #[test]
    fn bulk_is_spliced_after_handshake_with_continuous_seqs() {
        for v6 in [false, true] {
            let pool = payload_pool(1);
            let t = build(tls_conn(v6), 0, &opts(10), &pool);
            assert_eq!(t.kind, Kind::TlsTcp);
            assert_eq!(t.client.1, 40000);
            assert_eq!(t.bulk_pkts, 10);
            assert_eq!(t.pkts.len(), 21);
            // bulk comes right after the server Finished (index 7)
            assert!(t.pkts[..8].iter().all(|p| !p.bulk));
            assert!(t.pkts[8..18].iter().all(|p| p.bulk));
            // Walk the whole connection: every data segment must start exactly where the
            // previous one of that direction ended, acks never exceed what was sent.
            let mut next: [Option<u32>; 2] = [None, None];
            let mut prev_t = 0;
            for tp in &t.pkts {
                assert!(tp.rel_ns >= prev_t);
                prev_t = tp.rel_ns;
                let ip = &tp.frame[ETH_HLEN..];
                let p = parse_ip(ip).unwrap();
                if !v6 {
                    assert!(ipv4_checksum_ok(ip));
                }
                assert!(l4_checksum_ok(ip, &p));
                let d = tp.dir as usize;
                let seq = be32(ip, p.l4 + 4);
                let fl = ip[p.l4 + 13];
                let len = p.payload_wire_len(ip) as u32;
                if let Some(n) = next[d] {
                    assert_eq!(seq, n, "dir {d} seq discontinuity");
                }
                if fl & TCP_ACK != 0 {
                    if let Some(n) = next[1 - d] {
                        assert_eq!(be32(ip, p.l4 + 8), n, "dir {d} ack mismatch");
                    }
                }
                if tp.bulk {
                    assert_eq!(len, 1400);
                    assert_eq!(&ip[p.payload_off(ip)..p.payload_off(ip) + 5], &[0x17, 3, 3, 0x05, 0x73]);
                }
                next[d] = Some(seq.wrapping_add(len + (fl & (TCP_SYN | TCP_FIN) != 0) as u32));
            }
        }
    }

    #[test]
    fn no_bulk_when_closed_during_handshake_or_r0() {
        let pool = payload_pool(1);
        let t = build(tls_conn(false), 0, &opts(0), &pool);
        assert_eq!(t.bulk_pkts, 0);
        assert_eq!(t.pkts.len(), 11);
        // server FIN together with the last certificate segment
        let mut c = tls_conn(false);
        let l4 = c[5].p.l4;
        c[5].ip[l4 + 13] |= TCP_FIN;
        c.truncate(6);
        let t = build(c, 0, &opts(5), &pool);
        assert_eq!(t.kind, Kind::TlsTcp);
        assert_eq!(t.bulk_pkts, 0);
        assert!(t.no_bulk_reason.is_some());
    }

    #[test]
    fn bulk_only_on_the_clean_side_when_a_stream_is_incomplete() {
        let pool = payload_pool(1);
        let mut c = tls_conn(false);
        c.truncate(5); // CH + first half of the server's certificate flight only
        let t = build(c, 0, &opts(6), &pool);
        assert_eq!(t.bulk_pkts, 6);
        let bulk: Vec<_> = t.pkts.iter().filter(|p| p.bulk).collect();
        assert!(bulk.iter().all(|p| p.dir == 0));
        let first = &bulk[0].frame[ETH_HLEN..];
        let p = parse_ip(first).unwrap();
        assert_eq!(be32(first, p.l4 + 4), 1001 + 205); // continues after the ClientHello
    }

    #[test]
    fn loopback_server_is_mapped_consistently() {
        let pool = payload_pool(1);
        let lo: Endpoint = ("127.0.0.1".parse().unwrap(), 4433);
        let c: Endpoint = ("127.0.0.1".parse().unwrap(), 50000);
        let pk = vec![
            raw(0, c, lo, 1, 0, TCP_SYN, b""),
            raw(1, lo, c, 9, 2, TCP_SYN | TCP_ACK, b""),
            raw(2, c, lo, 2, 10, TCP_ACK, &rec(22, 100)),
            raw(3, lo, c, 10, 107, TCP_ACK, &rec(22, 100)),
        ];
        let t = build(pk, 0, &opts(3), &pool);
        let want: IpAddr = "198.18.0.1".parse().unwrap();
        assert_eq!(t.server, (want, 4433));
        assert_eq!(t.bulk_pkts, 3);
        for tp in &t.pkts {
            let ip = &tp.frame[ETH_HLEN..];
            let p = parse_ip(ip).unwrap();
            assert!(ipv4_checksum_ok(ip));
            assert!(l4_checksum_ok(ip, &p));
            if tp.dir == 0 {
                assert_eq!((p.dst, p.dport), t.server);
            } else {
                assert_eq!((p.src, p.sport), t.server);
            }
        }
    }

    #[test]
    fn client_detection_without_syn() {
        let pool = payload_pool(1);
        let mut c = tls_conn(false);
        c.drain(..3);
        let t = build(c, 0, &opts(2), &pool);
        assert_eq!(t.client.1, 40000);
        assert_eq!(t.server.1, 443);
        assert_eq!(t.bulk_pkts, 2);
    }
}
