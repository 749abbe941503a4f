//! The orchestrator: decoded packets go to the TCP flow table ([`crate::tcp`])
//! or the QUIC tracker ([`crate::quic`]); both feed the one handshake
//! pipeline ([`crate::handshake`]) and hand back connection records.

use crate::local_nets::LocalNets;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Arc;

use lru::LruCache;

use crate::counters::Stats;
use crate::flow::reassembly::DEFAULT_MAX_BUFFERED;
use crate::flow::table::{Endpoint, FlowKey, FlowTable, Slot};
use crate::flow::tombstone::Tombstones;
use crate::handshake::{leaf_names, Finish, Issued, Leaf, TraceMemory};
use crate::record::ConnectionRecord;
use crate::tcp::{Ctx, Status, TcpFlow};
use crate::tls::keylog::KeyLog;
use crate::tls::record::DEFAULT_MAX_HANDSHAKE_MESSAGE;
use crate::wire::{self, DecodeError, LinkType, Packet, TcpHeader, Transport};

/// Default memory budget of the flow state: a flood of any kind keeps the
/// whole process within ~400 MiB (README, "Limits").
pub const DEFAULT_MAX_MEMORY: usize = 256 << 20;

/// Every cap the analyzer enforces; hitting one is counted in [`Stats`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Flows tracked at once; the least recently used is evicted beyond this.
    pub max_flows: usize,
    /// Out-of-order bytes buffered per direction of a flow.
    pub max_flow_buffer: usize,
    /// Bytes all TCP flows and QUIC connections may hold together
    /// ([`crate::memory`]); beyond it the least recently used are finished.
    pub max_memory: usize,
    /// Largest handshake message kept for parsing.
    pub max_handshake_message: usize,
    /// A flow with no packet for this long (capture time, seconds) is finished.
    pub idle_timeout: f64,
    /// When not empty, only flows to these ports are examined.
    pub server_ports: Vec<u16>,
    /// Server-issued session IDs remembered (as hashes) to recognise offers.
    pub max_session_ids: usize,
    /// Ended TCP connections whose tombstone is kept
    /// ([`RECENT_CONNECTIONS`]; shards of one replay split it).
    pub recent_connections: usize,
    /// Keep a list of stragglers for `take_stragglers`: TCP flows whose
    /// analysis is over (record out, not TLS, or ended) that still send a
    /// segment. Live eBPF capture tells the kernel to stop sending them;
    /// replay does not need it.
    pub report_stragglers: bool,
    /// TLS secrets (SSLKEYLOGFILE) to read TLS 1.3 EncryptedExtensions:
    /// early data `accepted`/`rejected` instead of `attempted`.
    pub keylog: Option<Arc<KeyLog>>,
    /// When a TCP connection's record goes out ([`RecordAt`]).
    pub record_at: RecordAt,
    /// TCP flow state (bytes, as `max_memory` counts them) beyond which a
    /// flow that has shown only its ClientHello is parked: its hello kept
    /// as bytes instead of the handshake state made from it, which is made
    /// again, identically, at its next packet (issue 19's memory goal;
    /// costs a second parse of the hello for each flow parked). A quarter
    /// of `max_memory` if that is less, so that parking comes before the
    /// budget evicts.
    pub park_above: usize,
    /// Follow each handshake as Zeek would, for the Zeek output formats
    /// (`ConnectionRecord::zeek`, docs/zeek.md): its event history and a
    /// SHA-256 of every certificate, ~6 % of a replay. Off, records carry
    /// no Zeek facts and are otherwise the same.
    pub zeek_view: bool,
}

/// Default [`Config::park_above`]: below it (~14,000 open handshakes) no
/// flow is parked, so ordinary traffic never pays the second parse.
pub const DEFAULT_PARK_ABOVE: usize = 32 << 20;

/// When a TLS-over-TCP connection's record is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecordAt {
    /// As soon as nothing more about the handshake (and the first use)
    /// remains to be learnt: live metrics do not wait for a keep-alive
    /// connection to end. `lifetime` and the bytes after the handshake are
    /// filled only for a connection that closed first.
    #[default]
    Handshake,
    /// Held on its flow until FIN/RST, which fills `lifetime` and the
    /// bytes after the handshake; a record that goes out before (capture
    /// end, idle timeout, eviction, memory budget, a new connection on the
    /// tuple) has them null and a note `open:<why>`. Held records count in
    /// the memory budget and in the flow table's limits.
    Close,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_flows: 200_000,
            max_flow_buffer: DEFAULT_MAX_BUFFERED,
            max_memory: DEFAULT_MAX_MEMORY,
            max_handshake_message: DEFAULT_MAX_HANDSHAKE_MESSAGE,
            idle_timeout: 120.0,
            server_ports: Vec::new(),
            max_session_ids: 100_000,
            recent_connections: RECENT_CONNECTIONS,
            report_stragglers: false,
            keylog: None,
            record_at: RecordAt::Handshake,
            park_above: DEFAULT_PARK_ABOVE,
            zeek_view: true,
        }
    }
}

/// Leaf certificates whose names and validity are remembered.
const CERT_CACHE: usize = 4096;

/// The context a TCP flow's packets are read in, from the analyzer's
/// parts, so that its flow table can be borrowed beside it.
fn flow_ctx<'a>(
    cfg: &'a Config,
    mem: &'a mut IssuedIds,
    stats: &'a mut Stats,
    now: f64,
    park: bool,
) -> Ctx<'a> {
    Ctx {
        mem,
        keylog: cfg.keylog.as_deref(),
        stats,
        max_flow_buffer: cfg.max_flow_buffer,
        max_handshake_message: cfg.max_handshake_message,
        zeek_view: cfg.zeek_view,
        now,
        park,
    }
}

/// Ended TCP connections whose tombstone (tuple, ISN, where the streams
/// ended) is remembered, so that their late segments and a repeat of one
/// (a capture concatenated with itself, a duplicate in a merge) are
/// skipped rather than opening a second flow: ~130 bytes each
/// ([`TOMBSTONE_BYTES`](crate::flow::tombstone::TOMBSTONE_BYTES)).
pub const RECENT_CONNECTIONS: usize = 65_536;

/// Where one trace remembers the session IDs servers issued (as hashes),
/// bounded. One analyzer keeps them itself; the shards of a sharded replay
/// share one store, since a client may resume a session another shard saw
/// issued.
pub trait SessionIds: Send {
    /// Was this ID issued earlier in the trace (before the packet being
    /// processed)?
    fn was_issued(&self, hash: u64) -> bool;
    /// A server issued this ID (in the packet being processed).
    fn issued(&mut self, hash: u64);
    /// [`was_issued`](Self::was_issued), or `Later` with a stamp of now
    /// when the answer may not be known yet (sharded replay).
    fn ask(&self, hash: u64) -> Issued {
        Issued::Now(self.was_issued(hash))
    }
    /// The answer to a `Later` question, as of its stamp; None when it is
    /// not known yet (the record then carries the question:
    /// [`ConnectionRecord::unsettled`](crate::record::ConnectionRecord::unsettled)).
    fn answer(&self, _hash: u64, _at: u64) -> Option<bool> {
        Some(false)
    }
}

/// The analyzer's own store: the most recently issued IDs.
struct RecentIds(LruCache<u64, ()>);

impl SessionIds for RecentIds {
    fn was_issued(&self, hash: u64) -> bool {
        self.0.contains(&hash)
    }
    fn issued(&mut self, hash: u64) {
        self.0.put(hash, ());
    }
}

/// What one trace remembers across connections, bounded: hashes of session
/// IDs servers issued, and the names of leaf certificates already parsed.
struct IssuedIds {
    ids: Box<dyn SessionIds>,
    certs: LruCache<u64, Arc<Leaf>>,
}

