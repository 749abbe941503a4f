//! Flow-sharded replay (`tlsrum replay --threads N`): this thread reads the
//! capture, decodes each frame once (the analyzer's own decoder, so
//! tunnels and VLANs land by their inner connection), picks its shard by
//! its connection ([`Packet::connection_hash`]) and puts it in that shard's
//! list of the round; N shards, each a thread with its own [`Analyzer`],
//! analyze their lists. A frame travels as its place in the capture's
//! mapping when the source has one ([`Source::mapping`], a plain file; the
//! source then keeps the pages of rounds in flight), else copied into the
//! round, with its decoded packet beside it. (Decoding here once, rather
//! than in every shard to find its own, took a third off what two shards
//! cost over one thread: +14 % instructions, was +21 %. The shards
//! prefetch their lists and frames, which this thread wrote and touched
//! last, on another core.)
//!
//! What keeps the output that of one thread:
//! - Both directions of a connection, and all connection IDs of a QUIC
//!   connection (one UDP address pair), land in one shard. A QUIC client
//!   that migrates (or is NAT-rebound) moves to another shard's view:
//!   RFC 9000 §9 forbids migrating before the handshake is confirmed, so
//!   this only touches packets after a record's handshake part.
//! - Frames are numbered in capture order. The idle sweep one analyzer
//!   runs when the capture clock passes a second ([`SweepClock`], kept
//!   here too) is in every shard's list at the same frame
//!   ([`Analyzer::tick`]).
//! - Records are merged by the number of the frame that completed them:
//!   the order of one thread. A sink that only writes each record's bytes
//!   (NDJSON) has the shards encode them; this thread puts them in
//!   order. Records several shards finish at the same frame (an idle
//!   sweep, the end of the capture) come shard by shard.
//! - Session IDs servers issue go to one store all shards share
//!   ([`SharedIds`]). Whether a ClientHello's ID was issued before its
//!   frame `q` is asked when its record is built. If the store already
//!   says yes, or every other shard is past `q`, that is the answer;
//!   otherwise the record carries the question
//!   ([`ConnectionRecord::unsettled`]): its shard settles it a round
//!   later if it can ([`Out::close`]), else this thread does when it
//!   collects the round, by when every shard is past `q`. No shard waits
//!   for another (with 2 cores and 3 threads, waiting was what kept two
//!   shards from using both).
//! - Counters are summed. `--max-flows` and `--max-memory` are split
//!   evenly among the shards: the totals hold, but which flow is evicted
//!   when they bind can differ from one thread.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use analyzer::handshake::Issued;
use analyzer::quic::version::VersionsSeen;
use analyzer::record::ConnectionRecord;
use analyzer::wire::{self, DecodeError, Packet};
use analyzer::{Analyzer, SessionIds, Stats, SweepClock};
use anyhow::{anyhow, bail, Result};

use crate::sink::{Encoder, RecordSink};
use crate::source::{prefetch, prefetch_value, Captured, Source, Status};

/// Frames per shard in one round: every shard gets one batch per round,
/// so that each knows how far the capture has gone.
const ROUND_PER_SHARD: usize = 2048;

/// Rounds handed out before the oldest one's records are collected (a
/// shard sends a round's records when it has done the next: at least 2).
const DEPTH: usize = 3;

/// Flows finished per step at the end of input (as `pipeline::finish`).
const FINISH_BATCH: usize = 4096;

/// Frames ahead whose first bytes a shard asks the cache for: the reading
/// thread touched them last (so they are in another core's cache, or in
/// memory), and waiting for them was a shard's largest single cost.
const PREFETCH_AHEAD: usize = 4;

/// "Past every frame": a shard at the end of its input, or gone.
const DONE: u64 = u64::MAX;

/// One frame of a round, or a sweep, in one shard's list.
#[derive(Clone, Copy)]
struct Item {
    /// The frame's number.
    seq: u64,
    ts: f64,
    what: What,
    /// The bytes the shard reads (a packet's payload, an undecodable
    /// frame whole): `start..end` of the batch's `data`, or of the
    /// source's mapping when `mapped`.
    start: usize,
    end: usize,
    mapped: bool,
}

