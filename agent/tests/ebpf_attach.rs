//! The eBPF backend against a real kernel: two network namespaces joined by
//! a veth pair, `openssl s_server` in one and `openssl s_client` in the
//! other, the TC programs on the server's veth.
//!
//! Needs root, BPF, `ip`, `tc`, `ss` and `openssl`. Without them the test
//! prints why and passes, except under CI=true, where it fails.
//!
//! Checks: the handshake arrives (SYN, SYN-ACK, ClientHello at the start of
//! the client's first payload, a ~25 KB certificate in one piece, FIN) and
//! the analyzer classifies it; a 200 MB upload after the analyzer finished
//! the flow (mark_done) and another one never marked (byte budget) each
//! produce a small, bounded number of events; the netlink attach mode adds
//! and removes its clsact qdisc, and leaves one it did not add.

#![allow(dead_code)]

use tlsrum::ebpf;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use analyzer::{Analyzer, Config};
use tlsrum::ebpf::{AttachMode, EbpfCapture, EbpfOptions, EventHeader, FlowTuple, EV_DONE};

const SERVER_IP: &str = "192.0.2.1"; // TEST-NET-1, only inside our namespaces
const CLIENT_IP: &str = "192.0.2.2";
const SERVER_IP6: &str = "2001:db8::1"; // documentation prefix, likewise
const CLIENT_IP6: &str = "2001:db8::2";
const PORT: u16 = 4433;
/// A plain TCP sink (not TLS) the capture also watches.
const PLAIN_PORT: u16 = 4434;
const BULK_BYTES: u64 = 200_000_000;
const BUDGET: u32 = 64 * 1024;

// ---- environment ----

fn missing_prerequisite() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for tool in ["ip", "tc", "ss", "openssl"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} not installed"));
        }
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists()
        && !Path::new("/proc/sys/net/core/bpf_jit_enable").exists()
    {
        return Some("kernel without BPF".into());
    }
    None
}

fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces and the veth between them; deleted on drop.
struct Topology {
    server_ns: String,
    client_ns: String,
    veth: String,
    dir: PathBuf,
}

impl Topology {
    fn new() -> Self {
        let pid = std::process::id();
        let t = Topology {
            server_ns: format!("tlsrum-s{pid}"),
            client_ns: format!("tlsrum-c{pid}"),
            veth: format!("tvs{pid}"),
            dir: std::env::temp_dir().join(format!("tlsrum-ebpf-{pid}")),
        };
        let peer = format!("tvc{pid}");
        std::fs::create_dir_all(&t.dir).unwrap();
        run(&["ip", "netns", "add", &t.server_ns]);
        run(&["ip", "netns", "add", &t.client_ns]);
        run(&[
            "ip",
            "link",
            "add",
            &t.veth,
            "netns",
            &t.server_ns,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &t.client_ns,
        ]);
        for (ns, dev, ip, ip6) in [
            (&t.server_ns, &t.veth, SERVER_IP, SERVER_IP6),
            (&t.client_ns, &peer, CLIENT_IP, CLIENT_IP6),
        ] {
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        t
    }

    fn qdiscs(&self) -> String {
        run(&[
            "tc",
            "-n",
            &self.server_ns,
            "qdisc",
            "show",
            "dev",
            &self.veth,
        ])
    }

    fn filters(&self, hook: &str) -> String {
        run(&[
            "tc",
            "-n",
            &self.server_ns,
            "filter",
            "show",
            "dev",
            &self.veth,
            hook,
        ])
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// This thread in the server's namespace (aya's netlink and if_nametoindex
/// work in the caller's namespace); back to the original on drop.
struct InNetns(File);

impl InNetns {
    fn enter(ns: &str) -> Self {
        let orig = File::open("/proc/thread-self/ns/net").unwrap();
        let target = File::open(format!("/var/run/netns/{ns}")).unwrap();
        // SAFETY: setns on valid namespace fds; affects this thread only.
        assert_eq!(
            unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) },
            0,
            "setns"
        );
        InNetns(orig)
    }
}

impl Drop for InNetns {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWNET) };
    }
}