/// What stands for a session ID or a certificate in the trace memory: a
/// SipHash under keys drawn once per process, so that traffic cannot be
/// made to collide with an ID or a certificate seen before (std's fixed
/// keys allowed that in principle), and the same for every shard of a
/// sharded replay, which share one store of IDs.
fn hash(bytes: &[u8]) -> u64 {
    static KEYS: std::sync::OnceLock<RandomState> = std::sync::OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(bytes)
}

impl TraceMemory for IssuedIds {
    fn was_issued(&self, id: &[u8]) -> bool {
        self.ids.was_issued(hash(id))
    }
    fn issued(&mut self, id: &[u8]) {
        self.ids.issued(hash(id));
    }
    fn ask_issued(&self, id: &[u8]) -> Issued {
        self.ids.ask(hash(id))
    }
    fn answer_issued(&self, hash: u64, at: u64) -> Option<bool> {
        self.ids.answer(hash, at)
    }
    fn leaf_names(&mut self, der: &[u8]) -> Arc<Leaf> {
        let h = hash(der);
        if let Some(names) = self.certs.get(&h) {
            return Arc::clone(names);
        }
        let names = Arc::new(leaf_names(der));
        self.certs.put(h, Arc::clone(&names));
        names
    }
}

/// When idle flows are swept: at a decoded packet whose clock passed a
/// second since the last sweep. Every analyzer keeps one; a sharded
/// replay's reading thread keeps its own, to run the sweep in every shard
/// at the frame one analyzer would.
#[derive(Debug, Clone, Copy)]
pub struct SweepClock {
    last: f64,
}

impl Default for SweepClock {
    fn default() -> Self {
        SweepClock { last: f64::MIN }
    }
}

impl SweepClock {
    /// Whether a decoded packet at `ts` sweeps first.
    pub fn due(&self, ts: f64) -> bool {
        ts > self.last + 1.0
    }

