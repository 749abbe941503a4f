//! The eBPF backend against a real kernel: two network namespaces joined by
//! a veth pair, `openssl s_server` in one and `openssl s_client` in the
//! other, the TC programs on the server's veth. One `#[test]` per scenario,
//! each with its own namespaces (common::Topology), so that they run side
//! by side without sharing an interface and the first failure hides none
//! of the others:
//!
//! - `tls12_handshake_arrives_whole_and_is_classified`: SYN, SYN-ACK, the
//!   ClientHello at the start of the client's first payload, a ~25 KB
//!   certificate in one piece, FIN; the analyzer classifies it;
//! - `bulk_after_done_stays_in_the_kernel`, `bulk_unmarked_tls_is_cut_off_by_the_kernel`,
//!   `bulk_plain_tcp_stops_at_the_byte_budget`: a 200 MB upload after the
//!   analyzer finished the flow (mark_done), one never marked (the kernel's
//!   own cut-off) and one of plain TCP (byte budget) each produce a small,
//!   bounded number of events;
//! - the TCX attach adds no qdisc and leaves none (checked in each of the
//!   four above);
//! - `netlink_mode_removes_only_the_qdisc_it_added`: the netlink attach mode
//!   adds and removes its clsact qdisc, and leaves one it did not add;
//!   `netlink_mode_captures_ipv6`; `quic_datagrams_long_headers_and_a_few_short_ones`;
//! - `loopback_gso_packets_arrive_whole`, `loopback_tiny_ring_counts_every_lost_byte`:
//!   on a namespace's loopback (egress only), GSO packets of 64 KiB and more;
//! - `unprivileged_attach_points_to_the_pcap_backend` (not root only).
//!
//! Needs root, BPF, `ip`, `tc`, `ss` and `openssl` (and python3 for the
//! plain TCP sink). Without them a test prints why and passes, except under
//! CI=true, where it fails.

#![allow(dead_code)]

use tlsrum::ebpf;

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use analyzer::{Analyzer, Config};
use common::{
    ns_cmd, run, InNetns, Netns, Procs, Topology, CLIENT_IP, CLIENT_IP6, SERVER_IP, SERVER_IP6,
};
use tlsrum::ebpf::{AttachMode, EbpfCapture, EbpfOptions, EventHeader, FlowTuple, EV_DONE};

const PORT: u16 = 4433;
/// A plain TCP sink (not TLS) the capture also watches.
const PLAIN_PORT: u16 = 4434;
const BULK_BYTES: u64 = 200_000_000;
const BUDGET: u32 = 64 * 1024;
const TOOLS: &[&str] = &["ip", "tc", "ss", "openssl"];

// ---- environment ----

/// One test's world: its own two namespaces and veth (IPv4 and IPv6), this
/// thread in the server's namespace, and `openssl s_server` there with a
/// ~25 KB certificate. Fields drop in order: the processes stop, the thread
/// goes home, the namespaces go (a capture, declared after the lab, is
/// detached before all that).
struct Lab {
    procs: Procs,
    _in_server_ns: InNetns,
    topo: Topology,
    cert_der: Vec<u8>,
}

impl Lab {
    /// None (and a message) when `test` cannot run here; a failure under CI.
    fn new(tag: &str, test: &str, tools: &[&str]) -> Option<Self> {
        if common::skip(test, &[TOOLS, tools].concat()) {
            return None;
        }
        let topo = Topology::dual_stack(tag);
        let (cert, key, cert_der) = make_cert(&topo.dir);
        let in_ns = InNetns::enter(&topo.server_ns);
        let mut procs = Procs::default();
        start_server(&topo, &cert, &key, &mut procs);
        Some(Lab {
            procs,
            _in_server_ns: in_ns,
            topo,
            cert_der,
        })
    }

    /// The TC programs attached with TCX on the server's veth, watching the
    /// TLS and the plain port with a byte budget; TCX adds no qdisc.
    fn attach_tcx(&self) -> EbpfCapture {
        let opts = EbpfOptions {
            ifaces: vec![self.topo.veth.clone()],
            ports: vec![PORT, PLAIN_PORT],
            max_payload_per_dir: BUDGET,
            ..Default::default()
        };
        let cap = EbpfCapture::attach(&opts).expect("attach");
        for (prog, insns) in cap.verified_instructions() {
            eprintln!("{prog}: verifier processed {insns:?} instructions");
        }
        assert!(
            !self.topo.qdiscs().contains("clsact"),
            "TCX attach added a qdisc:\n{}",
            self.topo.qdiscs()
        );
        cap
    }

