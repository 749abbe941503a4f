//! Capture sources: where packets come from. Each source hands the
//! analyzer timestamped frames (a pcap file, libpcap live) or packets with
//! the 5-tuple already decoded (eBPF); `replay` and `live` drive the
//! analyzer through [`Source`] alone (see `pipeline`). A new
//! source (uprobes) is one new file here implementing it; Zeek's ssl.log
//! ([`zeek_log`]) holds records, not packets, and goes to the sinks directly.

mod capture_format;
pub mod ebpf;
pub mod pcap_file;
pub mod pcap_live;
pub mod zeek_log;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use analyzer::counters::Counter;
use analyzer::wire::{LinkType, Packet};
use analyzer::{Analyzer, Endpoint};
use anyhow::Result;

/// The kernel buffer between a live capture and the agent when `live
/// --buffer-size` is not given: the eBPF ring buffer, or libpcap's on each
/// interface. At ~55,000 handshakes/s from two senders on 2 cores, an
/// 8 MiB ring (~40 ms of events past its wakeup mark) overflowed while the
/// agent waited for a CPU; 32 MiB did not (bench/live/README.md (b)).
pub const DEFAULT_BUFFER_BYTES: usize = 32 << 20;

/// One captured unit: a frame (pcap) or a decoded packet (eBPF).
pub enum Captured<'a> {
    Frame {
        ts: f64,
        /// Borrowed from the source, where it stays the same for many
        /// frames: built into each frame, it was written as two 2-byte
        /// halves that the analyzer's 4-byte read waited on, a
        /// store-forwarding stall a packet.
        link: &'a LinkType,
        data: &'a [u8],
    },
    Packet {
        ts: f64,
        packet: Packet<'a>,
    },
}

impl Captured<'_> {
    /// Hands it to the analyzer: the one place that knows what each kind
    /// of captured unit is to the analyzer.
    pub fn analyze(&self, analyzer: &mut Analyzer) {
        match self {
            Captured::Frame { ts, link, data } => analyzer.push_frame(*ts, **link, data),
            Captured::Packet { ts, packet } => analyzer.push_packet(*ts, packet),
        }
    }
}

/// Whether a source can produce more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// More may come (live sources always say this).
    Open,
    /// Everything was handed over (the end of a capture file).
    Ended,
}

/// A capture's bytes as one read-only mapping that its frames are
/// borrowed from (a plain capture file): a sharded replay hands its shards
/// places in it rather than copies.
pub struct Mapping {
    pub bytes: Arc<memmap2::Mmap>,
    /// The source gives no page back to the kernel from this offset on:
    /// the shards may still read there. Whoever holds the mapping moves it.
    pub keep: Arc<AtomicUsize>,
    /// The bytes before this are mapped in, or being mapped in by a thread
    /// that claimed them ([`populate_next`]): an idle thread may map ahead
    /// of the one reading.
    pub populated: Arc<AtomicUsize>,
    /// The bytes before this were given back to the kernel, or are being
    /// given back by a thread that claimed them ([`release_before`]).
    pub released: Arc<AtomicUsize>,
}

/// Bytes of a mapping put into the page tables at a time.
pub const POPULATE_CHUNK: usize = 1 << 20;

/// Maps in the next [`POPULATE_CHUNK`] of `map` (`MADV_POPULATE_READ`) if
/// `populated` is short of `upto`; says whether it did. The chunk is
/// claimed first, so two threads never map the same one: the thread that
/// reads and an idle one ahead of it share the work (on a capture of bulk
/// traffic, mapping the file in was a third of a replay's time).
pub fn populate_next(map: &memmap2::Mmap, populated: &AtomicUsize, upto: usize) -> bool {
    let from = populated.load(std::sync::atomic::Ordering::Relaxed);
    if from >= upto.min(map.len()) {
        return false;
    }
    let len = POPULATE_CHUNK.min(map.len() - from);
    let claimed = populated.compare_exchange(
        from,
        from + len,
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
    );
    if claimed.is_ok() {
        // Only a hint: a page not mapped in is faulted in when read.
        let _ = map.advise_range(memmap2::Advice::PopulateRead, from, len);
    }
    true
}

/// Pages of a mapping given back at a time: a multiple of every page
/// size, and few calls.
const RELEASE_STEP: usize = 4 << 20;

/// Gives back the pages of `map` before `upto` (rounded down to 4 MiB)
/// that no thread gave back yet (`MADV_DONTNEED`; the page cache keeps
/// them): the process's resident memory is then the analyzer's, not the
/// file's. Claimed like [`populate_next`], so an idle thread can take
/// this off the reading one; says whether there was anything to give.
/// The caller vouches that nothing reads before `upto` any more.
pub fn release_before(map: &memmap2::Mmap, released: &AtomicUsize, upto: usize) -> bool {
    let upto = upto.min(map.len()) / RELEASE_STEP * RELEASE_STEP;
    let from = released.load(std::sync::atomic::Ordering::Relaxed);
    if upto <= from {
        return false;
    }
    let claimed = released.compare_exchange(
        from,
        upto,
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
    );
    if claimed.is_ok() {
        // SAFETY: the map is read only, so no change is lost: a page read
        // again is read anew from the file (the caller vouches that none
        // is read before `upto`).
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, upto - from)
        };
    }
    true
}

