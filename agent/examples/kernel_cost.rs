//! What one packet costs the TC program, by the path it takes: the kernel
//! runs the ingress program N times on one frame (BPF_PROG_TEST_RUN) and
//! reports its mean run time. Bulk traffic takes the first four paths, so
//! they bound what the agent adds to a bulk transfer; the last three send
//! an event, as a handshake's packets do.
//!
//!   cargo run --release -p tlsrum --example kernel_cost [-- REPEAT]
//!
//! Needs root (BPF). The maps stay hot and the frame is the same every run:
//! compare paths and builds with these figures, not live packets.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, Result};
use etherparse::PacketBuilder;
use tlsrum::ebpf::{EbpfCapture, EbpfOptions, FlowTuple};

const CLIENT: [u8; 4] = [192, 0, 2, 2];
const SERVER: [u8; 4] = [192, 0, 2, 1];
const MSS: usize = 1448;

/// An Ethernet frame of a TCP segment between the client's `port` and the
/// server's 443 (or `dport`), client to server unless `to_client`.
#[derive(Clone, Copy)]
struct Seg<'a> {
    port: u16,
    dport: u16,
    to_client: bool,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    payload: &'a [u8],
}

impl Seg<'_> {
    fn frame(&self) -> Vec<u8> {
        let (src, dst, sport, dport) = if self.to_client {
            (SERVER, CLIENT, self.dport, self.port)
        } else {
            (CLIENT, SERVER, self.port, self.dport)
        };
        let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ipv4(src, dst, 64)
            .tcp(sport, dport, self.seq, 65535);
        if self.syn {
            b = b.syn();
        }
        if let Some(ack) = self.ack {
            b = b.ack(ack);
        }
        let mut out = Vec::with_capacity(self.payload.len() + 60);
        b.write(&mut out, self.payload).expect("frame");
        out
    }
}

/// A client-to-server data segment acknowledging `ack`.
fn data(port: u16, dport: u16, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    Seg {
        port,
        dport,
        to_client: false,
        seq,
        ack: Some(ack),
        syn: false,
        payload,
    }
    .frame()
}

/// SYN and SYN-ACK of a connection from the client's `port` to 443; the
/// client's first data byte is CISN + 1, the server's SISN + 1.
fn open(bpf: &mut EbpfCapture, port: u16) -> Result<()> {
    let syn = |to_client, seq, ack| Seg {
        port,
        dport: 443,
        to_client,
        seq,
        ack,
        syn: true,
        payload: &[],
    };
    bpf.test_run(&syn(false, CISN, None).frame())?;
    bpf.test_run(&syn(true, SISN, Some(CISN + 1)).frame())
}

const CISN: u32 = 1000;
/// Runs of a row whose every run sends an event: the ring buffer
/// ([`RING_BYTES`], drained between rows) holds ~13,000 of the largest.
const SENDING_RUNS: u32 = 10_000;
/// 8 MiB, not the agent's default: [`SENDING_RUNS`] of a row must take it
/// past the marks where a record wakes the reader.
const RING_BYTES: u32 = 8 << 20;
const SISN: u32 = 5000;

fn main() -> Result<()> {
    let repeat: u32 = match std::env::args().nth(1) {
        Some(n) => n.parse().context("REPEAT must be a number")?,
        None => 1_000_000,
    };
    let mut bpf = EbpfCapture::load(&EbpfOptions {
        ports: vec![443],
        ringbuf_bytes: RING_BYTES,
        ..Default::default()
    })
    .context("loading the TC programs (root and BPF needed)")?;
    let body = vec![0x17u8; MSS];
    let mut rows: Vec<(&str, Vec<u8>)> = Vec::new();

    // Not a watched port: parse and port check only.
    rows.push(("unwatched port", data(40000, 5201, 1, 1, &body)));

    // A flow the kernel (or user space) has finished: a flow-map lookup.
    let done = FlowTuple {
        src: IpAddr::V4(Ipv4Addr::from(CLIENT)),
        dst: IpAddr::V4(Ipv4Addr::from(SERVER)),
        src_port: 40001,
        dst_port: 443,
        proto: 6,
    };
    bpf.mark_done(done)?;
    rows.push(("done flow, data", data(40001, 443, 1, 1, &body)));
    rows.push(("done flow, ACK", data(40001, 443, 1, 1, &[])));

    // Not TLS on a watched port (iperf3 on 443): tracking given up, the
    // per-direction byte budget spent.
    open(&mut bpf, 40002)?;
    let mut seq = CISN + 1;
    for _ in 0..(64 * 1024 / MSS + 2) {
        bpf.test_run(&data(40002, 443, seq, SISN + 1, &body))?;
        seq = seq.wrapping_add(MSS as u32);
    }
    rows.push((
        "plain TCP past the budget",
        data(40002, 443, seq, SISN + 1, &body),
    ));

    // Paths that send an event, as a handshake's packets do; each run must
    // send again. The ring buffer is not drained during a row: these rows
    // run at most SENDING_RUNS times, and take it past a quarter, a half
    // and three quarters full, where a record wakes the reader (an
    // interrupt: see `wakeups`).
    let sending_from = rows.len();
    // A TLS flow whose records the kernel follows: the first data segment
    // opens a 16 KiB application_data record. The same segment again is a
    // retransmission, which goes as a header (the analyzer's think-time
    // split must know of it). A segment of new body bytes only sends
    // nothing, but no repeated frame is one.
    open(&mut bpf, 40003)?;
    let mut rec = vec![0x17, 0x03, 0x03, 0x40, 0x00];
    rec.extend_from_slice(&body[..MSS - 5]);
    let first = data(40003, 443, CISN + 1, SISN + 1, &rec);
    bpf.test_run(&first)?;
    rows.push(("TLS segment resent: a header", first));
    // A SYN of a new connection on the tuple: a header. A SYN carrying a
    // ClientHello (TCP Fast Open) starts the tuple over each run (its
    // byte count is set), and its record is walked and sent.
    let syn = Seg {
        port: 40004,
        dport: 443,
        to_client: false,
        seq: CISN,
        ack: None,
        syn: true,
        payload: &[],
    };
    rows.push(("SYN: a header", syn.frame()));
    let mut hello = vec![22, 3, 1, 0x02, 0x00, 1, 0, 0x01, 0xfc, 3, 3];
    hello.resize(5 + 512, 0x5a);
    let tfo = Seg {
        port: 40005,
        payload: &hello,
        ..syn
    };
    rows.push(("SYN + 517-byte ClientHello", tfo.frame()));

    println!(
        "TC program, mean of {repeat} runs on one frame (BPF_PROG_TEST_RUN; rows that send: {})",
        repeat.min(SENDING_RUNS)
    );
    for (i, (name, frame)) in rows.iter().enumerate() {
        let runs = if i >= sending_from {
            repeat.min(SENDING_RUNS)
        } else {
            repeat
        };
        let before = bpf.counters()?;
        let t = bpf.test_run_repeat(frame, runs)?;
        // The counters say which path the runs took.
        let path: Vec<String> = bpf
            .counters()?
            .iter()
            .zip(&before)
            .filter(|((_, a), (_, b))| a > b)
            .map(|((n, a), (_, b))| format!("{n} +{}", a - b))
            .collect();
        println!("  {name:<28} {:>5} ns   {}", t.as_nanos(), path.join(", "));
        // Keep the ring buffer from filling between rows.
        while bpf.poll(std::time::Duration::ZERO, &mut |_| {})? > 0 {}
    }
    Ok(())
}
