//! QUIC connections: found by connection ID (the 5-tuple only as a hint),
//! followed through Retry and Version Negotiation, their Initial packets
//! decrypted both ways, the hellos read from the reassembled CRYPTO
//! streams, then classified and timed into a [`ConnectionRecord`].
//!
//! What an observer sees, and what tlsrum reports from it (docs/quic.md):
//! * `tcp_rtt`: the client Initial the server's first Initial answers -> that
//!   server Initial (the QUIC RTT sample).
//! * `handshake`: the client's first Initial -> its first 1-RTT (short
//!   header) packet. A client can only send 1-RTT packets once it has the
//!   server's Finished, so that packet proves completion; its Handshake
//!   packets can be bare ACKs sent before it.
//! * `ttfb`: the client's first Initial -> the server's first 1-RTT packet
//!   captured after the client's first 1-RTT packet.
//! * `early_data`: with a key log (`--keylog`), the server's Handshake
//!   packets are opened and its EncryptedExtensions says whether 0-RTT was
//!   accepted; without one an accepted PSK leaves it `attempted`.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::Arc;

pub use crate::counters::QuicStats;
use lru::LruCache;

use super::crypto_stream::CryptoStream;
use super::initial::InitialKeys;
use super::packet::{
    self, varint, HeaderError, LongPacket, LongType, Packet, Version, MAX_CID_LEN,
};
use super::protection::DirKeys;
use super::version::{classify, Class, Undecoded};
use crate::flow::table::{Endpoint, FlowKey};
use crate::handshake::{Close, Dir, Event, Finish, Handshake, NoMemory, Space, TransportView};
use crate::memory::{HeapSize, ALLOC_OVERHEAD, ENTRY_OVERHEAD};
use crate::record::{ConnectionRecord, HandshakeBytes, Transport};
use crate::tls::codec::Reader;
use crate::tls::enums::{alert_name, handshake_type as ht};
use crate::tls::keylog::KeyLog;

/// Smallest UDP payload that can carry a client's first Initial (RFC 9000
/// §14.1): anything smaller starts no connection, and costs no crypto.
pub const MIN_CLIENT_INITIAL: usize = 1200;
/// Failed attempts to open a new connection's first Initial per 5-tuple
/// before tlsrum stops trying on that tuple (hostile or foreign traffic).
pub const MAX_DECRYPT_FAILURES_PER_TUPLE: u8 = 8;
/// Decryption failures within one connection before its Initials are skipped.
pub const MAX_DECRYPT_FAILURES_PER_CONN: u8 = 16;
/// 5-tuples whose hints (Version Negotiation, failed attempts) are kept.
pub const MAX_HINTS: usize = 4096;
/// A Version Negotiation joins the next connection on its 5-tuple only if
/// that connection starts within this many seconds.
pub const VN_WINDOW: f64 = 10.0;
/// Connection IDs remembered per connection (original DCID, Retry SCID,
/// both endpoints' chosen IDs, a few spares).
const MAX_CIDS_PER_CONN: usize = 6;
/// 5-tuples remembered per connection.
const MAX_TUPLES_PER_CONN: usize = 4;

/// A connection ID as a fixed-size, cheaply hashed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Cid {
    len: u8,
    bytes: [u8; MAX_CID_LEN],
}

impl Cid {
    fn new(b: &[u8]) -> Self {
        let n = b.len().min(MAX_CID_LEN);
        let mut bytes = [0; MAX_CID_LEN];
        bytes[..n].copy_from_slice(&b[..n]);
        Cid {
            len: n as u8,
            bytes,
        }
    }
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client = 0,
    Server = 1,
}

impl Side {
    fn dir(self) -> Dir {
        match self {
            Side::Client => Dir::Client,
            Side::Server => Dir::Server,
        }
    }
}

/// What one 5-tuple taught before a connection on it was decodable.
#[derive(Debug, Clone, Copy, Default)]
struct Hint {
    /// First long-header packet of an undecodable version (a client's first try).
    first_attempt: Option<f64>,
    /// A Version Negotiation packet was seen.
    vn: Option<f64>,
    decrypt_failures: u8,
    /// 0-RTT packets that arrived before their connection's first Initial.
    early_zero_rtt: u8,
    /// A Retry with no connection to join (the capture shows the server only).
    retry: bool,
}

/// Handshake state of a connection whose record is not out yet.
struct Active {
    version: Version,
    keys: InitialKeys,
    /// The connection ID `keys` derive from.
    keys_cid: Cid,
    /// Source Connection IDs of the Retry packets seen: a client answers
    /// one of them (the first it receives), which its next Initial shows.
    retry_cids: Vec<Cid>,
    /// After a Retry: the client's first Destination Connection ID and its
    /// keys. Initials the client sent before it processed the Retry still
    /// use them (Chromium sends its ClientHello in two datagrams).
    pre_retry: Option<(Cid, Box<InitialKeys>)>,
    largest_pn: [Option<u64>; 2],
    crypto: [CryptoStream; 2],
    /// The handshake both transports share: hellos, 1-RTT packets, closes.
    hs: Handshake,
    retry: bool,
    /// The client's first Initial (the first attempt, across VN).
    start: f64,
    /// The latest client Initial before the server's first Initial.
    last_client_initial: Option<f64>,
    server_initial: Option<f64>,
    rtt: Option<f64>,
    zero_rtt_packets: u32,
    /// CONNECTION_CLOSE in an Initial: the failure string.
    close: Option<String>,
    /// Handshake packets' bytes each way (encrypted: counted whole).
    handshake_bytes: [u64; 2],
    decrypt_failures: u8,
    /// With a key log entry for this connection: its Handshake level.
    handshake_level: Option<Box<HandshakeLevel>>,
    notes: Vec<&'static str>,
    /// A packet from each side was seen (else the capture shows one
    /// direction only).
    server_seen: bool,
    client_seen: bool,
    /// Made from the server's packets alone: its Initials are keyed from
    /// the client's first Destination Connection ID, which only the
    /// client's direction carries, so they cannot be opened.
    keys_unknown: bool,
}

/// The Handshake packet number space, opened with a key log's traffic
/// secrets: the server's EncryptedExtensions tells whether 0-RTT was
/// accepted (RFC 9001 §4.6.1), and either side's CONNECTION_CLOSE there
/// tells why a handshake failed.
struct HandshakeLevel {
    /// Client, server; None when the key log lacks that side's secret.
    keys: [Option<DirKeys>; 2],
    largest_pn: [Option<u64>; 2],
    crypto: [CryptoStream; 2],
}

struct Conn {
    client: Endpoint,
    server: Endpoint,
    first_ts: f64,
    last_ts: f64,
    /// Connection IDs registered in the tracker's index, and whose they are.
    cids: Vec<(Cid, Side)>,
    tuples: Vec<FlowKey>,
    /// None once the record is out (a tombstone that swallows stragglers).
    active: Option<Box<Active>>,
    /// Its footprint when last measured (counted in the tracker's `bytes`).
    charged: usize,
}

impl Conn {
    /// Bytes the connection holds: itself, its IDs and tuples in the
    /// indexes, and its handshake state (see [`crate::memory`]).
    fn footprint(&self) -> usize {
        let index = size_of::<(Endpoint, Cid)>() + size_of::<u64>() + 16;
        let tuple = size_of::<FlowKey>() + size_of::<u64>() + 16;
        size_of::<Conn>()
            + size_of::<u64>()
            + ENTRY_OVERHEAD
            + self.cids.capacity() * size_of::<(Cid, Side)>()
            + self.cids.len() * index
            + self.tuples.capacity() * size_of::<FlowKey>()
            + self.tuples.len() * tuple
            + 2 * ALLOC_OVERHEAD
            + self.active.as_ref().map_or(0, HeapSize::heap_size)
    }
}

impl Active {
    /// A connection's handshake state, keyed from the Initial `l`'s
    /// Destination Connection ID, as its client's first Initial makes it.
    fn new(l: &LongPacket<'_>, hs: Handshake, ts: f64) -> Self {
        Active {
            version: l.version,
            keys: InitialKeys::new(l.version, l.dcid),
            keys_cid: Cid::new(l.dcid),
            retry_cids: Vec::new(),
            pre_retry: None,
            largest_pn: [None; 2],
            crypto: [CryptoStream::default(), CryptoStream::default()],
            hs,
            retry: false,
            start: ts,
            last_client_initial: None,
            server_initial: None,
            rtt: None,
            zero_rtt_packets: 0,
            close: None,
            handshake_bytes: [0; 2],
            decrypt_failures: 0,
            handshake_level: None,
            notes: Vec::new(),
            server_seen: false,
            client_seen: true,
            keys_unknown: false,
        }
    }
}

impl HeapSize for Active {
    fn heap_size(&self) -> usize {
        let level = self.handshake_level.as_ref().map_or(0, |l| {
            size_of::<HandshakeLevel>()
                + ALLOC_OVERHEAD
                + l.crypto.iter().map(HeapSize::heap_size).sum::<usize>()
        });
        let pre_retry = self
            .pre_retry
            .as_ref()
            .map_or(0, |_| size_of::<InitialKeys>() + ALLOC_OVERHEAD);
        self.retry_cids.heap_size()
            + pre_retry
            + self.crypto.iter().map(HeapSize::heap_size).sum::<usize>()
            + self.hs.heap_size()
            + self.close.heap_size()
            + level
            + self.notes.heap_size()
    }
}