    fn detach_tcx(&self, cap: EbpfCapture) {
        cap.detach().expect("detach");
        assert!(!self.topo.qdiscs().contains("clsact"));
    }
}

fn make_cert(dir: &Path) -> (PathBuf, PathBuf, Vec<u8>) {
    let key = dir.join("key.pem");
    let cert = dir.join("cert.pem");
    // ~1500 names make a certificate of about 27 KB: a flight of several
    // GSO segments and more than one 16 KiB chunk.
    let sans: Vec<String> = (0..1500).map(|i| format!("DNS:host{i}.big.test")).collect();
    run(&[
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        key.to_str().unwrap(),
        "-out",
        cert.to_str().unwrap(),
        "-days",
        "1",
        "-subj",
        "/CN=big.test",
        "-addext",
        &format!("subjectAltName=DNS:big.test,{}", sans.join(",")),
    ]);
    let der = Command::new("openssl")
        .args(["x509", "-in", cert.to_str().unwrap(), "-outform", "DER"])
        .output()
        .unwrap()
        .stdout;
    assert!(der.len() > 20_000, "certificate only {} bytes", der.len());
    (cert, key, der)
}

fn start_server(t: &Topology, cert: &Path, key: &Path, procs: &mut Procs) {
    let mut cmd = ns_cmd(
        &t.server_ns,
        &["openssl", "s_server", "-accept", &PORT.to_string()],
    );
    cmd.args([
        "-cert",
        cert.to_str().unwrap(),
        "-key",
        key.to_str().unwrap(),
        "-quiet",
    ])
    // stdin stays open: s_server would stop on its EOF.
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    procs.spawn("s_server", cmd);
    t.wait_listening(PORT, procs);
}

/// A client in the client namespace that sends `input` (a shell
/// pipeline's output) to the server over IPv4 and closes.
fn start_client(t: &Topology, input: &str, tls: &str) -> Child {
    start_client_to(&t.client_ns, &format!("{SERVER_IP}:{PORT}"), input, tls)
}

fn start_client_to(ns: &str, target: &str, input: &str, tls: &str) -> Child {
    let cmd = format!(
        "{input} | openssl s_client -connect {target} -servername big.test {tls} >/dev/null 2>&1"
    );
    ns_cmd(ns, &["sh", "-c", &cmd]).spawn().unwrap()
}

// ---- events ----

#[derive(Clone)]
struct Ev {
    ts: f64,
    h: EventHeader,
    payload: Vec<u8>,
}

impl Ev {
    fn client_port(&self) -> u16 {
        if self.h.dport == PORT {
            self.h.sport
        } else {
            self.h.dport
        }
    }
    fn sent_by_client(&self) -> bool {
        self.h.dport == PORT
    }
}

/// Polls until `child` has exited and the ring buffer has been quiet for a
/// moment; `after` runs after every poll with the new events.
fn collect(
    cap: &mut EbpfCapture,
    child: &mut Child,
    mut after: impl FnMut(&mut EbpfCapture, &[Ev]),
) -> Vec<Ev> {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut all = Vec::new();
    let mut exited_at: Option<Instant> = None;
    let mut last_event = Instant::now();
    loop {
        let mut batch = Vec::new();
        cap.poll(Duration::from_millis(50), &mut |e| {
            batch.push(Ev {
                ts: e.ts,
                h: *e.header,
                payload: e.payload.to_vec(),
            })
        })
        .unwrap();
        if !batch.is_empty() {
            last_event = Instant::now();
            after(cap, &batch);
            all.extend(batch);
        }
        if exited_at.is_none() && child.try_wait().unwrap().is_some() {
            exited_at = Some(Instant::now());
        }
        if let Some(t) = exited_at {
            if t.elapsed() > Duration::from_millis(500)
                && last_event.elapsed() > Duration::from_millis(300)
            {
                return all;
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("client did not finish in time");
        }
    }
}

fn counters(cap: &EbpfCapture) -> BTreeMap<&'static str, u64> {
    cap.counters().unwrap().into_iter().collect()
}

fn diff(
    after: &BTreeMap<&'static str, u64>,
    before: &BTreeMap<&'static str, u64>,
) -> BTreeMap<&'static str, u64> {
    after
        .iter()
        .map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0)))
        .collect()
}