    /// A sweep ran at `now`.
    pub fn swept(&mut self, now: f64) {
        self.last = now;
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
    flows: FlowTable<TcpFlow>,
    memory: IssuedIds,
    /// Connections that ended (RECENT_CONNECTIONS).
    ended: Tombstones,
    out: Vec<ConnectionRecord>,
    /// `out`'s last buffer, emptied, for the next records: a record is
    /// ~1 KiB, and a fresh Vec for every batch grew by doubling (copying
    /// each record again) into newly faulted pages.
    spare: Vec<ConnectionRecord>,
    /// Segments of flows whose analysis is over, since the last
    /// `take_stragglers` (the segment's endpoints): a kernel-side filter
    /// can stop sending them. Most finished flows send nothing more that
    /// the kernel forwards (it stops TLS flows itself after the handshake
    /// phase), so only those that do are reported, when they do, found by
    /// the lookup every segment has anyway.
    stragglers: Vec<(Endpoint, Endpoint)>,
    stats: Stats,
    sweep: SweepClock,
    quic: crate::quic::QuicTracker,
    /// This host's addresses, for each record's `role`; None: unknown.
    local: Option<LocalNets>,
    /// The capture each record names (`capture`); None: records name none.
    capture: Option<String>,
}

impl Analyzer {
    pub fn new(cfg: Config) -> Self {
        Analyzer {
            flows: FlowTable::new(cfg.max_flows),
            memory: IssuedIds {
                ids: Box::new(RecentIds(crate::memory::lru(cfg.max_session_ids))),
                certs: crate::memory::lru(CERT_CACHE),
            },
            ended: Tombstones::new(cfg.recent_connections),
            out: Vec::new(),
            spare: Vec::new(),
            stragglers: Vec::new(),
            stats: Stats::default(),
            sweep: SweepClock::default(),
            local: None,
            capture: None,
            quic: crate::quic::QuicTracker::new(cfg.max_flows, cfg.idle_timeout)
                .with_keylog(cfg.keylog.clone())
                .with_zeek_view(cfg.zeek_view),
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

    /// Records finished and not yet taken.
    pub fn records_waiting(&self) -> usize {
        self.out.len()
    }

    /// Records finished since the last call, in the order they finished.
    pub fn take_records(&mut self) -> Vec<ConnectionRecord> {
        self.with_records(std::mem::take)
    }

    /// Hands the records finished since the last call, in the order they
    /// finished, to `f` (which may drain them), and keeps their buffer for
    /// the next ones.
    pub fn with_records<R>(&mut self, f: impl FnOnce(&mut Vec<ConnectionRecord>) -> R) -> R {
        let mut out = std::mem::replace(&mut self.out, std::mem::take(&mut self.spare));
        if let Some(local) = &self.local {
            for r in &mut out {
                r.role = local.role_of(&r.client, &r.server);
            }
        }
        if let Some(capture) = &self.capture {
            for r in &mut out {
                r.capture = Some(capture.clone());
            }
        }
        let r = f(&mut out);
        out.clear();
        self.spare = out;
        r
    }

    /// The capture records taken from now on name in their `capture`
    /// (replay of several captures); None: they name none.
    pub fn set_capture(&mut self, capture: Option<String>) {
        self.capture = capture;
    }

    /// This host's addresses (replay: `--local`; live: its interfaces,
    /// set again whenever they change): records taken from now on carry
    /// a `role`. None: records carry none.
    pub fn set_local(&mut self, local: Option<LocalNets>) {
        self.local = local;
    }

    /// Session IDs are remembered in this store from now on instead of the
    /// analyzer's own (sharded replay: one store for all shards).
    pub fn set_session_ids(&mut self, ids: Box<dyn SessionIds>) {
        self.memory.ids = ids;
    }

    /// Endpoint pairs (sender first) of the stragglers since the last call
    /// ([`Config::report_stragglers`]); a flow may be in it more than once.
    pub fn take_stragglers(&mut self) -> Vec<(Endpoint, Endpoint)> {
        std::mem::take(&mut self.stragglers)
    }

    /// Decodes and processes one captured frame.
    pub fn push_frame(&mut self, ts: f64, link: LinkType, frame: &[u8]) {
        match wire::decode(link, frame) {
            Ok(p) => self.push_packet(ts, &p),
            Err(e) => self.push_undecodable(frame.len(), e),
        }
    }

    /// Counts a frame of `len` bytes that yielded no packet, and why (a
    /// caller that decodes frames itself, as a sharded replay does to find
    /// each one's shard, hands the packets to [`push_packet`](Self::push_packet)).
    pub fn push_undecodable(&mut self, len: usize, e: DecodeError) {
        self.stats.packets += 1;
        self.stats.bytes += len as u64;
        match e {
            DecodeError::NotIp => self.stats.not_ip += 1,
            DecodeError::Fragment => self.stats.ip_fragments += 1,
            DecodeError::OtherTransport => self.stats.other_transport += 1,
            DecodeError::UnknownLink => self.stats.unknown_link_frames += 1,
            DecodeError::Encrypted => self.stats.link_encrypted_frames += 1,
            DecodeError::Aggregate => self.stats.link_aggregate_frames += 1,
            _ => self.stats.malformed_packets += 1,
        }
    }

    /// Processes one decoded packet.
    pub fn push_packet(&mut self, ts: f64, p: &Packet<'_>) {
        self.stats.packets += 1;
        self.stats.bytes += p.payload.len() as u64;
        if self.sweep.due(ts) {
            self.tick(ts);
        }
        match p.transport {
            Transport::Tcp(h) => {
                self.stats.tcp_packets += 1;
                self.tcp(
                    ts,
                    p.src,
                    p.dst,
                    &h,
                    p.payload,
                    (p.truncated, p.seen_before),
                );
            }
            Transport::Udp { src_port, dst_port } => {
                self.stats.udp_packets += 1;
                if self.wanted(src_port, dst_port) {
                    self.quic.on_datagram(
                        ts,
                        (p.src, src_port),
                        (p.dst, dst_port),
                        p.payload,
                        &mut self.stats.quic,
                    );
                    self.out.append(&mut self.quic.out);
                }
            }
        }
        if self.memory_used() > self.cfg.max_memory {
            self.shed();
        }
    }

    /// Bytes the TCP flows and QUIC connections hold, as estimated for the
    /// memory budget ([`crate::memory`]).
    pub fn memory_used(&self) -> usize {
        self.flows.bytes() + self.ended.bytes() + self.quic.bytes()
    }

    /// Over the memory budget: forgets tombstones first (a flow being
    /// followed is worth more than one that ended), then finishes the
    /// least recently used flows, TCP or QUIC, whichever is older, until
    /// it holds again.
    fn shed(&mut self) {
        while self.memory_used() > self.cfg.max_memory {
            if self.ended.pop_oldest() {
                self.stats.tombstones_evicted += 1;
                continue;
            }
            let tcp = self.flows.oldest().map(|(_, f)| f.last_ts);
            let older_tcp = match (tcp, self.quic.oldest_ts()) {
                (Some(t), Some(q)) => t <= q,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return,
            };
            self.stats.memory_evictions += 1;
            if older_tcp {
                if let Some((_, flow)) = self.flows.pop_oldest() {
                    self.finish_flow(flow, Finish::Evicted, false);
                }
            } else {
                self.quic.evict_oldest(&mut self.stats.quic);
                self.out.append(&mut self.quic.out);
            }
        }
    }

    /// Advances the clock without a packet (live capture on a quiet link):
    /// flows idle longer than the idle timeout are finished.
    pub fn tick(&mut self, now: f64) {
        self.expire_idle(now);
        self.sweep.swept(now);
    }

    /// End of input: every flow still open is finished (as `incomplete` if
    /// its handshake had not ended).
    pub fn finish(&mut self) {
        while !self.finish_some(usize::MAX) {}
    }

    /// [`finish`](Self::finish) in steps: finishes up to `max` flows
    /// (oldest first, TCP then QUIC) and returns whether none is left. The
    /// caller takes the records between steps, so that the flows open at
    /// the end of a flood do not all become records in memory at once.
    pub fn finish_some(&mut self, max: usize) -> bool {
        let mut n = 0;
        while n < max {
            let Some((_, flow)) = self.flows.pop_oldest() else {
                break;
            };
            self.finish_flow(flow, Finish::CaptureEnd, false);
            n += 1;
        }
        let done = n < max && self.quic.finish_some(max - n, &mut self.stats.quic);
        self.out.append(&mut self.quic.out);
        if done {
            // No packet follows the end of input: nothing left to absorb.
            self.ended = Tombstones::new(self.cfg.recent_connections);
        }
        done
    }

    fn wanted(&self, src_port: u16, dst_port: u16) -> bool {
        self.cfg.server_ports.is_empty()
            || self.cfg.server_ports.contains(&src_port)
            || self.cfg.server_ports.contains(&dst_port)
    }

    fn tcp(
        &mut self,
        ts: f64,
        src: IpAddr,
        dst: IpAddr,
        h: &TcpHeader,
        payload: &[u8],
        (truncated, seen_before): (bool, bool),
    ) {
        if !self.wanted(h.src_port, h.dst_port) {
            return;
        }
        let (from, to) = ((src, h.src_port), (dst, h.dst_port));
        let key = FlowKey::new(from, to);
        let new_syn = h.syn && !h.ack_flag;
        // One lookup a packet: everything after goes through the slot.
        // Most packets belong to flows whose record is out (bulk data) and
        // are skipped here. Finished flows are not promoted in the LRU
        // order: they only need to outlive their own stragglers, and
        // promotion costs cache misses.
        let (hash, mut slot) = self.flows.find(&key);
        if let Some(f) = slot.and_then(|at| self.flows.get_mut(at)) {
            f.last_ts = ts;
            // A SYN with the connection's own ISN is a copy of its SYN;
            // another ISN after the SYN-ACK (or on a skipped repeat) is a
            // new connection on the tuple.
            let answered = f.syn_dir.is_some() && f.tcp.syn_ack.is_some();
            let repeat = f.status == Status::Done && f.client_isn.is_some();
            let reused = new_syn && f.client_isn != Some(h.seq) && (answered || repeat);
            let at = slot.take();
            if matches!(f.status, Status::Done | Status::NotTls) {
                // A fresh SYN on a finished tuple is a new connection (port reuse).
                if reused {
                    if let Some(mut old) = at.and_then(|at| self.flows.remove(at)) {
                        self.release(&mut old, None);
                    }
                } else if f.held.is_some() {
                    // A record waiting for the close: only FIN/RST matter.
                    let dir = usize::from(from != f.a);
                    if f.closing(dir, ts, h, payload.len()) {
                        if let Some(mut old) = at.and_then(|at| self.flows.remove(at)) {
                            self.bury(key, &old, true);
                            self.release(&mut old, None);
                        }
                    } else if !(h.rst || h.fin) {
                        self.straggler(from, to);
                    }
                    return;
                } else {
                    if h.rst || h.fin {
                        // The rest of the connection goes to its tombstone,
                        // which knows where this FIN says the streams end.
                        let dir = usize::from(from != f.a);
                        f.closing(dir, ts, h, payload.len());
                        if let Some(old) = at.and_then(|at| self.flows.remove(at)) {
                            self.bury(key, &old, true);
                        }
                    } else if !h.syn {
                        self.straggler(from, to);
                    }
                    return;
                }
            } else if reused && f.status == Status::Tls {
                // The old connection's record goes out, but its tuple is not
                // reported finished: it carries the new connection now, which
                // a kernel filter told to stop would lose.
                if let Some(mut old) = at.and_then(|at| self.flows.remove(at)) {
                    let mut ctx = flow_ctx(&self.cfg, &mut self.memory, &mut self.stats, ts, false);
                    old.finish(Finish::Done, false, false, &mut ctx, &mut self.out);
                }
            } else {
                slot = at;
            }
        }
        let slot = match slot {
            Some(at) => at,
            None => {
                // Only a SYN, a SYN-ACK (the server's direction may be all the
                // capture shows) or a segment with data starts tracking: stray
                // ACKs, FINs and resets of unknown flows cost nothing.
                if !h.syn && payload.is_empty() {
                    return;
                }
                if new_syn && self.ended.is_repeat(&key, h.seq) {
                    // A connection that ended, again: its packets are skipped.
                    self.stats.repeated_connections += 1;
                    self.insert(hash, key, TcpFlow::repeat(ts, from, to, h.seq));
                    return;
                }
                let idle = self.cfg.idle_timeout;
                if !h.syn && self.ended.absorbs(&key, key.side(from), h.seq, ts, idle) {
                    // What still comes of an ended connection (a close_notify
                    // reordered after the FINs) is no new flow.
                    self.stats.late_segments += 1;
                    self.straggler(from, to);
                    return;
                }
                self.stats.flows_created += 1;
                self.insert(hash, key, TcpFlow::new(ts, from, to))
            }
        };
        let park = self.flows.bytes() >= self.cfg.park_above.min(self.cfg.max_memory / 4);
        let mut ctx = flow_ctx(&self.cfg, &mut self.memory, &mut self.stats, ts, park);
        let updated = self.flows.update(slot, |flow| {
            let was = flow.status;
            let seg = flow.segment(ts, from, h, payload, (truncated, seen_before), &mut ctx);
            (seg, was, flow.status)
        });
        let Some((seg, was, status)) = updated else {
            return;
        };
        if status == Status::NotTls {
            if was != Status::NotTls {
                self.stats.non_tls_flows += 1;
            }
            if seg.closed {
                if let Some(f) = self.flows.remove(slot) {
                    self.bury(key, &f, true);
                }
            }
        } else if seg.closed {
            if let Some(flow) = self.flows.remove(slot) {
                self.finish_flow(flow, Finish::Done, seg.timed);
            }
        } else if seg.timed {
            // The record goes out (or waits for the close) and the flow
            // stays, finished, so that the rest of the connection is skipped
            // cheaply; it is buried when it leaves the table.
            let hold = self.cfg.record_at == RecordAt::Close;
            let mut ctx = flow_ctx(&self.cfg, &mut self.memory, &mut self.stats, ts, false);
            let out = &mut self.out;
            self.flows
                .update(slot, |f| f.finish(Finish::Done, true, hold, &mut ctx, out));
        }
    }

    /// A segment of a flow whose analysis is over
    /// ([`Config::report_stragglers`]).
    fn straggler(&mut self, from: Endpoint, to: Endpoint) {
        if self.cfg.report_stragglers {
            self.stragglers.push((from, to));
        }
    }

    /// Inserts a flow that is not in the table (`hash`: its key's, from
    /// [`FlowTable::find`]); one evicted to make room is finished.
    fn insert(&mut self, hash: u64, key: FlowKey, flow: TcpFlow) -> Slot {
        let (slot, evicted) = self.flows.insert(hash, key, flow);
        if let Some((_, evicted)) = evicted {
            self.stats.flows_evicted += 1;
            self.finish_flow(evicted, Finish::Evicted, false);
        }
        slot
    }

    fn expire_idle(&mut self, now: f64) {
        self.quic.expire_idle(now, &mut self.stats.quic);
        self.out.append(&mut self.quic.out);
        while let Some((_, f)) = self.flows.oldest() {
            if f.last_ts + self.cfg.idle_timeout >= now {
                break;
            }
            if let Some((_, flow)) = self.flows.pop_oldest() {
                if matches!(flow.status, Status::Tls | Status::Detecting) {
                    self.stats.flows_expired += 1;
                }
                self.finish_flow(flow, Finish::Expired, false);
            }
        }
    }

    /// A held record goes out (`--record-at close`); one whose connection
    /// had not closed is counted.
    fn release(&mut self, flow: &mut TcpFlow, why: Option<Finish>) {
        if let Some((record, closed)) = flow.release(why) {
            if !closed {
                self.stats.held_records_unclosed += 1;
            }
            self.out.push(record);
        }
    }

    /// Leaves a tombstone for a connection that left the table
    /// (`absorbs`: its analysis was over, so its late segments are its own).
    fn bury(&mut self, key: FlowKey, flow: &TcpFlow, absorbs: bool) {
        let ends = flow.stream_ends(&key);
        if self
            .ended
            .bury(key, flow.client_isn, ends, flow.last_ts, absorbs)
        {
            self.stats.tombstones_evicted += 1;
        }
    }

    /// A flow that left the table: leaves its tombstone and emits its
    /// record if it is a TLS connection whose record is not out yet; a
    /// record held earlier goes out now.
    fn finish_flow(&mut self, mut flow: TcpFlow, why: Finish, timed: bool) {
        // A flow not identified yet leaves a tombstone that absorbs
        // nothing: what follows may still be its ClientHello.
        let identified = flow.status != Status::Detecting;
        self.bury(FlowKey::new(flow.a, flow.b), &flow, identified);
        if flow.status == Status::Detecting {
            self.stats.unidentified_flows += 1;
        }
        let mut ctx = flow_ctx(
            &self.cfg,
            &mut self.memory,
            &mut self.stats,
            flow.last_ts,
            false,
        );
        flow.finish(why, timed, false, &mut ctx, &mut self.out);
        self.release(&mut flow, Some(why));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::HandshakeKind;

    /// An IPv4/TCP packet (no options) from 10.0.0.`src`:`sport` to 10.0.0.`dst`:`dport`.
    fn tcp(
        (src, sport): (u8, u16),
        (dst, dport): (u8, u16),
        seq: u32,
        ack: u32,
        flags: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let len = 40 + payload.len();
        let mut p = vec![
            0x45,
            0,
            (len >> 8) as u8,
            len as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
            10,
            0,
            0,
            src,
            10,
            0,
            0,
            dst,
        ];
        p.extend(sport.to_be_bytes());
        p.extend(dport.to_be_bytes());
        p.extend(seq.to_be_bytes());
        p.extend(ack.to_be_bytes());
        p.extend([0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const RST: u8 = 0x04;

    /// A handshake record (version 3.`minor`) holding one message.
    fn handshake_record(minor: u8, msg_type: u8, body: &[u8]) -> Vec<u8> {
        let mut msg = vec![msg_type, 0, 0, body.len() as u8];
        msg.extend(body);
        let mut rec = vec![22, 3, minor, 0, msg.len() as u8];
        rec.extend(msg);
        rec
    }

    /// A TLS record holding a ClientHello with no extensions.
    fn client_hello() -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7; 32]);
        body.extend([0, 0, 2, 0xc0, 0x2f, 1, 0]);
        handshake_record(1, 1, &body)
    }

    /// The orchestrator: a TLS flow gets a record, a plain one is counted
    /// as not TLS, a reset fails the handshake, and the end of input
    /// finishes what is open.
    #[test]
    fn flows_are_routed_classified_and_finished() {
        let mut a = Analyzer::new(Config {
            report_stragglers: true,
            ..Config::default()
        });
        let ch = client_hello();
        let frames = [
            tcp((1, 40000), (2, 443), 100, 0, SYN, &[]),
            tcp((2, 443), (1, 40000), 500, 101, SYN | ACK, &[]),
            tcp((1, 40000), (2, 443), 101, 501, ACK, &[]),
            tcp((1, 40000), (2, 443), 101, 501, ACK, &ch),
            tcp(
                (2, 443),
                (1, 40000),
                501,
                101 + ch.len() as u32,
                RST | ACK,
                &[],
            ),
            // Plain text on another flow: 16 segments that are no ClientHello.
            tcp((3, 40001), (2, 80), 1, 0, SYN, &[]),
        ];
        for (i, f) in frames.iter().enumerate() {
            a.push_frame(1.0 + i as f64 * 0.01, LinkType::RawIp, f);
        }
        for i in 0..16u32 {
            a.push_frame(
                2.0,
                LinkType::RawIp,
                &tcp((3, 40001), (2, 80), 2 + i * 8, 0, ACK, b"GET / HT"),
            );
        }
        // Found not TLS at the 16th: what follows is a straggler, but its
        // FIN is not (a kernel sends FIN and RST even for done flows).
        let after = [
            (ACK, &b"P/1.1\r\n"[..]),
            (ACK, &[][..]),
            (FIN | ACK, &[][..]),
        ];
        for (i, (flags, data)) in after.into_iter().enumerate() {
            let seq = 2 + (16 + i as u32) * 8;
            let f = tcp((3, 40001), (2, 80), seq, 0, flags, data);
            a.push_frame(2.5, LinkType::RawIp, &f);
        }
        let open = tcp((4, 40002), (2, 443), 1, 0, ACK, &ch);
        a.push_frame(3.0, LinkType::RawIp, &open);
        a.finish();
        let records = a.take_records();
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(
            (records[0].handshake, records[0].failure.as_deref()),
            (Some(HandshakeKind::Failed), Some("reset"))
        );
        assert_eq!(records[0].timing.tcp_rtt, Some(20.0));
        assert_eq!(records[1].handshake, Some(HandshakeKind::Incomplete));
        // Nothing from the server at all: the capture does not show its direction.
        assert_eq!(
            records[1].notes,
            ["capture_ended", "no_syn", "one_sided:server"]
        );
        let s = a.stats();
        assert_eq!(
            (s.tls_connections, s.non_tls_flows, s.flows_created),
            (2, 1, 3)
        );
        assert_eq!(s.unidentified_flows, 0);
        // The plain flow's two segments after it was found not TLS, and
        // only those: the reset flow sent nothing after its record.
        let plain: (Endpoint, Endpoint) = (
            (IpAddr::from([10, 0, 0, 3]), 40001),
            (IpAddr::from([10, 0, 0, 2]), 80),
        );
        assert_eq!(a.take_stragglers(), [plain, plain]);
    }

    /// Zeek's `ts` is when the first TLS record was whole (its analyzer
    /// raises the first event then): a ClientHello split over two
    /// segments (large key shares) has the second segment's time, while
    /// the record's own `ts` stays the connection's first packet.
    #[test]
    fn zeek_ts_is_when_the_client_hello_was_whole() {
        let mut a = Analyzer::new(Config::default());
        let ch = client_hello();
        let (head, tail) = ch.split_at(20);
        let frames = [
            (1.0, tcp((1, 40000), (2, 443), 100, 0, SYN, &[])),
            (1.01, tcp((2, 443), (1, 40000), 500, 101, SYN | ACK, &[])),
            (1.02, tcp((1, 40000), (2, 443), 101, 501, ACK, &[])),
            (1.03, tcp((1, 40000), (2, 443), 101, 501, ACK, head)),
            (
                1.05,
                tcp(
                    (1, 40000),
                    (2, 443),
                    101 + head.len() as u32,
                    501,
                    ACK,
                    tail,
                ),
            ),
        ];
        for (ts, f) in &frames {
            a.push_frame(*ts, LinkType::RawIp, f);
        }
        a.finish();
        let records = a.take_records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].ts, 1.0);
        let zeek = records[0].zeek.as_deref().expect("zeek facts");
        assert_eq!(zeek.ts, 1.05);
    }

    /// Without the Zeek view a record has no Zeek facts and is otherwise
    /// the same.
    #[test]
    fn without_the_zeek_view_only_the_zeek_facts_go() {
        let ch = client_hello();
        let frames = [
            (1.0, tcp((1, 40000), (2, 443), 100, 0, SYN, &[])),
            (1.01, tcp((2, 443), (1, 40000), 500, 101, SYN | ACK, &[])),
            (1.02, tcp((1, 40000), (2, 443), 101, 501, ACK, &[])),
            (1.03, tcp((1, 40000), (2, 443), 101, 501, ACK, &ch)),
        ];
        let record = |zeek_view| {
            let mut a = Analyzer::new(Config {
                zeek_view,
                ..Config::default()
            });
            for (ts, f) in &frames {
                a.push_frame(*ts, LinkType::RawIp, f);
            }
            a.finish();
            let mut records = a.take_records();
            assert_eq!(records.len(), 1, "{records:?}");
            records.remove(0)
        };
        let (mut with, without) = (record(true), record(false));
        assert!(with.zeek.is_some());
        assert!(without.zeek.is_none());
        with.zeek = None;
        assert_eq!(format!("{with:?}"), format!("{without:?}"));
    }

    const FIN: u8 = 0x01;

    /// A connection whose handshake fails at once (the server's fatal
    /// alert: nothing more to learn, so its record is due), then 300 bytes
    /// from the client and 40 from the server, then FINs at 5.0 and 5.5 s
    /// (`close`), or no close at all.
    fn failed_then_open(a: &mut Analyzer, close: bool) {
        let ch = client_hello();
        let alert = [21u8, 3, 3, 0, 2, 2, 40];
        let c_data = 101 + ch.len() as u32;
        let s_data = 501 + alert.len() as u32;
        let mut frames = vec![
            (1.0, tcp((1, 40000), (2, 443), 100, 0, SYN, &[])),
            (1.01, tcp((2, 443), (1, 40000), 500, 101, SYN | ACK, &[])),
            (1.02, tcp((1, 40000), (2, 443), 101, 501, ACK, &[])),
            (1.03, tcp((1, 40000), (2, 443), 101, 501, ACK, &ch)),
            (1.04, tcp((2, 443), (1, 40000), 501, c_data, ACK, &alert)),
            (
                2.0,
                tcp((1, 40000), (2, 443), c_data, s_data, ACK, &[0; 300]),
            ),
            (
                2.1,
                tcp((2, 443), (1, 40000), s_data, c_data + 300, ACK, &[0; 40]),
            ),
        ];
        if close {
            frames.push((
                5.0,
                tcp(
                    (1, 40000),
                    (2, 443),
                    c_data + 300,
                    s_data + 40,
                    FIN | ACK,
                    &[],
                ),
            ));
            frames.push((
                5.5,
                tcp(
                    (2, 443),
                    (1, 40000),
                    s_data + 40,
                    c_data + 301,
                    FIN | ACK,
                    &[],
                ),
            ));
        }
        for (ts, f) in &frames {
            a.push_frame(*ts, LinkType::RawIp, f);
        }
    }

    /// Issue 19: a close_notify that came after both FINs (reordered)
    /// opened a second flow for the connection; now its tombstone takes
    /// it. A new connection on the tuple (a SYN) is still a new flow.
    #[test]
    fn a_close_notify_after_both_fins_opens_no_second_flow() {
        for record_at in [RecordAt::Handshake, RecordAt::Close] {
            let mut a = Analyzer::new(Config {
                record_at,
                ..Config::default()
            });
            failed_then_open(&mut a, true);
            let s_fin = 501 + 7 + 40;
            let close_notify = [21u8, 3, 3, 0, 2, 1, 0];
            a.push_frame(
                5.6,
                LinkType::RawIp,
                &tcp((2, 443), (1, 40000), s_fin - 7, 0, ACK, &close_notify),
            );
            a.push_frame(
                5.7,
                LinkType::RawIp,
                &tcp((2, 443), (1, 40000), s_fin, 0, FIN | ACK, &[]),
            );
            assert_eq!(a.take_records().len(), 1, "{record_at:?}");
            let s = a.stats();
            assert_eq!((s.flows_created, s.late_segments), (1, 1), "{s:?}");
            a.push_frame(
                6.0,
                LinkType::RawIp,
                &tcp((1, 40000), (2, 443), 9000, 0, SYN, &[]),
            );
            a.push_frame(
                6.1,
                LinkType::RawIp,
                &tcp((1, 40000), (2, 443), 9001, 0, ACK, &client_hello()),
            );
            a.finish();
            assert_eq!(a.take_records().len(), 1, "the new connection's record");
            let s = a.stats();
            assert_eq!((s.flows_created, s.unidentified_flows), (2, 0), "{s:?}");
        }
    }

    /// `--record-at close`: the record waits on its flow for the FINs, then
    /// carries the lifetime (first packet to the close) and each side's
    /// bytes after its handshake records, from the FINs' sequence numbers.
    /// By default it goes out at once, without them.
    #[test]
    fn record_at_close_fills_lifetime_and_app_bytes_from_the_fins() {
        let mut a = Analyzer::new(Config {
            record_at: RecordAt::Close,
            ..Config::default()
        });
        failed_then_open(&mut a, true);
        assert_eq!(a.records_waiting(), 1);
        let r = &a.take_records()[0];
        assert_eq!(r.handshake, Some(HandshakeKind::Failed));
        assert_eq!(r.timing.lifetime, Some(4500.0));
        assert_eq!(
            (r.bytes.client_app, r.bytes.server_app),
            (Some(300), Some(40))
        );
        assert_eq!(a.stats().held_records_unclosed, 0);
        assert_eq!(a.active_flows(), 0);

        let mut a = Analyzer::new(Config::default());
        failed_then_open(&mut a, true);
        let r = &a.take_records()[0];
        assert_eq!(r.timing.lifetime, None);
        assert_eq!((r.bytes.client_app, r.bytes.server_app), (None, None));
    }

    /// A held record whose connection is still open at the end of the
    /// capture goes out then, without lifetime and with a note saying why,
    /// counted; while held it counts in the memory estimate.
    #[test]
    fn held_record_open_at_capture_end_is_noted_and_counted() {
        let mut held = Analyzer::new(Config {
            record_at: RecordAt::Close,
            ..Config::default()
        });
        failed_then_open(&mut held, false);
        assert_eq!(held.records_waiting(), 0);
        let mut plain = Analyzer::new(Config::default());
        failed_then_open(&mut plain, false);
        assert!(
            held.memory_used() >= plain.memory_used() + std::mem::size_of::<ConnectionRecord>(),
            "{} vs {}",
            held.memory_used(),
            plain.memory_used()
        );
        held.finish();
        let r = &held.take_records()[0];
        assert_eq!(r.timing.lifetime, None);
        assert_eq!(r.bytes.client_app, None);
        assert_eq!(r.notes, ["open:capture_ended"]);
        assert_eq!(held.stats().held_records_unclosed, 1);
    }

    /// Held records are bounded by the flow table: one evicted to make room
    /// goes out noted and counted.
    #[test]
    fn held_record_evicted_by_a_full_table_is_noted() {
        let mut a = Analyzer::new(Config {
            record_at: RecordAt::Close,
            max_flows: 1,
            ..Config::default()
        });
        failed_then_open(&mut a, false);
        a.push_frame(
            6.0,
            LinkType::RawIp,
            &tcp((3, 40001), (2, 443), 7, 0, SYN, &[]),
        );
        let r = &a.take_records()[0];
        assert_eq!(r.notes, ["open:evicted"]);
        assert_eq!(
            (a.stats().held_records_unclosed, a.stats().flows_evicted),
            (1, 1)
        );
    }

    /// A ClientHello record naming `sni`, or garbage of the same length.
    fn client_hello_sni(sni: &str) -> Vec<u8> {
        let name = sni.as_bytes();
        let mut ext = vec![0, 0];
        ext.extend(((name.len() + 5) as u16).to_be_bytes());
        ext.extend(((name.len() + 3) as u16).to_be_bytes());
        ext.push(0);
        ext.extend((name.len() as u16).to_be_bytes());
        ext.extend(name);
        let mut body = vec![3, 3];
        body.extend([7; 32]);
        body.extend([0, 0, 2, 0xc0, 0x2f, 1, 0]);
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        handshake_record(1, 1, &body)
    }

    /// The connection's records after a first copy of its ClientHello and a
    /// retransmission of it.
    fn first_copy_then(first: &[u8], second: &[u8]) -> (Vec<ConnectionRecord>, Stats) {
        let mut a = Analyzer::new(Config::default());
        let (c, s) = ((1, 40000), (2, 443));
        a.push_frame(1.0, LinkType::RawIp, &tcp(c, s, 100, 0, SYN, &[]));
        a.push_frame(1.01, LinkType::RawIp, &tcp(s, c, 500, 101, SYN | ACK, &[]));
        a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, first));
        a.push_frame(1.3, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, second));
        a.finish();
        (a.take_records(), a.stats().clone())
    }

    /// Regression (hostile traffic): a garbage first copy of the
    /// ClientHello made the connection vanish; the real retransmission was
    /// dropped as a duplicate.
    #[test]
    fn garbage_first_copy_does_not_hide_the_connection() {
        let real = client_hello_sni("real.example");
        let garbage = vec![0x5a; real.len()];
        let (records, stats) = first_copy_then(&garbage, &real);
        assert_eq!(records.len(), 1, "{stats:?}");
        assert_eq!(records[0].sni.as_deref(), Some("real.example"));
        assert!(
            records[0]
                .notes
                .contains(&"client_conflicting_retransmission"),
            "{:?}",
            records[0].notes
        );
        assert_eq!(stats.conflicting_retransmissions, 1);
    }

    /// Regression (IDS evasion): a forged first copy with another SNI was
    /// reported as the truth, silently. The first copy is still what is read
    /// once the flow is identified, but the record says it is disputed.
    #[test]
    fn forged_first_copy_is_noted() {
        let (records, stats) = first_copy_then(
            &client_hello_sni("forged.example"),
            &client_hello_sni("realreal.test"),
        );
        assert_eq!(records[0].sni.as_deref(), Some("forged.example"));
        assert!(
            records[0]
                .notes
                .contains(&"client_conflicting_retransmission"),
            "{:?}",
            records[0].notes
        );
        assert_eq!(stats.conflicting_retransmissions, 1);
        // An identical retransmission is no conflict.
        let ch = client_hello_sni("same.example");
        let (records, stats) = first_copy_then(&ch, &ch);
        assert!(!records[0].notes.iter().any(|n| n.contains("conflicting")));
        assert_eq!(
            (stats.conflicting_retransmissions, stats.retransmitted_bytes),
            (0, ch.len() as u64)
        );
    }

    /// Raw-IP frames 10 ms apart through an analyzer parking above
    /// `park_above`, to the end: its NDJSON and its counters.
    fn replay_to_end(park_above: usize, frames: &[Vec<u8>]) -> (String, Stats) {
        let mut a = Analyzer::new(Config {
            park_above,
            ..Config::default()
        });
        for (i, f) in frames.iter().enumerate() {
            a.push_frame(1.0 + i as f64 * 0.01, LinkType::RawIp, f);
        }
        a.finish();
        let mut out = Vec::new();
        for r in a.take_records() {
            crate::output::ndjson::encode(&mut out, &r);
        }
        (String::from_utf8(out).unwrap(), a.stats().clone())
    }

    /// A parked flow's handshake state is made again with the trace
    /// memory's answer of when its ClientHello came: a session ID a server
    /// issued to another connection after that (before the parked flow's
    /// end) does not make its TLS 1.3 compatibility ID an offered session,
    /// as it does not for a flow never parked.
    #[test]
    fn a_parked_hello_keeps_the_session_id_answer_of_its_time() {
        let sid = [0x5e; 32];
        let mut body = vec![3, 3];
        body.extend([7; 32]);
        body.push(32);
        body.extend(sid);
        // One suite, no compression, supported_versions: TLS 1.3.
        body.extend([0, 2, 0x13, 0x01, 1, 0, 0, 7, 0, 0x2b, 0, 3, 2, 3, 4]);
        let ch13 = handshake_record(1, 1, &body);
        let mut body = vec![3, 3];
        body.extend([9; 32]);
        body.push(32);
        body.extend(sid);
        body.extend([0xc0, 0x2f, 0, 0, 0]);
        let sh12 = handshake_record(3, 2, &body);
        let ch12 = client_hello();
        let run = |park_above| {
            let (c, s, c2) = ((1, 40000), (2, 443), (3, 40001));
            let frames = [
                tcp(c, s, 100, 0, SYN, &[]),
                tcp(s, c, 500, 101, SYN | ACK, &[]),
                tcp(c, s, 101, 501, ACK, &ch13),
                tcp(c2, s, 100, 0, SYN, &[]),
                tcp(s, c2, 500, 101, SYN | ACK, &[]),
                tcp(c2, s, 101, 501, ACK, &ch12),
                tcp(s, c2, 501, 101 + ch12.len() as u32, ACK, &sh12),
            ];
            let (out, stats) = replay_to_end(park_above, &frames);
            (out, stats.hellos_parked)
        };
        let (never, none) = run(usize::MAX);
        let (parked, n) = run(0);
        assert_eq!((none, n), (0, 2), "both hellos parked");
        assert_eq!(never, parked);
        let first = never.lines().find(|l| l.contains(":40000")).unwrap();
        assert!(!first.contains("session_id"), "{first}");
    }

    /// Bare ACKs leave a flow parked and are replayed, in order, when its
    /// state is made again (here at the end of the capture): a server
    /// acknowledging client bytes the capture lost (after the hello)
    /// counts the loss as for a flow never parked.
    #[test]
    fn a_parked_flow_replays_its_bare_acks() {
        let ch = client_hello();
        let lost = 101 + ch.len() as u32 + 100;
        let (c, s) = ((1, 40000), (2, 443));
        let frames = [
            tcp(c, s, 100, 0, SYN, &[]),
            tcp(s, c, 500, 101, SYN | ACK, &[]),
            tcp(c, s, 101, 501, ACK, &ch),
            tcp(s, c, 501, lost, ACK, &[]),
        ];
        let run = |park_above| replay_to_end(park_above, &frames);
        let (never, never_stats) = run(usize::MAX);
        let (parked, mut stats) = run(0);
        assert_eq!(stats.hellos_parked, 1);
        stats.hellos_parked = 0;
        assert_eq!(never, parked);
        assert_eq!(never_stats, stats);
        assert_eq!(stats.capture_loss_bytes, 100, "{stats:?}");
    }

    /// A ServerHello record choosing `suite` (TLS 1.2, no extensions).
    fn server_hello(suite: u16) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([9; 32]);
        body.push(0);
        body.extend(suite.to_be_bytes());
        body.extend([0, 0, 0]);
        handshake_record(3, 2, &body)
    }

    /// Issue 13: a connection whose ClientHello the capture lost still gets
    /// a record from the server's answer (it had none), noted
    /// `client_hello_lost`; with the server's direction alone the same
    /// answer is noted `one_sided:client` instead.
    #[test]
    fn a_lost_client_hello_or_a_missing_client_still_gives_a_record() {
        let (c, s) = ((1, 40000), (2, 443));
        let ch = client_hello();
        let sh = server_hello(0xc02f);
        let ack = 101 + ch.len() as u32;
        for client_visible in [true, false] {
            let mut a = Analyzer::new(Config::default());
            if client_visible {
                a.push_frame(1.0, LinkType::RawIp, &tcp(c, s, 100, 0, SYN, &[]));
            }
            a.push_frame(1.01, LinkType::RawIp, &tcp(s, c, 500, 101, SYN | ACK, &[]));
            if client_visible {
                a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, &[]));
            }
            a.push_frame(1.03, LinkType::RawIp, &tcp(s, c, 501, ack, ACK, &sh));
            a.finish();
            let r = a.take_records();
            assert_eq!(r.len(), 1, "client visible: {client_visible}");
            assert_eq!(
                (r[0].client.as_str(), r[0].version),
                ("10.0.0.1:40000", Some("TLS1.2"))
            );
            let want = if client_visible {
                "client_hello_lost"
            } else {
                "one_sided:client"
            };
            assert!(r[0].notes.contains(&want), "{:?}", r[0].notes);
        }
    }

    /// Regression (IDS evasion, server side): a forged ServerHello with
    /// another cipher, sent first, was reported as the truth, silently.
    #[test]
    fn forged_server_hello_is_noted() {
        let mut a = Analyzer::new(Config::default());
        let (c, s) = ((1, 40000), (2, 443));
        let ch = client_hello();
        let (forged, real) = (server_hello(0xc02f), server_hello(0xc030));
        a.push_frame(1.0, LinkType::RawIp, &tcp(c, s, 100, 0, SYN, &[]));
        a.push_frame(1.01, LinkType::RawIp, &tcp(s, c, 500, 101, SYN | ACK, &[]));
        a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, &ch));
        a.push_frame(
            1.03,
            LinkType::RawIp,
            &tcp(s, c, 501, 101 + ch.len() as u32, ACK, &forged),
        );
        a.push_frame(
            1.04,
            LinkType::RawIp,
            &tcp(s, c, 501, 101 + ch.len() as u32, ACK, &real),
        );
        a.finish();
        let records = a.take_records();
        assert_eq!(records.len(), 1);
        assert_eq!(
            records[0].cipher.as_deref(),
            Some("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "the first copy is read"
        );
        assert!(
            records[0]
                .notes
                .contains(&"server_conflicting_retransmission"),
            "{:?}",
            records[0].notes
        );
        assert_eq!(a.stats().conflicting_retransmissions, 1);
    }

    /// Regression: flows still being identified were counted nowhere (a
    /// short plain flow that ends with the capture; SYN-only flows expiring
    /// left `flows_expired` at 0). Every flow created now ends counted once.
    #[test]
    fn every_flow_is_counted_at_the_end_of_its_life() {
        let mut a = Analyzer::new(Config {
            idle_timeout: 10.0,
            ..Config::default()
        });
        // 100 SYN-only flows that expire, one short plain flow the capture
        // ends, one reset before any data, one TLS connection.
        for i in 0..100u16 {
            a.push_frame(
                1.0,
                LinkType::RawIp,
                &tcp((9, 1000 + i), (2, 443), 1, 0, SYN, &[]),
            );
        }
        a.push_frame(
            20.0,
            LinkType::RawIp,
            &tcp((3, 5000), (2, 80), 1, 0, ACK, b"HELLO"),
        );
        a.push_frame(
            20.0,
            LinkType::RawIp,
            &tcp((4, 5001), (2, 443), 1, 0, SYN, &[]),
        );
        a.push_frame(
            20.1,
            LinkType::RawIp,
            &tcp((2, 443), (4, 5001), 9, 2, RST | ACK, &[]),
        );
        a.push_frame(
            20.2,
            LinkType::RawIp,
            &tcp((5, 5002), (2, 443), 1, 0, ACK, &client_hello()),
        );
        let expired = a.stats().flows_expired;
        a.finish();
        let s = a.stats();
        assert_eq!(expired, 100, "SYN-only flows ended by the idle timeout");
        assert_eq!(
            (
                s.flows_created,
                s.tls_connections,
                s.non_tls_flows,
                s.unidentified_flows
            ),
            (103, 1, 0, 102)
        );
    }

    /// Whatever arrives, every flow created is counted once when it ends.
    #[test]
    fn flow_accounting_holds_on_random_traffic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let ch = client_hello();
        let mut a = Analyzer::new(Config {
            max_flows: 16,
            idle_timeout: 2.0,
            ..Config::default()
        });
        for i in 0..5000u32 {
            let (c, s) = (
                (1 + (rnd() % 4) as u8, 40000 + (rnd() % 8) as u16),
                (2, [443, 80][(rnd() % 2) as usize]),
            );
            let flags = [SYN, SYN | ACK, ACK, RST, ACK | 0x01][(rnd() % 5) as usize];
            let payload: &[u8] = match rnd() % 4 {
                0 => &ch,
                1 => &ch[..(rnd() % ch.len() as u64) as usize],
                2 => b"GET / HTTP/1.1",
                _ => &[],
            };
            let (from, to) = if rnd() % 2 == 0 { (c, s) } else { (s, c) };
            a.push_frame(
                f64::from(i) * 0.01,
                LinkType::RawIp,
                &tcp(
                    from,
                    to,
                    rnd() as u32 % 4096,
                    rnd() as u32 % 4096,
                    flags,
                    payload,
                ),
            );
        }
        a.finish();
        let s = a.stats();
        assert!(s.flows_created > 100, "{s:?}");
        assert_eq!(
            s.flows_created,
            s.tls_connections + s.non_tls_flows + s.unidentified_flows,
            "{s:?}"
        );
    }

    /// Regression (hostile traffic): a SYN-only flow cost ~2.9 KB, the
    /// handshake state being made with the flow; now it waits for a byte.
    #[test]
    fn a_flow_without_payload_is_small() {
        let mut a = Analyzer::new(Config::default());
        for i in 0..1000u16 {
            a.push_frame(
                1.0,
                LinkType::RawIp,
                &tcp((9, 1000 + i), (2, 443), 1, 0, SYN, &[]),
            );
        }
        let per_flow = a.memory_used() / 1000;
        assert!(per_flow <= 320, "{per_flow} bytes per SYN-only flow");
        a.push_frame(
            1.1,
            LinkType::RawIp,
            &tcp((9, 1000), (2, 443), 2, 0, ACK, &client_hello()),
        );
        assert!(
            a.memory_used() > 1000 * per_flow + 1000,
            "a ClientHello makes the handshake state"
        );
    }

    /// The memory budget holds after every packet, evicts the least
    /// recently used first, and every evicted flow still ends counted (a
    /// TLS one with its record).
    #[test]
    fn the_memory_budget_holds_and_evicts_oldest_first() {
        let budget = 64 * 1024;
        let mut a = Analyzer::new(Config {
            max_memory: budget,
            ..Config::default()
        });
        let ch = client_hello_sni("budget.example");
        for i in 0..500u16 {
            let ts = 1.0 + f64::from(i) * 0.001;
            a.push_frame(
                ts,
                LinkType::RawIp,
                &tcp((7, 2000 + i), (2, 443), 1, 0, SYN, &[]),
            );
            a.push_frame(
                ts,
                LinkType::RawIp,
                &tcp((7, 2000 + i), (2, 443), 2, 0, ACK, &ch),
            );
            assert!(
                a.memory_used() <= budget,
                "{} > {budget} after flow {i}",
                a.memory_used()
            );
        }
        let evicted = a.take_records();
        assert!(a.stats().memory_evictions > 0 && !evicted.is_empty());
        assert_eq!(evicted[0].client, "10.0.0.7:2000", "the oldest goes first");
        assert!(evicted
            .iter()
            .all(|r| r.handshake == Some(HandshakeKind::Incomplete)
                && r.sni.as_deref() == Some("budget.example")));
        a.finish();
        let s = a.stats();
        assert_eq!((s.flows_created, s.tls_connections), (500, 500), "{s:?}");
        assert_eq!(a.memory_used(), 0, "nothing held after the end");
    }

    /// The connection of `client_hello_sni` with `isn`, reset by the
    /// server after the hello, from `t`.
    fn short_connection(a: &mut Analyzer, t: f64, isn: u32) {
        let (c, s) = ((1, 40000), (2, 443));
        let ch = client_hello_sni("twice.example");
        a.push_frame(t, LinkType::RawIp, &tcp(c, s, isn, 0, SYN, &[]));
        a.push_frame(
            t + 0.01,
            LinkType::RawIp,
            &tcp(s, c, 500, isn + 1, SYN | ACK, &[]),
        );
        a.push_frame(
            t + 0.02,
            LinkType::RawIp,
            &tcp(c, s, isn + 1, 501, ACK, &ch),
        );
        a.push_frame(
            t + 0.03,
            LinkType::RawIp,
            &tcp(s, c, 501, isn + 1 + ch.len() as u32, RST | ACK, &[]),
        );
    }

    /// Issue 13: the same connection twice in one capture (a capture
    /// concatenated with itself: the copy goes back in time) gave two
    /// records; a new connection on the tuple (another ISN) still counts.
    #[test]
    fn a_repeated_connection_has_one_record() {
        let mut a = Analyzer::new(Config::default());
        short_connection(&mut a, 1.0, 100);
        short_connection(&mut a, 1.0, 100);
        short_connection(&mut a, 5.0, 100);
        assert_eq!(a.take_records().len(), 1);
        assert_eq!(a.stats().repeated_connections, 2);
        short_connection(&mut a, 6.0, 9000);
        a.finish();
        assert_eq!(a.take_records().len(), 1, "another ISN: another connection");
        let s = a.stats();
        assert_eq!((s.flows_created, s.tls_connections), (2, 2), "{s:?}");
        // The copy's SYN while the first is still open: one connection.
        let mut a = Analyzer::new(Config::default());
        let (c, s) = ((1, 40000), (2, 443));
        let ch = client_hello_sni("open.example");
        for _ in 0..2 {
            a.push_frame(1.0, LinkType::RawIp, &tcp(c, s, 100, 0, SYN, &[]));
            a.push_frame(1.01, LinkType::RawIp, &tcp(s, c, 500, 101, SYN | ACK, &[]));
            a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, &ch));
        }
        a.finish();
        assert_eq!(a.take_records().len(), 1);
        assert_eq!(a.stats().conflicting_retransmissions, 0);
    }

    /// Issue 13: a load balancer's PROXY header in front of the
    /// ClientHello (HAProxy `send-proxy`, in the hello's segment or its
    /// own) hid the connection; now the record names the original client.
    #[test]
    fn a_proxy_protocol_header_names_the_original_client() {
        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        v2.extend([
            0x21, 0x11, 0, 12, 198, 51, 100, 9, 10, 0, 0, 2, 0xdc, 0x05, 1, 0xbb,
        ]);
        let v1 = b"PROXY TCP4 198.51.100.7 10.0.0.2 56324 443\r\n".to_vec();
        for (header, together, want) in [
            (&v1, true, "198.51.100.7:56324"),
            (&v2, false, "198.51.100.9:56325"),
        ] {
            let mut a = Analyzer::new(Config::default());
            let (c, s) = ((1, 40000), (2, 443));
            let ch = client_hello_sni("backend.example");
            a.push_frame(1.0, LinkType::RawIp, &tcp(c, s, 100, 0, SYN, &[]));
            a.push_frame(1.01, LinkType::RawIp, &tcp(s, c, 500, 101, SYN | ACK, &[]));
            if together {
                let mut seg = header.clone();
                seg.extend(&ch);
                a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, &seg));
            } else {
                a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, header));
                a.push_frame(
                    1.03,
                    LinkType::RawIp,
                    &tcp(c, s, 101 + header.len() as u32, 501, ACK, &ch),
                );
            }
            a.finish();
            let r = a.take_records();
            assert_eq!(r.len(), 1, "{:?}", a.stats());
            assert_eq!(
                (r[0].sni.as_deref(), r[0].proxied_client.as_deref()),
                (Some("backend.example"), Some(want))
            );
            assert_eq!(
                r[0].bytes.client_handshake,
                Some(ch.len() as u64),
                "the header is no handshake byte"
            );
            assert_eq!(a.stats().proxy_protocol_headers, 1);
        }
    }

    /// Regression (live eBPF, a client port reused within seconds): the old
    /// connection, still open, was finished by the new SYN and its tuple
    /// reported finished, so the source told the kernel to stop the NEW
    /// connection, whose record came out `failed` or not at all.
    #[test]
    fn a_reused_tuple_is_not_reported_finished() {
        let mut a = Analyzer::new(Config {
            report_stragglers: true,
            ..Config::default()
        });
        let ch = client_hello();
        let (c, s) = ((1, 40000), (2, 443));
        a.push_frame(1.0, LinkType::RawIp, &tcp(c, s, 100, 0, SYN, &[]));
        a.push_frame(1.01, LinkType::RawIp, &tcp(s, c, 500, 101, SYN | ACK, &[]));
        a.push_frame(1.02, LinkType::RawIp, &tcp(c, s, 101, 501, ACK, &ch));
        a.push_frame(2.0, LinkType::RawIp, &tcp(c, s, 9000, 0, SYN, &[]));
        assert_eq!(
            a.take_records().len(),
            1,
            "the old connection's record is out"
        );
        assert!(
            a.take_stragglers().is_empty(),
            "but its tuple is live again"
        );
    }
}
