//! TLS over TCP: one flow's transport layer. Segments go through
//! reassembly, then a ClientHello detector, then each direction's TLS
//! record layer, whose output becomes [`Event`]s for the shared
//! [`Handshake`] state machine. This module keeps what only TCP has: the
//! three-way handshake, sequence numbers, gaps and capture loss.

use crate::counters::Stats;
use crate::flow::reassembly::{Chunk, Reassembler, Segment};
use crate::flow::table::{Endpoint, FlowKey, Footprint, SLOT_OVERHEAD};
use crate::handshake::{
    ms, Close, Dir, Directive, Event, Finish, Handshake, TraceMemory, TransportView, Vantage,
};
use crate::memory::HeapSize;
use crate::proxy_protocol;
use crate::record::{ConnectionRecord, Transport};
use crate::seq::Seq;
use crate::tls::enums::{content_type as ct, handshake_type as ht};
use crate::tls::keylog::KeyLog;
use crate::tls::record::{RecordStream, StreamEvent};
use crate::tls::server_flight::{Opened, ServerFlight};
use crate::wire::TcpHeader;

/// Segments (per direction) inspected for a ClientHello before a flow is
/// declared not TLS. More than one allows STARTTLS, SOCKS and proxies.
const DETECT_MAX_SEGMENTS: u8 = 16;

/// Timestamps of the TCP three-way handshake.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TcpHandshake {
    /// The last SYN before the SYN-ACK (Karn: a retransmitted SYN is the one answered, if any).
    pub syn: Option<f64>,
    pub syn_ack: Option<f64>,
    /// The initiator's first segment acknowledging the SYN-ACK.
    pub ack: Option<f64>,
}

impl TcpHandshake {
    /// SYN -> SYN-ACK plus SYN-ACK -> ACK: the full round trip from any vantage point.
    pub fn rtt(&self) -> Option<f64> {
        match (self.syn, self.syn_ack, self.ack) {
            (Some(syn), Some(_), Some(ack)) if ack >= syn => Some(ack - syn),
            _ => None,
        }
    }
}

impl TcpHandshake {
    /// The observer's round trips to each side and when the client's ACK
    /// ended the handshake.
    pub fn vantage(&self) -> Vantage {
        let gap =
            |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| b - a).filter(|d| *d >= 0.0);
        Vantage {
            to_server: gap(self.syn, self.syn_ack),
            to_client: gap(self.syn_ack, self.ack),
            connected: self.ack,
            retransmission: None,
        }
    }
}

/// Where a flow stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Detecting,
    Tls,
    /// The record is out; later packets are ignored.
    Done,
    NotTls,
}

/// What the flows of one trace share.
pub struct Ctx<'a> {
    pub mem: &'a mut dyn TraceMemory,
    pub keylog: Option<&'a KeyLog>,
    pub stats: &'a mut Stats,
    /// Out-of-order bytes buffered per direction ([`Reassembler`]).
    pub max_flow_buffer: usize,
    /// Largest handshake message kept ([`RecordStream`]).
    pub max_handshake_message: usize,
    /// Follow handshakes as Zeek would ([`crate::Config::zeek_view`]).
    pub zeek_view: bool,
    /// Capture time of the packet being handled (or of the flow's last
    /// packet when it is finished): what Zeek calls `network_time`.
    pub now: f64,
    /// The flow table is large: a flow that has shown only its
    /// ClientHello is parked ([`Parked`]).
    pub park: bool,
}

impl Ctx<'_> {
    /// The same context at another capture time, not parking: for
    /// segments replayed into a flow made again.
    fn at(&mut self, now: f64) -> Ctx<'_> {
        Ctx {
            mem: &mut *self.mem,
            keylog: self.keylog,
            stats: &mut *self.stats,
            max_flow_buffer: self.max_flow_buffer,
            max_handshake_message: self.max_handshake_message,
            zeek_view: self.zeek_view,
            now,
            park: false,
        }
    }
}

/// Collects the first bytes of a segment to see if a TLS ClientHello starts there.
#[derive(Debug, Default)]
struct Probe {
    /// The bytes gathered: a record header and the message type (inline:
    /// every handshake state has two probes).
    bytes: [u8; 6],
    len: u8,
    start: Option<(u32, f64, Option<u32>)>,
    tries: u8,
}

enum ProbeResult {
    NeedMore,
    NotHello,
    Hello,
    /// A direction that starts with a ServerHello: its peer is the client,
    /// whose hello the capture does not show (one direction only).
    ServerHello,
}

/// TLS record header of a ClientHello, or an SSLv2 CLIENT-HELLO.
fn looks_like_client_hello(b: &[u8]) -> bool {
    let tls = b[0] == ct::HANDSHAKE && b[1] == 3 && b[2] <= 4 && b[5] == 1;
    let v2 = b[0] & 0x80 != 0 && b[2] == 1 && (b[3] == 3 || b[3] == 0 || b[3] == 2);
    tls || v2
}

/// TLS record header of a ServerHello, or of an alert (a server refusing
/// the ClientHello: a fatal alert is all it sends).
fn looks_like_server_hello(b: &[u8]) -> bool {
    let hello = b[0] == ct::HANDSHAKE && b[1] == 3 && b[2] <= 4 && b[5] == ht::SERVER_HELLO;
    let alert = b[0] == ct::ALERT && b[1] == 3 && b[2] <= 4 && b[3..5] == [0, 2] && b[5] == 2;
    hello || alert
}

impl Probe {
    /// At least one attempt was decided "no ClientHello" and none is half
    /// gathered.
    fn decided_not_hello(&self) -> bool {
        self.tries > 0 && self.start.is_none()
    }

    /// Forgets the bytes gathered (they are being replaced); attempts count on.
    fn restart(&mut self) {
        self.len = 0;
        self.start = None;
    }

