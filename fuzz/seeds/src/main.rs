//! Seed corpora for the fuzz targets, from the captures in `pcaps/`: whole
//! frames (packets), each direction's TCP stream (tls_record), its
//! handshake messages (tls_handshake), ClientHello/ServerHello pairs sealed
//! as QUIC Initials by the harness and the QUIC captures' datagrams (quic),
//! segment patterns (reassembly), key logs (keylog) and kernel events
//! (ebpf_event). Each seed is written in its target's input format (see the
//! top of each `fuzz_targets/*.rs`) to `<out>/<target>/<capture>[-n]`.
//!
//! Usage: tlsrum-fuzz-seeds PCAP_DIR OUT_DIR

use std::collections::BTreeMap;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use analyzer::flow::reassembly::{Reassembler, Segment};
use analyzer::wire::{self, LinkType, Transport};

/// Largest seed: libFuzzer's -max_len in fuzz.sh is 64 KiB.
const MAX_SEED: usize = 60_000;

struct Frame {
    ts: f64,
    data: Vec<u8>,
}

type Dir = (IpAddr, u16, IpAddr, u16);

/// The fuzz target's index of a link type (its place in `LinkType::all()`).
fn link_index(l: LinkType) -> u8 {
    LinkType::all()
        .position(|x| x == l)
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(0)
}

fn write(out: &Path, target: &str, name: &str, data: &[u8]) {
    let dir = out.join(target);
    fs::create_dir_all(&dir).expect("create corpus dir");
    fs::write(dir.join(name), &data[..data.len().min(MAX_SEED)]).expect("write seed");
}

fn prefixed(out: &mut Vec<u8>, data: &[u8]) {
    let data = &data[..data.len().min(0xffff)];
    out.extend((data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
}

/// Handshake messages (header included) at the start of a TLS stream,
/// until the first record that is not a plaintext handshake record.
fn handshake_messages(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut hs = Vec::new();
    let mut s = stream;
    while s.len() >= 5 && s[0] == 22 {
        let len = usize::from(u16::from_be_bytes([s[3], s[4]]));
        let Some(body) = s.get(5..5 + len) else { break };
        hs.extend_from_slice(body);
        s = &s[5 + len..];
    }
    let mut msgs = Vec::new();
    let mut h = &hs[..];
    while h.len() >= 4 {
        let len = (usize::from(h[1]) << 16) | (usize::from(h[2]) << 8) | usize::from(h[3]);
        let Some(m) = h.get(..4 + len) else { break };
        msgs.push(m.to_vec());
        h = &h[4 + len..];
    }
    msgs
}

/// A `struct tlsrum_event` (bpf/tlsrum.h; layout as `EventHeader::parse`
/// reads it) for a whole packet, then its payload.
fn event(ts: f64, p: &wire::Packet<'_>) -> Vec<u8> {
    let mut h = vec![0u8; 88];
    let put32 = |h: &mut Vec<u8>, o: usize, v: u32| h[o..o + 4].copy_from_slice(&v.to_ne_bytes());
    h[0..8].copy_from_slice(&((ts * 1e9) as u64).to_ne_bytes());
    put32(&mut h, 8, 2);
    let (sport, dport, proto, flags) = match p.transport {
        Transport::Tcp(t) => {
            put32(&mut h, 12, t.seq);
            put32(&mut h, 16, t.ack);
            let f = u8::from(t.fin)
                | u8::from(t.syn) << 1
                | u8::from(t.rst) << 2
                | u8::from(t.ack_flag) << 4;
            (t.src_port, t.dst_port, 6u8, f)
        }
        Transport::Udp { src_port, dst_port } => (src_port, dst_port, 17u8, 0),
    };
    put32(&mut h, 20, p.payload.len() as u32);
    put32(&mut h, 24, 0);
    put32(&mut h, 28, p.payload.len() as u32);
    h[36..38].copy_from_slice(&sport.to_ne_bytes());
    h[38..40].copy_from_slice(&dport.to_ne_bytes());
    let addr = |a: IpAddr| -> [u8; 16] {
        match a {
            IpAddr::V4(v) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&v.octets());
                b
            }
            IpAddr::V6(v) => v.octets(),
        }
    };
    h[40..56].copy_from_slice(&addr(p.src));
    h[56..72].copy_from_slice(&addr(p.dst));
    h[72] = 0;
    h[73] = if p.src.is_ipv4() { 4 } else { 6 };
    h[74] = proto;
    h[75] = flags;
    h.extend_from_slice(p.payload);
    h
}

