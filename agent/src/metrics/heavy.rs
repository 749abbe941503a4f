//! The heavy-hitters sketch that bounds the `server_name` and
//! `ja4_stable` labels: Space-Saving (Metwally, Agrawal, El Abbadi,
//! "Efficient computation of frequent and top-k elements in data streams",
//! 2005) with a fixed number of counters. Each counter holds a key, an
//! estimate and its possible overcount (`error`); `estimate − error` is a
//! count the key certainly reached since it took the counter. A key not in
//! the sketch made at most [`SpaceSaving::floor`] since it last lost its
//! counter.

use std::collections::HashMap;

/// Every record looks its labels up here: foldhash, seeded per process,
/// not SipHash (which took ~2% of the live agent's CPU).
type Index = HashMap<String, usize, foldhash::fast::RandomState>;

struct Slot {
    key: String,
    count: u64,
    error: u64,
}

pub struct SpaceSaving {
    capacity: usize,
    slots: Vec<Slot>,
    index: Index,
    /// Keys counted so far (M).
    seen: u64,
}

impl SpaceSaving {
    pub fn new(capacity: usize) -> Self {
        SpaceSaving {
            capacity,
            slots: Vec::new(),
            index: Index::default(),
            seen: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keys counted so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Space-Saving's update: the key's counter, or the smallest one taken
    /// over (its count becomes the overcount). Returns the key's certain
    /// count; None when the sketch has no counters.
    pub fn count(&mut self, key: &str) -> Option<u64> {
        self.seen += 1;
        if let Some(&i) = self.index.get(key) {
            self.slots[i].count += 1;
            return Some(self.slots[i].count - self.slots[i].error);
        }
        if self.slots.len() < self.capacity {
            self.slots.push(Slot {
                key: key.to_string(),
                count: 1,
                error: 0,
            });
            self.index.insert(key.to_string(), self.slots.len() - 1);
            return Some(1);
        }
        let (i, min) = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.count))
            .min_by_key(|&(_, c)| c)?;
        let old = std::mem::replace(
            &mut self.slots[i],
            Slot {
                key: key.to_string(),
                count: min + 1,
                error: min,
            },
        );
        self.index.remove(&old.key);
        self.index.insert(key.to_string(), i);
        Some(1)
    }

    /// The smallest estimate: what a key outside the sketch may have made
    /// at most (0 while the sketch has room).
    pub fn floor(&self) -> u64 {
        if self.slots.len() < self.capacity {
            return 0;
        }
        self.slots.iter().map(|s| s.count).min().unwrap_or(0)
    }

    /// An upper bound of the key's count (since it last took a counter).
    pub fn estimate(&self, key: &str) -> u64 {
        self.index
            .get(key)
            .map_or_else(|| self.floor(), |&i| self.slots[i].count)
    }

    /// Keys whose certain count is above `certain`.
    pub fn ranked_above(&self, certain: u64) -> usize {
        self.slots
            .iter()
            .filter(|s| s.count - s.error > certain)
            .count()
    }

    /// Whether a key with this certain count made more than a 1/K share
    /// of the keys counted (K the sketch's counters) and at least `min`.
    pub fn is_heavy(&self, certain: u64, min: u64) -> bool {
        certain >= min && certain * self.capacity as u64 > self.seen
    }

    #[cfg(test)]
    pub fn all_certain(&self) -> Vec<u64> {
        self.slots.iter().map(|s| s.count - s.error).collect()
    }
}
