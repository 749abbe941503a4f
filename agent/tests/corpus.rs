//! Cross-check against public captures in `../shared/corpus/` (never copied
//! into this repository). Every capture must parse without a crash or a
//! read error, and every TLS-over-TCP and QUIC connection's class must agree with
//! `EXPECTED.tsv` (derived there with tshark) or be listed, with the reason,
//! in `tests/corpus-differences.tsv`.
//! Skipped when the corpus is absent, except under CI=true.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn corpus() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    if dir.join("EXPECTED.tsv").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but the public corpus is missing at {}",
        dir.display()
    );
    eprintln!("skipping: no public corpus at {}", dir.display());
    None
}

/// The class of a QUIC record, in EXPECTED.tsv's vocabulary:
/// `quic-tls13-{full,psk}` then `+hrr`, `+retry`, `+vn`, and `+0rtt-offered`
/// (outcome not visible) or `+0rtt-rejected` (PSK refused).
fn quic_class_of(r: &Value) -> String {
    let version = match r["version"].as_str() {
        Some("TLS1.3") => "tls13",
        Some(_) => "other",
        None if r["hrr"] == true => return "quic-hrr-then-no-serverhello".into(),
        None => return "quic-no-serverhello".into(),
    };
    let failure = r["failure"].as_str().unwrap_or("");
    match r["handshake"].as_str().unwrap_or("") {
        "failed" => return format!("quic-failed:{failure}"),
        "incomplete" => return format!("quic-{version}-incomplete"),
        _ => {}
    }
    let mut c = format!(
        "quic-{version}-{}",
        if r["resumption"] == "psk" {
            "psk"
        } else {
            "full"
        }
    );
    if r["hrr"] == true {
        c.push_str("+hrr");
    }
    if r["retry"] == true {
        c.push_str("+retry");
    }
    if r["notes"]
        .as_array()
        .is_some_and(|n| n.iter().any(|v| v == "version_negotiation"))
    {
        c.push_str("+vn");
    }
    match r["early_data"].as_str() {
        Some("rejected") => c.push_str("+0rtt-rejected"),
        Some("attempted" | "accepted") => c.push_str("+0rtt-offered"),
        _ => {}
    }
    c
}

/// The class tlsrum's record implies, in EXPECTED.tsv's vocabulary.
fn class_of(r: &Value) -> String {
    if r["transport"] == "quic" {
        return quic_class_of(r);
    }
    let version = match r["version"].as_str() {
        Some("SSL2.0") => return "sslv2".into(),
        Some("SSL3.0") => "ssl3",
        Some("TLS1.0") => "tls10",
        Some("TLS1.1") => "tls11",
        Some("TLS1.2") => "tls12",
        Some("TLS1.3") => "tls13",
        _ => "",
    };
    let failure = r["failure"].as_str().unwrap_or("");
    match r["handshake"].as_str().unwrap_or("") {
        "failed" if failure.starts_with("alert:") => {
            return format!("fail-alert:{}", &failure[6..])
        }
        // EXPECTED.tsv names what is visible: no ServerHello (after a HelloRetryRequest or not).
        _ if version.is_empty() && r["hrr"] == true => return "hrr-then-no-serverhello".into(),
        _ if version.is_empty() => return "no-serverhello".into(),
        "failed" => return format!("failed:{failure}"),
        "incomplete" => return format!("{version}-incomplete"),
        _ => {}
    }
    let mut c = format!(
        "{version}-{}",
        match (r["resumption"].as_str(), r["handshake"].as_str()) {
            (Some("session_id"), _) => "resumed-id",
            (Some("ticket"), _) => "resumed-ticket",
            (Some("psk"), _) => "psk",
            // The server's direction alone: resumed, the method not shown.
            (None, Some("resumed")) => "resumed-unknown",
            _ => "full",
        }
    );
    if r["hrr"] == true {
        c.push_str("+hrr");
    }
    // Null: the capture does not show the client.
    if r["early_data"].as_str().is_some_and(|e| e != "none") {
        c.push_str("+0rtt-offered");
    }
    c
}

