//! In-order delivery of one TCP direction's bytes, despite reordering,
//! retransmission and overlap (after smoltcp's `Assembler`: bounded holes).
//! Out-of-order segments wait in a small buffer with caps on bytes and
//! segments. A hole the capture never fills is skipped -- when the peer
//! acknowledges past it ([`Reassembler::acked`]), when waiting behind it
//! would break a cap (the push says so), or when the caller gives up on it
//! ([`Reassembler::skip_hole`], at the end of a flow) -- and the bytes after
//! it are delivered: a chunk that does not continue the previous one tells
//! the layer above (the TLS record layer resynchronises) what was lost. A
//! segment cut short by the capture (snap length) delivers the bytes it has:
//! the rest is such a hole.

use std::collections::VecDeque;

use crate::memory::{HeapSize, ALLOC_OVERHEAD};
pub use crate::seq::seq_diff;

/// Default cap on out-of-order bytes held per direction.
pub const DEFAULT_MAX_BUFFERED: usize = 256 * 1024;

/// Out-of-order segments held per direction at most: each costs a
/// bookkeeping entry, so their number is bounded like smoltcp's
/// `Assembler` contigs, not only their bytes. Kept in order, they cost a
/// binary search to queue and nothing to find. A flight cut into tiny
/// shuffled pieces (agent/tests/resegment.rs: 1..=7 bytes) needs hundreds.
pub const MAX_PENDING_SEGMENTS: usize = 2048;

/// Bytes kept of each direction's stream once its flow is identified as
/// TLS (from the ClientHello's segment on: where the hellos are), to compare
/// retransmissions of them with what was delivered.
pub const KEPT_PREFIX: usize = 2048;

/// A TCP segment's payload and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    pub seq: u32,
    pub data: &'a [u8],
    pub ts: f64,
    pub ack: Option<u32>,
}

#[derive(Debug)]
struct Pending {
    seq: u32,
    data: Vec<u8>,
    ts: f64,
    ack: Option<u32>,
    /// Arrival order among the waiting segments.
    arrival: u64,
    /// The capture cut the segment short: bytes after `data` are missing.
    cut: bool,
}

/// What one push did, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PushOutcome {
    /// Bytes already delivered that arrived again (retransmission/overlap).
    pub duplicate_bytes: usize,
    /// The segment was held for later.
    pub queued: bool,
    /// Holes given up on because waiting behind them would break a cap
    /// (bytes or segments): the stream went on after them.
    pub skipped_holes: u32,
    /// The bytes of those holes, lost to the capture.
    pub skipped_bytes: usize,
    /// A hole was given up on because [`MAX_PENDING_SEGMENTS`] were waiting.
    pub hole_limit: bool,
    /// Sequence number of the first byte of this push that arrived again
    /// with other contents than the copy already delivered (within the
    /// kept prefix): a corrupted or forged copy, one of them.
    pub conflict: Option<u32>,
}

/// A bytes chunk in stream order, with where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub data: &'a [u8],
    pub seq: u32,
    pub ts: f64,
    pub ack: Option<u32>,
}

#[derive(Debug)]
pub struct Reassembler {
    /// The first delivered byte's sequence number.
    first: Option<u32>,
    /// Keep delivered bytes (set by [`keep_from`](Self::keep_from)): at
    /// most [`KEPT_PREFIX`] of them, from `kept_at` on.
    keep: bool,
    kept_at: Option<u32>,
    kept: Vec<u8>,
    /// How much of the stream is kept: its first record, at most [`KEPT_PREFIX`].
    kept_cap: u16,
    next: Option<u32>,
    /// Waiting segments, in sequence order (so delivery takes the front).
    pending: VecDeque<Pending>,
    buffered: usize,
    max_buffered: usize,
    /// The last bytes delivered were a segment cut short by the capture:
    /// bytes after `next` are missing, until more arrive or a hole is skipped.
    cut: bool,
    delivered: bool,
    /// Segments queued so far (their arrival order).
    arrivals: u64,
}

impl HeapSize for Reassembler {
    fn heap_size(&self) -> usize {
        // Queued segments: each its own allocation.
        let queued = self.buffered + self.pending.len() * ALLOC_OVERHEAD;
        self.kept.heap_size() + queued + self.pending.capacity() * std::mem::size_of::<Pending>()
    }
}