/// Children killed on drop.
#[derive(Default)]
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
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
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.server_ns,
            "openssl",
            "s_server",
            "-accept",
            &PORT.to_string(),
        ])
        .args([
            "-cert",
            cert.to_str().unwrap(),
            "-key",
            key.to_str().unwrap(),
            "-quiet",
        ])
        // stdin stays open: s_server would stop on its EOF.
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    procs.0.push(child);
    wait_listening(&t.server_ns, PORT, "s_server");
}

/// Waits until something listens on TCP `port` in namespace `ns`.
fn wait_listening(ns: &str, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while run(&["ip", "netns", "exec", ns, "ss", "-Hltn", &format!("sport = :{port}")])
        .trim()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "{what} did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", &cmd])
        .spawn()
        .unwrap()
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

// ---- the test ----

#[test]
fn ebpf_capture_on_veth() {
    if let Some(why) = missing_prerequisite() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but the eBPF test cannot run: {why}");
        }
        eprintln!("SKIPPED ebpf_capture_on_veth: {why} (needs root, BPF, iproute2 and openssl)");
        if why == "not root" {
            // What an unprivileged user is told.
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
        return;
    }

    // Drop order (reverse of declaration) matters: capture detached in the
    // namespace, then processes killed, then the namespaces deleted.
    let topo = Topology::new();
    let (cert, key, cert_der) = make_cert(&topo.dir);
    let _netns = InNetns::enter(&topo.server_ns);
    let mut procs = Procs::default();
    start_server(&topo, &cert, &key, &mut procs);

    let opts = EbpfOptions {
        ifaces: vec![topo.veth.clone()],
        ports: vec![PORT, PLAIN_PORT],
        max_payload_per_dir: BUDGET,
        ..Default::default()
    };
    let mut cap = EbpfCapture::attach(&opts).expect("attach");
    for (prog, insns) in cap.verified_instructions() {
        eprintln!("{prog}: verifier processed {insns:?} instructions");
    }
    assert!(
        !topo.qdiscs().contains("clsact"),
        "TCX attach added a qdisc:\n{}",
        topo.qdiscs()
    );

    handshake(&topo, &mut cap, &cert_der);
    bulk_after_done(&topo, &mut cap);
    bulk_unmarked_tls(&topo, &mut cap);
    bulk_plain_over_budget(&topo, &mut cap, &mut procs);

    cap.detach().expect("detach");
    assert!(!topo.qdiscs().contains("clsact"));

    netlink_mode(&topo);
    loopback_gso();
}

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
        r.handshake.as_str(),
        r.version,
        r.sni,
        r.certs
    );
    assert_eq!(r.handshake.as_str(), "full");
    assert_eq!(r.version, Some("TLS1.2"));
    assert_eq!(r.sni.as_deref(), Some("big.test"));
    assert_eq!(r.certs.as_ref().map(|c| c.count), Some(1));
    assert!(r.timing.tcp_rtt.is_some());
}