/// The payload of one direction reassembled from sequence numbers, from
/// the byte after the SYN; None where a byte is missing.
fn stream(events: &[Ev], from_client: bool) -> Vec<Option<u8>> {
    let syn = events
        .iter()
        .find(|e| e.sent_by_client() == from_client && e.h.tcp_flags & 0x02 != 0)
        .expect("SYN of the direction");
    let isn = syn.h.seq.wrapping_add(1);
    let mut out: Vec<Option<u8>> = Vec::new();
    for e in events
        .iter()
        .filter(|e| e.sent_by_client() == from_client && (!e.payload.is_empty() || e.h.fill > 0))
    {
        let syn_adj = u32::from(e.h.tcp_flags & 0x02 != 0);
        let start =
            e.h.seq
                .wrapping_add(e.h.offset)
                .wrapping_add(syn_adj)
                .wrapping_sub(isn) as usize;
        if start > 10_000_000 {
            continue;
        }
        let fill = e.h.fill as usize;
        if out.len() < start + e.payload.len() + fill {
            out.resize(start + e.payload.len() + fill, None);
        }
        for (i, b) in e.payload.iter().enumerate() {
            out[start + i] = Some(*b);
        }
        // An application_data body the kernel kept: zeros stand for it.
        for slot in &mut out[start + e.payload.len()..start + e.payload.len() + fill] {
            slot.get_or_insert(0);
        }
    }
    out
}

/// The handshake-record bodies of a TLS stream, concatenated: a Certificate
/// message larger than a record (16 KiB) is split across records.
fn handshake_bytes(mut tls: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while tls.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([tls[3], tls[4]]));
        let Some(body) = tls.get(5..5 + len) else {
            break;
        };
        if tls[0] == 0x16 {
            out.extend_from_slice(body);
        }
        tls = &tls[5 + len..];
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// ---- the tests ----

#[test]
fn tls12_handshake_arrives_whole_and_is_classified() {
    let Some(lab) = Lab::new("h", "tls12_handshake_arrives_whole_and_is_classified", &[]) else {
        return;
    };
    let mut cap = lab.attach_tcx();
    handshake(&lab.topo, &mut cap, &lab.cert_der);
    lab.detach_tcx(cap);
}

#[test]
fn bulk_after_done_stays_in_the_kernel() {
    let Some(lab) = Lab::new("d", "bulk_after_done_stays_in_the_kernel", &[]) else {
        return;
    };
    let mut cap = lab.attach_tcx();
    bulk_after_done(&lab.topo, &mut cap);
    lab.detach_tcx(cap);
}

#[test]
fn bulk_unmarked_tls_is_cut_off_by_the_kernel() {
    let Some(lab) = Lab::new("u", "bulk_unmarked_tls_is_cut_off_by_the_kernel", &[]) else {
        return;
    };
    let mut cap = lab.attach_tcx();
    bulk_unmarked_tls(&lab.topo, &mut cap);
    lab.detach_tcx(cap);
}

#[test]
fn bulk_plain_tcp_stops_at_the_byte_budget() {
    let test = "bulk_plain_tcp_stops_at_the_byte_budget";
    let Some(mut lab) = Lab::new("p", test, &["python3", "bash"]) else {
        return;
    };
    let mut cap = lab.attach_tcx();
    bulk_plain_over_budget(&lab.topo, &mut cap, &mut lab.procs);
    lab.detach_tcx(cap);
}

#[test]
fn netlink_mode_removes_only_the_qdisc_it_added() {
    let Some(lab) = Lab::new("n", "netlink_mode_removes_only_the_qdisc_it_added", &[]) else {
        return;
    };
    netlink_mode(&lab.topo);
}

#[test]
fn netlink_mode_captures_ipv6() {
    let Some(lab) = Lab::new("6", "netlink_mode_captures_ipv6", &[]) else {
        return;
    };
    let mut cap = netlink_attach(&lab.topo);
    ipv6_handshake(&lab.topo, &mut cap);
    netlink_detach(&lab.topo, cap);
}

#[test]
fn quic_datagrams_long_headers_and_a_few_short_ones() {
    let test = "quic_datagrams_long_headers_and_a_few_short_ones";
    let Some(lab) = Lab::new("q", test, &[]) else {
        return;
    };
    let mut cap = netlink_attach(&lab.topo);
    quic_datagrams(&mut cap);
    netlink_detach(&lab.topo, cap);
}

#[test]
fn loopback_gso_packets_arrive_whole() {
    if common::skip("loopback_gso_packets_arrive_whole", &["ip"]) {
        return;
    }
    // This thread in a namespace of its own: its loopback, not the host's.
    let ns = Netns::new("lg");
    let _in_ns = InNetns::enter(&ns.name);
    loopback_gso();
}

#[test]
fn loopback_tiny_ring_counts_every_lost_byte() {
    if common::skip("loopback_tiny_ring_counts_every_lost_byte", &["ip"]) {
        return;
    }
    let ns = Netns::new("lt");
    let _in_ns = InNetns::enter(&ns.name);
    loopback_tiny_ring();
}

