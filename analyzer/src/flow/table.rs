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
        FlowKey { lo_addr: lo.0, hi_addr: hi.0, ports: (u32::from(lo.1) << 16) | u32::from(hi.1) }
    }
}

/// An LRU map with a hard capacity; inserting into a full table hands back
/// the least recently used entry so the caller can finish it.
pub struct FlowTable<V> {
    map: LruCache<FlowKey, V>,
}

impl<V> FlowTable<V> {
    pub fn new(capacity: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(capacity.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        FlowTable { map: LruCache::new(cap) }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Looks up a flow and marks it most recently used.
    pub fn get_mut(&mut self, key: &FlowKey) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Inserts a flow; returns the entry evicted to make room, if any.
    pub fn insert(&mut self, key: FlowKey, value: V) -> Option<(FlowKey, V)> {
        match self.map.push(key, value) {
            Some((k, v)) if k != key => Some((k, v)),
            _ => None,
        }
    }

    /// Looks up a flow without marking it used (for flows already finished,
    /// whose packets should cost as little as possible).
    pub fn peek_mut(&mut self, key: &FlowKey) -> Option<&mut V> {
        self.map.peek_mut(key)
    }

    pub fn remove(&mut self, key: &FlowKey) -> Option<V> {
        self.map.pop(key)
    }

    /// The least recently used flow, without promoting it.
    pub fn oldest(&self) -> Option<(&FlowKey, &V)> {
        self.map.peek_lru()
    }

    pub fn pop_oldest(&mut self) -> Option<(FlowKey, V)> {
        self.map.pop_lru()
    }
}
