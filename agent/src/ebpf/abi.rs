//! The `#[repr(C)]` mirror of `bpf/tlsrum.h`: the event header, the flow
//! map's key and state, the event flags and counters, and the constants
//! both sides must agree on. Tests (and a compile-time check of the record
//! cap) hold the two sides together.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use analyzer::counters::Counter;

/// `TLSRUM_CHUNK`: payload bytes per event at most.
pub const CHUNK: usize = 16384;
/// `TLSRUM_MAX_CHUNKS`: events per segment at most.
pub const MAX_CHUNKS: usize = 16;
/// `TLSRUM_MAX_PORTS`.
pub const MAX_PORTS: usize = 8;

/// `TLSRUM_EV_CUT`: bytes of the segment after this event's are in no event.
pub const EV_CUT: u8 = 1 << 0;
/// `TLSRUM_EV_DONE`: FIN/RST of a flow marked done, or of a quiet direction
/// (payload not sent).
pub const EV_DONE: u8 = 1 << 1;
/// `TLSRUM_EV_NEW_FLOW`: the kernel created the flow's state on this packet.
pub const EV_NEW_FLOW: u8 = 1 << 2;
/// `TLSRUM_EV_SEEN`: the segment starts with bytes received before (a
/// retransmission, while the sender's records are followed): user space
/// has them, nothing is missing.
pub const EV_SEEN: u8 = 1 << 3;
/// `TLSRUM_MAX_RECORD`: the longest fill (an application_data record's
/// body), the analyzer's record-size cap.
pub const MAX_FILL: usize = analyzer::caps::MAX_RECORD_PAYLOAD;
/// `TLSRUM_RECORDS_PER_DIR`: the analyzer's record cap, stated once in
/// [`analyzer::caps`]; the kernel stops a flow one record after the
/// analyzer would have finished it.
pub use analyzer::caps::MAX_RECORDS_PER_DIR as RECORDS_PER_DIR;
/// `TLSRUM_QUIC_SHORT_KEEP`: bytes of a QUIC short-header packet the kernel
/// sends, the first byte and the longest Destination Connection ID: all
/// the analyzer reads of such a packet (its time and DCID).
pub const QUIC_SHORT_KEEP: usize = 1 + analyzer::quic::packet::MAX_CID_LEN;

// The C header's value, read from bpf/tlsrum.h by build.rs: the kernel and
// the analyzer cannot disagree about the cap and still build.
include!(concat!(env!("OUT_DIR"), "/tlsrum_h.rs"));
const _: () = assert!(
    TLSRUM_RECORDS_PER_DIR as usize == RECORDS_PER_DIR,
    "TLSRUM_RECORDS_PER_DIR in bpf/tlsrum.h differs from analyzer::caps::MAX_RECORDS_PER_DIR"
);
const _: () = assert!(
    TLSRUM_CHUNK as usize == CHUNK
        && TLSRUM_MAX_CHUNKS as usize == MAX_CHUNKS
        && TLSRUM_MAX_PORTS as usize == MAX_PORTS
        && TLSRUM_MAX_RECORD as usize == MAX_FILL
        && TLSRUM_QUIC_SHORT_KEEP as usize == QUIC_SHORT_KEEP,
    "a #define of bpf/tlsrum.h differs from its mirror in ebpf/abi.rs"
);

/// `enum tlsrum_direction`.
pub const DIR_INGRESS: u8 = 0;
pub const DIR_EGRESS: u8 = 1;

/// One entry of `enum tlsrum_counter`: its name (a metric label or name)
/// and what it counts (the metric's help).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelCounter {
    pub name: &'static str,
    pub help: &'static str,
}

impl KernelCounter {
    /// The group of the kernel's counters (see [`Counter::group`]).
    pub const GROUP: &'static str = "kernel";

    /// This counter with a value, as exporters take it.
    pub fn counter(&self, value: u64) -> Counter {
        Counter {
            group: Self::GROUP,
            name: self.name,
            help: self.help,
            value,
        }
    }
}

