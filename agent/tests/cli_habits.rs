//! The command line as tcpdump and tshark users type it (issue 17):
//!
//! - `reading_by_flag_stdin_or_path_gives_the_same_records`: `-r FILE`,
//!   positional paths, `-` and `-r -` (standard input, from a real
//!   `tcpdump -w -` and from gzip and zstd), `-nr`, all the same records;
//!   standard input named twice is a usage error.
//! - `count_stops_after_n_packets_over_all_inputs`: `-c N`, as tcpdump.
//! - `a_bad_filter_is_one_usage_error_before_anything_is_read`: replay and
//!   live alike: exit 2, one message, nothing on stdout.
//! - `exit_status_follows_the_table`: 0, 1 (partial results printed), 2
//!   (nothing on stdout, whatever the format), and the table `--help` and
//!   the README show is [`tlsrum::exit::TABLE`].
//! - `directory_scans_take_captures_by_content_and_name_the_rest`:
//!   upper-case names, files without an extension, compressed ones; what
//!   is skipped is named on stderr with why.
//! - `records_name_their_capture_with_several_inputs_or_h`.
//! - `html_dash_is_standard_output_instead_of_the_table`.
//! - `live_short_flags_filter_write_and_events_to_stdout`: `live -i -f -w
//!   --events -` in a namespace with real openssl s_server and curl.
//!
//! The first six need gzip, zstd, tcpdump and editcap (scripts/install-deps.sh)
//! and take about a second together; the live one needs root and network
//! namespaces too. A missing tool skips locally and fails under CI=true.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::scratch::Scratch;
use common::{ns_cmd, skip_unless, Need, Procs, Topology, SERVER_IP};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Two committed captures of different servers.
fn psk() -> PathBuf {
    repo().join("pcaps/openssl-openssl-tls13-psk.pcapng")
}
fn cache() -> PathBuf {
    repo().join("pcaps/curl-nginx-tls13-cache-only.pcapng")
}

