//! Flow-sharded replay (`tlsrum replay --threads N`): this thread reads the
//! capture, decodes each frame once (the analyzer's own decoder, so
//! tunnels and VLANs land by their inner connection), picks its shard by
//! its connection ([`Packet::connection_hash`]) and puts it in that shard's
//! list of the round. N shards, each with its own [`Analyzer`], analyze
//! their lists; N threads run them, this one included: any thread may run
//! any shard's next round (one thread at a time, a shard's rounds in
//! order, the shard furthest behind first), and this thread runs one
//! whenever it has read [`AHEAD`] rounds past the slowest shard. (A thread
//! per shard besides the reading one, 3 threads on 2 cores, left both
//! cores idle a fifth of the time and got 1.3-1.5x one thread; now
//! 1.5-1.7x, bench/README.md.)
//! A frame travels as its place in the capture's mapping when the source
//! has one ([`Source::mapping`], a plain file; the source then keeps the
//! pages from the first round a shard is still in), else copied into the
//! round, with its decoded packet beside it. (Decoding here once, rather
//! than in every shard to find its own, took a third off what two shards
//! cost over one thread: +14 % instructions, was +21 %. The shards
//! prefetch their lists and frames, which another core may have written
//! and touched last.)
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
//!   for another (a thread waiting inside a shard would hold it).
//! - Counters are summed. `--max-flows`, `--max-memory` and the tombstones
//!   of ended connections are split evenly among the shards: the totals
//!   hold, but which flow is evicted when they bind can differ from one
//!   thread.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use analyzer::handshake::Issued;
use analyzer::quic::version::VersionsSeen;
use analyzer::record::ConnectionRecord;
use analyzer::wire::{self, DecodeError, Packet};
use analyzer::{Analyzer, SessionIds, Stats, SweepClock};
use anyhow::{anyhow, bail, Result};

use crate::sink::{Encoder, RecordSink};
use crate::source::{
    populate_next, prefetch_at, prefetch_value, release_before, Captured, Mapping, Source, Status,
};

/// Frames per shard in one round: every shard gets one batch per round,
/// so that each knows how far the capture has gone.
const ROUND_PER_SHARD: usize = 2048;

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
    ids: Mutex<IdStore>,
}

impl Shared {
    fn new(shards: usize, max_session_ids: usize) -> Self {
        Shared {
            progress: (0..shards).map(|_| Progress(AtomicU64::new(0))).collect(),
            ids: Mutex::new(IdStore {
                first: HashMap::default(),
                order: VecDeque::new(),
                cap: max_session_ids.max(1),
            }),
        }
    }

    /// Shard `me` processed every frame below `seq`. Called per frame:
    /// one store, no fence, and nobody to wake (a waiter looks again).
    fn advance(&self, me: usize, seq: u64) {
        if let Some(p) = self.progress.get(me) {
            p.0.store(seq, Ordering::Release);
        }
    }

