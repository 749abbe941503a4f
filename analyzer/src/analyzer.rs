//! The pipeline: decoded packets -> flows -> reassembled handshake bytes ->
//! TLS events -> classification and timing -> connection records.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use lru::LruCache;
use crate::counters::Stats;

use crate::classify::{leaf_names, Dir, State, TlsHandshake, TraceMemory};
use crate::flow::reassembly::{seq_diff, Reassembler, Segment, DEFAULT_MAX_BUFFERED};
use crate::flow::table::{Endpoint, FlowKey, FlowTable};
use crate::record::{endpoint, ConnectionRecord, Transport as RecordTransport};
use crate::timing::{fully_timed, handshake_bytes, timing, TcpHandshake};
use crate::tls::enums::content_type as ct;
use crate::tls::record::{Chunk, RecordStream, StreamEvent, DEFAULT_MAX_HANDSHAKE_MESSAGE};
use crate::wire::{self, DecodeError, LinkType, Packet, TcpHeader, Transport};

/// Every cap the analyzer enforces; hitting one is counted in [`Stats`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Flows tracked at once; the least recently used is evicted beyond this.
    pub max_flows: usize,
    /// Out-of-order bytes buffered per direction of a flow.
    pub max_flow_buffer: usize,
    /// Largest handshake message kept for parsing.
    pub max_handshake_message: usize,
    /// A flow with no packet for this long (capture time, seconds) is finished.
    pub idle_timeout: f64,
    /// When not empty, only flows to these ports are examined.
    pub server_ports: Vec<u16>,
    /// Server-issued session IDs remembered (as hashes) to recognise offers.
    pub max_session_ids: usize,
    /// Keep a list of finished flows for `take_finished_flows` (live capture
    /// uses it to stop the kernel sending them; replay does not need it).
    pub report_finished_flows: bool,
    /// TLS secrets (SSLKEYLOGFILE) to read TLS 1.3 EncryptedExtensions:
    /// early data `accepted`/`rejected` instead of `attempted`.
    pub keylog: Option<std::sync::Arc<crate::tls::keylog::KeyLog>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_flows: 200_000,
            max_flow_buffer: DEFAULT_MAX_BUFFERED,
            max_handshake_message: DEFAULT_MAX_HANDSHAKE_MESSAGE,
            idle_timeout: 120.0,
            server_ports: Vec::new(),
            max_session_ids: 100_000,
            report_finished_flows: false,
            keylog: None,
        }
    }
}

/// Segments (per direction) inspected for a ClientHello before a flow is
/// declared not TLS. More than one allows STARTTLS, SOCKS and proxies.
const DETECT_MAX_SEGMENTS: u8 = 16;

/// Collects the first bytes of a segment to see if a TLS ClientHello starts there.
#[derive(Debug, Default)]
struct Probe {
    bytes: Vec<u8>,
    start: Option<(u32, f64, Option<u32>)>,
    tries: u8,
}

enum ProbeResult {
    NeedMore,
    NotHello,
    Hello,
}

/// TLS record header of a ClientHello, or an SSLv2 CLIENT-HELLO.
fn looks_like_client_hello(b: &[u8]) -> bool {
    let tls = b[0] == ct::HANDSHAKE && b[1] == 3 && b[2] <= 4 && b[5] == 1;
    let v2 = b[0] & 0x80 != 0 && b[2] == 1 && (b[3] == 3 || b[3] == 0 || b[3] == 2);
    tls || v2
}

impl Probe {
    fn feed(&mut self, c: &Chunk<'_>) -> ProbeResult {
        if self.start.is_none() {
            self.start = Some((c.seq, c.ts, c.ack));
            self.tries = self.tries.saturating_add(1);
        }
        let n = (6 - self.bytes.len()).min(c.data.len());
        self.bytes.extend_from_slice(&c.data[..n]);
        if self.bytes.len() < 6 {
            return ProbeResult::NeedMore;
        }
        if looks_like_client_hello(&self.bytes) {
            ProbeResult::Hello
        } else {
            self.bytes.clear();
            self.start = None;
            ProbeResult::NotHello
        }
    }
}

