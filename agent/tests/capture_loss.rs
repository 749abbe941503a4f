//! Captures that lost bytes, replayed with `tlsrum replay`: copies of the
//! committed captures in `pcaps/` with packets taken out, ACKs that never
//! explain the hole, or a small snap length (issue 13, "Damaged and partial
//! captures").
//!
//! - `replay --stats` counts exactly the capture loss the records note.
//!   Regression: the counters were merged by a hand-written list that forgot
//!   `capture_loss_bytes`, so `--stats` printed 0 while records said
//!   `server_capture_loss`.
//! - Holes: bytes lost across record boundaries in the server's flight (the
//!   real flight cut into segments of a path MSS first: on loopback it was
//!   one segment) no longer stop the direction. The record layer finds a
//!   record header at the start of a later segment (`server_resync`) and the
//!   handshake finishes from what follows; a hole that no ACK explains is
//!   skipped when the flow ends (`server_gap`).

use std::net::IpAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;

use analyzer::wire::{decode, LinkType, Transport};
use etherparse::PacketBuilder;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A scratch directory of this test process, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tlsrum-capture-loss-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What to do to the first connection of a capture (the one of its first
/// SYN). Offsets count the server's stream bytes from its first.
#[derive(Default)]
struct Damage {
    /// Only the server's first data segment is taken out (`mss` and `drop`
    /// are then ignored).
    drop_first_flight: bool,
    /// Cut the server's data segments into pieces of this many bytes, as a
    /// path MSS would (0: as captured).
    mss: usize,
    /// Leave out the server's pieces that overlap these bytes.
    drop: Option<Range<u32>>,
    /// The client's ACKs never acknowledge past the first piece left out:
    /// the capture shows nothing that explains the hole.
    hide_acks: bool,
    /// Keep at most this many bytes of every frame (a snap length).
    snap: Option<usize>,
}

/// What [`damage`] did.
struct Damaged {
    /// Server payload bytes left out.
    dropped: usize,
    /// The damaged connection's client port.
    client_port: u16,
}

/// An Ethernet frame carrying this TCP segment (no TCP options).
fn frame(src: IpAddr, dst: IpAddr, h: &analyzer::wire::TcpHeader, payload: &[u8]) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([0; 6], [0; 6]);
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("mixed address families"),
    };
    let mut tcp = ip.tcp(h.src_port, h.dst_port, h.seq, 65535);
    if h.ack_flag {
        tcp = tcp.ack(h.ack);
    }
    if h.syn {
        tcp = tcp.syn();
    }
    if h.fin {
        tcp = tcp.fin();
    }
    if h.rst {
        tcp = tcp.rst();
    }
    let mut out = Vec::with_capacity(tcp.size(payload.len()));
    tcp.write(&mut out, payload).expect("build frame");
    out
}

