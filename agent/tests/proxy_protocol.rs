//! A TLS backend behind a load balancer (issue 13): HAProxy in TCP mode
//! forwards curl's connections to nginx with `send-proxy` (PROXY protocol
//! v1) and `send-proxy-v2`; nginx (`listen ... ssl proxy_protocol`) logs the
//! original client it read from the header. A capture of the backend leg
//! (HAProxy -> nginx) replayed through tlsrum gives one record per
//! connection whose `proxied_client` is that client: the addresses curl
//! reports (`%{local_ip}:%{local_port}`) and nginx logs
//! (`$proxy_protocol_addr:$proxy_protocol_port`), not tlsrum's own guess.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::{
    ns_cmd, run, skip_unless, wait_for_text, Need, Procs, Topology, CLIENT_IP, SERVER_IP,
};
use serde_json::Value;

const NGINX_PORT: u16 = 8443;
const HAPROXY_V1: u16 = 9443;
const HAPROXY_V2: u16 = 9444;
const HOST: &str = "backend.tlsrum.test";

#[test]
fn proxy_protocol_names_the_original_client() {
    let test = "proxy_protocol_names_the_original_client";
    if skip_unless(
        test,
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&["haproxy", "nginx", "curl", "tcpdump", "openssl"]),
        ],
    ) {
        return;
    }
    let topo = Topology::new("pp");
    let (key, cert) = topo.self_signed(HOST);
    let mut procs = Procs::default();

    // nginx: the TLS backend, reading the PROXY header HAProxy sends.
    let d = topo.path("nginx");
    let dd = d.display();
    let http = format!(
        "    log_format pp '$proxy_protocol_addr:$proxy_protocol_port $ssl_server_name';\n    \
         access_log {dd}/access.log pp;\n    server {{\n        \
         listen 127.0.0.1:{NGINX_PORT} ssl proxy_protocol;\n        server_name {HOST};\n        \
         ssl_certificate {};\n        ssl_certificate_key {};\n        \
         location / {{ return 200 \"ok\\n\"; }}\n    }}\n",
        cert.display(),
        key.display(),
    );
    common::servers::nginx(&topo.server_ns, &d, &http, "nginx", &mut procs);

    // HAProxy: TCP mode, one frontend per PROXY protocol version.
    let haproxy_conf = topo.path("haproxy.cfg");
    std::fs::write(
        &haproxy_conf,
        format!(
            "global\n    maxconn 64\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 10s\n    timeout server 10s\n\
             frontend v1\n    bind {SERVER_IP}:{HAPROXY_V1}\n    default_backend nginx_v1\n\
             frontend v2\n    bind {SERVER_IP}:{HAPROXY_V2}\n    default_backend nginx_v2\n\
             backend nginx_v1\n    server n 127.0.0.1:{NGINX_PORT} send-proxy\n\
             backend nginx_v2\n    server n 127.0.0.1:{NGINX_PORT} send-proxy-v2\n"
        ),
    )
    .unwrap();
    run(&[
        "ip",
        "netns",
        "exec",
        &topo.server_ns,
        "haproxy",
        "-c",
        "-q",
        "-f",
        haproxy_conf.to_str().unwrap(),
    ]);
    let haproxy_log = topo.path("haproxy.log");
    procs.spawn_logged(
        "haproxy",
        ns_cmd(
            &topo.server_ns,
            &["haproxy", "-db", "-f", haproxy_conf.to_str().unwrap()],
        ),
        &haproxy_log,
    );
    for port in [NGINX_PORT, HAPROXY_V1, HAPROXY_V2] {
        topo.wait_listening(port, &mut procs);
    }

    // The backend leg only: loopback, nginx's port.
    let pcap = topo.path("backend.pcap");
    let tcpdump_log = topo.path("tcpdump.log");
    let filter = format!("tcp port {NGINX_PORT}");
    procs.spawn_logged(
        "tcpdump",
        ns_cmd(
            &topo.server_ns,
            &[
                "tcpdump",
                "-i",
                "lo",
                "--immediate-mode",
                "-U",
                "-w",
                pcap.to_str().unwrap(),
                &filter,
            ],
        ),
        &tcpdump_log,
    );
    wait_for_text(&tcpdump_log, "listening on", 10, &mut procs);

    // curl from the client namespace: two connections through each frontend.
    let mut clients = BTreeSet::new();
    for port in [HAPROXY_V1, HAPROXY_V1, HAPROXY_V2, HAPROXY_V2] {
        let resolve = format!("{HOST}:{port}:{SERVER_IP}");
        let url = format!("https://{HOST}:{port}/");
        let out = run(&[
            "ip",
            "netns",
            "exec",
            &topo.client_ns,
            "curl",
            "-sk",
            "--resolve",
            &resolve,
            "-o",
            "/dev/null",
            "-w",
            "%{local_ip}:%{local_port}",
            &url,
        ]);
        assert!(out.starts_with(CLIENT_IP), "curl: {out}");
        clients.insert(out.trim().to_owned());
    }
    // tcpdump reads what the kernel holds before it stops (immediate mode).
    std::thread::sleep(Duration::from_millis(500));
    procs.stop("tcpdump", libc::SIGINT, Duration::from_secs(5));

    // What nginx read from the PROXY headers.
    let logged: BTreeSet<String> = std::fs::read_to_string(d.join("access.log"))
        .unwrap()
        .lines()
        .map(|l| {
            let (client, sni) = l.split_once(' ').unwrap();
            assert_eq!(sni, HOST);
            client.to_owned()
        })
        .collect();
    assert_eq!(logged, clients, "nginx logs the clients curl reports");

    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--format", "ndjson", "--stats", "--quiet"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 4, "{records:?}");
    let named: BTreeSet<String> = records
        .iter()
        .map(|r| {
            assert_eq!(r["sni"], HOST);
            assert_eq!(r["handshake"], "full", "{r}");
            r["proxied_client"]
                .as_str()
                .unwrap_or_else(|| panic!("no proxied_client: {r}"))
                .to_owned()
        })
        .collect();
    assert_eq!(named, logged, "tlsrum names the clients nginx read");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"proxy_protocol_headers\": 4"), "{stderr}");
}