/// State kept while a flow's handshake is being followed; dropped once
/// the connection's record is out.
struct Active {
    reasm: [Reassembler; 2],
    stream: [RecordStream; 2],
    probe: [Probe; 2],
    /// Index of the direction that sent the ClientHello.
    client: Option<usize>,
    hs: TlsHandshake,
    notes: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Detecting,
    Tls,
    /// The record is out; later packets are ignored.
    Done,
    NotTls,
}

struct Flow {
    /// The endpoint that sent the first packet seen; direction 0 is a -> b.
    a: Endpoint,
    b: Endpoint,
    first_ts: f64,
    last_ts: f64,
    tcp: TcpHandshake,
    syn_dir: Option<usize>,
    server_isn: Option<u32>,
    fin: [bool; 2],
    status: Status,
    active: Option<Box<Active>>,
}

/// Leaf certificates whose names are remembered.
const CERT_CACHE: usize = 4096;

/// What one trace remembers across connections, bounded: hashes of session
/// IDs servers issued, and the names of leaf certificates already parsed.
struct IssuedIds {
    ids: LruCache<u64, ()>,
    certs: LruCache<u64, (Option<String>, Option<String>)>,
    keylog: Option<std::sync::Arc<crate::tls::keylog::KeyLog>>,
}

impl IssuedIds {
    fn hash(id: &[u8]) -> u64 {
        let mut h = DefaultHasher::new();
        id.hash(&mut h);
        h.finish()
    }
}

impl TraceMemory for IssuedIds {
    fn was_issued(&self, id: &[u8]) -> bool {
        self.ids.contains(&Self::hash(id))
    }
    fn issued(&mut self, id: &[u8]) {
        self.ids.put(Self::hash(id), ());
    }
    fn server_handshake_secret(&self, client_random: &[u8; 32]) -> Option<Vec<u8>> {
        self.keylog.as_ref()?.get(client_random)?.server_handshake.clone()
    }
    fn leaf_names(&mut self, der: &[u8]) -> (Option<String>, Option<String>) {
        let h = Self::hash(der);
        if let Some(names) = self.certs.get(&h) {
            return names.clone();
        }
        let names = leaf_names(der);
        self.certs.put(h, names.clone());
        names
    }
}

/// Passive TLS handshake analysis over a stream of timestamped frames.
///
/// ```
/// use analyzer::{Analyzer, Config, wire::LinkType};
/// let mut a = Analyzer::new(Config::default());
/// a.push_frame(1.0, LinkType::RawIp, &[0x45, 0, 0, 20]); // too short: counted, not fatal
/// a.finish();
/// assert!(a.take_records().is_empty());
/// assert_eq!(a.stats().packets, 1);
/// ```
pub struct Analyzer {
    cfg: Config,
    flows: FlowTable<Flow>,
    issued: IssuedIds,
    out: Vec<ConnectionRecord>,
    /// Flows whose analysis ended (record out, or not TLS) since the last
    /// `take_finished_flows`: a kernel-side filter can stop sending them.
    finished: Vec<(Endpoint, Endpoint)>,
    stats: Stats,
    last_sweep: f64,
    quic: crate::quic::QuicTracker,
}

enum Finish {
    CaptureEnd,
    Evicted,
    Expired,
    Closed,
    Timed,
}

