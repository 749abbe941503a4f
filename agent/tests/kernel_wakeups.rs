//! When the TC program wakes the agent: only when a record takes the
//! ring buffer's pending bytes across a multiple of a quarter of it
//! (bpf/tlsrum.bpf.c `ring_output`), counted as `wakeups`.
//!
//! Regression: every record sent while a quarter or more was pending woke
//! the reader, an interrupt each (a VM exit in a guest). While the agent
//! was slow to drain, each such record cost the kernel ~3.5 us instead of
//! ~0.3 (`cargo run --release -p tlsrum --example kernel_cost`).
//!
//! The loaded program on frames run with BPF_PROG_TEST_RUN, a 64 KiB ring
//! buffer that nothing drains. Needs root and BPF: without them the test
//! says why and passes, except under CI=true, where it fails.

mod common;

use common::test_run::{tcp, Kernel, SYN};
use tlsrum::ebpf::EbpfOptions;

const RING: u32 = 64 << 10;
/// A SYN's event in the ring: its 8-byte record header and the event's.
const SYN_RECORD: u32 = 8 + 88;

#[test]
fn a_record_wakes_the_reader_only_across_each_quarter_of_the_ring() {
    let opts = EbpfOptions {
        ports: vec![443],
        ringbuf_bytes: RING,
        ..Default::default()
    };
    let Some(mut k) = Kernel::load(
        "a_record_wakes_the_reader_only_across_each_quarter_of_the_ring",
        &opts,
    ) else {
        return;
    };
    // A SYN without ACK on one tuple: each run opens the connection
    // again and sends its header.
    let syn = tcp(true, 40000, 1000, 0, SYN, &[]);

    // Just short of three quarters, then the ring filled up.
    let below = (3 * RING / 4 - 1) / SYN_RECORD;
    k.0.test_run_repeat(&syn, below).unwrap();
    let c = k.counters();
    assert_eq!(c["events_sent"], u64::from(below), "{c:?}");
    assert_eq!(c["wakeups"], 2, "a quarter and a half crossed: {c:?}");

    let fits = RING / SYN_RECORD;
    k.0.test_run_repeat(&syn, fits - below + 100).unwrap();
    let c = k.counters();
    assert_eq!(c["events_sent"], u64::from(fits), "{c:?}");
    assert_eq!(c["ringbuf_full"], 100, "{c:?}");
    assert_eq!(
        c["wakeups"], 3,
        "three quarters crossed; records past it and those lost to the full ring wake nobody: {c:?}"
    );
}