/// What an unprivileged user is told (as root there is nothing to check).
#[test]
fn unprivileged_attach_points_to_the_pcap_backend() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!(
            "unprivileged_attach_points_to_the_pcap_backend: running as root, nothing to check"
        );
        return;
    }
    let opts = EbpfOptions {
        ifaces: vec!["lo".into()],
        ..Default::default()
    };
    let err = format!(
        "{:#}",
        EbpfCapture::attach(&opts).expect_err("attach without privileges")
    );
    eprintln!("unprivileged attach: {err}");
    assert!(err.contains("--backend pcap"), "no hint in: {err}");
}

// ---- the scenarios ----

/// TLS 1.2 (certificate in the clear) with a ~25 KB certificate.
fn handshake(topo: &Topology, cap: &mut EbpfCapture, cert_der: &[u8]) {
    let before = counters(cap);
    let wall_start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let mut client = start_client(topo, "echo hello", "-tls1_2");
    let events = collect(cap, &mut client, |_, _| {});
    let wall_end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let delta = diff(&counters(cap), &before);
    eprintln!("handshake: {} events, counters {delta:?}", events.len());

    let port = events
        .iter()
        .find(|e| e.h.tcp_flags == 0x02)
        .expect("client SYN")
        .client_port();
    let conn: Vec<Ev> = events
        .iter()
        .filter(|e| e.client_port() == port)
        .cloned()
        .collect();
    assert!(
        conn.iter()
            .all(|e| e.ts > wall_start - 1.0 && e.ts < wall_end + 1.0),
        "timestamps off the wall clock"
    );
    assert!(conn
        .iter()
        .all(|e| e.h.ip_version == 4 && e.h.src().to_string() != "0.0.0.0"));
    assert!(
        conn.iter()
            .any(|e| !e.sent_by_client() && e.h.tcp_flags & 0x12 == 0x12),
        "no SYN-ACK"
    );
    assert!(conn.iter().any(|e| e.h.tcp_flags & 0x01 != 0), "no FIN");
    let first = conn
        .iter()
        .find(|e| e.sent_by_client() && !e.payload.is_empty())
        .expect("client payload");
    assert_eq!(&first.payload[..2], &[0x16, 0x03], "ClientHello first");
    assert!(
        conn.iter().any(|e| e.h.offset > 0)
            || conn.iter().all(|e| e.h.payload_len as usize <= ebpf::CHUNK)
    );

    let lost = delta["bytes_lost"] + delta["ringbuf_full"] + delta["payload_truncated"];
    let server: Vec<u8> = stream(&conn, false).into_iter().map_while(|b| b).collect();
    if lost == 0 {
        let hs = handshake_bytes(&server);
        assert!(
            contains(&hs, cert_der),
            "certificate not whole in {} server bytes",
            server.len()
        );
    } else {
        eprintln!("handshake: {lost} losses counted");
    }

    // The analyzer sees a normal TLS 1.2 handshake.
    let mut a = Analyzer::new(Config::default());
    for e in &conn {
        let ev = ebpf::Event {
            ts: e.ts,
            header: &e.h,
            payload: &e.payload,
        };
        for p in ev.datagrams() {
            a.push_packet(e.ts, &p);
        }
    }
    a.finish();
    let recs = a.take_records();
    assert_eq!(recs.len(), 1, "one connection record");
    let r = &recs[0];
    eprintln!(
        "handshake record: {} {:?} {:?} certs {:?}",
        r.handshake.map(|k| k.as_str()).unwrap_or("null"),
        r.version,
        r.sni,
        r.certs
    );
    assert_eq!(r.handshake.map(|k| k.as_str()).unwrap_or("null"), "full");
    assert_eq!(r.version, Some("TLS1.2"));
    assert_eq!(r.sni.as_deref(), Some("big.test"));
    assert_eq!(r.certs.as_ref().map(|c| c.count), Some(1));
    assert!(r.timing.tcp_rtt.is_some());
}