/// The QUIC target's input: a client Initial carrying `ch`, then a server
/// Initial carrying `sh` (each a CRYPTO frame at offset 0).
fn quic_exchange(ch: &[u8], sh: Option<&[u8]>) -> Vec<u8> {
    let mut s = vec![0u8]; // flags
    let initial = |s: &mut Vec<u8>, op: u8, dcid: &[u8], scid: &[u8], msg: &[u8]| {
        s.extend([op, 1, 0]); // op, time step, version v1
        s.push(dcid.len() as u8);
        s.extend_from_slice(dcid);
        s.push(scid.len() as u8);
        s.extend_from_slice(scid);
        s.extend([0, 3, 0, 0]); // pn 0, 4-byte pn, no token, one CRYPTO frame
        s.extend(0u16.to_be_bytes());
        prefixed(s, msg);
    };
    let (dcid, ccid, scid) = (
        [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08],
        [1u8; 8],
        [2u8; 8],
    );
    initial(&mut s, 1, &dcid, &ccid, ch);
    if let Some(sh) = sh {
        initial(&mut s, 2, &ccid, &scid, sh);
    }
    s
}

/// One TCP direction: its reassembler, the bytes in order, and where each segment began (seq, offset).
type Stream = (Reassembler, Vec<u8>, Vec<(u32, usize)>);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (pcaps, out) = match &args[..] {
        [_, p, o] => (PathBuf::from(p), PathBuf::from(o)),
        _ => {
            eprintln!("usage: tlsrum-fuzz-seeds PCAP_DIR OUT_DIR");
            std::process::exit(2);
        }
    };
    let mut files: Vec<PathBuf> = fs::read_dir(&pcaps)
        .expect("read pcap dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng" || e == "pcap"))
        .collect();
    files.sort();
    let mut hellos: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for path in &files {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let mut cap = pcap::Capture::from_file(path).expect("open capture");
        let Some(link) = LinkType::from_linktype(cap.get_datalink().0) else {
            continue;
        };
        let mut frames = Vec::new();
        while let Ok(p) = cap.next_packet() {
            let ts = p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 * 1e-6;
            frames.push(Frame {
                ts,
                data: p.data.to_vec(),
            });
        }

        // packets: the whole capture, with no caps and with every cap on.
        for (suffix, caps) in [("", 0u8), ("-caps", 0x3f)] {
            let mut s = vec![link_index(link), caps];
            let mut last = frames.first().map_or(0.0, |f| f.ts);
            for f in &frames {
                s.push(((f.ts - last) * 16.0).clamp(0.0, 255.0) as u8);
                last = f.ts;
                prefixed(&mut s, &f.data);
                if s.len() > MAX_SEED {
                    break;
                }
            }
            write(&out, "packets", &format!("{name}{suffix}"), &s);
        }

        // Each TCP direction's stream, in order; UDP datagrams; events.
        let mut streams: BTreeMap<Dir, Stream> = BTreeMap::new();
        let mut datagrams: Vec<(bool, Vec<u8>)> = Vec::new();
        let mut udp_server: Option<u16> = None;
        let mut events = Vec::new();
        for f in &frames {
            let Ok(p) = wire::decode(link, &f.data) else {
                continue;
            };
            if events.len() < MAX_SEED {
                prefixed(&mut events, &event(f.ts, &p));
            }
            match p.transport {
                Transport::Tcp(t) => {
                    let key = (p.src, t.src_port, p.dst, t.dst_port);
                    let (r, bytes, segs) = streams
                        .entry(key)
                        .or_insert_with(|| (Reassembler::new(1 << 20), Vec::new(), Vec::new()));
                    if t.syn {
                        r.start_at(t.seq.wrapping_add(1));
                        segs.push((t.seq.wrapping_add(1), 0));
                    }
                    if !p.payload.is_empty() {
                        segs.push((t.seq, p.payload.len()));
                    }
                    r.push(
                        &Segment {
                            seq: t.seq,
                            data: p.payload,
                            ts: f.ts,
                            ack: None,
                        },
                        p.truncated,
                        &mut |c| bytes.extend_from_slice(c.data),
                    );
                }
                Transport::Udp { src_port, dst_port } => {
                    let server = *udp_server.get_or_insert(dst_port);
                    if datagrams.len() < 24 {
                        datagrams.push((src_port == server, p.payload.to_vec()));
                    }
                }
            }
        }
        write(&out, "ebpf_event", &name, &events);

        let mut n = 0;
        let mut client_hello = None;
        for (_, (_, bytes, segs)) in streams.iter() {
            if bytes.is_empty() {
                continue;
            }
            n += 1;
            // tls_record: the stream's first 16 KiB in chunks of 1..=255 bytes.
            let mut s = vec![0u8];
            for (i, c) in bytes[..bytes.len().min(16384)].chunks(255).enumerate() {
                let c = &c[..c.len().min(1 + (i * 97) % 255)];
                s.push(c.len() as u8);
                s.extend_from_slice(c);
            }
            write(&out, "tls_record", &format!("{name}-{n}"), &s);
            // tls_handshake: each message under its parser's selector.
            for (i, m) in handshake_messages(bytes).iter().enumerate() {
                let sel = match m[0] {
                    1 => 0,
                    2 => 2,
                    11 => 3,
                    4 => 4,
                    _ => continue,
                };
                let mut s = vec![sel];
                s.extend_from_slice(&m[4..]);
                write(&out, "tls_handshake", &format!("{name}-{n}-{i}"), &s);
                match m[0] {
                    1 => client_hello = Some(m.clone()),
                    2 => {
                        if let Some(ch) = client_hello.take() {
                            hellos.push((ch, Some(m.clone())));
                        }
                    }
                    _ => {}
                }
            }
            // reassembly: the direction's segment pattern (offsets from
            // the first sequence number), in capture order.
            if let Some(&(isn, _)) = segs.first() {
                let mut s = vec![0x03 | 0x04];
                s.extend(isn.to_be_bytes());
                for &(seq, len) in segs.iter().take(200) {
                    let off = seq.wrapping_sub(isn);
                    let mut left = len;
                    let mut at = off;
                    while left > 0 && at < 0x7fff {
                        let l = left.min(255);
                        s.push(0);
                        s.extend((at as u16).to_be_bytes());
                        s.push(l as u8);
                        left -= l;
                        at += l as u32;
                    }
                }
                write(&out, "reassembly", &format!("{name}-{n}"), &s);
            }
        }
        if let Some(ch) = client_hello {
            hellos.push((ch, None));
        }

        // quic: the capture's first datagrams, raw.
        if !datagrams.is_empty() {
            let mut s = vec![0u8];
            for (from_server, d) in &datagrams {
                s.push(if *from_server { 0x10 } else { 0 });
                s.push(1);
                prefixed(&mut s, d);
            }
            write(&out, "quic", &name, &s);
        }

        // keylog: the capture's key log, if any.
        if let Ok(text) = fs::read(path.with_extension("keylog")) {
            write(&out, "keylog", &name, &text);
        }
    }
    // quic: real ClientHello/ServerHello pairs sealed by the harness.
    for (i, (ch, sh)) in hellos.iter().enumerate() {
        write(
            &out,
            "quic",
            &format!("hello-{i}"),
            &quic_exchange(ch, sh.as_deref()),
        );
    }
    // keylog: one TLS 1.3 record decrypt attempt (suite 0x1301, 32-byte secret).
    let mut s = b"CLIENT_RANDOM 00 11\n# comment\n".to_vec();
    s.push(0);
    s.extend([0, 32]);
    s.extend([7u8; 32]);
    s.extend([0, 23, 3, 3, 0, 40]);
    s.extend([0u8; 40]);
    write(&out, "keylog", "decrypt", &s);
    // zeek_log: the ssl.log fixtures (Zeek's own baselines and docs).
    let zeek = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent/tests/data/zeek");
    if let Ok(entries) = fs::read_dir(&zeek) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "log" || x == "json") {
                if let (Ok(text), Some(name)) = (fs::read(&p), p.file_stem()) {
                    write(&out, "zeek_log", &name.to_string_lossy(), &text);
                }
            }
        }
    }
}