/// `enum tlsrum_counter`, in order, with the header's comments.
pub const COUNTERS: [KernelCounter; 31] = {
    const fn c(name: &'static str, help: &'static str) -> KernelCounter {
        KernelCounter { name, help }
    }
    [
        c("events_sent", "Events written to the ring buffer."),
        c("bytes_sent", "Payload bytes the kernel copied to user space."),
        c("ringbuf_full", "Records lost: the ring buffer was full."),
        c("payload_truncated", "Segments over TLSRUM_MAX_CHUNKS chunks, cut."),
        c("bytes_lost", "Wanted payload bytes that never reached user space (ring buffer full, chunk limit, load error)."),
        c("budget", "Segments cut by the per-flow payload budget (--max-payload-per-flow)."),
        c("done", "Packets of finished flows kept in the kernel."),
        c("parse_error", "Packets whose IP/TCP/UDP headers are malformed or cut."),
        c("fragment", "IP fragments (non-first ones are skipped)."),
        c("load_error", "bpf_skb_load_bytes failures."),
        c("flow_map_error", "Flow states that could not be created."),
        c("new_flows", "Flow states created."),
        c("pulled", "Non-linear packets pulled (bpf_skb_pull_data)."),
        c("opaque", "Segments holding only application-data bodies, kept in the kernel."),
        c("filled", "Application-data record bodies the kernel kept, which the analyzer received as zeros (their headers went to user space)."),
        c("untracked", "Flow directions whose TLS record tracking was given up (not TLS, reordering)."),
        c("record_limit", "Flows stopped after the analyzer's per-direction record limit."),
        c("handshake_over", "Flows the kernel stopped itself once their handshake and first data each way had passed."),
        c("unknown_flow_empty", "TCP segments without payload or SYN of flows the kernel had no state for (ACKs of flows evicted from its flow map, or older than the agent): no state created, only FIN/RST went to user space, as headers."),
        c("midstream_flows", "Flow states created by a TCP data segment without SYN: the kernel did not know the flow (its state evicted from the flow map by pressure, see --kernel-flows, or the connection older than the agent)."),
        c("midstream_adopted", "Directions without a SYN seen whose TLS records the kernel followed from a ClientHello or ServerHello, or, after the peer's ServerHello, from the client's next handshake record (agent started, or flow state evicted, mid-handshake)."),
        c("midstream_quiet", "Directions without a SYN seen whose first data was not a hello: kept quiet, nothing of their payload left the kernel (only FIN/RST headers)."),
        c("lost_quiet", "Directions that lost TLS record tracking past their handshake (an application-data body already filled) or after starting without a SYN: kept quiet instead of falling back to the byte budget."),
        c("quiet_segments", "Data segments of quiet directions kept in the kernel."),
        c("fallback_segments", "Segments sent, whole or in part, under the byte-budget fallback (--max-payload-per-flow): directions followed from their SYN whose TLS records the kernel could not follow (not TLS, a hole during the handshake)."),
        c("fallback_bytes", "Payload bytes sent under the byte-budget fallback (--max-payload-per-flow)."),
        c("quic_short_unknown", "QUIC short-header packets of flows the kernel had no state for: no state created, nothing sent."),
        c("quic_short_cut", "QUIC short-header packets sent as their first 21 bytes (header and connection ID): their encrypted payload stayed in the kernel."),
        c(
            "lost_resumed",
            "Directions under the byte-budget fallback (a STARTTLS, HTTP CONNECT or PROXY preamble) whose TLS record walk resumed at a ClientHello or ServerHello: from there their application data stayed in the kernel.",
        ),
        c(
            "wakeups",
            "Ring-buffer records that woke the agent: those that took the pending bytes across a multiple of a quarter of the ring buffer.",
        ),
        c(
            "closed",
            "Flow states the kernel deleted when their connection closed (the ACK of its second FIN, or a RST after the peer's FIN), so that its flow map holds open connections only.",
        ),
    ]
};

/// The names of [`COUNTERS`], in order.
pub const COUNTER_NAMES: [&str; COUNTERS.len()] = {
    let mut names = [""; COUNTERS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = COUNTERS[i].name;
        i += 1;
    }
    names
};

