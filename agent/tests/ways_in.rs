//! The ways TLS reaches tlsrum: link types, encapsulations and compressed
//! captures give the records the same traffic gives when captured plainly
//! (compared as NDJSON; only `capture`, the file's name, differs, and for
//! NFLOG the timestamps: see that test).
//!
//! - `nflog_capture_gives_the_plain_records`: real TLS connections
//!   (`openssl s_server`/`s_client`, full and resumed, TLS 1.2 and 1.3)
//!   between two network namespaces, captured at once by `tcpdump` on the
//!   veth (Ethernet) and on the kernel's NFLOG group that `nft` rules copy
//!   the packets to (LINKTYPE_NFLOG, natively).
//! - `ovs_gre_and_erspan_mirrors_give_the_plain_records`: the same
//!   connections through an Open vSwitch bridge (userspace datapath) that
//!   mirrors every packet into a GRE tunnel (Ethernet inside, 0x6558),
//!   ERSPAN type II and type III sessions over IPv4 and ERSPAN type II over
//!   IPv6, captured by `tcpdump` on the monitor's end of the underlay link,
//!   against a capture at the client. This kernel has no GRE or ERSPAN
//!   devices (CONFIG_NET_IPGRE unset, no modules), so OVS, which builds
//!   these headers itself, stands in for `ip link add ... type erspan`.
//! - `reframed_link_types_give_the_plain_records`: committed Ethernet
//!   captures re-framed by `tcprewrite` (tcpreplay) as Cisco HDLC, PPP with
//!   and without address/control and with a compressed protocol field, PPP
//!   in HDLC framing, PPP and Cisco HDLC with direction, 802.11 data frames
//!   (plain, QoS with four addresses), radiotap, PPI and ATM LLC/SNAP. This
//!   kernel has neither PPP nor mac80211_hwsim (CONFIG_PPP and
//!   CONFIG_MAC80211_HWSIM unset, no modules), so `pppd` and a simulated
//!   radio cannot run here: these link layers are re-framed by a real
//!   program, not captured natively. PPTP's GRE, CAPWAP, radiotap flags,
//!   protected and aggregate 802.11 frames are tested on built frames
//!   (analyzer/src/wire/).
//! - `compressed_captures_give_the_plain_records`: captures compressed by
//!   `gzip` and `zstd` (also several members or frames concatenated), pcap
//!   (`editcap -F pcap`) and pcapng; `--filter` on them; a directory scan
//!   takes `x.pcap.gz` and `x.pcapng.zst`.
//! - `a_named_pipe_is_read_plain_or_compressed`: `cat`, `gzip`, `zstd`
//!   writing into a FIFO that tlsrum reads.
//! - `damaged_or_unknown_compression_is_a_clear_error`.
//!
//! The namespace tests need root, network namespaces and their tools (nft;
//! Open vSwitch, ethtool, tshark; tcpdump, openssl): without them they say
//! why and pass, except under CI=true, where they fail. The others need
//! gzip, zstd, editcap and tcprewrite likewise.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::scratch::Scratch;
use common::{
    ns_cmd, run, skip_unless, wait_for, wait_for_text, Need, Netns, Procs, Topology, CLIENT_IP,
    SERVER_IP,
};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Committed captures of TCP traffic (Ethernet, IPv4) with full, resumed,
/// HRR and 0-RTT handshakes.
const PLAIN: &[&str] = &[
    "pcaps/curl-nginx-tls12-tickets-only.pcapng",
    "pcaps/curl-nginx-tls13-cache-only.pcapng",
    "pcaps/openssl-openssl-tls13-psk.pcapng",
];

/// `tlsrum replay --format ndjson` of `paths`: its records without
/// `capture` (the file's name), and its stderr. Panics if it fails.
fn records(paths: &[&Path], extra: &[&str]) -> Vec<Value> {
    let out = Command::new(BIN)
        .args(["replay", "--format", "ndjson"])
        .args(extra)
        .args(paths)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "replay {paths:?}: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("capture");
            v
        })
        .collect()
}

/// Runs a shell pipeline; panics with its output if it fails.
fn sh(script: &str) {
    run(&["sh", "-c", script]);
}