impl Analyzer {
    pub fn new(cfg: Config) -> Self {
        let ids = std::num::NonZeroUsize::new(cfg.max_session_ids.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        Analyzer {
            flows: FlowTable::new(cfg.max_flows),
            issued: IssuedIds {
                ids: LruCache::new(ids),
                certs: LruCache::new(std::num::NonZeroUsize::new(CERT_CACHE).unwrap_or(std::num::NonZeroUsize::MIN)),
                keylog: cfg.keylog.clone(),
            },
            out: Vec::new(),
            finished: Vec::new(),
            stats: Stats::default(),
            last_sweep: f64::MIN,
            quic: crate::quic::QuicTracker::new(cfg.max_flows, cfg.idle_timeout).with_keylog(cfg.keylog.clone()),
            cfg,
        }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// TCP flows and QUIC connections in the tables.
    pub fn active_flows(&self) -> usize {
        self.flows.len() + self.quic.active_connections()
    }

    /// Records finished since the last call, in the order they finished.
    pub fn take_records(&mut self) -> Vec<ConnectionRecord> {
        std::mem::take(&mut self.out)
    }

    /// Endpoint pairs of flows finished since the last call (either order).
    pub fn take_finished_flows(&mut self) -> Vec<(Endpoint, Endpoint)> {
        std::mem::take(&mut self.finished)
    }

    /// Decodes and processes one captured frame.
    pub fn push_frame(&mut self, ts: f64, link: LinkType, frame: &[u8]) {
        match wire::decode(link, frame) {
            Ok(p) => self.push_packet(ts, &p),
            Err(e) => {
                self.stats.packets += 1;
                self.stats.bytes += frame.len() as u64;
                match e {
                    DecodeError::NotIp => self.stats.not_ip += 1,
                    DecodeError::Fragment => self.stats.ip_fragments += 1,
                    DecodeError::OtherTransport => self.stats.other_transport += 1,
                    _ => self.stats.malformed_packets += 1,
                }
            }
        }
    }

    /// Processes one decoded packet.
    pub fn push_packet(&mut self, ts: f64, p: &Packet<'_>) {
        self.stats.packets += 1;
        self.stats.bytes += p.payload.len() as u64;
        if ts > self.last_sweep + 1.0 {
            self.expire_idle(ts);
            self.last_sweep = ts;
        }
        match p.transport {
            Transport::Tcp(h) => {
                self.stats.tcp_packets += 1;
                self.tcp(ts, p.src, p.dst, &h, p.payload, p.truncated);
            }
            Transport::Udp { src_port, dst_port } => {
                self.stats.udp_packets += 1;
                if self.wanted(src_port, dst_port) {
                    self.quic.on_datagram(ts, (p.src, src_port), (p.dst, dst_port), p.payload, &mut self.stats.quic);
                    self.out.append(&mut self.quic.out);
                }
            }
        }
    }

    /// Advances the clock without a packet (live capture on a quiet link):
    /// flows idle longer than the idle timeout are finished.
    pub fn tick(&mut self, now: f64) {
        self.expire_idle(now);
        self.last_sweep = now;
    }

    /// End of input: every flow still open is finished (as `incomplete` if
    /// its handshake had not ended).
    pub fn finish(&mut self) {
        while let Some((_, flow)) = self.flows.pop_oldest() {
            self.finish_flow(flow, Finish::CaptureEnd);
        }
        self.quic.finish_all(&mut self.stats.quic);
        self.out.append(&mut self.quic.out);
    }

    fn wanted(&self, src_port: u16, dst_port: u16) -> bool {
        self.cfg.server_ports.is_empty()
            || self.cfg.server_ports.contains(&src_port)
            || self.cfg.server_ports.contains(&dst_port)
    }

    fn tcp(&mut self, ts: f64, src: IpAddr, dst: IpAddr, h: &TcpHeader, payload: &[u8], truncated: bool) {
        if !self.wanted(h.src_port, h.dst_port) {
            return;
        }
        let (from, to) = ((src, h.src_port), (dst, h.dst_port));
        let key = FlowKey::new(from, to);
        let new_syn = h.syn && !h.ack_flag;
        // One lookup on the hot path: most packets belong to flows whose
        // record is out (bulk data) and are skipped here.
        // Finished flows are not promoted in the LRU order: they only need
        // to outlive their own stragglers, and promotion costs cache misses.
        let mut known = false;
        if let Some(f) = self.flows.peek_mut(&key) {
            known = true;
            f.last_ts = ts;
            if matches!(f.status, Status::Done | Status::NotTls) {
                // A fresh SYN on a finished tuple is a new connection (port reuse).
                if new_syn && f.syn_dir.is_some() && f.tcp.syn_ack.is_some() {
                    self.flows.remove(&key);
                    known = false;
                } else {
                    if h.rst || h.fin {
                        self.flows.remove(&key);
                    }
                    return;
                }
            } else if new_syn && f.status == Status::Tls && f.syn_dir.is_some() && f.tcp.syn_ack.is_some() {
                if let Some(old) = self.flows.remove(&key) {
                    self.finish_flow(old, Finish::Closed);
                }
                known = false;
            }
        }
        if !known {
            // Only a SYN or a segment with data starts tracking: stray ACKs,
            // FINs and resets of unknown flows cost nothing.
            if !new_syn && payload.is_empty() {
                return;
            }
            self.stats.flows_created += 1;
            let flow = self.new_flow(ts, from, to);
            if let Some((_, evicted)) = self.flows.insert(key, flow) {
                self.stats.flows_evicted += 1;
                self.finish_flow(evicted, Finish::Evicted);
            }
        }
        let Some(flow) = self.flows.get_mut(&key) else { return };
        let dir = usize::from(from != flow.a);
        track_tcp_handshake(flow, dir, ts, h);
        let outcome = Self::payload(flow, dir, ts, h, payload, truncated, &mut self.issued, &mut self.stats);
        // A FIN is a half-close: the peer may still finish the handshake
        // (a False Start client can close first). Both FINs, or a RST, end it.
        flow.fin[dir] |= h.fin;
        let closed = h.rst || flow.fin == [true, true];
        if closed {
            if let Some(act) = flow.active.as_mut() {
                act.hs.on_close(h.rst);
            }
        }
        let timed = flow.active.as_ref().is_some_and(|a| {
            (a.client.is_some() && fully_timed(&a.hs)) || a.hs.records_overflowed
        });
        if outcome == Status::NotTls {
            self.stats.non_tls_flows += 1;
            flow.status = Status::NotTls;
            flow.active = None;
            if self.cfg.report_finished_flows {
                self.finished.push((flow.a, flow.b));
            }
            if closed {
                self.flows.remove(&key);
            }
        } else if closed || timed {
            if let Some(flow) = self.flows.remove(&key) {
                let reason = if timed { Finish::Timed } else { Finish::Closed };
                let done = self.finish_flow(flow, reason);
                // Keep a tombstone so the rest of the connection is skipped cheaply.
                if !closed {
                    if let Some((_, evicted)) = self.flows.insert(key, done) {
                        self.stats.flows_evicted += 1;
                        self.finish_flow(evicted, Finish::Evicted);
                    }
                }
            }
        }
    }

    fn new_flow(&self, ts: f64, from: Endpoint, to: Endpoint) -> Flow {
        let reasm = || Reassembler::new(self.cfg.max_flow_buffer);
        let stream = || RecordStream::new(self.cfg.max_handshake_message);
        Flow {
            a: from,
            b: to,
            first_ts: ts,
            last_ts: ts,
            tcp: TcpHandshake::default(),
            syn_dir: None,
            server_isn: None,
            fin: [false; 2],
            status: Status::Detecting,
            active: Some(Box::new(Active {
                reasm: [reasm(), reasm()],
                stream: [stream(), stream()],
                probe: [Probe::default(), Probe::default()],
                client: None,
                hs: TlsHandshake::default(),
                notes: Vec::new(),
            })),
        }
    }

    /// Feeds a segment's payload through reassembly, detection and the
    /// record layer. Returns the flow's status afterwards.
    #[allow(clippy::too_many_arguments)]
    fn payload(
        flow: &mut Flow,
        dir: usize,
        ts: f64,
        h: &TcpHeader,
        payload: &[u8],
        truncated: bool,
        issued: &mut IssuedIds,
        stats: &mut Stats,
    ) -> Status {
        let Some(act) = flow.active.as_deref_mut() else { return flow.status };
        if h.ack_flag {
            Self::skip_capture_loss(act, &mut flow.status, 1 - dir, h.ack, issued, stats);
            if let Some(c) = act.client {
                let side = if c == dir { Dir::Client } else { Dir::Server };
                act.hs.on_ack(side, ts, h.ack);
            }
        }
        if payload.is_empty() {
            return flow.status;
        }
        if truncated {
            stats.truncated_segments += 1;
        }
        let Active { reasm, stream, probe, client, hs, notes } = act;
        let mut status = flow.status;
        // Data on a SYN (TCP Fast Open) starts after the SYN's sequence number.
        let seq = if h.syn { h.seq.wrapping_add(1) } else { h.seq };
        let seg = Segment { seq, data: payload, ts, ack: h.ack_flag.then_some(h.ack) };
        let mut handle = |c: Chunk<'_>| {
            handle_chunk(&mut status, probe, stream, hs, notes, client, dir, c, issued, stats)
        };
        let out = reasm[dir].push(seg, truncated, &mut handle);
        stats.retransmitted_bytes += out.duplicate_bytes as u64;
        if out.gap {
            stats.reassembly_gaps += 1;
            let client_side = *client == Some(dir) || (client.is_none() && flow.syn_dir == Some(dir));
            notes.push(if client_side { "client_gap" } else { "server_gap" });
        }
        flow.status = status;
        status
    }

    /// The peer acknowledged bytes of direction `dir` that the capture never
    /// showed: skip the hole and tell the record layer what was lost.
    fn skip_capture_loss(act: &mut Active, status: &mut Status, dir: usize, ack: u32, issued: &mut IssuedIds, stats: &mut Stats) {
        if *status != Status::Tls {
            return;
        }
        let Active { reasm, stream, probe, client, hs, notes } = act;
        let mut lost = None;
        let mut pending = Vec::new();
        if let Some(hole) = reasm[dir].acked(ack, &mut |c| pending.push((c.data.to_vec(), c.seq, c.ts, c.ack))) {
            lost = Some(hole);
        }
        let Some((_, n)) = lost else { return };
        stats.capture_loss_bytes += n as u64;
        notes.push(if *client == Some(dir) { "client_capture_loss" } else { "server_capture_loss" });
        if stream[dir].lost(n).is_err() {
            stats.stream_errors += 1;
        }
        for (data, seq, ts, ack) in &pending {
            let c = Chunk { data, seq: *seq, ts: *ts, ack: *ack };
            handle_chunk(status, probe, stream, hs, notes, client, dir, c, issued, stats);
        }
    }

    fn expire_idle(&mut self, now: f64) {
        self.quic.expire_idle(now, &mut self.stats.quic);
        self.out.append(&mut self.quic.out);
        while let Some((_, f)) = self.flows.oldest() {
            if f.last_ts + self.cfg.idle_timeout >= now {
                break;
            }
            if let Some((_, flow)) = self.flows.pop_oldest() {
                if flow.status == Status::Tls {
                    self.stats.flows_expired += 1;
                }
                self.finish_flow(flow, Finish::Expired);
            }
        }
    }

    /// Emits the flow's record if it is a TLS connection whose record is
    /// not out yet; returns the flow as a tombstone.
    fn finish_flow(&mut self, mut flow: Flow, why: Finish) -> Flow {
        if let (Status::Tls, Some(act)) = (flow.status, flow.active.take()) {
            let mut act = *act;
            act.hs.settle();
            if flow.fin.contains(&true) {
                act.hs.on_close(false);
            }
            if let Some(client_dir) = act.client {
                match why {
                    Finish::CaptureEnd if !act.hs.is_over() => act.notes.push("capture_ended"),
                    Finish::Evicted if !act.hs.is_over() => act.notes.push("evicted"),
                    Finish::Expired if !act.hs.is_over() => act.notes.push("idle_timeout"),
                    _ => {}
                }
                if act.hs.records_overflowed {
                    self.stats.record_limit_hits += 1;
                    act.notes.push("record_limit");
                }
                // Bytes still waiting behind a hole the capture never filled
                // (a connection finished because it is fully timed may
                // simply have the rest of a segment in flight).
                let timed = matches!(why, Finish::Timed);
                for (d, r) in act.reasm.iter().enumerate() {
                    if !timed && r.buffered() > 0 && !r.has_gap() {
                        act.notes.push(if d == client_dir { "client_gap" } else { "server_gap" });
                    }
                }
                if flow.tcp.syn.is_none() {
                    act.notes.push("no_syn");
                }
                if act.hs.client_hello_lost {
                    act.notes.push("client_hello_lost");
                }
                if act.hs.early_data_accepted.is_some() {
                    act.notes.push("decrypted_with_keylog");
                }
                if act.hs.false_start {
                    act.notes.push("false_start");
                }
                self.stats.tls_connections += 1;
                self.stats.handshake_parse_errors += act.hs.parse_errors as u64;
                let (client, server) = if client_dir == 0 { (flow.a, flow.b) } else { (flow.b, flow.a) };
                self.out.push(build_record(&act, &flow, client, server));
            }
        }
        if self.cfg.report_finished_flows && flow.status != Status::Done && flow.status != Status::NotTls {
            self.finished.push((flow.a, flow.b));
        }
        flow.status = Status::Done;
        flow.active = None;
        flow
    }
}

/// Routes in-order bytes of one direction: to the ClientHello detector
/// until TLS is recognised, then to that direction's record layer.
#[allow(clippy::too_many_arguments)]
fn handle_chunk(
    status: &mut Status,
    probe: &mut [Probe; 2],
    stream: &mut [RecordStream; 2],
    hs: &mut TlsHandshake,
    notes: &mut Vec<&'static str>,
    client: &mut Option<usize>,
    dir: usize,
    c: Chunk<'_>,
    issued: &mut IssuedIds,
    stats: &mut Stats,
) {
    if *status == Status::Detecting {
        match probe[dir].feed(&c) {
            ProbeResult::NeedMore => return,
            ProbeResult::NotHello => {
                if probe[dir].tries >= DETECT_MAX_SEGMENTS {
                    *status = Status::NotTls;
                }
                return;
            }
            ProbeResult::Hello => {
                *status = Status::Tls;
                *client = Some(dir);
                let p = std::mem::take(&mut probe[dir]);
                let (seq, ts, ack) = p.start.unwrap_or((c.seq, c.ts, c.ack));
                // Bytes of the hello that came in earlier chunks.
                let already = (seq_diff(c.seq, seq).max(0) as usize).min(p.bytes.len());
                // Replay the probed bytes, then the rest of this chunk.
                let head = Chunk { data: &p.bytes[..already], seq, ts, ack };
                feed_stream(stream, hs, notes, *client, dir, head, issued, stats);
                feed_stream(stream, hs, notes, *client, dir, c, issued, stats);
                return;
            }
        }
    }
    if *status == Status::Tls {
        feed_stream(stream, hs, notes, *client, dir, c, issued, stats);
    }
}

fn track_tcp_handshake(flow: &mut Flow, dir: usize, ts: f64, h: &TcpHeader) {
    let Some(act) = flow.active.as_deref_mut() else { return };
    if h.syn && !h.ack_flag {
        if flow.tcp.syn_ack.is_none() {
            flow.tcp.syn = Some(ts);
            flow.syn_dir = Some(dir);
        }
        act.reasm[dir].start_at(h.seq.wrapping_add(1));
        act.reasm[dir].restart_at(h.seq.wrapping_add(1));
    } else if h.syn && h.ack_flag {
        // The last SYN-ACK before the handshake's ACK is the one that counts.
        if flow.tcp.ack.is_none() && flow.syn_dir == Some(1 - dir) {
            flow.tcp.syn_ack.get_or_insert(ts);
            flow.server_isn = Some(h.seq);
        }
        act.reasm[dir].start_at(h.seq.wrapping_add(1));
        act.reasm[dir].restart_at(h.seq.wrapping_add(1));
    } else if h.ack_flag
        && flow.tcp.ack.is_none()
        && flow.syn_dir == Some(dir)
        && flow.server_isn.is_some_and(|isn| h.ack == isn.wrapping_add(1))
    {
        flow.tcp.ack = Some(ts);
    }
}

#[allow(clippy::too_many_arguments)]
fn feed_stream(
    stream: &mut [RecordStream; 2],
    hs: &mut TlsHandshake,
    notes: &mut Vec<&'static str>,
    client: Option<usize>,
    dir: usize,
    chunk: Chunk<'_>,
    issued: &mut IssuedIds,
    stats: &mut Stats,
) {
    if chunk.data.is_empty() {
        return;
    }
    let side = if client == Some(dir) { Dir::Client } else { Dir::Server };
    let chunk_seq = chunk.seq;
    let mut tls13_known = false;
    let res = stream[dir].push(chunk, &mut |ev| match ev {
        StreamEvent::Record(r) => hs.on_record(side, r),
        StreamEvent::Handshake { msg_type, body, record, .. } => {
            hs.on_message(side, msg_type, body, record, issued);
            tls13_known = hs.version().is_some();
        }
        StreamEvent::Alert { level, description, .. } => hs.on_alert(level, description),
        StreamEvent::Sslv2 { msg_type, body, record } => hs.on_sslv2(side, msg_type, body, record),
        StreamEvent::Encrypted { header, payload, .. } => {
            if side == Dir::Server {
                hs.on_server_encrypted(&header, payload);
            }
        }
    });
    // With a key log entry for this ClientHello, keep the server's first
    // encrypted record (TLS 1.3 EncryptedExtensions) whole to read it.
    if side == Dir::Client && hs.server_handshake_secret.is_none() {
        if let Some(secret) = hs.client_hello.as_ref().and_then(|ch| issued.server_handshake_secret(&ch.random)) {
            hs.server_handshake_secret = Some(secret);
            stream[1 - dir].capture_encrypted = true;
        }
    }
    if tls13_known && !hs.is_tls13() {
        // TLS <= 1.2: after a side's ChangeCipherSpec its records are encrypted.
        stream[0].ccs_encrypts = true;
        stream[1].ccs_encrypts = true;
    }
    if let Err(e) = &res {
        if std::env::var_os("TLSRUM_DEBUG").is_some() { eprintln!("stream error {side:?}: {e} at seq {}", chunk_seq); }
        stats.stream_errors += 1;
        notes.push(if side == Dir::Client { "client_stream_error" } else { "server_stream_error" });
    }
}

fn build_record(act: &Active, flow: &Flow, client: Endpoint, server: Endpoint) -> ConnectionRecord {
    let hs = &act.hs;
    let ch = hs.client_hello.as_ref();
    let mut notes = act.notes.clone();
    notes.dedup();
    ConnectionRecord {
        ts: flow.first_ts,
        transport: RecordTransport::Tcp,
        client: endpoint(client.0, client.1),
        server: endpoint(server.0, server.1),
        sni: ch.and_then(|c| c.server_name.clone()),
        version: hs.version().and_then(|v| v.name()),
        cipher: hs.cipher(),
        alpn: ch.map(|c| c.alpn.clone()).unwrap_or_default(),
        handshake: hs.kind(),
        offered: hs.offered(),
        resumption: hs.resumption().filter(|_| hs.state == State::Complete),
        early_data: hs.early_data(),
        hrr: hs.hrr,
        retry: false,
        timing: timing(hs, &flow.tcp),
        bytes: handshake_bytes(hs),
        certs: hs.certs.clone(),
        failure: hs.failure.clone(),
        notes,
    }
}