    /// Blocks until shard `i` is past frame `q`, looking every 100 µs.
    /// Nothing in the analyzer waits (see `SessionIds::ask`); this keeps
    /// [`SessionIds::was_issued`] right for a caller that does.
    fn wait_past(&self, i: usize, q: u64) {
        let Some(p) = self.progress.get(i) else {
            return;
        };
        // A shard close behind passes q in a moment: cheaper than sleeping.
        for _ in 0..64 {
            if p.0.load(Ordering::Acquire) >= q {
                return;
            }
            std::hint::spin_loop();
        }
        while p.0.load(Ordering::Acquire) < q {
            std::thread::sleep(std::time::Duration::from_micros(100));
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
    /// reading thread settles it ([`write()`]): no shard waits for another.
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

/// What a sharded replay of one capture gives back.
pub struct Sharded {
    pub stats: Stats,
    /// Reading the capture failed after this many frames (what was read
    /// is analyzed and its records written).
    pub read_error: Option<anyhow::Error>,
}

/// Rounds the reading thread reads ahead of the shard furthest behind
/// before it analyzes: the other threads have that much to do meanwhile.
const AHEAD: u64 = 2;

/// Rounds it reads ahead at most, when every shard behind is being
/// analyzed by another thread (the rounds' lists and pages are held).
const DEPTH: u64 = 8;

/// How far past the newest round's start an idle thread maps the file in:
/// a few rounds of big frames (a round of two shards is ~3 MB of them).
const POPULATE_AHEAD: usize = 16 << 20;

/// One shard in the pool.
struct Slot<'a> {
    /// Its analysis, held by the thread running its next round; taken
    /// when its flows are finished.
    worker: Mutex<Option<Worker<'a>>>,
    /// Rounds it has done.
    done: AtomicU64,
    outs: Mutex<Outs>,
}

/// A shard's records not written yet, and what it is done with.
#[derive(Default)]
struct Outs {
    /// The records of each round done and not collected (the last one's
    /// come when the next is done, or at the flush), oldest first; at the
    /// end, the records of its flows finished.
    ready: VecDeque<Out>,
    /// Buffers of rounds written, for its next rounds.
    spares: Vec<Out>,
    /// Its flows finished: its counters, and the frame where each value of
    /// its undecoded QUIC versions list first appeared.
    finished: Option<(Box<Stats>, Vec<u64>)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Rounds come.
    Reading,
    /// Every round is analyzed and written: shards finish their flows.
    Finishing,
    /// Done, or the reading thread stopped: every thread leaves.
    Stopped,
}

/// The rounds handed out and not collected yet.
struct Queue {
    /// The number of `rounds[0]`.
    first: u64,
    /// Each round and where it starts in the mapping.
    rounds: VecDeque<(Arc<Batch>, usize)>,
    phase: Phase,
    /// Moves whenever there may be something new to do: a round came, a
    /// shard did one, a shard finished, a phase began.
    epoch: u64,
    /// Threads asleep until it moves: no wake-up call (a system call)
    /// when none is.
    asleep: usize,
}

/// The shards and the rounds, shared by every thread.
struct Pool<'a> {
    slots: Vec<Slot<'a>>,
    /// The source's mapping, which an idle thread maps in ahead of the
    /// reading one and gives back behind the shards
    /// ([`Pool::populate_ahead`], [`Pool::release_behind`]).
    mapping: Option<&'a Mapping>,
    queue: Mutex<Queue>,
    changed: Condvar,
    /// Rounds handed out: `queue`'s first plus its length.
    published: AtomicU64,
    /// Shards whose flows a thread has taken to finish.
    claimed: AtomicUsize,
    /// A thread panicked.
    failed: AtomicBool,
}

/// Locks `m` even if a panicking thread held it (that thread's panic is
/// reported: [`Pool::failed`]).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> Pool<'a> {
    fn epoch(&self) -> u64 {
        lock(&self.queue).epoch
    }

    fn phase(&self) -> Phase {
        lock(&self.queue).phase
    }

    /// Something may be new: wakes the threads waiting.
    fn bump(&self) {
        let mut q = lock(&self.queue);
        q.epoch += 1;
        self.wake(q);
    }

    /// Wakes the threads asleep, if any.
    fn wake(&self, q: std::sync::MutexGuard<'_, Queue>) {
        let asleep = q.asleep > 0;
        drop(q);
        if asleep {
            self.changed.notify_all();
        }
    }

    fn set_phase(&self, phase: Phase) {
        let mut q = lock(&self.queue);
        q.phase = phase;
        q.epoch += 1;
        self.wake(q);
    }

    /// Sleeps until the epoch moves past `seen`.
    fn wait(&self, seen: u64) {
        let mut q = lock(&self.queue);
        while q.epoch == seen {
            q.asleep += 1;
            q = self.changed.wait(q).unwrap_or_else(|e| e.into_inner());
            q.asleep -= 1;
        }
    }

