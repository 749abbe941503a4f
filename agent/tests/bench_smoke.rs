//! A short smoke of the replay benchmark (`make bench`, bench/README.md):
//! `bench/run.sh` on a small capture, with this build of tlsrum, one run
//! each of `cat`, the bare libpcap loop, tlsrum on one thread and on two,
//! nDPI's ndpiReader and tshark. The timings mean nothing here (benchmarks are measured by the
//! make target, never in a test); what must hold is that the machinery
//! works end to end: mkcapture builds and multiplies `pcaps/`, every tool
//! reads the whole capture, the report has a row per tool, and tlsrum's
//! records of the generated capture are the same at one and two threads
//! (after a sort), QUIC copies included (each gets its own server port).
//! mkcapture's own unit tests run too, and so do the training runs of the
//! profile-guided release build (`scripts/pgo-train.sh`).

mod common;

use std::path::Path;

use common::Need;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");

/// The tools the report has a row for (`--threads 2` adds `tlsrum-2`).
const TOOLS: [&str; 6] = [
    "cat",
    "pcapcount",
    "tlsrum",
    "tlsrum-2",
    "ndpiReader",
    "tshark",
];

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `replay` of NDJSON records on `threads` threads, without the file.
fn replay_args(threads: &str) -> [&str; 6] {
    [
        "replay",
        "--format",
        "ndjson",
        "--quiet",
        "--threads",
        threads,
    ]
}

fn sorted_records(capture: &Path, threads: &str) -> Vec<String> {
    let mut args = vec![BIN];
    args.extend(replay_args(threads));
    args.push(capture.to_str().unwrap());
    let out = common::run(&args);
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn the_replay_benchmark_runs_end_to_end() {
    if common::skip_unless(
        "the_replay_benchmark_runs_end_to_end",
        &[Need::Tools(&["tshark", "editcap", "ndpiReader"])],
    ) {
        return;
    }
    let mkcapture = root().join("bench/mkcapture");
    common::run(&[
        env!("CARGO"),
        "test",
        "--release",
        "--quiet",
        "--manifest-path",
        mkcapture.join("Cargo.toml").to_str().unwrap(),
        "--target-dir",
        mkcapture.join("target").to_str().unwrap(),
    ]);

    let data = std::env::temp_dir().join(format!("tlsrum-bench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let out = common::run(&[
        "bash",
        root().join("bench/run.sh").to_str().unwrap(),
        // ~39,000 frames: rounds enough (4,096 frames each at two
        // threads) for the threads to take shards' rounds from each other.
        "--connections",
        "2000",
        "--bulk-ratio",
        "2",
        "--runs",
        "1",
        "--threads",
        "2",
        // Not the default (ndjson): the option reaches every tlsrum run.
        "--format",
        "table",
        "--tlsrum",
        BIN,
        "--data",
        data.to_str().unwrap(),
    ]);
    // The report: one row per tool with its packets/s, and the ratios.
    let rows: Vec<(&str, f64)> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [tool, secs, pps, ..] if secs.parse::<f64>().is_ok() => {
                    Some((*tool, pps.parse::<f64>().ok()?))
                }
                _ => None,
            }
        })
        .collect();
    for tool in TOOLS {
        assert!(
            rows.iter().any(|&(t, pps)| t == tool && pps > 0.0),
            "no report row with packets/s for {tool}:\n{out}"
        );
    }
    // Each tool's row ends with the host's steal during its runs, a percentage.
    for row in out.lines() {
        let w: Vec<&str> = row.split_whitespace().collect();
        if w.len() > 2 && TOOLS.contains(&w[0]) && w[1].parse::<f64>().is_ok() {
            let pct = w[w.len() - 1]
                .strip_suffix('%')
                .and_then(|p| p.parse::<f64>().ok());
            assert!(
                pct.is_some_and(|p| (0.0..=100.0).contains(&p)),
                "no steal percentage at the end of {row:?}:\n{out}"
            );
        }
    }
    assert!(
        out.contains("tlsrum's output: --format table"),
        "the report does not name the format timed:\n{out}"
    );
    for ratio in [
        "cat/tlsrum",
        "pcapcount/tlsrum",
        "tlsrum/ndpiReader",
        "tlsrum/tshark",
        "tlsrum-2/tlsrum",
    ] {
        assert!(out.contains(ratio), "no {ratio} in the report:\n{out}");
    }

    let capture = data.join("big.pcap");
    let one = sorted_records(&capture, "1");
    assert!(
        one.len() >= 2000,
        "{} records from 2,000 connection copies",
        one.len()
    );
    let quic = one
        .iter()
        .filter(|r| r.contains("\"transport\":\"quic\""))
        .count();
    assert!(quic > 0, "no QUIC record in the generated capture");
    assert!(
        one == sorted_records(&capture, "2"),
        "records at 1 and 2 threads differ"
    );
    // More threads than this machine's cores: every thread takes shards'
    // rounds as they come.
    assert!(
        one == sorted_records(&capture, "3"),
        "records at 1 and 3 threads differ"
    );
    // A sink that fails stops every thread: an error, not a hang.
    for threads in ["2", "3"] {
        fails_on_a_full_disk(&capture, threads);
    }
    // The profile-guided build's training runs (scripts/build-release.sh)
    // with this build: it fails if any of its replays does.
    common::run(&[
        "bash",
        root().join("scripts/pgo-train.sh").to_str().unwrap(),
        BIN,
        capture.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_dir_all(&data);
}

/// `replay --threads N` writing to /dev/full exits with the write error
/// within a minute (the threads that analyze must not wait for rounds that
/// never come).
fn fails_on_a_full_disk(capture: &Path, threads: &str) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let mut child = std::process::Command::new(BIN)
        .args(replay_args(threads))
        .arg(capture)
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tlsrum");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for tlsrum") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("--threads {threads} writing to /dev/full still runs after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(
        !status.success() && err.contains("No space left on device"),
        "--threads {threads} writing to /dev/full: {status}, stderr: {err}"
    );
}

