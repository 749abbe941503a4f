//! `replay --format zeek|zeek-json` against independent readers and an
//! independent oracle (tests/zeek/check_ssl_log.py): every capture in
//! `pcaps/` and in the public corpus (`../shared/corpus/`) is written as a
//! Zeek ssl.log, read back with parsezeeklogs (every row, declared types),
//! its JSON form compared row by row, community_id checked with Corelight's
//! `communityid` package, and for TLS over TCP the standard columns checked
//! against tshark. Zeek itself is not installable here (docs/zeek.md).
//! One test, one set-up: about a minute, most of it tshark.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::prereq::{skip_unless, Need};

/// scripts/install-deps.sh's venv with parsezeeklogs and communityid.
const VENV_PYTHON: &str = "/opt/tlsrum-zeek/bin/python";

fn captures(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            captures(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "pcap" || x == "pcapng" || x == "cap")
        {
            out.push(p);
        }
    }
}

#[test]
fn zeek_ssl_log_reads_back_and_agrees_with_tshark() {
    if skip_unless(
        "zeek_ssl_log_reads_back_and_agrees_with_tshark",
        &[
            Need::Tools(&["tshark"]),
            Need::Path(Path::new(VENV_PYTHON), "scripts/install-deps.sh"),
        ],
    ) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut caps = Vec::new();
    captures(&root.join("pcaps"), &mut caps);
    let corpus = root.join("../shared/corpus");
    if corpus.join("EXPECTED.tsv").exists() {
        captures(&corpus, &mut caps);
    } else {
        assert!(
            !common::prereq::ci(),
            "CI=true but the public corpus is missing at {}",
            corpus.display()
        );
        eprintln!("public corpus absent at {}: pcaps/ only", corpus.display());
    }
    caps.sort();
    assert!(!caps.is_empty(), "no captures found");
    let out = Command::new(VENV_PYTHON)
        .arg(root.join("tests/zeek/check_ssl_log.py"))
        .arg(env!("CARGO_BIN_EXE_tlsrum"))
        .args(&caps)
        .output()
        .expect("run tests/zeek/check_ssl_log.py");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "Zeek log check failed:\n{text}");
}
