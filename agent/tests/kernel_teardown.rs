//! The kernel deletes a TCP flow's state when its connection closes: at
//! the segment acknowledging the second FIN, from a side that sent its own,
//! or at a RST once the peer sent its FIN (bpf/tlsrum.bpf.c
//! `flow_closed`), counted as `closed`. Before, a closed
//! connection's state stayed until the LRU map evicted it: at 25,000
//! handshakes/s the 65,536-entry map was full of closed connections within
//! seconds, every new flow evicted the coldest entry, and lookups walked
//! past dead ones.
//!
//! The loaded program on frames run with BPF_PROG_TEST_RUN. Needs root and
//! BPF: without them the test says why and passes, except under CI=true,
//! where it fails.

mod common;

use common::test_run::{tcp, Kernel, ACK, FIN, RST, SYN};
use tlsrum::ebpf::EbpfOptions;

/// A segment without payload between the client's `port` and 443.
fn seg(from_client: bool, port: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    tcp(from_client, port, seq, ack, flags, &[])
}

/// The TCP flags of the events the frame made the kernel send.
fn run(k: &mut Kernel, frame: &[u8]) -> Vec<u8> {
    k.run(frame).iter().map(|e| e.tcp_flags).collect()
}

/// Whether the kernel's flow map holds the connection: a bare ACK of a
/// flow without state creates none and is counted so. (Its ack number
/// acknowledges nothing, so it cannot close the connection.)
fn knows(k: &mut Kernel, port: u16) -> bool {
    let before = k.counters()["unknown_flow_empty"];
    k.run(&seg(true, port, 1001, 1, ACK));
    k.counters()["unknown_flow_empty"] == before
}

/// SYN, SYN-ACK, ACK from the client's `port` (client ISN 1000, server's
/// 5000): the client's next byte is 1001, the server's 5001.
fn open(k: &mut Kernel, port: u16) {
    k.run(&seg(true, port, 1000, 0, SYN));
    k.run(&seg(false, port, 5000, 1001, SYN | ACK));
    k.run(&seg(true, port, 1001, 5001, ACK));
}

#[test]
fn a_closed_connection_leaves_the_flow_map() {
    let opts = EbpfOptions {
        ports: vec![443],
        ..Default::default()
    };
    let Some(mut k) = Kernel::load("a_closed_connection_leaves_the_flow_map", &opts) else {
        return;
    };
    // The client closes first; the server's FIN+ACK acknowledges the
    // client's FIN; the client's ACK of the server's FIN is the last.
    open(&mut k, 40001);
    assert_eq!(
        run(&mut k, &seg(true, 40001, 1001, 5001, FIN | ACK)),
        vec![FIN | ACK]
    );
    assert_eq!(
        run(&mut k, &seg(false, 40001, 5001, 1002, FIN | ACK)),
        vec![FIN | ACK]
    );
    assert_eq!(k.counters()["closed"], 0, "deleted before the last ACK");
    k.run(&seg(true, 40001, 1002, 5002, ACK));
    assert_eq!(k.counters()["closed"], 1);
    assert!(!knows(&mut k, 40001), "the flow is still in the map");
    // A retransmitted FIN still goes, as a header.
    assert_eq!(
        run(&mut k, &seg(false, 40001, 5001, 1002, FIN | ACK)),
        vec![FIN | ACK]
    );

    // Not at a half close, nor at an ACK that acknowledges less than the
    // FIN; nor at a RST before the peer's FIN (the peer may still have
    // data in flight).
    open(&mut k, 40002);
    k.run(&seg(false, 40002, 5001, 1001, FIN | ACK));
    k.run(&seg(true, 40002, 1001, 5002, ACK));
    assert!(knows(&mut k, 40002), "deleted at a half close");
    k.run(&seg(true, 40002, 1001, 5002, FIN | ACK));
    k.run(&seg(false, 40002, 5002, 1001, ACK));
    assert!(knows(&mut k, 40002), "deleted at an ACK short of the FIN");
    open(&mut k, 40003);
    k.run(&seg(false, 40003, 5001, 1001, RST | ACK));
    assert!(knows(&mut k, 40003), "deleted at a RST");
    assert_eq!(k.counters()["closed"], 1);
    // A RST answering the peer's FIN: the peer sends no more data.
    open(&mut k, 40004);
    k.run(&seg(true, 40004, 1001, 5001, FIN | ACK));
    assert_eq!(run(&mut k, &seg(false, 40004, 5001, 0, RST)), vec![RST]);
    assert!(
        !knows(&mut k, 40004),
        "still there after the RST answering a FIN"
    );
    assert_eq!(k.counters()["closed"], 2);

    // The tuple reused: a new connection, a new state, closed again.
    let new_flows = k.counters()["new_flows"];
    open(&mut k, 40001);
    assert_eq!(k.counters()["new_flows"], new_flows + 1);
    k.run(&seg(false, 40001, 5001, 1001, FIN | ACK));
    k.run(&seg(true, 40001, 1001, 5002, FIN | ACK));
    k.run(&seg(false, 40001, 5002, 1002, ACK));
    assert_eq!(k.counters()["closed"], 3, "server side's last ACK");
}
