//! Output generation: per-copy address rewriting and a streaming k-way merge of all active
//! copies (and pure-bulk flows) in timestamp order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::Result;
use pcap_file::pcap::{PcapPacket, PcapWriter};

use crate::packet::*;
use crate::template::{app_data_record, synth_macs, Kind, TPkt, Template};

/// Number of distinct IPv4 client addresses (10.0.0.1 - 10.255.255.254).
const NIP4: u64 = (1 << 24) - 2;
/// Client ports come from the IANA dynamic range 49152-65535 (as real clients use; it also keeps
/// port-based dissectors in tshark from claiming the copies).
const PORT_BASE: u64 = 49152;
const PORT_SPAN: u64 = 65536 - PORT_BASE;
/// Server ports of QUIC copies: 1024-49151, below the clients' range, so the two never meet.
const SERVER_PORT_BASE: u64 = 1024;
const SERVER_PORT_SPAN: u64 = PORT_BASE - SERVER_PORT_BASE;

/// The rewritten endpoints of one copy: the client's address and port, and the server's port.
#[derive(Debug, Clone, Copy)]
pub struct CopyAddr {
    pub addr: [u8; 16],
    pub alen: usize,
    pub port: u16,
    /// The server's port: the template's, except for QUIC ([`server_port`]).
    pub server_port: u16,
    /// One's-complement delta for the TCP/UDP checksum (pseudo-header address + ports change).
    pub delta: u16,
}

/// The server port of copy `i` of template `t`. A QUIC connection is known by its connection IDs,
/// not by its addresses: copies of one capture carry the same IDs, and if they reached the same
/// server endpoint they would be one client migrating (RFC 9000 §9), not new connections. So each
/// QUIC copy gets its own server port; copies of one template are `i`, `i + nt`, ..., so
/// `i / nt` tells them apart (48,128 ports before they repeat). Other copies keep the template's
/// port (TCP connections are known by their address pair, and port-based dissectors keep working).
pub fn server_port(t: &Template, i: u64, nt: u64) -> u16 {
    match t.kind {
        Kind::Quic => (SERVER_PORT_BASE + (i / nt.max(1)) % SERVER_PORT_SPAN) as u16,
        _ => t.server.1,
    }
}

/// Client address and port of copy `i` of `nt` templates: IPv4 10.0.0.0/8 or IPv6 fd00::/16,
/// counter based, so every copy is a distinct connection (for IPv4, 16.7M addresses x 16384
/// ports); QUIC copies get their own server port too ([`server_port`]).
pub fn copy_addr(t: &Template, i: u64, nt: u64, seed: u64) -> CopyAddr {
    let mut addr = [0u8; 16];
    let (alen, port) = if t.v6 {
        addr[0] = 0xfd;
        addr[8..16].copy_from_slice(&(i + 1).to_be_bytes());
        (16, (PORT_BASE + mix64(i ^ seed) % PORT_SPAN) as u16)
    } else {
        let host = 1 + (i % NIP4) as u32;
        addr[..4].copy_from_slice(&(0x0a00_0000u32 | host).to_be_bytes());
        // Same address => different (i / NIP4), and 40499 is odd, so coprime with PORT_SPAN (a
        // power of two): ports differ for the first PORT_SPAN wraps of the address space.
        let p = ((i / NIP4) * 40499 + mix64((i % NIP4) ^ seed)) % PORT_SPAN;
        (4, (PORT_BASE + p) as u16)
    };
    let mut old = Vec::with_capacity(18);
    match t.client.0 {
        IpAddr::V4(a) => old.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => old.extend_from_slice(&a.octets()),
    }
    old.extend_from_slice(&t.client.1.to_be_bytes());
    old.extend_from_slice(&t.server.1.to_be_bytes());
    let server_port = server_port(t, i, nt);
    let mut new = Vec::with_capacity(20);
    new.extend_from_slice(&addr[..alen]);
    new.extend_from_slice(&port.to_be_bytes());
    new.extend_from_slice(&server_port.to_be_bytes());
    CopyAddr { addr, alen, port, server_port, delta: csum_delta(&old, &new) }
}