/// What the reading thread found at a frame, decoded once for all shards.
#[derive(Clone, Copy)]
enum What {
    /// A packet; its payload is the item's bytes (the packet holds an
    /// empty one).
    Packet(Packet<'static>),
    /// A frame that yielded no packet: counted.
    Undecodable(DecodeError),
    /// The idle sweep one analyzer runs at this frame (in every shard).
    Sweep,
}

/// A round: the frames the source rewrote (not in its mapping) back to
/// back, and each shard's list of its frames and of the sweeps.
#[derive(Default)]
struct Batch {
    /// One past the number of its last frame.
    end: u64,
    data: Vec<u8>,
    items: Vec<Vec<Item>>,
}

enum ToShard {
    /// A round's frames, shared by every shard.
    Round(Arc<Batch>),
    /// A round's records written: its buffers, back for another round.
    /// (Allocated anew each round on the shard and freed here, they
    /// were fresh memory for the allocator to fault in and zero.)
    Spare(Out),
    /// No more rounds: send the records of the last one.
    Flush,
    /// End of input: finish every flow.
    Finish,
}

enum FromShard {
    /// The records a round completed.
    Round(Out),
    /// Records of flows finished at the end of input.
    Finished(Out),
    /// The shard is done: its counters, and the frame where each value of
    /// its undecoded QUIC versions list first appeared.
    Done(Box<Stats>, Vec<u64>),
}

/// Records a shard completed, each with the number of the frame that
/// completed it, in the order it completed them: as they are, or, when the
/// sink has an encoder ([`RecordSink::encoder`]), as its bytes, encoded on
/// the shard so that the reading thread only puts them in order (encoding
/// them itself was a tenth of its time, and it is the one thread that
/// does not run in parallel). A record with an open question
/// ([`ConnectionRecord::unsettled`]) waits until the shard has done the
/// next round too: the other shards have then most often passed the
/// frame it asks about, and it is settled and encoded once ([`Out::close`];
/// at the end of its own round that was one in ten). If not, it is
/// encoded both ways, and the reading thread picks one when it has the
/// answer.
#[derive(Default)]
struct Out {
    entries: Vec<(u64, Entry)>,
    bytes: Vec<u8>,
    /// Entries holding a record with an open question, to encode at the
    /// end of the round ([`Out::close`]).
    open: Vec<usize>,
}

enum Entry {
    /// Where its bytes are in `bytes`.
    Line(usize, usize),
    /// A record with an open question, its bytes if the session ID was
    /// not issued and if it was ([`ConnectionRecord::settle`]), and the
    /// question.
    Either {
        not_issued: (usize, usize),
        issued: (usize, usize),
        question: (u64, u64),
    },
    Record(Box<ConnectionRecord>),
}

impl Out {
    /// The records the analyzer has completed, at frame `seq`.
    fn take(&mut self, analyzer: &mut Analyzer, seq: u64, encoder: Option<Encoder>) {
        if analyzer.records_waiting() > 0 {
            analyzer.with_records(|records| {
                for r in records.drain(..) {
                    self.push(seq, r, encoder);
                }
            });
        }
    }

    fn push(&mut self, seq: u64, record: ConnectionRecord, encoder: Option<Encoder>) {
        let entry = match encoder {
            Some(encode) if record.unsettled.is_none() => {
                let (start, end) = self.line(&record, encode);
                Entry::Line(start, end)
            }
            Some(_) => {
                self.open.push(self.entries.len());
                Entry::Record(Box::new(record))
            }
            None => Entry::Record(Box::new(record)),
        };
        self.entries.push((seq, entry));
    }

    /// Appends `record`'s bytes; where they are.
    fn line(&mut self, record: &ConnectionRecord, encode: Encoder) -> (usize, usize) {
        let start = self.bytes.len();
        encode(record, &mut self.bytes);
        (start, self.bytes.len())
    }

