//! The flow table: bounded, least-recently-used eviction, keyed by the
//! unordered pair of endpoints.
//!
//! One hash lookup a packet: [`find`](FlowTable::find) hands back a
//! [`Slot`] (or, on a miss, the key's hash, which
//! [`insert`](FlowTable::insert) reuses), and everything after it (reading,
//! changing, promoting, measuring the flow) goes through the slot. Flows
//! live in a slab of fixed-size chunks (growing it never copies the flows
//! already there, nor doubles the memory for a moment) threaded on an
//! intrusive LRU list; the hash table holds 4-byte slot numbers only.
//!
//! The hash is foldhash, seeded at random per table: a few instructions
//! for a 40-byte key, and an attacker who cannot read the seed cannot
//! choose tuples that collide (hashbrown's default hasher for the same
//! reason).

use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;

use hashbrown::HashTable;

pub type Endpoint = (IpAddr, u16);

/// Both directions of a connection map to the same key: the two endpoints
/// as 128-bit addresses (IPv4 mapped, as two u64 so the key aligns to 8)
/// and ports, smaller one first. Plain integers hash in a few
/// instructions (IpAddr's derived Hash is byte-wise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    lo_addr: [u64; 2],
    hi_addr: [u64; 2],
    ports: u32,
}

/// An address as the 128 bits of its IPv6 form (IPv4 mapped), high half
/// first: built from the IPv4 word directly (through `u128` it was a
/// conversion and two shifts an address, every packet).
fn halves(ip: IpAddr) -> [u64; 2] {
    match ip {
        IpAddr::V4(v4) => [0, 0xffff_0000_0000 | u64::from(u32::from(v4))],
        IpAddr::V6(v6) => {
            let a = u128::from(v6);
            [(a >> 64) as u64, a as u64]
        }
    }
}

impl FlowKey {
    pub fn new(a: Endpoint, b: Endpoint) -> Self {
        // Arrays compare element by element: the high half first, as the
        // 128-bit number would.
        let (a, b) = ((halves(a.0), a.1), (halves(b.0), b.1));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        FlowKey {
            lo_addr: lo.0,
            hi_addr: hi.0,
            ports: (u32::from(lo.1) << 16) | u32::from(hi.1),
        }
    }

    /// Which of the key's two endpoints `e` is: 0 for the smaller, 1 for
    /// the other (a direction that does not depend on who spoke first).
    pub fn side(&self, e: Endpoint) -> usize {
        usize::from((halves(e.0), e.1) != (self.lo_addr, (self.ports >> 16) as u16))
    }
}

/// What a table value costs in memory (see [`crate::memory`]).
pub trait Footprint {
    fn footprint(&self) -> usize;
}

/// Bytes a flow costs in the table beyond its key and value: the slot's
/// links and charge, and the hash table's 4-byte slot number and control
/// byte at its usual load (between 7/16 and 7/8).
pub const SLOT_OVERHEAD: usize = 3 * 4 + 8;

/// Where a flow sits in the table: valid until it is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(u32);

const NIL: u32 = u32::MAX;
/// Slots per slab chunk.
const CHUNK: usize = 1024;

struct Entry<V> {
    key: FlowKey,
    /// None: a free slot (`next` chains the free list).
    value: Option<V>,
    /// What the value cost when last measured (it counts in `bytes`).
    charged: u32,
    /// Towards the least recently used, and the most.
    older: u32,
    newer: u32,
}

/// An LRU map with a hard capacity; inserting into a full table hands back
/// the least recently used entry so the caller can finish it. It keeps the
/// sum of its values' footprints, measured on insert and on
/// [`update`](Self::update), for the memory budget.
pub struct FlowTable<V> {
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    chunks: Vec<Vec<Entry<V>>>,
    free: u32,
    /// Least and most recently used.
    oldest: u32,
    newest: u32,
    len: usize,
    capacity: usize,
    bytes: usize,
}

fn charge<V: Footprint>(v: &V) -> u32 {
    u32::try_from(v.footprint()).unwrap_or(u32::MAX)
}

