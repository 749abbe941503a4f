//! The kernel side against whole captures: every frame of every capture in
//! `pcaps/` (and of the public corpus in `../shared/corpus/`, when present)
//! goes through the TC program with BPF_PROG_TEST_RUN, the ring buffer's
//! events go to the analyzer as `tlsrum live` hands them over, and each
//! connection's record must be identical to the one `tlsrum replay` makes
//! from the full capture. This is the claim behind the in-kernel cut-off
//! (bodies filled with zeros, body-only segments and most ACKs kept in the
//! kernel, flows ended by the kernel): it drops nothing the analyzer reads.
//!
//! A connection the kernel sent nothing of (tunnels, MPLS, PPPoE, IP
//! fragments: the TC program does not look inside them) is counted as not
//! visible; one it sent events for must have its record.
//!
//! `kernel_view_matches_replay` does `pcaps/`,
//! `kernel_view_matches_replay_on_the_public_corpus` the corpus, and
//! `kernel_view_matches_replay_in_97_byte_segments` cuts every TCP payload
//! of `pcaps/` into 97-byte segments, so that record headers straddle
//! segments (the kernel's split-header path).
//!
//! Needs root and BPF: without them the tests say why and pass, except
//! under CI=true, where they fail.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use analyzer::record::endpoint;
use analyzer::wire::{LinkType, Transport};
use analyzer::{Analyzer, Config};
use serde_json::Value;
use tlsrum::ebpf::{EbpfCapture, EbpfOptions, TEST_RUN_MAX_FRAME};

/// TCP payload per piece when a bigger (GRO-merged) frame is cut up.
const BIG_PIECE: usize = 1400;
/// Odd piece size of the second test: record headers straddle segments.
const ODD_PIECE: usize = 97;
/// Kernel counters summed in the summary.
const COUNTERS: [&str; 13] = [
    "filled",
    "opaque",
    "handshake_over",
    "record_limit",
    "untracked",
    "budget",
    "fallback_bytes",
    "midstream_flows",
    "midstream_adopted",
    "midstream_quiet",
    "lost_quiet",
    "quic_short_cut",
    "lost_resumed",
];
/// Differences printed in full in the failure message.
const SHOWN: usize = 10;

// ---- inputs ----

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository's own captures, sorted.
fn own_captures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("pcaps"))
        .expect("pcaps/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng" | "cap")
            )
        })
        .collect();
    files.sort();
    files
}

/// The public corpus's captures as its MANIFEST.tsv lists them (as
/// tests/corpus.rs does); None when the corpus is absent, which CI=true
/// does not allow.
fn corpus_captures() -> Option<Vec<PathBuf>> {
    let dir = repo().join("../shared/corpus");
    if !dir.join("MANIFEST.tsv").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the public corpus is missing at {}",
            dir.display()
        );
        eprintln!("no public corpus at {}: only pcaps/", dir.display());
        return None;
    }
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("MANIFEST.tsv");
    let mut files: Vec<PathBuf> = manifest
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next())
        .filter(|f| !f.is_empty())
        .map(|f| dir.join(f))
        .collect();
    files.sort();
    Some(files)
}

struct Capture {
    name: String,
    /// pcap link-type number.
    dlt: i32,
    /// (timestamp as `tlsrum replay` computes it, frame bytes)
    frames: Vec<(f64, Vec<u8>)>,
}

/// Reads every frame up to the end or the first read error, as replay does
/// (it keeps what came before a corrupt packet too).
fn read_capture(path: &Path) -> Result<Capture, String> {
    let mut cap = pcap::Capture::from_file(path).map_err(|e| e.to_string())?;
    let dlt = cap.get_datalink().0;
    let mut frames = Vec::new();
    while let Ok(p) = cap.next_packet() {
        let ts = p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 * 1e-6;
        frames.push((ts, p.data.to_vec()));
    }
    let name = path
        .strip_prefix(repo().join(".."))
        .unwrap_or(path)
        .display()
        .to_string();
    Ok(Capture { name, dlt, frames })
}

