//! A short smoke of the kernel-cost benchmark (`cargo run --release -p
//! tlsrum --example kernel_cost`, bench/live/README.md): a thousand runs a
//! row. The timings mean nothing here; what must hold is that every row
//! still takes the path it is named for, as the kernel's counters show
//! (a row whose frame came to take another path would time something
//! else under the same name).
//!
//! Needs root and BPF: without them the test says why and passes, except
//! under CI=true, where it fails.

mod common;

use std::process::Command;

#[test]
fn every_kernel_cost_row_takes_its_path() {
    if common::skip_unless(
        "every_kernel_cost_row_takes_its_path",
        &[common::Need::Root, common::Need::Bpf],
    ) {
        return;
    }
    let out = Command::new(common::cargo_build::example("kernel_cost"))
        .arg("1000")
        .output()
        .expect("running kernel_cost");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Row name -> the counters its runs moved, as printed.
    let rows = [
        ("unwatched port", ""),
        ("done flow, data", "done +1000"),
        ("done flow, ACK", "done +1000"),
        ("plain TCP past the budget", "budget +1000"),
        ("TLS segment resent: a header", "events_sent +1000"),
        ("SYN: a header", "events_sent +1000, new_flows +1"),
        (
            "SYN + 517-byte ClientHello",
            "events_sent +1000, bytes_sent +517000, new_flows +1000",
        ),
    ];
    for (name, path) in rows {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no row {name:?} in:\n{text}"));
        let (_, after) = line
            .split_once(" ns")
            .unwrap_or_else(|| panic!("no time in {line:?}"));
        assert_eq!(after.trim(), path, "row {name:?}:\n{text}");
    }
}