    fn gathered(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn feed(&mut self, c: &Chunk<'_>) -> ProbeResult {
        if self.start.is_none() {
            self.start = Some((c.seq, c.ts, c.ack));
            self.tries = self.tries.saturating_add(1);
        }
        let have = usize::from(self.len);
        let n = (6 - have).min(c.data.len());
        self.bytes[have..have + n].copy_from_slice(&c.data[..n]);
        self.len += n as u8;
        if self.len < 6 {
            return ProbeResult::NeedMore;
        }
        let found = classify(&self.bytes);
        if matches!(found, ProbeResult::NotHello) {
            self.len = 0;
            self.start = None;
        }
        found
    }
}

/// What a direction's first six bytes (a record header and a message
/// type) start: a client's hello, a server's answer, or neither.
fn classify(head: &[u8]) -> ProbeResult {
    if looks_like_client_hello(head) {
        ProbeResult::Hello
    } else if looks_like_server_hello(head) {
        ProbeResult::ServerHello
    } else {
        ProbeResult::NotHello
    }
}

/// State kept while a flow's handshake is being followed; dropped once
/// the connection's record is out.
struct Active {
    reasm: [Reassembler; 2],
    /// Everything above reassembly, apart so that reassembly's callback can
    /// route chunks without copying them.
    up: Upper,
}

struct Upper {
    /// The client's record layer, and the server's, made at the server's
    /// first byte (most of a flow still waiting for an answer is these).
    client_stream: RecordStream,
    server_stream: Option<Box<RecordStream>>,
    /// Per direction, while the flow is being identified (dropped once
    /// the hello is found).
    probe: Option<Box<[Probe; 2]>>,
    /// Index of the direction that sent the ClientHello.
    client: Option<usize>,
    hs: Handshake,
    notes: Vec<&'static str>,
    /// The server's encrypted TLS 1.3 flight, opened with a key log.
    server_flight: Option<Box<ServerFlight>>,
    /// The original client a PROXY protocol header named, per direction
    /// (boxed: most flows have no such header).
    proxied: Option<Box<[Option<Endpoint>; 2]>>,
    /// When bytes first came again (either direction): a retransmission.
    /// NaN until then (8 bytes where `Option<f64>` takes 16).
    first_retransmission: f64,
    /// The latest segment with payload, per direction.
    last_data: [f64; 2],
    /// Bytes of a PROXY protocol header in front of each direction's stream.
    proxy_len: [u32; 2],
}

/// A record held on its flow until the connection closes (`--record-at
/// close`), with where each side's bytes after the handshake start.
pub struct Held {
    record: ConnectionRecord,
    app_start: AppStart,
}

/// Sequence number where each side's bytes after its handshake records
/// begin: [client, server], and the direction index of the client.
#[derive(Debug, Clone, Copy)]
struct AppStart {
    at: [Option<u32>; 2],
    client_dir: usize,
}

impl HeapSize for Held {
    fn heap_size(&self) -> usize {
        self.record.heap_size()
    }
}

/// A flow that has shown nothing but its client's ClientHello, one record
/// in one segment, and bare ACKs, set aside while the flow table is large
/// ([`Ctx::park`], issue 19): the record's body (~0.5 KiB for a browser's
/// hello) instead of the handshake state made from it (`Active`, the
/// parsed hello and the copy kept to compare retransmissions with: ~1.9
/// KiB). The state is made again from the same segments, exactly as the
/// first time, before anything else touches the flow
/// ([`TcpFlow::unpark`]): a hello flood's or a large capture's open
/// handshakes cost under 1 KiB each, other flows nothing.
struct Parked {
    /// The record after its 5-byte header (type 22, `version`, length).
    body: Box<[u8]>,
    version: [u8; 2],
    dir: u8,
    seq: u32,
    ack: Option<u32>,
    ts: f64,
    /// What the trace memory said of the hello's session ID then (it may
    /// know of IDs issued since by the time the state is made again).
    session: (bool, Option<(u64, u64)>),
    /// Bare ACKs since (direction, acknowledgement, time), in order: a
    /// server's kernel acknowledges the hello long before its TLS stack
    /// answers it. A boxed Vec is one pointer, not three: `Parked` stays
    /// in mimalloc's 80-byte class, and most parked flows have none.
    #[allow(clippy::box_collection)]
    acks: Option<Box<Vec<(u8, u32, f64)>>>,
}

impl HeapSize for Parked {
    fn heap_size(&self) -> usize {
        self.body.len()
            + crate::memory::ALLOC_OVERHEAD
            + self.acks.as_ref().map_or(0, |a| {
                size_of::<Vec<(u8, u32, f64)>>()
                    + a.capacity() * size_of::<(u8, u32, f64)>()
                    + 2 * crate::memory::ALLOC_OVERHEAD
            })
    }
}

/// Whether a segment's payload is one whole TLS record holding one whole
/// ClientHello, and nothing else.
fn one_client_hello_record(p: &[u8]) -> bool {
    let [ct::HANDSHAKE, 3, _, hi, lo, ht::CLIENT_HELLO, a, b, c, ..] = *p else {
        return false;
    };
    let record = usize::from(u16::from_be_bytes([hi, lo]));
    let message = u32::from_be_bytes([0, a, b, c]) as usize;
    record == p.len() - 5 && message + 4 == record
}

/// One TCP flow. Until its first payload byte it is only this struct (a
/// SYN flood costs no more): the handshake state is made then.
pub struct TcpFlow {
    /// The endpoint that sent the first packet seen; direction 0 is a -> b.
    pub a: Endpoint,
    pub b: Endpoint,
    first_ts: f64,
    pub last_ts: f64,
    pub tcp: TcpHandshake,
    pub syn_dir: Option<usize>,
    /// The initial sequence number of the SYN that counts: with the tuple,
    /// it names the connection (a copy of it later in the capture is the
    /// same connection, not a new one).
    pub client_isn: Option<u32>,
    server_isn: Option<u32>,
    fin: [bool; 2],
    /// How far each direction's byte stream is known to reach
    /// ([`note_ends`](Self::note_ends)): at the close, where it ended.
    stream_end: [Option<u32>; 2],
    /// When the connection closed (both FINs, or a RST).
    closed_at: Option<f64>,
    /// `--record-at close`: the record, waiting for the close.
    pub held: Option<Box<Held>>,
    /// Whether each direction showed any packet: a capture may hold one
    /// direction only (a tap on one fibre, asymmetric routing).
    seen: [bool; 2],
    pub status: Status,
    /// Where each direction's byte stream starts (ISN + 1 of its latest
    /// SYN or SYN-ACK), while there is no reassembler to tell.
    stream_start: [Option<u32>; 2],
    /// Made at the first payload byte; dropped once the record is out or
    /// the flow is not TLS.
    active: Option<Box<Active>>,
    /// Instead of `active` while the flow has shown only its ClientHello
    /// and the table is large.
    parked: Option<Box<Parked>>,
}

impl Footprint for TcpFlow {
    /// The flow in the table, and its handshake state once it has one.
    fn footprint(&self) -> usize {
        std::mem::size_of::<TcpFlow>()
            + std::mem::size_of::<FlowKey>()
            + SLOT_OVERHEAD
            + self.active.heap_size()
            + self.parked.heap_size()
            + self.held.heap_size()
    }
}

impl HeapSize for Active {
    fn heap_size(&self) -> usize {
        let up = &self.up;
        self.reasm.iter().map(HeapSize::heap_size).sum::<usize>()
            + up.client_stream.heap_size()
            + up.server_stream.heap_size()
            + up.hs.heap_size()
            + up.notes.heap_size()
            + up.probe.as_ref().map_or(0, |_| {
                std::mem::size_of::<[Probe; 2]>() + crate::memory::ALLOC_OVERHEAD
            })
            + up.proxied.as_ref().map_or(0, |_| {
                std::mem::size_of::<[Option<Endpoint>; 2]>() + crate::memory::ALLOC_OVERHEAD
            })
            + up.server_flight.heap_size()
    }
}

/// What one segment did to its flow.
pub struct SegmentOutcome {
    /// Both FINs seen, or a RST.
    pub closed: bool,
    /// Nothing more about the handshake remains to be learnt (or the record cap was hit).
    pub timed: bool,
}

impl TcpFlow {
    pub fn new(ts: f64, from: Endpoint, to: Endpoint) -> Self {
        TcpFlow {
            a: from,
            b: to,
            first_ts: ts,
            last_ts: ts,
            tcp: TcpHandshake::default(),
            syn_dir: None,
            client_isn: None,
            server_isn: None,
            fin: [false; 2],
            stream_end: [None; 2],
            closed_at: None,
            held: None,
            seen: [false; 2],
            status: Status::Detecting,
            stream_start: [None; 2],
            active: None,
            parked: None,
        }
    }