/// Drops the TLS 1.3 draft / Facebook fizz version tags: tlsrum reports them as TLS1.3.
fn normalise(class: &str) -> String {
    let mut out = class.to_string();
    for tag in ["-draft", "-fizz"] {
        while let Some(i) = out.find(tag) {
            let end = out[i + 1..].find('-').map_or(out.len(), |j| i + 1 + j);
            out.replace_range(i..end, "");
        }
    }
    out
}

#[test]
fn public_captures_agree_with_expected_classes() {
    let Some(dir) = corpus() else { return };
    let tsv = std::fs::read_to_string(dir.join("EXPECTED.tsv")).unwrap();
    // file -> client -> (class, sni)
    let mut expected: BTreeMap<String, BTreeMap<String, (String, String)>> = BTreeMap::new();
    for line in tsv.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 7 || f[5].starts_with("dtls") || f[2].starts_with("udp") {
            continue; // DTLS is not followed
        }
        expected
            .entry(f[0].into())
            .or_default()
            .insert(f[3].into(), (f[5].into(), f[6].into()));
    }
    let allowed_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus-differences.tsv"),
    )
    .unwrap();
    let allowed: BTreeSet<(String, String, String)> = allowed_text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(
                f.len() >= 5 && !f[4].trim().is_empty(),
                "every listed difference needs a reason: {l}"
            );
            (f[0].to_string(), f[1].to_string(), f[3].to_string())
        })
        .collect();
    let mut files: Vec<String> = std::fs::read_to_string(dir.join("MANIFEST.tsv"))
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next().map(String::from))
        .collect();
    files.sort();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut agreed = 0;
    for file in &files {
        let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
            .args(["replay", "--format", "ndjson"])
            .arg(dir.join(file))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            problems.push(format!(
                "{file}: tlsrum exited {:?}: {stderr}",
                out.status.code()
            ));
            continue;
        }
        let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let by_client: BTreeMap<String, &Value> = records
            .iter()
            .map(|r| (r["client"].as_str().unwrap().replace(['[', ']'], ""), r))
            .collect();
        for (client, (class, sni)) in expected.get(file).into_iter().flatten() {
            let key = (file.clone(), client.clone(), String::new());
            let Some(r) = by_client.get(client) else {
                // tshark found no Initial it could decrypt (gQUIC, a corrupted
                // Initial): tlsrum makes no record of such a flow either.
                if class == "quic-no-decodable-initial" {
                    agreed += 1;
                    continue;
                }
                let ours = "(no record)".to_string();
                if !allowed.contains(&(key.0.clone(), key.1.clone(), ours.clone())) {
                    problems.push(format!("{file}\t{client}\t{class}\t{ours}"));
                }
                seen.insert((key.0, key.1, ours));
                continue;
            };
            let ours = class_of(r);
            let ok = class.split('|').any(|alt| normalise(alt) == ours);
            if !sni.is_empty() && r["sni"].as_str() != Some(sni.as_str()) {
                problems.push(format!("{file}\t{client}\tsni {sni}\tsni {}", r["sni"]));
            }
            if ok {
                agreed += 1;
            } else {
                let k = (file.clone(), client.clone(), ours.clone());
                if !allowed.contains(&k) {
                    problems.push(format!("{file}\t{client}\t{class}\t{ours}"));
                }
                seen.insert(k);
            }
        }
    }
    let stale: Vec<_> = allowed.difference(&seen).collect();
    eprintln!(
        "{agreed} connections agree with EXPECTED.tsv; {} explained differences",
        seen.len()
    );
    assert!(
        stale.is_empty(),
        "listed differences that no longer occur (remove them): {stale:?}"
    );
    assert!(
        problems.is_empty(),
        "unexplained differences (file, client, expected, tlsrum):\n{}",
        problems.join("\n")
    );
}
