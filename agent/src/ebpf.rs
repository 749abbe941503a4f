//! eBPF capture backend: loads `bpf/tlsrum.bpf.c` (compiled by build.rs),
//! attaches it as a TC classifier on ingress and egress of each interface,
//! and reads its events from the ring buffer.
//!
//! The kernel side forwards, per flow on the server ports, SYN/FIN/RST,
//! the bare ACKs of the handshake phase and each direction's payload up to
//! `max_payload_per_dir` bytes; after [`EbpfCapture::mark_done`] only
//! FIN/RST. Big segments (GSO/GRO, up to 256 KiB) arrive as several events
//! of at most [`CHUNK`] bytes; whatever is not sent is counted (see
//! [`EbpfCapture::counters`]) and flagged ([`EV_CUT`]).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let opts = EbpfOptions { ifaces: vec!["eth0".into()], ports: vec![443], ..Default::default() };
//! let mut cap = EbpfCapture::attach(&opts)?;
//! cap.poll(std::time::Duration::from_millis(100), &mut |ev| {
//!     let p = ev.to_packet();
//!     println!("{} {} -> {} {} bytes", ev.ts, p.src, p.dst, p.payload.len());
//! })?;
//! cap.detach()?;
//! # Ok(()) }
//! ```

// The backend's API is used piecemeal by the binary (live_ebpf) and whole by
// tests/ebpf_attach.rs, which includes this file.
#![allow(dead_code)]

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use analyzer::wire::{Packet, TcpHeader, Transport};
use anyhow::{bail, Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::links::LinkOrder;
use aya::programs::tc::{NlOptions, SchedClassifierLinkId, TcAttachOptions};
use aya::programs::{SchedClassifier, TcAttachType};
use aya::util::KernelVersion;
use aya::{Ebpf, EbpfLoader};

/// The object built from `bpf/tlsrum.bpf.c` by build.rs.
static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tlsrum.bpf.o"));

/// `TLSRUM_CHUNK`: payload bytes per event at most.
pub const CHUNK: usize = 16384;
/// `TLSRUM_MAX_CHUNKS`: events per segment at most.
pub const MAX_CHUNKS: usize = 16;
/// A record wakes the reader only once this fraction of the ring buffer is
/// pending (`wakeup_bytes`): a wakeup per record cost an interrupt each.
/// Below it, records wait for the reader's poll timeout.
pub const WAKEUP_FRACTION: u32 = 16;
/// `TLSRUM_MAX_PORTS`.
pub const MAX_PORTS: usize = 8;

/// `TLSRUM_EV_CUT`: bytes of the segment after this event's are in no event.
pub const EV_CUT: u8 = 1 << 0;
/// `TLSRUM_EV_DONE`: FIN/RST of a flow marked done (payload not sent).
pub const EV_DONE: u8 = 1 << 1;
/// `TLSRUM_EV_NEW_FLOW`: the kernel created the flow's state on this packet.
pub const EV_NEW_FLOW: u8 = 1 << 2;
/// `TLSRUM_EV_SEEN`: the segment's other bytes reached user space earlier
/// (sent, or filled): nothing of it is missing.
pub const EV_SEEN: u8 = 1 << 3;
/// `TLSRUM_MAX_RECORD`: the longest fill (an application_data record's body).
pub const MAX_FILL: usize = 18432;
/// `TLSRUM_RECORDS_PER_DIR`.
pub const RECORDS_PER_DIR: usize = 48;

/// `enum tlsrum_direction`.
pub const DIR_INGRESS: u8 = 0;
pub const DIR_EGRESS: u8 = 1;

/// Names of `enum tlsrum_counter`, in order.
pub const COUNTER_NAMES: [&str; 18] = [
    "events_sent",
    "bytes_sent",
    "ringbuf_full",
    "payload_truncated",
    "bytes_lost",
    "budget",
    "done",
    "parse_error",
    "fragment",
    "load_error",
    "flow_map_error",
    "new_flows",
    "pulled",
    "opaque",
    "filled",
    "untracked",
    "record_limit",
    "handshake_over",
];

const PROGRAMS: [(&str, TcAttachType); 2] = [
    ("tlsrum_ingress", TcAttachType::Ingress),
    ("tlsrum_egress", TcAttachType::Egress),
];

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
            || self.offset.saturating_add(self.len).saturating_add(self.fill) >= self.payload_len
    }

    /// The flow this event belongs to, as [`EbpfCapture::mark_done`] takes it.
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

/// One ring-buffer record.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// Wall-clock time of the packet at the hook, seconds since the epoch.
    pub ts: f64,
    pub header: &'a EventHeader,
    /// `header.len` bytes starting at `header.offset` in the segment.
    pub payload: &'a [u8],
}