/// Follows QUIC connections and emits one record per connection.
pub struct QuicTracker {
    conns: LruCache<u64, Conn>,
    /// Connection IDs under their connection's server: IDs are unique
    /// only per server (short ones collide across a big capture, and a
    /// capture made of copies of one connection repeats them all). Both
    /// maps hash with foldhash, as the flow table does: std's SipHash was
    /// 1.6 % of a replay's instructions, looked up on every datagram.
    by_cid: HashMap<(Endpoint, Cid), u64, foldhash::fast::RandomState>,
    by_tuple: HashMap<FlowKey, u64, foldhash::fast::RandomState>,
    hints: LruCache<FlowKey, Hint>,
    next_id: u64,
    idle_timeout: f64,
    scratch: Vec<u8>,
    keylog: Option<Arc<KeyLog>>,
    zeek_view: bool,
    /// Bytes the connections hold, as last measured ([`Conn::footprint`]).
    bytes: usize,
    /// Records finished, in order; the analyzer drains them.
    pub out: Vec<ConnectionRecord>,
}

impl QuicTracker {
    pub fn new(max_connections: usize, idle_timeout: f64) -> Self {
        QuicTracker {
            conns: crate::memory::lru(max_connections),
            by_cid: HashMap::default(),
            by_tuple: HashMap::default(),
            hints: crate::memory::lru(MAX_HINTS),
            next_id: 0,
            idle_timeout,
            scratch: Vec::with_capacity(1500),
            keylog: None,
            zeek_view: true,
            bytes: 0,
            out: Vec::new(),
        }
    }

    /// TLS secrets to open Handshake packets with (see [`HandshakeLevel`]).
    /// Follow handshakes as Zeek would ([`crate::Config::zeek_view`]).
    pub fn with_zeek_view(mut self, on: bool) -> Self {
        self.zeek_view = on;
        self
    }

    pub fn with_keylog(mut self, keylog: Option<Arc<KeyLog>>) -> Self {
        self.keylog = keylog.filter(|k| !k.is_empty());
        self
    }

    pub fn active_connections(&self) -> usize {
        self.conns.len()
    }

    /// Bytes the connections in the table hold (for the memory budget).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// When the least recently used connection last saw a packet.
    pub fn oldest_ts(&self) -> Option<f64> {
        self.conns.peek_lru().map(|(_, c)| c.last_ts)
    }

    /// Finishes the least recently used connection (memory budget).
    pub fn evict_oldest(&mut self, stats: &mut QuicStats) {
        if let Some((id, conn)) = self.conns.pop_lru() {
            self.emit(id, conn, Finish::Evicted, stats);
        }
    }

    /// Measures a connection again after a packet changed it.
    fn recharge(&mut self, id: u64) {
        if let Some(c) = self.conns.peek_mut(&id) {
            let now = c.footprint();
            self.bytes = self.bytes - c.charged + now;
            c.charged = now;
        }
    }

    /// One UDP datagram (`src` -> `dst`).
    pub fn on_datagram(
        &mut self,
        ts: f64,
        src: Endpoint,
        dst: Endpoint,
        d: &[u8],
        stats: &mut QuicStats,
    ) {
        stats.datagrams += 1;
        let Some(&first) = d.first() else {
            stats.not_quic += 1;
            return;
        };
        if first & 0x80 == 0 {
            // Short header: only worth a look on a tuple with a known connection.
            let id = if self.by_tuple.is_empty() {
                None
            } else {
                self.by_tuple.get(&FlowKey::new(src, dst)).copied()
            };
            match id {
                Some(id) => {
                    let id = self.short(id, ts, src, d, false, stats);
                    self.recharge(id);
                }
                None => match packet::gquic_public_header_version(d) {
                    // A gQUIC client's packet (Q043 and before): counted
                    // by version, never read as TLS.
                    Some(v) if matches!(classify(v), Class::Known(_)) => {
                        stats.packets += 1;
                        count_undecoded(v, stats);
                    }
                    _ => stats.not_quic += 1,
                },
            }
            return;
        }
        match packet::long_header_version(d).map(classify) {
            Some(Class::Tls(_) | Class::Negotiation) => {}
            Some(class) => {
                self.undecoded_long(ts, src, dst, d, class, stats);
                return;
            }
            None => {
                stats.not_quic += 1;
                return;
            }
        }
        let mut rest = d;
        let mut size = d.len();
        let mut conn_of_datagram = None;
        let mut with_handshake = false;
        while let Some(&b) = rest.first() {
            if b & 0x80 == 0 {
                // A short-header packet ends a datagram; zero bytes are padding.
                if b != 0 {
                    if let Some(id) = conn_of_datagram {
                        let id = self.short(id, ts, src, rest, with_handshake, stats);
                        self.recharge(id);
                    }
                }
                break;
            }
            match packet::parse(rest) {
                Ok((p, used)) => {
                    stats.packets += 1;
                    match p {
                        Packet::Long(l) => {
                            with_handshake |= l.ty == LongType::Handshake;
                            let id = self.long(ts, src, dst, l, size, stats);
                            if let Some(id) = id {
                                self.recharge(id);
                            }
                            conn_of_datagram = id.or(conn_of_datagram);
                        }
                        Packet::VersionNegotiation { dcid, scid, .. } => {
                            self.version_negotiation(ts, src, dst, dcid, scid, stats)
                        }
                        Packet::UnknownVersion { version, .. } => count_undecoded(version, stats),
                        Packet::Short { .. } => {}
                    }
                    rest = &rest[used..];
                    size = rest.len();
                }
                Err(HeaderError::CidLen) => {
                    stats.bad_cid_len += 1;
                    break;
                }
                Err(e) => {
                    if std::env::var_os("TLSRUM_DEBUG").is_some() {
                        eprintln!(
                            "quic: {e} in datagram {src:?} -> {dst:?} at byte {}",
                            d.len() - rest.len()
                        );
                    }
                    stats.bad_header += 1;
                    break;
                }
            }
        }
    }

    /// A long header of a version tlsrum does not decode: counted with its
    /// value, and remembered on its tuple (a client's first try before a
    /// Version Negotiation). A number in a table is evidence enough; any
    /// other (unknown, or reserved to force Version Negotiation) must also
    /// set the fixed bit and keep its connection IDs within v1's 20
    /// bytes, or the datagram is counted as not QUIC.
    fn undecoded_long(
        &mut self,
        ts: f64,
        src: Endpoint,
        dst: Endpoint,
        d: &[u8],
        class: Class,
        stats: &mut QuicStats,
    ) {
        let known = matches!(class, Class::Known(k) if k.why != Undecoded::Reserved);
        let plausible = || {
            d.first().is_some_and(|b| b & 0x40 != 0)
                && matches!(packet::parse(d), Ok((Packet::UnknownVersion { dcid, scid, .. }, _))
                    if dcid.len() <= MAX_CID_LEN && scid.len() <= MAX_CID_LEN)
        };
        let Some(version) = packet::long_header_version(d).filter(|_| known || plausible()) else {
            stats.not_quic += 1;
            return;
        };
        stats.packets += 1;
        count_undecoded(version, stats);
        let key = FlowKey::new(src, dst);
        match self.hints.get_mut(&key) {
            Some(h) => {
                h.first_attempt.get_or_insert(ts);
            }
            None => {
                self.hints.put(
                    key,
                    Hint {
                        first_attempt: Some(ts),
                        ..Hint::default()
                    },
                );
            }
        }
    }

    fn version_negotiation(
        &mut self,
        ts: f64,
        src: Endpoint,
        dst: Endpoint,
        dcid: &[u8],
        scid: &[u8],
        stats: &mut QuicStats,
    ) {
        stats.version_negotiation += 1;
        let key = FlowKey::new(src, dst);
        // A VN answering a decodable first try: that attempt is abandoned and
        // the client's next connection on this tuple carries on.
        let target = [scid, dcid]
            .into_iter()
            .filter(|c| !c.is_empty())
            .find_map(|c| self.by_server_cid(src, dst, c))
            .or_else(|| self.by_tuple.get(&key).copied());
        let mut first_attempt = None;
        if let Some(id) = target {
            let abandoned = self.conns.peek(&id).is_some_and(|c| {
                c.active
                    .as_ref()
                    .is_some_and(|a| a.server_initial.is_none() && a.hs.version().is_none())
            });
            if abandoned {
                if let Some(c) = self.conns.pop(&id) {
                    first_attempt = c.active.as_ref().map(|a| a.start);
                    self.unregister(id, &c);
                }
            }
        }
        let h = match self.hints.get_mut(&key) {
            Some(h) => h,
            None => {
                self.hints.put(key, Hint::default());
                let Some(h) = self.hints.get_mut(&key) else {
                    return;
                };
                h
            }
        };
        h.vn.get_or_insert(ts);
        if let Some(t) = first_attempt {
            h.first_attempt = Some(h.first_attempt.map_or(t, |f| f.min(t)));
        }
    }

