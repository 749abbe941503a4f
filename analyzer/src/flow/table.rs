//! The flow table: bounded, least-recently-used eviction, keyed by the
//! unordered pair of endpoints.

use std::net::IpAddr;

use lru::LruCache;

pub type Endpoint = (IpAddr, u16);

/// Both directions of a connection map to the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    lo: Endpoint,
    hi: Endpoint,
}

impl FlowKey {
    pub fn new(a: Endpoint, b: Endpoint) -> Self {
        if a <= b {
            FlowKey { lo: a, hi: b }
        } else {
            FlowKey { lo: b, hi: a }
        }
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