impl<'a> Event<'a> {
    /// The event as a packet for the analyzer. A chunk after the first of a
    /// big segment starts at `seq + offset` (plus one if the segment carries
    /// SYN, which takes a sequence number before the data) and does not
    /// repeat SYN; FIN and RST, which come after the data, are kept on the
    /// segment's last chunk only. `truncated` says that bytes of the segment
    /// after this event's never left the kernel (byte budget, done flow,
    /// chunk limit, ring buffer full: see the counters).
    ///
    /// UDP events are whole datagrams unless the kernel handed over a GSO
    /// batch (`gso_size` set): see [`Event::datagrams`].
    pub fn to_packet(self) -> Packet<'a> {
        let h = self.header;
        let transport = if h.l4_proto == 6 {
            let syn = h.tcp_flags & 0x02 != 0;
            let first = h.offset == 0;
            let last = h.is_last_chunk();
            let seq = if first {
                h.seq
            } else {
                h.seq.wrapping_add(h.offset).wrapping_add(u32::from(syn))
            };
            Transport::Tcp(TcpHeader {
                src_port: h.sport,
                dst_port: h.dport,
                seq,
                ack: h.ack,
                syn: syn && first,
                ack_flag: h.tcp_flags & 0x10 != 0,
                // With a fill, FIN and RST go on the fill's packet.
                fin: h.tcp_flags & 0x01 != 0 && last && h.fill == 0,
                rst: h.tcp_flags & 0x04 != 0 && last && h.fill == 0,
            })
        } else {
            Transport::Udp {
                src_port: h.sport,
                dst_port: h.dport,
            }
        };
        Packet {
            src: h.src(),
            dst: h.dst(),
            transport,
            payload: self.payload,
            truncated: h.flags & EV_CUT != 0,
        }
    }

    /// The zeros standing for an application_data body the kernel kept
    /// (`fill`), as a segment right after this event's bytes; None without
    /// a fill. It carries the segment's ACK, and its FIN or RST if the
    /// event is the segment's last.
    pub fn fill_packet(self) -> Option<Packet<'static>> {
        static ZEROS: [u8; MAX_FILL] = [0; MAX_FILL];
        let h = self.header;
        if h.fill == 0 || h.l4_proto != 6 {
            return None;
        }
        let syn = h.tcp_flags & 0x02 != 0;
        let at = h.offset.wrapping_add(h.len);
        let seq = if at == 0 { h.seq } else { h.seq.wrapping_add(at).wrapping_add(u32::from(syn)) };
        let last = h.is_last_chunk();
        Some(Packet {
            src: h.src(),
            dst: h.dst(),
            transport: Transport::Tcp(TcpHeader {
                src_port: h.sport,
                dst_port: h.dport,
                seq,
                ack: h.ack,
                syn: syn && at == 0,
                ack_flag: h.tcp_flags & 0x10 != 0,
                fin: h.tcp_flags & 0x01 != 0 && last,
                rst: h.tcp_flags & 0x04 != 0 && last,
            }),
            payload: &ZEROS[..(h.fill as usize).min(MAX_FILL)],
            truncated: false,
        })
    }

    /// The packets of this event for the analyzer. UDP: its datagrams. A GSO
    /// batch (egress, `gso_size` set) holds datagrams of `gso_size` bytes
    /// back to back (the last may be shorter); one that straddles the
    /// boundary between two events is returned in pieces marked truncated.
    /// TCP: the one packet, then the fill's (see [`Event::fill_packet`]).
    pub fn datagrams(self) -> Datagrams<'a> {
        let h = *self.header;
        let gso = h.gso_size as usize;
        let fill = self.fill_packet();
        Datagrams {
            base: self.to_packet(),
            h,
            split: h.l4_proto == 17 && gso > 0 && (h.payload_len as usize) > gso,
            pos: 0,
            // A fill after no bytes: the fill's packet alone.
            base_done: h.len == 0 && fill.is_some(),
            fill,
        }
    }
}

