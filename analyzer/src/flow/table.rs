//! The flow table: bounded, least-recently-used eviction, keyed by the
//! unordered pair of endpoints.

use std::net::IpAddr;

use lru::LruCache;

pub type Endpoint = (IpAddr, u16);

/// Both directions of a connection map to the same key: the two endpoints
/// as 128-bit addresses (IPv4 mapped) and ports, smaller one first. Plain
/// integers hash in a few instructions (IpAddr's derived Hash is byte-wise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    lo_addr: u128,
    hi_addr: u128,
    ports: u32,
}

fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl FlowKey {
    pub fn new(a: Endpoint, b: Endpoint) -> Self {
        let (a, b) = ((as_u128(a.0), a.1), (as_u128(b.0), b.1));
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
        usize::from((as_u128(e.0), e.1) != (self.lo_addr, (self.ports >> 16) as u16))
    }
}

/// What a table value costs in memory (see [`crate::memory`]).
pub trait Footprint {
    fn footprint(&self) -> usize;
}

struct Entry<V> {
    value: V,
    /// What the value cost when last measured (it counts in `bytes`).
    charged: u32,
}

/// An LRU map with a hard capacity; inserting into a full table hands back
/// the least recently used entry so the caller can finish it. It keeps the
/// sum of its values' footprints, measured on insert and on
/// [`update`](Self::update), for the memory budget.
pub struct FlowTable<V> {
    map: LruCache<FlowKey, Entry<V>>,
    bytes: usize,
}

fn charge<V: Footprint>(v: &V) -> u32 {
    u32::try_from(v.footprint()).unwrap_or(u32::MAX)
}

impl<V: Footprint> FlowTable<V> {
    pub fn new(capacity: usize) -> Self {
        let cap =
            std::num::NonZeroUsize::new(capacity.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        FlowTable {
            map: LruCache::new(cap),
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes the flows in the table hold, as last measured.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Looks up a flow, marks it most recently used, lets `f` change it and
    /// measures it again.
    pub fn update<R>(&mut self, key: &FlowKey, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let e = self.map.get_mut(key)?;
        let r = f(&mut e.value);
        let now = charge(&e.value);
        self.bytes = self.bytes - e.charged as usize + now as usize;
        e.charged = now;
        Some(r)
    }

    /// Inserts a flow; returns the entry evicted to make room, if any.
    pub fn insert(&mut self, key: FlowKey, value: V) -> Option<(FlowKey, V)> {
        let charged = charge(&value);
        self.bytes += charged as usize;
        match self.map.push(key, Entry { value, charged }) {
            Some((k, e)) => {
                self.bytes -= e.charged as usize;
                (k != key).then_some((k, e.value))
            }
            None => None,
        }
    }

    /// Looks up a flow without marking it used (for flows already finished,
    /// whose packets should cost as little as possible). The caller must
    /// not grow it: it is not measured again.
    pub fn peek_mut(&mut self, key: &FlowKey) -> Option<&mut V> {
        self.map.peek_mut(key).map(|e| &mut e.value)
    }

    pub fn remove(&mut self, key: &FlowKey) -> Option<V> {
        let e = self.map.pop(key)?;
        self.bytes -= e.charged as usize;
        Some(e.value)
    }

    /// The least recently used flow, without promoting it.
    pub fn oldest(&self) -> Option<(&FlowKey, &V)> {
        self.map.peek_lru().map(|(k, e)| (k, &e.value))
    }

    pub fn pop_oldest(&mut self) -> Option<(FlowKey, V)> {
        let (k, e) = self.map.pop_lru()?;
        self.bytes -= e.charged as usize;
        Some((k, e.value))
    }
}
