//! `tlsrum live` on QUIC, as a user runs it: two network namespaces joined
//! by a veth, an aioquic server in one and aioquic clients in the other
//! (tests/quic/peer.py: a full handshake, a PSK resumption, two 0-RTT
//! resumptions), and the agent on the server's veth with the eBPF backend
//! and the pcap backend at the same time. Every connection's record must
//! match what aioquic itself reports for that client port, and both
//! backends must give the same records.
//!
//! Needs root, BPF, `ip`, python3 with aioquic, openssl. Skipped locally
//! without them; under CI=true a missing one is a failure.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use common::{ns_cmd, skip_unless, wait_for_text, Need, Procs, Topology, SERVER_IP};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const PORT: u16 = 4443;

fn records(path: &std::path::Path) -> BTreeMap<u64, Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["transport"] == "quic")
        .map(|r| {
            (
                r["client"]
                    .as_str()
                    .unwrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap(),
                r,
            )
        })
        .collect()
}

#[test]
fn quic_records_match_aioquic_on_both_backends() {
    if skip_unless(
        "live_quic",
        &[
            Need::Root,
            Need::Tools(&["ip", "openssl", "python3"]),
            Need::Netns,
            Need::Bpf,
            Need::Python("aioquic"),
        ],
    ) {
        return;
    }
    let topo = Topology::new("q");
    let peer = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/quic/peer.py");
    let (key, cert) = topo.self_signed("tlsrum.test");
    let mut procs = Procs::default();
    let mut agent = |name: &str, backend: &str, metrics: &str| {
        let events = topo.path(&format!("{name}.ndjson"));
        let log = std::fs::File::create(topo.path(&format!("{name}.log"))).unwrap();
        let mut cmd = ns_cmd(
            &topo.server_ns,
            &[
                BIN,
                "live",
                "--iface",
                &topo.veth,
                "--backend",
                backend,
                "--port",
                &PORT.to_string(),
                "--metrics",
                metrics,
                "--events",
                events.to_str().unwrap(),
            ],
        );
        cmd.stdout(Stdio::null()).stderr(log);
        procs.spawn(name, cmd);
        events
    };
    let ebpf_events = agent("ebpf", "ebpf", "127.0.0.1:19861");
    let pcap_events = agent("pcap", "pcap", "127.0.0.1:19862");
    wait_for_text(&topo.path("ebpf.log"), "watching", 20, &mut procs);
    wait_for_text(&topo.path("pcap.log"), "watching", 20, &mut procs);
    std::thread::sleep(Duration::from_millis(300));

    let server_log = std::fs::File::create(topo.path("server.log")).unwrap();
    let mut server = ns_cmd(
        &topo.server_ns,
        &[
            "python3",
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
    );
    server
        .stdout(server_log.try_clone().unwrap())
        .stderr(server_log);
    procs.spawn("server", server);
    wait_for_text(&topo.path("server.log"), "listening", 20, &mut procs);

    let out = ns_cmd(
        &topo.client_ns,
        &[
            "python3",
            peer,
            "client",
            "--connect",
            SERVER_IP,
            "--port",
            &PORT.to_string(),
            "--cafile",
            cert.to_str().unwrap(),
            "--plan",
            "full,resume,early,early",
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
    assert_eq!(labels.len(), 4);

    // Stop the agents (SIGINT): they flush their records and detach.
    std::thread::sleep(Duration::from_secs(1));
    for name in ["ebpf", "pcap"] {
        let status = procs.stop(name, libc::SIGINT, Duration::from_secs(10));
        assert!(status.success(), "{name} agent exited with {status}");
    }
    let (ebpf, pcap) = (records(&ebpf_events), records(&pcap_events));
    for (backend, recs) in [("ebpf", &ebpf), ("pcap", &pcap)] {
        assert_eq!(recs.len(), labels.len(), "{backend}: {recs:?}");
        for want in &labels {
            let port = want["client_port"].as_u64().unwrap();
            let got = recs
                .get(&port)
                .unwrap_or_else(|| panic!("{backend}: no record for client port {port}"));
            for field in ["handshake", "resumption", "offered", "retry", "cipher"] {
                assert_eq!(
                    got[field], want[field],
                    "{backend} port {port} field {field}: {got}"
                );
            }
            assert_eq!(got["sni"], "tlsrum.test");
            assert_eq!(got["version"], "TLS1.3");
            // Without keys QUIC early data is never "accepted" (DESIGN: never guess).
            let early = got["early_data"].as_str().unwrap();
            match want["early_data"].as_str().unwrap() {
                "none" => assert_eq!(early, "none", "{backend} {port}"),
                "accepted" => assert_eq!(early, "attempted", "{backend} {port}"),
                other => assert!(
                    early == other || early == "attempted",
                    "{backend} {port}: {early} vs {other}"
                ),
            }
            if want["zero_rtt_sent"] == true {
                assert!(
                    got["notes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|n| n == "zero_rtt_packets"),
                    "{got}"
                );
            }
            assert!(
                got["timing"]["handshake"].as_f64().is_some(),
                "{backend} {port}: handshake time"
            );
        }
    }
    // Both backends saw the same connections the same way (times within 1 ms).
    for (port, e) in &ebpf {
        let p = &pcap[port];
        for field in [
            "handshake",
            "resumption",
            "offered",
            "early_data",
            "retry",
            "alpn",
            "sni",
            "cipher",
        ] {
            assert_eq!(e[field], p[field], "port {port} {field}");
        }
        for t in ["tcp_rtt", "handshake", "ttfb"] {
            if let (Some(a), Some(b)) = (e["timing"][t].as_f64(), p["timing"][t].as_f64()) {
                if t == "ttfb" && (a - b).abs() > 1.0 {
                    assert!(
                        crossed(e, p),
                        "port {port} ttfb: ebpf {a} pcap {b} (handshake ebpf {} pcap {})",
                        e["timing"]["handshake"],
                        p["timing"]["handshake"]
                    );
                    continue;
                }
                assert!((a - b).abs() <= 1.0, "port {port} {t}: ebpf {a} pcap {b}");
            }
        }
    }
}

/// Most a server packet and the client's first 1-RTT packet may be apart
/// and still be seen in either order by the two backends (the gap between
/// one hook and the other, on a virtual CPU that can stall).
const CROSSING_MS: f64 = 1.0;

/// Whether the backends' ttfb differ because a server 1-RTT packet crossed
/// the client's first one at the sensor. The two backends look at
/// different points: an arriving packet passes the capture tap before the
/// TC ingress hook, a leaving one the TC egress hook before the tap. A
/// server packet sent (on the other CPU) between the two looks, such as
/// aioquic's 0.5-RTT answer to a 0-RTT request, comes after the client's
/// packet for one backend and before it for the other; that backend then
/// times the server's next packet. So the backend with the smaller ttfb
/// must have had its server packet right on the heels of the client's.
fn crossed(e: &Value, p: &Value) -> bool {
    let time = |r: &Value, t: &str| r["timing"][t].as_f64().unwrap_or(f64::NAN);
    let (early, late) = if time(e, "ttfb") < time(p, "ttfb") {
        (e, p)
    } else {
        (p, e)
    };
    let gap = time(early, "ttfb") - time(early, "handshake");
    (0.0..=CROSSING_MS).contains(&gap)
        && (time(early, "handshake") - time(late, "handshake")).abs() <= 1.0
}
