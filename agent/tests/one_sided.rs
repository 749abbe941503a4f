//! One-sided captures (a tap on one direction, asymmetric routing, direct
//! server return): every committed capture is cut to what each side sent,
//! and each connection's record from a cut must say what that direction
//! shows -- equal to the two-sided record where the direction shows it,
//! null where it does not, `one_sided:<missing side>` in its notes, and
//! never `failed` for lack of the other side (DESIGN.md, README "One-sided
//! captures").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use analyzer::record::endpoint;
use analyzer::wire::{decode, LinkType, Transport};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn replay(capture: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--format", "ndjson", "--quiet"])
        .arg(capture)
        .output()
        .expect("run tlsrum");
    assert!(
        out.status.success(),
        "{}: {}",
        capture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Copies the packets sent by the clients (`from_clients`) or to them.
/// Returns how many packets were kept.
fn cut(capture: &Path, clients: &BTreeSet<String>, from_clients: bool, out: &Path) -> usize {
    let mut cap = pcap::Capture::from_file(capture).expect("open capture");
    let dlt = cap.get_datalink();
    let link = LinkType::from_linktype(dlt.0).expect("supported link type");
    let mut save = pcap::Capture::dead(dlt)
        .expect("dead capture")
        .savefile(out)
        .expect("create cut");
    let mut kept = 0;
    while let Ok(p) = cap.next_packet() {
        let Ok(pkt) = decode(link, p.data) else {
            continue;
        };
        let (sport, dport) = match pkt.transport {
            Transport::Tcp(h) => (h.src_port, h.dst_port),
            Transport::Udp { src_port, dst_port } => (src_port, dst_port),
        };
        let end = if from_clients {
            endpoint(pkt.src, sport)
        } else {
            endpoint(pkt.dst, dport)
        };
        if clients.contains(end.as_str()) {
            save.write(&p);
            kept += 1;
        }
    }
    save.flush().expect("flush cut");
    kept
}

fn notes(r: &Value) -> Vec<&str> {
    r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// What a one-sided record (`one`) must show of the two-sided one (`two`).
/// `missing` is the side the cut lacks. Returns the violations.
fn check(two: &Value, one: &Value, missing: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let mut same = |path: &str| {
        let (a, b) = (&two.pointer(path).unwrap(), &one.pointer(path).unwrap());
        if a != b {
            bad.push(format!("{path}: {a} (both sides) vs {b}"));
        }
    };
    for path in ["/transport", "/client", "/server", "/hrr", "/retry"] {
        same(path);
    }
    let shown_by_client = [
        "/sni",
        "/alpn",
        "/offered",
        "/bytes/client_handshake",
        "/proxied_client",
    ];
    let shown_by_server = ["/cipher", "/certs", "/bytes/server_handshake"];
    // QUIC without the client: the server's Initials are keyed from the
    // client's first Destination Connection ID, which only the client's
    // direction carries: nothing of the handshake can be read.
    if missing == "client" && two["transport"] == "quic" {
        for path in [
            "/version",
            "/cipher",
            "/certs",
            "/handshake",
            "/bytes/server_handshake",
            "/bytes/client_handshake",
            "/sni",
            "/alpn",
            "/offered",
            "/early_data",
            "/resumption",
            "/timing/round_trips",
        ] {
            if !one.pointer(path).unwrap().is_null() {
                bad.push(format!(
                    "{path}: {} but the Initial keys are unknown",
                    one.pointer(path).unwrap()
                ));
            }
        }
        for note in ["one_sided:client", "initial_keys_unknown"] {
            if !notes(one).contains(&note) {
                bad.push(format!("notes {:?} lack {note}", notes(one)));
            }
        }
        return bad;
    }
    let (shown, hidden) = if missing == "server" {
        (shown_by_client, shown_by_server.as_slice())
    } else {
        (
            [
                "/version",
                "/cipher",
                "/certs",
                "/bytes/server_handshake",
                "/hrr",
            ],
            shown_by_client.as_slice(),
        )
    };
    for path in shown {
        same(path);
    }
    let mut bad_null = |path: &str, why: &str| {
        if !one.pointer(path).unwrap().is_null() {
            bad.push(format!("{path}: {} but {why}", one.pointer(path).unwrap()));
        }
    };
    for path in hidden {
        bad_null(path, "the cut does not show it");
    }
    bad_null("/timing/ttfb", "it needs both sides");
    if missing == "client" {
        bad_null("/early_data", "the cut does not show the client");
        bad_null("/timing/handshake", "the cut does not show the client");
        bad_null(
            "/timing/tcp_rtt",
            "the server's half alone is not the round trip",
        );
    }
    let complete = |r: &Value| matches!(r["handshake"].as_str(), Some("full" | "resumed"));
    // What the cut may leave open, and must otherwise match.
    let equal_or_null = |path: &str, bad: &mut Vec<String>| {
        let (a, b) = (two.pointer(path).unwrap(), one.pointer(path).unwrap());
        if !b.is_null() && a != b {
            bad.push(format!("{path}: {a} (both sides) vs {b}"));
        }
    };
    equal_or_null("/version", &mut bad);
    equal_or_null("/resumption", &mut bad);
    equal_or_null("/timing/round_trips", &mut bad);
    if missing == "server" {
        equal_or_null("/timing/tcp_rtt", &mut bad);
        equal_or_null("/timing/handshake", &mut bad);
        // The client shows what it offered; the outcome of 0-RTT is the server's.
        let (a, b) = (&two["early_data"], &one["early_data"]);
        if !(a == b || (a != "none" && b == "attempted")) {
            bad.push(format!("early_data: {a} (both sides) vs {b}"));
        }
    }
    let (a, b) = (&two["handshake"], &one["handshake"]);
    let psk_offered = two["offered"]
        .as_array()
        .is_some_and(|o| o.iter().any(|m| m == "psk"));
    let ok = a == b
        // Complete, but a TLS 1.3 client does not show whether its PSK was taken.
        || (b.is_null() && missing == "server" && complete(two) && psk_offered)
        // A failure the cut does not show (the other side's alert or reset).
        || (a == "failed" && b == "incomplete")
        // TLS 1.3 completes with the client's Finished, which the server's
        // direction shows only if the server acknowledges it.
        || (missing == "client" && complete(two) && two["version"] == "TLS1.3" && b == "incomplete");
    if !ok {
        bad.push(format!("handshake: {a} (both sides) vs {b}"));
    }
    if one["handshake"] == "failed" && one["failure"] != two["failure"] {
        bad.push(format!(
            "failure: {} (both sides) vs {}",
            two["failure"], one["failure"]
        ));
    }
    if complete(two) && one["handshake"] != "incomplete" && one["version"].is_null() {
        bad.push("version: the cut shows a complete handshake but no version".into());
    }
    let note = format!("one_sided:{missing}");
    if !notes(one).contains(&note.as_str()) {
        bad.push(format!("notes {:?} lack {note}", notes(one)));
    }
    bad
}

#[test]
fn every_committed_capture_cut_to_each_direction() {
    let dir = std::env::temp_dir().join(format!("tlsrum-one-sided-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut captures: Vec<PathBuf> = std::fs::read_dir(repo().join("pcaps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    captures.sort();
    assert!(captures.len() >= 30, "the committed captures are missing");
    let (mut connections, mut problems) = (0, Vec::new());
    for capture in &captures {
        let both = replay(capture);
        let clients: BTreeSet<String> = both
            .iter()
            .map(|r| r["client"].as_str().unwrap().to_string())
            .collect();
        for (from_clients, missing) in [(true, "server"), (false, "client")] {
            let out = dir.join(format!("{missing}-missing.pcap"));
            if cut(capture, &clients, from_clients, &out) == 0 {
                continue;
            }
            let one = replay(&out);
            let name = capture.file_name().unwrap().to_string_lossy();
            for two in &both {
                connections += 1;
                let found = one.iter().find(|r| r["client"] == two["client"]);
                let Some(r) = found else {
                    problems.push(format!(
                        "{name} without {missing}: {} has no record",
                        two["client"]
                    ));
                    continue;
                };
                for p in check(two, r, missing) {
                    problems.push(format!("{name} without {missing}: {}: {p}", two["client"]));
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("{connections} one-sided connections checked");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
