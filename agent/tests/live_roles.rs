//! Issue 16: `tlsrum live`'s `role` from the host's own addresses, kept
//! current as they change, with both backends at once.
//!
//! Three namespaces: the agent's host `P` (a router too), `A` on one veth
//! and `O` behind P on another. The agents watch P's veth to A, where every
//! connection below passes:
//! - inbound: curl in A to `openssl s_server` in P, over IPv4 and IPv6;
//! - outbound: curl in P to s_server in A, likewise;
//! - transit: curl in A to s_server in O, routed through P;
//! - `--local`: a VIP on no interface of P (on O's loopback, routed
//!   through P) given with `--local` is counted as P's: inbound;
//! - kept current: an address first on O (transit), then moved to P while
//!   the agents run (inbound: the added address is P's), then moved back
//!   to O (transit again: the removed address is no longer P's). Each step
//!   waits for the agents' records before the address moves.
//!
//! Each record's role is checked by the client port curl reports
//! (`%{local_port}`) and the server it connected to; /metrics' role labels
//! on `tls_handshakes_total` and `tls_handshake_duration_seconds` hold the
//! records by role. About 15 s. Needs root, BPF, network namespaces,
//! iproute2, openssl, curl; under CI=true a missing one is a failure.

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{ns_cmd, run, wait_for_text, Netns, Procs};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const PORT: u16 = 4443;
/// P on the veth to A, and A.
const P_A: &str = "198.51.100.1";
const A_IP: &str = "198.51.100.2";
/// P on the veth to O, and O.
const P_O: &str = "203.0.113.1";
const O_IP: &str = "203.0.113.2";
/// P and A over IPv6 too (the addresses of every family count).
const P_A6: &str = "2001:db8:1::1";
const A_IP6: &str = "2001:db8:1::2";
/// Moves between O and P while the agents run.
const MOVING: &str = "192.0.2.77";
/// On O's loopback, given to the agents with --local.
const VIP: &str = "192.0.2.88";

struct Agent {
    name: &'static str,
    events: PathBuf,
    log: PathBuf,
    metrics_port: u16,
}

impl Agent {
    fn start(
        procs: &mut Procs,
        dir: &Path,
        ns: &str,
        iface: &str,
        name: &'static str,
        backend: &str,
        metrics_port: u16,
    ) -> Agent {
        let events = dir.join(format!("{name}.ndjson"));
        let log = dir.join(format!("{name}.log"));
        let mut cmd = ns_cmd(
            ns,
            &[
                BIN,
                "live",
                "--iface",
                iface,
                "--backend",
                backend,
                "--port",
                &PORT.to_string(),
                "--local",
                VIP,
            ],
        );
        cmd.arg("--metrics")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .arg("--events")
            .arg(&events)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        procs.spawn(name, cmd);
        wait_for_text(&log, "tlsrum: watching", 20, procs);
        Agent {
            name,
            events,
            log,
            metrics_port,
        }
    }

    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l}: {e}")))
            .collect()
    }

    /// The record of the connection from client port `port`, once written.
    fn record_of(&self, port: u16) -> Option<Value> {
        self.records().into_iter().find(|r| {
            r["client"]
                .as_str()
                .is_some_and(|c| c.ends_with(&format!(":{port}")))
        })
    }
}