    fn check(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            bail!("an analysis thread stopped");
        }
        Ok(())
    }

    /// Rounds done by the shard furthest behind.
    fn slowest(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.done.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    fn publish(&self, batch: Arc<Batch>, start: usize) {
        let mut q = lock(&self.queue);
        q.rounds.push_back((batch, start));
        self.published
            .store(q.first + q.rounds.len() as u64, Ordering::Release);
        q.epoch += 1;
        self.wake(q);
    }

    /// Runs the next round of the shard furthest behind that no other
    /// thread is running; false if there was none to run.
    fn work(&self, order: &mut Vec<(u64, usize)>) -> Result<bool> {
        self.check()?;
        let published = self.published.load(Ordering::Acquire);
        order.clear();
        order.extend(
            self.slots
                .iter()
                .enumerate()
                .map(|(k, s)| (s.done.load(Ordering::Acquire), k))
                .filter(|&(done, _)| done < published),
        );
        order.sort_unstable();
        for &(_, k) in order.iter() {
            let slot = &self.slots[k];
            let mut guard = match slot.worker.try_lock() {
                Ok(guard) => guard,
                Err(std::sync::TryLockError::WouldBlock) => continue,
                Err(std::sync::TryLockError::Poisoned(_)) => bail!("an analysis thread stopped"),
            };
            let Some(worker) = guard.as_mut() else {
                continue;
            };
            // Read again: another thread may have run it meanwhile.
            let r = slot.done.load(Ordering::Acquire);
            if r >= published {
                continue;
            }
            let batch = {
                let q = lock(&self.queue);
                q.rounds.get((r - q.first) as usize).map(|(b, _)| b.clone())
            };
            let Some(batch) = batch else {
                continue;
            };
            worker.spares.append(&mut lock(&slot.outs).spares);
            let last = worker.round(&batch);
            drop(batch);
            // Before another thread can run its next round (and give out
            // this round's records).
            if let Some(out) = last {
                lock(&slot.outs).ready.push_back(out);
            }
            slot.done.store(r + 1, Ordering::Release);
            drop(guard);
            self.bump();
            return Ok(true);
        }
        Ok(false)
    }

    /// The oldest round, if every shard has given its records: each
    /// shard's, in shard order, and the round's batch to reuse.
    fn collect(&self, flushed: bool) -> Option<(Vec<Out>, Arc<Batch>)> {
        let first = lock(&self.queue).first;
        // A round's records come when the next is done, or at the flush.
        if !flushed && self.slowest() < first + 2 {
            return None;
        }
        if !self.slots.iter().all(|s| !lock(&s.outs).ready.is_empty()) {
            return None;
        }
        let outs = self
            .slots
            .iter()
            .map(|s| lock(&s.outs).ready.pop_front().unwrap_or_default())
            .collect();
        let mut q = lock(&self.queue);
        let (batch, _) = q.rounds.pop_front()?;
        q.first += 1;
        Some((outs, batch))
    }

    /// Gives a round's buffers back to their shards once written.
    fn give_back(&self, outs: Vec<Out>) {
        for (slot, out) in self.slots.iter().zip(outs) {
            lock(&slot.outs).spares.push(out);
        }
    }

    /// The pages from the first round a shard is still in, else from
    /// `end` on.
    fn keep(&self, end: usize) -> usize {
        let passed = self.slowest();
        let q = lock(&self.queue);
        let from = passed.saturating_sub(q.first) as usize;
        q.rounds.get(from).map_or(end, |(_, start)| *start)
    }

    /// Maps in a chunk of the file ahead of the newest round, if the
    /// reading thread has not yet; false if there was none to map. On a
    /// capture of bulk traffic the analysis is light and the reading
    /// thread, mapping the file in as it reads, was the one busy.
    fn populate_ahead(&self) -> bool {
        let Some(m) = self.mapping else {
            return false;
        };
        let newest = lock(&self.queue)
            .rounds
            .back()
            .map_or(0, |(_, start)| *start);
        populate_next(&m.bytes, &m.populated, newest + POPULATE_AHEAD)
    }

    /// Gives back the pages before the source's `keep` (every shard is
    /// past them), if the reading thread has not yet; false if none.
    fn release_behind(&self) -> bool {
        let Some(m) = self.mapping else {
            return false;
        };
        release_before(&m.bytes, &m.released, m.keep.load(Ordering::Acquire))
    }

    /// Finishes the flows of a shard no thread has taken yet; false if
    /// every one is taken.
    fn finish_one(&self) -> bool {
        let k = self.claimed.fetch_add(1, Ordering::AcqRel);
        let Some(slot) = self.slots.get(k) else {
            return false;
        };
        let worker = lock(&slot.worker).take();
        let finished = worker.map(|w| {
            w.finish(&mut |out| {
                lock(&slot.outs).ready.push_back(out);
                self.bump();
            })
        });
        lock(&slot.outs).finished = Some(finished.unwrap_or_default());
        self.bump();
        true
    }
}

/// Marks the pool failed when a thread running it panics, and wakes
/// every thread, so that none waits for it.
struct FailGuard<'p, 'a>(&'p Pool<'a>);

impl Drop for FailGuard<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Release);
            self.0.bump();
        }
    }
}

/// Stops every thread when the reading thread leaves, also by an error.
struct StopGuard<'p, 'a>(&'p Pool<'a>);

impl Drop for StopGuard<'_, '_> {
    fn drop(&mut self) {
        self.0.set_phase(Phase::Stopped);
    }
}