/// `tlsrum ARGS`, standard input from `stdin` (None: /dev/null).
fn tlsrum(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        let mut w = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        // A thread: the child may fill stdout before it has read all of it.
        std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
        });
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ndjson(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The records of a successful run.
fn records(args: &[&str], stdin: Option<&[u8]>) -> Vec<Value> {
    let out = tlsrum(args, stdin);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    ndjson(&out)
}

/// Output of a shell pipeline; panics if it fails.
fn sh(script: &str) -> Vec<u8> {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(out.status.success(), "{script}: {}", stderr(&out));
    out.stdout
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const TOOLS: &[&str] = &["gzip", "zstd", "tcpdump", "editcap"];

#[test]
fn reading_by_flag_stdin_or_path_gives_the_same_records() {
    if skip_unless(
        "reading_by_flag_stdin_or_path_gives_the_same_records",
        &[Need::Tools(TOOLS)],
    ) {
        return;
    }
    let p = psk();
    let want = records(&["replay", "--format", "ndjson", s(&p)], None);
    assert!(want.len() >= 2);
    assert!(want.iter().all(|r| r.get("capture").is_none()), "one input");
    assert_eq!(
        records(&["replay", "--format", "ndjson", "-r", s(&p)], None),
        want
    );
    assert_eq!(
        records(&["replay", "--format", "ndjson", "-nr", s(&p)], None),
        want,
        "-n is accepted out of tcpdump habit"
    );
    let plain = std::fs::read(&p).unwrap();
    assert_eq!(
        records(&["replay", "--format", "ndjson", "-"], Some(&plain)),
        want
    );
    // Real tcpdump writing pcap (not pcapng) to a pipe, as in `tcpdump -w - | tlsrum replay -`.
    let from_tcpdump = sh(&format!("tcpdump -r {} -w - 2>/dev/null", s(&p)));
    assert_eq!(&from_tcpdump[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "pcap");
    assert_eq!(
        records(
            &["replay", "--format", "ndjson", "-r", "-"],
            Some(&from_tcpdump)
        ),
        want
    );
    for compress in ["gzip -c", "zstd -q -c"] {
        let bytes = sh(&format!("{compress} {}", s(&p)));
        assert_eq!(
            records(&["replay", "--format", "ndjson", "-r", "-"], Some(&bytes)),
            want,
            "{compress} on standard input"
        );
    }
    // -r files come first, then the paths; with two, each record names its capture.
    let both = records(
        &["replay", "--format", "ndjson", "-r", s(&cache()), s(&p)],
        None,
    );
    let names: Vec<&str> = both
        .iter()
        .map(|r| r["capture"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&s(&cache())));
    assert_eq!(names.last(), Some(&s(&p)));
    // Standard input can be read once.
    let twice = tlsrum(&["replay", "-", "-r", "-"], Some(&plain));
    assert_eq!(twice.status.code(), Some(2), "{}", stderr(&twice));
    assert!(twice.stdout.is_empty());
    assert!(stderr(&twice).contains("once"), "{}", stderr(&twice));
    // No input at all is a usage error.
    let none = tlsrum(&["replay"], None);
    assert_eq!(none.status.code(), Some(2));
    assert!(none.stdout.is_empty());
}

/// Packets read, from `--stats` (top-level `packets`).
fn packets_read(args: &[&str], stdin: Option<&[u8]>) -> u64 {
    let out = tlsrum(args, stdin);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("  \"packets\": "))
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no packets in {}", stderr(&out)))
}

#[test]
fn count_stops_after_n_packets_over_all_inputs() {
    if skip_unless(
        "count_stops_after_n_packets_over_all_inputs",
        &[Need::Tools(TOOLS)],
    ) {
        return;
    }
    let (a, b) = (psk(), cache());
    let all_a = packets_read(&["replay", "--stats", s(&a)], None);
    let all_b = packets_read(&["replay", "--stats", s(&b)], None);
    assert!(all_a > 10 && all_b > 10);
    assert_eq!(
        packets_read(&["replay", "--stats", "-c", "10", s(&a)], None),
        10
    );
    // Across captures: all of the first, then what is left of the second.
    let n = (all_a + 5).to_string();
    assert_eq!(
        packets_read(&["replay", "--stats", "-c", &n, s(&a), s(&b)], None),
        all_a + 5
    );
    // More than there are: everything, exit 0.
    let n = (all_a + all_b + 100).to_string();
    assert_eq!(
        packets_read(&["replay", "--stats", "-c", &n, s(&a), s(&b)], None),
        all_a + all_b
    );
    // A compressed stream on standard input, stopped early, is no error.
    let gz = sh(&format!("gzip -c {}", s(&b)));
    assert_eq!(
        packets_read(&["replay", "--stats", "-c", "7", "-"], Some(&gz)),
        7
    );
}

#[test]
fn a_bad_filter_is_one_usage_error_before_anything_is_read() {
    let dir = Scratch::new("cli-filter");
    std::fs::copy(psk(), dir.path("a.pcapng")).unwrap();
    std::fs::copy(cache(), dir.path("b.pcapng")).unwrap();
    for args in [
        vec!["replay", "-f", "tcp prot 443", s(&psk()), s(&cache())],
        vec!["replay", "--filter", "tcp port (((", s(&dir.0)],
        vec!["replay", "--format", "csv", "-f", "host", s(&psk())],
        vec![
            "live",
            "-i",
            "lo",
            "--backend",
            "pcap",
            "-f",
            "tcp prot 443",
        ],
    ] {
        let out = tlsrum(&args, None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
        assert_eq!(
            err.matches("bad --filter expression").count(),
            1,
            "{args:?}: once, not per file: {err}"
        );
        assert!(!err.contains("a.pcapng"), "nothing was opened: {err}");
    }
    // The eBPF backend selects by port in the kernel: a filter needs pcap,
    // said before anything is attached (no root needed to see it).
    let out = tlsrum(&["live", "-i", "lo", "-f", "tcp port 443"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--backend pcap"), "{}", stderr(&out));
    // A good one selects, on a plain and on a compressed file alike.
    let port = records(&["replay", "--format", "ndjson", s(&psk())], None)[0]["server"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let kept = records(
        &[
            "replay",
            "--format",
            "ndjson",
            "-f",
            &format!("tcp port {port}"),
            s(&psk()),
        ],
        None,
    );
    assert!(!kept.is_empty());
    assert!(records(
        &["replay", "--format", "ndjson", "-f", "udp", s(&psk())],
        None
    )
    .is_empty());
}

#[test]
fn exit_status_follows_the_table() {
    let dir = Scratch::new("cli-exit");
    let whole = std::fs::read(psk()).unwrap();
    let cut = dir.path("cut.pcapng");
    std::fs::write(&cut, &whole[..whole.len() - 40]).unwrap();
    let junk = dir.path("junk.pcap");
    std::fs::write(&junk, b"not a capture").unwrap();
    let missing = dir.path("missing.pcap");
    let good = records(&["replay", "--format", "ndjson", s(&cache())], None);
    assert!(!good.is_empty());

    // 0: everything read.
    let ok = tlsrum(&["replay", s(&psk()), s(&cache())], None);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    // 1: one input damaged or unreadable, the others' results still printed.
    for bad in [&cut, &junk, &missing] {
        let out = tlsrum(&["replay", s(&cache()), s(bad)], None);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {}", stderr(&out));
        assert!(stdout(&out).contains("TOTAL"), "{bad:?}: the table printed");
        assert!(stderr(&out).contains(s(bad)), "{bad:?} named");
    }
    for bad in [&junk, &missing] {
        let out = tlsrum(
            &[
                "replay",
                "--format",
                "ndjson",
                "--no-filename",
                s(&cache()),
                s(bad),
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(ndjson(&out), good, "{bad:?}: the good capture's records");
    }
    // A damaged capture's records before the damage are printed.
    let out = tlsrum(&["replay", "--format", "ndjson", s(&cut)], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(!ndjson(&out).is_empty());
    // 2: nothing could be read; nothing on stdout in any format.
    for format in ["table", "ndjson", "csv"] {
        for bad in [&junk, &missing] {
            let out = tlsrum(&["replay", "--format", format, s(bad)], None);
            assert_eq!(out.status.code(), Some(2), "{format} {bad:?}");
            assert!(out.stdout.is_empty(), "{format}: {}", stdout(&out));
        }
        let out = tlsrum(&["replay", "--format", format, s(&junk), s(&missing)], None);
        assert_eq!(out.status.code(), Some(2), "{format}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{format}: {}", stdout(&out));
    }
    // 2: usage errors.
    for args in [
        vec!["replay", "--no-such-flag", s(&psk())],
        vec!["replay", "--format", "xml", s(&psk())],
        vec!["replay", "-H", "--no-filename", s(&psk())],
    ] {
        let out = tlsrum(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }
    // One table, in --help of every command and in the README.
    for args in [&["--help"][..], &["replay", "--help"], &["live", "--help"]] {
        let out = tlsrum(args, None);
        assert_eq!(out.status.code(), Some(0));
        assert!(
            stdout(&out).contains(tlsrum::exit::TABLE),
            "{args:?}: {}",
            stdout(&out)
        );
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.contains(tlsrum::exit::TABLE),
        "README.md must show tlsrum::exit::TABLE as it is"
    );
}

#[test]
fn directory_scans_take_captures_by_content_and_name_the_rest() {
    if skip_unless(
        "directory_scans_take_captures_by_content_and_name_the_rest",
        &[Need::Tools(TOOLS)],
    ) {
        return;
    }
    let dir = Scratch::new("cli-scan");
    let scan = dir.path("scan");
    std::fs::create_dir_all(scan.join("sub")).unwrap();
    let one = |p: &Path| records(&["replay", "--format", "ndjson", s(p)], None);
    let (a, b) = (one(&psk()), one(&cache()));
    // Names a scan takes: upper case, no extension at all, compressed without
    // saying what is inside, classic pcap from tcpdump.
    std::fs::copy(psk(), scan.join("A.PCAPNG")).unwrap();
    sh(&format!(
        "gzip -c {} > {}",
        s(&cache()),
        s(&scan.join("B.PCAPNG.GZ"))
    ));
    sh(&format!(
        "zstd -q -c {} > {}",
        s(&psk()),
        s(&scan.join("trace.zst"))
    ));
    sh(&format!(
        "gzip -c {} > {}",
        s(&cache()),
        s(&scan.join("noext"))
    ));
    sh(&format!(
        "tcpdump -r {} -w {} 2>/dev/null",
        s(&psk()),
        s(&scan.join("sub/dump"))
    ));
    // Not captures: named on stderr with why.
    std::fs::write(scan.join("notes.txt"), "notes").unwrap();
    std::fs::write(scan.join("README"), "about these captures").unwrap();
    sh(&format!("echo text | xz > {}", s(&scan.join("old.xz"))));
    let out = tlsrum(&["replay", "--format", "ndjson", s(&scan)], None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let got = ndjson(&out);
    let from = |name: &str| {
        let path = scan.join(name);
        got.iter()
            .filter(|r| r["capture"].as_str() == Some(s(&path)))
            .map(|r| {
                let mut r = r.clone();
                r.as_object_mut().unwrap().remove("capture");
                r
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(from("A.PCAPNG"), a);
    assert_eq!(from("B.PCAPNG.GZ"), b);
    assert_eq!(from("trace.zst"), a);
    assert_eq!(from("noext"), b);
    assert_eq!(from("sub/dump"), a);
    assert_eq!(got.len(), 3 * a.len() + 2 * b.len(), "nothing else: {err}");
    assert!(
        err.contains("skipped 2 files, not pcap or pcapng")
            && err.contains("README")
            && err.contains("notes.txt"),
        "{err}"
    );
    assert!(
        err.contains("skipped 1 file, compressed with xz") && err.contains("old.xz"),
        "{err}"
    );
}

#[test]
fn records_name_their_capture_with_several_inputs_or_h() {
    let p = psk();
    let one = records(&["replay", "--format", "ndjson", s(&p)], None);
    let h = records(&["replay", "--format", "ndjson", "-H", s(&p)], None);
    assert_eq!(h.len(), one.len());
    for (mut with, without) in h.into_iter().zip(&one) {
        assert_eq!(with["capture"], s(&p));
        with.as_object_mut().unwrap().remove("capture");
        assert_eq!(&with, without);
    }
    let two = records(&["replay", "--format", "ndjson", s(&p), s(&cache())], None);
    assert!(two.iter().all(|r| r["capture"].is_string()));
    let none = records(
        &[
            "replay",
            "--format",
            "ndjson",
            "--no-filename",
            s(&p),
            s(&cache()),
        ],
        None,
    );
    assert!(none.iter().all(|r| r.get("capture").is_none()));
    // CSV: a last column, only then.
    let csv = |args: &[&str]| stdout(&tlsrum(args, None));
    let plain = csv(&["replay", "--format", "csv", s(&p)]);
    assert!(!plain.lines().next().unwrap().contains("capture"));
    let with = csv(&["replay", "--format", "csv", "-H", s(&p)]);
    let mut lines = with.lines();
    assert!(lines.next().unwrap().ends_with(",capture"));
    assert!(lines.all(|l| l.ends_with(&format!(",{}", s(&p)))));
    // The summary table is the same either way.
    assert_eq!(
        csv(&["replay", s(&p)]),
        csv(&["replay", "-H", s(&p)]),
        "table"
    );
}

#[test]
fn html_dash_is_standard_output_instead_of_the_table() {
    let dir = Scratch::new("cli-html");
    let file = dir.path("r.html");
    let to_file = tlsrum(&["replay", "--html", s(&file), s(&psk())], None);
    assert_eq!(to_file.status.code(), Some(0));
    assert!(
        stdout(&to_file).contains("TOTAL"),
        "the table, besides a file"
    );
    let to_stdout = tlsrum(&["replay", "--html", "-", s(&psk())], None);
    assert_eq!(to_stdout.status.code(), Some(0), "{}", stderr(&to_stdout));
    assert_eq!(
        to_stdout.stdout,
        std::fs::read(&file).unwrap(),
        "the report alone on stdout, as in the file"
    );
    assert!(stdout(&to_stdout).starts_with("<!DOCTYPE html>"));
    // Two things for one stdout is a usage error.
    let both = tlsrum(
        &["replay", "--html", "-", "--format", "ndjson", s(&psk())],
        None,
    );
    assert_eq!(both.status.code(), Some(2));
    assert!(both.stdout.is_empty());
    assert!(
        stderr(&both).contains("standard output"),
        "{}",
        stderr(&both)
    );
}

/// Ports of the two s_servers (TLS, `-www`): the filter keeps the first.
const KEPT_PORT: u16 = 24431;
const DROPPED_PORT: u16 = 24432;

#[test]
fn live_short_flags_filter_write_and_events_to_stdout() {
    if skip_unless(
        "live_short_flags_filter_write_and_events_to_stdout",
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&["openssl", "curl", "ip"]),
        ],
    ) {
        return;
    }
    let topo = Topology::new("cli");
    let mut procs = Procs::default();
    let (key, cert) = topo.self_signed("cli.test");
    for port in [KEPT_PORT, DROPPED_PORT] {
        let cmd = common::servers::s_server(
            &topo.server_ns,
            &port.to_string(),
            &cert,
            &key,
            &["-quiet", "-www"],
        );
        procs.spawn(&format!("s_server-{port}"), cmd);
        topo.wait_listening(port, &mut procs);
    }
    let events = topo.path("events.ndjson");
    let log = topo.path("agent.log");
    let written = topo.path("written.pcapng");
    let mut cmd = ns_cmd(
        &topo.server_ns,
        &[
            BIN,
            "live",
            "-i",
            &topo.veth,
            "--backend",
            "pcap",
            "--port",
            &KEPT_PORT.to_string(),
            "--port",
            &DROPPED_PORT.to_string(),
            "-f",
            &format!("tcp port {KEPT_PORT}"),
            "-w",
            s(&written),
            "--events",
            "-",
            "--metrics",
            "127.0.0.1:29853",
        ],
    );
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&events).unwrap())
        .stderr(std::fs::File::create(&log).unwrap());
    procs.spawn("agent", cmd);
    common::wait_for_text(&log, "tlsrum: watching", 20, &mut procs);
    let each = 3;
    for port in [KEPT_PORT, DROPPED_PORT] {
        let mut script = format!("curl -sS -k --resolve cli.test:{port}:{SERVER_IP}");
        for _ in 0..each {
            script.push_str(&format!(" -o /dev/null https://cli.test:{port}/"));
        }
        let out = ns_cmd(&topo.client_ns, &["sh", "-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", stderr(&out));
    }
    // Records of the kept port, no other: wait until they are all out.
    let read = || -> Vec<Value> {
        std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    common::wait_for("the agent's records", Duration::from_secs(15), || {
        read().len() >= each
    });
    std::thread::sleep(Duration::from_millis(500));
    let status = procs.stop("agent", libc::SIGINT, Duration::from_secs(10));
    let agent_log = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{agent_log}");
    let got = read();
    let port_of = |r: &Value| {
        r["server"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(got.len(), each, "{got:?}\n{agent_log}");
    assert!(got.iter().all(|r| port_of(r) == KEPT_PORT.to_string()));
    assert!(got.iter().all(|r| r["sni"] == "cli.test"));
    // -w wrote what it analysed: replayed, the same connections.
    let replayed = records(&["replay", "--format", "ndjson", s(&written)], None);
    let key = |r: &Value| {
        (
            r["client"].clone(),
            r["handshake"].clone(),
            r["sni"].clone(),
        )
    };
    let mut a: Vec<_> = got.iter().map(key).collect();
    let mut b: Vec<_> = replayed.iter().map(key).collect();
    a.sort_by_key(|k| format!("{k:?}"));
    b.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(a, b, "replay of -w");
}
