//! Tombstones of TCP connections that left the flow table: a few bytes per
//! tuple, so that what still comes of a connection after it ended (a
//! close_notify reordered after the FINs, a retransmitted segment, a copy
//! of the whole connection later in a merged capture) is recognised as
//! that connection's and skipped, instead of opening a second flow.

use crate::flow::table::{FlowKey, FlowTable, Footprint, SLOT_OVERHEAD};
use crate::seq::Seq;

/// How far from where a direction's stream was known to end a late
/// segment may start and still be the ended connection's (a retransmission
/// from far back, data sent after the peer's FIN). A new connection on the
/// tuple whose SYN the capture missed starts at a random sequence number:
/// it falls inside this window once in 256.
const LATE_WINDOW: i64 = 1 << 24;

#[derive(Debug, Clone, Copy)]
struct Tombstone {
    /// The initiator's ISN: with the tuple it names the connection.
    isn: Option<u32>,
    /// Where each side's stream was known to end (by [`FlowKey::side`]).
    ends: [Option<u32>; 2],
    /// Capture time of the connection's last packet.
    at: f64,
    /// Whether late segments belong to it: its analysis was over (record
    /// out, not TLS, closed). A flow evicted or expired before it was
    /// identified leaves none, so that what follows is still read.
    absorbs: bool,
}

/// Its size is counted in [`TOMBSTONE_BYTES`], not measured.
impl Footprint for Tombstone {
    fn footprint(&self) -> usize {
        0
    }
}

/// Ended connections, bounded, the least recently ended forgotten first.
/// They sit in a table like the flows' (slots in chunks, linked by age):
/// one connection in two ends with a tombstone, and a map that boxed each
/// entry cost an allocation apiece.
pub struct Tombstones {
    map: FlowTable<Tombstone>,
}

/// What one tombstone costs in memory: key, value and the table's slot.
pub const TOMBSTONE_BYTES: usize =
    std::mem::size_of::<FlowKey>() + std::mem::size_of::<Tombstone>() + SLOT_OVERHEAD;

impl Tombstones {
    pub fn new(capacity: usize) -> Self {
        Tombstones {
            map: FlowTable::new(capacity),
        }
    }

    /// The tombstone of `key`'s tuple, not made more recent.
    fn peek(&self, key: &FlowKey) -> Option<&Tombstone> {
        self.map.get(self.map.find(key).1?)
    }

    /// The same, to change.
    fn peek_mut(&mut self, key: &FlowKey) -> Option<&mut Tombstone> {
        self.map.get_mut(self.map.find(key).1?)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes the tombstones hold.
    pub fn bytes(&self) -> usize {
        self.map.len() * TOMBSTONE_BYTES
    }

    /// Remembers a connection that ended; returns whether the oldest
    /// tombstone was forgotten to make room.
    pub fn bury(
        &mut self,
        key: FlowKey,
        isn: Option<u32>,
        ends: [Option<u32>; 2],
        at: f64,
        absorbs: bool,
    ) -> bool {
        let t = Tombstone {
            isn,
            ends,
            at,
            absorbs,
        };
        // One lookup: most tuples have no tombstone yet.
        match self.map.find(&key) {
            (_, Some(slot)) => {
                // A later flow on the tuple without a SYN does not forget
                // the ISN of the connection before it.
                self.map.update(slot, |old| {
                    *old = Tombstone {
                        isn: t.isn.or(old.isn),
                        ..t
                    }
                });
                false
            }
            (hash, None) => self.map.insert(hash, key, t).1.is_some(),
        }
    }

    /// A SYN with the ISN of a connection that ended on this tuple: a copy
    /// of that connection.
    pub fn is_repeat(&self, key: &FlowKey, isn: u32) -> bool {
        self.peek(key).is_some_and(|t| t.isn == Some(isn))
    }

    /// A segment (not a SYN) from `side` starting at `seq` at `ts`: whether
    /// it belongs to a connection that ended on this tuple less than
    /// `idle` seconds before, near where its sender's stream ended. If so
    /// the tombstone lives on as long as its connection's packets come.
    pub fn absorbs(&mut self, key: &FlowKey, side: usize, seq: u32, ts: f64, idle: f64) -> bool {
        let Some(t) = self.peek_mut(key) else {
            return false;
        };
        let near = t.ends[side].is_none_or(|end| Seq(seq).diff(Seq(end)).abs() < LATE_WINDOW);
        let late = t.absorbs && near && ts >= t.at && ts - t.at <= idle;
        if late {
            t.at = ts;
        }
        late
    }

    /// Forgets the least recently ended connection.
    pub fn pop_oldest(&mut self) -> bool {
        self.map.pop_oldest().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key() -> FlowKey {
        let ip = |n| IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
        FlowKey::new((ip(1), 40000), (ip(2), 443))
    }

    #[test]
    fn late_segments_near_the_end_within_the_idle_time_are_absorbed() {
        let mut t = Tombstones::new(4);
        t.bury(key(), Some(7), [Some(1000), None], 10.0, true);
        assert!(
            t.absorbs(&key(), 0, 990, 11.0, 60.0),
            "reordered close_notify"
        );
        assert!(t.absorbs(&key(), 1, 123_456, 12.0, 60.0), "end unknown");
        assert!(
            !t.absorbs(&key(), 0, 1000 + (1 << 25), 12.0, 60.0),
            "far away: new"
        );
        assert!(
            !t.absorbs(&key(), 0, 1000, 100.0, 60.0),
            "after the idle time"
        );
        assert!(t.is_repeat(&key(), 7) && !t.is_repeat(&key(), 8));
    }

    #[test]
    fn a_flow_that_was_never_identified_absorbs_nothing() {
        let mut t = Tombstones::new(4);
        t.bury(key(), None, [None, None], 1.0, false);
        assert!(!t.absorbs(&key(), 0, 5, 1.5, 60.0));
    }

    #[test]
    fn the_oldest_is_forgotten_first() {
        let mut t = Tombstones::new(1);
        assert!(!t.bury(key(), Some(1), [None; 2], 1.0, true));
        assert!(
            !t.bury(key(), None, [None; 2], 2.0, true),
            "same tuple: replaced"
        );
        assert!(t.is_repeat(&key(), 1), "the ISN is kept");
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
        assert!(t.bury(FlowKey::new((ip, 1), (ip, 2)), None, [None; 2], 3.0, true));
        assert!(!t.is_repeat(&key(), 1));
        assert_eq!(t.bytes(), TOMBSTONE_BYTES);
    }
}