    /// The connection a packet between `src` and `dst` names by `cid`:
    /// one whose server is either end. Long headers come before the
    /// handshake is confirmed, when only the client's address may change
    /// (NAT rebinding; RFC 9000 §9), so the server's stays one end.
    fn by_server_cid(&self, src: Endpoint, dst: Endpoint, cid: &[u8]) -> Option<u64> {
        let cid = Cid::new(cid);
        [dst, src]
            .into_iter()
            .find_map(|server| self.by_cid.get(&(server, cid)).copied())
    }

    /// Which connection a long-header packet belongs to, and who sent it.
    /// An Initial whose DCID is unknown may start a new connection on a
    /// known tuple; other packets fall back to the tuple.
    fn find(
        &self,
        src: Endpoint,
        dst: Endpoint,
        dcid: &[u8],
        initial: bool,
    ) -> Option<(u64, Side)> {
        if !dcid.is_empty() {
            let known = self
                .by_server_cid(src, dst, dcid)
                .and_then(|id| Some((id, self.conns.peek(&id)?)));
            if let Some((id, c)) = known {
                let owner = c
                    .cids
                    .iter()
                    .find(|(cid, _)| cid.as_slice() == dcid)
                    .map(|&(_, s)| s)?;
                // The DCID names the receiver.
                return Some((
                    id,
                    if owner == Side::Server {
                        Side::Client
                    } else {
                        Side::Server
                    },
                ));
            }
            if initial {
                return None;
            }
        }
        let id = *self.by_tuple.get(&FlowKey::new(src, dst))?;
        let c = self.conns.peek(&id)?;
        Some((
            id,
            if src == c.client {
                Side::Client
            } else {
                Side::Server
            },
        ))
    }

    /// Returns the connection the packet belongs to.
    fn long(
        &mut self,
        ts: f64,
        src: Endpoint,
        dst: Endpoint,
        l: LongPacket<'_>,
        datagram_len: usize,
        stats: &mut QuicStats,
    ) -> Option<u64> {
        let Some((id, side)) = self.find(src, dst, l.dcid, l.ty == LongType::Initial) else {
            if l.ty == LongType::Initial {
                return self.new_connection(ts, src, dst, l, datagram_len, stats);
            }
            if l.ty == LongType::ZeroRtt {
                // Reordered ahead of its Initial (seen in browser captures).
                let key = FlowKey::new(src, dst);
                if let Some(h) = self.hints.get_mut(&key) {
                    h.early_zero_rtt = h.early_zero_rtt.saturating_add(1);
                } else {
                    self.hints.put(
                        key,
                        Hint {
                            early_zero_rtt: 1,
                            ..Hint::default()
                        },
                    );
                }
            }
            if std::env::var_os("TLSRUM_DEBUG").is_some() {
                eprintln!(
                    "quic: orphan {:?} {src:?} -> {dst:?} dcid {:02x?}",
                    l.ty, l.dcid
                );
            }
            if l.ty == LongType::Handshake {
                if let Some(id) = self.server_without_client(ts, src, dst, &l, stats) {
                    return Some(id);
                }
            }
            if l.ty == LongType::Retry {
                let key = FlowKey::new(src, dst);
                match self.hints.get_mut(&key) {
                    Some(h) => h.retry = true,
                    None => {
                        self.hints.put(
                            key,
                            Hint {
                                retry: true,
                                ..Hint::default()
                            },
                        );
                    }
                }
            }
            stats.orphan_packets += 1;
            return None;
        };
        let conn = self.conns.get_mut(&id)?;
        conn.last_ts = ts;
        let key = FlowKey::new(src, dst);
        if !conn.tuples.contains(&key) && conn.tuples.len() < MAX_TUPLES_PER_CONN {
            conn.tuples.push(key);
            self.by_tuple.insert(key, id);
        }
        let Some(act) = conn.active.as_deref_mut() else {
            return Some(id);
        };
        act.server_seen |= side == Side::Server;
        act.client_seen |= side == Side::Client;
        let mut new_cids: Vec<(Cid, Side)> = Vec::new();
        if !l.dcid.is_empty() && !conn.cids.iter().any(|(c, _)| c.as_slice() == l.dcid) {
            // Found by tuple: an ID issued in encrypted frames (NEW_CONNECTION_ID).
            new_cids.push((
                Cid::new(l.dcid),
                if side == Side::Client {
                    Side::Server
                } else {
                    Side::Client
                },
            ));
        }
        match (l.ty, side) {
            (LongType::Initial, _) => {
                if side == Side::Server && !l.scid.is_empty() {
                    new_cids.push((Cid::new(l.scid), Side::Server));
                }
                let dcid = Cid::new(l.dcid);
                if side == Side::Client && dcid != act.keys_cid && act.retry_cids.contains(&dcid) {
                    act.keys = InitialKeys::new(act.version, l.dcid);
                    act.keys_cid = dcid;
                }
                if l.version != act.version && side == Side::Client && !act.server_seen {
                    // A client changes version only after a Version
                    // Negotiation (RFC 9000 §6.2), which the capture does
                    // not show: it starts again, in the new version.
                    act.version = l.version;
                    act.keys_cid = dcid;
                    act.keys = InitialKeys::new(l.version, l.dcid);
                    act.crypto[0] = CryptoStream::default();
                    act.largest_pn[0] = None;
                    act.hs
                        .on(Dir::Server, Event::VersionNegotiation, &mut NoMemory);
                    act.notes.push("version_negotiation");
                }
                if l.version != act.version {
                    // Compatible version negotiation (RFC 9368): the server
                    // answers in another version, keyed from the same ID.
                    act.version = l.version;
                    act.keys = InitialKeys::new(l.version, act.keys_cid.as_slice());
                    act.notes.push("version_upgraded");
                }
                let pre_retry = side == Side::Client
                    && dcid != act.keys_cid
                    && act.pre_retry.as_ref().is_some_and(|(c, _)| *c == dcid);
                if act.keys_unknown {
                    // Nothing to open with.
                } else if act.decrypt_failures >= MAX_DECRYPT_FAILURES_PER_CONN {
                    stats.decrypt_capped += 1;
                } else if pre_retry {
                    // Only checked: its CRYPTO data belongs to the attempt
                    // the Retry ended (the client starts again at offset 0).
                    // Packet numbers go on across a Retry (RFC 9000 §17.2.5.3).
                    let opened = act.pre_retry.as_ref().and_then(|(_, keys)| {
                        open_packet(
                            &keys.client(),
                            &l,
                            &mut self.scratch,
                            &mut act.largest_pn[0],
                        )
                    });
                    if opened.is_none() {
                        initial_decrypt_failed(act, side, stats);
                    }
                } else {
                    open_initial(act, side, ts, &l, &mut self.scratch, stats);
                }
            }
            (LongType::Handshake, _) => {
                act.handshake_bytes[side as usize] += l.bytes.len() as u64;
                if side == Side::Server && !l.scid.is_empty() {
                    new_cids.push((Cid::new(l.scid), Side::Server));
                }
                if let Some(log) = &self.keylog {
                    open_handshake(act, log, side, ts, &l, &mut self.scratch, stats);
                }
            }
            (LongType::ZeroRtt, Side::Client) => act.zero_rtt_packets += 1,
            (LongType::Retry, Side::Server)
                if act.server_initial.is_none() && !l.scid.is_empty() =>
            {
                // Keys change to the Retry's SCID (RFC 9001 §5.2); the
                // client's CRYPTO data is resent from offset 0. A client
                // takes only the first Retry it receives (RFC 9000
                // §17.2.5.2); if several cross, its next Initial tells which.
                let cid = Cid::new(l.scid);
                if !act.retry {
                    stats.retry += 1;
                    act.retry = true;
                    act.hs.on(Dir::Server, Event::Retry, &mut NoMemory);
                    let original =
                        std::mem::replace(&mut act.keys, InitialKeys::new(act.version, l.scid));
                    act.pre_retry = Some((act.keys_cid, Box::new(original)));
                    act.keys_cid = cid;
                    act.last_client_initial = None;
                    // The ClientHello comes again from offset 0, and need
                    // not be the same one (aioquic makes a new one, with a
                    // new random: the one a key log knows).
                    act.crypto[0] = CryptoStream::default();
                }
                if act.retry_cids.len() < 4 && !act.retry_cids.contains(&cid) {
                    act.retry_cids.push(cid);
                }
                new_cids.push((cid, Side::Server));
            }
            _ => {}
        }
        for (cid, owner) in new_cids {
            if !conn.cids.iter().any(|(c, _)| *c == cid) && conn.cids.len() < MAX_CIDS_PER_CONN {
                conn.cids.push((cid, owner));
                self.by_cid.insert((conn.server, cid), id);
            }
        }
        if conn.active.as_ref().is_some_and(|a| a.close.is_some()) {
            self.finish(id, Finish::Done, stats);
        }
        Some(id)
    }

