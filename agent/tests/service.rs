//! `tlsrum live` run as a service (issue 17), with real processes: an
//! `openssl s_server` in one network namespace, `openssl s_client` in
//! another, the agent (libpcap backend) on the server's end of the veth.
//!
//! - `events_append_reopen_metrics_and_top`: one agent run checks
//!   `--events` appending to what was there, logrotate's `mv` then
//!   `kill -HUP` (the old file keeps the records before, the new one gets
//!   the ones after, every line whole); /, /healthz, `tlsrum_build_info`,
//!   `process_*` and a family present before any handshake and at 0 for a
//!   name without 0-RTT; and `--top` (not a terminal: plain tables) showing
//!   the server names of real traffic.
//! - `metrics_address_forms`: `--metrics :PORT`, `PORT`, `localhost:PORT`
//!   and `[::]:PORT` serve where they say; `--summary-interval` writes its
//!   line to standard error.
//!
//! Needs root, network namespaces, `ip`, `openssl`, `curl`; skipped
//! locally without them, a failure under CI=true. A few seconds each.

mod common;

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    ns_cmd, skip_unless, wait_for, wait_for_text, Need, Netns, Procs, Topology, SERVER_IP,
};

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const PORT: u16 = 4433;
const METRICS: u16 = 9853;

fn handshake(t: &Topology, name: &str) {
    let out = ns_cmd(
        &t.client_ns,
        &[
            "sh",
            "-c",
            &format!("echo | timeout 10 openssl s_client -connect {SERVER_IP}:{PORT} -servername {name} 2>&1"),
        ],
    )
    .output()
    .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("New,"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The NDJSON lines of a file; every one must be a whole JSON object.
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line {l:?}: {e}")))
        .collect()
}

fn names(records: &[serde_json::Value]) -> Vec<&str> {
    records.iter().filter_map(|r| r["sni"].as_str()).collect()
}

/// (status line's code, body) of a GET inside `ns`.
fn get(ns: &str, url: &str) -> (u16, String) {
    let out = ns_cmd(ns, &["curl", "-s", "-g", "-w", "\n%{http_code}", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn events_append_reopen_metrics_and_top() {
    if skip_unless(
        "events_append_reopen_metrics_and_top",
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&["ip", "openssl", "curl"]),
        ],
    ) {
        return;
    }
    let t = Topology::new("sv");
    let (key, cert) = t.self_signed("a.test");
    let mut procs = Procs::default();
    let server = common::servers::s_server(
        &t.server_ns,
        &PORT.to_string(),
        &cert,
        &key,
        &["-www", "-quiet"],
    );
    procs.spawn("s_server", server);
    t.wait_listening(PORT, &mut procs);

    // What an earlier run wrote stays: the agent appends.
    let events = t.path("events.ndjson");
    let earlier = r#"{"earlier":"run"}"#;
    std::fs::write(&events, format!("{earlier}\n")).unwrap();
    let log = t.path("agent.log");
    let top = t.path("top.txt");
    let mut agent = ns_cmd(
        &t.server_ns,
        &[
            BIN,
            "live",
            "--iface",
            &t.veth,
            "--backend",
            "pcap",
            "--port",
            &PORT.to_string(),
        ],
    );
    agent
        .args([
            "--metrics",
            &format!("127.0.0.1:{METRICS}"),
            "--top",
            "--summary-interval",
            "1",
        ])
        .arg("--events")
        .arg(&events)
        .stdin(Stdio::null())
        .stdout(File::create(&top).unwrap())
        .stderr(File::create(&log).unwrap());
    let pid = procs.spawn("agent", agent);
    wait_for_text(&log, "tlsrum: watching", 20, &mut procs);

    // Before any handshake: the endpoints, build info, process metrics,
    // and the traffic families' HELP/TYPE.
    let base = format!("http://127.0.0.1:{METRICS}");
    let (code, index) = get(&t.server_ns, &format!("{base}/"));
    assert_eq!(code, 200);
    assert!(
        index.contains("/metrics") && index.contains("/healthz"),
        "{index}"
    );
    let (code, health) = get(&t.server_ns, &format!("{base}/healthz"));
    assert_eq!((code, health.starts_with("ok")), (200, true), "{health}");
    assert_eq!(get(&t.server_ns, &format!("{base}/nothing")).0, 404);
    let (_, before) = get(&t.server_ns, &format!("{base}/metrics"));
    let build = before
        .lines()
        .find(|l| l.starts_with("tlsrum_build_info{"))
        .unwrap_or_else(|| panic!("no build info:\n{before}"));
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && build.contains("backend=\"pcap\"")
            && !build.contains("commit=\"\"")
            && build.ends_with(" 1"),
        "{build}"
    );
    for metric in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_virtual_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        let value: f64 = before
            .lines()
            .find_map(|l| l.strip_prefix(metric))
            .unwrap_or_else(|| panic!("no {metric}"))
            .parse()
            .unwrap();
        assert!(
            value >= 0.0 && (metric.starts_with("process_cpu") || value > 0.0),
            "{metric}{value}"
        );
    }
    for family in [
        "tls_early_data",
        "tls_hello_retry_requests",
        "tls_resumption_offers",
        "tls_handshakes",
        "tls_handshake_duration_seconds",
    ] {
        assert!(
            before.contains(&format!("# TYPE {family} ")),
            "no {family} before any handshake:\n{before}"
        );
    }
    assert!(
        before.contains("tlsrum_kernel_lost_bytes_total 0"),
        "{before}"
    );

    // Three handshakes, logrotate's move and HUP, three more.
    for _ in 0..3 {
        handshake(&t, "a.test");
    }
    wait_for("3 records", Duration::from_secs(20), || {
        lines(&events).len() >= 4
    });
    let rotated = t.path("events.ndjson.1");
    std::fs::rename(&events, &rotated).unwrap();
    // SAFETY: kill(2) on the agent this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
    wait_for("the reopened file", Duration::from_secs(10), || {
        events.exists()
    });
    for _ in 0..3 {
        handshake(&t, "b.test");
    }
    wait_for("3 records after the HUP", Duration::from_secs(20), || {
        lines(&events).len() >= 3
    });
    std::thread::sleep(Duration::from_millis(1500));
    let old = lines(&rotated);
    assert_eq!(
        old[0],
        serde_json::from_str::<serde_json::Value>(earlier).unwrap()
    );
    assert_eq!(names(&old[1..]), ["a.test"; 3], "{old:?}");
    assert_eq!(names(&lines(&events)), ["b.test"; 3]);

    // A name without 0-RTT or HRR shows 0, not nothing.
    let (_, after) = get(&t.server_ns, &format!("{base}/metrics"));
    for series in [
        r#"tls_early_data_total{outcome="accepted",transport="tcp",server_name="b.test"} 0"#,
        r#"tls_early_data_total{outcome="rejected",transport="tcp",server_name="b.test"} 0"#,
        r#"tls_hello_retry_requests_total{transport="tcp",server_name="b.test"} 0"#,
        r#"tls_resumption_offers_total{outcome="declined",method="ticket",transport="tcp",server_name="a.test"} 0"#,
    ] {
        assert!(
            after.lines().any(|l| l == series),
            "no `{series}`:\n{after}"
        );
    }

    // --top: tables of the traffic, the busiest names as rows.
    wait_for("a --top table with b.test", Duration::from_secs(5), || {
        std::fs::read_to_string(&top)
            .unwrap_or_default()
            .contains("b.test")
    });
    let tables = std::fs::read_to_string(&top).unwrap();
    assert!(
        !tables.contains('\x1b'),
        "escape codes without a terminal:\n{tables}"
    );
    for name in ["a.test", "b.test"] {
        let row = tables
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{tables}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        let rate: f64 = cols[1].parse().unwrap();
        assert!(rate > 0.0 && cols[2] == "0%" && cols[3] == "0", "{row}");
        let p50: f64 = cols[4].parse().unwrap_or_else(|_| panic!("no p50: {row}"));
        assert!(p50 > 0.0 && p50 < 1000.0, "{row}");
    }
    assert!(
        tables.contains("SERVER_NAME") && tables.contains("P95_MS"),
        "{tables}"
    );

    let status = procs.stop("agent", libc::SIGINT, Duration::from_secs(10));
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

#[test]
fn metrics_address_forms() {
    if skip_unless(
        "metrics_address_forms",
        &[Need::Root, Need::Netns, Need::Tools(&["ip", "curl"])],
    ) {
        return;
    }
    let ns = Netns::new("svm");
    let dir = std::env::temp_dir().join(format!("tlsrum-svc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // (--metrics, URLs that must answer, URLs that must not)
    let cases: [(&str, &[&str], &[&str]); 4] = [
        (
            ":9853",
            &["http://127.0.0.1:9853/healthz", "http://[::1]:9853/healthz"],
            &[],
        ),
        ("9853", &["http://127.0.0.1:9853/healthz"], &[]),
        ("localhost:9853", &["http://localhost:9853/healthz"], &[]),
        ("[::]:9853", &["http://[::1]:9853/healthz"], &[]),
    ];
    for (i, (addr, good, bad)) in cases.iter().enumerate() {
        let mut procs = Procs::default();
        let log = dir.join(format!("agent{i}.log"));
        let mut agent = ns_cmd(
            &ns.name,
            &[
                BIN,
                "live",
                "--iface",
                "lo",
                "--backend",
                "pcap",
                "--metrics",
                addr,
            ],
        );
        if i == 0 {
            // The one-line summary, asked for where stderr is no terminal.
            agent.args(["--summary-interval", "1"]);
        }
        agent
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        procs.spawn("agent", agent);
        wait_for_text(&log, "tlsrum: watching", 20, &mut procs);
        if i == 0 {
            wait_for_text(
                &log,
                " s: 0 handshakes (0.0/s) for 0 names, - resumed",
                10,
                &mut procs,
            );
        }
        for url in *good {
            let (code, body) = get(&ns.name, url);
            assert_eq!(code, 200, "--metrics {addr}: {url}: {body}");
        }
        for url in *bad {
            assert_eq!(get(&ns.name, url).0, 0, "--metrics {addr}: {url} answers");
        }
        let status = procs.stop("agent", libc::SIGINT, Duration::from_secs(10));
        assert!(
            status.success(),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
    }
    let bad = Command::new(BIN)
        .args(["live", "--iface", "lo", "--metrics", "localhost"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--metrics"));
    let _ = std::fs::remove_dir_all(&dir);
}