/// 200 MB up one TLS 1.3 connection; the analyzer reports the flow as a
/// straggler when it sends more after the handshake's record, and the test
/// marks it done.
fn bulk_after_done(topo: &Topology, cap: &mut EbpfCapture) {
    let before = counters(cap);
    let mut a = Analyzer::new(Config {
        report_stragglers: true,
        ..Config::default()
    });
    let mut marked = Vec::new();
    let started = Instant::now();
    let mut client = start_client(topo, &format!("head -c {BULK_BYTES} /dev/zero"), "");
    let events = collect(cap, &mut client, |cap, batch| {
        for e in batch {
            let ev = ebpf::Event {
                ts: e.ts,
                header: &e.h,
                payload: &e.payload,
            };
            for p in ev.datagrams() {
                a.push_packet(e.ts, &p);
            }
        }
        for (x, y) in a.take_stragglers() {
            let t = FlowTuple {
                src: x.0,
                dst: y.0,
                src_port: x.1,
                dst_port: y.1,
                proto: 6,
            };
            cap.mark_done(t).unwrap();
            marked.push(t);
        }
    });
    let delta = diff(&counters(cap), &before);
    eprintln!(
        "bulk/done: {} MB in {:.1}s, {} events, marked {marked:?}, counters {delta:?}",
        BULK_BYTES / 1_000_000,
        started.elapsed().as_secs_f64(),
        events.len()
    );
    assert_eq!(client.wait().unwrap().code(), Some(0), "s_client failed");
    let port = events
        .iter()
        .find(|e| e.h.tcp_flags == 0x02)
        .expect("client SYN")
        .client_port();
    assert!(
        marked
            .iter()
            .any(|t| t.src_port == port || t.dst_port == port),
        "analyzer never finished the flow"
    );
    let conn: Vec<&Ev> = events.iter().filter(|e| e.client_port() == port).collect();
    let up: u64 = conn
        .iter()
        .filter(|e| e.sent_by_client())
        .map(|e| e.payload.len() as u64)
        .sum();
    assert!(conn.len() < 500, "{} events for a done flow", conn.len());
    assert!(up <= u64::from(BUDGET) * 2, "{up} client bytes forwarded");
    assert!(delta["done"] > 100, "done counter did not move: {delta:?}");
    assert!(
        conn.iter()
            .any(|e| e.h.flags & EV_DONE != 0 && e.h.tcp_flags & 0x05 != 0),
        "no FIN/RST after done"
    );
}

/// 200 MB up a TLS connection nobody marks done: the kernel follows its
/// records, sends each application_data header without its body, and stops
/// the flow by itself once the handshake phase is over (or, failing that,
/// past the analyzer's record limit).
fn bulk_unmarked_tls(topo: &Topology, cap: &mut EbpfCapture) {
    let before = counters(cap);
    let mut client = start_client(topo, &format!("head -c {BULK_BYTES} /dev/zero"), "");
    let events = collect(cap, &mut client, |_, _| {});
    let delta = diff(&counters(cap), &before);
    eprintln!(
        "bulk/unmarked TLS: {} events, counters {delta:?}",
        events.len()
    );
    assert_eq!(client.wait().unwrap().code(), Some(0), "s_client failed");
    let port = events
        .iter()
        .find(|e| e.h.tcp_flags == 0x02)
        .expect("client SYN")
        .client_port();
    let conn: Vec<&Ev> = events.iter().filter(|e| e.client_port() == port).collect();
    let up: u64 = conn
        .iter()
        .filter(|e| e.sent_by_client())
        .map(|e| e.payload.len() as u64)
        .sum();
    let headers = conn
        .iter()
        .filter(|e| e.sent_by_client() && e.h.fill > 0)
        .count();
    assert!(conn.len() < 100, "{} events for one connection", conn.len());
    // The ClientHello and Finished whole, then 5 bytes per record.
    assert!(up < 4096, "{up} client bytes forwarded");
    assert!(
        headers <= ebpf::RECORDS_PER_DIR + 1,
        "{headers} application_data headers sent"
    );
    assert_eq!(
        delta["budget"], 0,
        "budget cut a tracked TLS flow: {delta:?}"
    );
    assert_eq!(delta["untracked"], 0, "tracking lost: {delta:?}");
    assert!(
        delta["handshake_over"] + delta["record_limit"] >= 1,
        "the kernel never stopped the flow: {delta:?}"
    );
    assert!(delta["done"] > 100, "done counter did not move: {delta:?}");
    assert!(conn.iter().any(|e| e.h.tcp_flags & 0x05 != 0), "no FIN/RST");

    // What did reach user space makes a whole record.
    let mut a = Analyzer::new(Config::default());
    for e in &conn {
        let ev = ebpf::Event {
            ts: e.ts,
            header: &e.h,
            payload: &e.payload,
        };
        for p in ev.datagrams() {
            a.push_packet(e.ts, &p);
        }
    }
    a.finish();
    let recs = a.take_records();
    assert_eq!(recs.len(), 1, "one connection record");
    assert_eq!(recs[0].handshake.map(|k| k.as_str()), Some("full"));
    // s_server answers nothing: ttfb is its NewSessionTicket only when
    // that left after the client's first data arrived (a race), so it is
    // not asserted; the client's first use is always there.
    assert!(
        recs[0].timing.handshake.is_some() && recs[0].timing.idle_before_use.is_some(),
        "{:?}",
        recs[0].timing
    );
    // Without a response the handshake is timed only by the record cap
    // (the kernel's mirror of it stopped the flow): noted as such.
    assert!(
        recs[0].notes.is_empty() || recs[0].notes == ["record_limit"],
        "notes {:?}",
        recs[0].notes
    );
}

