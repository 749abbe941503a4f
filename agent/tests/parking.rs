//! Parked flows (issue 19): while the flow state is over
//! `Config::park_above`, a TCP flow that has shown only its ClientHello is
//! kept as the hello's bytes, and its handshake state is made again from
//! them at its next packet or its end. That must change nothing but
//! memory: every capture in `pcaps/` and in the public corpus
//! (`../shared/corpus/`, when present; required under CI=true), replayed
//! with every such flow parked (`park_above` 0) and with none, gives the
//! same records byte for byte and the same counters, and flows were
//! parked.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use analyzer::{Analyzer, Config, Stats};
use tlsrum::source::{pcap_file::PcapFile, Source, Status};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file under `dir`, recursively, sorted.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The capture's NDJSON records and counters, with flows parked above
/// `park_above` bytes of flow state; None if it is not a capture.
fn replay(path: &Path, park_above: usize) -> Option<(Vec<u8>, Stats)> {
    let mut source = PcapFile::open(path, None).ok()?;
    let mut a = Analyzer::new(Config {
        park_above,
        ..Config::default()
    });
    let mut out = Vec::new();
    loop {
        let status = source.poll(Duration::ZERO, &mut |c| c.analyze(&mut a));
        for r in a.take_records() {
            analyzer::output::ndjson::encode(&mut out, &r);
        }
        match status {
            Ok(Status::Open) => {}
            // A read error ends the capture as it ends replay's.
            Ok(Status::Ended) | Err(_) => break,
        }
    }
    a.finish();
    for r in a.take_records() {
        analyzer::output::ndjson::encode(&mut out, &r);
    }
    Some((out, a.stats().clone()))
}

#[test]
fn parked_flows_give_the_records_and_counters_of_flows_never_parked() {
    let mut captures = Vec::new();
    files(&root().join("pcaps"), &mut captures);
    let corpus = root().join("../shared/corpus");
    if corpus.join("EXPECTED.tsv").exists() {
        files(&corpus, &mut captures);
    } else {
        assert!(
            !common::ci(),
            "CI=true but the public corpus is missing at {}",
            corpus.display()
        );
        eprintln!("no public corpus at {}: pcaps/ only", corpus.display());
    }
    let (mut read, mut parked) = (0, 0);
    for path in &captures {
        let Some((never, never_stats)) = replay(path, usize::MAX) else {
            continue;
        };
        let (always, mut always_stats) = replay(path, 0).unwrap();
        read += 1;
        parked += always_stats.hellos_parked;
        assert_eq!(never_stats.hellos_parked, 0, "{}", path.display());
        always_stats.hellos_parked = 0;
        assert!(
            never == always,
            "{}: records differ when flows are parked:\n--- never parked\n{}\n--- parked\n{}",
            path.display(),
            String::from_utf8_lossy(&never),
            String::from_utf8_lossy(&always)
        );
        assert_eq!(never_stats, always_stats, "{}: counters", path.display());
    }
    assert!(read >= 30, "only {read} captures read");
    assert!(
        parked >= 100,
        "only {parked} flows parked over {read} captures"
    );
    eprintln!("{read} captures, {parked} flows parked: same records and counters");
}