/// `bench/instructions.sh` (exact instruction and allocation counts under
/// callgrind) on a small generated capture, this build named twice: the
/// report has a row for each, its per-packet and per-connection figures
/// are the totals divided, and the same binary counts the same to within
/// a thousandth (only the per-process hash keys differ between runs).
#[test]
fn the_instruction_count_benchmark_runs_end_to_end() {
    if common::skip_unless(
        "the_instruction_count_benchmark_runs_end_to_end",
        &[Need::Tools(&["valgrind"])],
    ) {
        return;
    }
    let data = std::env::temp_dir().join(format!("tlsrum-instr-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let out = common::run(&[
        "bash",
        root().join("bench/instructions.sh").to_str().unwrap(),
        "--connections",
        "200",
        "--bulk-ratio",
        "2",
        "--data",
        data.to_str().unwrap(),
        BIN,
        BIN,
    ]);
    let packets: f64 = out
        .split_once(" packets, 200 connections")
        .and_then(|(head, _)| head.rsplit_once('(')?.1.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in the report:\n{out}"));
    let rows: Vec<Vec<f64>> = out
        .lines()
        .filter(|l| l.starts_with(BIN))
        .map(|l| {
            l[BIN.len()..]
                .split_whitespace()
                .map(|w| w.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "a row per binary:\n{out}");
    for row in &rows {
        let [total, per_packet, per_conn, allocs, _ratio] = row[..] else {
            panic!("five figures a row:\n{out}");
        };
        assert!(
            total > 1e6,
            "{total} instructions for 200 connections:\n{out}"
        );
        assert!((per_packet - total / packets).abs() <= 1.0, "{out}");
        assert!((per_conn - total / 200.0).abs() <= 1.0, "{out}");
        assert!(allocs > 1.0, "{allocs} allocations a connection:\n{out}");
    }
    let ratio = rows[1][4];
    assert!(
        (0.999..=1.001).contains(&ratio),
        "the same binary counted {ratio} of itself:\n{out}"
    );
    let _ = std::fs::remove_dir_all(&data);
}