/// Writes the frame of template packet `tp` for the copy `c` into `buf`: the client address and
/// port are replaced (source for client->server, destination for server->client), and the
/// server port (the other side's), the IPv4
/// header checksum is recomputed and the TCP/UDP checksum is updated incrementally (RFC 1624),
/// which is exact because the template's checksum was recomputed when it was built.
pub fn render(tp: &TPkt, v6: bool, proto: u8, c: &CopyAddr, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&tp.frame);
    let ip = &mut buf[ETH_HLEN..];
    let l4 = tp.l4 as usize;
    let (a_off, p_off, s_off) = match (v6, tp.dir) {
        (false, 0) => (12, l4, l4 + 2),
        (false, _) => (16, l4 + 2, l4),
        (true, 0) => (8, l4, l4 + 2),
        (true, _) => (24, l4 + 2, l4),
    };
    ip[a_off..a_off + c.alen].copy_from_slice(&c.addr[..c.alen]);
    put16(ip, p_off, c.port);
    put16(ip, s_off, c.server_port);
    if !v6 {
        fix_ipv4_checksum(ip);
    }
    if tp.fix_l4 {
        let co = if proto == PROTO_TCP { l4 + 16 } else { l4 + 6 };
        let mut v = csum_apply(be16(ip, co), c.delta);
        if v == 0 && proto == PROTO_UDP {
            v = 0xffff;
        }
        put16(ip, co, v);
    }
}

pub struct GenOpts {
    pub connections: u64,
    pub interval_ns: u64,
    pub bulk_flows: u64,
    pub bulk_flow_packets: u64,
    pub bulk_size: usize,
    pub seed: u64,
    pub base_ns: u64,
}

#[derive(Default, Debug)]
pub struct Stats {
    pub packets: u64,
    pub file_bytes: u64,
    pub wire_bytes: u64,
    pub copies: [u64; 4],
    pub template_packets: u64,
    pub bulk_in_conns: u64,
    pub bulk_flow_packets: u64,
    pub peak_active: usize,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// A pure-bulk TLS flow seen mid-stream (no TCP or TLS handshake in the capture).
struct Flow {
    k: u64,
    total: u64,
    client: (IpAddr, u16),
    server: (IpAddr, u16),
    next_seq: [u32; 2],
    ip_id: [u16; 2],
    interval_ns: u64,
}

enum Src {
    Copy { t: u32, pos: u32, start: u64, addr: CopyAddr },
    Flow(Flow),
    Free,
}

struct Sched {
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slots: Vec<Src>,
    free: Vec<u32>,
    order: u64,
}

impl Sched {
    fn push_new(&mut self, ts: u64, s: Src) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = s;
                i
            }
            None => {
                self.slots.push(s);
                (self.slots.len() - 1) as u32
            }
        };
        self.push(ts, slot);
    }
    fn push(&mut self, ts: u64, slot: u32) {
        self.order += 1;
        self.heap.push(Reverse((ts, self.order, slot)));
    }
}