/// 200 MB of plain TCP (not TLS) that nobody marks done: record tracking
/// gives up on the first bytes and the byte budget stops the flow.
fn bulk_plain_over_budget(topo: &Topology, cap: &mut EbpfCapture, procs: &mut Procs) {
    let mut sink = ns_cmd(&topo.server_ns, &["python3", "-c"]);
    sink.arg(format!(
        "import socket\n\
         s = socket.create_server(('{SERVER_IP}', {PLAIN_PORT}))\n\
         c, _ = s.accept()\n\
         while c.recv(1 << 20): pass\n"
    ));
    procs.spawn("sink", sink);
    topo.wait_listening(PLAIN_PORT, procs);
    let before = counters(cap);
    let mut client = ns_cmd(
        &topo.client_ns,
        &[
            "bash",
            "-c",
            &format!("head -c {BULK_BYTES} /dev/zero > /dev/tcp/{SERVER_IP}/{PLAIN_PORT}"),
        ],
    )
    .spawn()
    .unwrap();
    let events = collect(cap, &mut client, |_, _| {});
    let delta = diff(&counters(cap), &before);
    eprintln!("bulk/plain: {} events, counters {delta:?}", events.len());
    assert_eq!(
        client.wait().unwrap().code(),
        Some(0),
        "plain client failed"
    );
    let conn: Vec<&Ev> = events
        .iter()
        .filter(|e| e.h.dport == PLAIN_PORT || e.h.sport == PLAIN_PORT)
        .collect();
    let up: u64 = conn
        .iter()
        .filter(|e| e.h.dport == PLAIN_PORT)
        .map(|e| e.payload.len() as u64)
        .sum();
    assert!(conn.len() < 500, "{} events over the budget", conn.len());
    assert!(
        up >= u64::from(BUDGET) && up <= u64::from(BUDGET) * 2,
        "{up} client bytes forwarded"
    );
    assert!(
        conn.iter().all(|e| e.h.fill == 0),
        "fill on a plain TCP flow"
    );
    assert!(delta["untracked"] >= 1, "tracking not given up: {delta:?}");
    assert!(
        delta["budget"] > 100,
        "budget counter did not move: {delta:?}"
    );
    assert!(conn.iter().any(|e| e.h.tcp_flags & 0x01 != 0), "no FIN");
}

/// The netlink mode's settings: cls_bpf on clsact, all ports, QUIC (the
/// verifier also accepts those).
fn netlink_opts(topo: &Topology) -> EbpfOptions {
    EbpfOptions {
        ifaces: vec![topo.veth.clone()],
        ports: vec![],
        all_ports: true,
        quic: true,
        attach_mode: AttachMode::Netlink,
        ..Default::default()
    }
}

/// Attached in netlink mode: our clsact and both filters are there.
fn netlink_attach(topo: &Topology) -> EbpfCapture {
    let cap = EbpfCapture::attach(&netlink_opts(topo)).expect("netlink attach");
    assert!(topo.qdiscs().contains("clsact"));
    assert!(
        topo.filters("ingress").contains("tlsrum_ingress"),
        "{}",
        topo.filters("ingress")
    );
    assert!(topo.filters("egress").contains("tlsrum_egress"));
    cap
}

/// Detached: the clsact we added goes with it.
fn netlink_detach(topo: &Topology, cap: EbpfCapture) {
    cap.detach().expect("netlink detach");
    assert!(
        !topo.qdiscs().contains("clsact"),
        "our clsact left behind:\n{}",
        topo.qdiscs()
    );
}

/// cls_bpf on clsact: the qdisc we add goes away on detach, one that was
/// there stays.
fn netlink_mode(topo: &Topology) {
    let mut cap = netlink_attach(topo);
    let mut client = start_client(topo, "echo hello", "");
    let events = collect(&mut cap, &mut client, |_, _| {});
    assert!(
        events
            .iter()
            .any(|e| e.sent_by_client() && e.payload.starts_with(&[0x16, 0x03])),
        "no ClientHello"
    );
    netlink_detach(topo, cap);

    // A clsact that was already there is not ours to remove.
    run(&[
        "tc",
        "-n",
        &topo.server_ns,
        "qdisc",
        "add",
        "dev",
        &topo.veth,
        "clsact",
    ]);
    let cap = EbpfCapture::attach(&netlink_opts(topo)).expect("attach to existing clsact");
    cap.detach().expect("detach");
    assert!(
        topo.qdiscs().contains("clsact"),
        "removed a clsact we did not add"
    );
    assert!(
        topo.filters("ingress").trim().is_empty(),
        "filter left: {}",
        topo.filters("ingress")
    );
    assert!(topo.filters("egress").trim().is_empty());
}

