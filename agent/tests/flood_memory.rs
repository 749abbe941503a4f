//! Memory ceilings under floods (README "Limits"): with default settings,
//! `tlsrum replay` of a million SYNs, a million ClientHellos that are never
//! answered, 200,000 QUIC client Initials (each its own connection ID,
//! really decryptable), or the three kinds together, peaks at no more than
//! 400 MiB, and still accounts for every flow. Before the memory budget
//! the same floods took 591 MiB, 827 MiB and 1.48 GB.
//!
//! The floods come from the `flood` example (agent/examples/flood.rs)
//! through a FIFO, so no gigabyte of capture is written to disk; the peak
//! is the child's own (wait4's ru_maxrss).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

const CEILING_KIB: i64 = 400 * 1024;

/// The `flood` example next to this test's profile, built if missing
/// (`cargo test` builds examples; `cargo test --test flood_memory` does not).
fn flood_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("examples/flood");
    if !bin.exists() {
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(p) => p,
            None => "dev",
        };
        let ok = Command::new(env!("CARGO"))
            .args([
                "build",
                "-q",
                "--profile",
                profile,
                "-p",
                "tlsrum",
                "--example",
                "flood",
            ])
            .status()
            .expect("running cargo")
            .success();
        assert!(
            ok && bin.exists(),
            "could not build the flood example at {}",
            bin.display()
        );
    }
    bin
}

struct Run {
    peak_kib: i64,
    stats: Value,
}

/// Replays `count` flows of `kind` with default settings; returns the
/// replay's peak resident memory and its `--stats`.
fn replay_flood(kind: &str, count: u32) -> Run {
    let dir = std::env::temp_dir().join(format!("tlsrum-flood-{}-{kind}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("flood.pcap");
    let c = CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let mut gen = Command::new(flood_bin())
        .args(["--kind", kind, "--count", &count.to_string(), "-o"])
        .arg(&fifo)
        .spawn()
        .expect("flood generator");
    let stats_path = dir.join("stats.json");
    // Reaped by wait4 below, which also reports its peak memory.
    #[allow(clippy::zombie_processes)]
    let replay = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--stats", "--quiet"])
        .arg(&fifo)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stats_path).unwrap())
        .spawn()
        .expect("tlsrum replay");
    // wait4, not Child::wait: the child's own peak comes with it.
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = replay.id() as libc::pid_t;
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    assert!(gen.wait().unwrap().success(), "flood generator failed");
    let stderr = std::fs::read_to_string(&stats_path).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{kind}: replay failed: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let json = &stderr[stderr
        .find('{')
        .unwrap_or_else(|| panic!("{kind}: no --stats in {stderr}"))..];
    Run {
        peak_kib: usage.ru_maxrss,
        stats: serde_json::from_str(json).expect("--stats JSON"),
    }
}

fn n(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {path}"))
}

/// Every TCP flow ends counted once; every QUIC connection has a record.
fn check_accounting(kind: &str, s: &Value, tcp_flows: u64, quic_conns: u64) {
    assert_eq!(n(s, "flows_created"), tcp_flows, "{kind}: {s}");
    assert_eq!(
        n(s, "flows_created"),
        n(s, "tls_connections") + n(s, "non_tls_flows") + n(s, "unidentified_flows"),
        "{kind}: {s}"
    );
    assert_eq!(n(s, "quic.connections"), quic_conns, "{kind}: {s}");
}

#[test]
fn floods_stay_under_the_ceiling_with_default_settings() {
    let mut peaks = Vec::new();

    // SYNs: small state, the flow cap (200,000) binds before memory.
    let r = replay_flood("syn", 1_000_000);
    check_accounting("syn", &r.stats, 1_000_000, 0);
    assert_eq!(n(&r.stats, "unidentified_flows"), 1_000_000);
    assert!(n(&r.stats, "flows_evicted") > 0, "{}", r.stats);
    peaks.push(("1,000,000 SYNs", r.peak_kib));

    // ClientHellos never answered: the memory budget binds; every one
    // still has its record (incomplete, some evicted).
    let r = replay_flood("hello", 1_000_000);
    check_accounting("hello", &r.stats, 1_000_000, 0);
    assert_eq!(n(&r.stats, "tls_connections"), 1_000_000);
    assert!(n(&r.stats, "memory_evictions") > 0, "{}", r.stats);
    peaks.push(("1,000,000 ClientHellos", r.peak_kib));

    // QUIC Initials, each decrypted and kept as a connection.
    let r = replay_flood("quic", 200_000);
    check_accounting("quic", &r.stats, 0, 200_000);
    assert!(n(&r.stats, "memory_evictions") > 0, "{}", r.stats);
    peaks.push(("200,000 QUIC Initials", r.peak_kib));

    // All at once: TCP and QUIC share the one budget.
    let r = replay_flood("mixed", 600_000);
    check_accounting("mixed", &r.stats, 400_000, 200_000);
    assert!(n(&r.stats, "memory_evictions") > 0, "{}", r.stats);
    peaks.push(("600,000 mixed", r.peak_kib));

    for (what, kib) in &peaks {
        eprintln!("flood {what}: peak {} MiB", kib / 1024);
    }
    for (what, kib) in &peaks {
        assert!(
            *kib <= CEILING_KIB,
            "{what}: peak {} MiB > {} MiB",
            kib / 1024,
            CEILING_KIB / 1024
        );
    }
}
