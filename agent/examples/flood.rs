//! Writes a capture of hostile traffic (classic pcap, Ethernet) for the
//! memory ceilings (agent/tests/flood_memory.rs) and for live floods
//! (`tcpreplay` it into a veth):
//!
//!   cargo run --release -p tlsrum --example flood -- --kind hello --count 1000000 -o hello.pcap
//!
//! Every flow has its own client address and port, and they all start
//! within `--count` x `--interval-us`, so they are all open at once:
//! - `syn`: a SYN, nothing else (a SYN flood);
//! - `hello`: a SYN, then a ClientHello the size of a browser's, then
//!   nothing (the server never answers);
//! - `quic`: a client Initial (1200 bytes, a ClientHello in a CRYPTO frame)
//!   under its own Destination Connection ID, protected with the real
//!   Initial keys so the analyzer decrypts it and keeps the connection;
//! - `mixed`: the three in turn.
//!
//! `-o -` (the default) writes to standard output, or a FIFO: a test reads
//! a million flows without writing them to disk.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use analyzer::quic::initial::InitialKeys;
use analyzer::quic::packet::Version;
use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Syn,
    Hello,
    Quic,
    Mixed,
}

#[derive(Parser)]
#[command(about = "Write a capture of hostile traffic (floods) for memory tests")]
struct Args {
    #[arg(long, value_enum)]
    kind: Kind,
    /// Flows (connections) to write.
    #[arg(long, default_value_t = 100_000)]
    count: u32,
    /// Capture time between two flows' first packets, in microseconds.
    #[arg(long, default_value_t = 1.0)]
    interval_us: f64,
    /// Output file, `-` for standard output.
    #[arg(short, long, default_value = "-")]
    out: PathBuf,
}