/// The link type in a classic pcap file's header (either byte order).
fn pcap_linktype(path: &Path) -> u32 {
    let b = std::fs::read(path).unwrap();
    let word = |at: usize| <[u8; 4]>::try_from(&b[at..at + 4]).unwrap();
    match word(0) {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => u32::from_le_bytes(word(20)),
        _ => u32::from_be_bytes(word(20)),
    }
}

#[test]
fn reframed_link_types_give_the_plain_records() {
    if skip_unless(
        "reframed_link_types_give_the_plain_records",
        &[Need::Tools(&["tcprewrite"])],
    ) {
        return;
    }
    let dir = Scratch::new("waysin-reframe");
    // 802.11 data frame headers (To DS; addresses; sequence 1).
    let addrs = "02,00,00,00,00,01,02,00,00,00,00,02,02,00,00,00,00,03,10,00";
    let data = format!("08,01,00,00,{addrs}");
    let qos_4addr = format!("88,03,00,00,{addrs},02,00,00,00,00,04,05,00");
    let snap = "aa,aa,03,00,00,00,08,00";
    let radiotap = "00,00,08,00,00,00,00,00";
    let ppi = "00,00,08,00,69,00,00,00";
    // (name, link type written, tcprewrite's options)
    let variants: Vec<(&str, u32, Vec<String>)> = vec![
        (
            "cisco-hdlc",
            104,
            vec![
                "--dlt=hdlc".into(),
                "--hdlc-address=15".into(),
                "--hdlc-control=0".into(),
            ],
        ),
        ("ppp", 9, user(9, "ff,03,00,21")),
        ("ppp-no-address-control", 9, user(9, "00,21")),
        ("ppp-compressed-protocol", 9, user(9, "21")),
        ("ppp-hdlc", 50, user(50, "ff,03,00,21")),
        ("ppp-with-dir", 204, user(204, "01,ff,03,00,21")),
        ("cisco-hdlc-with-dir", 205, user(205, "00,0f,00,08,00")),
        // libpcap takes its DLT_ATM_RFC1483 (11), writes LINKTYPE_ATM_RFC1483.
        ("atm-llc-snap", 100, user(11, snap)),
        ("ieee80211", 105, user(105, &format!("{data},{snap}"))),
        (
            "ieee80211-qos-4addr",
            105,
            user(105, &format!("{qos_4addr},{snap}")),
        ),
        (
            "radiotap",
            127,
            user(127, &format!("{radiotap},{qos_4addr},{snap}")),
        ),
        ("ppi", 192, user(192, &format!("{ppi},{data},{snap}"))),
    ];
    for plain in PLAIN {
        let plain = repo().join(plain);
        let want = records(&[&plain], &[]);
        assert!(want.len() >= 2, "{}", plain.display());
        for (name, linktype, opts) in &variants {
            let out = dir.path(&format!("{name}.pcap"));
            let mut args = vec!["tcprewrite".to_string()];
            args.extend(opts.iter().cloned());
            args.extend([
                "-i".into(),
                plain.to_str().unwrap().into(),
                "-o".into(),
                out.to_str().unwrap().into(),
            ]);
            run(&args.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(pcap_linktype(&out), *linktype, "{name}");
            let got = records(&[&out], &[]);
            assert_eq!(got, want, "{name} of {}", plain.display());
        }
    }
}

/// tcprewrite's options for a fixed link-layer header `hex` under `dlt`.
fn user(dlt: u32, hex: &str) -> Vec<String> {
    vec![
        "--dlt=user".into(),
        format!("--user-dlt={dlt}"),
        format!("--user-dlink={hex}"),
    ]
}

#[test]
fn compressed_captures_give_the_plain_records() {
    if skip_unless(
        "compressed_captures_give_the_plain_records",
        &[Need::Tools(&["gzip", "zstd", "editcap", "split"])],
    ) {
        return;
    }
    let dir = Scratch::new("waysin-compress");
    let scan = dir.path("scan");
    std::fs::create_dir_all(&scan).unwrap();
    let mut everything = Vec::new();
    for (i, plain) in PLAIN.iter().enumerate() {
        let plain = repo().join(plain);
        let want = records(&[&plain], &[]);
        everything.extend(want.clone());
        let p = |n: &str| dir.path(&format!("{i}-{n}"));
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let pcap = p("classic.pcap");
        run(&["editcap", "-F", "pcap", &s(&plain), &s(&pcap)]);
        assert_eq!(records(&[&pcap], &[]), want, "editcap -F pcap");
        for src in [&plain, &pcap] {
            let src = s(src);
            sh(&format!("gzip -c {src} > {}", s(&p("a.gz"))));
            sh(&format!("zstd -q -c {src} > {}", s(&p("a.zst"))));
            // Several gzip members and zstd frames, concatenated.
            let parts = s(&p("part-"));
            sh(&format!(
                "split -n 3 {src} {parts} && for f in {parts}*; do gzip -c $f; done > {} \
                 && for f in {parts}*; do zstd -q -c $f; done > {} && rm {parts}*",
                s(&p("multi.gz")),
                s(&p("multi.zst"))
            ));
            for c in ["a.gz", "a.zst", "multi.gz", "multi.zst"] {
                assert_eq!(records(&[&p(c)], &[]), want, "{c} of {src}");
            }
        }
        // --filter (BPF, compiled by libpcap) works on a compressed file:
        // the server's port keeps every connection; another keeps none.
        let port = want[0]["server"]
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap();
        let keep = format!("tcp port {port}");
        let kept = records(&[&p("a.zst")], &["--filter", &keep]);
        let kept_plain = records(&[&plain], &["--filter", &keep]);
        assert_eq!(kept, kept_plain);
        assert!(!kept.is_empty());
        assert!(records(&[&p("a.gz")], &["--filter", "udp"]).is_empty());
        // The directory scan's names.
        let ext = if i % 2 == 0 { "pcap.gz" } else { "pcapng.zst" };
        let src = if i % 2 == 0 {
            p("multi.gz")
        } else {
            p("a.zst")
        };
        std::fs::copy(&src, scan.join(format!("{i}.{ext}"))).unwrap();
    }
    std::fs::write(scan.join("notes.txt.gz"), b"not a capture").unwrap();
    let mut got = records(&[&scan], &[]);
    let key = |v: &Value| v.to_string();
    got.sort_by_key(key);
    everything.sort_by_key(key);
    assert_eq!(got, everything, "directory scan");
}

/// A capture that arrives through a named pipe (or `<(zcat x.gz)`), plain
/// or compressed: read once, as it streams.
#[test]
fn a_named_pipe_is_read_plain_or_compressed() {
    if skip_unless(
        "a_named_pipe_is_read_plain_or_compressed",
        &[Need::Tools(&["mkfifo", "gzip", "zstd"])],
    ) {
        return;
    }
    let dir = Scratch::new("waysin-fifo");
    let plain = repo().join(PLAIN[1]);
    let want = records(&[&plain], &[]);
    for (i, writer) in ["cat", "gzip -c", "zstd -q -c"].iter().enumerate() {
        let fifo = dir.path(&format!("pipe{i}.pcap"));
        run(&["mkfifo", fifo.to_str().unwrap()]);
        let mut w = Command::new("sh")
            .arg("-c")
            .arg(format!("{writer} {} > {}", plain.display(), fifo.display()))
            .spawn()
            .unwrap();
        assert_eq!(records(&[&fifo], &[]), want, "{writer} into a pipe");
        assert!(w.wait().unwrap().success());
    }
}

#[test]
fn damaged_or_unknown_compression_is_a_clear_error() {
    if skip_unless(
        "damaged_or_unknown_compression_is_a_clear_error",
        &[Need::Tools(&["gzip"])],
    ) {
        return;
    }
    let dir = Scratch::new("waysin-damaged");
    let plain = repo().join(PLAIN[0]);
    let gz = dir.path("whole.pcapng.gz");
    sh(&format!(
        "gzip -c {} > {}",
        plain.display(),
        gz.to_str().unwrap()
    ));
    let whole = std::fs::read(&gz).unwrap();
    let cut = dir.path("cut.pcapng.gz");
    std::fs::write(&cut, &whole[..whole.len() * 2 / 3]).unwrap();
    let xz = dir.path("a.pcap.xz");
    std::fs::write(&xz, [0xfd, b'7', b'z', b'X', b'Z', 0, 0, 0]).unwrap();
    let junk = dir.path("junk.pcap.gz");
    sh(&format!("echo not a capture | gzip > {}", junk.display()));
    // Exit status (agent/src/exit.rs): 1 when some of the input was read
    // (the cut stream's first packets), 2 when none could be.
    for (file, says, status) in [
        (&cut, "the gzip stream is corrupt after packet", 1),
        (&xz, "compressed with xz, which tlsrum does not read", 2),
        (
            &junk,
            "gzip-compressed, but what it holds is not pcap or pcapng",
            2,
        ),
    ] {
        let out = Command::new(BIN)
            .args(["replay", "--format", "ndjson"])
            .arg(file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{}: {err}", file.display());
        assert!(err.contains(says), "{}: {err}", file.display());
    }
}

/// The TLS server's port in the namespace tests.
const TLS_PORT: u16 = 4433;
/// The NFLOG group the nft rules copy packets to.
const NFLOG_GROUP: u16 = 5;

/// Starts `tcpdump` on `iface` in namespace `ns`, writing `file`, each
/// packet as it comes (no buffering that a stop could lose); waits until it
/// captures.
fn start_tcpdump(procs: &mut Procs, name: &str, ns: &str, iface: &str, file: &Path) {
    let log = file.with_extension("log");
    let mut cmd = ns_cmd(
        ns,
        &[
            "tcpdump",
            "--immediate-mode",
            "-U",
            "-n",
            "-s",
            "0",
            "-i",
            iface,
            "-w",
        ],
    );
    cmd.arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap());
    procs.spawn(name, cmd);
    wait_for_text(&log, "listening on", 20, procs);
}

/// `openssl s_server` on [`TLS_PORT`] in namespace `ns` (a self-signed
/// certificate for `host` in `dir`), listening when this returns.
fn start_s_server(procs: &mut Procs, ns: &str, dir: &Path, host: &str) {
    let (key, cert) = common::netns::self_signed(dir, host);
    let cmd = common::servers::s_server(ns, &TLS_PORT.to_string(), &cert, &key, &["-quiet"]);
    procs.spawn("s_server", cmd);
    wait_for("s_server listening", Duration::from_secs(10), || {
        let out = ns_cmd(ns, &["ss", "-Hltn", &format!("sport = :{TLS_PORT}")])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    });
    procs.check_alive();
}

/// Four TLS connections from namespace `ns` to `server`: a full handshake
/// and a resumed one, in TLS 1.3 and TLS 1.2 (`openssl s_client`).
fn four_handshakes(ns: &str, server: &str, host: &str, dir: &Path) {
    let sess = dir.join("sess.pem");
    let sess = sess.to_str().unwrap();
    for version in ["-tls1_3", "-tls1_2"] {
        for resume in [format!("-sess_out {sess}"), format!("-sess_in {sess}")] {
            let script = format!(
                "echo hello | openssl s_client -connect {server}:{TLS_PORT} \
                 -servername {host} {version} {resume} -ign_eof 2>&1 & \
                 sleep 1; kill $! 2>/dev/null; wait"
            );
            let out = ns_cmd(ns, &["sh", "-c", &script]).output().unwrap();
            assert!(out.status.success(), "s_client: {out:?}");
        }
    }
}

/// Records of the same connections from two capture points: equal but for
/// the times (ts within a second; the same timing fields present). Sorted
/// by client first.
fn assert_same_but_times(mut got: Vec<Value>, mut plain: Vec<Value>, what: &str) {
    let client = |v: &Value| v["client"].as_str().unwrap().to_owned();
    plain.sort_by_key(client);
    got.sort_by_key(client);
    assert_eq!(got.len(), plain.len(), "{what}: {got:#?}");
    for (mut a, mut b) in got.into_iter().zip(plain) {
        let (ta, tb) = (a["ts"].take(), b["ts"].take());
        let (ta, tb) = (ta.as_f64().unwrap(), tb.as_f64().unwrap());
        assert!((ta - tb).abs() < 1.0, "{what}: ts {ta} vs {tb}");
        let present = |t: Value| -> Vec<(String, bool)> {
            t.as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.is_null()))
                .collect()
        };
        let (ma, mb) = (present(a["timing"].take()), present(b["timing"].take()));
        assert_eq!(
            ma, mb,
            "{what}: timing fields (null or not) differ from the plain capture's"
        );
        assert_eq!(
            a, b,
            "{what} (left) and the plain capture's (right) records differ"
        );
    }
}