/// A TLS connection over IPv6: its ClientHello and FIN, with the addresses.
fn ipv6_handshake(topo: &Topology, cap: &mut EbpfCapture) {
    let mut client = start_client_to(
        &topo.client_ns,
        &format!("[{SERVER_IP6}]:{PORT}"),
        "echo hello",
        "",
    );
    let events = collect(cap, &mut client, |_, _| {});
    let hello = events
        .iter()
        .find(|e| e.sent_by_client() && e.payload.starts_with(&[0x16, 0x03]))
        .expect("no IPv6 ClientHello");
    assert_eq!(hello.h.ip_version, 6);
    assert_eq!(hello.h.src().to_string(), CLIENT_IP6);
    assert_eq!(hello.h.dst().to_string(), SERVER_IP6);
    assert!(
        events
            .iter()
            .any(|e| e.h.ip_version == 6 && e.h.tcp_flags & 0x01 != 0),
        "no IPv6 FIN"
    );
}

/// Loopback (egress hook only): GSO packets of 64 KiB and more arrive
/// whole as several chunks. A plain TCP sender writes a known pattern in
/// one call (so the kernel builds maximal packets) and the reassembled
/// stream must equal it, unless a loss was counted.
fn loopback_gso() {
    let (events, delta, first_bad, _) = loopback_transfer(8 << 20);
    let biggest = events.iter().map(|e| e.h.payload_len).max().unwrap_or(0);
    let chunked = events.iter().filter(|e| e.h.offset > 0).count();
    eprintln!("loopback: {} events, biggest segment {biggest}, {chunked} later chunks, counters {delta:?}", events.len());
    assert!(
        events.iter().all(|e| e.h.direction == ebpf::DIR_EGRESS),
        "loopback seen twice"
    );
    assert!(
        biggest as usize > 3 * ebpf::CHUNK,
        "no GSO packet of more than three chunks"
    );
    assert!(events
        .iter()
        .any(|e| e.h.offset as usize >= 3 * ebpf::CHUNK));
    let lost = delta["bytes_lost"] + delta["ringbuf_full"] + delta["payload_truncated"];
    match first_bad {
        None => {}
        Some(at) if lost > 0 => {
            eprintln!("loopback: {lost} losses counted, stream right up to {at}")
        }
        Some(at) => panic!("stream wrong or missing at byte {at} with no loss counted"),
    }
}

/// Loopback again with a ring buffer of 64 KiB (three full chunks) that
/// nobody reads during the transfer: most records do not fit, and every lost
/// byte is counted.
fn loopback_tiny_ring() {
    // A ring buffer of 64 KiB (three full chunks) that nobody reads during
    // the transfer: most records do not fit, and every lost byte is counted.
    let (events, delta, first_bad, wire_bytes) = loopback_transfer(64 << 10);
    eprintln!(
        "loopback, tiny ring: {} events, {wire_bytes} bytes on the wire, counters {delta:?}",
        events.len()
    );
    assert!(first_bad.is_some());
    assert!(
        delta["ringbuf_full"] > 0 && delta["bytes_sent"] > 0,
        "{delta:?}"
    );
    let sent: u64 = events.iter().map(|e| e.payload.len() as u64).sum();
    assert_eq!(sent, delta["bytes_sent"]);
    // Only the client sends payload: every byte it put on the wire, the 3 MB
    // and any retransmission (a busy machine makes loopback TCP retransmit
    // too), was sent or counted lost.
    assert!(wire_bytes >= 3_000_000, "{wire_bytes}");
    assert_eq!(
        delta["bytes_sent"] + delta["bytes_lost"],
        wire_bytes,
        "{delta:?}"
    );
}

/// Payload bytes a TCP socket has put on the wire, retransmissions included
/// (`tcpi_bytes_sent`, Linux 4.19+; the libc crate's `tcp_info` stops short
/// of it, so the field is read at its uapi offset).
fn tcp_bytes_sent(sock: &std::net::TcpStream) -> u64 {
    use std::os::fd::AsRawFd;
    const TCPI_BYTES_SENT: usize = 200;
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes and outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    assert!(
        len as usize >= TCPI_BYTES_SENT + 8,
        "tcp_info of {len} bytes"
    );
    u64::from_ne_bytes(
        info[TCPI_BYTES_SENT..TCPI_BYTES_SENT + 8]
            .try_into()
            .unwrap(),
    )
}