/// Iterator returned by [`Event::datagrams`].
pub struct Datagrams<'a> {
    base: Packet<'a>,
    h: EventHeader,
    split: bool,
    pos: usize,
    base_done: bool,
    fill: Option<Packet<'static>>,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = Packet<'a>;

    fn next(&mut self) -> Option<Packet<'a>> {
        if !self.split {
            if !self.base_done {
                self.base_done = true;
                return Some(self.base);
            }
            return self.fill.take();
        }
        let (h, payload, gso) = (&self.h, self.base.payload, self.h.gso_size as usize);
        if self.pos >= payload.len() {
            return None;
        }
        // Datagram boundaries are at multiples of gso_size in the segment.
        let seg_pos = h.offset as usize + self.pos;
        let dgram_start = seg_pos - seg_pos % gso;
        let dgram_end = (dgram_start + gso).min(h.payload_len as usize);
        let end_here = (dgram_end - h.offset as usize).min(payload.len());
        let piece = &payload[self.pos..end_here];
        let whole = dgram_start == seg_pos && h.offset as usize + end_here == dgram_end;
        self.pos = end_here;
        Some(Packet {
            payload: piece,
            truncated: !whole || (self.base.truncated && self.pos >= payload.len()),
            ..self.base
        })
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
    pub _pad: u32,
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

/// How the programs are hooked to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// TCX links on Linux 6.6+ (gone with the process, no qdisc), else
    /// netlink.
    #[default]
    Auto,
    /// TCX links (Linux 6.6+).
    Tcx,
    /// cls_bpf filters on a clsact qdisc (any kernel); the qdisc is added
    /// if missing and removed again on detach if we added it.
    Netlink,
}

/// What to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbpfOptions {
    /// Interfaces to attach to (ingress and egress; egress only on loopback,
    /// where every packet passes both hooks).
    pub ifaces: Vec<String>,
    /// Server ports (at most [`MAX_PORTS`]).
    pub ports: Vec<u16>,
    /// Every TCP (and with `quic`, UDP) flow is a candidate; user space
    /// recognises TLS by content and marks the rest done.
    pub all_ports: bool,
    /// Also forward QUIC (UDP on the ports): long-header packets and the
    /// first short-header packet each way.
    pub quic: bool,
    /// Payload bytes forwarded per flow direction at most.
    pub max_payload_per_dir: u32,
    /// Ring buffer size; rounded up to a power of two, at least one page.
    pub ringbuf_bytes: u32,
    pub attach_mode: AttachMode,
}

impl Default for EbpfOptions {
    fn default() -> Self {
        Self {
            ifaces: Vec::new(),
            ports: vec![443],
            all_ports: false,
            quic: false,
            max_payload_per_dir: 64 * 1024,
            ringbuf_bytes: 8 << 20,
            attach_mode: AttachMode::Auto,
        }
    }
}

/// A program attached to one hook of one interface.
struct Attachment {
    program: &'static str,
    iface: String,
    link: SchedClassifierLinkId,
}

/// A loaded and attached capture. Dropping it detaches (best effort).
pub struct EbpfCapture {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    flows: BpfHashMap<MapData, FlowKey, FlowState>,
    counters: PerCpuArray<MapData, u64>,
    attachments: Vec<Attachment>,
    /// Interfaces where we added the clsact qdisc (removed on detach).
    our_clsact: Vec<String>,
    /// CLOCK_REALTIME - CLOCK_BOOTTIME, nanoseconds; resampled every poll.
    boot_to_epoch_ns: i128,
    /// Instructions the verifier processed, per program.
    verified_insns: Vec<(&'static str, Option<u32>)>,
    detached: bool,
}

impl std::fmt::Debug for EbpfCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfCapture")
            .field(
                "attachments",
                &self
                    .attachments
                    .iter()
                    .map(|a| (a.program, &a.iface))
                    .collect::<Vec<_>>(),
            )
            .field("our_clsact", &self.our_clsact)
            .finish_non_exhaustive()
    }
}

/// Explains an error of the load or attach steps in the terms a user can act on.
fn explain(e: impl Into<anyhow::Error>, what: &str) -> anyhow::Error {
    let e: anyhow::Error = e.into();
    let errno = e.chain().find_map(|c| {
        c.downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
    });
    let text = format!("{e:#}");
    let hint = if text.contains("Verifier output") {
        // The verifier says EACCES too: not a privilege problem.
        Some(
            "the kernel's verifier rejected it (its log follows); please report this with `uname -r`, \
             and use `--backend pcap` meanwhile",
        )
    } else if errno == Some(libc::EPERM)
        || errno == Some(libc::EACCES)
        || text.contains("Operation not permitted")
        || text.contains("Permission denied")
    {
        Some(
            "loading eBPF programs needs root (or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON); \
             run as root, or use `--backend pcap`",
        )
    } else if errno == Some(libc::ENOSYS) {
        Some("this kernel has no BPF support; use `--backend pcap`")
    } else if text.contains("BPF_MAP_TYPE_RINGBUF") || text.contains("map `events`") {
        Some("the eBPF backend needs Linux 5.8 or newer (BPF ring buffer); use `--backend pcap`")
    } else {
        None
    };
    match hint {
        Some(h) => e.context(format!("{what}: {h}")),
        None => e.context(what.to_owned()),
    }
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; raise it there.
fn raise_memlock() {
    if KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(5, 11, 0)) {
        return;
    }
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass; failure is reported by
    // the load that follows.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
}