    fn new_connection(
        &mut self,
        ts: f64,
        src: Endpoint,
        dst: Endpoint,
        l: LongPacket<'_>,
        datagram_len: usize,
        stats: &mut QuicStats,
    ) -> Option<u64> {
        if datagram_len < MIN_CLIENT_INITIAL {
            stats.short_initial += 1;
            return None;
        }
        if l.dcid.len() < 8 {
            stats.bad_cid_len += 1;
            return None;
        }
        let key = FlowKey::new(src, dst);
        if let Some(id) = self.retried_without_server(ts, key, &l, stats) {
            return Some(id);
        }
        let hint = self.hints.peek(&key).copied().unwrap_or_default();
        if hint.decrypt_failures >= MAX_DECRYPT_FAILURES_PER_TUPLE {
            stats.decrypt_capped += 1;
            return None;
        }
        // A Version Negotiation shortly before on this tuple answered this
        // client's first attempt: the handshake began then.
        // Without the server's direction, the client's own first attempt in
        // a version tlsrum cannot read, then an Initial in another, shows it.
        let vn = hint
            .vn
            .or(hint.first_attempt)
            .filter(|&v| ts - v <= VN_WINDOW && ts >= v);
        let start = vn.map_or(ts, |v| hint.first_attempt.map_or(v, |f| f.min(v)));
        let mut hs = Handshake::new(Transport::Quic).zeek_view(self.zeek_view);
        hs.on(Dir::Client, Event::Begin { ts: start }, &mut NoMemory);
        if vn.is_some() {
            hs.on(Dir::Server, Event::VersionNegotiation, &mut NoMemory);
        }
        let mut act = Box::new(Active::new(&l, hs, ts));
        if !open_initial(&mut act, Side::Client, ts, &l, &mut self.scratch, stats) {
            let h = match self.hints.get_mut(&key) {
                Some(h) => h,
                None => {
                    self.hints.put(key, Hint::default());
                    self.hints.get_mut(&key)?
                }
            };
            h.decrypt_failures = h.decrypt_failures.saturating_add(1);
            return None;
        }
        let mut first_ts = ts;
        if hint.early_zero_rtt > 0 {
            act.zero_rtt_packets += u32::from(hint.early_zero_rtt);
            if let Some(h) = self.hints.get_mut(&key) {
                h.early_zero_rtt = 0;
            }
        }
        if vn.is_some() {
            act.notes.push("version_negotiation");
            act.start = start;
            first_ts = start;
            self.hints.pop(&key);
        }
        if let Some(note) = l.version.note() {
            act.notes.push(note);
        }
        let mut conn = Conn {
            client: src,
            server: dst,
            first_ts,
            last_ts: ts,
            cids: Vec::with_capacity(4),
            tuples: vec![key],
            active: Some(act),
            charged: 0,
        };
        conn.cids.push((Cid::new(l.dcid), Side::Server));
        if !l.scid.is_empty() {
            conn.cids.push((Cid::new(l.scid), Side::Client));
        }
        Some(self.register(key, conn, stats))
    }

    /// The capture shows the client only: an Initial on the tuple of a
    /// connection the server never answered (as far as the capture shows),
    /// to a new Destination Connection ID, with a token, restarting its
    /// CRYPTO stream at offset 0, is the client answering a Retry (RFC 9000
    /// §17.2.5.2): the same connection, rekeyed from the new ID. (A token
    /// from NEW_TOKEN comes on a connection's first Initial, not its second.)
    fn retried_without_server(
        &mut self,
        ts: f64,
        key: FlowKey,
        l: &LongPacket<'_>,
        stats: &mut QuicStats,
    ) -> Option<u64> {
        if l.token.is_empty() {
            return None;
        }
        let id = *self.by_tuple.get(&key)?;
        let conn = self.conns.get_mut(&id)?;
        let act = conn.active.as_deref_mut()?;
        if act.server_seen || act.retry || act.version != l.version {
            return None;
        }
        let keys = InitialKeys::new(l.version, l.dcid);
        let mut scratch = Vec::new();
        let range = open_packet(&keys.client(), l, &mut scratch, &mut None)?;
        let mut fresh = CryptoStream::default();
        let _ = read_frames(&scratch[range], &mut fresh, &mut None);
        if !fresh.has_start() {
            return None;
        }
        stats.retry += 1;
        act.retry = true;
        act.hs.on(Dir::Server, Event::Retry, &mut NoMemory);
        let old = std::mem::replace(&mut act.keys, keys);
        act.pre_retry = Some((act.keys_cid, Box::new(old)));
        act.keys_cid = Cid::new(l.dcid);
        act.crypto[0] = CryptoStream::default();
        act.largest_pn[0] = None;
        open_initial(act, Side::Client, ts, l, &mut self.scratch, stats);
        let cid = Cid::new(l.dcid);
        conn.last_ts = ts;
        if conn.cids.len() < MAX_CIDS_PER_CONN && !conn.cids.iter().any(|(c, _)| *c == cid) {
            conn.cids.push((cid, Side::Server));
            self.by_cid.insert((conn.server, cid), id);
        }
        Some(id)
    }

    /// The capture shows the server only: a Handshake packet from a source
    /// whose Initial on this tuple did not open as a client's (a client
    /// sends Handshake packets only after the server's). Its record says
    /// what the server's direction shows without the Initial keys: the
    /// endpoints, that a QUIC handshake ran, the one-sided note.
    fn server_without_client(
        &mut self,
        ts: f64,
        src: Endpoint,
        dst: Endpoint,
        l: &LongPacket<'_>,
        stats: &mut QuicStats,
    ) -> Option<u64> {
        let key = FlowKey::new(src, dst);
        let hint = *self.hints.peek(&key)?;
        if hint.decrypt_failures == 0 || self.by_tuple.contains_key(&key) {
            return None;
        }
        self.hints.pop(&key);
        let mut act = Box::new(Active {
            handshake_bytes: [0, l.bytes.len() as u64],
            notes: vec!["initial_keys_unknown"],
            server_seen: true,
            client_seen: false,
            keys_unknown: true,
            ..Active::new(
                l,
                Handshake::new(Transport::Quic).zeek_view(self.zeek_view),
                ts,
            )
        });
        if hint.retry {
            // Its Initials are keyed from the Retry's Source Connection ID
            // then, which the capture holds; not followed yet.
            act.retry = true;
            act.hs.on(Dir::Server, Event::Retry, &mut NoMemory);
        }
        let mut conn = Conn {
            client: dst,
            server: src,
            first_ts: ts,
            last_ts: ts,
            cids: Vec::with_capacity(2),
            tuples: vec![key],
            active: Some(act),
            charged: 0,
        };
        if !l.dcid.is_empty() {
            conn.cids.push((Cid::new(l.dcid), Side::Client));
        }
        if !l.scid.is_empty() {
            conn.cids.push((Cid::new(l.scid), Side::Server));
        }
        Some(self.register(key, conn, stats))
    }

