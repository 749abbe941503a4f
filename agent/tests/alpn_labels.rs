//! `alpn_negotiated` (and TLS 1.3 `certs`) against the clients' own
//! reports: nginx (TLS 1.2 and 1.3, HTTP/1.1 and HTTP/2) and an aioquic
//! server in one namespace, curl (`-w %{http_version}`), `openssl s_client
//! -alpn h2,http/1.1` ("ALPN protocol: …") and aioquic's client (its TLS
//! state's `alpn_negotiated`, tests/quic/peer.py) in the other, each
//! client with a key log (SSLKEYLOGFILE, `-keylogfile`,
//! `secrets_log_file`). tcpdump captures at the client; the capture is
//! replayed with and without the key log.
//!
//! TLS 1.2 shows the server's choice in its ServerHello: the record must
//! equal the client's report either way. TLS 1.3 and QUIC hide it in
//! EncryptedExtensions: with the key log it must equal the report, without
//! it null (never guessed from the offer); likewise `certs` (the leaf,
//! from the decrypted Certificate).
//!
//! Each client connection goes to its own server port, so the server port
//! names the label. Needs root, network namespaces, nginx, curl, openssl,
//! tcpdump, python3 with aioquic; skipped locally without them, a failure
//! under CI=true.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{ns_cmd, run, skip_unless, wait_for_text, Need, Procs, Topology, SERVER_IP};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const HOST: &str = "tlsrum.test";
const QUIC_PORT: u16 = 4443;

/// One client connection: the server port it goes to, its TLS version,
/// and how it is made.
struct Case {
    port: u16,
    tls13: bool,
    client: Client,
}

enum Client {
    /// curl with this HTTP option.
    Curl(&'static str),
    /// openssl s_client -alpn h2,http/1.1.
    SClient,
}

const CASES: &[Case] = &[
    Case {
        port: 8441,
        tls13: false,
        client: Client::Curl("--http1.1"),
    },
    Case {
        port: 8442,
        tls13: false,
        client: Client::Curl("--http2"),
    },
    Case {
        port: 8443,
        tls13: true,
        client: Client::Curl("--http1.1"),
    },
    Case {
        port: 8444,
        tls13: true,
        client: Client::Curl("--http2"),
    },
    Case {
        port: 8445,
        tls13: false,
        client: Client::SClient,
    },
    Case {
        port: 8446,
        tls13: true,
        client: Client::SClient,
    },
];

fn start_nginx(topo: &Topology, procs: &mut Procs, cert: &Path, key: &Path) {
    let listen: String = CASES
        .iter()
        .map(|c| format!("        listen {SERVER_IP}:{} ssl http2;\n", c.port))
        .collect();
    let http = format!(
        "    access_log off;\n    server {{\n{listen}        \
         server_name {HOST};\n        ssl_certificate {};\n        ssl_certificate_key {};\n        \
         ssl_protocols TLSv1.2 TLSv1.3;\n        \
         location / {{ return 200 \"ok\\n\"; }}\n    }}\n",
        cert.display(),
        key.display(),
    );
    common::servers::nginx(&topo.server_ns, &topo.path("nginx"), &http, "nginx", procs);
    for c in CASES {
        topo.wait_listening(c.port, procs);
    }
}

/// A client command in the client namespace through `sh -c`: its output.
fn client(topo: &Topology, script: &str) -> String {
    let out = ns_cmd(&topo.client_ns, &["sh", "-c", &format!("{script} 2>&1")])
        .current_dir(&topo.dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{script} failed: {text}");
    text
}

/// Runs one case; returns the protocol the client says was negotiated.
fn label(topo: &Topology, c: &Case) -> Option<String> {
    let keylog = topo.path(&format!("keys-{}.log", c.port));
    let keylog = keylog.to_str().unwrap();
    match c.client {
        Client::Curl(http) => {
            let v = if c.tls13 {
                "--tlsv1.3"
            } else {
                "--tlsv1.2 --tls-max 1.2"
            };
            let out = client(
                topo,
                &format!(
                    "SSLKEYLOGFILE={keylog} curl -sS -k {v} {http} -o /dev/null \
                     -w 'http_version=%{{http_version}}\\n' --resolve {HOST}:{p}:{SERVER_IP} \
                     https://{HOST}:{p}/",
                    p = c.port
                ),
            );
            let v = out
                .lines()
                .find_map(|l| l.strip_prefix("http_version="))
                .unwrap_or_else(|| panic!("curl said no http_version: {out}"));
            // curl names the HTTP version it spoke, which ALPN chose (curl
            // speaks HTTP/2 over TLS only when ALPN said h2).
            match v.trim() {
                "1.1" => Some("http/1.1".into()),
                "2" => Some("h2".into()),
                other => panic!("curl http_version {other}"),
            }
        }
        Client::SClient => {
            let v = if c.tls13 { "-tls1_3" } else { "-tls1_2" };
            let out = client(
                topo,
                &format!(
                    "echo | openssl s_client -connect {SERVER_IP}:{p} -servername {HOST} {v} \
                     -alpn h2,http/1.1 -keylogfile {keylog}",
                    p = c.port
                ),
            );
            if out.contains("No ALPN negotiated") {
                return None;
            }
            let p = out
                .lines()
                .find_map(|l| l.strip_prefix("ALPN protocol: "))
                .unwrap_or_else(|| panic!("s_client said nothing of ALPN: {out}"));
            Some(p.trim().to_owned())
        }
    }
}

fn replay(capture: &Path, keylog: Option<&Path>) -> BTreeMap<u16, Value> {
    let mut args = vec!["replay", "--format", "ndjson"];
    if let Some(k) = keylog {
        args.extend(["--keylog", k.to_str().unwrap()]);
    }
    args.push(capture.to_str().unwrap());
    run(&[&[BIN][..], &args].concat())
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            let port = r["server"]
                .as_str()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            (port, r)
        })
        .collect()
}