    /// End of the round: encodes the records with an open question, once
    /// if `ids` now has the answer, else both ways.
    fn close(&mut self, ids: &SharedIds, encoder: Option<Encoder>) {
        let Some(encode) = encoder else { return };
        for at in std::mem::take(&mut self.open) {
            let Some((_, entry)) = self.entries.get_mut(at) else {
                continue;
            };
            let Entry::Record(record) = std::mem::replace(entry, Entry::Line(0, 0)) else {
                continue;
            };
            let mut record = *record;
            if let Some(issued) = record
                .unsettled
                .as_ref()
                .and_then(|u| ids.answer(u.session_id.0, u.session_id.1))
            {
                record.settle(issued);
            }
            let new = match record.unsettled.take() {
                None => {
                    let (start, end) = self.line(&record, encode);
                    Entry::Line(start, end)
                }
                // As `settle` leaves it: unanswered, then answered yes.
                Some(u) => {
                    let not_issued = self.line(&record, encode);
                    record.offered = u.offered;
                    record.timing.avoidable = u.avoidable;
                    Entry::Either {
                        not_issued,
                        issued: self.line(&record, encode),
                        question: u.session_id,
                    }
                }
            };
            if let Some((_, entry)) = self.entries.get_mut(at) {
                *entry = new;
            }
        }
    }
}

/// Writes shards' records in frame order (shard by shard within a frame,
/// as `outs` come), each open question settled first. Every shard is past
/// the frames these records were completed at, so the store holds every
/// session ID issued before any question they ask.
fn write(
    outs: &mut [Out],
    shared: &Shared,
    encoder: Option<Encoder>,
    sink: &mut dyn RecordSink,
    bytes: &mut Vec<u8>,
) -> Result<()> {
    // (frame, shard, entry): stable sort keeps shard order, then each
    // shard's own order, within a frame.
    let mut all: Vec<(u64, usize, Entry)> = Vec::new();
    for (k, out) in outs.iter_mut().enumerate() {
        all.extend(out.entries.drain(..).map(|(seq, e)| (seq, k, e)));
    }
    if all.is_empty() {
        return Ok(());
    }
    all.sort_by_key(|e| e.0);
    for (_, _, e) in &mut all {
        match e {
            Entry::Record(r) => settle(shared, r),
            Entry::Either {
                not_issued,
                issued,
                question,
            } => {
                let (a, b) = if was_issued(shared, *question) {
                    *issued
                } else {
                    *not_issued
                };
                *e = Entry::Line(a, b);
            }
            Entry::Line(..) => {}
        }
    }
    match encoder {
        Some(encode) => {
            // Kept from round to round rather than allocated for each.
            bytes.clear();
            for (_, k, e) in &all {
                match e {
                    Entry::Line(a, b) => {
                        bytes.extend_from_slice(outs[*k].bytes.get(*a..*b).unwrap_or_default())
                    }
                    Entry::Record(r) => encode(r, bytes),
                    // Made lines above.
                    Entry::Either { .. } => {}
                }
            }
            for out in outs.iter_mut() {
                out.bytes.clear();
            }
            sink.encoded(bytes)
        }
        None => {
            let records: Vec<ConnectionRecord> = all
                .into_iter()
                .filter_map(|(_, _, e)| match e {
                    Entry::Record(r) => Some(*r),
                    Entry::Line(..) | Entry::Either { .. } => None,
                })
                .collect();
            sink.records(&records)
        }
    }
}

/// Answers a record's open session-ID question from the shared store.
fn settle(shared: &Shared, r: &mut ConnectionRecord) {
    if let Some(u) = &r.unsettled {
        let issued = was_issued(shared, u.session_id);
        r.settle(issued);
    }
}

/// Whether the session ID hashed `hash` was issued before frame `q`.
fn was_issued(shared: &Shared, (hash, q): (u64, u64)) -> bool {
    let ids = shared.ids.lock().unwrap_or_else(|e| e.into_inner());
    ids.first.get(&hash).is_some_and(|&s| s < q)
}

/// Padded to its own cache line: shards write their progress per frame.
#[repr(align(128))]
struct Progress(AtomicU64);

/// What the shards share: how far each is, and the issued session IDs.
struct Shared {
    /// Shard i has processed all its frames numbered below `progress[i]`.
    progress: Vec<Progress>,
    /// The lowest frame number someone waits for shard i to pass
    /// (`DONE`: nobody waits), so that shards tell only when it matters.
    wanted: Vec<Progress>,
    /// Where a shard waits for another ([`Shared::wait_past`]).
    gate: Mutex<()>,
    passed: Condvar,
    ids: Mutex<IdStore>,
}

impl Shared {
    fn new(shards: usize, max_session_ids: usize) -> Self {
        Shared {
            progress: (0..shards).map(|_| Progress(AtomicU64::new(0))).collect(),
            wanted: (0..shards)
                .map(|_| Progress(AtomicU64::new(DONE)))
                .collect(),
            gate: Mutex::new(()),
            passed: Condvar::new(),
            ids: Mutex::new(IdStore {
                first: HashMap::default(),
                order: VecDeque::new(),
                cap: max_session_ids.max(1),
            }),
        }
    }

