//! QUIC versions other than v1 and v2 on real traffic.
//!
//! Drafts from a real implementation: old aioquic releases (aioquic 1.x
//! speaks v1 and v2 only, which `pcaps/` and `live_quic.rs` cover), each in
//! a venv that scripts/install-deps.sh makes: 0.9.25 speaks drafts 29-32
//! (draft-29's salt), 0.8.8 drafts 25-27 (draft-23's salt). Two network
//! namespaces joined by a veth; tests/quic/draft_peer.py serves in one and
//! connects from the other once per draft, offering only that version;
//! tcpdump captures the veth; `tlsrum replay` must make one record per
//! connection, labelled by the client's own report (its port, the version
//! it used, the server name, a completed handshake), with the `quic_draft`
//! note, and decode every long header it saw.
//!
//! Needs root, `ip`, tcpdump, openssl and the venv. Skipped locally without
//! them; under CI=true a missing one is a failure.
//!
//! Versions tlsrum does not decode, in public captures (`../shared/corpus`):
//! Google's Q050 and a grease version forcing Version Negotiation are
//! counted by reason, listed in `--stats` and named on stderr.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{ns_cmd, skip_unless, wait_for_text, Need, Procs, Topology, SERVER_IP};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const PORT: u16 = 4433;
#[test]
fn aioquic_0_9_drafts_29_to_32_become_records() {
    drafts(
        "q9",
        "/opt/tlsrum-aioquic-0.9/bin/python",
        "0xff00001d,0xff00001e,0xff00001f,0xff000020",
    );
}

#[test]
fn aioquic_0_8_drafts_25_to_27_become_records() {
    drafts(
        "q8",
        "/opt/tlsrum-aioquic-0.8/bin/python",
        "0xff000019,0xff00001a,0xff00001b",
    );
}

/// One connection per draft in `versions` with the aioquic of the venv
/// whose interpreter is `python`; its capture replayed.
fn drafts(tag: &str, python: &str, versions: &str) {
    if skip_unless(
        &format!("quic_versions ({versions})"),
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&["ip", "openssl", "tcpdump"]),
            Need::Path(
                Path::new(python),
                "an aioquic venv: scripts/install-deps.sh",
            ),
        ],
    ) {
        return;
    }
    let topo = Topology::new(tag);
    let peer = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/quic/draft_peer.py");
    let (key, cert) = topo.self_signed("tlsrum.test");
    let mut procs = Procs::default();

    let pcap = topo.path("drafts.pcap");
    let tcpdump_log = topo.path("tcpdump.log");
    let filter = format!("udp port {PORT}");
    procs.spawn_logged(
        "tcpdump",
        ns_cmd(
            &topo.server_ns,
            &[
                "tcpdump",
                "-i",
                &topo.veth,
                "-s",
                "0",
                "--immediate-mode",
                "-U",
                "-w",
                pcap.to_str().unwrap(),
                &filter,
            ],
        ),
        &tcpdump_log,
    );
    wait_for_text(&tcpdump_log, "listening on", 10, &mut procs);

    let server_log = topo.path("server.log");
    procs.spawn_logged(
        "server",
        ns_cmd(
            &topo.server_ns,
            &[
                python,
                peer,
                "server",
                "--bind",
                SERVER_IP,
                "--port",
                &PORT.to_string(),
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ],
        ),
        &server_log,
    );
    wait_for_text(&server_log, "listening", 20, &mut procs);

    let out = ns_cmd(
        &topo.client_ns,
        &[
            python,
            peer,
            "client",
            "--connect",
            SERVER_IP,
            "--port",
            &PORT.to_string(),
            "--cafile",
            cert.to_str().unwrap(),
            "--versions",
            versions,
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let labels: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let spoken: Vec<&str> = labels
        .iter()
        .map(|l| l["version"].as_str().unwrap())
        .collect();
    assert_eq!(spoken.join(","), versions, "each draft was spoken");
    assert!(labels.iter().all(|l| l["handshake_complete"] == true));

    // tcpdump reads what the kernel holds before it stops (immediate mode).
    std::thread::sleep(Duration::from_millis(500));
    procs.stop("tcpdump", libc::SIGINT, Duration::from_secs(5));
    procs.stop("server", libc::SIGTERM, Duration::from_secs(5));

    let replay = Command::new(BIN)
        .args(["replay", "--format", "ndjson", "--stats"])
        .arg(&pcap)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success(), "{stderr}");
    let records: BTreeMap<u64, Value> = String::from_utf8_lossy(&replay.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            let port = r["client"].as_str().unwrap().rsplit(':').next().unwrap();
            (port.parse().unwrap(), r)
        })
        .collect();
    assert_eq!(records.len(), labels.len(), "{records:?}");
    for want in &labels {
        let port = want["client_port"].as_u64().unwrap();
        let got = records
            .get(&port)
            .unwrap_or_else(|| panic!("no record for client port {port} ({want})"));
        assert_eq!(got["transport"], "quic");
        assert_eq!(got["sni"], want["sni"], "{got}");
        assert_eq!(got["version"], "TLS1.3", "{got}");
        assert_eq!(got["handshake"], "full", "{want}: {got}");
        assert!(
            got["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "quic_draft"),
            "{got}"
        );
        assert!(got["timing"]["handshake"].as_f64().is_some(), "{got}");
    }
    // Every long header was of a version tlsrum decodes.
    let stats: Value = serde_json::from_str(&stderr[stderr.find('{').unwrap()..]).unwrap();
    let quic = &stats["quic"];
    for counter in [
        "unknown_version",
        "not_tls_version",
        "undecodable_version",
        "decrypt_failed",
    ] {
        assert_eq!(quic[counter], 0, "{counter}: {stderr}");
    }
    assert_eq!(quic["undecoded_versions"], serde_json::json!([]));
}

fn corpus() -> Option<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    if dir.join("EXPECTED.tsv").exists() {
        return Some(dir);
    }
    assert!(
        !common::ci(),
        "CI=true but the public corpus is missing at {}",
        dir.display()
    );
    eprintln!("skipping: no public corpus at {}", dir.display());
    None
}

#[test]
fn public_captures_of_undecoded_versions_are_counted_and_named() {
    let Some(dir) = corpus() else { return };
    for (file, counter, value, name, records) in [
        (
            "ndpi/pcap/gquic.pcap",
            "not_tls_version",
            "0x51303530",
            "Google Q050",
            0,
        ),
        (
            "ndpi/pcap/quic-forcing-vn-with-data.pcapng",
            "undecodable_version",
            "0xbabababa",
            "grease (forces Version Negotiation)",
            1,
        ),
    ] {
        let out = Command::new(BIN)
            .args(["replay", "--format", "ndjson", "--stats"])
            .arg(dir.join(file))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            records,
            "{file}"
        );
        assert!(
            stderr.contains(&format!("does not decode (no record): {value} {name}")),
            "{file}: {stderr}"
        );
        let stats: Value = serde_json::from_str(&stderr[stderr.find("\n{").unwrap()..]).unwrap();
        let quic = &stats["quic"];
        assert_eq!(quic[counter], 1, "{file}: {quic}");
        assert_eq!(quic["unknown_version"], 0, "{file}: {quic}");
        let listed = &quic["undecoded_versions"][0];
        assert_eq!(listed["version"], value, "{file}");
        assert_eq!(listed["name"], name, "{file}");
        assert_eq!(listed["packets"], 1, "{file}");
    }
}
