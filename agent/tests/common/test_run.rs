//! The TC program loaded and run on crafted frames (BPF_PROG_TEST_RUN),
//! attached to nothing: the frames, and what the kernel sent and counted.

use std::collections::BTreeMap;
use std::time::Duration;

use tlsrum::ebpf::{EbpfCapture, EbpfOptions};

use super::prereq::{skip_unless, Need};

pub const SERVER: [u8; 4] = [192, 0, 2, 1];
pub const CLIENT: [u8; 4] = [192, 0, 2, 2];
pub const TLS_PORT: u16 = 443;
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// An Ethernet/IPv4 frame carrying `l4` (protocol `proto`).
pub fn ipv4_frame(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// A TCP segment from `from` to the other end of the client-server pair.
pub fn tcp(
    from_client: bool,
    client_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let (src, dst, sport, dport) = if from_client {
        (CLIENT, SERVER, client_port, TLS_PORT)
    } else {
        (SERVER, CLIENT, TLS_PORT, client_port)
    };
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    ipv4_frame(src, dst, 6, &t)
}

/// The IPv4 header checksum.
pub fn ip_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One event, as the tests look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ev {
    pub from_client: bool,
    pub tcp_flags: u8,
    pub flags: u8,
    pub payload_len: u32,
    pub bytes: Vec<u8>,
}

/// The program loaded with an empty flow map, attached to nothing.
pub struct Kernel(pub EbpfCapture);

impl Kernel {
    /// The programs loaded with `opts`; None when the test cannot run
    /// here (a failure under CI).
    pub fn load(test: &str, opts: &EbpfOptions) -> Option<Self> {
        if skip_unless(test, &[Need::Root, Need::Bpf]) {
            return None;
        }
        Some(Kernel(EbpfCapture::load(opts).unwrap_or_else(|e| {
            panic!("loading the eBPF programs: {e:#}")
        })))
    }

    /// Runs the frame through the program; the events it sent.
    pub fn run(&mut self, frame: &[u8]) -> Vec<Ev> {
        self.0.test_run(frame).expect("BPF_PROG_TEST_RUN");
        let mut out = Vec::new();
        self.0
            .poll(Duration::ZERO, &mut |e| {
                out.push(Ev {
                    from_client: e.header.saddr[..4] == CLIENT,
                    tcp_flags: e.header.tcp_flags,
                    flags: e.header.flags,
                    payload_len: e.header.payload_len,
                    bytes: e.payload.to_vec(),
                })
            })
            .expect("reading the ring buffer");
        out
    }

    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        self.0
            .counters()
            .expect("kernel counters")
            .into_iter()
            .collect()
    }
}