    /// Adds a new connection: its IDs and tuple to the indexes, its bytes
    /// to the budget; the least recent one makes room. Returns its id.
    fn register(&mut self, key: FlowKey, mut conn: Conn, stats: &mut QuicStats) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        for (cid, _) in &conn.cids {
            self.by_cid.insert((conn.server, *cid), id);
        }
        self.by_tuple.insert(key, id);
        conn.charged = conn.footprint();
        self.bytes += conn.charged;
        if let Some((old_id, old)) = self.conns.push(id, conn) {
            if old_id != id {
                stats.evicted += 1;
                self.emit(old_id, old, Finish::Evicted, stats);
            }
        }
        id
    }

    /// A short-header packet on a tuple whose latest connection is `id`.
    /// Its DCID's length is unknown: if it starts with another connection's
    /// ID of the lengths this one uses, it is that connection's (many
    /// connections on one tuple); otherwise the tuple decides (the client
    /// may already use an ID the server issued in encrypted frames).
    /// Returns the connection it went to.
    ///
    /// `with_handshake`: the datagram also carried a Handshake packet. A
    /// server that sends one has not yet processed the client's Finished
    /// (it discards its Handshake keys when it does, RFC 9001 §4.9.2), so
    /// its 1-RTT packet there is no answer to the client's: a probe after
    /// its PTO (aioquic's fires 200 ms after its flight, before a 260 ms
    /// path can bring the Finished) that reached the client after its
    /// Finished had left. Taken as the server's first data, it gave
    /// `ttfb` and the round trip `server_think` subtracts too small.
    fn short(
        &mut self,
        id: u64,
        ts: f64,
        src: Endpoint,
        bytes: &[u8],
        with_handshake: bool,
        stats: &mut QuicStats,
    ) -> u64 {
        let Some(conn) = self.conns.peek_mut(&id) else {
            return id;
        };
        if conn.active.is_none() {
            // The record is out: bulk 1-RTT traffic costs two lookups.
            conn.last_ts = ts;
            return id;
        }
        let conn = &*conn;
        let mut id = id;
        let own = conn.cids.iter().any(|(c, _)| {
            !c.as_slice().is_empty() && bytes.get(1..1 + c.as_slice().len()) == Some(c.as_slice())
        });
        if !own {
            let mut lens: Vec<usize> = conn
                .cids
                .iter()
                .map(|(c, _)| c.as_slice().len())
                .filter(|&n| n > 0)
                .collect();
            lens.dedup();
            if let Some(other) = lens.iter().find_map(|&n| {
                bytes
                    .get(1..1 + n)
                    // Another connection on this tuple: the same server.
                    .and_then(|c| self.by_cid.get(&(conn.server, Cid::new(c))))
            }) {
                id = *other;
            }
        }
        let Some(conn) = self.conns.get_mut(&id) else {
            return id;
        };
        conn.last_ts = ts;
        let side = if src == conn.client {
            Side::Client
        } else {
            Side::Server
        };
        let Some(act) = conn.active.as_deref_mut() else {
            return id;
        };
        act.server_seen |= side == Side::Server;
        act.client_seen |= side == Side::Client;
        stats.packets += 1;
        if side == Side::Server && with_handshake {
            return id;
        }
        act.hs.on(
            side.dir(),
            Event::Packet {
                space: Space::OneRtt,
                ts,
            },
            &mut NoMemory,
        );
        if act.hs.fully_timed() {
            self.finish(id, Finish::Done, stats);
        }
        id
    }

    /// Unregisters a connection taken out of the table: its IDs and tuples
    /// (those still pointing at it), its bytes.
    fn unregister(&mut self, id: u64, c: &Conn) {
        self.bytes -= c.charged;
        for (cid, _) in &c.cids {
            let key = (c.server, *cid);
            if self.by_cid.get(&key) == Some(&id) {
                self.by_cid.remove(&key);
            }
        }
        for t in &c.tuples {
            if self.by_tuple.get(t) == Some(&id) {
                self.by_tuple.remove(t);
            }
        }
    }

    /// Emits the record of a connection still in the table; keeps it as a tombstone.
    fn finish(&mut self, id: u64, why: Finish, stats: &mut QuicStats) {
        let Some(conn) = self.conns.peek_mut(&id) else {
            return;
        };
        let Some(act) = conn.active.take() else {
            return;
        };
        let rec = build_record(conn, *act, why, stats);
        stats.connections += 1;
        self.out.push(rec);
        self.recharge(id);
    }

    /// Emits the record of a connection removed from the table.
    fn emit(&mut self, id: u64, mut conn: Conn, why: Finish, stats: &mut QuicStats) {
        self.unregister(id, &conn);
        if let Some(act) = conn.active.take() {
            let rec = build_record(&conn, *act, why, stats);
            stats.connections += 1;
            self.out.push(rec);
        }
    }

    /// Finishes connections idle for longer than the idle timeout.
    pub fn expire_idle(&mut self, now: f64, stats: &mut QuicStats) {
        while let Some((_, c)) = self.conns.peek_lru() {
            if c.last_ts + self.idle_timeout >= now {
                break;
            }
            let Some((id, conn)) = self.conns.pop_lru() else {
                break;
            };
            if conn.active.is_some() {
                stats.expired += 1;
            }
            self.emit(id, conn, Finish::Expired, stats);
        }
    }

    /// End of input: every connection still open is finished.
    pub fn finish_all(&mut self, stats: &mut QuicStats) {
        while !self.finish_some(usize::MAX, stats) {}
    }

    /// End of input, in steps: finishes up to `max` connections (oldest
    /// first, like the TCP flow table); returns whether none is left.
    pub fn finish_some(&mut self, max: usize, stats: &mut QuicStats) -> bool {
        for _ in 0..max {
            let Some((id, conn)) = self.conns.pop_lru() else {
                break;
            };
            self.emit(id, conn, Finish::CaptureEnd, stats);
        }
        let done = self.conns.is_empty();
        if done {
            self.hints.clear();
        }
        done
    }
}

/// Decrypts an Initial and feeds its frames; returns whether it opened.
fn open_initial(
    act: &mut Active,
    side: Side,
    ts: f64,
    l: &LongPacket<'_>,
    scratch: &mut Vec<u8>,
    stats: &mut QuicStats,
) -> bool {
    let keys = if side == Side::Client {
        act.keys.client()
    } else {
        act.keys.server()
    };
    let s = side as usize;
    let Some(range) = open_packet(&keys, l, scratch, &mut act.largest_pn[s]) else {
        initial_decrypt_failed(act, side, stats);
        return false;
    };
    match side {
        Side::Client => {
            if act.server_initial.is_none() {
                act.last_client_initial = Some(ts);
            }
        }
        Side::Server => {
            if act.server_initial.is_none() {
                act.server_initial = Some(ts);
                act.rtt = act.last_client_initial.map(|c| ts - c);
            }
        }
    }
    let capped_before = act.crypto[s].capped;
    if let Err(what) = read_frames(&scratch[range], &mut act.crypto[s], &mut act.close) {
        let _ = what;
        stats.bad_frames += 1;
    }
    if act.crypto[s].capped && !capped_before {
        stats.crypto_capped += 1;
        act.notes.push("crypto_capped");
    }
    let errors_before = act.hs.parse_errors();
    while let Some((typ, body)) = act.crypto[s].next_message() {
        act.hs.on(
            side.dir(),
            Event::Message {
                msg_type: typ,
                body: Some(&body),
                ts,
                record: None,
            },
            &mut NoMemory,
        );
    }
    stats.hello_parse_errors += u64::from(act.hs.parse_errors() - errors_before);
    true
}

/// Opens a copy of the packet in `scratch`; on success raises `largest`
/// (the direction's largest packet number in that space) and returns the
/// plaintext's range.
fn open_packet(
    keys: &DirKeys,
    l: &LongPacket<'_>,
    scratch: &mut Vec<u8>,
    largest: &mut Option<u64>,
) -> Option<std::ops::Range<usize>> {
    scratch.clear();
    scratch.extend_from_slice(l.bytes);
    let (pn, range) = keys.open(scratch, l.pn_offset, *largest).ok()?;
    *largest = Some(largest.map_or(pn, |p| p.max(pn)));
    Some(range)
}

fn initial_decrypt_failed(act: &mut Active, side: Side, stats: &mut QuicStats) {
    stats.decrypt_failed += 1;
    act.decrypt_failures = act.decrypt_failures.saturating_add(1);
    act.notes.push(if side == Side::Client {
        "client_decrypt_failed"
    } else {
        "server_decrypt_failed"
    });
}

/// Opens a Handshake packet with the key log's secrets for this
/// connection (found by its ClientHello.random, once the ServerHello named
/// the suite) and reads its frames.
fn open_handshake(
    act: &mut Active,
    log: &KeyLog,
    side: Side,
    ts: f64,
    l: &LongPacket<'_>,
    scratch: &mut Vec<u8>,
    stats: &mut QuicStats,
) {
    if act.handshake_level.is_none() {
        let (Some(ch), Some(suite)) = (act.hs.client_hello(), act.hs.cipher_suite()) else {
            return;
        };
        let Some(secrets) = log.get(&ch.random) else {
            return;
        };
        let keys = |secret: &Option<Vec<u8>>| {
            secret
                .as_deref()
                .and_then(|s| DirKeys::from_traffic_secret(act.version, suite, s))
        };
        act.handshake_level = Some(Box::new(HandshakeLevel {
            keys: [
                keys(&secrets.client_handshake),
                keys(&secrets.server_handshake),
            ],
            largest_pn: [None; 2],
            crypto: [CryptoStream::default(), CryptoStream::default()],
        }));
    }
    let Some(level) = act.handshake_level.as_deref_mut() else {
        return;
    };
    let s = side as usize;
    let Some(keys) = &level.keys[s] else { return };
    if act.decrypt_failures >= MAX_DECRYPT_FAILURES_PER_CONN {
        stats.decrypt_capped += 1;
        return;
    }
    let Some(range) = open_packet(keys, l, scratch, &mut level.largest_pn[s]) else {
        stats.keylog_failed += 1;
        act.decrypt_failures = act.decrypt_failures.saturating_add(1);
        act.notes.push("keylog_mismatch");
        return;
    };
    stats.keylog_opened += 1;
    if read_frames(&scratch[range], &mut level.crypto[s], &mut act.close).is_err() {
        stats.bad_frames += 1;
    }
    while let Some((typ, body)) = level.crypto[s].next_message() {
        if side == Side::Server && (typ == ht::ENCRYPTED_EXTENSIONS || typ == ht::CERTIFICATE) {
            act.hs.on(
                Dir::Server,
                Event::Message {
                    msg_type: typ,
                    body: Some(&body),
                    ts,
                    record: None,
                },
                &mut NoMemory,
            );
        }
    }
}