    /// A flow whose packets are skipped from the start: a repeat of one
    /// whose record is out (same tuple and ISN).
    pub fn repeat(ts: f64, from: Endpoint, to: Endpoint, isn: u32) -> Self {
        TcpFlow {
            status: Status::Done,
            client_isn: Some(isn),
            syn_dir: Some(0),
            ..TcpFlow::new(ts, from, to)
        }
    }

    /// How far each direction's stream is known to reach, by the key's
    /// [`side`](FlowKey::side) of its sender (for the flow's tombstone).
    pub fn stream_ends(&self, key: &FlowKey) -> [Option<u32>; 2] {
        let mut ends = self.stream_end;
        if key.side(self.a) == 1 {
            ends.swap(0, 1);
        }
        ends
    }

    /// The handshake state, made at the flow's first payload byte.
    fn activate(start: [Option<u32>; 2], ctx: &Ctx<'_>) -> Box<Active> {
        {
            let reasm = |d: usize| {
                let mut r = Reassembler::new(ctx.max_flow_buffer);
                if let Some(seq) = start[d] {
                    r.start_at(seq);
                }
                r
            };
            Box::new(Active {
                reasm: [reasm(0), reasm(1)],
                up: Upper {
                    client_stream: RecordStream::new(ctx.max_handshake_message),
                    server_stream: None,
                    probe: None,
                    client: None,
                    hs: Handshake::new(Transport::Tcp).zeek_view(ctx.zeek_view),
                    notes: Vec::new(),
                    server_flight: None,
                    proxied: None,
                    first_retransmission: f64::NAN,
                    last_data: [f64::NEG_INFINITY; 2],
                    proxy_len: [0; 2],
                },
            })
        }
    }

    /// One segment of this flow, sent by `from`.
    pub fn segment(
        &mut self,
        ts: f64,
        from: Endpoint,
        h: &TcpHeader,
        payload: &[u8],
        (truncated, seen_before): (bool, bool),
        ctx: &mut Ctx<'_>,
    ) -> SegmentOutcome {
        let dir = usize::from(from != self.a);
        // A bare ACK leaves a parked flow parked, noted to be replayed
        // after its hello; anything else makes its state again first.
        let bare_ack =
            payload.is_empty() && h.ack_flag && !(h.syn || h.fin || h.rst || seen_before);
        match self.parked.as_deref_mut() {
            Some(p) if bare_ack => {
                p.acks
                    .get_or_insert_with(Default::default)
                    .push((dir as u8, h.ack, ts));
            }
            _ => self.unpark(ctx),
        }
        // The flow's first payload: if it is all a ClientHello, the flow
        // may be parked after it.
        let first = self.active.is_none() && self.parked.is_none() && !payload.is_empty();
        self.seen[dir] = true;
        self.track_tcp_handshake(dir, ts, h);
        if seen_before {
            if let Some(act) = self.active.as_deref_mut() {
                act.up.resent(dir, ts);
            }
        }
        self.payload(dir, ts, h, payload, truncated, ctx);
        // While the flow is followed every segment tells how far the
        // streams reach; once its record is out, only FIN/RST (all the live
        // source sends then).
        if !(h.fin || h.rst) {
            self.note_ends(dir, h, payload.len());
        }
        let closed = self.closing(dir, ts, h, payload.len());
        let missing = self.missing_side();
        if let Some(act) = self.active.as_mut().filter(|_| closed) {
            // No more bytes will come: what waits behind a hole is read first.
            act.skip_holes(&mut self.status, ctx);
            if let Some(side) = missing {
                act.up.hs.one_sided(side);
            }
            // One FIN only says the visible side closed, not that the
            // handshake failed.
            if h.rst || missing.is_none() {
                act.up.hs.on(
                    Dir::Client,
                    Event::Close(if h.rst { Close::Reset } else { Close::Fin }),
                    ctx.mem,
                );
            }
        }
        // A server record the key log is still to open (its payload split
        // over segments) may yet turn out to be a ticket, not data.
        // And a client that has not used the connection yet may still do
        // so (`idle_before_use`), unless the capture does not show it.
        let seen = self.seen;
        if let Some(a) = self.active.as_mut() {
            a.up.hs.set_to_client(self.tcp.vantage().to_client);
        }
        let timed = self.active.as_ref().map(|a| &a.up).is_some_and(|a| {
            let opened = a.server_flight.as_ref().is_none_or(|f| f.done);
            // Cheapest first: this runs for every segment.
            let waits = || a.client.is_some_and(|c| seen[c]) && a.hs.awaits_use();
            (a.client.is_some() && opened && a.hs.fully_timed() && !waits())
                || a.hs.records_overflowed()
        });
        if self.status == Status::NotTls {
            self.active = None;
        }
        if ctx.park && first && !(closed || timed || truncated || seen_before) {
            ctx.stats.hellos_parked += u64::from(self.park(dir, ts, h, payload));
        }
        SegmentOutcome { closed, timed }
    }