/// curl in `ns` to `https://ip:PORT/`: the client port it used.
fn curl(ns: &str, ip: &str) -> u16 {
    let out = run(&[
        "ip",
        "netns",
        "exec",
        ns,
        "curl",
        "-sSkg",
        "--max-time",
        "10",
        "-o",
        "/dev/null",
        "-w",
        "%{local_port}",
        &format!("https://{ip}:{PORT}/"),
    ]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl's local port: {out:?}"))
}

/// Waits until every agent has the record of client port `port`.
fn wait_for_record(agents: &[&Agent], port: u16, procs: &mut Procs) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !agents.iter().all(|a| a.record_of(port).is_some()) {
        procs.check_alive();
        assert!(
            Instant::now() < deadline,
            "no record of client port {port} from {:?}",
            agents
                .iter()
                .filter(|a| a.record_of(port).is_none())
                .map(|a| a.name)
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Time the agents get to see an address change before the next
/// connection (the subscription delivers it within one 100 ms poll).
const ADDRESS_SETTLE: Duration = Duration::from_millis(500);

fn veth(a: &Netns, a_dev: &str, a_ip: &str, b: &Netns, b_dev: &str, b_ip: &str) {
    run(&[
        "ip", "link", "add", a_dev, "netns", &a.name, "type", "veth", "peer", "name", b_dev,
        "netns", &b.name,
    ]);
    for (ns, dev, ip) in [(a, a_dev, a_ip), (b, b_dev, b_ip)] {
        run(&[
            "ip",
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{ip}/24"),
            "dev",
            dev,
        ]);
        run(&["ip", "-n", &ns.name, "link", "set", dev, "up"]);
    }
}

/// The sum of a metric's samples by the value of `label`.
fn by_label(text: &str, metric: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric).and_then(|l| l.strip_prefix('{')) else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        let v = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{label}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("{metric} without {label}: {line}"));
        *out.entry(v).or_default() += value.parse::<f64>().unwrap();
    }
    out.retain(|_, v: &mut f64| *v != 0.0);
    out
}