/// Frames allowed in Initial packets (RFC 9000 §12.4): PADDING, PING, ACK,
/// CRYPTO, CONNECTION_CLOSE. Anything else ends the packet's parse.
fn read_frames(
    payload: &[u8],
    crypto: &mut CryptoStream,
    close: &mut Option<String>,
) -> Result<(), &'static str> {
    let mut r = Reader::new(payload);
    while r.any_left() {
        let typ = varint(&mut r, "frame type").map_err(|_| "frame type")?;
        match typ {
            0x00 | 0x01 => {}
            0x02 | 0x03 => {
                let e = |_| "ACK";
                varint(&mut r, "largest").map_err(e)?;
                varint(&mut r, "delay").map_err(e)?;
                let ranges = varint(&mut r, "range count").map_err(e)?;
                varint(&mut r, "first range").map_err(e)?;
                for _ in 0..ranges.min(payload.len() as u64) {
                    varint(&mut r, "gap").map_err(e)?;
                    varint(&mut r, "range").map_err(e)?;
                }
                if typ == 0x03 {
                    for _ in 0..3 {
                        varint(&mut r, "ecn").map_err(e)?;
                    }
                }
            }
            0x06 => {
                let e = |_| "CRYPTO";
                let offset = varint(&mut r, "offset").map_err(e)?;
                let len = varint(&mut r, "length").map_err(e)?;
                let data = r
                    .take(usize::try_from(len).map_err(|_| "CRYPTO")?, "crypto data")
                    .map_err(e)?;
                crypto.push(offset, data);
            }
            0x1c | 0x1d => {
                let e = |_| "CONNECTION_CLOSE";
                let code = varint(&mut r, "error code").map_err(e)?;
                if typ == 0x1c {
                    varint(&mut r, "frame type").map_err(e)?;
                }
                let n = varint(&mut r, "reason length").map_err(e)?;
                r.take(
                    usize::try_from(n).map_err(|_| "CONNECTION_CLOSE")?,
                    "reason",
                )
                .map_err(e)?;
                close.get_or_insert_with(|| close_reason(typ, code));
            }
            _ => return Err("frame not allowed in Initial"),
        }
    }
    Ok(())
}

/// A CONNECTION_CLOSE as a failure string: TLS alerts (crypto errors
/// 0x0100-0x01ff, RFC 9001 §4.8) by name, like TCP's `alert:<name>`.
fn close_reason(typ: u64, code: u64) -> String {
    if typ == 0x1c && (0x100..0x200).contains(&code) {
        format!("alert:{}", alert_name((code - 0x100) as u8))
    } else if typ == 0x1c {
        format!("quic_close:0x{code:x}")
    } else {
        format!("app_close:0x{code:x}")
    }
}

/// The connection's record, from the shared builder.
fn build_record(
    conn: &Conn,
    mut act: Active,
    why: Finish,
    stats: &mut QuicStats,
) -> ConnectionRecord {
    if let Some(close) = act.close.take() {
        act.hs
            .on(Dir::Server, Event::Close(Close::Quic(close)), &mut NoMemory);
    }
    for (s, name) in [(0, "client_crypto_gap"), (1, "server_crypto_gap")] {
        if act.crypto[s].has_gap() {
            stats.crypto_gap += 1;
            act.notes.push(name);
        }
    }
    if act.zero_rtt_packets > 0 {
        act.notes.push("zero_rtt_packets");
    }
    if !act.server_seen {
        act.hs.one_sided(Dir::Server);
    } else if !act.client_seen {
        act.hs.one_sided(Dir::Client);
    }
    let view = TransportView {
        transport: Transport::Quic,
        first_ts: conn.first_ts,
        client: conn.client,
        server: conn.server,
        rtt: act.rtt,
        vantage: Default::default(),
        bytes: HandshakeBytes {
            client_handshake: act
                .client_seen
                .then_some(act.crypto[0].highest + act.handshake_bytes[0]),
            server_handshake: (act.server_seen && !act.keys_unknown)
                .then_some(act.crypto[1].highest + act.handshake_bytes[1]),
            client_app: None,
            server_app: None,
        },
        notes: act.notes,
        proxied_client: None,
    };
    act.hs.take_record(view, why)
}

