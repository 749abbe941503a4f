//! A short smoke of the live handshake benchmark (`bench/live/handshakes.sh`,
//! bench/live/README.md): a thousand real handshakes sent by tcpreplay
//! through a veth at their captured pace, to an agent on each backend,
//! once with its `--events` file and once serving `/metrics` only
//! (`--no-events`, as in production). The rates and CPU mean nothing here;
//! what must hold is that the harness works end to end: it builds its
//! capture, starts and stops the agents, and finds every backend's records
//! the same, by kind, as `tlsrum replay` of the same file, read from the
//! events file or from `tls_handshakes_total`.
//!
//! Needs root, network namespaces, BPF and tcpreplay: without them the test
//! says why and passes, except under CI=true, where it fails.

mod common;

use std::path::Path;

use common::scratch::Scratch;

const BACKENDS: [&str; 2] = ["ebpf", "pcap"];

fn handshakes(data: &Path, extra: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/live/handshakes.sh");
    let mut args = vec![
        "env",
        "LIVE_CONNECTIONS=1000",
        "LIVE_BULK=0",
        concat!("TLSRUM=", env!("CARGO_BIN_EXE_tlsrum")),
    ];
    let data = format!("BENCH_DATA={}", data.display());
    args.push(&data);
    args.extend([
        "bash",
        script.to_str().expect("a UTF-8 path"),
        "--speeds",
        "1",
        "--backends",
        "ebpf pcap",
        "--no-wrk",
    ]);
    args.extend(extra);
    common::run(&args)
}

/// Each backend's row says its records are those of the replay.
fn assert_rows_match_replay(out: &str) {
    for backend in BACKENDS {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("{backend} ")))
            .unwrap_or_else(|| panic!("no {backend} row in:\n{out}"));
        assert!(
            row.contains("records: 1000 ") && row.contains("same as replay: yes"),
            "{backend}'s records differ from replay's:\n{out}"
        );
    }
}

#[test]
fn the_live_handshake_benchmark_checks_records_both_ways() {
    let tools = ["tcpreplay", "tcprewrite", "curl", "python3"];
    if common::skip(
        "the_live_handshake_benchmark_checks_records_both_ways",
        &tools,
    ) {
        return;
    }
    let data = Scratch::new("live-bench-smoke");

    let with_events = handshakes(&data.0, &[]);
    assert_rows_match_replay(&with_events);
    assert!(!with_events.contains("no --events"), "{with_events}");

    let metrics_only = handshakes(&data.0, &["--no-events"]);
    assert_rows_match_replay(&metrics_only);
    assert!(
        metrics_only.contains("(no --events: records compared from /metrics)"),
        "{metrics_only}"
    );
}