    /// Shard `me` processed every frame below `seq`; wakes whoever waits
    /// for that. Called per frame, so without a fence: a SeqCst store
    /// here (an `xchg`, which drains the store buffer) let every waiter
    /// see the progress or the shard see the wish, but cost it on every
    /// frame, and nothing in the analyzer waits any more (see
    /// `SessionIds::ask`). A wish read too late is caught by the waiter's
    /// own look a millisecond later.
    fn advance(&self, me: usize, seq: u64) {
        self.progress[me].0.store(seq, Ordering::Release);
        if self.wanted[me].0.load(Ordering::Relaxed) <= seq {
            let _gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
            self.wanted[me].0.store(DONE, Ordering::Relaxed);
            self.passed.notify_all();
        }
    }

    /// Blocks until shard `i` is past frame `q`: sleeping, not spinning,
    /// so that the shard waited for gets the core.
    fn wait_past(&self, i: usize, q: u64) {
        // A shard close behind passes q in a moment: cheaper than sleeping.
        for _ in 0..64 {
            if self.progress[i].0.load(Ordering::Acquire) >= q {
                return;
            }
            std::hint::spin_loop();
        }
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            self.wanted[i].0.fetch_min(q, Ordering::Relaxed);
            if self.progress[i].0.load(Ordering::Acquire) >= q {
                return;
            }
            // Woken when shard i reads the wish; if it read the wish's
            // slot just before the wish, the next look finds it past q.
            gate = self
                .passed
                .wait_timeout(gate, std::time::Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Session ID hash -> the first frame that issued it; bounded, oldest
/// entry out first (one analyzer drops the least recently issued: they
/// differ only past `max_session_ids` IDs).
struct IdStore {
    /// foldhash, not std's SipHash: the keys are already keyed hashes.
    first: HashMap<u64, u64, foldhash::fast::RandomState>,
    order: VecDeque<u64>,
    cap: usize,
}

/// One shard's handle on the shared session IDs.
pub struct SharedIds {
    shared: Arc<Shared>,
    me: usize,
}

impl SharedIds {
    fn now(&self) -> u64 {
        self.shared.progress[self.me].0.load(Ordering::Relaxed)
    }

    fn issued_before(&self, hash: u64, q: u64) -> bool {
        was_issued(&self.shared, (hash, q))
    }

    /// Is every other shard past frame `q`? Then every ID issued before
    /// `q` is in the store.
    fn all_past(&self, q: u64) -> bool {
        (0..self.shared.progress.len())
            .all(|i| i == self.me || self.shared.progress[i].0.load(Ordering::Acquire) >= q)
    }
}

impl SessionIds for SharedIds {
    /// Asked now: waits, if needed, until every other shard is past this
    /// frame, so the answer is the one a single analyzer gives.
    fn was_issued(&self, hash: u64) -> bool {
        let q = self.now();
        if self.issued_before(hash, q) {
            return true;
        }
        for i in 0..self.shared.progress.len() {
            if i != self.me {
                self.shared.wait_past(i, q);
            }
        }
        self.issued_before(hash, q)
    }

    /// Asked at the ClientHello, answered when its record is built.
    fn ask(&self, hash: u64) -> Issued {
        Issued::Later(hash, self.now())
    }

    /// Known when the ID was issued before `q`, or when every other shard
    /// is past `q`; otherwise the record carries the question and the
    /// reading thread settles it ([`write`]): no shard waits for another.
    fn answer(&self, hash: u64, q: u64) -> Option<bool> {
        if self.issued_before(hash, q) {
            return Some(true);
        }
        self.all_past(q).then(|| self.issued_before(hash, q))
    }

    fn issued(&mut self, hash: u64) {
        let s = self.now();
        let mut ids = self.shared.ids.lock().unwrap_or_else(|e| e.into_inner());
        let store = &mut *ids;
        match store.first.get_mut(&hash) {
            Some(first) => *first = (*first).min(s),
            None => {
                store.first.insert(hash, s);
                store.order.push_back(hash);
                if store.order.len() > store.cap {
                    if let Some(old) = store.order.pop_front() {
                        store.first.remove(&old);
                    }
                }
            }
        }
    }
}

/// Marks its shard past every frame when the shard ends, even by a panic,
/// so that no other shard waits for it forever.
struct PastEverything<'a>(&'a Shared, usize);

impl Drop for PastEverything<'_> {
    fn drop(&mut self) {
        self.0.advance(self.1, DONE);
    }
}

/// What a sharded replay of one capture gives back.
pub struct Sharded {
    pub stats: Stats,
    /// Reading the capture failed after this many frames (what was read
    /// is analyzed and its records written).
    pub read_error: Option<anyhow::Error>,
}

/// Replays `source` on `threads` shards made by `make` (each is handed the
/// shared session-ID store); records go to `sink` in the order one
/// analyzer gives; `progress` is told the frames read after each round.
pub fn replay(
    source: &mut dyn Source,
    threads: usize,
    max_session_ids: usize,
    make: &(dyn Fn() -> Analyzer + Sync),
    sink: &mut dyn RecordSink,
    progress: &mut dyn FnMut(u64),
) -> Result<Sharded> {
    let n = threads.max(1);
    let shared = Arc::new(Shared::new(n, max_session_ids));
    // Frames inside the source's mapping are handed over as places in it.
    let mapping = source.mapping();
    let map: &[u8] = mapping.as_ref().map_or(&[], |m| &m.bytes[..]);
    let encoder = sink.encoder();
    std::thread::scope(|scope| {
        let mut to: Vec<Sender<ToShard>> = Vec::with_capacity(n);
        let mut from: Vec<Receiver<FromShard>> = Vec::with_capacity(n);
        for me in 0..n {
            let (tx_in, rx_in) = channel();
            let (tx_out, rx_out) = channel();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("tlsrum-shard-{me}"))
                .spawn_scoped(scope, move || {
                    shard(me, shared, map, encoder, make, rx_in, tx_out)
                })?;
            to.push(tx_in);
            from.push(rx_out);
        }
        let mut dispatch = Dispatch {
            n,
            seq: 0,
            sweep: SweepClock::default(),
            pool: Vec::new(),
            map,
            mapped_to: 0,
        };
        // Each round in flight and where it starts in the mapping: the
        // source keeps the pages from the oldest one's start on.
        let mut rounds: VecDeque<(Arc<Batch>, usize)> = VecDeque::new();
        let mut read_error = None;
        // The records' bytes of a round, in order.
        let mut scratch = Vec::new();
        loop {
            let start = dispatch.mapped_to;
            let (status, batch) = dispatch.fill(source);
            let batch = Arc::new(batch);
            for tx in &to {
                tx.send(ToShard::Round(batch.clone()))
                    .map_err(|_| anyhow!("an analysis shard stopped"))?;
            }
            rounds.push_back((batch, start));
            if rounds.len() > DEPTH {
                collect(&from, &to, &shared, encoder, sink, &mut scratch)?;
                dispatch.reuse(rounds.pop_front());
                if let (Some(m), Some((_, start))) = (&mapping, rounds.front()) {
                    m.keep.store(*start, Ordering::Release);
                }
            }
            progress(dispatch.seq);
            match status {
                Ok(Status::Open) => {}
                Ok(Status::Ended) => break,
                Err(e) => {
                    read_error = Some(e);
                    break;
                }
            }
        }
        for tx in &to {
            tx.send(ToShard::Flush)
                .map_err(|_| anyhow!("an analysis shard stopped"))?;
        }
        for _ in 0..rounds.len() {
            collect(&from, &to, &shared, encoder, sink, &mut scratch)?;
        }
        let mut stats = Stats::default();
        let mut versions = Vec::new();
        for (tx, rx) in to.iter().zip(&from) {
            tx.send(ToShard::Finish)
                .map_err(|_| anyhow!("an analysis shard stopped"))?;
            loop {
                match rx.recv() {
                    Ok(FromShard::Finished(out)) => {
                        write(&mut [out], &shared, encoder, sink, &mut scratch)?
                    }
                    Ok(FromShard::Done(s, first)) => {
                        stats.merge(&s);
                        versions.push((s.quic.undecoded_versions, first));
                        break;
                    }
                    Ok(FromShard::Round { .. }) | Err(_) => {
                        bail!("an analysis shard stopped")
                    }
                }
            }
        }
        stats.quic.undecoded_versions = merge_versions(&versions);
        Ok(Sharded { stats, read_error })
    })
}

/// The shards' lists of undecoded QUIC versions as one analyzer lists
/// them: values in order of first appearance in the capture, packets
/// summed, those past the cap counted as other. (Exact unless a shard's
/// own list overflowed: its later values are in its `other` only.)
fn merge_versions(shards: &[(VersionsSeen, Vec<u64>)]) -> VersionsSeen {
    let mut first: Vec<(u64, u32)> = Vec::new();
    let mut packets: HashMap<u32, u64> = HashMap::new();
    let mut other = 0;
    for (seen, at) in shards {
        for (&(v, n), &seq) in seen.values().iter().zip(at) {
            match packets.get_mut(&v) {
                Some(sum) => *sum += n,
                None => {
                    packets.insert(v, n);
                    first.push((seq, v));
                }
            }
            if let Some(f) = first.iter_mut().find(|f| f.1 == v) {
                f.0 = f.0.min(seq);
            }
        }
        other += seen.other();
    }
    first.sort_unstable();
    let mut out = VersionsSeen::default();
    for (_, v) in first {
        out.add(v, packets.get(&v).copied().unwrap_or(0));
    }
    out.add_other(other);
    out
}

/// The reading side: finds the frames, numbers them, decodes each once
/// (the analyzer's own decoder, so tunnels and VLANs land by their inner
/// connection) and puts it in its shard's list, with the idle sweeps in
/// every list. (Each shard decoded every frame to find its own before:
/// a fifth more instructions than one thread.)
struct Dispatch<'a> {
    n: usize,
    /// The next frame's number.
    seq: u64,
    /// The sweeps one analyzer would run.
    sweep: SweepClock,
    /// Batches the shards are done with, for reuse.
    pool: Vec<Batch>,
    /// The source's mapping (empty if none).
    map: &'a [u8],
    /// Where the last frame handed over from the mapping ends.
    mapped_to: usize,
}