/// `struct tlsrum_event` (bpf/tlsrum.h): the header of every ring-buffer
/// record, followed by `len` payload bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventHeader {
    /// `bpf_ktime_get_boot_ns()`: CLOCK_BOOTTIME nanoseconds.
    pub ts_ns: u64,
    pub ifindex: u32,
    /// TCP sequence number of the segment's first payload byte (0 for UDP).
    pub seq: u32,
    pub ack: u32,
    /// L4 payload bytes of the whole segment.
    pub payload_len: u32,
    /// Where this event's bytes start within the segment's payload.
    pub offset: u32,
    /// Payload bytes carried by this event.
    pub len: u32,
    /// skb gso_size: the segment size of a GSO/GRO packet, 0 otherwise.
    pub gso_size: u32,
    pub sport: u16,
    pub dport: u16,
    /// Network byte order; IPv4 in the first 4 bytes.
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    /// [`DIR_INGRESS`] or [`DIR_EGRESS`].
    pub direction: u8,
    /// 4 or 6.
    pub ip_version: u8,
    /// 6 (TCP) or 17 (UDP).
    pub l4_proto: u8,
    /// TCP header byte 13: FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10.
    pub tcp_flags: u8,
    /// [`EV_CUT`], [`EV_DONE`], [`EV_NEW_FLOW`], [`EV_SEEN`].
    pub flags: u8,
    pub _pad: [u8; 3],
    /// Zero bytes that follow this event's bytes in the stream: the body of
    /// an application_data record whose header the event carries, which
    /// never leaves the kernel (at most [`MAX_FILL`]).
    pub fill: u32,
    pub _pad2: u32,
}

/// Size of [`EventHeader`] (`sizeof(struct tlsrum_event)`).
pub const EVENT_HEADER_LEN: usize = std::mem::size_of::<EventHeader>();

impl EventHeader {
    /// Reads a header from the start of a ring-buffer record (native byte
    /// order, as the kernel wrote it). No unsafe cast: the layout is read
    /// field by field at the offsets the C side asserts.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..EVENT_HEADER_LEN)?;
        let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut saddr = [0u8; 16];
        let mut daddr = [0u8; 16];
        saddr.copy_from_slice(&b[40..56]);
        daddr.copy_from_slice(&b[56..72]);
        Some(Self {
            ts_ns: u64::from(u32_at(0)) | (u64::from(u32_at(4)) << 32),
            ifindex: u32_at(8),
            seq: u32_at(12),
            ack: u32_at(16),
            payload_len: u32_at(20),
            offset: u32_at(24),
            len: u32_at(28),
            gso_size: u32_at(32),
            sport: u16_at(36),
            dport: u16_at(38),
            saddr,
            daddr,
            direction: b[72],
            ip_version: b[73],
            l4_proto: b[74],
            tcp_flags: b[75],
            flags: b[76],
            _pad: [b[77], b[78], b[79]],
            fill: u32_at(80),
            _pad2: u32_at(84),
        })
    }

    fn addr(&self, a: &[u8; 16]) -> IpAddr {
        if self.ip_version == 4 {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        } else {
            IpAddr::V6(Ipv6Addr::from(*a))
        }
    }

    pub fn src(&self) -> IpAddr {
        self.addr(&self.saddr)
    }

    pub fn dst(&self) -> IpAddr {
        self.addr(&self.daddr)
    }

    /// The last event of its segment (no more bytes of it will come).
    pub fn is_last_chunk(&self) -> bool {
        self.flags & EV_CUT != 0
            || self
                .offset
                .saturating_add(self.len)
                .saturating_add(self.fill)
                >= self.payload_len
    }

    /// The flow this event belongs to, as [`crate::ebpf::loader::EbpfCapture::mark_done`] takes it.
    pub fn flow(&self) -> FlowTuple {
        FlowTuple {
            src: self.src(),
            dst: self.dst(),
            src_port: self.sport,
            dst_port: self.dport,
            proto: self.l4_proto,
        }
    }
}

/// A flow as user space names it, in either direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
}

