//! What flow state costs, for the memory budget ([`crate::Config::max_memory`]).
//!
//! Each flow's footprint is estimated from its structs' sizes and its
//! buffers' capacities, and kept up to date as its packets arrive, so the
//! budget is deterministic (the same capture always evicts the same flows)
//! and costs a few loads a handshake packet, unlike counting allocations.
//! Allocator overhead is in [`ALLOC_OVERHEAD`]; what the estimate leaves
//! out (the shared session-ID and certificate caches, fragmentation) is in
//! the README's limits table, next to measured peaks.

use std::hash::Hash;
use std::mem::size_of;
use std::num::NonZeroUsize;

use lru::LruCache;

/// Bytes a heap allocation costs beyond what it holds (glibc malloc's
/// header and rounding, on average).
pub const ALLOC_OVERHEAD: usize = 16;

/// Bytes a hash-table or LRU entry costs beyond its key and value: the
/// `lru` crate's per-entry allocation and two links, the index's slot and
/// control byte at its usual load.
pub const ENTRY_OVERHEAD: usize = ALLOC_OVERHEAD + 2 * size_of::<usize>() + 16;

/// An LRU cache of at most `cap` entries (at least one) whose table grows
/// as entries come. `LruCache::new` reserves the table for `cap` at once:
/// 4.5 MB for the QUIC connections (`--max-flows` 200,000) before the
/// first packet, in a TCP-only capture too, and a replay of a small
/// capture touched 22 MB.
pub fn lru<K: Hash + Eq, V>(cap: usize) -> LruCache<K, V> {
    let mut cache = LruCache::unbounded();
    cache.resize(NonZeroUsize::new(cap).unwrap_or(NonZeroUsize::MIN));
    cache
}

/// Heap bytes a value owns, beyond its own `size_of`.
pub trait HeapSize {
    fn heap_size(&self) -> usize;
}

impl<T: Copy> HeapSize for Vec<T> {
    fn heap_size(&self) -> usize {
        match self.capacity() {
            0 => 0,
            n => n * size_of::<T>() + ALLOC_OVERHEAD,
        }
    }
}

/// A list kept inline until it outgrows its room: heap only then.
impl<A: smallvec::Array> HeapSize for smallvec::SmallVec<A>
where
    A::Item: Copy,
{
    fn heap_size(&self) -> usize {
        if self.spilled() {
            self.capacity() * size_of::<A::Item>() + ALLOC_OVERHEAD
        } else {
            0
        }
    }
}

/// Heap bytes of an allocation of `bytes` of text (none for none).
fn text(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        n => n + ALLOC_OVERHEAD,
    }
}

impl HeapSize for String {
    fn heap_size(&self) -> usize {
        text(self.capacity())
    }
}

impl HeapSize for Box<str> {
    fn heap_size(&self) -> usize {
        text(self.len())
    }
}

/// A fingerprint the record shares with the memo that made it
/// ([`crate::tls::ja4`]): counted as if the record owned it, since the
/// memo may drop its copy first.
impl HeapSize for std::sync::Arc<str> {
    fn heap_size(&self) -> usize {
        text(self.len())
    }
}

/// A name that is either static (no heap) or made for this value.
impl HeapSize for std::borrow::Cow<'static, str> {
    fn heap_size(&self) -> usize {
        match self {
            std::borrow::Cow::Borrowed(_) => 0,
            std::borrow::Cow::Owned(s) => s.heap_size(),
        }
    }
}

impl<T: HeapSize> HeapSize for Option<T> {
    fn heap_size(&self) -> usize {
        self.as_ref().map_or(0, HeapSize::heap_size)
    }
}

impl<T: HeapSize> HeapSize for Box<T> {
    fn heap_size(&self) -> usize {
        size_of::<T>() + ALLOC_OVERHEAD + (**self).heap_size()
    }
}

/// Strings in a vector: the vector and each string.
pub fn strings(v: &[String], capacity: usize) -> usize {
    let own = if capacity == 0 {
        0
    } else {
        capacity * size_of::<String>() + ALLOC_OVERHEAD
    };
    own + v.iter().map(HeapSize::heap_size).sum::<usize>()
}

impl HeapSize for crate::record::ConnectionRecord {
    /// A record held on its flow until the close (`--record-at close`):
    /// its strings and lists.
    fn heap_size(&self) -> usize {
        let s = |o: &Option<String>| o.heap_size();
        let certs = self.certs.as_ref().map_or(0, |c| {
            size_of::<crate::record::Certs>()
                + c.leaf_subject.heap_size()
                + c.leaf_issuer.heap_size()
        });
        // The endpoints are held in place (`EndpointText`): no heap.
        s(&self.sni)
            + self.cipher.heap_size()
            + self.alpn.heap_size()
            + self.offered.heap_size()
            + self.unsettled.as_ref().map_or(0, |u| {
                size_of::<crate::record::Unsettled>() + u.offered.heap_size()
            })
            + certs
            + s(&self.failure)
            + self.notes.heap_size()
            + self.ja4.heap_size()
            + self.ja4_stable.heap_size()
            + self.ja4s.heap_size()
            + s(&self.alpn_negotiated)
            + s(&self.proxied_client)
            + s(&self.capture)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_lru_holds_its_cap_and_forgets_the_least_recently_used() {
        let mut cache = super::lru::<u32, ()>(3);
        for k in 0..3 {
            cache.put(k, ());
        }
        // 0 used again: 1 is now the least recently used.
        assert!(cache.get(&0).is_some());
        cache.put(3, ());
        assert_eq!(cache.len(), 3);
        assert!(!cache.contains(&1));
        assert!([0, 2, 3].iter().all(|k| cache.contains(k)));
        // A cap of zero holds one, as `LruCache::new` cannot hold none.
        let mut one = super::lru::<u32, ()>(0);
        one.put(1, ());
        one.put(2, ());
        assert_eq!(one.len(), 1);
    }
}
