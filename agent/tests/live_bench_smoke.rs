//! A short smoke of the live benchmarks (`bench/live/`, bench/live/README.md),
//! one after another (they share the namespaces they create):
//! - `handshakes.sh`: a thousand real handshakes sent by tcpreplay through a
//!   veth at their captured pace, to an agent on each backend, once with
//!   its `--events` file and once serving `/metrics` only (`--no-events`,
//!   as in production);
//! - `cpu.sh`: the same handshakes beside an iperf3 transfer,
//!   one run per backend;
//! - `throughput.sh`: an iperf3 transfer in windows without and with the
//!   agent, and the TC programs timed.
//!
//! The rates and CPU mean nothing here; what must hold is that the harness
//! works end to end: it builds its capture, starts and stops the agents,
//! and finds every backend's records the same, by kind, as `tlsrum replay`
//! of the same file (read from the events file or from
//! `tls_handshakes_total`), and the reports have their rows.
//!
//! Needs root, network namespaces, BPF, tcpreplay and iperf3: without them
//! the test says why and passes, except under CI=true, where it fails.

mod common;

use std::path::Path;

use common::scratch::Scratch;

const BACKENDS: [&str; 2] = ["ebpf", "pcap"];

/// `bench/live/SCRIPT ARGS` with this build of tlsrum, a capture of 1,000
/// handshakes (no bulk records) and its generated files under `data`.
fn script(name: &str, data: &Path, args: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bench/live")
        .join(name);
    let data = format!("BENCH_DATA={}", data.display());
    let mut all = vec![
        "env",
        "LIVE_CONNECTIONS=1000",
        "LIVE_BULK=0",
        concat!("TLSRUM=", env!("CARGO_BIN_EXE_tlsrum")),
        &data,
        "bash",
        path.to_str().expect("a UTF-8 path"),
    ];
    all.extend(args);
    common::run(&all)
}

/// The line of `backend`'s result (starting with it, after any indent).
fn row<'a>(out: &'a str, backend: &str) -> &'a str {
    out.lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(&format!("{backend} ")))
        .unwrap_or_else(|| panic!("no {backend} row in:\n{out}"))
}

#[test]
fn the_live_benchmarks_run_end_to_end() {
    let tools = ["tcpreplay", "tcprewrite", "iperf3", "curl", "python3"];
    if common::skip("the_live_benchmarks_run_end_to_end", &tools) {
        return;
    }
    let data = Scratch::new("live-bench-smoke");
    let handshakes = ["--speeds", "1", "--backends", "ebpf pcap", "--no-wrk"];

    let with_events = script("handshakes.sh", &data.0, &handshakes);
    assert!(!with_events.contains("no --events"), "{with_events}");
    let metrics_only = script(
        "handshakes.sh",
        &data.0,
        &[&handshakes[..], &["--no-events"]].concat(),
    );
    assert!(
        metrics_only.contains("(no --events: records compared from /metrics)"),
        "{metrics_only}"
    );
    for out in [&with_events, &metrics_only] {
        for backend in BACKENDS {
            let row = row(out, backend);
            assert!(
                row.contains("records: 1000 ") && row.contains("same as replay: yes"),
                "{backend}'s records differ from replay's:\n{out}"
            );
            assert!(
                busy_secs(row) > 0.0,
                "no machine busy time in {backend}'s row:\n{out}"
            );
        }
    }

    let cpu = script(
        "cpu.sh",
        &data.0,
        &[
            "--runs", "1", "--speed", "1", "--secs", "2", "--bulk", "200M",
        ],
    );
    for backend in BACKENDS {
        let row = row(
            cpu.split("agent CPU, handshakes + bulk")
                .nth(1)
                .unwrap_or(""),
            backend,
        );
        assert!(
            row.contains("agent_cpu_s=") && row.contains("(same as replay: yes)"),
            "{backend}'s row in cpu.sh's summary:\n{cpu}"
        );
    }
    assert!(cpu.contains("pcap/eBPF = "), "{cpu}");

    let throughput = script("throughput.sh", &data.0, &["--windows", "2", "--secs", "1"]);
    for line in [
        "median without:",
        "median with:",
        "with/neighbours without, median:",
        "95% interval of that median:",
    ] {
        assert!(throughput.contains(line), "no {line:?} in:\n{throughput}");
    }
    // The TC programs ran on the transfer's packets while timed.
    let timed = throughput
        .lines()
        .find(|l| l.contains("TC programs (stats on):"))
        .unwrap_or_else(|| panic!("no timed TC programs in:\n{throughput}"));
    let runs: u64 = timed
        .split(", ")
        .find_map(|p| p.strip_suffix(" runs"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no run count in {timed:?}"));
    assert!(runs > 0, "{timed}");
}

/// The seconds of "machine busy S s" in a report row; 0 without one.
fn busy_secs(row: &str) -> f64 {
    row.split_once("machine busy ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}
