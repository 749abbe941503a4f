//! In-order delivery of one TCP direction's bytes, despite reordering,
//! retransmission and overlap (after smoltcp's `Assembler`: bounded holes).
//! Out-of-order segments wait in a small buffer with a byte cap; when the
//! cap is hit, or a segment arrives cut short by the capture, the stream has
//! a gap that TLS cannot resynchronise across, and the caller is told.

pub use crate::seq::seq_diff;

/// Default cap on out-of-order bytes held per direction.
pub const DEFAULT_MAX_BUFFERED: usize = 256 * 1024;

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
}

/// What one push did, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PushOutcome {
    /// Bytes already delivered that arrived again (retransmission/overlap).
    pub duplicate_bytes: usize,
    /// The segment was held for later.
    pub queued: bool,
    /// The stream now has a hole it will never fill.
    pub gap: bool,
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
    next: Option<u32>,
    pending: Vec<Pending>,
    buffered: usize,
    max_buffered: usize,
    gap: bool,
    delivered: bool,
}

impl Reassembler {
    pub fn new(max_buffered: usize) -> Self {
        Reassembler { next: None, pending: Vec::new(), buffered: 0, max_buffered, gap: false, delivered: false }
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

    pub fn has_gap(&self) -> bool {
        self.gap
    }

    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Adds a segment; calls `out` with every run of bytes that became contiguous.
    pub fn push(&mut self, seg: Segment<'_>, truncated: bool, out: &mut dyn FnMut(Chunk<'_>)) -> PushOutcome {
        let mut outcome = PushOutcome::default();
        if self.gap || seg.data.is_empty() {
            return outcome;
        }
        let next = *self.next.get_or_insert(seg.seq);
        let d = seq_diff(seg.seq, next);
        if d > 0 {
            if truncated {
                // A cut-short segment cannot be buffered faithfully.
                self.gap = true;
                outcome.gap = true;
                return outcome;
            }
            if self.buffered + seg.data.len() > self.max_buffered {
                self.gap = true;
                outcome.gap = true;
                self.pending = Vec::new();
                self.buffered = 0;
                return outcome;
            }
            self.buffered += seg.data.len();
            self.pending.push(Pending { seq: seg.seq, data: seg.data.to_vec(), ts: seg.ts, ack: seg.ack });
            outcome.queued = true;
            return outcome;
        }
        let skip = (-d) as usize;
        if skip >= seg.data.len() {
            outcome.duplicate_bytes = seg.data.len();
            return outcome;
        }
        outcome.duplicate_bytes = skip;
        let fresh = &seg.data[skip..];
        self.delivered = true;
        out(Chunk { data: fresh, seq: next, ts: seg.ts, ack: seg.ack });
        self.next = Some(next.wrapping_add(fresh.len() as u32));
        if truncated {
            self.gap = true;
            outcome.gap = true;
            return outcome;
        }
        self.drain(out, &mut outcome);
        outcome
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
        if self.gap || lost <= 0 || lost > self.max_buffered as i64 * 4 {
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
        let mut outcome = PushOutcome::default();
        self.drain(out, &mut outcome);
        Some((next, n))
    }

    /// Delivers queued segments that the stream has now reached.
    fn drain(&mut self, out: &mut dyn FnMut(Chunk<'_>), outcome: &mut PushOutcome) {
        while let Some(next) = self.next {
            let Some(i) = self.pending.iter().position(|p| seq_diff(p.seq, next) <= 0) else {
                break;
            };
            let p = self.pending.swap_remove(i);
            self.buffered -= p.data.len();
            let skip = seq_diff(next, p.seq) as usize;
            if skip >= p.data.len() {
                outcome.duplicate_bytes += p.data.len();
                continue;
            }
            outcome.duplicate_bytes += skip;
            let fresh = &p.data[skip..];
            out(Chunk { data: fresh, seq: next, ts: p.ts, ack: p.ack });
            self.next = Some(next.wrapping_add(fresh.len() as u32));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(segs: &[(u32, &[u8])], start: u32) -> (Vec<u8>, bool) {
        let mut r = Reassembler::new(1024);
        r.start_at(start);
        let mut got = Vec::new();
        for (i, (seq, data)) in segs.iter().enumerate() {
            r.push(Segment { seq: *seq, data, ts: i as f64, ack: None }, false, &mut |c| {
                got.extend_from_slice(c.data)
            });
        }
        (got, r.has_gap())
    }

    #[test]
    fn reorder_retransmit_overlap() {
        let want = b"hello world".to_vec();
        // Every permutation-ish ordering of overlapping pieces gives the same bytes.
        let pieces: [(u32, &[u8]); 4] = [(100, b"hel"), (102, b"llo w"), (106, b"wor"), (108, b"rld")];
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
        r.push(Segment { seq: 0, data: b"ab", ts: 0.0, ack: None }, false, &mut |c| got.extend_from_slice(c.data));
        r.push(Segment { seq: 5, data: b"fg", ts: 0.0, ack: None }, false, &mut |c| got.extend_from_slice(c.data));
        assert_eq!(r.acked(7, &mut |c| got.extend_from_slice(c.data)), Some((2, 3)));
        assert_eq!(got, b"abfg");
        assert_eq!(r.acked(7, &mut |_| {}), None, "nothing more is missing");
    }

    #[test]
    fn ack_of_a_fin_is_not_loss() {
        let mut r = Reassembler::new(1024);
        r.start_at(0);
        r.push(Segment { seq: 0, data: b"ab", ts: 0.0, ack: None }, false, &mut |_| {});
        assert_eq!(r.acked(3, &mut |_| {}), None);
    }

    #[test]
    fn buffer_cap_makes_a_gap() {
        let mut r = Reassembler::new(4);
        r.start_at(0);
        let out = r.push(Segment { seq: 10, data: b"abcdef", ts: 0.0, ack: None }, false, &mut |_| {});
        assert!(out.gap && r.has_gap());
        assert_eq!(r.buffered(), 0);
    }
}