/// A thread besides the reading one: runs rounds while there are any,
/// then finishes shards' flows.
fn helper(pool: &Pool<'_>) {
    let _fail = FailGuard(pool);
    let mut order = Vec::new();
    loop {
        let seen = pool.epoch();
        match pool.work(&mut order) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(_) => return,
        }
        match pool.phase() {
            Phase::Reading => {
                if pool.populate_ahead() || pool.release_behind() {
                    continue;
                }
            }
            Phase::Finishing => {
                while pool.finish_one() {}
                return;
            }
            Phase::Stopped => return,
        }
        pool.wait(seen);
    }
}

/// Replays `source` on `threads` shards made by `make` (each is handed the
/// shared session-ID store) and as many threads, this one reading;
/// records go to `sink` in the order one analyzer gives; `progress` is
/// told the frames read after each round.
pub fn replay(
    source: &mut dyn Source,
    threads: usize,
    max_session_ids: usize,
    make: &(dyn Fn() -> Analyzer + Sync),
    sink: &mut dyn RecordSink,
    progress: &mut dyn FnMut(u64),
) -> Result<Sharded> {
    let threads = threads.max(1);
    let n = threads;
    let shared = Arc::new(Shared::new(n, max_session_ids));
    // Frames inside the source's mapping are handed over as places in it.
    let mapping = source.mapping();
    let map: &[u8] = mapping.as_ref().map_or(&[], |m| &m.bytes[..]);
    let encoder = sink.encoder();
    let pool = Pool {
        mapping: mapping.as_ref(),
        slots: (0..n)
            .map(|me| Slot {
                worker: Mutex::new(Some(Worker::new(me, shared.clone(), map, encoder, make))),
                done: AtomicU64::new(0),
                outs: Mutex::new(Outs::default()),
            })
            .collect(),
        queue: Mutex::new(Queue {
            first: 0,
            rounds: VecDeque::new(),
            phase: Phase::Reading,
            epoch: 0,
            asleep: 0,
        }),
        changed: Condvar::new(),
        published: AtomicU64::new(0),
        claimed: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
    };
    let pool = &pool;
    std::thread::scope(|scope| {
        for t in 1..threads {
            std::thread::Builder::new()
                .name(format!("tlsrum-shard-{t}"))
                .spawn_scoped(scope, move || helper(pool))?;
        }
        let _stop = StopGuard(pool);
        let _fail = FailGuard(pool);
        let mut dispatch = Dispatch {
            n,
            seq: 0,
            sweep: SweepClock::default(),
            batches: Vec::new(),
            map,
            mapped_to: 0,
        };
        let mut order = Vec::new();
        let mut read_error = None;
        // The records' bytes of a round, in order.
        let mut scratch = Vec::new();
        // Writes every round whose records every shard has given.
        let write_ready = |flushed: bool,
                           dispatch: &mut Dispatch,
                           sink: &mut dyn RecordSink,
                           scratch: &mut Vec<u8>|
         -> Result<()> {
            while let Some((mut outs, batch)) = pool.collect(flushed) {
                write(&mut outs, &shared, encoder, sink, scratch)?;
                pool.give_back(outs);
                dispatch.reuse(batch);
            }
            Ok(())
        };
        loop {
            let start = dispatch.mapped_to;
            let (status, batch) = dispatch.fill(source);
            pool.publish(Arc::new(batch), start);
            let published = pool.published.load(Ordering::Acquire);
            // Analyze while the shards are behind; read on if every one
            // behind is being analyzed, up to DEPTH rounds ahead.
            loop {
                // The epoch before the progress it waits on is looked at:
                // a round done in between moves it, so the wait returns.
                let seen = pool.epoch();
                let behind = published - pool.slowest().min(published);
                if behind <= AHEAD {
                    break;
                }
                if pool.work(&mut order)? {
                    continue;
                }
                // Every shard behind is taken: read on (waiting here spun
                // this core on the queue's lock for nothing), unless that
                // would be too far ahead.
                if behind <= DEPTH {
                    break;
                }
                pool.wait(seen);
                pool.check()?;
            }
            write_ready(false, &mut dispatch, sink, &mut scratch)?;
            if let Some(m) = &mapping {
                m.keep
                    .store(pool.keep(dispatch.mapped_to), Ordering::Release);
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
        // The rounds left, then their records.
        let published = pool.published.load(Ordering::Acquire);
        loop {
            // As above: read after the epoch, or the last round, done by
            // another thread between the two, would leave this one waiting
            // for a wake-up that never comes (seen: 2 hangs in 4,500
            // replays of a one-round capture).
            let seen = pool.epoch();
            if pool.slowest() >= published {
                break;
            }
            if !pool.work(&mut order)? {
                pool.wait(seen);
                pool.check()?;
            }
        }
        for slot in &pool.slots {
            let last = lock(&slot.worker).as_mut().and_then(Worker::flush);
            lock(&slot.outs).ready.extend(last);
        }
        write_ready(true, &mut dispatch, sink, &mut scratch)?;
        pool.set_phase(Phase::Finishing);
        // Every shard's flows finished (each thread takes shards in
        // turn), written shard by shard.
        let mut stats = Stats::default();
        let mut versions = Vec::new();
        for slot in &pool.slots {
            loop {
                let seen = pool.epoch();
                let (out, finished) = {
                    let mut outs = lock(&slot.outs);
                    let out = outs.ready.pop_front();
                    let finished = if out.is_none() {
                        outs.finished.take()
                    } else {
                        None
                    };
                    (out, finished)
                };
                if let Some(out) = out {
                    write(&mut [out], &shared, encoder, sink, &mut scratch)?;
                    continue;
                }
                if let Some((s, first)) = finished {
                    stats.merge(&s);
                    versions.push((s.quic.undecoded_versions, first));
                    break;
                }
                pool.check()?;
                if !pool.finish_one() {
                    pool.wait(seen);
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
    /// Shards.
    n: usize,
    /// The next frame's number.
    seq: u64,
    /// The sweeps one analyzer would run.
    sweep: SweepClock,
    /// Batches the shards are done with, for reuse.
    batches: Vec<Batch>,
    /// The source's mapping (empty if none).
    map: &'a [u8],
    /// Where the last frame handed over from the mapping ends.
    mapped_to: usize,
}

impl Dispatch<'_> {
    /// Reads a round: until every shard could have its share, or the end.
    fn fill(&mut self, source: &mut dyn Source) -> (Result<Status>, Batch) {
        let mut batch = self.batches.pop().unwrap_or_default();
        let n = self.n;
        batch.items.resize_with(n, Vec::new);
        // Room for a shard's usual share and then some: grown by doubling
        // from empty, a new batch's lists were copied ten times each.
        for list in &mut batch.items {
            list.reserve(ROUND_PER_SHARD + ROUND_PER_SHARD / 4);
        }
        let want = self.seq + (ROUND_PER_SHARD * n) as u64;
        // The shard of a hash: hash % n, a mask when n is a power of two
        // (the same shard; a 64-bit division was the loop's largest stall).
        let mask = (n as u64).is_power_of_two().then(|| n as u64 - 1);
        let shard_of = |h: u64| mask.map_or_else(|| h % n as u64, |m| h & m) as usize;
        let mut odd = false;
        let base = self.map.as_ptr() as usize;
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
                    match &wire::decode(*link, data) {
                        Ok(p) => {
                            // A decoded packet's sweep runs in every shard.
                            if self.sweep.due(ts) {
                                self.sweep.swept(ts);
                                for list in &mut batch.items {
                                    list.push(item(What::Sweep, 0..0));
                                }
                            }
                            let owner = shard_of(p.connection_hash());
                            // The payload borrows from the frame: where in it.
                            let from = (p.payload.as_ptr() as usize)
                                .wrapping_sub(data.as_ptr() as usize)
                                .min(data.len());
                            let to = from + p.payload.len().min(data.len() - from);
                            if let Some(list) = batch.items.get_mut(owner) {
                                // Built in its place: each move of an item
                                // was ~40 instructions a frame.
                                list.push(Item {
                                    seq,
                                    ts,
                                    what: What::Packet(Packet {
                                        src: p.src,
                                        dst: p.dst,
                                        transport: p.transport,
                                        payload: &[],
                                        truncated: p.truncated,
                                        seen_before: p.seen_before,
                                    }),
                                    start: start + from,
                                    end: start + to,
                                    mapped,
                                });
                            }
                        }
                        // Undecodable frames are only counted: any shard will do.
                        Err(e) => {
                            if let Some(list) = batch.items.get_mut(shard_of(seq)) {
                                list.push(item(What::Undecodable(*e), 0..data.len()));
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
    fn reuse(&mut self, round: Arc<Batch>) {
        if let Ok(mut batch) = Arc::try_unwrap(round) {
            batch.data.clear();
            for list in &mut batch.items {
                list.clear();
            }
            self.batches.push(batch);
        }
    }
}

/// One shard's analysis: its analyzer over its list of each round, its
/// own frames (decoded) and the idle sweeps one analyzer runs. Run by a
/// [`Pool`]'s threads, whichever takes its next round.
struct Worker<'a> {
    me: usize,
    shared: Arc<Shared>,
    map: &'a [u8],
    encoder: Option<Encoder>,
    analyzer: Analyzer,
    /// Answers open questions at the end of a round.
    ids: SharedIds,
    /// The last round's records: entries and bytes.
    sizes: (usize, usize),
    /// The records of the round before, given out when this one is done.
    held: Option<Out>,
    /// Frames where the undecoded QUIC versions list gained each value.
    versions_at: Vec<u64>,
    /// Buffers of rounds written, for the next rounds.
    spares: Vec<Out>,
}

impl<'a> Worker<'a> {
    fn new(
        me: usize,
        shared: Arc<Shared>,
        map: &'a [u8],
        encoder: Option<Encoder>,
        make: &(dyn Fn() -> Analyzer + Sync),
    ) -> Self {
        let mut analyzer = make();
        analyzer.set_session_ids(Box::new(SharedIds {
            shared: shared.clone(),
            me,
        }));
        let ids = SharedIds {
            shared: shared.clone(),
            me,
        };
        Worker {
            me,
            shared,
            map,
            encoder,
            analyzer,
            ids,
            sizes: (0, 0),
            held: None,
            versions_at: Vec::new(),
            spares: Vec::new(),
        }
    }

    /// Analyzes this shard's list of `batch`; the records of the round
    /// before, their open questions settled where they now can be.
    fn round(&mut self, batch: &Batch) -> Option<Out> {
        let (me, map, encoder) = (self.me, self.map, self.encoder);
        let (shared, analyzer) = (&*self.shared, &mut self.analyzer);
        // Room for half as much again as the last round: grown from
        // empty, its buffers were copied at each doubling (a fortieth of
        // a two-shard run's instructions).
        let mut out = self.spares.pop().unwrap_or_default();
        out.entries.clear();
        out.bytes.clear();
        out.open.clear();
        out.entries.reserve(self.sizes.0 + self.sizes.0 / 2);
        out.bytes.reserve(self.sizes.1 + self.sizes.1 / 2);
        let bytes_of = |item: &Item| -> &[u8] {
            let bytes = if item.mapped { map } else { &batch.data[..] };
            bytes.get(item.start..item.end).unwrap_or_default()
        };
        let list = batch.items.get(me).map_or(&[][..], |l| &l[..]);
        for (k, item) in list.iter().enumerate() {
            // The list, further ahead: written on the reading thread's
            // core (when another runs it), it was the loop's largest wait.
            if let Some(ahead) = list.get(k + 4 * PREFETCH_AHEAD) {
                prefetch_value(ahead);
            }
            if let Some(ahead) = list.get(k + PREFETCH_AHEAD) {
                // The start of its payload, what the analyzer reads: where
                // it is, unchecked (a hint), without `bytes_of`'s bounds.
                let base = if ahead.mapped { map } else { &batch.data[..] };
                prefetch_at(base.as_ptr(), ahead.start);
                prefetch_at(base.as_ptr(), ahead.start + 64);
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
                    self.versions_at.resize(versions, item.seq);
                }
                What::Undecodable(e) => analyzer.push_undecodable(bytes.len(), e),
                What::Sweep => analyzer.tick(item.ts),
            }
            out.take(analyzer, item.seq, encoder);
        }
        shared.advance(me, batch.end);
        self.sizes = (out.entries.len(), out.bytes.len());
        let last = self.flush();
        self.held = Some(out);
        last
    }

    /// The records of the last round done, if not given out yet.
    fn flush(&mut self) -> Option<Out> {
        let mut out = self.held.take()?;
        out.close(&self.ids, self.encoder);
        Some(out)
    }

    /// End of input: finishes every flow, its records a batch at a time
    /// to `emit`; its counters, and the frame where each value of its
    /// undecoded QUIC versions list first appeared.
    fn finish(mut self, emit: &mut dyn FnMut(Out)) -> (Box<Stats>, Vec<u64>) {
        self.shared.advance(self.me, DONE);
        loop {
            let done = self.analyzer.finish_some(FINISH_BATCH);
            let mut out = Out::default();
            let encoder = self.encoder;
            self.analyzer.with_records(|records| {
                for r in records.drain(..) {
                    out.push(0, r, encoder);
                }
            });
            out.close(&self.ids, self.encoder);
            emit(out);
            if done {
                break;
            }
        }
        (Box::new(self.analyzer.stats().clone()), self.versions_at)
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