/// `struct tlsrum_flow_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    pub addr_a: [u8; 16],
    pub addr_b: [u8; 16],
    pub port_a: u16,
    pub port_b: u16,
    pub proto: u8,
    pub _pad: [u8; 3],
}

/// `struct tlsrum_flow_state`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowState {
    pub bytes: [u64; 2],
    pub done: u32,
    pub initiator: u8,
    pub quic_short: [u8; 2],
    pub quic_after: u8,
    pub dir: [DirState; 2],
}

/// `struct tlsrum_dir_state`: record tracking of one TCP direction.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirState {
    pub next_rec: u32,
    pub fwd_until: u32,
    pub plain_end: u32,
    pub acked: u32,
    pub hdr: u64,
    pub records: u16,
    pub track: u8,
    pub hdr_have: u8,
    pub after_ccs: u8,
    pub ack_valid: u8,
    pub hello: u8,
    pub post: u8,
    pub post_end: u32,
    /// `enum tlsrum_no_fallback` bits.
    pub no_fallback: u8,
    pub tries: u8,
    /// Server: it sent application_data; client: its TLS 1.3 Finished was
    /// seen (not counted in `post`).
    pub sent_data: u8,
    /// It sent a FIN.
    pub fin: u8,
    /// Tracked: end of the bytes received; a segment starting before it
    /// is a retransmission.
    pub rcv_end: u32,
    /// With `fin`: the ack number that acknowledges its FIN.
    pub fin_ack: u32,
}

// SAFETY: plain #[repr(C)] integers and byte arrays with explicit padding
// fields: every bit pattern is valid and there are no implicit holes.
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowState {}
// SAFETY: as above.
unsafe impl aya::Pod for DirState {}

