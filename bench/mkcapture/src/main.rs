//! mkcapture: builds a large replay-benchmark capture by multiplying real captures.
//!
//! Every TCP/UDP connection of the inputs becomes a template; `--connections` copies are emitted
//! round-robin over the templates, each with its own client address/port, started every
//! ~`--interval-us` and merged in timestamp order. TLS-over-TCP templates get `--bulk-ratio`
//! application-data packets spliced in after the handshake, and some pure-bulk flows (no
//! handshake in the capture) run alongside.

mod gen;
mod input;
mod packet;
mod template;

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use pcap_file::pcap::{PcapHeader, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use template::{Kind, TemplateOpts};

#[derive(Parser, Debug)]
#[command(version, about = "Build a large benchmark capture by multiplying the connections of real captures")]
struct Args {
    /// Output file (classic pcap, Ethernet, microsecond timestamps).
    #[arg(long, short)]
    out: PathBuf,
    /// Number of connection copies to emit in total (cycling over the input connections).
    #[arg(long, default_value_t = 100_000)]
    connections: u64,
    /// Bulk application-data packets added to every TLS-over-TCP connection after its handshake.
    #[arg(long = "bulk-ratio", default_value_t = 10)]
    bulk_ratio: usize,
    /// Seed for start-time jitter, client ports, payload bytes and pure-bulk flows.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mean capture time between two connection starts, in microseconds.
    #[arg(long = "interval-us", default_value_t = 20.0)]
    interval_us: f64,
    /// Idle gaps inside an input connection longer than this are shortened to it (milliseconds).
    #[arg(long = "max-gap-ms", default_value_t = 200.0)]
    max_gap_ms: f64,
    /// TCP payload size of a bulk packet (one TLS application-data record, header included).
    #[arg(long = "bulk-size", default_value_t = 1400, value_parser = clap::value_parser!(u16).range(6..=9000))]
    bulk_size: u16,
    /// Time between consecutive bulk packets of a connection, in microseconds.
    #[arg(long = "bulk-gap-us", default_value_t = 50.0)]
    bulk_gap_us: f64,
    /// Number of separate pure-bulk TLS flows without any handshake [default: connections/1000,
    /// at least 1; 0 if --bulk-ratio is 0].
    #[arg(long = "bulk-flows")]
    bulk_flows: Option<u64>,
    /// Packets per pure-bulk flow.
    #[arg(long = "bulk-flow-packets", default_value_t = 1000)]
    bulk_flow_packets: u64,
    /// Use only TLS-over-TCP connections of the inputs as templates.
    #[arg(long = "tls-only")]
    tls_only: bool,
    /// List the templates.
    #[arg(long, short)]
    verbose: bool,
    /// Input captures (pcap or pcapng; Ethernet, Linux SLL/SLL2, raw IP, null/loopback).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn main() -> Result<()> {
    let a = Args::parse();
    let t0 = Instant::now();
    if a.interval_us <= 0.0 {
        bail!("--interval-us must be > 0");
    }

    // 1. Read inputs and split them into connections.
    let mut col = template::Collector::default();
    for (i, path) in a.inputs.iter().enumerate() {
        input::read_capture(path, |f| col.add(i as u32, f))?;
    }
    let topts = TemplateOpts {
        bulk_per_conn: a.bulk_ratio,
        bulk_size: a.bulk_size as usize,
        bulk_gap_ns: (a.bulk_gap_us * 1000.0) as u64,
        max_gap_ns: (a.max_gap_ms * 1e6) as u64,
    };
    let pool = template::payload_pool(a.seed);
    let conns = std::mem::take(&mut col.conns);
    let mut templates: Vec<template::Template> =
        conns.into_iter().map(|(file, c)| template::build(c, file, &topts, &pool)).collect();
    let n_all = templates.len();
    let mut by_kind = [0usize; 4];
    for t in &templates {
        by_kind[Kind::ALL.iter().position(|k| *k == t.kind).unwrap()] += 1;
    }
    let tls_with_bulk = templates.iter().filter(|t| t.kind == Kind::TlsTcp && t.bulk_pkts > 0).count();
    if a.tls_only {
        templates.retain(|t| t.kind == Kind::TlsTcp);
    }
    let skipped: Vec<String> = col.skipped.iter().map(|(k, v)| format!("{k:?} {v}")).collect();
    eprintln!(
        "mkcapture: read {} files: {} frames, {} used, {} skipped{}",
        a.inputs.len(),
        thousands(col.frames),
        thousands(col.used),
        thousands(col.frames - col.used),
        if skipped.is_empty() { String::new() } else { format!(" ({})", skipped.join(", ")) }
    );
    eprintln!(
        "mkcapture: {} connections in the inputs: {}; {} of the TLS ones get bulk packets{}",
        n_all,
        Kind::ALL.iter().zip(by_kind).map(|(k, n)| format!("{} {}", k.name(), n)).collect::<Vec<_>>().join(", "),
        tls_with_bulk,
        if a.tls_only { format!("; --tls-only: using {} templates", templates.len()) } else { String::new() },
    );
    if a.verbose {
        for (i, t) in templates.iter().enumerate() {
            eprintln!(
                "  template {i:4}: {:9} {}:{} -> {}:{}  {} pkts + {} bulk, {:.3} ms  [{}]{}",
                t.kind.name(),
                t.client.0,
                t.client.1,
                t.server.0,
                t.server.1,
                t.orig_pkts,
                t.bulk_pkts,
                t.duration_ns as f64 / 1e6,
                a.inputs[t.file as usize].display(),
                t.no_bulk_reason.map(|r| format!("  (no bulk: {r})")).unwrap_or_default()
            );
        }
    }
    if templates.is_empty() {
        bail!("no usable TCP/UDP connections in the inputs");
    }

    // 2. Generate.
    let file = File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let header = PcapHeader {
        version_major: 2,
        version_minor: 4,
        ts_correction: 0,
        ts_accuracy: 0,
        snaplen: 262_144,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::MicroSecond,
        endianness: Endianness::native(),
    };
    let mut w = PcapWriter::with_header(BufWriter::with_capacity(4 << 20, file), header)?;
    let gopts = gen::GenOpts {
        connections: a.connections,
        interval_ns: ((a.interval_us * 1000.0) as u64).max(1),
        bulk_flows: a.bulk_flows.unwrap_or(if a.bulk_ratio == 0 { 0 } else { (a.connections / 1000).max(1) }),
        bulk_flow_packets: a.bulk_flow_packets,
        bulk_size: a.bulk_size as usize,
        seed: a.seed,
        base_ns: col.min_ts.unwrap_or(1_700_000_000_000_000_000),
    };
    let st = gen::generate(&templates, &gopts, &pool, &mut w)?;
    let mut bw = w.into_writer();
    std::io::Write::flush(&mut bw)?;
    drop(bw);

    let secs = t0.elapsed().as_secs_f64();
    let tls = st.copies[0];
    println!("wrote {}", a.out.display());
    println!("  packets written:   {}", thousands(st.packets));
    println!(
        "  connections:       {} ({} TLS over TCP, {} QUIC, {} other TCP, {} other UDP) from {} templates",
        thousands(st.copies.iter().sum()),
        thousands(tls),
        thousands(st.copies[1]),
        thousands(st.copies[2]),
        thousands(st.copies[3]),
        templates.len()
    );
    println!("  template packets:  {}", thousands(st.template_packets));
    println!(
        "  bulk packets:      {} ({} inside TLS connections, {} in {} pure-bulk flows)",
        thousands(st.bulk_in_conns + st.bulk_flow_packets),
        thousands(st.bulk_in_conns),
        thousands(st.bulk_flow_packets),
        gopts.bulk_flows
    );
    println!(
        "  bytes:             {} in the file ({:.1} MiB), {} on the wire",
        thousands(st.file_bytes),
        st.file_bytes as f64 / (1 << 20) as f64,
        thousands(st.wire_bytes)
    );
    println!(
        "  capture span:      {:.3} s, peak concurrently open connections {}",
        (st.last_ns - st.first_ns) as f64 / 1e9,
        thousands(st.peak_active as u64)
    );
    println!("  built in {secs:.1} s");
    Ok(())
}