/// The harness's Initials must pass the tracker's decryption, or the QUIC
/// target would only fuzz the decrypt-failed path.
#[cfg(test)]
#[path = "../../src/lib.rs"]
#[allow(dead_code)]
mod harness;

#[cfg(test)]
mod tests {
    use super::harness;
    use analyzer::quic::packet::Version;
    use analyzer::quic::{QuicStats, QuicTracker};
    use std::net::{IpAddr, Ipv4Addr};

    /// RFC 9001 Appendix A.2's ClientHello (handshake header included).
    const CH: &str = "010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c00000413011302010000c000000010000e00000b6578616d706c652e636f6dff01000100000a00080006001d0017001800100007000504616c706e000500050100000000003300260024001d00209370b2c9caa47fbabaf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b0003020304000d0010000e0403050306030203080408050806002d00020101001c00024001003900320408ffffffffffffffff05048000ffff07048000ffff0801100104800075300901100f088394c8f03e51570806048000ffff";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn sealed_initials_open_and_reach_the_client_hello() {
        for version in analyzer::quic::version::TLS
            .iter()
            .filter_map(|row| Version::from_wire(row.wire))
        {
            for pn_len in 1..=4 {
                let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
                let frames = harness::crypto_frame(0, &unhex(CH));
                let d = harness::seal_initial(
                    version,
                    harness::Side::Client,
                    &dcid,
                    &dcid,
                    &[1; 8],
                    &[],
                    2,
                    pn_len,
                    &frames,
                    1200,
                );
                assert!(d.len() >= 1200);
                let mut t = QuicTracker::new(10, 30.0);
                let mut stats = QuicStats::default();
                let c = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 5000);
                let s = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 443);
                t.on_datagram(1.0, c, s, &d, &mut stats);
                t.finish_all(&mut stats);
                assert_eq!(
                    stats.decrypt_failed, 0,
                    "{version:?} pn_len {pn_len}: {stats:?}"
                );
                assert_eq!(stats.hello_parse_errors, 0, "{version:?}: {stats:?}");
                assert_eq!(t.out.len(), 1, "{version:?}: {stats:?}");
                let mut line = Vec::new();
                analyzer::output::ndjson::encode(&mut line, &t.out[0]);
                let line = String::from_utf8(line).unwrap();
                assert!(line.contains("example.com"), "{version:?}: {line}");
            }
        }
    }
}