#[test]
fn alpn_negotiated_matches_the_clients_reports() {
    if skip_unless(
        "alpn_labels",
        &[
            Need::Root,
            Need::Netns,
            Need::Tools(&["ip", "nginx", "curl", "openssl", "tcpdump", "python3"]),
            Need::Python("aioquic"),
        ],
    ) {
        return;
    }
    let topo = Topology::new("al");
    let (key, cert) = topo.self_signed(HOST);
    let mut procs = Procs::default();
    start_nginx(&topo, &mut procs, &cert, &key);
    let peer = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/quic/peer.py");
    let server_log = topo.path("quic-server.log");
    procs.spawn_logged(
        "quic-server",
        ns_cmd(
            &topo.server_ns,
            &[
                "python3",
                peer,
                "server",
                "--bind",
                SERVER_IP,
                "--port",
                &QUIC_PORT.to_string(),
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
                "--alpn",
                "h3",
            ],
        ),
        &server_log,
    );
    wait_for_text(&server_log, "listening", 20, &mut procs);

    let capture = topo.path("client.pcap");
    let tcpdump_log = topo.path("tcpdump.log");
    procs.spawn_logged(
        "tcpdump",
        ns_cmd(
            &topo.client_ns,
            &[
                "tcpdump",
                "-i",
                &topo.peer,
                "--immediate-mode",
                "-U",
                "-w",
                capture.to_str().unwrap(),
                "tcp or udp",
            ],
        ),
        &tcpdump_log,
    );
    wait_for_text(&tcpdump_log, "listening on", 10, &mut procs);

    let mut labels: BTreeMap<u16, (bool, Option<String>)> = BTreeMap::new();
    for c in CASES {
        labels.insert(c.port, (c.tls13, label(&topo, c)));
    }
    let quic_keylog = topo.path(&format!("keys-{QUIC_PORT}.log"));
    let out = client(
        &topo,
        &format!(
            "python3 {peer} client --connect {SERVER_IP} --port {QUIC_PORT} --cafile {} \
             --plan full --keylog {}",
            cert.display(),
            quic_keylog.display()
        ),
    );
    let quic: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    labels.insert(
        QUIC_PORT,
        (true, quic["alpn_negotiated"].as_str().map(str::to_owned)),
    );

    std::thread::sleep(Duration::from_millis(500));
    procs.stop("tcpdump", libc::SIGINT, Duration::from_secs(5));
    // The capture is the test's input only if tcpdump kept every packet.
    let log = std::fs::read_to_string(&tcpdump_log).unwrap();
    let dropped = log
        .lines()
        .find_map(|l| l.strip_suffix(" packets dropped by kernel"))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert_eq!(dropped, Some(0), "tcpdump's drops: {log}");

    // One key log for all the clients.
    let keylog = topo.path("keys.log");
    let mut all = String::new();
    for port in labels.keys() {
        all += &std::fs::read_to_string(topo.path(&format!("keys-{port}.log")))
            .unwrap_or_else(|e| panic!("key log of port {port}: {e}"));
    }
    std::fs::write(&keylog, all).unwrap();

    let with = replay(&capture, Some(&keylog));
    let without = replay(&capture, None);
    let mut problems = Vec::new();
    for (port, (tls13, want)) in &labels {
        assert!(want.is_some(), "port {port}: the client negotiated no ALPN");
        for (keys, recs) in [(true, &with), (false, &without)] {
            let Some(r) = recs.get(port) else {
                problems.push(format!("port {port}: no record (keylog {keys})"));
                continue;
            };
            let got = r["alpn_negotiated"].as_str().map(str::to_owned);
            let expect = if *tls13 && !keys { None } else { want.clone() };
            if got != expect {
                problems.push(format!(
                    "port {port} keylog {keys}: alpn_negotiated {got:?}, client said {want:?} \
                     (expected {expect:?}): {r}"
                ));
            }
            // The leaf certificate: in clear for TLS 1.2, from the key log for 1.3.
            let leaf = r["certs"]["leaf_subject"].as_str();
            let want_leaf = (!*tls13 || keys).then_some("CN=tlsrum.test");
            if leaf != want_leaf {
                problems.push(format!(
                    "port {port} keylog {keys}: certs {} (expected leaf {want_leaf:?})",
                    r["certs"]
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
