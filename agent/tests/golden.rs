//! Golden tests: every capture in `pcaps/` is replayed and each connection's
//! record is compared, field by field, with the labels in its
//! `NAME.expected.json`, which come from the TLS programs' own reports
//! (s_client, gnutls-cli, nginx's access log, curl), never from tlsrum.
//! Regenerate the captures and labels with `make pcaps`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn replay(capture: &Path, keylog: Option<&Path>) -> Vec<Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tlsrum"));
    cmd.args(["replay", "--format", "ndjson"]);
    if let Some(k) = keylog {
        cmd.arg("--keylog").arg(k);
    }
    let out = cmd.arg(capture).output().expect("run tlsrum");
    assert!(
        out.status.success(),
        "tlsrum failed on {}: {}",
        capture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect()
}

fn port(endpoint: &str) -> u64 {
    endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("ip:port")
}

/// Compares one labelled field; returns a description of the mismatch.
/// With a key log, early data must match exactly.
fn mismatch(
    field: &str,
    want: &Value,
    got: &Value,
    record: &Value,
    keylog: bool,
) -> Option<String> {
    if want == got {
        return None;
    }
    // Early data accepted or rejected under an accepted PSK is decided in the
    // encrypted EncryptedExtensions: without a key log the contract says
    // "attempted" then.
    if field == "early_data"
        && !keylog
        && got == "attempted"
        && (want == "accepted" || want == "rejected")
        && record["resumption"] == "psk"
    {
        return None;
    }
    if field == "offered" {
        // The label lists what the client was given by construction; tlsrum may
        // see more (e.g. a TLS 1.2 client's session ID next to its ticket).
        let got: Vec<&Value> = got
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        if want
            .as_array()
            .is_some_and(|w| w.iter().all(|m| got.contains(&m)))
        {
            return None;
        }
    }
    Some(format!("{field}: expected {want}, tlsrum says {got}"))
}

#[test]
fn every_capture_matches_its_labels() {
    let dir = repo().join("pcaps");
    let mut captures: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("pcaps/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng" || e == "pcap"))
        .collect();
    captures.sort();
    assert!(
        captures.len() >= 10,
        "expected the generated captures in pcaps/, found {}",
        captures.len()
    );
    let mut failures = Vec::new();
    let mut compared = 0;
    for cap in &captures {
        let labels_path = cap.with_extension("expected.json");
        let labels: Value = serde_json::from_str(
            &std::fs::read_to_string(&labels_path)
                .unwrap_or_else(|_| panic!("{} has no labels", cap.display())),
        )
        .expect("labels are JSON");
        let keylog = cap.with_extension("keylog");
        let runs: Vec<Option<&Path>> = if keylog.exists() {
            vec![None, Some(&keylog)]
        } else {
            vec![None]
        };
        for keylog in runs {
            let records = replay(cap, keylog);
            let by_port: BTreeMap<u64, &Value> = records
                .iter()
                .map(|r| (port(r["client"].as_str().unwrap()), r))
                .collect();
            let name = format!(
                "{}{}",
                cap.file_name().unwrap().to_string_lossy(),
                if keylog.is_some() {
                    " (with key log)"
                } else {
                    ""
                }
            );
            let expected = labels["connections"].as_array().expect("connections");
            if records.len() != expected.len() {
                failures.push(format!(
                    "{name}: {} labelled connections, tlsrum reports {}",
                    expected.len(),
                    records.len()
                ));
            }
            for want in expected {
                let p = want["client_port"].as_u64().expect("client_port");
                let Some(got) = by_port.get(&p) else {
                    failures.push(format!("{name}: client port {p}: no record"));
                    continue;
                };
                for field in [
                    "sni",
                    "version",
                    "cipher",
                    "handshake",
                    "resumption",
                    "offered",
                    "early_data",
                    "hrr",
                    "retry",
                    "alpn",
                ] {
                    if let Some(w) = want.get(field) {
                        compared += 1;
                        if let Some(m) = mismatch(field, w, &got[field], got, keylog.is_some()) {
                            failures.push(format!(
                                "{name}: client port {p}: {m} (label evidence: {})",
                                want["evidence"]
                            ));
                        }
                    }
                }
                // QUIC: a Version Negotiation is reported as a note.
                if let Some(vn) = want.get("version_negotiation").and_then(Value::as_bool) {
                    compared += 1;
                    let notes = got["notes"].as_array();
                    let noted = notes.is_some_and(|n| n.iter().any(|v| v == "version_negotiation"));
                    if vn != noted {
                        failures.push(format!(
                            "{name}: client port {p}: version_negotiation expected {vn}, notes {}",
                            got["notes"]
                        ));
                    }
                }
                if want["handshake"] != "failed" && got["failure"] != Value::Null {
                    failures.push(format!(
                        "{name}: client port {p}: unexpected failure {}",
                        got["failure"]
                    ));
                }
                // Accepted 0-RTT is zero round trips, once it is known.
                if keylog.is_some()
                    && want["early_data"] == "accepted"
                    && got["timing"]["round_trips"] != 0
                {
                    failures.push(format!(
                        "{name}: client port {p}: accepted 0-RTT with round_trips {}",
                        got["timing"]["round_trips"]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {compared} labelled fields differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A TLS 1.3 server's NewSessionTicket records are application_data on the
/// wire: nginx sent its two tickets before the response, and `ttfb` took
/// the first ticket. With the key log tlsrum opens the records after the
/// server's Finished and takes the response. `tshark -o
/// tls.keylog_file:pcaps/openssl-nginx-tls13-0rtt.keylog` on the first
/// connection: ClientHello frame 4 at 0.000232846 s, NewSessionTicket
/// frames 11 and 12 at 0.007537814 and 0.007585784, the HTTP response
/// frame 13 at 0.007649574.
#[test]
fn ttfb_with_a_key_log_skips_the_tickets_before_the_response() {
    let cap = repo().join("pcaps/openssl-nginx-tls13-0rtt.pcapng");
    let keylog = cap.with_extension("keylog");
    let ttfb = |keylog: Option<&Path>| replay(&cap, keylog)[0]["timing"]["ttfb"].as_f64();
    let ms = |from: f64, to: f64| ((to - from) * 1e6).round() / 1e3;
    assert_eq!(ttfb(Some(&keylog)), Some(ms(0.000232846, 0.007649574)));
    // Without the key log: the first ticket (the documented limit).
    assert_eq!(ttfb(None), Some(ms(0.000232846, 0.007537814)));
}