    /// Parks the flow ([`Parked`]) if `payload`, the flow's first, was one
    /// whole ClientHello record that left nothing else behind: the state it
    /// made is what the same segment makes again.
    fn park(&mut self, dir: usize, ts: f64, h: &TcpHeader, payload: &[u8]) -> bool {
        if self.status != Status::Tls
            || h.syn
            || h.fin
            || h.rst
            || !one_client_hello_record(payload)
        {
            return false;
        }
        let Some(a) = self.active.as_deref() else {
            return false;
        };
        let up = &a.up;
        let alone = up.client == Some(dir)
            && up.notes.is_empty()
            && up.proxied.is_none()
            && up.server_flight.is_none()
            && up.server_stream.is_none()
            && up.hs.client_hello().is_some();
        if !alone {
            return false;
        }
        let session = up.hs.session_id_answer();
        self.active = None;
        self.parked = Some(Box::new(Parked {
            body: payload[5..].into(),
            version: [payload[1], payload[2]],
            dir: dir as u8,
            seq: h.seq,
            ack: h.ack_flag.then_some(h.ack),
            ts,
            session,
            acks: None,
        }));
        true
    }

    /// Makes a parked flow's handshake state again: its ClientHello's
    /// segment goes through [`payload`](Self::payload) as it did the first
    /// time, at the same capture time, counting nothing twice, with the
    /// trace memory's answer of then.
    fn unpark(&mut self, ctx: &mut Ctx<'_>) {
        let Some(p) = self.parked.take() else {
            return;
        };
        let mut record = Vec::with_capacity(5 + p.body.len());
        record.extend_from_slice(&[ct::HANDSHAKE, p.version[0], p.version[1]]);
        record.extend_from_slice(&(p.body.len() as u16).to_be_bytes());
        record.extend_from_slice(&p.body);
        let h = TcpHeader {
            src_port: 0,
            dst_port: 0,
            seq: p.seq,
            ack: p.ack.unwrap_or(0),
            syn: false,
            ack_flag: p.ack.is_some(),
            fin: false,
            rst: false,
        };
        // Counted the first time already.
        let mut counted_before = Stats::default();
        let mut again = ctx.at(p.ts);
        again.stats = &mut counted_before;
        let status = std::mem::replace(&mut self.status, Status::Detecting);
        self.payload(usize::from(p.dir), p.ts, &h, &record, false, &mut again);
        self.status = status;
        let to_client = self.tcp.vantage().to_client;
        if let Some(a) = self.active.as_deref_mut() {
            a.up.hs.restore_session_id_answer(p.session);
            a.up.hs.set_to_client(to_client);
        }
        // The bare ACKs, as they came (counted now: they were not).
        for (dir, ack, ts) in p.acks.map(|a| *a).unwrap_or_default() {
            let h = TcpHeader {
                ack,
                ack_flag: true,
                ..h
            };
            self.payload(usize::from(dir), ts, &h, &[], false, &mut ctx.at(ts));
            if let Some(a) = self.active.as_deref_mut() {
                a.up.hs.set_to_client(to_client);
            }
        }
    }

    /// How far each direction's stream is known to reach, from a
    /// segment's sequence number past its payload (less the FIN's own
    /// sequence number once its sender has closed) and its acknowledgement
    /// of the peer's (likewise). The furthest end known wins: a FIN whose
    /// payload the live source cut (a quiet direction) understates its own
    /// end, which the peer's later acknowledgement corrects.
    fn note_ends(&mut self, dir: usize, h: &TcpHeader, payload_len: usize) {
        if h.syn {
            return;
        }
        let mut extend = |d: usize, end: u32| {
            let known = &mut self.stream_end[d];
            if known.is_none_or(|k| Seq(end) > Seq(k)) {
                *known = Some(end);
            }
        };
        let own_fin = u32::from(self.fin[dir] && !h.fin);
        extend(
            dir,
            h.seq.wrapping_add(payload_len as u32).wrapping_sub(own_fin),
        );
        if h.ack_flag {
            extend(1 - dir, h.ack.wrapping_sub(u32::from(self.fin[1 - dir])));
        }
    }

    /// A segment's FIN/RST ends its sender's stream (and tells, by its
    /// acknowledgement, how far the peer's reached). Returns whether the
    /// connection is closed: a FIN is a half-close (the peer may still
    /// finish the handshake: a False Start client can close first); both
    /// FINs, or a RST, end it -- or the one FIN of a capture that shows one
    /// direction.
    pub fn closing(&mut self, dir: usize, ts: f64, h: &TcpHeader, payload_len: usize) -> bool {
        if !(h.fin || h.rst) {
            return false;
        }
        self.note_ends(dir, h, payload_len);
        self.fin[dir] |= h.fin;
        let closed = h.rst || self.fin == [true, true] || (h.fin && !self.seen[1 - dir]);
        if closed {
            self.closed_at.get_or_insert(ts);
        }
        closed
    }