#[test]
fn live_roles_follow_the_hosts_addresses() {
    if common::skip(
        "live_roles_follow_the_hosts_addresses",
        &["ip", "openssl", "curl"],
    ) {
        return;
    }
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("tlsrum-roles-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let p = Netns::new("rp");
    let a = Netns::new("ra");
    let o = Netns::new("ro");
    let (pa, ap) = (format!("rpa{pid}"), format!("rap{pid}"));
    let (po, op) = (format!("rpo{pid}"), format!("rop{pid}"));
    veth(&p, &pa, P_A, &a, &ap, A_IP);
    for (ns, dev, ip) in [(&p, &pa, P_A6), (&a, &ap, A_IP6)] {
        let cidr = format!("{ip}/64");
        run(&[
            "ip", "-n", &ns.name, "addr", "add", &cidr, "dev", dev, "nodad",
        ]);
    }
    veth(&p, &po, P_O, &o, &op, O_IP);
    run(&[
        "ip",
        "netns",
        "exec",
        &p.name,
        "sysctl",
        "-qw",
        "net.ipv4.ip_forward=1",
    ]);
    run(&["ip", "-n", &a.name, "route", "add", "default", "via", P_A]);
    run(&["ip", "-n", &o.name, "route", "add", "default", "via", P_O]);
    // P reaches the moving address and the VIP through O, unless it holds
    // the moving address itself (the local table comes first).
    run(&[
        "ip",
        "-n",
        &p.name,
        "route",
        "add",
        "192.0.2.0/24",
        "via",
        O_IP,
    ]);
    run(&[
        "ip",
        "-n",
        &o.name,
        "addr",
        "add",
        &format!("{VIP}/32"),
        "dev",
        "lo",
    ]);
    run(&[
        "ip",
        "-n",
        &o.name,
        "addr",
        "add",
        &format!("{MOVING}/32"),
        "dev",
        "lo",
    ]);

    let mut procs = Procs::default();
    let (key, cert) = common::netns::self_signed(&dir, "roles.test");
    // IPv4 in every namespace, IPv6 (a socket of its own) in P and A.
    for (ns, accept) in [
        (&p, "0.0.0.0"),
        (&a, "0.0.0.0"),
        (&o, "0.0.0.0"),
        (&p, "[::]"),
        (&a, "[::]"),
    ] {
        let name = format!("s_server {accept} in {}", ns.name);
        let log = dir.join(format!("{name}.log").replace(' ', "-"));
        let cmd = ns_cmd(
            &ns.name,
            &[
                "openssl",
                "s_server",
                "-accept",
                &format!("{accept}:{PORT}"),
                "-cert",
                cert.to_str().unwrap(),
                "-key",
                key.to_str().unwrap(),
                "-www",
            ],
        );
        procs.spawn_logged(&name, cmd, &log);
        wait_for_text(&log, "ACCEPT", 10, &mut procs);
    }
    let ebpf = Agent::start(&mut procs, &dir, &p.name, &pa, "ebpf", "ebpf", 19871);
    let pcap = Agent::start(&mut procs, &dir, &p.name, &pa, "pcap", "pcap", 19872);
    let agents = [&ebpf, &pcap];

    // (client port, what it is, the role it must have)
    let mut want: Vec<(u16, String, &str)> = Vec::new();
    let mut connect = |ns: &Netns, ip: &str, what: &str, role: &'static str, procs: &mut Procs| {
        let port = curl(&ns.name, ip);
        wait_for_record(&agents, port, procs);
        want.push((port, format!("{what}: {ip}:{PORT}"), role));
    };
    for _ in 0..2 {
        connect(&a, P_A, "A to P", "inbound", &mut procs);
        connect(&p, A_IP, "P to A", "outbound", &mut procs);
        connect(&a, O_IP, "A to O through P", "transit", &mut procs);
    }
    connect(
        &a,
        &format!("[{P_A6}]"),
        "A to P over IPv6",
        "inbound",
        &mut procs,
    );
    connect(
        &p,
        &format!("[{A_IP6}]"),
        "P to A over IPv6",
        "outbound",
        &mut procs,
    );
    connect(
        &a,
        VIP,
        "A to the --local VIP (on O)",
        "inbound",
        &mut procs,
    );
    connect(
        &a,
        MOVING,
        "A to the moving address on O",
        "transit",
        &mut procs,
    );
    // Added to P while the agents run.
    run(&[
        "ip",
        "-n",
        &o.name,
        "addr",
        "del",
        &format!("{MOVING}/32"),
        "dev",
        "lo",
    ]);
    run(&[
        "ip",
        "-n",
        &p.name,
        "addr",
        "add",
        &format!("{MOVING}/32"),
        "dev",
        "lo",
    ]);
    std::thread::sleep(ADDRESS_SETTLE);
    connect(
        &a,
        MOVING,
        "A to the address just added to P",
        "inbound",
        &mut procs,
    );
    // Removed from P again.
    run(&[
        "ip",
        "-n",
        &p.name,
        "addr",
        "del",
        &format!("{MOVING}/32"),
        "dev",
        "lo",
    ]);
    run(&[
        "ip",
        "-n",
        &o.name,
        "addr",
        "add",
        &format!("{MOVING}/32"),
        "dev",
        "lo",
    ]);
    std::thread::sleep(ADDRESS_SETTLE);
    connect(
        &a,
        MOVING,
        "A to the address removed from P (back on O)",
        "transit",
        &mut procs,
    );

    let mut problems = Vec::new();
    let mut by_role: BTreeMap<String, f64> = BTreeMap::new();
    for (port, what, role) in &want {
        *by_role.entry(role.to_string()).or_default() += 1.0;
        for agent in agents {
            let r = agent.record_of(*port).unwrap();
            if r["role"] != *role || r["handshake"] != "full" {
                problems.push(format!(
                    "{}: client port {port} ({what}): role {} handshake {}, want {role} full",
                    agent.name, r["role"], r["handshake"]
                ));
            }
        }
    }
    for agent in agents {
        let records = agent.records();
        if records.len() != want.len() {
            problems.push(format!(
                "{}: {} records for {} connections",
                agent.name,
                records.len(),
                want.len()
            ));
        }
        let text = run(&[
            "ip",
            "netns",
            "exec",
            &p.name,
            "curl",
            "-sSf",
            &format!("http://127.0.0.1:{}/metrics", agent.metrics_port),
        ]);
        for metric in [
            "tls_handshakes_total",
            "tls_handshake_duration_seconds_count",
        ] {
            let got = by_label(&text, metric, "role");
            if got != by_role {
                problems.push(format!(
                    "{}: {metric} by role {got:?}, the connections {by_role:?}",
                    agent.name
                ));
            }
        }
    }
    for agent in agents {
        let status = procs.stop(agent.name, libc::SIGINT, Duration::from_secs(10));
        let log = std::fs::read_to_string(&agent.log).unwrap_or_default();
        assert!(
            status.success(),
            "{} exited with {status}: {log}",
            agent.name
        );
        // Kept current by the rtnetlink subscription, not the fallback.
        assert!(
            !log.contains("no address-change subscription"),
            "{}: {log}",
            agent.name
        );
    }
    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("files kept in {}", dir.display());
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
