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

use std::collections::BTreeMap;
use std::time::Duration;

use etherparse::PacketBuilder;
use tlsrum::ebpf::{EbpfCapture, EbpfOptions};

const CLIENT: [u8; 4] = [192, 0, 2, 2];
const SERVER: [u8; 4] = [192, 0, 2, 1];
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// A TCP segment between the client's `port` and the server's 443.
fn seg(from_client: bool, port: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let (src, dst, sport, dport) = if from_client {
        (CLIENT, SERVER, port, 443)
    } else {
        (SERVER, CLIENT, 443, port)
    };
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ipv4(src, dst, 64)
        .tcp(sport, dport, seq, 65535);
    if flags & SYN != 0 {
        b = b.syn();
    }
    if flags & FIN != 0 {
        b = b.fin();
    }
    if flags & RST != 0 {
        b = b.rst();
    }
    if flags & ACK != 0 {
        b = b.ack(ack);
    }
    let mut out = Vec::new();
    b.write(&mut out, &[]).unwrap();
    out
}

struct Kernel(EbpfCapture);

impl Kernel {
    fn load(test: &str) -> Option<Self> {
        if common::skip_unless(test, &[common::Need::Root, common::Need::Bpf]) {
            return None;
        }
        Some(Kernel(
            EbpfCapture::load(&EbpfOptions {
                ports: vec![443],
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("loading the eBPF programs: {e:#}")),
        ))
    }

    /// Runs the frame; the TCP flags of the events it sent.
    fn run(&mut self, frame: &[u8]) -> Vec<u8> {
        self.0.test_run(frame).expect("BPF_PROG_TEST_RUN");
        let mut flags = Vec::new();
        self.0
            .poll(Duration::ZERO, &mut |e| flags.push(e.header.tcp_flags))
            .expect("reading the ring buffer");
        flags
    }

    fn counters(&self) -> BTreeMap<&'static str, u64> {
        self.0
            .counters()
            .expect("kernel counters")
            .into_iter()
            .collect()
    }

    /// Whether the kernel's flow map holds the connection: a bare ACK of
    /// a flow without state creates none and is counted so. (Its ack
    /// number acknowledges nothing, so it cannot close the connection.)
    fn knows(&mut self, port: u16) -> bool {
        let before = self.counters()["unknown_flow_empty"];
        self.run(&seg(true, port, 1001, 1, ACK));
        self.counters()["unknown_flow_empty"] == before
    }
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
    let Some(mut k) = Kernel::load("a_closed_connection_leaves_the_flow_map") else {
        return;
    };
    // The client closes first; the server's FIN+ACK acknowledges the
    // client's FIN; the client's ACK of the server's FIN is the last.
    open(&mut k, 40001);
    assert_eq!(
        k.run(&seg(true, 40001, 1001, 5001, FIN | ACK)),
        vec![FIN | ACK]
    );
    assert_eq!(
        k.run(&seg(false, 40001, 5001, 1002, FIN | ACK)),
        vec![FIN | ACK]
    );
    assert_eq!(k.counters()["closed"], 0, "deleted before the last ACK");
    k.run(&seg(true, 40001, 1002, 5002, ACK));
    assert_eq!(k.counters()["closed"], 1);
    assert!(!k.knows(40001), "the flow is still in the map");
    // A retransmitted FIN still goes, as a header.
    assert_eq!(
        k.run(&seg(false, 40001, 5001, 1002, FIN | ACK)),
        vec![FIN | ACK]
    );

    // Not at a half close, nor at an ACK that acknowledges less than the
    // FIN; nor at a RST before the peer's FIN (the peer may still have
    // data in flight).
    open(&mut k, 40002);
    k.run(&seg(false, 40002, 5001, 1001, FIN | ACK));
    k.run(&seg(true, 40002, 1001, 5002, ACK));
    assert!(k.knows(40002), "deleted at a half close");
    k.run(&seg(true, 40002, 1001, 5002, FIN | ACK));
    k.run(&seg(false, 40002, 5002, 1001, ACK));
    assert!(k.knows(40002), "deleted at an ACK short of the FIN");
    open(&mut k, 40003);
    k.run(&seg(false, 40003, 5001, 1001, RST | ACK));
    assert!(k.knows(40003), "deleted at a RST");
    assert_eq!(k.counters()["closed"], 1);
    // A RST answering the peer's FIN: the peer sends no more data.
    open(&mut k, 40004);
    k.run(&seg(true, 40004, 1001, 5001, FIN | ACK));
    assert_eq!(k.run(&seg(false, 40004, 5001, 0, RST)), vec![RST]);
    assert!(!k.knows(40004), "still there after the RST answering a FIN");
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
