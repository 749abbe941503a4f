//! The delay line proper: packets go into a timer heap with their release
//! time, per-direction delay plus optional jitter, or are dropped for loss.
//! Pure logic (times come in as arguments) so it can be tested without a
//! clock or a device.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Direction of travel: A -> B or B -> A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    AtoB = 0,
    BtoA = 1,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::AtoB => "ab",
            Dir::BtoA => "ba",
        }
    }
}

/// How one direction treats its packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DirConfig {
    /// One-way delay.
    pub delay_ns: u64,
    /// Each packet's delay is drawn uniformly from delay ± jitter (clamped at 0).
    pub jitter_ns: u64,
    /// Probability of dropping a packet, 0..=1.
    pub loss: f64,
}

/// A packet waiting for its release time.
pub struct Pending {
    pub deadline: u64,
    /// Arrival order, so equal deadlines leave in the order they came.
    pub seq: u64,
    pub dir: Dir,
    pub arrived: u64,
    pub data: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed: BinaryHeap is a max-heap and we want the earliest deadline on top.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

/// What happened to a packet offered to the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Queued { deadline: u64 },
    Lost,
    QueueFull,
}

/// Most packets held at once; beyond it packets are dropped (counted), so a
/// runaway sender costs bounded memory.
pub const MAX_QUEUED: usize = 65_536;

pub struct Line {
    pub dirs: [DirConfig; 2],
    /// Let jitter reorder packets (netem's default); off keeps each
    /// direction FIFO, as a real path without parallel links does.
    pub reorder: bool,
    heap: BinaryHeap<Pending>,
    last_deadline: [u64; 2],
    seq: u64,
    rng: XorShift,
}

impl Line {
    pub fn new(dirs: [DirConfig; 2], reorder: bool, seed: u64) -> Line {
        Line {
            dirs,
            reorder,
            heap: BinaryHeap::new(),
            last_deadline: [0; 2],
            seq: 0,
            rng: XorShift::new(seed),
        }
    }

    /// A packet read at `now` travelling in `dir`.
    pub fn admit(&mut self, dir: Dir, now: u64, data: Vec<u8>) -> Admit {
        let cfg = self.dirs[dir as usize];
        if cfg.loss > 0.0 && self.rng.unit() < cfg.loss {
            return Admit::Lost;
        }
        if self.heap.len() >= MAX_QUEUED {
            return Admit::QueueFull;
        }
        let delay = if cfg.jitter_ns > 0 {
            let offset = (self.rng.unit() * 2.0 - 1.0) * cfg.jitter_ns as f64;
            (cfg.delay_ns as f64 + offset).max(0.0) as u64
        } else {
            cfg.delay_ns
        };
        let mut deadline = now + delay;
        if !self.reorder {
            deadline = deadline.max(self.last_deadline[dir as usize]);
        }
        self.last_deadline[dir as usize] = deadline;
        self.seq += 1;
        self.heap.push(Pending {
            deadline,
            seq: self.seq,
            dir,
            arrived: now,
            data,
        });
        Admit::Queued { deadline }
    }

    /// The earliest release time, if anything is queued.
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|p| p.deadline)
    }

    /// The next packet due at `now`, if any.
    pub fn pop_due(&mut self, now: u64) -> Option<Pending> {
        if self.heap.peek()?.deadline <= now {
            self.heap.pop()
        } else {
            None
        }
    }

    pub fn queued(&self) -> usize {
        self.heap.len()
    }
}

/// xorshift64*: loss and jitter need speed and a seed, not cryptography.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cfg(delay_ms: u64) -> DirConfig {
        DirConfig {
            delay_ns: delay_ms * MS,
            jitter_ns: 0,
            loss: 0.0,
        }
    }

    #[test]
    fn each_direction_gets_its_own_delay() {
        let mut line = Line::new([cfg(10), cfg(40)], false, 1);
        assert_eq!(
            line.admit(Dir::AtoB, 0, vec![1]),
            Admit::Queued { deadline: 10 * MS }
        );
        assert_eq!(
            line.admit(Dir::BtoA, MS, vec![2]),
            Admit::Queued { deadline: 41 * MS }
        );
        assert_eq!(line.next_deadline(), Some(10 * MS));
        assert!(line.pop_due(10 * MS - 1).is_none());
        assert_eq!(line.pop_due(10 * MS).unwrap().data, vec![1]);
        assert!(line.pop_due(40 * MS).is_none());
        assert_eq!(line.pop_due(41 * MS).unwrap().dir, Dir::BtoA);
        assert_eq!(line.queued(), 0);
    }

    #[test]
    fn equal_deadlines_leave_in_arrival_order() {
        let mut line = Line::new([cfg(5), cfg(5)], false, 1);
        for i in 0..100u8 {
            line.admit(Dir::AtoB, 0, vec![i]);
        }
        let order: Vec<u8> = std::iter::from_fn(|| line.pop_due(5 * MS))
            .map(|p| p.data[0])
            .collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn jitter_without_reorder_keeps_fifo_and_bounds() {
        let jittery = DirConfig {
            delay_ns: 50 * MS,
            jitter_ns: 10 * MS,
            loss: 0.0,
        };
        let mut line = Line::new([jittery, jittery], false, 7);
        let mut last = 0;
        for i in 0..10_000u64 {
            let now = i * 10_000; // 10 µs apart
            let Admit::Queued { deadline } = line.admit(Dir::AtoB, now, vec![]) else {
                panic!()
            };
            assert!(deadline >= last, "FIFO");
            assert!(deadline >= now + 40 * MS && deadline <= now.max(last) + 60 * MS);
            last = deadline;
        }
    }

    #[test]
    fn loss_rate_is_close_to_configured() {
        let lossy = DirConfig {
            delay_ns: 0,
            jitter_ns: 0,
            loss: 0.1,
        };
        let mut line = Line::new([lossy, cfg(0)], false, 42);
        let lost = (0..100_000)
            .filter(|&t| line.admit(Dir::AtoB, t, vec![]) == Admit::Lost)
            .count();
        assert!((9_000..11_000).contains(&lost), "{lost}");
        assert!((0..1000).all(|t| line.admit(Dir::BtoA, t, vec![]) != Admit::Lost));
    }

    #[test]
    fn queue_is_bounded() {
        let mut line = Line::new([cfg(1000), cfg(1000)], false, 1);
        for t in 0..MAX_QUEUED as u64 {
            assert!(matches!(
                line.admit(Dir::AtoB, t, vec![]),
                Admit::Queued { .. }
            ));
        }
        assert_eq!(line.admit(Dir::AtoB, 0, vec![]), Admit::QueueFull);
    }
}