/// The records `tlsrum replay` makes of the capture (same Config: replay
/// without options uses the defaults).
fn baseline(cap: &Capture, link: LinkType) -> Vec<Value> {
    let mut a = Analyzer::new(Config::default());
    for (ts, f) in &cap.frames {
        a.push_frame(*ts, link, f);
    }
    a.finish();
    a.take_records()
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).expect("record as JSON");
            // The kernel forwards each stream byte once (`fwd_until`), so a
            // retransmission whose bytes differ never reaches user space on
            // the eBPF path: `*_conflicting_retransmission` notes come from
            // replay and the libpcap backend only (README, "Conflicting
            // retransmissions"). Until the kernel forwards retransmissions
            // of each direction's first bytes, that note alone is left out
            // here; every other field must still be equal.
            if let Some(notes) = v["notes"].as_array_mut() {
                notes.retain(|n| {
                    !n.as_str()
                        .is_some_and(|n| n.ends_with("_conflicting_retransmission"))
                });
            }
            v
        })
        .collect()
}

// ---- frames as the TC program sees them ----

/// How a link type's frames become Ethernet frames.
#[derive(Clone, Copy)]
enum Framing {
    Ethernet,
    /// Linux cooked v1: 16-byte header, ethertype at 14.
    Sll,
    /// Linux cooked v2: 20-byte header, ethertype at 0.
    Sll2,
    /// Bare IP: the version nibble says which.
    RawIp,
    /// BSD NULL/LOOP: 4-byte address family, in either byte order.
    Family,
}