    /// Where each side's bytes after the handshake start: the stream's
    /// start (ISN + 1), past a PROXY header and the handshake records.
    fn app_start(&self, up: &Upper, client_dir: usize) -> AppStart {
        let bytes = up.hs.record_bytes();
        let isn = |d: usize| {
            if self.syn_dir == Some(d) {
                self.client_isn
            } else {
                self.server_isn
            }
        };
        let start = |d: usize, hs: Option<u64>| {
            let skip = u64::from(up.proxy_len[d]) + hs?;
            Some(isn(d)?.wrapping_add(1).wrapping_add(skip as u32))
        };
        AppStart {
            at: [
                start(client_dir, bytes.client_handshake),
                start(1 - client_dir, bytes.server_handshake),
            ],
            client_dir,
        }
    }

    /// Fills what only the close tells: `lifetime` and each side's bytes
    /// after the handshake. Null while the connection is open.
    fn closed_fields(&self, rec: &mut ConnectionRecord, app: AppStart) {
        let Some(at) = self.closed_at else {
            return;
        };
        rec.timing.lifetime = Some(ms((at - self.first_ts).max(0.0)));
        let dirs = [app.client_dir, 1 - app.client_dir];
        let sent = |i: usize| {
            let (start, end) = (app.at[i]?, self.stream_end[dirs[i]]?);
            (Seq(end) >= Seq(start)).then(|| u64::from(end.wrapping_sub(start)))
        };
        rec.bytes.client_app = sent(0);
        rec.bytes.server_app = sent(1);
    }

    /// The held record (`--record-at close`), once the flow leaves the
    /// table: complete if the connection closed, else with a note saying
    /// why it went out open (`why`: None for a new connection on the tuple).
    pub fn release(&mut self, why: Option<Finish>) -> Option<(ConnectionRecord, bool)> {
        let Held {
            mut record,
            app_start,
        } = *self.held.take()?;
        let closed = self.closed_at.is_some();
        if closed {
            self.closed_fields(&mut record, app_start);
        } else {
            record.notes.push(match why {
                Some(Finish::CaptureEnd) => "open:capture_ended",
                Some(Finish::Evicted) => "open:evicted",
                Some(Finish::Expired) => "open:idle_timeout",
                Some(Finish::Done) | None => "open:tuple_reused",
            });
            record.notes.sort_unstable();
        }
        Some((record, closed))
    }

    /// The side whose direction this flow has not shown at all, once the
    /// client is known.
    fn missing_side(&self) -> Option<Dir> {
        let client = self.active.as_ref()?.up.client?;
        match (self.seen[client], self.seen[1 - client]) {
            (true, false) => Some(Dir::Server),
            (false, true) => Some(Dir::Client),
            _ => None,
        }
    }

    fn track_tcp_handshake(&mut self, dir: usize, ts: f64, h: &TcpHeader) {
        if matches!(self.status, Status::Done | Status::NotTls) {
            return;
        }
        if h.syn && !h.ack_flag {
            if self.tcp.syn_ack.is_none() {
                self.tcp.syn = Some(ts);
                self.syn_dir = Some(dir);
                self.client_isn = Some(h.seq);
            }
            self.stream_starts_at(dir, h.seq.wrapping_add(1));
        } else if h.syn && h.ack_flag {
            // A SYN-ACK without its SYN (the capture shows the server's
            // direction only) still says who opened the connection.
            self.syn_dir.get_or_insert(1 - dir);
            // The last SYN-ACK before the handshake's ACK is the one that counts.
            if self.tcp.ack.is_none() && self.syn_dir == Some(1 - dir) {
                self.tcp.syn_ack.get_or_insert(ts);
                self.server_isn = Some(h.seq);
            }
            self.stream_starts_at(dir, h.seq.wrapping_add(1));
        } else if h.ack_flag
            && self.tcp.ack.is_none()
            && self.syn_dir == Some(dir)
            && self
                .server_isn
                .is_none_or(|isn| h.ack == isn.wrapping_add(1))
        {
            // Without the SYN-ACK (the capture lacks the server's
            // direction) the initiator's first ACK is still the
            // handshake's third packet; its time counts only then.
            self.tcp.ack = Some(ts);
        }
    }

    /// A SYN or SYN-ACK: the direction's stream starts after it, unless
    /// bytes were delivered already (a retry with another ISN restarts it).
    fn stream_starts_at(&mut self, dir: usize, seq: u32) {
        match self.active.as_deref_mut() {
            Some(act) => {
                act.reasm[dir].start_at(seq);
                act.reasm[dir].restart_at(seq);
            }
            None => self.stream_start[dir] = Some(seq),
        }
    }

