//! Reassembly under stress, on real traffic: every capture in `pcaps/` is
//! replayed through the analyzer with its TCP payloads cut into pieces of
//! 1..=7 bytes, the pieces of each segment shuffled, some pieces sent twice
//! (retransmission and overlap), and adjacent data segments of one
//! direction swapped. The records must be identical to those of the
//! original packets — timing included, since bytes keep their own timestamps
//! — with and without the capture's key log.

use std::path::Path;
use std::sync::Arc;

use analyzer::tls::keylog::KeyLog;
use analyzer::wire::{decode, LinkType, Packet, Transport};
use analyzer::{Analyzer, Config};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

type Frame = (f64, Vec<u8>);

fn read(path: &Path) -> (LinkType, Vec<Frame>) {
    let mut cap = pcap::Capture::from_file(path).unwrap();
    let link = LinkType::from_linktype(cap.get_datalink().0).unwrap();
    let mut frames = Vec::new();
    while let Ok(p) = cap.next_packet() {
        frames.push((
            p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 * 1e-6,
            p.data.to_vec(),
        ));
    }
    (link, frames)
}

fn records(a: &mut Analyzer) -> Vec<String> {
    a.finish();
    let mut r: Vec<String> = a
        .take_records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    r.sort();
    r
}

fn mangle(link: LinkType, frames: &[Frame], rng: &mut Rng, cfg: Config) -> Vec<String> {
    let mut a = Analyzer::new(cfg);
    let packets: Vec<(f64, Packet<'_>)> = frames
        .iter()
        .filter_map(|(ts, f)| decode(link, f).ok().map(|p| (*ts, p)))
        .collect();
    let mut order: Vec<usize> = (0..packets.len()).collect();
    // Swap adjacent data segments travelling the same way. Only TCP: QUIC
    // datagrams carry no byte sequence to restore, so their order is what
    // the capture says it is (and decides which packet came first).
    for i in 0..order.len().saturating_sub(1) {
        let (p, q) = (&packets[order[i]].1, &packets[order[i + 1]].1);
        if !matches!(
            (p.transport, q.transport),
            (Transport::Tcp(_), Transport::Tcp(_))
        ) {
            continue;
        }
        let port = |p: &Packet<'_>| match p.transport {
            Transport::Tcp(h) => h.src_port,
            Transport::Udp { src_port, .. } => src_port,
        };
        if (p.src, port(p)) == (q.src, port(q))
            && !p.payload.is_empty()
            && !q.payload.is_empty()
            && rng.below(3) == 0
        {
            order.swap(i, i + 1);
        }
    }
    for &i in &order {
        let (ts, p) = &packets[i];
        let Transport::Tcp(h) = p.transport else {
            a.push_packet(*ts, p);
            continue;
        };
        if p.payload.is_empty() {
            a.push_packet(*ts, p);
            continue;
        }
        let mut pieces = Vec::new();
        let mut off = 0;
        while off < p.payload.len() {
            let n = (1 + rng.below(7) as usize).min(p.payload.len() - off);
            pieces.push((off, n));
            off += n;
        }
        for k in (1..pieces.len()).rev() {
            pieces.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let dups: Vec<_> = pieces
            .iter()
            .filter(|_| rng.below(5) == 0)
            .copied()
            .collect();
        pieces.extend(dups);
        let last = pieces.len() - 1;
        for (k, (off, n)) in pieces.into_iter().enumerate() {
            let mut h2 = h;
            h2.seq = h.seq.wrapping_add(off as u32);
            // SYN and FIN travel with the last piece handled.
            h2.syn &= k == last;
            h2.fin &= k == last;
            let piece = Packet {
                payload: &p.payload[off..off + n],
                transport: Transport::Tcp(h2),
                ..*p
            };
            a.push_packet(*ts, &piece);
        }
    }
    records(&mut a)
}

#[test]
fn records_survive_splitting_reordering_and_retransmission() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pcapng") {
            continue;
        }
        let (link, frames) = read(&path);
        // With its key log too, where it has one: a server record the log
        // opens (a ticket or the response) may arrive split.
        let keylog = std::fs::read_to_string(path.with_extension("keylog"))
            .ok()
            .map(|text| Arc::new(KeyLog::parse(&text)));
        let configs = [None].into_iter().chain(keylog.map(Some));
        for keylog in configs {
            let cfg = || Config {
                keylog: keylog.clone(),
                ..Config::default()
            };
            let mut a = Analyzer::new(cfg());
            for (ts, f) in &frames {
                a.push_frame(*ts, link, f);
            }
            let want = records(&mut a);
            assert!(!want.is_empty(), "{}: no records", path.display());
            for seed in 1..=4u64 {
                let got = mangle(
                    link,
                    &frames,
                    &mut Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    cfg(),
                );
                let with = if keylog.is_some() {
                    " with key log"
                } else {
                    ""
                };
                assert_eq!(got, want, "{}{with} (seed {seed})", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} runs");
}
