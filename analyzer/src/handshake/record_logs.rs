//! Both directions' record logs of a handshake in one allocation: the
//! client's records first, then the server's. A client record is inserted
//! before the server's, moving the few there are (a handshake holds ~5-12
//! records a side), which costs less than a second allocation a
//! connection.

use super::Dir;
use crate::caps::MAX_RECORDS_PER_DIR;
use crate::memory::HeapSize;
use crate::tls::record::RecordInfo;

/// Room made at the first record: both sides of a usual handshake, so
/// that most connections allocate once (two logs of eight each did
/// twice). A flow that shows only its hello, waiting in numbers (a
/// flood), does not get here: past `Config::park_above` it is parked
/// without a handshake (`tcp::Parked`).
const FIRST_ROOM: usize = 16;

#[derive(Debug, Default, Clone)]
pub struct RecordLogs {
    all: Vec<RecordInfo>,
    /// How many of `all` are the client's (the first ones).
    client: u16,
}

impl RecordLogs {
    /// One side's records, in the order they came.
    pub fn of(&self, dir: Dir) -> &[RecordInfo] {
        let (client, server) = self.both();
        match dir {
            Dir::Client => client,
            Dir::Server => server,
        }
    }

    /// The client's records and the server's.
    pub fn both(&self) -> (&[RecordInfo], &[RecordInfo]) {
        self.all
            .split_at(usize::from(self.client).min(self.all.len()))
    }

    /// Logs `rec` for `dir`, unless that side already holds
    /// [`MAX_RECORDS_PER_DIR`]: false then.
    pub fn push(&mut self, dir: Dir, rec: RecordInfo) -> bool {
        if self.of(dir).len() >= MAX_RECORDS_PER_DIR {
            return false;
        }
        if self.all.is_empty() {
            self.all.reserve_exact(FIRST_ROOM);
        }
        match dir {
            Dir::Client => {
                self.all.insert(usize::from(self.client), rec);
                self.client += 1;
            }
            Dir::Server => self.all.push(rec),
        }
        true
    }
}

impl HeapSize for RecordLogs {
    fn heap_size(&self) -> usize {
        self.all.heap_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seqs(logs: &RecordLogs, dir: Dir) -> Vec<u32> {
        logs.of(dir).iter().map(|r| r.seq).collect()
    }

    fn rec(seq: u32) -> RecordInfo {
        RecordInfo {
            ts: f64::from(seq),
            content_type: 22,
            minor: 3,
            len: 1,
            seq,
            end: seq + 6,
            ack: None,
        }
    }

    /// Interleaved pushes keep each side's order, one allocation holds a
    /// usual handshake, and each side stops at its cap alone.
    #[test]
    fn each_side_in_order_in_one_allocation() {
        let mut logs = RecordLogs::default();
        assert_eq!(logs.heap_size(), 0);
        let sides = [
            Dir::Client,
            Dir::Server,
            Dir::Server,
            Dir::Client,
            Dir::Server,
            Dir::Client,
        ];
        for (i, &dir) in sides.iter().enumerate() {
            assert!(logs.push(dir, rec(i as u32)));
        }
        assert_eq!(seqs(&logs, Dir::Client), [0, 3, 5]);
        assert_eq!(seqs(&logs, Dir::Server), [1, 2, 4]);
        assert_eq!(logs.both().0, logs.of(Dir::Client));
        assert_eq!(logs.both().1, logs.of(Dir::Server));
        let one = logs.all.capacity();
        assert_eq!(one, FIRST_ROOM);
        for i in 0..MAX_RECORDS_PER_DIR as u32 + 5 {
            logs.push(Dir::Server, rec(100 + i));
        }
        assert_eq!(logs.of(Dir::Server).len(), MAX_RECORDS_PER_DIR);
        assert!(!logs.push(Dir::Server, rec(999)));
        // The client's side still takes records, before the server's.
        assert!(logs.push(Dir::Client, rec(7)));
        assert_eq!(seqs(&logs, Dir::Client), [0, 3, 5, 7]);
        assert_eq!(seqs(&logs, Dir::Server)[..3], [1, 2, 4]);
        assert_eq!(
            logs.of(Dir::Server).last().map(|r| r.seq),
            Some(100 + MAX_RECORDS_PER_DIR as u32 - 4)
        );
    }
}