    /// Feeds a segment's payload through reassembly, detection and the
    /// record layer.
    fn payload(
        &mut self,
        dir: usize,
        ts: f64,
        h: &TcpHeader,
        payload: &[u8],
        truncated: bool,
        ctx: &mut Ctx<'_>,
    ) {
        if self.status != Status::Detecting && self.active.is_none() {
            return;
        }
        if self.active.is_none() && payload.is_empty() {
            // Nothing to follow yet: no handshake state for a bare ACK.
            return;
        }
        if self.active.is_none() {
            self.active = Some(Self::activate(self.stream_start, ctx));
        }
        let Some(act) = self.active.as_deref_mut() else {
            return;
        };
        let was = self.status;
        if h.ack_flag {
            act.skip_capture_loss(&mut self.status, 1 - dir, h.ack, ctx);
            if let Some(c) = act.up.client {
                let side = if c == dir { Dir::Client } else { Dir::Server };
                act.up.hs.on(side, Event::Ack { ts, ack: h.ack }, ctx.mem);
            }
        }
        if payload.is_empty() {
            return;
        }
        if truncated {
            ctx.stats.truncated_segments += 1;
        }
        // Data on a SYN (TCP Fast Open) starts after the SYN's sequence number.
        let seq = if h.syn { h.seq.wrapping_add(1) } else { h.seq };
        let seg = Segment {
            seq,
            data: payload,
            ts,
            ack: h.ack_flag.then_some(h.ack),
        };
        let Active { reasm, up } = act;
        let status = &mut self.status;
        // Reassembly hands over in-order chunks (borrowing the segment or
        // its own buffer): each is routed right away.
        let out = reasm[dir].push(&seg, truncated, &mut |c| up.route(status, dir, c, ctx));
        ctx.stats.retransmitted_bytes += out.duplicate_bytes as u64;
        if out.duplicate_bytes > 0 {
            up.resent(dir, ts);
        }
        up.last_data[dir] = up.last_data[dir].max(ts);
        let client_side =
            up.client == Some(dir) || (up.client.is_none() && self.syn_dir == Some(dir));
        if out.skipped_holes > 0 {
            // Waiting behind holes would have broken a cap: they were skipped.
            ctx.stats.reassembly_gaps += u64::from(out.skipped_holes);
            ctx.stats.reassembly_hole_limit += u64::from(out.hole_limit);
            ctx.stats.capture_loss_bytes += out.skipped_bytes as u64;
            note(
                &mut up.notes,
                if client_side {
                    "client_gap"
                } else {
                    "server_gap"
                },
            );
        }
        // A retransmission whose bytes differ from the copy already read
        // (corruption, or a forged copy: IDS evasion): counted and noted.
        // Once the flow is identified the first copy stays the one read;
        // before, a differing copy replaces it, so that garbage sent first
        // cannot hide a connection (README "Conflicting retransmissions").
        // Not identified yet (nothing is kept then, to keep plain flows
        // cheap): a retransmission that starts like a ClientHello where the
        // probe found none conflicts with the first copy and replaces it.
        let replaces = *status == Status::Detecting
            && out.duplicate_bytes > 0
            && seg.data.len() >= 6
            && looks_like_client_hello(seg.data)
            && up
                .probe
                .as_ref()
                .is_some_and(|p| p[dir].decided_not_hello())
            && reasm[dir].rewind(seg.seq);
        if out.conflict.is_some() || replaces {
            ctx.stats.conflicting_retransmissions += 1;
            up.notes.push(if client_side {
                "client_conflicting_retransmission"
            } else {
                "server_conflicting_retransmission"
            });
        }
        if replaces {
            up.probe_mut(dir).restart();
            reasm[dir].push(&seg, truncated, &mut |c| up.route(status, dir, c, ctx));
        }
        // Identified now: from here on the delivered bytes are kept, to
        // compare retransmissions with.
        if *status == Status::Tls && was != Status::Tls {
            reasm[dir].keep_from(seg.seq, seg.data);
            reasm[1 - dir].keep_from(seg.seq, &[]);
        }
    }

    /// Puts the flow's record in `out`, if it is a TLS connection whose
    /// record is not out yet; the flow stays behind as a tombstone (status
    /// `Done`). `timed`: finished because nothing more was to be learnt.
    /// `hold`: the record stays on the flow ([`held`](Self::held)) until
    /// [`release`](Self::release). (Pushed here rather than handed back: a
    /// record is 720 bytes, and each hand-back was a copy of it.)
    pub fn finish(
        &mut self,
        why: Finish,
        timed: bool,
        hold: bool,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<ConnectionRecord>,
    ) {
        self.unpark(ctx);
        if !timed {
            // The capture will show no more of this flow: what waits behind
            // a hole is read before the record is made.
            if let Some(act) = self.active.as_deref_mut() {
                act.skip_holes(&mut self.status, ctx);
            }
        }
        let missing = self.missing_side();
        let act = self.active.take();
        let status = std::mem::replace(&mut self.status, Status::Done);
        let (Status::Tls, Some(mut boxed)) = (status, act) else {
            return;
        };
        // Read where it lies: moved out of its box, the flow's state was
        // one more copy of several hundred bytes a record.
        let Active { reasm, up: act } = &mut *boxed;
        act.hs.settle();
        match missing {
            Some(side) => act.hs.one_sided(side),
            None if self.fin.contains(&true) => {
                act.hs.on(Dir::Client, Event::Close(Close::Fin), ctx.mem);
            }
            None => {}
        }
        let Some(client_dir) = act.client else {
            return;
        };
        let app_start = self.app_start(act, client_dir);
        if act.hs.records_overflowed() {
            ctx.stats.record_limit_hits += 1;
        }
        // A direction that ends where the capture cut a segment short
        // misses bytes no later segment or ACK accounted for (a connection
        // finished because it is fully timed may simply have the rest of a
        // segment in flight).
        for (d, r) in reasm.iter().enumerate() {
            if !timed && r.cut_short() {
                ctx.stats.reassembly_gaps += 1;
                act.notes.push(if d == client_dir {
                    "client_gap"
                } else {
                    "server_gap"
                });
            }
        }
        if self.tcp.syn.is_none() && self.tcp.syn_ack.is_none() {
            act.notes.push("no_syn");
        }
        ctx.stats.tls_connections += 1;
        ctx.stats.handshake_parse_errors += u64::from(act.hs.parse_errors());
        let (client, server) = if client_dir == 0 {
            (self.a, self.b)
        } else {
            (self.b, self.a)
        };
        let view = TransportView {
            transport: Transport::Tcp,
            first_ts: self.first_ts,
            client,
            server,
            rtt: match missing {
                // The initiator's direction alone: SYN to its first ACK is
                // the same round trip.
                Some(Dir::Server) => self.tcp.syn.zip(self.tcp.ack).map(|(s, a)| a - s),
                _ => self.tcp.rtt(),
            },
            vantage: Vantage {
                retransmission: Some(act.first_retransmission).filter(|t| !t.is_nan()),
                ..self.tcp.vantage()
            },
            bytes: act.hs.record_bytes(),
            notes: std::mem::take(&mut act.notes),
            proxied_client: act.proxied.as_ref().and_then(|p| p[client_dir]),
        };
        let unsettled = act
            .hs
            .resolve_session_id(ctx.mem)
            .map(|q| Box::new(act.hs.if_session_id_issued(q, view.rtt)));
        let mut record = act.hs.take_record(view, why);
        record.unsettled = unsettled;
        if hold {
            self.held = Some(Box::new(Held { record, app_start }));
            return;
        }
        self.closed_fields(&mut record, app_start);
        out.push(record);
    }
}

impl Active {
    /// The peer acknowledged bytes of direction `dir` that the capture never
    /// showed: skip the hole. The record layer sees the bytes after it
    /// start past where the last ones ended, and resynchronises.
    fn skip_capture_loss(&mut self, status: &mut Status, dir: usize, ack: u32, ctx: &mut Ctx<'_>) {
        if *status != Status::Tls {
            return;
        }
        let Active { reasm, up } = self;
        let Some((_, n)) = reasm[dir].acked(ack, &mut |c| up.route(status, dir, c, ctx)) else {
            return;
        };
        ctx.stats.capture_loss_bytes += n as u64;
        let side = if up.client == Some(dir) {
            "client_capture_loss"
        } else {
            "server_capture_loss"
        };
        note(&mut up.notes, side);
    }