#[test]
fn nflog_capture_gives_the_plain_records() {
    if skip_unless(
        "nflog_capture_gives_the_plain_records",
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&["ip", "ss", "nft", "tcpdump", "openssl"]),
        ],
    ) {
        return;
    }
    let topo = Topology::new("fl");
    let mut procs = Procs::default();
    // Every packet of the server's port, both ways, to NFLOG group 5, each
    // sent to the capture at once (the kernel's default batches up to 100
    // for up to a second, and libpcap stamps a packet when it reads it).
    let rules = format!(
        "add table inet tlsrum\n\
         add chain inet tlsrum in {{ type filter hook input priority 0; }}\n\
         add chain inet tlsrum out {{ type filter hook output priority 0; }}\n\
         add rule inet tlsrum in tcp dport {TLS_PORT} log group {NFLOG_GROUP} queue-threshold 1\n\
         add rule inet tlsrum out tcp sport {TLS_PORT} log group {NFLOG_GROUP} queue-threshold 1\n"
    );
    let rules_file = topo.path("rules.nft");
    std::fs::write(&rules_file, rules).unwrap();
    run(&[
        "ip",
        "netns",
        "exec",
        &topo.server_ns,
        "nft",
        "-f",
        rules_file.to_str().unwrap(),
    ]);
    let (veth, nflog) = (topo.path("veth.pcap"), topo.path("nflog.pcap"));
    start_tcpdump(&mut procs, "veth", &topo.server_ns, &topo.veth, &veth);
    let nflog_if = format!("nflog:{NFLOG_GROUP}");
    start_tcpdump(&mut procs, "nflog", &topo.server_ns, &nflog_if, &nflog);
    start_s_server(&mut procs, &topo.server_ns, &topo.dir, "nflog.test");
    four_handshakes(&topo.client_ns, SERVER_IP, "nflog.test", &topo.dir);
    std::thread::sleep(Duration::from_millis(500));
    for name in ["veth", "nflog"] {
        let status = procs.stop(name, libc::SIGINT, Duration::from_secs(10));
        assert!(status.success(), "tcpdump {name}: {status}");
    }
    assert_eq!(pcap_linktype(&nflog), 239, "LINKTYPE_NFLOG");
    let plain = records(&[&veth], &[]);
    assert_eq!(plain.len(), 4, "{plain:#?}");
    // The same packets, but NFLOG's stamps are the times libpcap read the
    // kernel's messages (the kernel gives a time only for received
    // packets, and libpcap uses none).
    assert_same_but_times(records(&[&nflog], &[]), plain, "NFLOG");
}

