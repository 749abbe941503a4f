//! The process's allocator settings (mimalloc, set in `main`): what each
//! costs and saves was measured side by side (bench/README.md).

/// mimalloc's `mi_option_e` values (mimalloc.h); the Rust bindings name
/// no constant for these.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// No transparent huge pages for this process. mimalloc asks for them on
/// its arenas, and each first touch of 2 MiB then zeroed the whole huge
/// page: on `big.pcap` peak RSS was 56 MiB at one thread and 132 MiB at
/// two, against 40 and 78 MiB without, and the kernel's zeroing was the
/// reading thread's largest cost at two threads (a quarter of its
/// samples). Side by side (9 alternating pairs, twice), replay was
/// 1.02-1.06x faster at one thread and 1.10x at two without them. Called before any thread starts: mimalloc reads
/// the option at each OS allocation, and the kernel setting covers hosts
/// whose THP mode is `always` (mimalloc does the same when the option is
/// set from its environment variable).
pub fn no_huge_pages() {
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    // SAFETY: prctl with integer arguments; a kernel that does not know
    // the option returns an error, which changes nothing.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// A live agent's peak memory is what a fleet sizes hosts by: freed pages
/// go back to the OS at once instead of after mimalloc's purge delay.
/// Under a flood that delay let a live agent's peak swing by ~60 MiB from
/// run to run (331-364 MiB with it at 0, 344-420 MiB without, in
/// agent/tests/flood_memory.rs). Replay keeps the default: it is faster
/// there and its peak is not a service's.
pub fn return_freed_memory_promptly() {
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}