/// Streams the benchmark capture into `w`. Memory is bounded by the number of concurrently open
/// connections (one small cursor each), never by the output size.
pub fn generate<W: Write>(templates: &[Template], o: &GenOpts, pool: &[u8], w: &mut PcapWriter<W>) -> Result<Stats> {
    let mut st = Stats { first_ns: u64::MAX, ..Default::default() };
    let mut rng = Rng(o.seed);
    let mut sc = Sched { heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new(), order: 0 };

    // Pure-bulk flows: start within the first half of the connection span, and send
    // `bulk_flow_packets` packets spread over about one span.
    let span = (o.connections * o.interval_ns).max(1_000_000_000);
    for f in 0..o.bulk_flows {
        let v6 = f % 4 == 3;
        let client: IpAddr = if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, (f >> 16) as u16, f as u16))
        } else {
            IpAddr::V4(Ipv4Addr::from(0xac10_0000u32 | (1 + f as u32 % 0x000f_fffe)))
        };
        let server: IpAddr = if v6 {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0x2, 0xb, 0, 0, 0, 0, 1 + (f % 250) as u16))
        } else {
            IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1 + (f % 250) as u8))
        };
        let flow = Flow {
            k: 0,
            total: o.bulk_flow_packets,
            client: (client, (PORT_BASE + f % PORT_SPAN) as u16),
            server: (server, 443),
            next_seq: [rng.next_u64() as u32, rng.next_u64() as u32],
            ip_id: [rng.next_u64() as u16, rng.next_u64() as u16],
            interval_ns: (span / o.bulk_flow_packets.max(1)).max(1),
        };
        if flow.total > 0 {
            let start = o.base_ns + rng.below(span / 2);
            sc.push_new(start, Src::Flow(flow));
        }
    }

    let mut buf = Vec::with_capacity(70_000);
    let mut rec = Vec::with_capacity(o.bulk_size);
    let mut next_copy = 0u64;
    let copy_start = |i: u64, rng: &mut Rng| o.base_ns + i * o.interval_ns + rng.below(o.interval_ns);
    let mut next_start = copy_start(0, &mut rng);
    let nt = templates.len() as u64;

    loop {
        // Open every copy whose first packet is due before the earliest pending packet.
        while next_copy < o.connections && sc.heap.peek().is_none_or(|Reverse((ts, _, _))| next_start <= *ts) {
            let ti = (next_copy % nt) as u32;
            let t = &templates[ti as usize];
            st.copies[Kind::ALL.iter().position(|k| *k == t.kind).unwrap()] += 1;
            let addr = copy_addr(t, next_copy, nt, o.seed);
            sc.push_new(next_start, Src::Copy { t: ti, pos: 0, start: next_start, addr });
            next_copy += 1;
            if next_copy < o.connections {
                next_start = copy_start(next_copy, &mut rng);
            }
        }
        st.peak_active = st.peak_active.max(sc.heap.len());
        let Some(Reverse((ts, _, slot))) = sc.heap.pop() else { break };
        let mut next_ts = None;
        let orig_len;
        match &mut sc.slots[slot as usize] {
            Src::Copy { t, pos, start, addr } => {
                let tm = &templates[*t as usize];
                let tp = &tm.pkts[*pos as usize];
                render(tp, tm.v6, tm.proto, addr, &mut buf);
                orig_len = tp.orig_len;
                if tp.bulk {
                    st.bulk_in_conns += 1;
                } else {
                    st.template_packets += 1;
                }
                *pos += 1;
                if let Some(n) = tm.pkts.get(*pos as usize) {
                    next_ts = Some(*start + n.rel_ns);
                }
            }
            Src::Flow(f) => {
                let d = if f.k % 4 == 0 { 0 } else { 1 };
                let (src, dst) = if d == 0 { (f.client, f.server) } else { (f.server, f.client) };
                app_data_record(&mut rec, o.bulk_size, pool, (f.k as usize).wrapping_mul(2654435761));
                f.ip_id[d] = f.ip_id[d].wrapping_add(1);
                build_tcp(
                    &mut buf,
                    &synth_macs(d as u8),
                    &TcpSpec {
                        src: src.0,
                        dst: dst.0,
                        sport: src.1,
                        dport: dst.1,
                        seq: f.next_seq[d],
                        ack: f.next_seq[1 - d],
                        flags: TCP_ACK | TCP_PSH,
                        window: 2048,
                        ttl: 64,
                        ip_id: f.ip_id[d],
                        payload: &rec,
                    },
                );
                f.next_seq[d] = f.next_seq[d].wrapping_add(rec.len() as u32);
                orig_len = buf.len() as u32;
                st.bulk_flow_packets += 1;
                f.k += 1;
                if f.k < f.total {
                    let half = f.interval_ns / 2;
                    next_ts = Some(ts + half + rng.below(f.interval_ns.max(1)));
                }
            }
            Src::Free => unreachable!("free slot in heap"),
        }
        w.write_packet(&PcapPacket::new(Duration::from_nanos(ts), orig_len, &buf))?;
        st.packets += 1;
        st.file_bytes += 16 + buf.len() as u64;
        st.wire_bytes += orig_len as u64;
        st.first_ns = st.first_ns.min(ts);
        st.last_ns = st.last_ns.max(ts);
        match next_ts {
            Some(n) => sc.push(n, slot),
            None => {
                sc.slots[slot as usize] = Src::Free;
                sc.free.push(slot);
            }
        }
    }
    st.file_bytes += 24;
    if st.packets == 0 {
        st.first_ns = 0;
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::tests::{opts, tls_conn};
    use crate::template::{build, payload_pool};
    use std::collections::HashSet;

    fn endpoints(frame: &[u8]) -> (Ip, IpAddr, IpAddr) {
        let ip = &frame[ETH_HLEN..];
        let p = parse_ip(ip).unwrap();
        (p, p.src, p.dst)
    }

    #[test]
    fn rewrite_checksums_and_both_directions() {
        let pool = payload_pool(3);
        for v6 in [false, true] {
            let t = build(tls_conn(v6), 0, &opts(10), &pool);
            for i in [0u64, 1, 77, NIP4 - 1, NIP4, 3 * NIP4 + 5] {
                let c = copy_addr(&t, i, 1, 42);
                let mut buf = Vec::new();
                let mut tuples = HashSet::new();
                for tp in &t.pkts {
                    render(tp, t.v6, t.proto, &c, &mut buf);
                    assert_eq!(buf.len(), tp.frame.len());
                    let (p, src, dst) = endpoints(&buf);
                    let ip = &buf[ETH_HLEN..];
                    if !v6 {
                        assert!(ipv4_checksum_ok(ip), "IPv4 header checksum");
                    }
                    assert!(l4_checksum_ok(ip, &p), "TCP checksum after rewrite (v6={v6}, i={i})");
                    let client_ip: IpAddr = if v6 {
                        IpAddr::from(<[u8; 16]>::try_from(&c.addr[..]).unwrap())
                    } else {
                        IpAddr::from(<[u8; 4]>::try_from(&c.addr[..4]).unwrap())
                    };
                    if tp.dir == 0 {
                        assert_eq!((src, p.sport), (client_ip, c.port));
                        assert_eq!((dst, p.dport), t.server);
                        tuples.insert((src, p.sport, dst, p.dport));
                    } else {
                        assert_eq!((dst, p.dport), (client_ip, c.port));
                        assert_eq!((src, p.sport), t.server);
                        tuples.insert((dst, p.dport, src, p.sport));
                    }
                    if v6 {
                        assert_eq!(c.addr[0], 0xfd);
                    } else {
                        assert_eq!(c.addr[0], 10);
                    }
                    // payload untouched
                    let off = ETH_HLEN + p.payload_off(ip);
                    assert_eq!(&buf[off..], &tp.frame[off..]);
                }
                assert_eq!(tuples.len(), 1, "both directions map to the same connection");
            }
        }
    }

    #[test]
    fn udp_checksum_zero_stays_zero_and_nonzero_is_fixed() {
        // IPv4/UDP with and without checksum
        for with_csum in [false, true] {
            let mut ip = vec![0x45u8, 0, 0, 36, 0, 1, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2];
            ip.extend_from_slice(&[0xc3, 0x50, 0x00, 0x35, 0, 16, 0, 0]);
            ip.extend_from_slice(b"abcdefgh");
            let p = parse_ip(&ip).unwrap();
            if with_csum {
                let c = l4_checksum(&ip, &p);
                put16(&mut ip, p.csum_off(), c);
            }
            let raw = crate::template::RawPkt { ts_ns: 0, macs: None, ip, p };
            let pool = payload_pool(1);
            let t = build(vec![raw], 0, &opts(10), &pool);
            assert_eq!(t.kind, Kind::OtherUdp);
            assert_eq!(t.client.1, 0xc350);
            let c = copy_addr(&t, 12345, 1, 1);
            let mut buf = Vec::new();
            render(&t.pkts[0], false, PROTO_UDP, &c, &mut buf);
            let ipb = &buf[ETH_HLEN..];
            let p = parse_ip(ipb).unwrap();
            assert!(ipv4_checksum_ok(ipb));
            assert_eq!(be16(ipb, p.csum_off()) == 0, !with_csum);
            assert!(l4_checksum_ok(ipb, &p));
            assert_eq!(p.sport, c.port);
        }
    }

    #[test]
    fn copies_are_distinct_connections() {
        let pool = payload_pool(3);
        let t = build(tls_conn(false), 0, &opts(0), &pool);
        let mut seen = HashSet::new();
        for i in 0..200_000u64 {
            let c = copy_addr(&t, i, 1, 9);
            assert!(c.port as u64 >= PORT_BASE);
            assert!(seen.insert((c.addr, c.port)), "duplicate client endpoint at copy {i}");
        }
        // copies beyond the IPv4 address space reuse addresses with different ports
        let a = copy_addr(&t, 5, 1, 9);
        let b = copy_addr(&t, 5 + NIP4, 1, 9);
        assert_eq!(a.addr, b.addr);
        assert_ne!(a.port, b.port);
    }

    /// Copies of a QUIC capture carry its connection IDs: each must reach its own server endpoint,
    /// or to QUIC they are one client migrating (the sharded replay then split them differently
    /// from one thread). The rewrite keeps both checksums right; TCP copies keep the server port.
    #[test]
    fn quic_copies_of_one_template_reach_distinct_server_ports() {
        let pool = payload_pool(3);
        for v6 in [false, true] {
            let mut t = build(tls_conn(v6), 0, &opts(2), &pool);
            assert_eq!(copy_addr(&t, 7, 3, 1).server_port, t.server.1, "TCP keeps its port");
            t.kind = Kind::Quic;
            let nt = 5;
            let mut ports = HashSet::new();
            let mut buf = Vec::new();
            for i in (2..2 + 1000 * nt).step_by(nt as usize) {
                let c = copy_addr(&t, i, nt, 11);
                assert!(ports.insert(c.server_port), "server port repeated at copy {i}");
                assert!((c.server_port as u64) < PORT_BASE, "below the clients' ports");
                for tp in &t.pkts {
                    render(tp, t.v6, t.proto, &c, &mut buf);
                    let (p, _, _) = endpoints(&buf);
                    let ip = &buf[ETH_HLEN..];
                    assert!(l4_checksum_ok(ip, &p), "checksum after rewrite (v6={v6}, i={i})");
                    let server = if tp.dir == 0 { p.dport } else { p.sport };
                    assert_eq!(server, c.server_port);
                }
            }
        }
    }

    #[test]
    fn merge_is_time_ordered_and_complete() {
        let pool = payload_pool(3);
        let t4 = build(tls_conn(false), 0, &opts(4), &pool);
        let t6 = build(tls_conn(true), 1, &opts(4), &pool);
        let per = [t4.pkts.len() as u64, t6.pkts.len() as u64];
        let templates = vec![t4, t6];
        let o = GenOpts {
            connections: 1000,
            interval_ns: 2_000, // many copies overlap
            bulk_flows: 3,
            bulk_flow_packets: 50,
            bulk_size: 1400,
            seed: 5,
            base_ns: 1_700_000_000_000_000_000,
        };
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let st = generate(&templates, &o, &pool, &mut w).unwrap();
        assert_eq!(st.packets, 500 * per[0] + 500 * per[1] + 150);
        assert_eq!(st.bulk_in_conns, 1000 * 4);
        assert_eq!(st.bulk_flow_packets, 150);
        assert_eq!(st.copies[0], 1000);
        assert!(st.peak_active > 10, "copies should overlap in time");
        let bytes = w.into_writer();
        assert_eq!(bytes.len() as u64, st.file_bytes);
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
        let mut last = 0;
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let ts = p.timestamp.as_nanos() as u64;
            assert!(ts >= last, "output not in timestamp order");
            last = ts;
            let ip = &p.data[ETH_HLEN..];
            let ip_p = parse_ip(ip).unwrap();
            assert!(l4_checksum_ok(ip, &ip_p));
            n += 1;
        }
        assert_eq!(n, st.packets);
    }
}