impl<V: Footprint> FlowTable<V> {
    pub fn new(capacity: usize) -> Self {
        FlowTable {
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            chunks: Vec::new(),
            free: NIL,
            oldest: NIL,
            newest: NIL,
            len: 0,
            capacity: capacity.clamp(1, NIL as usize - 1),
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the flows in the table hold, as last measured.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn entry(&self, i: u32) -> &Entry<V> {
        &self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn entry_mut(&mut self, i: u32) -> &mut Entry<V> {
        &mut self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn hash(&self, key: &FlowKey) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The one lookup of a packet: the key's hash (for
    /// [`insert`](Self::insert)) and its flow's slot, if it has one.
    pub fn find(&self, key: &FlowKey) -> (u64, Option<Slot>) {
        let hash = self.hash(key);
        let chunks = &self.chunks;
        let found = self.index.find(hash, |&i| {
            chunks[i as usize / CHUNK][i as usize % CHUNK].key == *key
        });
        (hash, found.map(|&i| Slot(i)))
    }

    /// The flow in `slot`, not promoted.
    pub fn get(&self, slot: Slot) -> Option<&V> {
        self.entry(slot.0).value.as_ref()
    }

    /// The flow in `slot`, neither promoted nor measured again: the caller
    /// must not grow it (finished flows, whose packets should cost as
    /// little as possible).
    pub fn get_mut(&mut self, slot: Slot) -> Option<&mut V> {
        self.entry_mut(slot.0).value.as_mut()
    }

    /// Marks the flow in `slot` most recently used, lets `f` change it and
    /// measures it again.
    pub fn update<R>(&mut self, slot: Slot, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        self.entry(slot.0).value.as_ref()?;
        // Already the newest (a flight's next segment): relinking it would
        // touch its older neighbour for nothing.
        if self.newest != slot.0 {
            self.unlink(slot.0);
            self.link_newest(slot.0);
        }
        let e = self.entry_mut(slot.0);
        let v = e.value.as_mut()?;
        let r = f(v);
        let now = charge(v);
        let was = std::mem::replace(&mut e.charged, now);
        self.bytes = self.bytes - was as usize + now as usize;
        Some(r)
    }

    /// Inserts a flow that is not in the table (`hash`: what
    /// [`find`](Self::find) handed back for its key); returns its slot and the entry evicted to
    /// make room, if any.
    pub fn insert(&mut self, hash: u64, key: FlowKey, value: V) -> (Slot, Option<(FlowKey, V)>) {
        let evicted = if self.len >= self.capacity {
            self.pop_oldest()
        } else {
            None
        };
        let charged = charge(&value);
        self.bytes += charged as usize;
        let entry = Entry {
            key,
            value: Some(value),
            charged,
            older: NIL,
            newer: NIL,
        };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.entry(i).newer;
            *self.entry_mut(i) = entry;
            i
        } else {
            if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
                self.chunks.push(Vec::with_capacity(CHUNK));
            }
            let full = self.chunks.len() - 1;
            let c = &mut self.chunks[full];
            c.push(entry);
            (full * CHUNK + c.len() - 1) as u32
        };
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        self.index.insert_unique(hash, i, |&j| {
            hasher.hash_one(chunks[j as usize / CHUNK][j as usize % CHUNK].key)
        });
        self.link_newest(i);
        self.len += 1;
        (Slot(i), evicted)
    }

    /// Takes the flow out of `slot`.
    pub fn remove(&mut self, slot: Slot) -> Option<V> {
        let i = slot.0;
        let e = self.entry_mut(i);
        let value = e.value.take()?;
        let (key, charged) = (e.key, e.charged);
        self.bytes -= charged as usize;
        let hash = self.hash(&key);
        if let Ok(found) = self.index.find_entry(hash, |&j| j == i) {
            found.remove();
        }
        self.unlink(i);
        let free = self.free;
        self.entry_mut(i).newer = free;
        self.free = i;
        self.len -= 1;
        Some(value)
    }

    /// The least recently used flow, without promoting it.
    pub fn oldest(&self) -> Option<(&FlowKey, &V)> {
        if self.oldest == NIL {
            return None;
        }
        let e = self.entry(self.oldest);
        Some((&e.key, e.value.as_ref()?))
    }

    pub fn pop_oldest(&mut self) -> Option<(FlowKey, V)> {
        if self.oldest == NIL {
            return None;
        }
        let i = self.oldest;
        let key = self.entry(i).key;
        Some((key, self.remove(Slot(i))?))
    }

    fn unlink(&mut self, i: u32) {
        let (older, newer) = {
            let e = self.entry(i);
            (e.older, e.newer)
        };
        if older == NIL {
            self.oldest = newer;
        } else {
            self.entry_mut(older).newer = newer;
        }
        if newer == NIL {
            self.newest = older;
        } else {
            self.entry_mut(newer).older = older;
        }
    }

    fn link_newest(&mut self, i: u32) {
        let newest = self.newest;
        {
            let e = self.entry_mut(i);
            e.older = newest;
            e.newer = NIL;
        }
        if newest == NIL {
            self.oldest = i;
        } else {
            self.entry_mut(newest).newer = i;
        }
        self.newest = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    impl Footprint for u64 {
        fn footprint(&self) -> usize {
            *self as usize
        }
    }

    fn key(n: u16) -> FlowKey {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        FlowKey::new((ip, n), (ip, 443))
    }

    /// A key is the same both ways, the same for an IPv4 address and its
    /// IPv6-mapped form, and orders its endpoints as their 128-bit numbers
    /// and ports do (which `side` tells apart).
    #[test]
    fn keys_both_ways_and_mapped() {
        use std::net::Ipv6Addr;
        let v4 = |a: u32| IpAddr::V4(Ipv4Addr::from(a));
        let v6 = |a: u128| IpAddr::V6(Ipv6Addr::from(a));
        let mapped = |a: u32| v6(0xffff_0000_0000 | u128::from(a));
        let number = |ip: IpAddr| match ip {
            IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
            IpAddr::V6(a) => u128::from(a),
        };
        let endpoints = [
            (v4(0x0a00_0001), 443),
            (v4(0x0a00_0001), 50_000),
            (v4(0xc000_0201), 443),
            (mapped(0xc000_0201), 8443),
            (v6(0x2001_0db8 << 96 | 1), 443),
            (v6(1 << 127), 1),
            (v6(0), 0),
        ];
        for &a in &endpoints {
            for &b in &endpoints {
                let k = FlowKey::new(a, b);
                assert_eq!(k, FlowKey::new(b, a));
                let smaller = (number(a.0), a.1) <= (number(b.0), b.1);
                assert_eq!(k.side(a), usize::from(!smaller && a != b), "{a:?} {b:?}");
            }
        }
        let (ip, m) = (v4(0xc000_0201), mapped(0xc000_0201));
        assert_eq!(
            FlowKey::new((ip, 1), (v4(7), 2)),
            FlowKey::new((m, 1), (v4(7), 2))
        );
    }

    fn insert(t: &mut FlowTable<u64>, n: u16, v: u64) -> Option<(FlowKey, u64)> {
        match t.find(&key(n)) {
            (h, None) => t.insert(h, key(n), v).1,
            (_, Some(_)) => panic!("{n} is in the table"),
        }
    }

    fn slot(t: &FlowTable<u64>, n: u16) -> Option<Slot> {
        t.find(&key(n)).1
    }

    /// The order the `lru` crate kept: inserting and updating promote,
    /// `get_mut` does not, a full table evicts the least recently used.
    #[test]
    fn evicts_least_recently_used_and_keeps_the_bytes() {
        let mut t = FlowTable::new(3);
        for n in 1..=3 {
            assert!(insert(&mut t, n, 10).is_none());
        }
        let one = slot(&t, 1).unwrap();
        t.update(one, |v| *v = 15);
        *t.get_mut(slot(&t, 2).unwrap()).unwrap() += 0;
        assert_eq!(t.bytes(), 35);
        assert_eq!(insert(&mut t, 4, 1), Some((key(2), 10)));
        assert_eq!(t.oldest().map(|(k, _)| *k), Some(key(3)));
        assert_eq!(t.remove(slot(&t, 3).unwrap()), Some(10));
        assert_eq!(t.oldest().map(|(k, _)| *k), Some(key(1)));
        assert!(slot(&t, 3).is_none() && slot(&t, 2).is_none());
        assert_eq!((t.len(), t.bytes()), (2, 16));
        // The freed slot is reused, and many more flows than a chunk fit.
        let mut t2 = FlowTable::new(5000);
        for n in 0..4000 {
            insert(&mut t2, n, 1);
        }
        for n in (0..4000).step_by(2) {
            t2.remove(slot(&t2, n).unwrap());
        }
        for n in 4000..6000 {
            insert(&mut t2, n, 1);
        }
        assert_eq!(t2.chunks.len(), 4, "2,000 freed slots reused");
        for n in (1..4000).step_by(2).chain(4000..6000) {
            assert!(slot(&t2, n).is_some(), "{n}");
        }
        assert_eq!(t2.pop_oldest().map(|(k, _)| k), Some(key(1)));
    }

    #[test]
    fn side_names_the_endpoint() {
        let (a, b) = (
            (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 443),
            (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000),
        );
        let k = FlowKey::new(a, b);
        assert_eq!((k.side(b), k.side(a)), (0, 1));
        assert_eq!(k, FlowKey::new(b, a));
    }
}