impl Reassembler {
    pub fn new(max_buffered: usize) -> Self {
        Reassembler {
            first: None,
            keep: false,
            kept_at: None,
            kept: Vec::new(),
            kept_cap: KEPT_PREFIX as u16,
            next: None,
            pending: VecDeque::new(),
            buffered: 0,
            max_buffered,
            cut: false,
            delivered: false,
            arrivals: 0,
        }
    }

    /// Sets the first sequence number of the byte stream (ISN + 1 from a SYN).
    pub fn start_at(&mut self, seq: u32) {
        if self.next.is_none() {
            self.next = Some(seq);
        }
    }

    /// A later SYN or SYN-ACK with another ISN (a retry, or a middlebox's
    /// second answer) restarts the stream if no byte was delivered yet.
    pub fn restart_at(&mut self, seq: u32) {
        if !self.delivered && self.pending.is_empty() {
            self.next = Some(seq);
        }
    }

    /// The sequence number of the next byte to deliver.
    pub fn next_seq(&self) -> Option<u32> {
        self.next
    }

    /// The stream ends, for now, where the capture cut a segment short.
    pub fn cut_short(&self) -> bool {
        self.cut
    }

    /// Segments waiting behind a hole.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Adds a segment; calls `out` with every run of bytes that became
    /// contiguous. `truncated`: the capture cut the segment short, so bytes
    /// after its `data` are missing.
    pub fn push(
        &mut self,
        // By reference: a by-value copy of the segment the caller had just
        // built was a store-forwarding stall, a quarter of its caller's time.
        seg: &Segment<'_>,
        truncated: bool,
        out: &mut dyn FnMut(Chunk<'_>),
    ) -> PushOutcome {
        let mut outcome = PushOutcome::default();
        if seg.data.is_empty() {
            return outcome;
        }
        let mut next = *self.next.get_or_insert(seg.seq);
        let mut d = seq_diff(seg.seq, next);
        if d > 0 {
            if self
                .pending
                .iter()
                .any(|p| p.seq == seg.seq && p.data.len() >= seg.data.len())
            {
                // A copy of a segment already waiting.
                outcome.duplicate_bytes = seg.data.len();
                return outcome;
            }
            // Waiting for the hole to fill must not break the caps: give up
            // on holes, first one first, until the segment fits or is next.
            while d > 0
                && (self.pending.len() >= MAX_PENDING_SEGMENTS
                    || self.buffered + seg.data.len() > self.max_buffered)
            {
                outcome.hole_limit |= self.pending.len() >= MAX_PENDING_SEGMENTS;
                let lost = match self.skip_first_hole(out, &mut outcome) {
                    Some((_, n)) => n,
                    None => {
                        // Nothing waits, and the segment alone is over the
                        // cap: the hole is the one before it.
                        self.next = Some(seg.seq);
                        self.delivered = true;
                        self.cut = false;
                        d as usize
                    }
                };
                outcome.skipped_holes += 1;
                outcome.skipped_bytes += lost;
                next = self.next.unwrap_or(seg.seq);
                d = seq_diff(seg.seq, next);
            }
        }
        if d > 0 {
            self.buffered += seg.data.len();
            // After those that start before or with it: sequence order,
            // then arrival order.
            let at = self
                .pending
                .partition_point(|p| seq_diff(p.seq, seg.seq) <= 0);
            self.arrivals += 1;
            self.pending.insert(
                at,
                Pending {
                    seq: seg.seq,
                    data: seg.data.to_vec(),
                    ts: seg.ts,
                    ack: seg.ack,
                    arrival: self.arrivals,
                    cut: truncated,
                },
            );
            outcome.queued = true;
            return outcome;
        }
        let skip = (-d) as usize;
        if skip > 0 {
            outcome.conflict = self.differs(seg.seq, &seg.data[..skip.min(seg.data.len())]);
        }
        if skip >= seg.data.len() {
            outcome.duplicate_bytes += seg.data.len();
            return outcome;
        }
        outcome.duplicate_bytes += skip;
        let fresh = &seg.data[skip..];
        self.deliver(
            Chunk {
                data: fresh,
                seq: next,
                ts: seg.ts,
                ack: seg.ack,
            },
            truncated,
            out,
        );
        self.drain(out, &mut outcome);
        outcome
    }

    /// Gives up on the hole in front of the first waiting segment (the
    /// capture will not fill it: the flow is ending) and delivers what can
    /// be delivered after it. Returns `(first lost seq, lost bytes)`, or
    /// None if nothing waits.
    pub fn skip_hole(&mut self, out: &mut dyn FnMut(Chunk<'_>)) -> Option<(u32, usize)> {
        self.skip_first_hole(out, &mut PushOutcome::default())
    }

    fn skip_first_hole(
        &mut self,
        out: &mut dyn FnMut(Chunk<'_>),
        outcome: &mut PushOutcome,
    ) -> Option<(u32, usize)> {
        let next = self.next?;
        let first = self.pending.front()?.seq;
        // Waiting segments all start after `next` (drain took the others).
        let n = seq_diff(first, next).max(0) as usize;
        self.next = Some(first);
        self.delivered = true;
        self.cut = false;
        self.drain(out, outcome);
        Some((next, n))
    }

    /// The peer acknowledged `ack`: bytes before it that were never seen were
    /// lost by the capture, not the network (the receiver got them). Skips
    /// them, delivers what waited behind the hole, and returns
    /// `(first lost seq, lost bytes)` for the record layer to resynchronise.
    pub fn acked(&mut self, ack: u32, out: &mut dyn FnMut(Chunk<'_>)) -> Option<(u32, usize)> {
        let next = self.next?;
        let mut lost = seq_diff(ack, next);
        // A FIN takes one sequence number; so may a FIN the capture missed.
        if lost == 1 && self.pending.is_empty() {
            lost = 0;
        }
        // Only holes of plausible size; a wild ACK is not evidence.
        if lost <= 0 || lost > self.max_buffered as i64 * 4 {
            return None;
        }
        // The hole ends at the ACK or at the first queued byte, whichever is first.
        let hole_end = self
            .pending
            .iter()
            .map(|p| p.seq)
            .filter(|&s| seq_diff(s, next) > 0 && seq_diff(s, ack) < 0)
            .min_by_key(|&s| seq_diff(s, next))
            .unwrap_or(ack);
        let n = seq_diff(hole_end, next) as usize;
        self.next = Some(hole_end);
        // The stream has moved past those bytes: a later SYN or SYN-ACK
        // must not restart it (fuzz regression restart-after-acked-hole).
        self.delivered = true;
        self.cut = false;
        let mut outcome = PushOutcome::default();
        self.drain(out, &mut outcome);
        Some((next, n))
    }

    /// Delivers queued segments that the stream has now reached.
    fn drain(&mut self, out: &mut dyn FnMut(Chunk<'_>), outcome: &mut PushOutcome) {
        while let Some(next) = self.next {
            // Of the segments the stream has reached (the front), the one
            // that arrived first: its bytes and timestamp are delivered.
            let reached = self.pending.partition_point(|p| seq_diff(p.seq, next) <= 0);
            let Some(i) = (0..reached).min_by_key(|&i| self.pending[i].arrival) else {
                break;
            };
            let Some(p) = self.pending.remove(i) else {
                break;
            };
            self.buffered -= p.data.len();
            let skip = seq_diff(next, p.seq) as usize;
            if skip > 0 && outcome.conflict.is_none() {
                outcome.conflict = self.differs(p.seq, &p.data[..skip.min(p.data.len())]);
            }
            if skip >= p.data.len() {
                outcome.duplicate_bytes += p.data.len();
                continue;
            }
            outcome.duplicate_bytes += skip;
            let fresh = &p.data[skip..];
            self.deliver(
                Chunk {
                    data: fresh,
                    seq: next,
                    ts: p.ts,
                    ack: p.ack,
                },
                p.cut,
                out,
            );
        }
    }

    /// Hands over in-order bytes, keeping the stream's first ones. `cut`:
    /// they end where the capture cut their segment short.
    fn deliver(&mut self, c: Chunk<'_>, cut: bool, out: &mut dyn FnMut(Chunk<'_>)) {
        self.first.get_or_insert(c.seq);
        if self.keep {
            let at = *self.kept_at.get_or_insert(c.seq);
            self.keep_bytes(at, c.seq, c.data);
        }
        self.delivered = true;
        self.cut = cut;
        self.next = Some(c.seq.wrapping_add(c.data.len() as u32));
        out(c);
    }

    fn keep_bytes(&mut self, at: u32, seq: u32, data: &[u8]) {
        if self.kept.is_empty() {
            // Only the first record (the hello) is kept when the bytes start
            // with a TLS record header: the fields a forged copy would change
            // are there, and the rest of a flight is not worth the copying.
            let cap = match data {
                [22, 3, _, hi, lo, ..] => {
                    (5 + usize::from(u16::from_be_bytes([*hi, *lo]))).min(KEPT_PREFIX)
                }
                _ => KEPT_PREFIX,
            };
            // At most KEPT_PREFIX: a u16 (two of these in every open handshake).
            self.kept_cap = u16::try_from(cap).unwrap_or(u16::MAX);
        }
        let cap = usize::from(self.kept_cap);
        if seq_diff(seq, at) == self.kept.len() as i64 && self.kept.len() < cap {
            let n = (cap - self.kept.len()).min(data.len());
            // One allocation for what is kept.
            self.kept.reserve_exact(cap - self.kept.len());
            self.kept.extend_from_slice(&data[..n]);
        }
    }

    /// Starts keeping delivered bytes (the flow was identified as TLS):
    /// those of `data` (a segment starting at `seq`) that are already
    /// delivered, and what comes next. Flows never identified keep nothing.
    pub fn keep_from(&mut self, seq: u32, data: &[u8]) {
        if self.keep {
            return;
        }
        self.keep = true;
        let Some(next) = self.next.filter(|_| self.delivered) else {
            return;
        };
        let delivered = seq_diff(next, seq).clamp(0, data.len() as i64) as usize;
        if delivered > 0 {
            self.kept_at = Some(seq);
            self.keep_bytes(seq, seq, &data[..delivered]);
        }
    }

    /// Where `data`, arriving again at `seq`, differs from the kept copy of
    /// what was delivered there (None if it matches or was not kept).
    fn differs(&self, seq: u32, data: &[u8]) -> Option<u32> {
        let first = self.kept_at?;
        let at = seq_diff(seq, first);
        let (start, data) = if at < 0 {
            (0, data.get((-at) as usize..)?)
        } else {
            (at as usize, data)
        };
        let kept = self.kept.get(start..)?;
        let i = kept.iter().zip(data).position(|(a, b)| a != b)?;
        Some(first.wrapping_add((start + i) as u32))
    }

    /// Forgets what was delivered from `seq` on, so that the next push
    /// delivers those bytes again: a copy that conflicted with them
    /// replaces them. False if `seq` is not within what was delivered.
    pub fn rewind(&mut self, seq: u32) -> bool {
        let (Some(first), Some(next)) = (self.first, self.next) else {
            return false;
        };
        let seq = if seq_diff(seq, first) < 0 { first } else { seq };
        if seq_diff(seq, next) > 0 {
            return false;
        }
        if let Some(at) = self.kept_at {
            let keep = seq_diff(seq, at).clamp(0, self.kept.len() as i64) as usize;
            self.kept.truncate(keep);
        }
        self.next = Some(seq);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(segs: &[(u32, &[u8])], start: u32) -> (Vec<u8>, usize) {
        let mut r = Reassembler::new(1024);
        r.start_at(start);
        let mut got = Vec::new();
        for (i, (seq, data)) in segs.iter().enumerate() {
            r.push(
                &Segment {
                    seq: *seq,
                    data,
                    ts: i as f64,
                    ack: None,
                },
                false,
                &mut |c| got.extend_from_slice(c.data),
            );
        }
        (got, r.waiting())
    }

    #[test]
    fn reorder_retransmit_overlap() {
        let want = b"hello world".to_vec();
        // Every permutation-ish ordering of overlapping pieces gives the same bytes.
        let pieces: [(u32, &[u8]); 4] =
            [(100, b"hel"), (102, b"llo w"), (106, b"wor"), (108, b"rld")];
        for rot in 0..4 {
            let mut v = pieces.to_vec();
            v.rotate_left(rot);
            v.push(pieces[0]); // retransmission after the fact
            assert_eq!(run(&v, 100).0, want, "rotation {rot}");
            v.reverse();
            assert_eq!(run(&v, 100).0, want, "reversed rotation {rot}");
        }
    }

    #[test]
    fn sequence_wraparound() {
        let start = u32::MAX - 2;
        let (got, _) = run(&[(0, b"def"), (start, b"abc"), (3, b"g")], start);
        assert_eq!(got, b"abcdefg");
    }

    #[test]
    fn acked_hole_is_skipped_and_reported() {
        let mut r = Reassembler::new(1024);
        r.start_at(0);
        let mut got = Vec::new();
        r.push(
            &Segment {
                seq: 0,
                data: b"ab",
                ts: 0.0,
                ack: None,
            },
            false,
            &mut |c| got.extend_from_slice(c.data),
        );
        r.push(
            &Segment {
                seq: 5,
                data: b"fg",
                ts: 0.0,
                ack: None,
            },
            false,
            &mut |c| got.extend_from_slice(c.data),
        );
        assert_eq!(
            r.acked(7, &mut |c| got.extend_from_slice(c.data)),
            Some((2, 3))
        );
        assert_eq!(got, b"abfg");
        assert_eq!(r.acked(7, &mut |_| {}), None, "nothing more is missing");
    }

    /// Regression (fuzz reassembly, restart-after-acked-hole): a SYN-ACK
    /// after an ACK-skipped hole moved the stream back.
    #[test]
    fn a_skipped_hole_is_progress_a_restart_cannot_undo() {
        let mut r = Reassembler::new(1024);
        r.start_at(0);
        assert_eq!(r.acked(10, &mut |_| {}), Some((0, 10)));
        r.restart_at(500);
        assert_eq!(r.next_seq(), Some(10));
    }

    #[test]
    fn ack_of_a_fin_is_not_loss() {
        let mut r = Reassembler::new(1024);
        r.start_at(0);
        r.push(
            &Segment {
                seq: 0,
                data: b"ab",
                ts: 0.0,
                ack: None,
            },
            false,
            &mut |_| {},
        );
        assert_eq!(r.acked(3, &mut |_| {}), None);
    }

    fn push(r: &mut Reassembler, seq: u32, data: &[u8], got: &mut Vec<u8>) -> PushOutcome {
        r.push(
            &Segment {
                seq,
                data,
                ts: 0.0,
                ack: None,
            },
            false,
            &mut |c| got.extend_from_slice(c.data),
        )
    }

    #[test]
    fn differing_retransmissions_are_reported_and_can_replace() {
        let mut r = Reassembler::new(1024);
        r.start_at(100);
        let mut got = Vec::new();
        assert_eq!(push(&mut r, 100, b"hello", &mut got).conflict, None);
        assert_eq!(
            push(&mut r, 100, b"HELLO", &mut got).conflict,
            None,
            "nothing kept before keep_from"
        );
        r.keep_from(100, b"hello");
        assert_eq!(
            push(&mut r, 100, b"hello", &mut got).conflict,
            None,
            "an identical copy"
        );
        assert_eq!(
            push(&mut r, 102, b"lXo w", &mut got).conflict,
            Some(103),
            "first differing byte"
        );
        // Queued out of order, overlapping what is delivered once drained.
        assert_eq!(push(&mut r, 110, b"D", &mut got).conflict, None);
        assert_eq!(
            push(&mut r, 105, b" worlD", &mut got).conflict,
            None,
            "the queued copy agrees"
        );
        assert_eq!(got, b"hello worlD");
        let out = push(&mut r, 107, b"orld!", &mut got);
        assert_eq!((out.conflict, out.duplicate_bytes), (Some(110), 4));
        assert_eq!(got, b"hello worlD!");
        // A queued copy that disagrees is reported when it is drained.
        push(&mut r, 114, b"x", &mut got);
        assert_eq!(push(&mut r, 112, b"abc", &mut got).conflict, Some(114));
        // A replacing copy: what was delivered from 106 on is read again.
        assert!(r.rewind(106));
        push(&mut r, 106, b"world", &mut got);
        assert_eq!(got, b"hello worlD!abcworld");
        assert!(!r.rewind(5000), "beyond what was delivered");
    }

    /// Regression (hostile traffic): one-byte segments ahead of a hole were
    /// all queued (256 Ki entries, each searched on every delivery).
    #[test]
    fn holes_are_bounded_in_number() {
        let mut r = Reassembler::new(1 << 20);
        r.start_at(0);
        let mut got = Vec::new();
        for i in 0..MAX_PENDING_SEGMENTS as u32 {
            let out = push(&mut r, 2 + 2 * i, b"x", &mut got);
            assert!(out.queued && out.skipped_holes == 0, "segment {i}");
        }
        assert_eq!(
            push(&mut r, 2, b"x", &mut got).duplicate_bytes,
            1,
            "a copy of a waiting segment is not queued"
        );
        // One more: the first hole is given up on, its byte lost, and the
        // byte waiting behind it delivered.
        let out = push(&mut r, 1001, b"x", &mut got);
        assert!(out.hole_limit && out.queued);
        assert_eq!((out.skipped_holes, out.skipped_bytes), (1, 2));
        assert_eq!(got, b"x");
        assert_eq!(r.next_seq(), Some(3));
        assert_eq!(r.waiting(), MAX_PENDING_SEGMENTS);
    }

    #[test]
    fn over_the_byte_cap_the_first_holes_are_skipped() {
        let mut r = Reassembler::new(4);
        r.start_at(0);
        let mut got = Vec::new();
        assert!(push(&mut r, 2, b"cd", &mut got).queued);
        assert!(push(&mut r, 6, b"gh", &mut got).queued);
        // 2 more bytes would make 6 waiting: the hole at 0..2 goes, "cd"
        // comes out, and the segment waits behind the hole at 4..6.
        let out = push(&mut r, 9, b"jk", &mut got);
        assert_eq!((out.skipped_holes, out.skipped_bytes), (1, 2));
        assert!(out.queued && !out.hole_limit);
        assert_eq!(got, b"cd");
        assert_eq!(r.buffered(), 4);
        // A segment alone over the cap: every hole before it goes.
        let mut chunks = Vec::new();
        let out = r.push(
            &Segment {
                seq: 20,
                data: b"uvwxyz",
                ts: 0.0,
                ack: None,
            },
            false,
            &mut |c| chunks.push((c.seq, c.data.to_vec())),
        );
        assert_eq!((out.skipped_holes, out.skipped_bytes), (3, 2 + 1 + 9));
        assert_eq!(
            chunks,
            [
                (6, b"gh".to_vec()),
                (9, b"jk".to_vec()),
                (20, b"uvwxyz".to_vec())
            ]
        );
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn a_cut_segment_delivers_what_it_has_and_leaves_a_hole() {
        let mut r = Reassembler::new(1024);
        r.start_at(0);
        let mut got = Vec::new();
        let seg = |seq, data| Segment {
            seq,
            data,
            ts: 0.0,
            ack: None,
        };
        r.push(&seg(0, b"abc"), true, &mut |c| {
            got.extend_from_slice(c.data)
        });
        assert!(r.cut_short());
        // The segment was 6 bytes long: the next one waits behind the hole.
        assert!(r.push(&seg(6, b"ghi"), false, &mut |_| {}).queued);
        assert_eq!(
            r.acked(9, &mut |c| got.extend_from_slice(c.data)),
            Some((3, 3))
        );
        assert_eq!(got, b"abcghi");
        assert!(!r.cut_short());
        // Cut and out of order: queued, then skipped to at the end.
        r.push(&seg(12, b"m"), true, &mut |_| {});
        assert_eq!(
            r.skip_hole(&mut |c| got.extend_from_slice(c.data)),
            Some((9, 3))
        );
        assert!(r.cut_short());
        assert_eq!(r.skip_hole(&mut |_| {}), None, "nothing waits");
        assert_eq!(got, b"abcghim");
    }
}