/// CLOCK_REALTIME - CLOCK_BOOTTIME in nanoseconds, sampled between two
/// reads of the boot clock so that the error is half the sampling window.
fn boot_to_epoch_ns() -> i128 {
    fn boottime_ns() -> i128 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    }
    let b0 = boottime_ns();
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    let b1 = boottime_ns();
    real - (b0 + b1) / 2
}

/// The interface's index in the caller's network namespace (not sysfs,
/// which shows the namespace it was mounted in); None if there is none.
fn ifindex(iface: &str) -> Option<u32> {
    let name = std::ffi::CString::new(iface).ok()?;
    // SAFETY: a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// Every network namespace's loopback device has index 1 (LOOPBACK_IFINDEX).
fn is_loopback(iface: &str) -> bool {
    ifindex(iface) == Some(1)
}

impl EbpfCapture {
    /// Loads the programs with the options as their settings and attaches
    /// them. On failure nothing stays attached.
    pub fn attach(opts: &EbpfOptions) -> Result<Self> {
        if opts.ifaces.is_empty() {
            bail!("eBPF capture: no interface given");
        }
        for iface in &opts.ifaces {
            if ifindex(iface).is_none() {
                bail!("eBPF capture: no interface {iface:?}");
            }
        }
        let mut cap = Self::load(opts)?;
        // On error `cap` is dropped, which detaches what was attached.
        let tcx = match opts.attach_mode {
            AttachMode::Tcx => true,
            AttachMode::Netlink => false,
            AttachMode::Auto => {
                KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
            }
        };
        for iface in &opts.ifaces {
            cap.attach_iface(iface, tcx)?;
        }
        Ok(cap)
    }

    /// Loads the programs with the options as their settings, attached to
    /// nothing: [`EbpfCapture::test_run`] feeds them frames.
    pub fn load(opts: &EbpfOptions) -> Result<Self> {
        if !opts.all_ports && opts.ports.is_empty() {
            bail!("eBPF capture: no server port given (or ask for all ports)");
        }
        if opts.ports.len() > MAX_PORTS {
            bail!(
                "eBPF capture: at most {MAX_PORTS} server ports (got {}); use all ports instead",
                opts.ports.len()
            );
        }
        let mut ports = [0u16; MAX_PORTS];
        ports[..opts.ports.len()].copy_from_slice(&opts.ports);
        let nports = opts.ports.len() as u32;
        let all_ports = u8::from(opts.all_ports);
        let quic = u8::from(opts.quic);
        // A ring buffer is a power-of-two number of pages.
        let page = 4096u32;
        let ringbuf = opts
            .ringbuf_bytes
            .max(page)
            .checked_next_power_of_two()
            .context("ring buffer too large")?;

        raise_memlock();
        let mut ebpf = EbpfLoader::new()
            .override_global("ports", &ports, true)
            .override_global("nports", &nports, true)
            .override_global("all_ports", &all_ports, true)
            .override_global("quic", &quic, true)
            .override_global("max_payload_per_dir", &opts.max_payload_per_dir, true)
            .override_global("wakeup_bytes", &(ringbuf / WAKEUP_FRACTION), true)
            .map_max_entries("events", ringbuf)
            .load(BPF_OBJECT)
            .map_err(|e| explain(e, "cannot load the eBPF object"))?;

        let mut verified_insns = Vec::new();
        for (name, _) in PROGRAMS {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing from the eBPF object"))?
                .try_into()?;
            // The error carries the verifier log (aya ProgramError::LoadError).
            prog.load()
                .map_err(|e| explain(e, &format!("the kernel refused eBPF program {name}")))?;
            verified_insns.push((
                name,
                prog.info()
                    .ok()
                    .and_then(|i| i.verified_instruction_count()),
            ));
        }

        let events = RingBuf::try_from(ebpf.take_map("events").context("map events missing")?)?;
        let flows = BpfHashMap::try_from(ebpf.take_map("flows").context("map flows missing")?)?;
        let counters =
            PerCpuArray::try_from(ebpf.take_map("counters").context("map counters missing")?)?;

        Ok(Self {
            ebpf,
            events,
            flows,
            counters,
            attachments: Vec::new(),
            our_clsact: Vec::new(),
            boot_to_epoch_ns: boot_to_epoch_ns(),
            verified_insns,
            detached: false,
        })
    }

    /// Runs the ingress program once on an Ethernet frame
    /// (BPF_PROG_TEST_RUN): the same code and maps as on an interface, so
    /// tests can push whole captures through the kernel side. The kernel
    /// takes frames of up to about 3.5 KB this way (one page with skb
    /// headroom). Events land in the ring buffer; [`EbpfCapture::poll`]
    /// reads them.
    pub fn test_run(&mut self, frame: &[u8]) -> Result<()> {
        self.test_run_repeat(frame, 1).map(|_| ())
    }

    /// Runs the ingress program `repeat` times on one frame in the kernel
    /// (BPF_PROG_TEST_RUN) and returns the kernel's mean run time. Every
    /// run sees the same bytes, so this times one path of the program with
    /// its maps hot: a cost per packet to compare paths and builds with,
    /// not what a live packet costs.
    pub fn test_run_repeat(&mut self, frame: &[u8], repeat: u32) -> Result<Duration> {
        let prog: &SchedClassifier = self
            .ebpf
            .program(PROGRAMS[0].0)
            .context("ingress program missing")?
            .try_into()?;
        let fd = prog.fd()?.as_fd().as_raw_fd();
        // union bpf_attr, the `test` member (linux/bpf.h), up to ctx_out.
        #[repr(C)]
        #[derive(Default)]
        struct TestRun {
            prog_fd: u32,
            retval: u32,
            data_size_in: u32,
            data_size_out: u32,
            data_in: u64,
            data_out: u64,
            repeat: u32,
            duration: u32,
            ctx_size_in: u32,
            ctx_size_out: u32,
            ctx_in: u64,
            ctx_out: u64,
            flags: u32,
            cpu: u32,
            batch_size: u32,
            _pad: u32,
        }
        let mut attr = TestRun {
            prog_fd: fd as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat,
            ..Default::default()
        };
        const BPF_PROG_TEST_RUN: libc::c_long = 10;
        // SAFETY: attr is a valid, fully initialised bpf_attr prefix that
        // outlives the call (the kernel writes retval and duration back into
        // it); the kernel only reads `frame` through data_in.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestRun,
                std::mem::size_of::<TestRun>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error()).context("BPF_PROG_TEST_RUN");
        }
        Ok(Duration::from_nanos(attr.duration.into()))
    }

    fn attach_iface(&mut self, iface: &str, tcx: bool) -> Result<()> {
        if !tcx {
            match aya::programs::tc::qdisc_add_clsact(iface) {
                Ok(()) => self.our_clsact.push(iface.to_owned()),
                Err(aya::programs::tc::TcError::NetlinkError(e))
                    if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => {
                    return Err(explain(
                        e,
                        &format!("cannot add the clsact qdisc to {iface}"),
                    ))
                }
            }
        }
        let loopback = is_loopback(iface);
        for (name, hook) in PROGRAMS {
            // On loopback every packet passes egress and then ingress:
            // one hook sees everything once.
            if loopback && hook == TcAttachType::Ingress {
                continue;
            }
            let prog: &mut SchedClassifier = self
                .ebpf
                .program_mut(name)
                .context("program missing")?
                .try_into()?;
            let options = if tcx {
                // First in the chain: we see packets before anything that
                // might drop or rewrite them, and pass them on untouched.
                TcAttachOptions::TcxOrder(LinkOrder::first())
            } else {
                TcAttachOptions::Netlink(NlOptions::default())
            };
            let link = prog
                .attach_with_options(iface, hook, options)
                .map_err(|e| explain(e, &format!("cannot attach {name} to {iface}")))?;
            self.attachments.push(Attachment {
                program: name,
                iface: iface.to_owned(),
                link,
            });
        }
        Ok(())
    }

    /// Instructions the verifier processed for each program (Linux 5.16+).
    pub fn verified_instructions(&self) -> &[(&'static str, Option<u32>)] {
        &self.verified_insns
    }

    /// Waits up to `timeout` for events, then hands every available one to
    /// `f`. Returns the number of events. The kernel wakes this up early
    /// only when 1/[`WAKEUP_FRACTION`] of the ring buffer is pending, so
    /// fewer events wait out the timeout: keep it short (100 ms).
    pub fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        self.boot_to_epoch_ns = boot_to_epoch_ns();
        let mut n = self.drain(f);
        if n == 0 {
            let mut pfd = libc::pollfd {
                fd: self.events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e).context("poll on the eBPF ring buffer");
                }
            }
            n = self.drain(f);
        }
        Ok(n)
    }

    fn drain(&mut self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let offset = self.boot_to_epoch_ns;
        let mut n = 0;
        while let Some(item) = self.events.next() {
            let Some(header) = EventHeader::parse(&item) else {
                continue;
            };
            let end = (EVENT_HEADER_LEN + header.len as usize).min(item.len());
            let payload = &item[EVENT_HEADER_LEN..end];
            let ts = (i128::from(header.ts_ns) + offset) as f64 / 1e9;
            f(Event {
                ts,
                header: &header,
                payload,
            });
            n += 1;
        }
        n
    }

    /// Marks a flow done: the kernel forwards nothing more of it but
    /// FIN/RST. Works whichever direction `key` names.
    pub fn mark_done(&mut self, key: FlowTuple) -> Result<()> {
        let k = FlowKey::new(&key);
        // Read-modify-write: the kernel may add to the counters in between,
        // which only loses a few of those counts. A flow the LRU map evicted
        // is recreated as done, so it cannot start forwarding again.
        let mut state = match self.flows.get(&k, 0) {
            Ok(s) => s,
            Err(aya::maps::MapError::KeyNotFound) => FlowState::default(),
            Err(e) => return Err(e).context("reading the eBPF flow map"),
        };
        state.done = 1;
        self.flows
            .insert(k, state, 0)
            .context("updating the eBPF flow map")
    }

    /// The kernel's counters (summed over CPUs), by name.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>> {
        COUNTER_NAMES
            .iter()
            .enumerate()
            .map(|(i, &name)| {
                let v = self
                    .counters
                    .get(&(i as u32), 0)
                    .with_context(|| format!("reading counter {name}"))?;
                Ok((name, v.iter().copied().fold(0u64, u64::wrapping_add)))
            })
            .collect()
    }

    /// Removes our programs and any clsact qdisc we added.
    pub fn detach(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if self.detached {
            return Ok(());
        }
        self.detached = true;
        let mut errors = Vec::new();
        for a in self.attachments.drain(..) {
            let prog: Result<&mut SchedClassifier, _> = match self.ebpf.program_mut(a.program) {
                Some(p) => p.try_into().map_err(anyhow::Error::from),
                None => Err(anyhow::anyhow!("program {} missing", a.program)),
            };
            if let Err(e) = prog.and_then(|p| p.detach(a.link).map_err(anyhow::Error::from)) {
                errors.push(format!("{} on {}: {e:#}", a.program, a.iface));
            }
        }
        for iface in self.our_clsact.drain(..) {
            if let Err(e) = netlink::remove_clsact_if_unused(&iface) {
                errors.push(format!("removing the clsact qdisc of {iface}: {e:#}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("eBPF detach: {}", errors.join("; "))
        }
    }
}

impl Drop for EbpfCapture {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e:#}");
        }
    }
}