impl Dispatch<'_> {
    /// Reads a round: until every shard could have its share, or the end.
    fn fill(&mut self, source: &mut dyn Source) -> (Result<Status>, Batch) {
        let mut batch = self.pool.pop().unwrap_or_default();
        batch.items.resize_with(self.n, Vec::new);
        let want = self.seq + (ROUND_PER_SHARD * self.n) as u64;
        let mut odd = false;
        let base = self.map.as_ptr() as usize;
        let n = self.n as u64;
        while self.seq < want {
            let polled = source.poll(std::time::Duration::ZERO, &mut |c| match c {
                Captured::Frame { ts, link, data } => {
                    let seq = self.seq;
                    self.seq += 1;
                    // Inside the mapping (not a frame the source rewrote): no copy.
                    let at = (data.as_ptr() as usize).wrapping_sub(base);
                    let mapped = at <= self.map.len() && data.len() <= self.map.len() - at;
                    let start = if mapped {
                        self.mapped_to = at + data.len();
                        at
                    } else {
                        batch.data.extend_from_slice(data);
                        batch.data.len() - data.len()
                    };
                    // `part` of the frame's bytes, `start..` of the batch's
                    // or the mapping's.
                    let item = |what, part: std::ops::Range<usize>| Item {
                        seq,
                        ts,
                        what,
                        start: start + part.start,
                        end: start + part.end,
                        mapped,
                    };
                    match wire::decode(link, data) {
                        Ok(p) => {
                            // A decoded packet's sweep runs in every shard.
                            if self.sweep.due(ts) {
                                self.sweep.swept(ts);
                                for list in &mut batch.items {
                                    list.push(item(What::Sweep, 0..0));
                                }
                            }
                            let owner = p.connection_hash() % n;
                            // The payload borrows from the frame: where in it.
                            let from = (p.payload.as_ptr() as usize)
                                .wrapping_sub(data.as_ptr() as usize)
                                .min(data.len());
                            let to = from + p.payload.len().min(data.len() - from);
                            let what = What::Packet(Packet { payload: &[], ..p });
                            if let Some(list) = batch.items.get_mut(owner as usize) {
                                list.push(item(what, from..to));
                            }
                        }
                        // Undecodable frames are only counted: any shard will do.
                        Err(e) => {
                            if let Some(list) = batch.items.get_mut((seq % n) as usize) {
                                list.push(item(What::Undecodable(e), 0..data.len()));
                            }
                        }
                    }
                }
                // Capture files hand over frames only.
                Captured::Packet { .. } => odd = true,
            });
            batch.end = self.seq;
            if odd {
                return (
                    Err(anyhow!(
                        "sharded replay reads frames, and this source hands over packets"
                    )),
                    batch,
                );
            }
            match polled {
                Ok(Status::Open) => {}
                other => return (other, batch),
            }
        }
        (Ok(Status::Open), batch)
    }

    /// Takes back a collected round's batch once no shard holds it.
    fn reuse(&mut self, round: Option<(Arc<Batch>, usize)>) {
        if let Some(mut batch) = round.and_then(|(b, _)| Arc::try_unwrap(b).ok()) {
            batch.data.clear();
            for list in &mut batch.items {
                list.clear();
            }
            self.pool.push(batch);
        }
    }
}

