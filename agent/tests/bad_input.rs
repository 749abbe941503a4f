//! Bad input gets a clear error, loses nothing already read, and never
//! makes tlsrum panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tlsrum(args: &[&str], files: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(args)
        .args(files)
        .output()
        .unwrap()
}

/// A scratch file, removed with its directory when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A file in a directory of its own: with one directory for all of a
/// process's tests, one test's drop removed the directory (empty for a
/// moment) between another's creating it and writing its file there.
fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("tlsrum-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir.join(name))
}

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps/openssl-openssl-tls13-psk.pcapng")
}

fn lines(o: &Output) -> usize {
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// Classic pcap global header for a link type, then the given packets.
fn pcap_file(linktype: u32, packets: &[&[u8]]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(0xa1b2c3d4u32.to_le_bytes());
    f.extend(2u16.to_le_bytes());
    f.extend(4u16.to_le_bytes());
    f.extend([0; 8]);
    f.extend(65535u32.to_le_bytes());
    f.extend(linktype.to_le_bytes());
    for (i, p) in packets.iter().enumerate() {
        f.extend((1_700_000_000u32 + i as u32).to_le_bytes());
        f.extend(0u32.to_le_bytes());
        f.extend((p.len() as u32).to_le_bytes());
        f.extend((p.len() as u32).to_le_bytes());
        f.extend(*p);
    }
    f
}

#[test]
fn truncated_capture_names_the_file_and_keeps_earlier_connections() {
    let whole = std::fs::read(sample()).unwrap();
    let full = tlsrum(&["replay", "--format", "ndjson"], &[&sample()]);
    assert!(full.status.success());
    let n = lines(&full);
    assert!(n >= 2);
    // Cut inside the last block: every connection before it must still be reported.
    let cut = scratch("cut.pcapng");
    std::fs::write(&cut, &whole[..whole.len() - 40]).unwrap();
    let out = tlsrum(&["replay", "--format", "ndjson"], &[&*cut]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(
        err.contains("cut.pcapng") && err.contains("truncated or corrupt after packet"),
        "{err}"
    );
    assert_eq!(lines(&out), n, "records before the damage are kept");
}

#[test]
fn not_a_capture_is_a_clear_error() {
    let junk = scratch("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let out = tlsrum(&["replay"], &[&*junk]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        err.contains("junk.pcap") && err.contains("cannot open as pcap or pcapng"),
        "{err}"
    );
}

/// A link type tlsrum does not read: its frames are counted, and the file
/// named once with the link type's number and name.
#[test]
fn unknown_link_type_is_a_clear_error() {
    let f = scratch("usb.pcap");
    std::fs::write(&f, pcap_file(189, &[b"\x00\x01\x02", b"\x03"])).unwrap(); // LINKTYPE_USB_LINUX
    let out = tlsrum(&["replay", "--stats"], &[&*f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        err.contains("usb.pcap")
            && err.contains("link type 189 (USB_LINUX")
            && err.contains("not supported: its 2 frames were counted as unknown_link_frames"),
        "{err}"
    );
    assert_eq!(err.matches("link type 189").count(), 1, "{err}");
    assert!(err.contains("\"unknown_link_frames\": 2"), "{err}");
}

#[test]
fn non_tls_traffic_is_counted_and_ignored() {
    // A plain-HTTP request on port 80 over raw IPv4.
    let mut pkt = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    pkt.extend([
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    pkt.extend(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n");
    let len = pkt.len() as u16;
    pkt[2..4].copy_from_slice(&len.to_be_bytes());
    let f = scratch("http.pcap");
    std::fs::write(&f, pcap_file(101, &[&pkt])).unwrap();
    let out = tlsrum(&["replay", "--format", "ndjson", "--stats"], &[&*f]);
    assert!(out.status.success());
    assert_eq!(lines(&out), 0);
    let stats: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(stats["tcp_packets"], 1);
    assert_eq!(stats["tls_connections"], 0);
}

/// Random corruption of real captures: any byte of any packet may change.
/// The analyzer must neither panic nor stop reading.
#[test]
fn corrupted_packets_never_panic() {
    let mut cap = pcap::Capture::from_file(sample()).unwrap();
    let mut frames = Vec::new();
    while let Ok(p) = cap.next_packet() {
        frames.push(p.data.to_vec());
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..300 {
        let mut a = analyzer::Analyzer::new(analyzer::Config::default());
        for (i, f) in frames.iter().enumerate() {
            let mut f = f.clone();
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % f.len();
                f[at] = next() as u8;
            }
            if next() % 7 == 0 {
                f.truncate((next() as usize) % (f.len() + 1));
            }
            a.push_frame(
                round as f64 + i as f64 * 1e-3,
                analyzer::wire::LinkType::Ethernet,
                &f,
            );
        }
        a.finish();
        let _ = a.take_records();
        assert_eq!(a.stats().packets as usize, frames.len());
    }
}

#[test]
fn bpf_filter_selects_packets_and_a_bad_one_is_a_clear_error() {
    let all = tlsrum(&["replay", "--format", "ndjson"], &[&sample()]);
    assert!(lines(&all) >= 2);
    let none = tlsrum(
        &["replay", "--format", "ndjson", "--filter", "tcp port 1"],
        &[&sample()],
    );
    assert!(none.status.success());
    assert_eq!(lines(&none), 0);
    let same = tlsrum(
        &["replay", "--format", "ndjson", "--filter", "tcp"],
        &[&sample()],
    );
    assert_eq!(same.stdout, all.stdout);
    let bad = tlsrum(&["replay", "--filter", "tcp port ((("], &[&sample()]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_ne!(bad.status.code(), Some(0));
    assert!(err.contains("bad --filter expression"), "{err}");
}

#[test]
fn port_option_limits_the_flows_examined() {
    let all = tlsrum(&["replay", "--format", "ndjson"], &[&sample()]);
    let port = {
        let first: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&all.stdout).lines().next().unwrap())
                .unwrap();
        first["server"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .to_string()
    };
    let on = tlsrum(
        &["replay", "--format", "ndjson", "--port", &port],
        &[&sample()],
    );
    assert_eq!(on.stdout, all.stdout);
    let off = tlsrum(
        &["replay", "--format", "ndjson", "--port", "1"],
        &[&sample()],
    );
    assert_eq!(lines(&off), 0);
}

/// Issue 13: a capture taken with a small snap length (`tcpdump -s 120`,
/// made here with editcap) loses handshake bytes; the user is told once per
/// file, in words, how many packets and at what length, and what to do.
#[test]
fn a_small_snap_length_is_reported_once_per_file() {
    let cut = scratch("snaplen.pcapng");
    let ok = Command::new("editcap")
        .args(["-s", "120"])
        .arg(sample())
        .arg(&*cut)
        .status()
        .expect("editcap (wireshark-common, scripts/install-deps.sh)")
        .success();
    assert!(ok);
    let out = tlsrum(
        &["replay", "--format", "ndjson", "--quiet"],
        &[&*cut, &sample()],
    );
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("snap length")).collect();
    assert_eq!(said.len(), 1, "once, for the cut file only: {err}");
    assert!(
        said[0].contains("snaplen.pcapng")
            && said[0].contains("(120 bytes)")
            && said[0].contains("-s 0"),
        "{err}"
    );
    let whole = tlsrum(&["replay", "--format", "ndjson", "--quiet"], &[&sample()]);
    assert!(!String::from_utf8_lossy(&whole.stderr).contains("snap length"));
}