/// 3 MB of a known pattern over loopback in one write; returns the events,
/// the counter deltas, the first byte of the stream the events got wrong and
/// the payload bytes the sender put on the wire.
fn loopback_transfer(
    ringbuf_bytes: u32,
) -> (Vec<Ev>, BTreeMap<&'static str, u64>, Option<usize>, u64) {
    use std::io::{Read, Write};
    const LO_BUDGET: u32 = 4 << 20;
    const SIZE: usize = 3_000_000;
    // This thread is in the test's namespace: its loopback, not the host's.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let opts = EbpfOptions {
        ifaces: vec!["lo".into()],
        ports: vec![port],
        max_payload_per_dir: LO_BUDGET,
        ringbuf_bytes,
        ..Default::default()
    };
    let mut cap = EbpfCapture::attach(&opts).expect("attach to lo");
    let before = counters(&cap);
    let reader = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut sink = Vec::new();
        conn.read_to_end(&mut sink).unwrap();
        sink.len()
    });
    let pattern: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(&pattern).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(reader.join().unwrap(), SIZE);
    // The reader has everything; a late spurious retransmission still counts.
    std::thread::sleep(Duration::from_millis(300));
    let wire_bytes = tcp_bytes_sent(&conn);
    drop(conn);
    let mut events = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        cap.poll(Duration::from_millis(50), &mut |e| {
            events.push(Ev {
                ts: e.ts,
                h: *e.header,
                payload: e.payload.to_vec(),
            })
        })
        .unwrap();
    }
    let delta = diff(&counters(&cap), &before);
    cap.detach().expect("detach lo");
    // The client's side: the events whose destination is the listener.
    let up: Vec<Ev> = events
        .iter()
        .filter(|e| e.h.dport == port)
        .cloned()
        .collect();
    let syn = up.iter().find(|e| e.h.tcp_flags & 0x02 != 0).expect("SYN");
    let isn = syn.h.seq.wrapping_add(1);
    let mut got = vec![None; SIZE];
    for e in &up {
        let start = e.h.seq.wrapping_add(e.h.offset).wrapping_sub(isn) as usize;
        for (i, b) in e.payload.iter().enumerate() {
            if let Some(slot) = got.get_mut(start + i) {
                *slot = Some(*b);
            }
        }
    }
    let first_bad = got.iter().zip(&pattern).position(|(g, p)| *g != Some(*p));
    (events, delta, first_bad, wire_bytes)
}

/// QUIC-shaped datagrams from the server namespace (this thread's) out of
/// the veth: every long-header one is forwarded, up to 8 short-header ones
/// while the peer has sent none (as their first 21 bytes: header and
/// connection ID; the encrypted rest stays in the kernel), none after
/// mark_done.
fn quic_datagrams(cap: &mut EbpfCapture) {
    let sock = std::net::UdpSocket::bind((SERVER_IP, 0)).unwrap();
    let local = sock.local_addr().unwrap();
    let send = |first: u8, n: usize| {
        for i in 0..n {
            let mut d = vec![first; 1200];
            d[1] = i as u8;
            sock.send_to(&d, (CLIENT_IP, PORT)).unwrap();
        }
    };
    let drain = |cap: &mut EbpfCapture| {
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            cap.poll(Duration::from_millis(50), &mut |e| {
                if e.header.l4_proto == 17 && e.header.sport == local.port() {
                    got.push((e.payload[0], e.header.payload_len, e.payload.len()));
                }
            })
            .unwrap();
        }
        got
    };
    send(0xc3, 3); // long header (Initial)
    send(0x43, 10); // short header, the peer having sent none
    let got = drain(cap);
    let mut want = vec![(0xc3, 1200, 1200); 3];
    // Up to 8 short-header packets before the peer's first (0.5-RTT data).
    want.extend([(0x43, 1200, ebpf::QUIC_SHORT_KEEP); 8]);
    assert_eq!(got, want, "QUIC forwarding");
    let before = counters(cap);
    let flow = FlowTuple {
        src: local.ip(),
        dst: CLIENT_IP.parse().unwrap(),
        src_port: local.port(),
        dst_port: PORT,
        proto: 17,
    };
    cap.mark_done(flow).unwrap();
    send(0xc3, 2);
    assert!(drain(cap).is_empty(), "datagrams of a done flow forwarded");
    assert_eq!(diff(&counters(cap), &before)["done"], 2);
}