impl Framing {
    fn of(dlt: i32) -> Option<Self> {
        Some(match dlt {
            1 => Self::Ethernet,
            113 => Self::Sll,
            276 => Self::Sll2,
            12 | 14 | 101 | 228 | 229 => Self::RawIp,
            0 | 108 => Self::Family,
            _ => return None,
        })
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn with_ethernet(ethertype: u16, net: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + net.len());
    f.extend_from_slice(&[0u8; 12]);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(net);
    f
}

fn ip_ethertype(net: &[u8]) -> Option<u16> {
    match net.first()? >> 4 {
        4 => Some(0x0800),
        6 => Some(0x86dd),
        _ => None,
    }
}

/// The frame as an Ethernet frame; None if its header says no IP.
fn ethernet_frame(framing: Framing, frame: &[u8]) -> Option<Vec<u8>> {
    match framing {
        Framing::Ethernet => (frame.len() >= 14).then(|| frame.to_vec()),
        Framing::Sll => Some(with_ethernet(be16(frame, 14)?, frame.get(16..)?)),
        Framing::Sll2 => Some(with_ethernet(be16(frame, 0)?, frame.get(20..)?)),
        Framing::RawIp => Some(with_ethernet(ip_ethertype(frame)?, frame)),
        Framing::Family => {
            let fam: [u8; 4] = frame.get(..4)?.try_into().ok()?;
            let is = |set: &[u32]| {
                set.contains(&u32::from_le_bytes(fam)) || set.contains(&u32::from_be_bytes(fam))
            };
            let ethertype = if is(&[2]) {
                0x0800
            } else if is(&[24, 28, 30]) {
                0x86dd
            } else {
                return None;
            };
            Some(with_ethernet(ethertype, &frame[4..]))
        }
    }
}

/// Cuts the TCP payload of an Ethernet frame (up to two VLAN tags, as the
/// kernel parses them; IPv4 unfragmented, or IPv6 without extension
/// headers) into pieces of at most `piece` bytes: headers copied, IP
/// length and TCP sequence number adjusted, SYN on the first piece only,
/// FIN/RST/PSH on the last only. Checksums are left as they are (nothing
/// reads them). None if the frame is not such a TCP segment, or is cut
/// short by the capture.
fn split_tcp(frame: &[u8], piece: usize) -> Option<Vec<Vec<u8>>> {
    let mut l3 = 14;
    let mut ethertype = be16(frame, 12)?;
    for _ in 0..2 {
        if ethertype == 0x8100 || ethertype == 0x88a8 {
            ethertype = be16(frame, l3 + 2)?;
            l3 += 4;
        }
    }
    let (l4, end, v4) = match ethertype {
        0x0800 => {
            let vihl = *frame.get(l3)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            let unfragmented = be16(frame, l3 + 6)? & 0x3fff == 0;
            if vihl >> 4 != 4 || ihl < 20 || !unfragmented || *frame.get(l3 + 9)? != 6 {
                return None;
            }
            (l3 + ihl, l3 + usize::from(be16(frame, l3 + 2)?), true)
        }
        0x86dd => {
            if *frame.get(l3)? >> 4 != 6 || *frame.get(l3 + 6)? != 6 {
                return None;
            }
            (l3 + 40, l3 + 40 + usize::from(be16(frame, l3 + 4)?), false)
        }
        _ => return None,
    };
    let data = l4 + usize::from(*frame.get(l4 + 12)? >> 4) * 4;
    if data < l4 + 20 || data > end || end > frame.len() {
        return None;
    }
    let payload = &frame[data..end];
    if payload.len() <= piece {
        return Some(vec![frame.to_vec()]);
    }
    let seq = u32::from_be_bytes(frame[l4 + 4..l4 + 8].try_into().ok()?);
    let flags = frame[l4 + 13];
    let syn = u32::from(flags & 0x02 != 0);
    let n = payload.len().div_ceil(piece);
    let pieces = (0..n)
        .map(|i| {
            let off = i * piece;
            let mut f = frame[..data].to_vec();
            f.extend_from_slice(&payload[off..(off + piece).min(payload.len())]);
            let ip_len = (f.len() - l3) as u16;
            if v4 {
                f[l3 + 2..l3 + 4].copy_from_slice(&ip_len.to_be_bytes());
            } else {
                f[l3 + 4..l3 + 6].copy_from_slice(&(ip_len - 40).to_be_bytes());
            }
            // The SYN takes a sequence number before the data.
            let s = if i == 0 {
                seq
            } else {
                seq.wrapping_add(off as u32).wrapping_add(syn)
            };
            f[l4 + 4..l4 + 8].copy_from_slice(&s.to_be_bytes());
            let mut fl = flags;
            if i > 0 {
                fl &= !0x02;
            }
            if i + 1 < n {
                fl &= !(0x01 | 0x04 | 0x08);
            }
            f[l4 + 13] = fl;
            f
        })
        .collect();
    Some(pieces)
}

/// How TCP payloads are cut before the kernel sees them.
#[derive(Clone, Copy)]
enum Cut {
    /// Only frames too big for BPF_PROG_TEST_RUN, into BIG_PIECE pieces.
    TooBig,
    /// Every payload, into pieces of this size.
    Every(usize),
}

/// The frames to run for one Ethernet frame; Err(reason) if none can be.
fn frames_for_kernel(frame: Vec<u8>, cut: Cut) -> Result<Vec<Vec<u8>>, &'static str> {
    let piece = match cut {
        Cut::TooBig if frame.len() <= TEST_RUN_MAX_FRAME => return Ok(vec![frame]),
        Cut::TooBig => BIG_PIECE,
        Cut::Every(n) => n,
    };
    match split_tcp(&frame, piece) {
        Some(pieces) if pieces.iter().all(|p| p.len() <= TEST_RUN_MAX_FRAME) => Ok(pieces),
        Some(_) => Err("too big after splitting"),
        None if frame.len() <= TEST_RUN_MAX_FRAME => Ok(vec![frame]),
        None => Err("too big, not splittable"),
    }
}

// ---- the kernel's view ----

/// An unordered pair of endpoints, as records name them.
type Tuple = (String, String);