/// Copies `capture` to `out` with its first connection damaged as `d` says.
fn damage(capture: &Path, out: &Path, d: &Damage) -> Damaged {
    let mut cap = pcap::Capture::from_file(capture).expect("open capture");
    let dlt = cap.get_datalink();
    let link = LinkType::from_linktype(dlt.0).expect("supported link type");
    let mut save = pcap::Capture::dead(dlt)
        .expect("dead capture")
        .savefile(out)
        .expect("create copy");
    let mut write = |ts, data: &[u8]| {
        let len = data.len();
        let caplen = d.snap.map_or(len, |s| s.min(len));
        let header = pcap::PacketHeader {
            ts,
            caplen: caplen as u32,
            len: len as u32,
        };
        save.write(&pcap::Packet::new(&header, &data[..caplen]));
    };
    let (mut dropped, mut ports, mut server_isn) = (0, None, None);
    // Where the first piece left out starts.
    let mut hole = None;
    while let Ok(p) = cap.next_packet() {
        let ts = p.header.ts;
        let pkt = match decode(link, p.data) {
            Ok(pkt) => pkt,
            Err(_) => {
                write(ts, p.data);
                continue;
            }
        };
        let Transport::Tcp(h) = pkt.transport else {
            write(ts, p.data);
            continue;
        };
        if h.syn && !h.ack_flag {
            ports.get_or_insert((h.src_port, h.dst_port));
        }
        let Some((client, server)) = ports else {
            write(ts, p.data);
            continue;
        };
        let from_server = (h.src_port, h.dst_port) == (server, client);
        let from_client = (h.src_port, h.dst_port) == (client, server);
        if from_server && h.syn {
            server_isn.get_or_insert(h.seq);
        }
        let base = server_isn.map_or(0, |isn: u32| isn.wrapping_add(1));
        if from_server && !pkt.payload.is_empty() {
            if d.drop_first_flight {
                if dropped == 0 {
                    dropped = pkt.payload.len();
                    continue;
                }
                write(ts, p.data);
                continue;
            }
            let piece = if d.mss == 0 { pkt.payload.len() } else { d.mss };
            let pieces: Vec<&[u8]> = pkt.payload.chunks(piece).collect();
            let last = pieces.len() - 1;
            let mut at = h.seq.wrapping_sub(base);
            for (i, bytes) in pieces.into_iter().enumerate() {
                let end = at + bytes.len() as u32;
                if d.drop.as_ref().is_some_and(|r| at < r.end && r.start < end) {
                    dropped += bytes.len();
                    hole.get_or_insert(at);
                } else if d.mss == 0 {
                    write(ts, p.data);
                } else {
                    let mut h2 = h;
                    h2.seq = base.wrapping_add(at);
                    h2.fin &= i == last;
                    write(ts, &frame(pkt.src, pkt.dst, &h2, bytes));
                }
                at = end;
            }
            continue;
        }
        if let (true, true, Some(hole)) = (from_client, d.hide_acks, hole) {
            if h.ack_flag && h.ack.wrapping_sub(base) > hole {
                let mut h2 = h;
                h2.ack = base.wrapping_add(hole);
                write(ts, &frame(pkt.src, pkt.dst, &h2, pkt.payload));
                continue;
            }
        }
        write(ts, p.data);
    }
    save.flush().expect("flush copy");
    Damaged {
        dropped,
        client_port: ports.expect("a SYN").0,
    }
}

/// `tlsrum replay --format ndjson --stats` of `path` (a file or a
/// directory): its records and its counters.
fn replay(path: &Path, extra: &[&str]) -> (Vec<Value>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--format", "ndjson", "--stats", "--quiet"])
        .args(extra)
        .arg(path)
        .output()
        .expect("run tlsrum");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // --stats is the JSON at the end of stderr (after warnings, such as
    // the one about a small snap length).
    let stderr = String::from_utf8(out.stderr).unwrap();
    let at = stderr.find("{\n").or_else(|| stderr.find('{')).unwrap_or(0);
    let stats = serde_json::from_str(&stderr[at..]).expect("--stats JSON on stderr");
    (records, stats)
}

/// The record of the connection from `client_port`.
fn of_client(records: &[Value], client_port: u16) -> Value {
    let suffix = format!(":{client_port}");
    let mut mine = records
        .iter()
        .filter(|r| r["client"].as_str().is_some_and(|c| c.ends_with(&suffix)));
    let r = mine.next().expect("a record of the damaged connection");
    assert!(mine.next().is_none(), "one record per connection");
    r.clone()
}