const SERVER: [u8; 4] = [192, 0, 2, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// Flow `i`'s client: 10.x.y.z and a port, distinct for 2^32 flows / 50,000 ports.
fn client(i: u32) -> ([u8; 4], u16) {
    let host = 1 + i / 50_000;
    (
        [10, (host >> 16) as u8, (host >> 8) as u8, host as u8],
        10_000 + (i % 50_000) as u16,
    )
}

/// Bytes that differ from flow to flow (randoms, connection IDs).
fn noise(i: u32, n: usize) -> Vec<u8> {
    let mut x = u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn ext(out: &mut Vec<u8>, typ: u16, body: &[u8]) {
    out.extend(typ.to_be_bytes());
    out.extend((body.len() as u16).to_be_bytes());
    out.extend(body);
}

/// A ClientHello handshake message shaped like a browser's: 16 suites, SNI,
/// ALPN, groups, key share, signature algorithms, PSK modes, padded to 512
/// bytes (as Chrome pads), a 32-byte session ID.
fn client_hello(i: u32, quic: bool) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend(noise(i, 32));
    body.push(32);
    body.extend(noise(i ^ 0x5555_5555, 32));
    let suites: [u16; 16] = [
        0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
        0x009c, 0x009d, 0x002f, 0x0035, 0x000a,
    ];
    body.extend((suites.len() as u16 * 2).to_be_bytes());
    suites.iter().for_each(|s| body.extend(s.to_be_bytes()));
    body.extend([1, 0]);
    let mut exts = Vec::new();
    let name = format!("flood{}.example", i % 1000);
    let mut sni = ((name.len() + 3) as u16).to_be_bytes().to_vec();
    sni.push(0);
    sni.extend((name.len() as u16).to_be_bytes());
    sni.extend(name.as_bytes());
    ext(&mut exts, 0, &sni);
    ext(
        &mut exts,
        16,
        if quic {
            b"\x00\x03\x02h3"
        } else {
            b"\x00\x0c\x02h2\x08http/1.1"
        },
    );
    ext(&mut exts, 10, &[0, 6, 0, 0x1d, 0, 0x17, 0, 0x18]);
    let mut share = vec![0, 36, 0, 0x1d, 0, 32];
    share.extend(noise(i ^ 0xaaaa_aaaa, 32));
    ext(&mut exts, 51, &share);
    ext(&mut exts, 43, &[4, 3, 4, 3, 3]);
    ext(&mut exts, 13, &[0, 8, 4, 3, 8, 4, 4, 1, 5, 3]);
    ext(&mut exts, 45, &[1, 1]);
    if quic {
        ext(&mut exts, 57, &[1, 2, 0x40, 0x64]);
    }
    // Padding (RFC 7685) up to a 512-byte message.
    let so_far = body.len() + 2 + exts.len() + 4 + 4;
    ext(&mut exts, 21, &vec![0; 512usize.saturating_sub(so_far)]);
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut msg = vec![1];
    msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend(body);
    msg
}

/// A protected QUIC v1 client Initial carrying `hello`, padded to 1200 bytes.
fn quic_initial(i: u32, hello: &[u8]) -> Vec<u8> {
    let dcid = noise(i ^ 0x1234_5678, 8);
    let scid = noise(i ^ 0x8765_4321, 8);
    let mut frames = vec![0x06, 0x00];
    frames.extend((0x4000u16 | hello.len() as u16).to_be_bytes());
    frames.extend(hello);
    let (pn_len, tag) = (4, 16);
    let header_len = 1 + 4 + 1 + 8 + 1 + 8 + 1 + 2 + pn_len;
    frames.resize(1200 - header_len - tag, 0);
    let mut header = vec![0xc0 | (pn_len as u8 - 1), 0, 0, 0, 1, 8];
    header.extend(&dcid);
    header.push(8);
    header.extend(&scid);
    header.push(0);
    header.extend((0x4000u16 | (pn_len + frames.len() + tag) as u16).to_be_bytes());
    header.extend([0, 0, 0, 0]);
    InitialKeys::new(Version::V1, &dcid)
        .client()
        .seal(&header, pn_len, 0, &frames)
}

fn tcp(out: &mut Vec<u8>, i: u32, seq: u32, ack: Option<u32>, syn: bool, payload: &[u8]) {
    let (ip, port) = client(i);
    let b = PacketBuilder::ethernet2(CLIENT_MAC, SERVER_MAC)
        .ipv4(ip, SERVER, 64)
        .tcp(port, 443, seq, 64240);
    let b = if syn { b.syn() } else { b };
    let b = match ack {
        Some(a) => b.ack(a),
        None => b,
    };
    out.clear();
    b.write(out, payload)
        .expect("a packet the size of a datagram");
}

fn udp(out: &mut Vec<u8>, i: u32, payload: &[u8]) {
    let (ip, port) = client(i);
    out.clear();
    PacketBuilder::ethernet2(CLIENT_MAC, SERVER_MAC)
        .ipv4(ip, SERVER, 64)
        .udp(port, 443)
        .write(out, payload)
        .expect("a packet the size of a datagram");
}

fn main() -> Result<()> {
    let args = Args::parse();
    let sink: Box<dyn Write> = if args.out.as_os_str() == "-" {
        Box::new(io::stdout().lock())
    } else {
        Box::new(
            File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?,
        )
    };
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ..PcapHeader::default()
    };
    let mut pcap = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, sink), header)?;
    let mut frame = Vec::with_capacity(1600);
    let put = |pcap: &mut PcapWriter<_>, t: f64, frame: &[u8]| -> Result<()> {
        let ts = Duration::from_secs_f64(1_700_000_000.0 + t);
        match pcap.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame)) {
            // The reader went away (a test that has seen enough): done.
            Err(pcap_file::PcapError::IoError(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
                std::process::exit(0)
            }
            r => r.map(|_| ()).context("writing the capture"),
        }
    };
    for i in 0..args.count {
        let t = f64::from(i) * args.interval_us * 1e-6;
        let kind = match args.kind {
            Kind::Mixed => [Kind::Syn, Kind::Hello, Kind::Quic][(i % 3) as usize],
            k => k,
        };
        let isn = u32::from_be_bytes(noise(i, 4).try_into().expect("4 bytes"));
        match kind {
            Kind::Syn => {
                tcp(&mut frame, i, isn, None, true, &[]);
                put(&mut pcap, t, &frame)?;
            }
            Kind::Hello => {
                tcp(&mut frame, i, isn, None, true, &[]);
                put(&mut pcap, t, &frame)?;
                let msg = client_hello(i, false);
                let mut record = vec![22, 3, 1];
                record.extend((msg.len() as u16).to_be_bytes());
                record.extend(msg);
                // The server's ISN is not known: the ACK field is junk, as a flood's would be.
                tcp(
                    &mut frame,
                    i,
                    isn.wrapping_add(1),
                    Some(isn ^ 0xffff),
                    false,
                    &record,
                );
                put(&mut pcap, t + args.interval_us * 0.5e-6, &frame)?;
            }
            Kind::Quic => {
                let datagram = quic_initial(i, &client_hello(i, true));
                udp(&mut frame, i, &datagram);
                put(&mut pcap, t, &frame)?;
            }
            Kind::Mixed => unreachable!(),
        }
    }
    pcap.into_writer().flush().or_else(|e| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    Ok(())
}