/// The one rtnetlink job aya does not do: removing a clsact qdisc, and
/// only when no filter is left on it (someone else may have added some
/// after we created it).
mod netlink {
    use super::*;

    const RTM_DELQDISC: u16 = 37;
    const RTM_NEWTFILTER: u16 = 44;
    const RTM_GETTFILTER: u16 = 46;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_ACK: u16 = 0x4;
    const NLM_F_DUMP: u16 = 0x300;
    const TCA_KIND: u16 = 1;
    const TC_H_CLSACT: u32 = 0xffff_fff1;
    const TC_H_MIN_INGRESS: u32 = 0xfff2;
    const TC_H_MIN_EGRESS: u32 = 0xfff3;
    const NLMSG_HDRLEN: usize = 16;
    const TCMSG_LEN: usize = 20;

    struct Socket(OwnedFd);

    impl Socket {
        fn open() -> io::Result<Self> {
            // SAFETY: plain syscall; the fd is owned right away.
            let fd = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::NETLINK_ROUTE,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: fd is a fresh descriptor nobody else owns.
            Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        fn send(&self, msg: &[u8]) -> io::Result<()> {
            // SAFETY: msg is valid for its length; the kernel is the peer.
            let r = unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        /// Reads replies until the ACK (or NLMSG_DONE of a dump); returns
        /// how many messages of type `count_type` came.
        fn replies(&self, count_type: u16) -> io::Result<usize> {
            let mut buf = vec![0u8; 32 * 1024];
            let mut counted = 0;
            loop {
                // SAFETY: buf is valid for writes of its length.
                let r = unsafe {
                    libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0)
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                let mut msgs = &buf[..r as usize];
                while msgs.len() >= NLMSG_HDRLEN {
                    let len = u32::from_ne_bytes(msgs[0..4].try_into().expect("4 bytes")) as usize;
                    let ty = u16::from_ne_bytes(msgs[4..6].try_into().expect("2 bytes"));
                    if len < NLMSG_HDRLEN || len > msgs.len() {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "bad netlink message",
                        ));
                    }
                    match ty {
                        NLMSG_ERROR => {
                            let code = msgs
                                .get(16..20)
                                .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                                .unwrap_or(-libc::EINVAL);
                            return if code == 0 {
                                Ok(counted)
                            } else {
                                Err(io::Error::from_raw_os_error(-code))
                            };
                        }
                        NLMSG_DONE => return Ok(counted),
                        t if t == count_type => counted += 1,
                        _ => {}
                    }
                    msgs = &msgs[(len + 3) & !3..];
                    if msgs.len() < NLMSG_HDRLEN {
                        break;
                    }
                }
            }
        }
    }