/// 200 MB up one TLS 1.3 connection; the analyzer reports the flow finished
/// after the handshake and the test marks it done.
fn bulk_after_done(topo: &Topology, cap: &mut EbpfCapture) {
    let before = counters(cap);
    let mut a = Analyzer::new(Config {
        report_finished_flows: true,
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
        for (x, y) in a.take_finished_flows() {
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
    eprintln!("bulk/unmarked TLS: {} events, counters {delta:?}", events.len());
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
    let headers = conn.iter().filter(|e| e.sent_by_client() && e.h.fill > 0).count();
    assert!(conn.len() < 100, "{} events for one connection", conn.len());
    // The ClientHello and Finished whole, then 5 bytes per record.
    assert!(up < 4096, "{up} client bytes forwarded");
    assert!(headers <= ebpf::RECORDS_PER_DIR + 1, "{headers} application_data headers sent");
    assert_eq!(delta["budget"], 0, "budget cut a tracked TLS flow: {delta:?}");
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
        let ev = ebpf::Event { ts: e.ts, header: &e.h, payload: &e.payload };
        for p in ev.datagrams() {
            a.push_packet(e.ts, &p);
        }
    }
    a.finish();
    let recs = a.take_records();
    assert_eq!(recs.len(), 1, "one connection record");
    assert_eq!(recs[0].handshake.as_str(), "full");
    assert!(recs[0].timing.handshake.is_some() && recs[0].timing.ttfb.is_some(), "{:?}", recs[0].timing);
    assert!(recs[0].notes.is_empty(), "notes {:?}", recs[0].notes);
}

/// 200 MB of plain TCP (not TLS) that nobody marks done: record tracking
/// gives up on the first bytes and the byte budget stops the flow.
fn bulk_plain_over_budget(topo: &Topology, cap: &mut EbpfCapture, procs: &mut Procs) {
    let sink = Command::new("ip")
        .args(["netns", "exec", &topo.server_ns, "python3", "-c"])
        .arg(format!(
            "import socket\n\
             s = socket.create_server(('{SERVER_IP}', {PLAIN_PORT}))\n\
             c, _ = s.accept()\n\
             while c.recv(1 << 20): pass\n"
        ))
        .spawn()
        .unwrap();
    procs.0.push(sink);
    wait_listening(&topo.server_ns, PLAIN_PORT, "sink");
    let before = counters(cap);
    let mut client = Command::new("ip")
        .args(["netns", "exec", &topo.client_ns, "bash", "-c"])
        .arg(format!("head -c {BULK_BYTES} /dev/zero > /dev/tcp/{SERVER_IP}/{PLAIN_PORT}"))
        .spawn()
        .unwrap();
    let events = collect(cap, &mut client, |_, _| {});
    let delta = diff(&counters(cap), &before);
    eprintln!("bulk/plain: {} events, counters {delta:?}", events.len());
    assert_eq!(client.wait().unwrap().code(), Some(0), "plain client failed");
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
    assert!(conn.iter().all(|e| e.h.fill == 0), "fill on a plain TCP flow");
    assert!(delta["untracked"] >= 1, "tracking not given up: {delta:?}");
    assert!(delta["budget"] > 100, "budget counter did not move: {delta:?}");
    assert!(conn.iter().any(|e| e.h.tcp_flags & 0x01 != 0), "no FIN");
}

/// cls_bpf on clsact: the qdisc we add goes away on detach, one that was
/// there stays; the verifier also accepts the all-ports + QUIC settings.
fn netlink_mode(topo: &Topology) {
    let opts = EbpfOptions {
        ifaces: vec![topo.veth.clone()],
        ports: vec![],
        all_ports: true,
        quic: true,
        attach_mode: AttachMode::Netlink,
        ..Default::default()
    };
    let mut cap = EbpfCapture::attach(&opts).expect("netlink attach");
    assert!(topo.qdiscs().contains("clsact"));
    assert!(
        topo.filters("ingress").contains("tlsrum_ingress"),
        "{}",
        topo.filters("ingress")
    );
    assert!(topo.filters("egress").contains("tlsrum_egress"));
    let mut client = start_client(topo, "echo hello", "");
    let events = collect(&mut cap, &mut client, |_, _| {});
    assert!(
        events
            .iter()
            .any(|e| e.sent_by_client() && e.payload.starts_with(&[0x16, 0x03])),
        "no ClientHello"
    );
    // IPv6 too.
    let mut client = start_client_to(
        &topo.client_ns,
        &format!("[{SERVER_IP6}]:{PORT}"),
        "echo hello",
        "",
    );
    let events = collect(&mut cap, &mut client, |_, _| {});
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
    quic_datagrams(&mut cap);
    cap.detach().expect("netlink detach");
    assert!(
        !topo.qdiscs().contains("clsact"),
        "our clsact left behind:\n{}",
        topo.qdiscs()
    );

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
    let cap = EbpfCapture::attach(&opts).expect("attach to existing clsact");
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
    assert!(len as usize >= TCPI_BYTES_SENT + 8, "tcp_info of {len} bytes");
    u64::from_ne_bytes(info[TCPI_BYTES_SENT..TCPI_BYTES_SENT + 8].try_into().unwrap())
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
    // This thread is in the server namespace: its loopback, not the host's.
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
/// while the peer has sent none, none after mark_done.
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
                    got.push((e.payload[0], e.header.payload_len));
                }
            })
            .unwrap();
        }
        got
    };
    send(0xc3, 3); // long header (Initial)
    send(0x43, 10); // short header, the peer having sent none
    let got = drain(cap);
    let mut want = vec![(0xc3, 1200); 3];
    // Up to 8 short-header packets before the peer's first (0.5-RTT data).
    want.extend([(0x43, 1200); 8]);
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
