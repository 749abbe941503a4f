//! A short smoke of the live-cost benchmark (`cargo run --release -p
//! tlsrum --example live_cost`, bench/live/README.md) on a committed
//! capture, draining the ring every 16 frames. The timings mean nothing
//! here; what must hold is that every connection the kernel side and the
//! agent's loop saw became a record, as many as replaying the same frames
//! gives (a benchmark that lost records on the way would time less work
//! than the agent does).
//!
//! Needs root and BPF: without them the test says why and passes, except
//! under CI=true, where it fails.

mod common;

use std::path::Path;

#[test]
fn live_cost_sees_every_connection_replay_sees() {
    if common::skip_unless(
        "live_cost_sees_every_connection_replay_sees",
        &[common::Need::Root, common::Need::Bpf],
    ) {
        return;
    }
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps/curl-nginx-upgrade.pcapng");
    let example = common::cargo_build::example("live_cost");
    let capture = capture.to_str().expect("a UTF-8 path");
    let text = common::run(&[
        example.to_str().expect("a UTF-8 path"),
        capture,
        "--batch",
        "16",
        "--all-ports",
    ]);
    // "N frames (M too large ...), R records live, S replayed"
    let first = text.lines().next().unwrap_or_default();
    let number_before = |word: &str| -> u64 {
        let at = first
            .find(word)
            .unwrap_or_else(|| panic!("no {word:?} in {first:?}"));
        let n = first[..at].trim_end().rsplit([' ', '(']).next().unwrap();
        n.parse()
            .unwrap_or_else(|_| panic!("no number before {word:?} in {first:?}"))
    };
    let replay = common::run(&[
        env!("CARGO_BIN_EXE_tlsrum"),
        "replay",
        "--format",
        "ndjson",
        capture,
    ]);
    let records = replay.lines().count() as u64;
    assert!(records > 0, "replay wrote no records");
    assert_eq!(number_before("too large"), 0, "{text}");
    assert_eq!(number_before("records live"), records, "{text}");
    assert_eq!(number_before("replayed"), records, "{text}");
    for row in ["TC program", "agent", "replay"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(row) && l.contains("µs a record")),
            "no {row:?} row in:\n{text}"
        );
    }
}