    fn request(
        ty: u16,
        flags: u16,
        ifindex: i32,
        handle: u32,
        parent: u32,
        kind: Option<&str>,
    ) -> Vec<u8> {
        let mut m = Vec::with_capacity(64);
        m.extend_from_slice(&0u32.to_ne_bytes()); // length, set below
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&1u32.to_ne_bytes()); // seq
        m.extend_from_slice(&0u32.to_ne_bytes()); // pid
                                                  // struct tcmsg
        m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&handle.to_ne_bytes());
        m.extend_from_slice(&parent.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes()); // tcm_info
        debug_assert_eq!(m.len(), NLMSG_HDRLEN + TCMSG_LEN);
        if let Some(kind) = kind {
            let len = 4 + kind.len() + 1;
            m.extend_from_slice(&(len as u16).to_ne_bytes());
            m.extend_from_slice(&TCA_KIND.to_ne_bytes());
            m.extend_from_slice(kind.as_bytes());
            m.push(0);
            while m.len() % 4 != 0 {
                m.push(0);
            }
        }
        let total = m.len() as u32;
        m[0..4].copy_from_slice(&total.to_ne_bytes());
        m
    }

    fn ifindex(iface: &str) -> Result<i32> {
        super::ifindex(iface)
            .map(|i| i as i32)
            .with_context(|| format!("no interface {iface:?}"))
    }

    /// Filters on the clsact hooks of `iface` (ours already removed).
    fn filters(iface: &str) -> Result<usize> {
        let idx = ifindex(iface)?;
        let mut n = 0;
        for min in [TC_H_MIN_INGRESS, TC_H_MIN_EGRESS] {
            let sock = Socket::open()?;
            let parent = (TC_H_CLSACT & 0xffff_0000) | min;
            sock.send(&request(
                RTM_GETTFILTER,
                NLM_F_REQUEST | NLM_F_DUMP,
                idx,
                0,
                parent,
                None,
            ))?;
            n += sock.replies(RTM_NEWTFILTER)?;
        }
        Ok(n)
    }

    pub(super) fn remove_clsact_if_unused(iface: &str) -> Result<()> {
        let left = filters(iface)?;
        if left > 0 {
            log::info!("keeping the clsact qdisc of {iface}: {left} filters of others are on it");
            return Ok(());
        }
        let sock = Socket::open()?;
        let idx = ifindex(iface)?;
        sock.send(&request(
            RTM_DELQDISC,
            NLM_F_REQUEST | NLM_F_ACK,
            idx,
            0xffff_0000,
            TC_H_CLSACT,
            Some("clsact"),
        ))?;
        sock.replies(0).map(|_| ()).context("RTM_DELQDISC")
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(size_of::<FlowState>(), 104);
        assert_eq!(offset_of!(FlowState, done), 16);
        assert_eq!(offset_of!(FlowState, initiator), 20);
        assert_eq!(offset_of!(FlowState, quic_short), 21);
        assert_eq!(offset_of!(FlowState, dir), 24);
        assert_eq!(size_of::<DirState>(), 40);
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
    }

    /// The C header's own numbers, read from the source: the two sides
    /// cannot drift apart without this test noticing.
    #[test]
    fn c_header_asserts_the_same_numbers() {
        let h = include_str!("../../bpf/tlsrum.h");
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
        assert!(h.contains(&format!("#define TLSRUM_RECORDS_PER_DIR\t{RECORDS_PER_DIR}")));
        // The kernel stops a flow one record after the analyzer would
        // have finished it, and fills no more than its record layer takes.
        assert_eq!(RECORDS_PER_DIR, analyzer::caps::MAX_RECORDS_PER_DIR);
        assert_eq!(MAX_FILL, analyzer::tls::record::MAX_RECORD_PAYLOAD);
    }

    fn header(
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
    fn a_fill_follows_the_header_and_takes_the_fin() {
        let mut h = header(0, 0x11, 1000, 1448, 100, 5);
        h.fill = 16401;
        let bytes = [23u8, 3, 3, 0x40, 0x11];
        let ev = Event { ts: 1.0, header: &h, payload: &bytes };
        let got: Vec<Packet<'_>> = ev.datagrams().collect();
        assert_eq!(got.len(), 2);
        let tcp = |p: &Packet<'_>| match p.transport {
            Transport::Tcp(t) => t,
            _ => panic!("not TCP"),
        };
        assert_eq!(got[0].payload, &bytes);
        assert_eq!(tcp(&got[0]).seq, 1100);
        assert!(!tcp(&got[0]).fin);
        assert_eq!(got[1].payload.len(), 16401);
        assert!(got[1].payload.iter().all(|&b| b == 0));
        assert_eq!(tcp(&got[1]).seq, 1105);
        assert_eq!(tcp(&got[1]).ack, 7);
        assert!(tcp(&got[1]).fin);
        assert!(!got[0].truncated && !got[1].truncated);

        // A header-only event for a segment already delivered: one
        // empty packet, not truncated, after the segment's bytes.
        let mut h = header(EV_SEEN, 0x10, 5000, 1448, 1448, 0);
        h.fill = 0;
        let ev = Event { ts: 1.0, header: &h, payload: &[] };
        let got: Vec<Packet<'_>> = ev.datagrams().collect();
        assert_eq!(got.len(), 1);
        assert!(got[0].payload.is_empty() && !got[0].truncated);
        assert_eq!(tcp(&got[0]).seq, 6448);
    }

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
    fn chunks_of_a_big_segment_continue_the_sequence() {
        // SYN+data split in two: the second chunk starts after the SYN's
        // sequence number and does not repeat SYN; FIN only at the end.
        let first = header(0, 0x02 | 0x01, 1000, 20000, 0, 16384);
        let second = header(0, 0x02 | 0x01, 1000, 20000, 16384, 3616);
        let data = [0u8; 16384];
        let p1 = Event {
            ts: 0.0,
            header: &first,
            payload: &data,
        }
        .to_packet();
        let p2 = Event {
            ts: 0.0,
            header: &second,
            payload: &data[..3616],
        }
        .to_packet();
        let (Transport::Tcp(t1), Transport::Tcp(t2)) = (p1.transport, p2.transport) else {
            panic!("tcp")
        };
        assert_eq!((t1.seq, t1.syn, t1.fin), (1000, true, false));
        assert_eq!((t2.seq, t2.syn, t2.fin), (1000 + 16384 + 1, false, true));
        assert_eq!(p1.src, "192.0.2.2".parse::<IpAddr>().unwrap());
        assert!(!p1.truncated && !p2.truncated);

        // Without SYN, seq + offset, wrapping.
        let h = header(EV_CUT, 0x10, u32::MAX - 10, 40000, 16384, 100);
        let p = Event {
            ts: 0.0,
            header: &h,
            payload: &data[..100],
        }
        .to_packet();
        let Transport::Tcp(t) = p.transport else {
            panic!("tcp")
        };
        assert_eq!(t.seq, (u32::MAX - 10).wrapping_add(16384));
        assert!(p.truncated);
    }

    #[test]
    fn gso_udp_batches_split_into_datagrams() {
        let mut h = header(0, 0, 0, 2500, 0, 2500);
        h.l4_proto = 17;
        h.gso_size = 1200;
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let ev = Event {
            ts: 0.0,
            header: &h,
            payload: &data,
        };
        let d: Vec<_> = ev.datagrams().collect();
        assert_eq!(
            d.iter().map(|p| p.payload.len()).collect::<Vec<_>>(),
            vec![1200, 1200, 100]
        );
        assert!(d.iter().all(|p| !p.truncated));
        assert_eq!(d[1].payload[0], 1200u32 as u8);
        // Straddling the chunk boundary: the pieces are marked truncated.
        let mut h2 = h;
        h2.payload_len = 40000;
        h2.offset = 16384;
        h2.len = 2000;
        let ev = Event {
            ts: 0.0,
            header: &h2,
            payload: &data[..2000],
        };
        let d: Vec<_> = ev.datagrams().collect();
        assert_eq!(
            d.iter().map(|p| p.payload.len()).collect::<Vec<_>>(),
            vec![416, 1200, 384]
        );
        assert_eq!(
            d.iter().map(|p| p.truncated).collect::<Vec<_>>(),
            vec![true, false, true]
        );
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