fn notes(r: &Value) -> Vec<&str> {
    r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// Damages the first connection of `capture`, replays the original and the
/// copy, and returns both records of that connection and the copy's
/// counters and `Damaged`.
fn damaged_and_whole(
    tag: &str,
    capture: &str,
    d: &Damage,
    extra: &[&str],
) -> (Value, Value, Value, Damaged) {
    let dir = scratch(tag);
    let source = repo().join("pcaps").join(capture);
    let copy = dir.join("damaged.pcap");
    let damaged = damage(&source, &copy, d);
    let (whole, _) = replay(&source, &[]);
    let (records, stats) = replay(&copy, extra);
    std::fs::remove_dir_all(&dir).ok();
    let whole = of_client(&whole, damaged.client_port);
    let got = of_client(&records, damaged.client_port);
    (whole, got, stats, damaged)
}

/// What the damage must not change: the handshake's class and what the
/// hellos said.
fn assert_same_handshake(got: &Value, whole: &Value) {
    for field in [
        "handshake",
        "version",
        "cipher",
        "sni",
        "alpn",
        "offered",
        "resumption",
        "early_data",
        "ja4",
        "ja4_stable",
        "ja4s",
    ] {
        assert_eq!(got[field], whole[field], "{field}: {got}\nwhole: {whole}");
    }
}

#[test]
fn stats_count_the_capture_loss_the_records_note() {
    let dir = scratch("stats");
    let source = repo().join("pcaps/curl-nginx-tls12-nocache-notickets.pcapng");
    let lost = damage(
        &source,
        &dir.join("damaged.pcap"),
        &Damage {
            drop_first_flight: true,
            ..Damage::default()
        },
    )
    .dropped;
    assert!(
        lost > 1000,
        "the server's flight carries the certificate ({lost} bytes)"
    );
    // Two files: the counters of each are merged for --stats.
    std::fs::copy(&source, dir.join("whole.pcapng")).unwrap();
    let (records, stats) = replay(&dir, &[]);
    std::fs::remove_dir_all(&dir).ok();
    let noting: Vec<&Value> = records
        .iter()
        .filter(|r| notes(r).contains(&"server_capture_loss"))
        .collect();
    assert_eq!(
        noting.len(),
        1,
        "exactly the damaged connection notes the loss: {records:?}"
    );
    assert_eq!(stats["capture_loss_bytes"], lost as u64, "{stats}");
}

/// The server's flight (ServerHello 98 bytes, Certificate 892, ServerKeyExchange
/// 120, ServerHelloDone 9, one record each) in 300-byte segments; the one
/// holding bytes 900..1119 -- the Certificate's end and the two records
/// after it -- is lost, and the client's ACK says so. The record layer finds
/// the server's ChangeCipherSpec at the start of its next segment; the
/// client's CCS came first, so this was a full handshake and the server's
/// CCS completes it. Before: the server's stream stopped at the hole, the
/// client's application data made it a False Start, and the close made it
/// `failed` (`close`).
#[test]
fn tls12_bytes_lost_across_records_resync_at_the_servers_ccs() {
    let (whole, got, stats, damaged) = damaged_and_whole(
        "tls12-acked",
        "openssl-openssl-tls12-sessionid.pcapng",
        &Damage {
            mss: 300,
            drop: Some(950..951),
            ..Damage::default()
        },
        &[],
    );
    assert_eq!(damaged.dropped, 1119 - 900);
    assert_eq!(whole["handshake"], "full");
    assert_same_handshake(&got, &whole);
    assert_eq!(got["timing"], whole["timing"]);
    let n = notes(&got);
    assert!(
        n.contains(&"server_capture_loss") && n.contains(&"server_resync"),
        "{got}"
    );
    assert!(!n.contains(&"server_stream_error"), "{got}");
    // The certificate was in the hole: not guessed.
    assert!(got["certs"].is_null() && !whole["certs"].is_null(), "{got}");
    assert_eq!(
        stats["capture_loss_bytes"], damaged.dropped as u64,
        "{stats}"
    );
    assert_eq!(stats["stream_resyncs"], 1, "{stats}");
    assert_eq!(stats["stream_errors"], 0, "{stats}");
}

/// The same hole, but the capture shows no ACK past it (as if the client's
/// packets that acknowledged it were lost too): the server's later segments
/// wait behind the hole until the connection closes, then the hole is
/// skipped and the handshake finished from them. With a small
/// `--max-flow-buffer` the hole is skipped as soon as waiting behind it
/// would break the cap.
#[test]
fn tls12_a_hole_no_ack_explains_is_skipped() {
    for buffer in ["262144", "100"] {
        let (whole, got, stats, damaged) = damaged_and_whole(
            &format!("tls12-unexplained-{buffer}"),
            "openssl-openssl-tls12-sessionid.pcapng",
            &Damage {
                mss: 300,
                drop: Some(950..951),
                hide_acks: true,
                ..Damage::default()
            },
            &["--max-flow-buffer", buffer],
        );
        assert_same_handshake(&got, &whole);
        // The server's CCS reached the state machine after the client's
        // first application data, but was captured before it: no False
        // Start, two round trips, as in the whole capture. The think-time
        // split is not made: the client's ACKs, which say what it had
        // received when it answered, are the evidence the damage hid.
        let mut want = whole["timing"].clone();
        assert!(want["server_think"].is_number() && want["client_think"].is_number());
        want["server_think"] = serde_json::Value::Null;
        want["client_think"] = serde_json::Value::Null;
        // A record that waited behind the hole until the close carries the
        // lifetime, which the whole capture's record (out at the response)
        // does not: the close came first.
        assert!(want["lifetime"].is_null(), "{whole}");
        want["lifetime"] = got["timing"]["lifetime"].clone();
        assert_eq!(got["timing"], want, "buffer {buffer}");
        let n = notes(&got);
        assert!(
            n.contains(&"server_gap") && n.contains(&"server_resync"),
            "buffer {buffer}: {got}"
        );
        assert!(!n.contains(&"false_start"), "buffer {buffer}: {got}");
        assert!(!n.contains(&"server_capture_loss"), "no ACK explained it");
        assert_eq!(stats["reassembly_gaps"], 1, "buffer {buffer}: {stats}");
        assert_eq!(
            stats["capture_loss_bytes"], damaged.dropped as u64,
            "buffer {buffer}: {stats}"
        );
        assert_eq!(stats["stream_resyncs"], 1, "buffer {buffer}: {stats}");
    }
}

/// TLS 1.3: the server's encrypted flight (EncryptedExtensions,
/// Certificate, CertificateVerify, Finished in application_data records)
/// loses its middle, across record boundaries. The client's Finished still
/// completes the handshake, and the server's stream is read again from its
/// next segment (its session tickets): the time to its first application
/// data is what the whole capture says (before: null, the server's stream
/// stopped at the hole).
#[test]
fn tls13_bytes_lost_in_the_servers_encrypted_flight() {
    let (whole, got, stats, damaged) = damaged_and_whole(
        "tls13",
        "openssl-openssl-tls13-psk.pcapng",
        &Damage {
            mss: 300,
            drop: Some(950..951),
            ..Damage::default()
        },
        &[],
    );
    assert_eq!(damaged.dropped, 300);
    assert_eq!(whole["handshake"], "full");
    assert_eq!(whole["version"], "TLS1.3");
    assert_same_handshake(&got, &whole);
    assert_eq!(got["timing"], whole["timing"]);
    let n = notes(&got);
    assert!(
        n.contains(&"server_capture_loss") && n.contains(&"server_resync"),
        "{got}"
    );
    assert!(!n.contains(&"server_stream_error"), "{got}");
    assert_eq!(stats["stream_resyncs"], 1, "{stats}");
}

/// A snap length of 300 bytes (`tcpdump -s 300`) cuts the server's flight
/// after the ServerHello, inside the Certificate. The cut segment gives what
/// it has; the client's ACK says how much is missing; the record layer
/// resynchronises at the server's ChangeCipherSpec. Before: `server_gap`,
/// and `failed` (`close`) as in the test above.
#[test]
fn a_small_snap_length_still_gives_the_handshake() {
    let (whole, got, stats, _) = damaged_and_whole(
        "snap",
        "openssl-openssl-tls12-sessionid.pcapng",
        &Damage {
            snap: Some(300),
            ..Damage::default()
        },
        &[],
    );
    assert_eq!(whole["handshake"], "full");
    assert_same_handshake(&got, &whole);
    assert_eq!(got["timing"], whole["timing"]);
    let n = notes(&got);
    assert!(
        n.contains(&"server_capture_loss") && n.contains(&"server_resync"),
        "{got}"
    );
    assert!(stats["truncated_segments"].as_u64().unwrap() > 0, "{stats}");
}
