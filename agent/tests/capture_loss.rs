//! `replay --stats` counts exactly the capture loss the records note.
//! Regression: the counters were merged by a hand-written list that forgot
//! `capture_loss_bytes`, so `--stats` printed 0 while records said
//! `server_capture_loss`.

use std::path::{Path, PathBuf};
use std::process::Command;

use analyzer::wire::{decode, LinkType, Transport};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Copies `capture` without the server's first data segment (its hello
/// flight), which the client then acknowledges: bytes the capture lost.
/// Returns the copy's path and the dropped payload's length.
fn drop_server_flight(capture: &Path, out: &Path) -> usize {
    let mut cap = pcap::Capture::from_file(capture).expect("open capture");
    let dlt = cap.get_datalink();
    let link = LinkType::from_linktype(dlt.0).expect("supported link type");
    let mut save = pcap::Capture::dead(dlt)
        .expect("dead capture")
        .savefile(out)
        .expect("create copy");
    let (mut dropped, mut server_port) = (0, None);
    while let Ok(p) = cap.next_packet() {
        if let Ok(pkt) = decode(link, p.data) {
            if let Transport::Tcp(h) = pkt.transport {
                if h.syn && !h.ack_flag {
                    server_port.get_or_insert(h.dst_port);
                }
                if dropped == 0 && Some(h.src_port) == server_port && !pkt.payload.is_empty() {
                    dropped = pkt.payload.len();
                    continue;
                }
            }
        }
        save.write(&p);
    }
    save.flush().expect("flush copy");
    dropped
}

#[test]
fn stats_count_the_capture_loss_the_records_note() {
    let dir = std::env::temp_dir().join(format!("tlsrum-capture-loss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = repo().join("pcaps/curl-nginx-tls12-nocache-notickets.pcapng");
    let damaged = dir.join("damaged.pcap");
    let lost = drop_server_flight(&source, &damaged);
    assert!(
        lost > 1000,
        "the server's flight carries the certificate ({lost} bytes)"
    );
    // Two files: the counters of each are merged for --stats.
    std::fs::copy(&source, dir.join("whole.pcapng")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--format", "ndjson", "--stats", "--quiet"])
        .arg(&dir)
        .output()
        .expect("run tlsrum");
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let noting: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "server_capture_loss")
        })
        .collect();
    assert_eq!(
        noting.len(),
        1,
        "exactly the damaged connection notes the loss: {records:?}"
    );
    let stats: Value = serde_json::from_slice(&out.stderr).expect("--stats JSON on stderr");
    assert_eq!(stats["capture_loss_bytes"], lost as u64, "{stats}");
}