    /// The flow is ending (closed, or finished by the end of the capture,
    /// the idle timeout or eviction): holes the capture never filled and no
    /// ACK explained are skipped, so that the handshake is finished from
    /// what waited behind them. Each is a gap, its bytes capture loss.
    fn skip_holes(&mut self, status: &mut Status, ctx: &mut Ctx<'_>) {
        if *status != Status::Tls {
            return;
        }
        let Active { reasm, up } = self;
        for (dir, r) in reasm.iter_mut().enumerate() {
            while let Some((_, n)) = r.skip_hole(&mut |c| up.route(status, dir, c, ctx)) {
                ctx.stats.reassembly_gaps += 1;
                ctx.stats.capture_loss_bytes += n as u64;
                let side = if up.client == Some(dir) {
                    "client_gap"
                } else {
                    "server_gap"
                };
                note(&mut up.notes, side);
            }
        }
    }
}

/// Bytes that come again within this long (seconds) of the direction's
/// previous data are a copy (a mirror port capturing twice, a middlebox
/// re-segmenting), not a retransmission: a sender retransmits after a
/// timeout or a round trip of duplicate ACKs, and a copy this close leaves
/// less ambiguity than the think times' millisecond.
const RETRANSMISSION_MIN_GAP: f64 = 0.001;

impl Upper {
    /// Direction `dir` sent bytes again at `ts`: a retransmission unless
    /// it is a near-simultaneous copy ([`RETRANSMISSION_MIN_GAP`]).
    fn resent(&mut self, dir: usize, ts: f64) {
        if ts - self.last_data[dir] > RETRANSMISSION_MIN_GAP && self.first_retransmission.is_nan() {
            self.first_retransmission = ts;
        }
    }

    /// A direction's probe, made at the first chunk that does not show a
    /// whole hello header at once (most do: [`Upper::route`]); dropped at
    /// identification, after which nothing probes.
    fn probe_mut(&mut self, dir: usize) -> &mut Probe {
        &mut self.probe.get_or_insert_with(Box::default)[dir]
    }

    /// Nothing was probed yet in this direction (no probe is a fresh one).
    fn probe_fresh(&self, dir: usize) -> bool {
        self.probe
            .as_ref()
            .is_none_or(|p| p[dir].tries == 0 && p[dir].start.is_none())
    }

    /// Routes in-order bytes of one direction: to the ClientHello detector
    /// until TLS is recognised, then to that direction's record layer.
    fn route(&mut self, status: &mut Status, dir: usize, c: Chunk<'_>, ctx: &mut Ctx<'_>) {
        if *status == Status::Detecting && self.probe_fresh(dir) {
            // The first bytes of the direction: a load balancer's PROXY
            // header names the original client, then the hello follows.
            if let proxy_protocol::Header::Read { len, client } = proxy_protocol::parse(c.data) {
                ctx.stats.proxy_protocol_headers += 1;
                self.proxied.get_or_insert_with(Default::default)[dir] = client;
                self.proxy_len[dir] = len as u32;
                let rest = Chunk {
                    data: &c.data[len..],
                    seq: c.seq.wrapping_add(len as u32),
                    ..c
                };
                if !rest.data.is_empty() {
                    self.route(status, dir, rest, ctx);
                }
                return;
            }
        }
        // The usual first chunk: a whole record header and message type,
        // told at once, as a fresh probe would, without making one (an
        // allocation a connection).
        if *status == Status::Detecting && self.probe.is_none() && c.data.len() >= 6 {
            let found = classify(&c.data[..6]);
            if !matches!(found, ProbeResult::NotHello) {
                self.identified(status, dir, found, &Probe::default(), c, ctx);
                return;
            }
        }
        if *status == Status::Detecting {
            match self.probe_mut(dir).feed(&c) {
                ProbeResult::NeedMore => return,
                ProbeResult::NotHello => {
                    if self.probe_mut(dir).tries >= DETECT_MAX_SEGMENTS {
                        *status = Status::NotTls;
                    }
                    return;
                }
                found @ (ProbeResult::Hello | ProbeResult::ServerHello) => {
                    let p = std::mem::take(self.probe_mut(dir));
                    self.identified(status, dir, found, &p, c, ctx);
                    return;
                }
            }
        }
        if *status == Status::Tls {
            self.feed_stream(dir, c, ctx);
        }
    }

    /// `dir` starts a handshake (`found`: with its client's hello or its
    /// server's answer): the flow is TLS, and the bytes `probe` gathered
    /// from earlier chunks, then this chunk, go to the record layer.
    fn identified(
        &mut self,
        status: &mut Status,
        dir: usize,
        found: ProbeResult,
        probe: &Probe,
        c: Chunk<'_>,
        ctx: &mut Ctx<'_>,
    ) {
        *status = Status::Tls;
        self.client = Some(match found {
            ProbeResult::ServerHello => 1 - dir,
            _ => dir,
        });
        // Identified: neither direction is probed again.
        self.probe = None;
        let (seq, ts, ack) = probe.start.unwrap_or((c.seq, c.ts, c.ack));
        // Bytes of the hello that came in earlier chunks.
        let already = (Seq(c.seq).diff(Seq(seq)).max(0) as usize).min(probe.gathered().len());
        // Replay the probed bytes, then the rest of this chunk.
        self.feed_stream(
            dir,
            Chunk {
                data: &probe.gathered()[..already],
                seq,
                ts,
                ack,
            },
            ctx,
        );
        self.feed_stream(dir, c, ctx);
    }