/// Counts one long header tlsrum does not decode by its version's class,
/// and its value.
fn count_undecoded(version: u32, stats: &mut QuicStats) {
    match classify(version) {
        Class::Known(k) if k.why == Undecoded::NotTls => stats.not_tls_version += 1,
        Class::Known(_) => stats.undecodable_version += 1,
        _ => stats.unknown_version += 1,
    }
    stats.undecoded_versions.add(version, 1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quic::initial::tests::{hex, CLIENT_PAYLOAD, V1_CLIENT, V2_CLIENT};
    use crate::record::{EarlyData, HandshakeKind, Resumption};

    const C: Endpoint = (
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
        50000,
    );
    const S: Endpoint = (
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
        443,
    );

    /// The RFC 9001 A.2 ClientHello (handshake message, header included).
    fn client_hello() -> Vec<u8> {
        hex(CLIENT_PAYLOAD)[4..].to_vec()
    }

    /// A minimal TLS 1.3 ServerHello (header included), optionally accepting a PSK.
    fn server_hello(psk: bool, hrr: bool) -> Vec<u8> {
        let mut body = vec![3, 3];
        if hrr {
            body.extend(crate::tls::enums::HRR_RANDOM);
        } else {
            body.extend([7; 32]);
        }
        body.extend([0, 0x13, 0x01, 0]);
        let mut exts = vec![0, 43, 0, 2, 3, 4];
        if psk {
            exts.extend([0, 41, 0, 2, 0, 0]);
        }
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut m = vec![2, 0, (body.len() >> 8) as u8, body.len() as u8];
        m.extend(body);
        m
    }

    fn crypto_frame(offset: u64, data: &[u8]) -> Vec<u8> {
        let mut f = vec![
            0x06,
            0x80 | (offset >> 24) as u8,
            (offset >> 16) as u8,
            (offset >> 8) as u8,
            offset as u8,
        ];
        f.extend([0x40 | (data.len() >> 8) as u8, data.len() as u8]);
        f.extend_from_slice(data);
        f
    }

    /// A protected v1 long-header packet of type `ty` (0 Initial, 1 0-RTT,
    /// 2 Handshake), keyed from `key_cid`; Handshake and 0-RTT bodies are
    /// sealed with Initial keys too (tlsrum never opens them).
    #[allow(clippy::too_many_arguments)]
    fn long(
        ty: u8,
        client: bool,
        key_cid: &[u8],
        dcid: &[u8],
        scid: &[u8],
        pn: u64,
        frames: &[u8],
        pad_to: usize,
    ) -> Vec<u8> {
        let keys = InitialKeys::new(Version::V1, key_cid);
        let dir = if client { keys.client() } else { keys.server() };
        long_sealed(&dir, ty, dcid, scid, pn, frames, pad_to)
    }

    /// A v1 long-header packet sealed with `keys`.
    fn long_sealed(
        keys: &DirKeys,
        ty: u8,
        dcid: &[u8],
        scid: &[u8],
        pn: u64,
        frames: &[u8],
        pad_to: usize,
    ) -> Vec<u8> {
        let mut payload = frames.to_vec();
        let mut header = vec![0xc3 | (ty << 4), 0, 0, 0, 1, dcid.len() as u8];
        header.extend_from_slice(dcid);
        header.push(scid.len() as u8);
        header.extend_from_slice(scid);
        if ty == 0 {
            header.push(0); // no token
        }
        let fixed = header.len() + 2 + 4 + 16;
        if pad_to > fixed + payload.len() {
            payload.resize(pad_to - fixed, 0);
        }
        let len = 4 + payload.len() + 16;
        header.extend([0x40 | (len >> 8) as u8, len as u8]);
        header.extend((pn as u32).to_be_bytes());
        keys.seal(&header, 4, pn, &payload)
    }

    /// The test ClientHello with an `early_data` extension added.
    fn client_hello_offering_early_data() -> Vec<u8> {
        let mut ch = client_hello();
        let mut p = 4 + 2 + 32;
        p += 1 + usize::from(ch[p]);
        p += 2 + usize::from(u16::from_be_bytes([ch[p], ch[p + 1]]));
        p += 1 + usize::from(ch[p]);
        let exts = u16::from_be_bytes([ch[p], ch[p + 1]]) + 4;
        ch[p..p + 2].copy_from_slice(&exts.to_be_bytes());
        ch.extend([0, 42, 0, 0]);
        let len = (ch.len() - 4) as u32;
        ch[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
        ch
    }

    /// 0-RTT under an accepted PSK: without a key log "attempted"; with
    /// one, the server's EncryptedExtensions decides, and a stale key log
    /// is counted, never trusted.
    #[test]
    fn key_log_reads_encrypted_extensions() {
        let ch = client_hello_offering_early_data();
        let random: String = hex::encode(&ch[6..38]);
        let secret = [0x5e; 32];
        let hs_keys = DirKeys::from_traffic_secret(Version::V1, 0x1301, &secret).unwrap();
        let traffic = |accept: bool| {
            let ee: Vec<u8> = if accept {
                vec![8, 0, 0, 6, 0, 4, 0, 42, 0, 0]
            } else {
                vec![8, 0, 0, 2, 0, 0]
            };
            let mut server = long(
                0,
                false,
                ODCID,
                CCID,
                SCID,
                0,
                &crypto_frame(0, &server_hello(true, false)),
                0,
            );
            server.extend(long_sealed(
                &hs_keys,
                2,
                CCID,
                SCID,
                0,
                &crypto_frame(0, &ee),
                0,
            ));
            let mut client_fin = long(2, true, ODCID, SCID, CCID, 0, &[1; 40], 0);
            client_fin.extend(short(SCID));
            vec![
                (
                    1.0,
                    true,
                    long(0, true, ODCID, ODCID, CCID, 0, &crypto_frame(0, &ch), 1200),
                ),
                (
                    1.001,
                    true,
                    long(1, true, ODCID, ODCID, CCID, 1, &[0; 30], 0),
                ),
                (1.010, false, server),
                (1.015, true, client_fin),
                (1.030, false, short(CCID)),
            ]
        };
        let log = |secret: &[u8]| {
            let hex: String = hex::encode(secret);
            Some(Arc::new(KeyLog::parse(&format!(
                "SERVER_HANDSHAKE_TRAFFIC_SECRET {random} {hex}\n"
            ))))
        };
        for (keylog, accept, want, round_trips) in [
            (None, true, Some(EarlyData::Attempted), None),
            (log(&secret), true, Some(EarlyData::Accepted), Some(0)),
            (log(&secret), false, Some(EarlyData::Rejected), Some(1)),
            (log(&[0x6f; 32]), true, Some(EarlyData::Attempted), None),
        ] {
            let stale = keylog.is_some() && want == Some(EarlyData::Attempted);
            let mut t = QuicTracker::new(100, 120.0).with_keylog(keylog);
            let mut st = QuicStats::default();
            run(&mut t, &mut st, &traffic(accept));
            let r = &t.out[0];
            assert_eq!(
                (r.handshake, r.early_data, r.timing.round_trips),
                (Some(HandshakeKind::Resumed), want, round_trips),
                "{:?}",
                r.notes
            );
            assert_eq!(
                r.notes.contains(&"decrypted_with_keylog"),
                want != Some(EarlyData::Attempted)
            );
            assert_eq!(
                (st.keylog_failed > 0, r.notes.contains(&"keylog_mismatch")),
                (stale, stale)
            );
        }
    }

    fn short(dcid: &[u8]) -> Vec<u8> {
        let mut p = vec![0x41];
        p.extend_from_slice(dcid);
        p.extend([0x55; 40]);
        p
    }

    fn run(t: &mut QuicTracker, stats: &mut QuicStats, dgrams: &[(f64, bool, Vec<u8>)]) {
        for (ts, from_client, d) in dgrams {
            let (src, dst) = if *from_client { (C, S) } else { (S, C) };
            t.on_datagram(*ts, src, dst, d, stats);
        }
    }

    const ODCID: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8];
    const CCID: &[u8] = &[0xc1, 0xc2, 0xc3, 0xc4];
    const SCID: &[u8] = &[0x51, 0x52, 0x53, 0x54, 0x55];

    /// A full handshake: client Initial, server Initial + Handshake (coalesced),
    /// client Handshake + 1-RTT, server 1-RTT.
    fn handshake(odcid: &[u8], ccid: &[u8], t0: f64, psk: bool) -> Vec<(f64, bool, Vec<u8>)> {
        let ch = client_hello();
        let mut server = long(
            0,
            false,
            odcid,
            ccid,
            SCID,
            0,
            &crypto_frame(0, &server_hello(psk, false)),
            0,
        );
        server.extend(long(2, false, odcid, ccid, SCID, 0, &[1; 40], 0));
        let mut client_fin = long(2, true, odcid, SCID, ccid, 0, &[1; 40], 0);
        client_fin.extend(short(SCID));
        vec![
            (
                t0,
                true,
                long(0, true, odcid, odcid, ccid, 0, &crypto_frame(0, &ch), 1200),
            ),
            (t0 + 0.010, false, server),
            (t0 + 0.015, true, client_fin),
            (t0 + 0.030, false, short(ccid)),
        ]
    }

    #[test]
    fn rfc9001_client_initial_starts_a_connection() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        t.on_datagram(1.0, C, S, &hex(V1_CLIENT), &mut st);
        t.on_datagram(1.0, C, S, &hex(V2_CLIENT), &mut st); // same DCID: same connection
        t.finish_all(&mut st);
        assert_eq!(t.out.len(), 1);
        let r = &t.out[0];
        assert_eq!(r.sni.as_deref(), Some("example.com"));
        assert_eq!(
            r.alpn.as_ref().map(|a| a.iter().collect::<Vec<_>>()),
            Some(vec!["alpn"])
        );
        assert_eq!(r.handshake, Some(HandshakeKind::Incomplete));
        assert_eq!(r.version, None);
        assert!(r.notes.contains(&"capture_ended"));
    }

    #[test]
    fn full_handshake_is_classified_and_timed() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        run(&mut t, &mut st, &handshake(ODCID, CCID, 10.0, false));
        assert_eq!(
            t.out.len(),
            1,
            "fully timed: emitted without waiting for the end"
        );
        let r = &t.out[0];
        assert_eq!(r.transport, Transport::Quic);
        assert_eq!(
            (r.handshake, r.version, r.cipher.as_deref()),
            (
                Some(HandshakeKind::Full),
                Some("TLS1.3"),
                Some("TLS_AES_128_GCM_SHA256")
            )
        );
        assert_eq!(r.timing.tcp_rtt, Some(10.0));
        assert_eq!(r.timing.handshake, Some(15.0));
        assert_eq!(r.timing.ttfb, Some(30.0));
        assert_eq!(r.timing.round_trips, Some(1));
        assert_eq!(r.client, "10.0.0.1:50000");
        assert!(r.bytes.client_handshake > Some(245) && r.bytes.server_handshake > Some(60));
        t.finish_all(&mut st);
        assert_eq!(t.out.len(), 1, "the tombstone emits nothing more");
        assert_eq!(
            st.decrypt_failed + st.bad_header + st.bad_frames,
            0,
            "{st:?}"
        );
    }

    /// Regression (aioquic over a 260 ms delay line, think_time.rs): the
    /// server's PTO probe (Handshake + 1-RTT in one datagram), sent before
    /// the client's Finished reached it, arrived at the client after the
    /// Finished left, and was taken as the server's answer: ttfb and the
    /// round trip to the server too small, server_think too large.
    #[test]
    fn server_probe_with_handshake_packet_is_no_answer() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let mut d = handshake(ODCID, CCID, 10.0, false);
        let answer = d.pop().unwrap();
        let mut probe = long(2, false, ODCID, CCID, SCID, 1, &[1; 40], 0);
        probe.extend(short(CCID));
        d.push((10.020, false, probe));
        d.push(answer);
        run(&mut t, &mut st, &d);
        assert_eq!(t.out.len(), 1);
        let r = &t.out[0];
        assert_eq!(r.timing.ttfb, Some(30.0));
        // Client's Initial -> server's Initial 10 ms, its 1-RTT -> the
        // answer 15 ms: the server thought nothing (clamped at zero).
        assert_eq!(r.timing.server_think, Some(0.0));
    }

    #[test]
    fn psk_resumption_and_zero_rtt() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let mut d = handshake(ODCID, CCID, 1.0, true);
        // The RFC ClientHello offers neither PSK nor early data; the server
        // accepting a PSK is enough for "resumed". 0-RTT packets are counted.
        d.insert(
            1,
            (
                1.001,
                true,
                long(1, true, ODCID, ODCID, CCID, 1, &[0; 30], 0),
            ),
        );
        run(&mut t, &mut st, &d);
        let r = &t.out[0];
        assert_eq!(r.handshake, Some(HandshakeKind::Resumed));
        assert_eq!(r.resumption, Some(Resumption::Psk));
        assert_eq!(r.early_data, Some(EarlyData::None));
        assert!(r.notes.contains(&"zero_rtt_packets"));
    }

    #[test]
    fn split_out_of_order_duplicated_client_hello() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let ch = client_hello();
        let (a, b) = ch.split_at(100);
        let second = long(0, true, ODCID, ODCID, CCID, 1, &crypto_frame(100, b), 1200);
        let first = long(0, true, ODCID, ODCID, CCID, 0, &crypto_frame(0, a), 1200);
        run(
            &mut t,
            &mut st,
            &[
                (1.0, true, second.clone()),
                (1.001, true, first),
                (1.002, true, second),
            ],
        );
        t.finish_all(&mut st);
        assert_eq!(t.out[0].sni.as_deref(), Some("example.com"));
        assert!(!t.out[0].notes.contains(&"client_crypto_gap"));
    }

    #[test]
    fn many_connections_on_one_tuple_and_one_over_two_tuples() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let other: &[u8] = &[9, 9, 9, 9, 9, 9, 9, 9];
        let mut d = handshake(ODCID, CCID, 1.0, false);
        // A second connection on the same tuple, interleaved, with other IDs.
        let ch = client_hello();
        d.insert(
            1,
            (
                1.002,
                true,
                long(
                    0,
                    true,
                    other,
                    other,
                    &[0xee],
                    0,
                    &crypto_frame(0, &ch),
                    1200,
                ),
            ),
        );
        run(&mut t, &mut st, &d);
        // The first connection's server Initial, re-sent from another server address (one connection, two tuples).
        let s2: Endpoint = (S.0, 8443);
        t.on_datagram(
            2.0,
            s2,
            C,
            &long(2, false, ODCID, CCID, SCID, 5, &[1; 40], 0),
            &mut st,
        );
        t.finish_all(&mut st);
        assert_eq!(t.out.len(), 2);
        let full = t
            .out
            .iter()
            .find(|r| r.handshake == Some(HandshakeKind::Full))
            .unwrap();
        assert_eq!(full.timing.tcp_rtt, Some(10.0));
        assert_eq!(
            t.out
                .iter()
                .filter(|r| r.handshake == Some(HandshakeKind::Incomplete))
                .count(),
            1
        );
    }

    /// Connection IDs are not unique across servers: two connections to
    /// two servers with the same IDs, interleaved (as in a capture made of
    /// copies of one connection), are two connections, each timed by its
    /// own packets.
    #[test]
    fn the_same_connection_ids_at_two_servers_are_two_connections() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let (c2, s2): (Endpoint, Endpoint) = ((C.0, 50001), (S.0, 8443));
        let mut all: Vec<(f64, bool, Endpoint, Endpoint, Vec<u8>)> = Vec::new();
        for (ts, from_client, d) in handshake(ODCID, CCID, 1.0, false) {
            let (src, dst) = if from_client { (C, S) } else { (S, C) };
            all.push((ts, from_client, src, dst, d));
        }
        // The copy starts 2 ms later and its server answers 5 ms slower.
        for (ts, from_client, d) in handshake(ODCID, CCID, 1.002, false) {
            let (src, dst) = if from_client { (c2, s2) } else { (s2, c2) };
            let ts = if ts > 1.002 { ts + 0.005 } else { ts };
            all.push((ts, from_client, src, dst, d));
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (ts, _, src, dst, d) in &all {
            t.on_datagram(*ts, *src, *dst, d, &mut st);
        }
        t.finish_all(&mut st);
        let mut rtts: Vec<_> = t
            .out
            .iter()
            .map(|r| (r.server.to_string(), r.handshake, r.timing.tcp_rtt))
            .collect();
        rtts.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            rtts,
            vec![
                (
                    "10.0.0.2:443".to_string(),
                    Some(HandshakeKind::Full),
                    Some(10.0)
                ),
                (
                    "10.0.0.2:8443".to_string(),
                    Some(HandshakeKind::Full),
                    Some(15.0)
                ),
            ]
        );
    }

    #[test]
    fn retry_rekeys_from_its_source_connection_id() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let retry_scid: &[u8] = &[0xaa; 8];
        let mut retry = vec![0xf0, 0, 0, 0, 1, CCID.len() as u8];
        retry.extend_from_slice(CCID);
        retry.push(8);
        retry.extend_from_slice(retry_scid);
        retry.extend(b"token");
        retry.extend([0; 16]);
        let ch = client_hello();
        let (head, tail) = ch.split_at(ch.len() / 2);
        let mut d = vec![
            (
                1.0,
                true,
                long(0, true, ODCID, ODCID, CCID, 0, &crypto_frame(0, head), 1200),
            ),
            (1.005, false, retry),
            // The ClientHello's second datagram, sent before the client
            // processed the Retry: still keyed from the original ID.
            (
                1.006,
                true,
                long(
                    0,
                    true,
                    ODCID,
                    ODCID,
                    CCID,
                    1,
                    &crypto_frame(head.len() as u64, tail),
                    1200,
                ),
            ),
        ];
        // After the Retry everything is keyed from the Retry's SCID.
        for (ts, c, p) in handshake(retry_scid, CCID, 1.010, false) {
            d.push((ts, c, p));
        }
        run(&mut t, &mut st, &d);
        let r = &t.out[0];
        assert!(r.retry);
        assert_eq!(r.handshake, Some(HandshakeKind::Full));
        assert_eq!(r.timing.round_trips, Some(2));
        assert_eq!(
            r.timing.tcp_rtt,
            Some(10.0),
            "RTT from the post-Retry Initial"
        );
        assert_eq!(
            r.timing.handshake,
            Some(25.0),
            "handshake from the very first Initial"
        );
        assert_eq!(st.decrypt_failed, 0);
        assert!(
            !r.notes.iter().any(|n| n.contains("decrypt")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn hrr_and_connection_close_in_initial() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let ch = client_hello();
        let mut frames = crypto_frame(0, &server_hello(false, true));
        // CONNECTION_CLOSE, crypto error 0x128 = alert 40 handshake_failure.
        frames.extend([0x1c, 0x41, 0x28, 0x06, 0x00]);
        run(
            &mut t,
            &mut st,
            &[
                (
                    1.0,
                    true,
                    long(0, true, ODCID, ODCID, CCID, 0, &crypto_frame(0, &ch), 1200),
                ),
                (
                    1.01,
                    false,
                    long(0, false, ODCID, CCID, SCID, 0, &frames, 0),
                ),
            ],
        );
        let r = &t.out[0];
        assert!(r.hrr);
        assert_eq!(r.handshake, Some(HandshakeKind::Failed));
        assert_eq!(r.failure.as_deref(), Some("alert:handshake_failure"));
    }

    #[test]
    fn version_negotiation_joins_the_next_attempt() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let mut unknown = vec![0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 8];
        unknown.extend_from_slice(ODCID);
        unknown.push(CCID.len() as u8);
        unknown.extend_from_slice(CCID);
        unknown.resize(1200, 0);
        let mut vn = vec![0x80, 0, 0, 0, 0, CCID.len() as u8];
        vn.extend_from_slice(CCID);
        vn.push(8);
        vn.extend_from_slice(ODCID);
        vn.extend([0, 0, 0, 1]);
        let mut d = vec![(0.990, true, unknown), (0.995, false, vn)];
        d.extend(handshake(ODCID, CCID, 1.0, false));
        run(&mut t, &mut st, &d);
        let r = &t.out[0];
        assert!(r.notes.contains(&"version_negotiation"));
        assert_eq!(r.timing.round_trips, Some(2));
        assert_eq!(r.timing.handshake, Some(25.0));
        // 0x1a2a3a4a is reserved to force Version Negotiation (RFC 9000 §15).
        assert_eq!((st.undecodable_version, st.version_negotiation), (1, 1));
        assert_eq!(st.undecoded_versions.values(), [(0x1a2a_3a4a, 1)]);
    }

    #[test]
    fn bad_input_is_counted_by_reason() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        let mut bogus_cid = vec![0xc0, 0, 0, 0, 1, 21];
        bogus_cid.extend([0; 40]);
        t.on_datagram(1.0, C, S, &bogus_cid, &mut st);
        assert_eq!(st.bad_cid_len, 1);
        t.on_datagram(1.0, C, S, b"\x12\x34 dns-ish", &mut st);
        assert_eq!(st.not_quic, 1);
        let v1 = hex(V1_CLIENT);
        t.on_datagram(1.0, C, S, &v1[..600], &mut st);
        assert_eq!(st.bad_header, 1, "{st:?}");
        let mut corrupt = v1.clone();
        corrupt[700] ^= 0xff;
        t.on_datagram(1.0, C, S, &corrupt, &mut st);
        assert_eq!(st.decrypt_failed, 1);
        let small = long(0, true, ODCID, ODCID, CCID, 0, &crypto_frame(0, b"x"), 0);
        t.on_datagram(1.0, C, S, &small, &mut st);
        assert_eq!(st.short_initial, 1);
        // Past the per-tuple cap, no more crypto is spent on that tuple.
        for _ in 0..20 {
            t.on_datagram(1.0, C, S, &corrupt, &mut st);
        }
        assert_eq!(st.decrypt_failed, u64::from(MAX_DECRYPT_FAILURES_PER_TUPLE));
        assert!(st.decrypt_capped > 0);
        t.finish_all(&mut st);
        assert!(t.out.is_empty());
    }

    /// Random and mutated datagrams, both directions: never a panic, and
    /// every datagram is accounted for.
    #[test]
    fn fuzz_random_and_mutated_datagrams() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut corpus: Vec<Vec<u8>> = vec![hex(V1_CLIENT), hex(V2_CLIENT)];
        for (_, _, d) in handshake(ODCID, CCID, 1.0, true) {
            corpus.push(d);
        }
        let mut t = QuicTracker::new(64, 5.0);
        let mut st = QuicStats::default();
        for i in 0..20_000u32 {
            let mut d = if rnd() % 4 == 0 {
                (0..(rnd() % 1400) as usize).map(|_| rnd() as u8).collect()
            } else {
                corpus[(rnd() % corpus.len() as u64) as usize].clone()
            };
            for _ in 0..(rnd() % 4) {
                if d.is_empty() {
                    break;
                }
                let at = (rnd() % d.len() as u64) as usize;
                match rnd() % 3 {
                    0 => d[at] ^= 1 << (rnd() % 8),
                    1 => d.truncate(at),
                    _ => d[at] = rnd() as u8,
                }
            }
            let port = 40000 + (rnd() % 8) as u16;
            let c = (C.0, port);
            let ts = f64::from(i) * 0.001;
            if rnd() % 2 == 0 {
                t.on_datagram(ts, c, S, &d, &mut st);
            } else {
                t.on_datagram(ts, S, c, &d, &mut st);
            }
            if i % 1000 == 0 {
                t.expire_idle(ts, &mut st);
            }
        }
        t.finish_all(&mut st);
        assert_eq!(st.datagrams, 20_000);
        assert!(t.active_connections() == 0 && t.by_cid.is_empty() && t.by_tuple.is_empty());
        assert!(
            st.decrypt_failed > 0 && st.bad_header > 0 && st.not_quic > 0,
            "{st:?}"
        );
    }
}