fn tuple(a: String, b: String) -> Tuple {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

#[derive(Default)]
struct KernelView {
    records: Vec<Value>,
    /// Flows the kernel sent at least one event of.
    seen: HashSet<Tuple>,
    /// Frames not run, by reason.
    skipped: BTreeMap<&'static str, u64>,
    /// Frames run as several pieces.
    cut_up: u64,
    counters: BTreeMap<&'static str, u64>,
}

/// Runs the capture's frames through a freshly loaded TC program (empty
/// flow map) and the analyzer, each event's packets stamped with the
/// capture time of the frame that caused it.
fn kernel_view(cap: &Capture, framing: Framing, cut: Cut) -> KernelView {
    let opts = EbpfOptions {
        all_ports: true,
        quic: true,
        ifaces: vec![],
        ..Default::default()
    };
    let mut bpf =
        EbpfCapture::load(&opts).unwrap_or_else(|e| panic!("loading the eBPF programs: {e:#}"));
    let mut analyzer = Analyzer::new(Config::default());
    let mut view = KernelView::default();
    let mut last_tick = f64::NEG_INFINITY;
    for (ts, raw) in &cap.frames {
        // The analyzer's clock goes on with frames the kernel keeps, as
        // `tlsrum live` ticks it every second: idle flows expire when
        // replay expires them (replay sweeps on the same condition).
        if *ts > last_tick + 1.0 {
            analyzer.tick(*ts);
            last_tick = *ts;
        }
        let Some(frame) = ethernet_frame(framing, raw) else {
            *view.skipped.entry("no IP link header").or_default() += 1;
            continue;
        };
        let frames = match frames_for_kernel(frame, cut) {
            Ok(f) => f,
            Err(why) => {
                *view.skipped.entry(why).or_default() += 1;
                continue;
            }
        };
        view.cut_up += u64::from(frames.len() > 1);
        for f in frames {
            if let Err(e) = bpf.test_run(&f) {
                panic!(
                    "{}: BPF_PROG_TEST_RUN refused a {}-byte frame: {e:#}",
                    cap.name,
                    f.len()
                );
            }
            let seen = &mut view.seen;
            bpf.poll(Duration::ZERO, &mut |ev| {
                let h = ev.header;
                seen.insert(tuple(
                    endpoint(h.src(), h.sport).to_string(),
                    endpoint(h.dst(), h.dport).to_string(),
                ));
                for p in ev.datagrams() {
                    analyzer.push_packet(*ts, &p);
                }
            })
            .expect("reading the ring buffer");
        }
    }
    analyzer.finish();
    view.records = analyzer
        .take_records()
        .iter()
        .map(|r| serde_json::to_value(r).expect("record as JSON"))
        .collect();
    for (name, v) in bpf.counters().expect("kernel counters") {
        *view.counters.entry(name).or_default() += v;
    }
    view
}

// ---- comparison ----

#[derive(Default)]
struct Tally {
    files: usize,
    skipped_files: Vec<String>,
    baseline: usize,
    compared: usize,
    identical: usize,
    not_visible: Vec<String>,
    skipped_frames: BTreeMap<&'static str, u64>,
    cut_up_frames: u64,
    counters: BTreeMap<&'static str, u64>,
    /// Records that differ, or exist on one side only: in full.
    differences: Vec<String>,
    /// Connections the kernel sent events of but that got no record.
    no_record: Vec<String>,
}

impl Tally {
    fn print(&self, title: &str) {
        let counters: Vec<String> = COUNTERS
            .iter()
            .map(|c| format!("{c} {}", self.counters.get(c).copied().unwrap_or(0)))
            .collect();
        eprintln!(
            "{title}: {} files ({} skipped), {} baseline connections, {} compared, {} identical, {} not visible, \
             {} differences, {} with events but no record; frames cut up {}, skipped {:?}; kernel counters: {}",
            self.files,
            self.skipped_files.len(),
            self.baseline,
            self.compared,
            self.identical,
            self.not_visible.len(),
            self.differences.len(),
            self.no_record.len(),
            self.cut_up_frames,
            self.skipped_frames,
            counters.join(", ")
        );
        for f in &self.skipped_files {
            eprintln!("  skipped file: {f}");
        }
        for n in &self.not_visible {
            eprintln!("  not visible to the TC program: {n}");
        }
    }

    /// Fails with every count and the first differences in full.
    fn assert_clean(&self, title: &str, min_compared: f64) {
        let mut problems: Vec<&String> = self.differences.iter().chain(&self.no_record).collect();
        let total = problems.len();
        problems.truncate(SHOWN);
        let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert!(
            total == 0,
            "{title}: {} records differ, {} connections had events but no record; first {}:\n\n{}",
            self.differences.len(),
            self.no_record.len(),
            shown.len(),
            shown.join("\n\n")
        );
        let share = self.compared as f64 / self.baseline.max(1) as f64;
        assert!(
            share >= min_compared,
            "{title}: only {} of {} baseline connections compared ({:.0}%)",
            self.compared,
            self.baseline,
            share * 100.0
        );
    }

    fn add_counts(&mut self, view: &KernelView) {
        self.cut_up_frames += view.cut_up;
        for (k, v) in &view.skipped {
            *self.skipped_frames.entry(k).or_default() += v;
        }
        for (k, v) in &view.counters {
            *self.counters.entry(k).or_default() += v;
        }
    }
}

/// (client, server, ts) of a record, plus its rank among records with the
/// same three (rare: a capture replayed twice into one file).
type Key = (String, String, String, usize);

fn keyed(records: &[Value]) -> BTreeMap<Key, Value> {
    let mut sorted: Vec<&Value> = records.iter().collect();
    sorted.sort_by_key(|r| r.to_string());
    let mut ranks: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for r in sorted {
        let s = |f: &str| {
            r[f].as_str()
                .map_or_else(|| r[f].to_string(), str::to_owned)
        };
        let (client, server, ts) = (s("client"), s("server"), r["ts"].to_string());
        let rank = ranks
            .entry((client.clone(), server.clone(), ts.clone()))
            .or_default();
        out.insert((client, server, ts, *rank), r.clone());
        *rank += 1;
    }
    out
}

fn describe(file: &str, baseline: Option<&Value>, kernel: &Value) -> String {
    let conn = format!(
        "{} -> {}",
        kernel["client"].as_str().unwrap_or("?"),
        kernel["server"].as_str().unwrap_or("?")
    );
    match baseline {
        Some(b) => {
            let mut fields = Vec::new();
            common::json::field_differences(b, kernel, "", &mut fields); // replay -> kernel
            format!(
                "{file}: {conn} differs in\n  {}\n  replay: {b}\n  kernel: {kernel}",
                fields.join("\n  ")
            )
        }
        None => {
            format!("{file}: {conn} has a kernel record but no replay record\n  kernel: {kernel}")
        }
    }
}

/// Compares one file's kernel-view records with its baseline.
fn compare(file: &str, baseline: &[Value], view: &KernelView, t: &mut Tally) {
    let base = keyed(baseline);
    let mut kernel = keyed(&view.records);
    t.baseline += base.len();
    let mut unmatched = Vec::new();
    for (key, b) in &base {
        match kernel.remove(key) {
            Some(k) => {
                t.compared += 1;
                if &k == b {
                    t.identical += 1;
                } else {
                    t.differences.push(describe(file, Some(b), &k));
                }
            }
            None => unmatched.push((key, b)),
        }
    }
    // A kernel record under another timestamp: shown against the replay
    // record of the same connection, if there is one.
    for (key, k) in &kernel {
        match unmatched
            .iter()
            .position(|(bk, _)| (&bk.0, &bk.1) == (&key.0, &key.1))
        {
            Some(i) => {
                let (_, b) = unmatched.remove(i);
                t.compared += 1;
                t.differences.push(describe(file, Some(b), k));
            }
            None => t.differences.push(describe(file, None, k)),
        }
    }
    for (key, b) in unmatched {
        let conn = format!("{file}: {} -> {} ({})", key.0, key.1, b["transport"]);
        if view.seen.contains(&tuple(key.0.clone(), key.1.clone())) {
            t.no_record.push(format!(
                "{conn}: the kernel sent events but the analyzer made no record\n  replay: {b}"
            ));
        } else {
            t.not_visible.push(conn);
        }
    }
}

/// Both views of each capture, compared; `cut` says how the kernel's
/// frames are segmented.
fn check_files(files: &[PathBuf], cut: Cut, t: &mut Tally) {
    for path in files {
        let cap = match read_capture(path) {
            Ok(c) => c,
            Err(e) => {
                t.skipped_files
                    .push(format!("{}: unreadable: {e}", path.display()));
                continue;
            }
        };
        let (Some(link), Some(framing)) = (LinkType::from_linktype(cap.dlt), Framing::of(cap.dlt))
        else {
            t.skipped_files
                .push(format!("{}: link type {}", cap.name, cap.dlt));
            continue;
        };
        t.files += 1;
        let base = baseline(&cap, link);
        let view = kernel_view(&cap, framing, cut);
        t.add_counts(&view);
        compare(&cap.name, &base, &view, t);
    }
}

fn privileged(test: &str) -> bool {
    !common::skip(test, &[])
}

#[test]
fn kernel_view_matches_replay() {
    if !privileged("kernel_view_matches_replay") {
        return;
    }
    let mut own = Tally::default();
    check_files(&own_captures(), Cut::TooBig, &mut own);
    own.print("pcaps/");
    assert!(own.files >= 20, "only {} captures in pcaps/", own.files);
    own.assert_clean("pcaps/", 0.9);
}

#[test]
fn kernel_view_matches_replay_on_the_public_corpus() {
    if !privileged("kernel_view_matches_replay_on_the_public_corpus") {
        return;
    }
    let Some(files) = corpus_captures() else {
        return;
    };
    let mut public = Tally::default();
    check_files(&files, Cut::TooBig, &mut public);
    public.print("../shared/corpus/");
    public.assert_clean("../shared/corpus/", 0.0);
}

#[test]
fn kernel_view_matches_replay_in_97_byte_segments() {
    if !privileged("kernel_view_matches_replay_in_97_byte_segments") {
        return;
    }
    let mut t = Tally::default();
    check_files(&own_captures(), Cut::Every(ODD_PIECE), &mut t);
    t.print("pcaps/ in 97-byte segments");
    assert!(t.files >= 20, "only {} captures in pcaps/", t.files);
    t.assert_clean("pcaps/ in 97-byte segments", 0.9);
}

// Keeps the helpers honest: the cut pieces decode to the original stream.
#[test]
fn split_tcp_keeps_the_stream() {
    let mut frame = with_ethernet(0x0800, &[0u8; 20]);
    frame[14] = 0x45;
    frame[14 + 9] = 6;
    let mut tcp = [0u8; 20];
    tcp[4..8].copy_from_slice(&1000u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x02 | 0x01 | 0x08 | 0x10; // SYN FIN PSH ACK
    frame.extend_from_slice(&tcp);
    frame.extend((0..250u32).map(|i| i as u8));
    let total = (frame.len() - 14) as u16;
    frame[16..18].copy_from_slice(&total.to_be_bytes());
    let pieces = split_tcp(&frame, 97).expect("splittable");
    assert_eq!(pieces.len(), 3);
    let mut stream = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        let pkt = analyzer::wire::decode(LinkType::Ethernet, p).expect("decodes");
        let Transport::Tcp(h) = pkt.transport else {
            panic!("tcp")
        };
        let want_seq = if i == 0 { 1000 } else { 1001 + 97 * i as u32 };
        assert_eq!((h.seq, h.syn, h.fin), (want_seq, i == 0, i == 2));
        assert_eq!(pkt.src, IpAddr::from([0, 0, 0, 0]));
        stream.extend_from_slice(pkt.payload);
    }
    assert_eq!(stream, (0..250u32).map(|i| i as u8).collect::<Vec<_>>());
}