fn addr_bytes(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl FlowKey {
    /// The key the kernel uses for this flow: side a is the (address, port)
    /// that sorts first, comparing the address as two native-endian u64
    /// words and then the port (`flow_key()` in tlsrum.bpf.c).
    pub fn new(t: &FlowTuple) -> Self {
        let (s, d) = (addr_bytes(t.src), addr_bytes(t.dst));
        let words = |b: &[u8; 16]| {
            let mut w0 = [0u8; 8];
            let mut w1 = [0u8; 8];
            w0.copy_from_slice(&b[..8]);
            w1.copy_from_slice(&b[8..]);
            (u64::from_ne_bytes(w0), u64::from_ne_bytes(w1))
        };
        let (s0, s1) = words(&s);
        let (d0, d1) = words(&d);
        let src_first = if s0 != d0 {
            s0 < d0
        } else if s1 != d1 {
            s1 < d1
        } else {
            t.src_port <= t.dst_port
        };
        if src_first {
            Self {
                addr_a: s,
                addr_b: d,
                port_a: t.src_port,
                port_b: t.dst_port,
                proto: t.proto,
                _pad: [0; 3],
            }
        } else {
            Self {
                addr_a: d,
                addr_b: s,
                port_a: t.dst_port,
                port_b: t.src_port,
                proto: t.proto,
                _pad: [0; 3],
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The numbers bpf/tlsrum.h asserts with _Static_assert.
    #[test]
    fn layouts_match_the_c_header() {
        assert_eq!(size_of::<EventHeader>(), 88);
        assert_eq!(offset_of!(EventHeader, fill), 80);
        assert_eq!(offset_of!(EventHeader, ts_ns), 0);
        assert_eq!(offset_of!(EventHeader, ifindex), 8);
        assert_eq!(offset_of!(EventHeader, seq), 12);
        assert_eq!(offset_of!(EventHeader, ack), 16);
        assert_eq!(offset_of!(EventHeader, payload_len), 20);
        assert_eq!(offset_of!(EventHeader, offset), 24);
        assert_eq!(offset_of!(EventHeader, len), 28);
        assert_eq!(offset_of!(EventHeader, gso_size), 32);
        assert_eq!(offset_of!(EventHeader, sport), 36);
        assert_eq!(offset_of!(EventHeader, dport), 38);
        assert_eq!(offset_of!(EventHeader, saddr), 40);
        assert_eq!(offset_of!(EventHeader, daddr), 56);
        assert_eq!(offset_of!(EventHeader, direction), 72);
        assert_eq!(offset_of!(EventHeader, ip_version), 73);
        assert_eq!(offset_of!(EventHeader, l4_proto), 74);
        assert_eq!(offset_of!(EventHeader, tcp_flags), 75);
        assert_eq!(offset_of!(EventHeader, flags), 76);
        assert_eq!(size_of::<FlowKey>(), 40);
        assert_eq!(offset_of!(FlowKey, addr_b), 16);
        assert_eq!(offset_of!(FlowKey, port_a), 32);
        assert_eq!(offset_of!(FlowKey, port_b), 34);
        assert_eq!(offset_of!(FlowKey, proto), 36);
        assert_eq!(size_of::<FlowState>(), 120);
        assert_eq!(offset_of!(FlowState, done), 16);
        assert_eq!(offset_of!(FlowState, initiator), 20);
        assert_eq!(offset_of!(FlowState, quic_short), 21);
        assert_eq!(offset_of!(FlowState, dir), 24);
        assert_eq!(size_of::<DirState>(), 48);
        assert_eq!(offset_of!(DirState, rcv_end), 40);
        assert_eq!(offset_of!(DirState, fin), 39);
        assert_eq!(offset_of!(DirState, fin_ack), 44);
        assert_eq!(offset_of!(DirState, hello), 30);
        assert_eq!(offset_of!(DirState, post), 31);
        assert_eq!(offset_of!(DirState, post_end), 32);
        assert_eq!(offset_of!(DirState, fwd_until), 4);
        assert_eq!(offset_of!(DirState, plain_end), 8);
        assert_eq!(offset_of!(DirState, acked), 12);
        assert_eq!(offset_of!(DirState, hdr), 16);
        assert_eq!(offset_of!(DirState, records), 24);
        assert_eq!(offset_of!(DirState, track), 26);
        assert_eq!(offset_of!(DirState, hdr_have), 27);
        assert_eq!(offset_of!(DirState, after_ccs), 28);
        assert_eq!(offset_of!(DirState, ack_valid), 29);
        assert_eq!(offset_of!(DirState, no_fallback), 36);
        assert_eq!(offset_of!(DirState, tries), 37);
    }

    /// The C header's own numbers, read from the source: the two sides
    /// cannot drift apart without this test noticing.
    #[test]
    fn c_header_asserts_the_same_numbers() {
        let h = include_str!("../../../bpf/tlsrum.h");
        for (field, off) in [
            ("ifindex", offset_of!(EventHeader, ifindex)),
            ("payload_len", offset_of!(EventHeader, payload_len)),
            ("offset", offset_of!(EventHeader, offset)),
            ("gso_size", offset_of!(EventHeader, gso_size)),
            ("saddr", offset_of!(EventHeader, saddr)),
            ("daddr", offset_of!(EventHeader, daddr)),
            ("flags", offset_of!(EventHeader, flags)),
            ("fill", offset_of!(EventHeader, fill)),
        ] {
            let line = format!("TLSRUM_ASSERT_OFFSET(tlsrum_event, {field}, {off});");
            assert!(h.contains(&line), "bpf/tlsrum.h lacks {line}");
        }
        assert!(h.contains(&format!("#define TLSRUM_CHUNK\t\t{CHUNK}")));
        assert!(h.contains(&format!("#define TLSRUM_MAX_CHUNKS\t{MAX_CHUNKS}")));
        assert!(h.contains(&format!("TLSRUM_CNT_MAX == {}", COUNTER_NAMES.len())));
        assert!(h.contains(&format!("#define TLSRUM_MAX_RECORD\t{MAX_FILL}")));
        assert!(h.contains(&format!(
            "#define TLSRUM_RECORDS_PER_DIR\t{RECORDS_PER_DIR}"
        )));
        assert!(h.contains(&format!(
            "#define TLSRUM_QUIC_SHORT_KEEP\t{QUIC_SHORT_KEEP}"
        )));
        assert!(h.contains("TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, no_fallback, 36);"));
        assert!(h.contains("TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, tries, 37);"));
        // The kernel fills no more than the analyzer's record layer takes.
        // (RECORDS_PER_DIR is the analyzer's own constant, and checked
        // against the header at compile time.)
    }

    /// `enum tlsrum_counter` names the counters in the order of [`COUNTERS`]:
    /// a counter added on one side only, or moved, shows up here instead
    /// of as a metric under the wrong name.
    #[test]
    fn counters_are_the_c_enum_in_order() {
        let h = include_str!("../../../bpf/tlsrum.h");
        let body = &h[h
            .find("enum tlsrum_counter {")
            .expect("enum tlsrum_counter")..];
        let body = &body[..body.find("};").expect("end of enum tlsrum_counter")];
        let in_c: Vec<String> = body
            .split_whitespace()
            .filter_map(|w| w.trim_end_matches(',').strip_prefix("TLSRUM_CNT_"))
            .filter(|w| *w != "MAX")
            .map(str::to_lowercase)
            .collect();
        assert_eq!(in_c, COUNTER_NAMES);
        assert!(COUNTERS.iter().all(|c| !c.help.is_empty()));
    }

    pub(crate) fn header(
        flags: u8,
        tcp_flags: u8,
        seq: u32,
        payload_len: u32,
        offset: u32,
        len: u32,
    ) -> EventHeader {
        let mut h = EventHeader {
            ts_ns: 1,
            seq,
            ack: 7,
            payload_len,
            offset,
            len,
            sport: 40000,
            dport: 443,
            ip_version: 4,
            l4_proto: 6,
            tcp_flags,
            flags,
            ..Default::default()
        };
        h.saddr[..4].copy_from_slice(&[192, 0, 2, 2]);
        h.daddr[..4].copy_from_slice(&[192, 0, 2, 1]);
        h
    }

    /// An application_data header event: its 5 bytes, then the body's
    /// zeros as the next segment, which takes the FIN.
    #[test]
    fn parse_reads_what_the_layout_says() {
        let h = header(EV_CUT, 0x18, 0x01020304, 100, 0, 50);
        let mut b = vec![0u8; EVENT_HEADER_LEN];
        b[0..8].copy_from_slice(&h.ts_ns.to_ne_bytes());
        b[12..16].copy_from_slice(&h.seq.to_ne_bytes());
        b[16..20].copy_from_slice(&h.ack.to_ne_bytes());
        b[20..24].copy_from_slice(&h.payload_len.to_ne_bytes());
        b[28..32].copy_from_slice(&h.len.to_ne_bytes());
        b[36..38].copy_from_slice(&h.sport.to_ne_bytes());
        b[38..40].copy_from_slice(&h.dport.to_ne_bytes());
        b[40..56].copy_from_slice(&h.saddr);
        b[56..72].copy_from_slice(&h.daddr);
        b[73] = 4;
        b[74] = 6;
        b[75] = 0x18;
        b[76] = EV_CUT;
        assert_eq!(EventHeader::parse(&b), Some(h));
        assert_eq!(EventHeader::parse(&b[..79]), None);
    }

    #[test]
    fn flow_key_is_the_same_both_ways() {
        let a = FlowTuple {
            src: "192.0.2.2".parse().unwrap(),
            dst: "192.0.2.1".parse().unwrap(),
            src_port: 40000,
            dst_port: 443,
            proto: 6,
        };
        let b = FlowTuple {
            src: a.dst,
            dst: a.src,
            src_port: a.dst_port,
            dst_port: a.src_port,
            proto: 6,
        };
        assert_eq!(FlowKey::new(&a), FlowKey::new(&b));
        // Same address (loopback): the port decides.
        let l = FlowTuple {
            src: "::1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
            ..a
        };
        let r = FlowTuple {
            src_port: 443,
            dst_port: 40000,
            ..l
        };
        assert_eq!(FlowKey::new(&l), FlowKey::new(&r));
        assert_eq!(FlowKey::new(&l).port_a, 443);
    }
}