/// Takes the oldest round's records from every shard and writes them in
/// frame order (shard by shard within a frame).
fn collect(
    from: &[Receiver<FromShard>],
    to: &[Sender<ToShard>],
    shared: &Shared,
    encoder: Option<Encoder>,
    sink: &mut dyn RecordSink,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let mut outs = Vec::with_capacity(from.len());
    for rx in from {
        match rx.recv() {
            Ok(FromShard::Round(out)) => outs.push(out),
            _ => bail!("an analysis shard stopped"),
        }
    }
    write(&mut outs, shared, encoder, sink, scratch)?;
    for (tx, out) in to.iter().zip(outs) {
        // A shard gone has stopped for a reason the next round reports.
        let _ = tx.send(ToShard::Spare(out));
    }
    Ok(())
}

/// One shard: its analyzer over its list of each round, its own frames
/// (decoded) and the idle sweeps one analyzer runs.
fn shard(
    me: usize,
    shared: Arc<Shared>,
    map: &[u8],
    encoder: Option<Encoder>,
    make: &(dyn Fn() -> Analyzer + Sync),
    rx: Receiver<ToShard>,
    tx: Sender<FromShard>,
) {
    let _past = PastEverything(&shared, me);
    let mut analyzer = make();
    analyzer.set_session_ids(Box::new(SharedIds {
        shared: shared.clone(),
        me,
    }));
    // Answers open questions at the end of a round.
    let ids = SharedIds {
        shared: shared.clone(),
        me,
    };
    // The last round's records: entries and bytes.
    let mut sizes = (0, 0);
    // The records of the round before, sent when this one is done.
    let mut held: Option<Out> = None;
    let send_held = |held: &mut Option<Out>| match held.take() {
        Some(mut out) => {
            out.close(&ids, encoder);
            tx.send(FromShard::Round(out)).is_ok()
        }
        None => true,
    };
    // Frames where the undecoded QUIC versions list gained each value.
    let mut versions_at = Vec::new();
    // Buffers of rounds written, back from the reading thread.
    let mut spares: Vec<Out> = Vec::new();
    for msg in rx {
        match msg {
            ToShard::Spare(out) => spares.push(out),
            ToShard::Round(batch) => {
                // Room for half as much again as the last round: grown
                // from empty, its buffers were copied at each doubling (a
                // fortieth of a two-shard run's instructions).
                let mut out = spares.pop().unwrap_or_default();
                out.entries.clear();
                out.bytes.clear();
                out.open.clear();
                out.entries.reserve(sizes.0 + sizes.0 / 2);
                out.bytes.reserve(sizes.1 + sizes.1 / 2);
                let bytes_of = |item: &Item| -> &[u8] {
                    let bytes = if item.mapped { map } else { &batch.data[..] };
                    bytes.get(item.start..item.end).unwrap_or_default()
                };
                let list = batch.items.get(me).map_or(&[][..], |l| &l[..]);
                for (k, item) in list.iter().enumerate() {
                    // The list, further ahead: written on the reading
                    // thread's core, it was the loop's largest wait.
                    if let Some(ahead) = list.get(k + 4 * PREFETCH_AHEAD) {
                        prefetch_value(ahead);
                    }
                    if let Some(ahead) = list.get(k + PREFETCH_AHEAD) {
                        // The start of its payload: what the analyzer reads.
                        prefetch(bytes_of(ahead), 2);
                    }
                    shared.advance(me, item.seq);
                    let bytes = bytes_of(item);
                    match item.what {
                        What::Packet(packet) => {
                            analyzer.push_packet(
                                item.ts,
                                &Packet {
                                    payload: bytes,
                                    ..packet
                                },
                            );
                            let versions = analyzer.stats().quic.undecoded_versions.values().len();
                            versions_at.resize(versions, item.seq);
                        }
                        What::Undecodable(e) => analyzer.push_undecodable(bytes.len(), e),
                        What::Sweep => analyzer.tick(item.ts),
                    }
                    out.take(&mut analyzer, item.seq, encoder);
                }
                shared.advance(me, batch.end);
                drop(batch);
                sizes = (out.entries.len(), out.bytes.len());
                if !send_held(&mut held) {
                    return;
                }
                held = Some(out);
            }
            ToShard::Flush => {
                if !send_held(&mut held) {
                    return;
                }
            }
            ToShard::Finish => {
                shared.advance(me, DONE);
                loop {
                    let done = analyzer.finish_some(FINISH_BATCH);
                    let mut out = Out::default();
                    analyzer.with_records(|records| {
                        for r in records.drain(..) {
                            out.push(0, r, encoder);
                        }
                    });
                    out.close(&ids, encoder);
                    if tx.send(FromShard::Finished(out)).is_err() {
                        return;
                    }
                    if done {
                        break;
                    }
                }
                let _ = tx.send(FromShard::Done(
                    Box::new(analyzer.stats().clone()),
                    versions_at,
                ));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(shards: usize) -> Arc<Shared> {
        Arc::new(Shared::new(shards, 2))
    }

    /// Shard `me`'s view of the session-ID store.
    fn ids(s: &Arc<Shared>, me: usize) -> SharedIds {
        SharedIds {
            shared: s.clone(),
            me,
        }
    }

    /// An ID issued in one shard counts in another only for frames after
    /// the issuing one; the store keeps its last `cap` IDs.
    #[test]
    fn an_issued_session_id_counts_in_every_shard_from_the_next_frame() {
        let s = shared(2);
        let (mut a, b) = (ids(&s, 0), ids(&s, 1));
        s.progress[0].0.store(5, Ordering::Release);
        a.issued(42);
        s.progress[0].0.store(DONE, Ordering::Release);
        s.progress[1].0.store(5, Ordering::Release);
        assert!(!b.was_issued(42), "the same frame: not earlier");
        s.progress[1].0.store(6, Ordering::Release);
        assert!(b.was_issued(42));
        assert!(!b.was_issued(43));
        for id in [1, 2] {
            a.issued(id);
        }
        assert!(!b.was_issued(42), "the oldest of three went (cap 2)");
    }

    /// A shard asking about frame 10 waits for a shard still at frame 4,
    /// which issues the ID at frame 6: the answer one analyzer gives.
    #[test]
    fn a_shard_waits_for_a_slower_one_before_answering() {
        let s = shared(2);
        let b = SharedIds {
            shared: s.clone(),
            me: 1,
        };
        s.progress[0].0.store(4, Ordering::Release);
        s.progress[1].0.store(10, Ordering::Release);
        let slow = {
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                let mut a = SharedIds { shared: s, me: 0 };
                a.shared.advance(0, 6);
                a.issued(7);
                a.shared.advance(0, 11);
            })
        };
        assert!(b.was_issued(7));
        slow.join().unwrap();
    }

    /// A record's question is answered at once when the store already
    /// knows, or when every other shard is past its frame; otherwise left
    /// open, for the reading thread, without waiting.
    #[test]
    fn an_answer_not_known_yet_is_left_open() {
        let s = shared(2);
        let (mut a, b) = (ids(&s, 0), ids(&s, 1));
        s.progress[0].0.store(4, Ordering::Release);
        s.progress[1].0.store(10, Ordering::Release);
        assert_eq!(b.answer(7, 10), None, "shard 0 may still issue it");
        assert_eq!(b.answer(7, 4), Some(false), "shard 0 is past frame 4");
        s.advance(0, 6);
        a.issued(7);
        assert_eq!(b.answer(7, 10), Some(true), "issued at 6, before 10");
        assert_eq!(b.answer(8, 10), None);
        s.advance(0, 11);
        assert_eq!(b.answer(8, 10), Some(false));
    }
}
