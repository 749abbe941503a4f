//! pcapcount: the floor for "how fast can libpcap read this file". A bare libpcap read loop
//! (pcap_next_ex via the `pcap` crate) that only counts packets and sums captured bytes.
//!
//! Output (one line, machine readable): `packets=N bytes=B seconds=S pps=P`

use std::time::Instant;

fn main() {
    let path = match std::env::args_os().nth(1) {
        Some(p) => p,
        None => {
            eprintln!("usage: pcapcount FILE.pcap");
            std::process::exit(2);
        }
    };
    let t0 = Instant::now();
    let mut cap = match pcap::Capture::from_file(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pcapcount: {}: {e}", path.to_string_lossy());
            std::process::exit(1);
        }
    };
    let mut packets: u64 = 0;
    let mut bytes: u64 = 0;
    loop {
        match cap.next_packet() {
            Ok(p) => {
                packets += 1;
                bytes += p.header.caplen as u64;
            }
            Err(pcap::Error::NoMorePackets) => break,
            Err(e) => {
                eprintln!("pcapcount: read error after {packets} packets: {e}");
                std::process::exit(1);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("packets={packets} bytes={bytes} seconds={secs:.3} pps={:.0}", packets as f64 / secs.max(1e-9));
}