    /// One direction's record layer: its events go to the state machine,
    /// whose directives come back to the record layer.
    fn feed_stream(&mut self, dir: usize, chunk: Chunk<'_>, ctx: &mut Ctx<'_>) {
        if chunk.data.is_empty() {
            return;
        }
        let side = if self.client == Some(dir) {
            Dir::Client
        } else {
            Dir::Server
        };
        let Upper {
            client_stream,
            server_stream,
            hs,
            server_flight,
            notes,
            ..
        } = self;
        let mut ccs_encrypts = false;
        let now = ctx.now;
        let mem = &mut *ctx.mem;
        let max = ctx.max_handshake_message;
        // The direction's side is fixed once the hello named the client.
        let stream = match side {
            Dir::Client => &mut *client_stream,
            Dir::Server => made(server_stream, max),
        };
        let resyncs = stream.resyncs();
        let res = stream.push(chunk, &mut |ev| {
            let directive = match ev {
                StreamEvent::Record(r) => hs.on(side, Event::Record(r), mem),
                StreamEvent::Handshake {
                    msg_type,
                    body,
                    record,
                    ..
                } => {
                    hs.zeek_plaintext_seen(now);
                    hs.on(
                        side,
                        Event::Message {
                            msg_type,
                            body,
                            ts: record.ts,
                            record: Some(record),
                        },
                        mem,
                    )
                }
                StreamEvent::Alert {
                    level, description, ..
                } => {
                    hs.zeek_plaintext_seen(now);
                    hs.on(side, Event::Alert { level, description }, mem)
                }
                StreamEvent::Sslv2 {
                    msg_type,
                    body,
                    record,
                } => {
                    hs.zeek_plaintext_seen(now);
                    hs.on(
                        side,
                        Event::Sslv2 {
                            msg_type,
                            body,
                            record,
                        },
                        mem,
                    )
                }
                // The server's first encrypted TLS 1.3 record, kept whole
                // because a key log has the secret to open it.
                StreamEvent::Encrypted {
                    header,
                    payload,
                    record,
                } if side == Dir::Server => {
                    if let (Some(flight), Some(suite)) =
                        (server_flight.as_deref_mut(), hs.cipher_suite())
                    {
                        flight.open(suite, &header, payload, &mut |opened| {
                            let ev = match opened {
                                Opened::Message(msg_type, body) => Event::Message {
                                    msg_type,
                                    body: Some(body),
                                    ts: record.ts,
                                    record: Some(record),
                                },
                                Opened::AfterFinished(inner) => Event::Opened { record, inner },
                            };
                            hs.on(side, ev, mem);
                        });
                    }
                    None
                }
                StreamEvent::Encrypted { .. } => None,
            };
            ccs_encrypts |= directive == Some(Directive::CcsEncrypts);
        });
        // With a key log entry for this ClientHello, keep the server's
        // encrypted records (its TLS 1.3 flight, then those after its
        // Finished) whole to read them.
        if side == Dir::Client && server_flight.is_none() {
            let secrets = hs
                .client_hello()
                .zip(ctx.keylog)
                .and_then(|(ch, log)| log.get(&ch.random));
            if let Some(s) = secrets {
                if let Some(secret) = s.server_handshake.clone() {
                    *server_flight = Some(Box::new(ServerFlight::new(
                        secret,
                        s.server_traffic.clone(),
                    )));
                }
            }
        }
        let resynced = stream.resyncs().saturating_sub(resyncs);
        if let Some(flight) = server_flight.as_deref() {
            made(server_stream, max).capture_encrypted = flight.wanted();
        }
        if ccs_encrypts {
            client_stream.ccs_encrypts = true;
            made(server_stream, max).ccs_encrypts = true;
        }
        if resynced > 0 {
            ctx.stats.stream_resyncs += u64::from(resynced);
            let name = if side == Dir::Client {
                "client_resync"
            } else {
                "server_resync"
            };
            note(notes, name);
        }
        if res.is_err() {
            ctx.stats.stream_errors += 1;
            notes.push(if side == Dir::Client {
                "client_stream_error"
            } else {
                "server_stream_error"
            });
        }
    }
}

/// The server's record layer, made if it was not.
fn made(stream: &mut Option<Box<RecordStream>>, max: usize) -> &mut RecordStream {
    stream.get_or_insert_with(|| Box::new(RecordStream::new(max)))
}

/// Adds a note once: holes and resynchronisations may come by the
/// thousand on hostile traffic, and the notes are kept until the record.
fn note(notes: &mut Vec<&'static str>, name: &'static str) {
    if !notes.contains(&name) {
        notes.push(name);
    }
}

/// Issue 19: what an open handshake costs is mostly these structs (the
/// README's limits table, `bench/open_handshakes.sh`): growth must be
/// deliberate. Each bound is today's size on x86-64.
#[cfg(all(test, target_pointer_width = "64"))]
mod struct_sizes {
    use std::mem::size_of;

    #[test]
    fn per_flow_structs_do_not_grow_unnoticed() {
        let sizes = [
            // 208 before the pointer to a parked hello.
            ("TcpFlow", size_of::<super::TcpFlow>(), 216),
            ("FlowKey", size_of::<crate::flow::table::FlowKey>(), 40),
            // Active and Handshake hold the Zeek view (handshake/zeek_view.rs),
            // kept whatever the output format. Active at 768 fits mimalloc's
            // 768-byte size class: a byte more costs 128 a flow.
            ("Active", size_of::<super::Active>(), 768),
            (
                "Reassembler",
                size_of::<crate::flow::reassembly::Reassembler>(),
                112,
            ),
            (
                "RecordStream",
                size_of::<crate::tls::record::RecordStream>(),
                136,
            ),
            ("Handshake", size_of::<crate::handshake::Handshake>(), 304),
            // Boxed while its handshake is open: 224 is a mimalloc size
            // class (the next is 256).
            (
                "ClientHello",
                size_of::<crate::tls::handshake::ClientHello>(),
                224,
            ),
            ("Probe", size_of::<super::Probe>(), 32),
            // What a parked flow holds besides its hello's bytes: 80 is
            // a mimalloc size class (the next is 96).
            ("Parked", size_of::<super::Parked>(), 80),
        ];
        for (name, size, bound) in sizes {
            eprintln!("{name}: {size} bytes (bound {bound})");
        }
        for (name, size, bound) in sizes {
            assert!(size <= bound, "{name}: {size} bytes > {bound}");
        }
    }
}