/// Tunnels of the Open vSwitch test: (OVS port type and options, remote
/// address on the monitor's link, GRE protocol it must carry).
const OVS_TUNNELS: &[(&str, &str, &str)] = &[
    ("type=gre", "198.51.100.2", "0x6558"),
    (
        "type=erspan options:key=1 options:erspan_ver=1 options:erspan_idx=7",
        "198.51.100.3",
        "0x88be",
    ),
    (
        "type=erspan options:key=2 options:erspan_ver=2 options:erspan_dir=1 options:erspan_hwid=4",
        "198.51.100.4",
        "0x22eb",
    ),
    (
        "type=ip6erspan options:key=3 options:erspan_ver=1 options:erspan_idx=9",
        "2001:db8:100::2",
        "0x88be",
    ),
];

#[test]
fn ovs_gre_and_erspan_mirrors_give_the_plain_records() {
    if skip_unless(
        "ovs_gre_and_erspan_mirrors_give_the_plain_records",
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&[
                "ip",
                "ss",
                "ethtool",
                "ovsdb-tool",
                "ovsdb-server",
                "ovs-vswitchd",
                "ovs-vsctl",
                "ovs-appctl",
                "tcpdump",
                "tshark",
                "openssl",
            ]),
        ],
    ) {
        return;
    }
    // Guards drop in reverse order: the processes, then the namespaces
    // (killing what still runs in them), then the files.
    let dir = Scratch::new("waysin-ovs");
    let (sw, cl, sv, mon) = (
        Netns::new("ow"),
        Netns::new("oc"),
        Netns::new("os"),
        Netns::new("om"),
    );
    let mut procs = Procs::default();
    // Client and server on a switch (an OVS bridge, br-int, in namespace
    // sw); the switch's underlay link (bridge br0, port u0) to a monitor.
    for (a, a_ns, b, b_ns) in [
        ("c0", &cl, "c1", &sw),
        ("s0", &sv, "s1", &sw),
        ("u1", &mon, "u0", &sw),
    ] {
        run(&[
            "ip", "link", "add", a, "netns", &a_ns.name, "type", "veth", "peer", "name", b,
            "netns", &b_ns.name,
        ]);
        for (ns, dev) in [(a_ns, a), (b_ns, b)] {
            run(&["ip", "-n", &ns.name, "link", "set", dev, "up"]);
            // OVS's userspace datapath forwards what AF_PACKET hands it:
            // checksums must be complete and segments MTU-sized.
            run(&[
                "ip", "netns", "exec", &ns.name, "ethtool", "-K", dev, "tx", "off", "tso", "off",
                "gso", "off",
            ]);
        }
    }
    run(&[
        "ip",
        "-n",
        &cl.name,
        "addr",
        "add",
        &format!("{CLIENT_IP}/24"),
        "dev",
        "c0",
    ]);
    run(&[
        "ip",
        "-n",
        &sv.name,
        "addr",
        "add",
        &format!("{SERVER_IP}/24"),
        "dev",
        "s0",
    ]);
    for (addr, _, _) in OVS_TUNNELS.iter().map(|t| (t.1, 0, 0)) {
        let (prefix, nodad) = if addr.contains(':') {
            ("64", true)
        } else {
            ("24", false)
        };
        let mut args = vec!["ip", "-n", &mon.name, "addr", "add"];
        let cidr = format!("{addr}/{prefix}");
        args.extend([cidr.as_str(), "dev", "u1"]);
        if nodad {
            args.push("nodad");
        }
        run(&args);
    }

    // ovsdb-server and ovs-vswitchd of this test alone: their files, socket
    // and control sockets in the scratch directory.
    let d = |n: &str| dir.path(n).to_str().unwrap().to_owned();
    let db_sock = format!("unix:{}", d("db.sock"));
    run(&[
        "ovsdb-tool",
        "create",
        &d("conf.db"),
        "/usr/share/openvswitch/vswitch.ovsschema",
    ]);
    let daemon = |args: &[&str], log: &str| {
        let mut cmd = ns_cmd(&sw.name, args);
        cmd.env("OVS_RUNDIR", dir.path(""))
            .env("OVS_LOGDIR", dir.path(""))
            .env("OVS_DBDIR", dir.path(""))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.path(log)).unwrap());
        cmd
    };
    procs.spawn(
        "ovsdb-server",
        daemon(
            &[
                "ovsdb-server",
                &d("conf.db"),
                &format!("--remote=punix:{}", d("db.sock")),
                &format!("--pidfile={}", d("ovsdb-server.pid")),
                &format!("--unixctl={}", d("ovsdb-server.ctl")),
            ],
            "ovsdb-server.log",
        ),
    );
    wait_for("ovsdb-server's socket", Duration::from_secs(10), || {
        dir.path("db.sock").exists()
    });
    let vsctl = |args: &[&str]| {
        let mut all = vec!["ovs-vsctl", "--timeout=20", "--db", db_sock.as_str()];
        all.extend(args);
        run(&all)
    };
    vsctl(&["--no-wait", "init"]);
    procs.spawn(
        "ovs-vswitchd",
        daemon(
            &[
                "ovs-vswitchd",
                &db_sock,
                &format!("--pidfile={}", d("ovs-vswitchd.pid")),
                &format!("--unixctl={}", d("vswitchd.ctl")),
            ],
            "ovs-vswitchd.log",
        ),
    );
    vsctl(&[
        "add-br",
        "br0",
        "--",
        "set",
        "bridge",
        "br0",
        "datapath_type=netdev",
    ]);
    vsctl(&["add-port", "br0", "u0"]);
    vsctl(&[
        "add-br",
        "br-int",
        "--",
        "set",
        "bridge",
        "br-int",
        "datapath_type=netdev",
    ]);
    vsctl(&["add-port", "br-int", "c1", "--", "add-port", "br-int", "s1"]);
    run(&[
        "ip",
        "-n",
        &sw.name,
        "addr",
        "add",
        "198.51.100.1/24",
        "dev",
        "br0",
    ]);
    run(&[
        "ip",
        "-n",
        &sw.name,
        "addr",
        "add",
        "2001:db8:100::1/64",
        "dev",
        "br0",
        "nodad",
    ]);
    run(&["ip", "-n", &sw.name, "link", "set", "br0", "up"]);
    run(&["ip", "-n", &sw.name, "link", "set", "br-int", "up"]);
    // The monitor's MAC for every tunnel's remote end (the monitor does not
    // answer for tunnels it does not terminate).
    let link = run(&["ip", "-n", &mon.name, "-j", "link", "show", "u1"]);
    let mac = serde_json::from_str::<Value>(&link).unwrap()[0]["address"]
        .as_str()
        .unwrap()
        .to_owned();
    // One mirror per tunnel: every packet through br-int, copied into each.
    for (i, (kind, remote, _)) in OVS_TUNNELS.iter().enumerate() {
        let port = format!("tun{i}");
        let mut args = vec![
            "add-port",
            "br-int",
            port.as_str(),
            "--",
            "set",
            "interface",
        ];
        args.push(&port);
        let remote_opt = format!("options:remote_ip={remote}");
        args.extend(kind.split(' '));
        args.push(&remote_opt);
        vsctl(&args);
        vsctl(&[
            "--",
            "--id=@p",
            "get",
            "port",
            &port,
            "--",
            "--id=@m",
            "create",
            "mirror",
            &format!("name=m{i}"),
            "select-all=true",
            "output-port=@p",
            "--",
            "add",
            "bridge",
            "br-int",
            "mirrors",
            "@m",
        ]);
        run(&[
            "ovs-appctl",
            "-t",
            &d("vswitchd.ctl"),
            "tnl/neigh/set",
            "br0",
            remote,
            &mac,
        ]);
    }

    let (plain, tunnels) = (dir.path("plain.pcap"), dir.path("tunnels.pcap"));
    start_tcpdump(&mut procs, "plain", &cl.name, "c0", &plain);
    start_tcpdump(&mut procs, "tunnels", &mon.name, "u1", &tunnels);
    start_s_server(&mut procs, &sv.name, &dir.0, "ovs.test");
    four_handshakes(&cl.name, SERVER_IP, "ovs.test", &dir.0);
    std::thread::sleep(Duration::from_millis(500));
    for name in ["plain", "tunnels"] {
        let status = procs.stop(name, libc::SIGINT, Duration::from_secs(10));
        assert!(status.success(), "tcpdump {name}: {status}");
    }
    let want = records(&[&plain], &[]);
    assert_eq!(want.len(), 4, "{want:#?}");
    for (kind, remote, gre_proto) in OVS_TUNNELS {
        // What OVS sent is what this case claims (Wireshark's reading).
        let ip = if remote.contains(':') { "ipv6" } else { "ip" };
        let protos = run(&[
            "tshark",
            "-r",
            tunnels.to_str().unwrap(),
            "-Y",
            &format!("{ip}.dst == {remote} && gre"),
            "-T",
            "fields",
            "-e",
            "gre.proto",
        ]);
        let protos: std::collections::BTreeSet<&str> = protos.lines().collect();
        assert_eq!(
            protos,
            [*gre_proto].into_iter().collect(),
            "{kind} to {remote}"
        );
        let filter = format!("dst host {remote}");
        let got = records(&[&tunnels], &["--filter", &filter]);
        assert_same_but_times(got, want.clone(), &format!("OVS {kind}"));
    }
}