/// Asks the cache for the first `lines` cache lines of `bytes`, ahead of
/// their use; a hint, never a fault.
pub fn prefetch(bytes: &[u8], lines: usize) {
    // A stride over the addresses: `chunks(64).take(lines)` cost 12
    // instructions a line, 4 % of a replay's (the reader asks for every
    // line of the file).
    #[cfg(target_arch = "x86_64")]
    for offset in (0..bytes.len().div_ceil(64).min(lines)).map(|i| i * 64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing and cannot fault (SSE, which
        // every x86_64 has); the address is inside `bytes`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(offset).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, lines);
}

/// Asks the cache for every line of `value`: one another core wrote last.
pub fn prefetch_value<T>(value: &T) {
    let size = std::mem::size_of::<T>();
    // Every 64 bytes from its start, and its last byte: the lines it
    // spans, however it is aligned. (A loop over a constant, unrolled; an
    // iterator chain cost ~15 instructions a call.)
    let mut offset = 0;
    while offset < size {
        prefetch_at((value as *const T).cast(), offset);
        offset += 64;
    }
    prefetch_at((value as *const T).cast(), size.saturating_sub(1));
}

/// Asks the cache for the line `offset` bytes from `at`: a hint, which
/// neither reads nor faults, so `at + offset` may lie anywhere.
#[inline(always)]
pub fn prefetch_at(at: *const u8, offset: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing and cannot fault (SSE, which
        // every x86_64 has); the address is only computed, never read.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(offset).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, offset);
}

/// A capture source.
pub trait Source {
    /// Waits up to `timeout` and hands over what arrived. Sources that read
    /// ahead of time (files) hand over a bounded batch without waiting.
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status>;
    /// The analyzer is done with these flows, which still sent a segment
    /// (sender first; a flow may come more than once): stop sending them if
    /// possible.
    fn stragglers(&mut self, _flows: &[(Endpoint, Endpoint)]) {}
    /// Whether [`Source::stragglers`] does anything: without a filter to
    /// tell, every segment of bulk traffic after a handshake would be one.
    fn wants_stragglers(&self) -> bool {
        false
    }
    /// Cumulative source-side counters (kernel events and drops by reason,
    /// capture buffer drops), each with its help text, every one of them
    /// on every call (zero rather than absent).
    fn counters(&mut self) -> Vec<Counter> {
        Vec::new()
    }
    /// The mapping its frames are borrowed from, if there is one (see
    /// [`Mapping`]); from then on it keeps the pages `keep` says.
    fn mapping(&mut self) -> Option<Mapping> {
        None
    }
    /// Link types of what it captures, for --write-pcap.
    fn link_types(&self) -> Vec<LinkType>;
    /// Re-attach interfaces that went away and came back.
    fn check_interfaces(&mut self) -> Result<()> {
        Ok(())
    }
    /// Interfaces not captured now (gone, to be re-attached when they
    /// are back): `/healthz` reports them.
    fn missing_interfaces(&self) -> Vec<String> {
        Vec::new()
    }
    /// Detach from the kernel cleanly.
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// A read-only mapping of `len` bytes of 7 in a scratch file.
    fn mapped(len: usize) -> memmap2::Mmap {
        let path = std::env::temp_dir().join(format!("tlsrum-map-{}-{len}", std::process::id()));
        std::fs::write(&path, vec![7u8; len]).expect("scratch file");
        let file = std::fs::File::open(&path).expect("scratch file");
        // SAFETY: the file is this test's own and nothing writes it.
        let map = unsafe { memmap2::Mmap::map(&file) }.expect("map");
        let _ = std::fs::remove_file(&path);
        map
    }

    #[test]
    fn mapping_in_claims_a_chunk_at_a_time_up_to_the_end() {
        let len = 5 * POPULATE_CHUNK / 2;
        let map = mapped(len);
        let populated = AtomicUsize::new(0);
        assert!(populate_next(&map, &populated, 1));
        assert_eq!(populated.load(Ordering::Relaxed), POPULATE_CHUNK);
        assert!(
            !populate_next(&map, &populated, POPULATE_CHUNK),
            "already that far"
        );
        while populate_next(&map, &populated, usize::MAX) {}
        assert_eq!(
            populated.load(Ordering::Relaxed),
            len,
            "the last chunk is short"
        );
        assert!(map.iter().all(|&b| b == 7));
    }

    #[test]
    fn pages_are_given_back_in_whole_steps_and_never_twice() {
        let map = mapped(2 * RELEASE_STEP + RELEASE_STEP / 2);
        let released = AtomicUsize::new(0);
        assert!(
            !release_before(&map, &released, RELEASE_STEP - 1),
            "less than a step"
        );
        assert!(release_before(&map, &released, RELEASE_STEP + 5));
        assert_eq!(released.load(Ordering::Relaxed), RELEASE_STEP);
        assert!(
            !release_before(&map, &released, RELEASE_STEP),
            "never backwards"
        );
        assert!(release_before(&map, &released, usize::MAX));
        assert_eq!(
            released.load(Ordering::Relaxed),
            2 * RELEASE_STEP,
            "whole steps, inside the map"
        );
        assert!(!release_before(&map, &released, usize::MAX));
        // A page given back reads again from the file.
        assert!(map.iter().all(|&b| b == 7));
    }
}
