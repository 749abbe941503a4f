//! The Grafana dashboards against real data, and deploy/ against what it
//! promises.
//!
//! `dashboards_show_real_data_from_a_real_prometheus_pcap` and `_ebpf`: two
//! network namespaces joined by a veth pair (common::Topology, one per
//! test), nginx in one (three TLS servers: session cache, tickets and 0-RTT
//! on two with different ticket keys, a TLS 1.3-only one that forces
//! HelloRetryRequest), `openssl s_client` and curl in the other, `tlsrum
//! live` on the server's veth (libpcap backend; eBPF where it attaches), and
//! a real Prometheus (Debian `prometheus`,
//! loopback in the server namespace, fresh storage, 1 s scrapes) scraping
//! the agent. Checks:
//! - the agent's counters in Prometheus equal the handshakes the test made
//!   (by kind, method, version, server name; offers; 0-RTT; HRR), and the
//!   time-split histograms (ClientHello delay, think times, network) hold
//!   the records the agent wrote, as count and sum;
//! - every query of every panel of every dashboard, with the variables
//!   substituted as Grafana would (instance, server_name as `.*` and as one
//!   real name, transport, $__rate_interval / $__interval / $__range),
//!   returns data from Prometheus' HTTP API, every value finite and in its
//!   range (ratios in [0, 1], quantiles in plausible seconds, rates and
//!   counts >= 0), plus panel-specific facts the test knows;
//! - every variable's label_values query returns the expected values;
//! - every metric named in a dashboard exists in the agent's /metrics.
//!
//! `dashboards_match_grafanas_schema`: stable uids, `${datasource}`
//! everywhere, unique ids, grid layout, the panels issues 5 and 14 ask
//! for, and a type check against Grafana's dashboard schema from
//! `@grafana/schema` (tests/dashboards/validate.mjs).
//!
//! `deploy_files_hold_what_they_promise`: promtool, provisioning keys,
//! `systemd-analyze verify`, and the unit's sandbox tried without systemd.
//!
//! Needs root, iproute2, nginx, openssl, curl, prometheus/promtool, node
//! with tests/dashboards/node_modules (the schema test only), systemd-analyze,
//! strace, setpriv and PyYAML (scripts/install-deps.sh installs them). Without them a test says
//! why and passes, except under CI=true, where it fails.
//! TLSRUM_TEST_BACKEND=pcap|ebpf runs the live test on one backend only.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::scratch::Scratch;
use common::{ns_cmd, run, wait_for, Need, Netns, Procs, Topology, CLIENT_IP, SERVER_IP};
use serde_json::Value;

const PORT_A: u16 = 4433; // a.test's server: session cache + tickets + 0-RTT
const PORT_B: u16 = 4434; // the same, other cache and ticket key: declines A's sessions
const PORT_C: u16 = 4435; // TLS 1.3 only, X25519 only: HRR for a P-256 key share
/// Issue 16: an origin in the client namespace that the agent's host
/// connects to (outbound), as a proxy does.
const PORT_ORIGIN: u16 = 4436;
const ORIGIN: &str = "origin.test";
const AGENT: &str = "127.0.0.1:9853"; // in the server namespace
const PROMETHEUS: &str = "127.0.0.1:9090"; // likewise
/// Three: a client fingerprint seen once a round gets its own `ja4_stable` series
/// at its second handshake (round 2), which must move again (round 3) for
/// rate() to see it.
const ROUNDS: usize = 3;
const UIDS: [&str; 2] = ["tlsrum-handshake-cost", "tlsrum-resumption"];

// ---- environment ----

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the live test needs (the libpcap backend needs no BPF).
fn missing_prerequisite() -> Option<String> {
    common::missing(&[
        Need::Root,
        Need::Tools(&["ip", "ss", "nginx", "openssl", "curl", "prometheus"]),
        Need::Netns,
    ])
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// An HTTP GET from inside the server namespace; the body.
fn get(t: &Topology, url: &str, params: &[(&str, &str)]) -> Result<String, String> {
    let mut c = ns_cmd(
        &t.server_ns,
        &["curl", "-sS", "--max-time", "10", "--get", url],
    );
    for (k, v) in params {
        c.arg("--data-urlencode").arg(format!("{k}={v}"));
    }
    let out = c.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

// ---- servers ----

fn start_nginx(t: &Topology, procs: &mut Procs) {
    let d = t.dir.display();
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
        &format!("{d}/key.pem"),
        "-out",
        &format!("{d}/cert.pem"),
        "-days",
        "1",
        "-subj",
        "/CN=a.test",
        "-addext",
        "subjectAltName=DNS:a.test,DNS:b.test,DNS:c.test",
    ]);
    // Separate ticket keys and session caches: B cannot resume A's sessions.
    for k in ["ticket-a.key", "ticket-b.key"] {
        run(&["openssl", "rand", "-out", &format!("{d}/{k}"), "80"]);
    }
    let http = format!(
        r#"  access_log off;
  ssl_certificate {d}/cert.pem;
  ssl_certificate_key {d}/key.pem;
  server {{
    listen {SERVER_IP}:{PORT_A} ssl;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:A:1m;
    ssl_session_ticket_key {d}/ticket-a.key;
    ssl_early_data on;
    location / {{ return 200 "tlsrum-a\n"; }}
  }}
  server {{
    listen {SERVER_IP}:{PORT_B} ssl;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:B:1m;
    ssl_session_ticket_key {d}/ticket-b.key;
    ssl_early_data on;
    location / {{ return 200 "tlsrum-b\n"; }}
  }}
  server {{
    listen {SERVER_IP}:{PORT_C} ssl;
    ssl_protocols TLSv1.3;
    ssl_ecdh_curve X25519;
    location / {{ return 200 "tlsrum-c\n"; }}
  }}
"#
    );
    common::servers::nginx(&t.server_ns, &t.path("nginx"), &http, "nginx", procs);
    wait_for("nginx to listen", Duration::from_secs(10), || {
        let out = run(&["ip", "netns", "exec", &t.server_ns, "ss", "-Hltn"]);
        [PORT_A, PORT_B, PORT_C]
            .iter()
            .all(|p| out.contains(&format!("{SERVER_IP}:{p}")))
    });
}

/// The names file the project ships (docs/ja4-names.csv).
fn ja4_names() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ja4-names.csv")
}

/// `--buffer-size` of the agent under test: not the default, so that the
/// "Agent memory" panel shows the buffer asked for.
const CAPTURE_BUFFER_BYTES: u64 = 16 << 20;

fn start_agent(t: &Topology, procs: &mut Procs, backend: &str) {
    let mut cmd = ns_cmd(&t.server_ns, &[env!("CARGO_BIN_EXE_tlsrum")]);
    cmd.args([
        "live",
        "--backend",
        backend,
        "--iface",
        &t.veth,
        "--metrics",
        AGENT,
        "--idle-timeout",
        "5",
    ]);
    for p in [PORT_A, PORT_B, PORT_C, PORT_ORIGIN] {
        cmd.args(["--port", &p.to_string()]);
    }
    cmd.arg("--events").arg(t.dir.join("events.ndjson"));
    cmd.arg("--ja4-names").arg(ja4_names());
    cmd.args(["--buffer-size", &CAPTURE_BUFFER_BYTES.to_string()]);
    procs.spawn_logged("tlsrum", cmd, &t.dir.join("tlsrum.log"));
    wait_for("the agent's /metrics", Duration::from_secs(20), || {
        get(t, &format!("http://{AGENT}/metrics"), &[]).is_ok()
    });
}

/// `openssl s_server -www` for [`ORIGIN`] in the client namespace.
fn start_origin(t: &Topology, procs: &mut Procs) {
    let dir = t.dir.join("origin");
    std::fs::create_dir_all(&dir).unwrap();
    let (key, cert) = common::netns::self_signed(&dir, ORIGIN);
    let cmd = ns_cmd(
        &t.client_ns,
        &[
            "openssl",
            "s_server",
            "-accept",
            &PORT_ORIGIN.to_string(),
            "-cert",
            cert.to_str().unwrap(),
            "-key",
            key.to_str().unwrap(),
            "-www",
        ],
    );
    let log = dir.join("s_server.log");
    procs.spawn_logged("origin s_server", cmd, &log);
    common::wait_for_text(&log, "ACCEPT", 10, procs);
}

fn start_prometheus(t: &Topology, procs: &mut Procs) {
    let config = t.dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files: ['{}/*.rules.yml']\n\
             scrape_configs:\n  - job_name: tlsrum\n    static_configs:\n      - targets: ['{AGENT}']\n",
            repo().join("deploy/prometheus/rules").display()
        ),
    )
    .unwrap();
    let mut cmd = ns_cmd(&t.server_ns, &["prometheus"]);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            t.dir.join("prometheus-data").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS}"))
        .arg("--log.level=warn");
    procs.spawn_logged("prometheus", cmd, &t.dir.join("prometheus.log"));
    wait_for("Prometheus to be ready", Duration::from_secs(30), || {
        get(t, &format!("http://{PROMETHEUS}/-/ready"), &[]).is_ok()
    });
}

// ---- traffic ----

/// One connection the test makes and what the agent must count for it.
#[derive(Clone, Copy)]
struct Expect {
    sni: &'static str,
    kind: &'static str,
    method: &'static str,
    version: &'static str,
    accepted: Option<&'static str>,
    declined: &'static [&'static str],
    early: Option<&'static str>,
    hrr: bool,
}

const fn full(sni: &'static str, version: &'static str) -> Expect {
    Expect {
        sni,
        kind: "full",
        method: "none",
        version,
        accepted: None,
        declined: &[],
        early: None,
        hrr: false,
    }
}

const fn resumed(sni: &'static str, version: &'static str, method: &'static str) -> Expect {
    Expect {
        sni,
        kind: "resumed",
        method,
        version,
        accepted: Some(method),
        declined: &[],
        early: None,
        hrr: false,
    }
}

/// One client run: a shell command in the client namespace, the text its
/// output must contain, and the connections it makes.
struct Step {
    what: &'static str,
    cmd: String,
    want: &'static [&'static str],
    expect: Vec<Expect>,
}

fn steps(dir: &Path) -> Vec<Step> {
    let d = dir.display();
    let s_client = |port: u16, sni: &str, opts: &str| {
        format!(
            "timeout 10 openssl s_client -connect {SERVER_IP}:{port} -servername {sni} -ign_eof {opts} <{d}/request.txt 2>&1"
        )
    };
    let curl = |port: u16, sni: &str, opts: &str| {
        let url = format!("https://{sni}:{port}/");
        format!("curl -sS -k --max-time 10 --resolve {sni}:{port}:{SERVER_IP} -H 'Connection: close' {opts} {url} {url} 2>&1")
    };
    vec![
        Step {
            what: "TLS 1.3 full",
            cmd: s_client(PORT_A, "a.test", &format!("-sess_out {d}/s13")),
            want: &["tlsrum-a"],
            expect: vec![full("a.test", "TLS1.3")],
        },
        Step {
            what: "TLS 1.3 PSK resumption",
            cmd: s_client(
                PORT_A,
                "a.test",
                &format!("-sess_in {d}/s13 -sess_out {d}/s13e"),
            ),
            want: &["tlsrum-a"],
            expect: vec![resumed("a.test", "TLS1.3", "psk")],
        },
        Step {
            what: "TLS 1.3 0-RTT accepted",
            cmd: s_client(
                PORT_A,
                "a.test",
                &format!("-sess_in {d}/s13e -early_data {d}/request.txt"),
            ),
            want: &["tlsrum-a", "Early data was accepted"],
            // The verdict is encrypted: the agent may say "attempted" (see early_verdict()).
            expect: vec![Expect {
                early: Some("accepted"),
                ..resumed("a.test", "TLS1.3", "psk")
            }],
        },
        Step {
            what: "TLS 1.3 PSK declined",
            cmd: s_client(PORT_B, "a.test", &format!("-sess_in {d}/s13")),
            want: &["tlsrum-b"],
            expect: vec![Expect {
                declined: &["psk"],
                ..full("a.test", "TLS1.3")
            }],
        },
        Step {
            what: "TLS 1.3 0-RTT rejected",
            cmd: s_client(
                PORT_B,
                "a.test",
                &format!("-sess_in {d}/s13 -early_data {d}/request.txt"),
            ),
            want: &["tlsrum-b", "Early data was rejected"],
            expect: vec![Expect {
                declined: &["psk"],
                early: Some("rejected"),
                ..full("a.test", "TLS1.3")
            }],
        },
        Step {
            what: "TLS 1.2 full",
            cmd: s_client(PORT_A, "a.test", &format!("-tls1_2 -sess_out {d}/s12")),
            want: &["tlsrum-a"],
            expect: vec![full("a.test", "TLS1.2")],
        },
        Step {
            what: "TLS 1.2 ticket resumption",
            cmd: s_client(PORT_A, "a.test", &format!("-tls1_2 -sess_in {d}/s12")),
            want: &["tlsrum-a"],
            expect: vec![resumed("a.test", "TLS1.2", "ticket")],
        },
        Step {
            what: "TLS 1.2 full, no ticket",
            cmd: s_client(
                PORT_A,
                "a.test",
                &format!("-tls1_2 -no_ticket -sess_out {d}/s12n"),
            ),
            want: &["tlsrum-a"],
            expect: vec![full("a.test", "TLS1.2")],
        },
        Step {
            what: "TLS 1.2 session-ID resumption",
            cmd: s_client(
                PORT_A,
                "a.test",
                &format!("-tls1_2 -no_ticket -sess_in {d}/s12n"),
            ),
            want: &["tlsrum-a"],
            expect: vec![resumed("a.test", "TLS1.2", "session_id")],
        },
        Step {
            what: "TLS 1.2 session ID and ticket declined",
            cmd: s_client(PORT_B, "a.test", &format!("-tls1_2 -sess_in {d}/s12")),
            want: &["tlsrum-b"],
            expect: vec![Expect {
                declined: &["session_id", "ticket"],
                ..full("a.test", "TLS1.2")
            }],
        },
        Step {
            what: "curl, TLS 1.3, two connections",
            cmd: curl(PORT_B, "b.test", ""),
            want: &["tlsrum-b"],
            expect: vec![full("b.test", "TLS1.3"), resumed("b.test", "TLS1.3", "psk")],
        },
        Step {
            what: "curl, TLS 1.2, two connections",
            cmd: curl(PORT_A, "a.test", "--tlsv1.2 --tls-max 1.2"),
            want: &["tlsrum-a"],
            // curl (OpenSSL) offers the session by its ID only.
            expect: vec![
                full("a.test", "TLS1.2"),
                resumed("a.test", "TLS1.2", "session_id"),
            ],
        },
        Step {
            what: "HelloRetryRequest",
            cmd: s_client(PORT_C, "c.test", "-groups P-256:X25519"),
            want: &["tlsrum-c"],
            expect: vec![Expect {
                hrr: true,
                ..full("c.test", "TLS1.3")
            }],
        },
        Step {
            what: "failed: TLS 1.2 client, TLS 1.3-only server",
            cmd: s_client(PORT_C, "c.test", "-tls1_2"),
            want: &["alert"],
            expect: vec![Expect {
                kind: "failed",
                version: "unknown",
                ..full("c.test", "")
            }],
        },
    ]
}

/// Issue 16: the agent's own host as a client (a proxy to its origin):
/// outbound; one connection each (curl uses it at once: on demand).
fn outbound_steps() -> Vec<Step> {
    let url = format!("https://{ORIGIN}:{PORT_ORIGIN}/");
    vec![Step {
        what: "curl from the agent's host to an origin",
        cmd: format!("curl -sS -k --max-time 10 --resolve {ORIGIN}:{PORT_ORIGIN}:{CLIENT_IP} -H 'Connection: close' {url} 2>&1"),
        want: &["s_server"],
        expect: vec![full(ORIGIN, "TLS1.3")],
    }]
}

/// Runs `steps` in namespace `ns`.
fn make_traffic(ns: &str, steps: &[Step]) {
    for s in steps {
        let out = ns_cmd(ns, &["sh", "-c", &s.cmd]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for w in s.want {
            assert!(
                text.contains(w),
                "{}: no {w:?} in the client's output:\n$ {}\n{text}",
                s.what,
                s.cmd
            );
        }
    }
}

/// What the agent must have counted after every round.
#[derive(Default, Debug)]
struct Totals {
    handshakes: BTreeMap<(String, String, String, String), f64>, // kind, method, version, server_name
    offers: BTreeMap<(String, String, String), f64>,             // outcome, method, server_name
    early: BTreeMap<(String, String), f64>,                      // outcome, server_name
    hrr: f64,
    connections: f64,
    /// Issue 16: handshakes by role.
    roles: BTreeMap<String, f64>,
}

/// `inbound`: clients' steps; `outbound`: the agent's host's own.
fn totals(inbound: &[Step], outbound: &[Step], rounds: usize) -> Totals {
    let mut t = Totals::default();
    let tagged = |steps: &'static str, s: &[Step]| {
        s.iter()
            .flat_map(|s| s.expect.clone())
            .map(move |e| (steps, e))
            .collect::<Vec<_>>()
    };
    for (role, e) in tagged("inbound", inbound)
        .into_iter()
        .chain(tagged("outbound", outbound))
    {
        let n = rounds as f64;
        *t.roles.entry(role.into()).or_default() += n;
        let s = e.sni.to_string();
        *t.handshakes
            .entry((e.kind.into(), e.method.into(), e.version.into(), s.clone()))
            .or_default() += n;
        if let Some(m) = e.accepted {
            *t.offers
                .entry(("accepted".into(), m.into(), s.clone()))
                .or_default() += n;
        }
        for m in e.declined {
            *t.offers
                .entry(("declined".into(), m.to_string(), s.clone()))
                .or_default() += n;
        }
        if let Some(o) = e.early {
            *t.early.entry((early_verdict(o), s.clone())).or_default() += n;
        }
        t.hrr += if e.hrr { n } else { 0.0 };
        t.connections += n;
    }
    t
}

/// 0-RTT accepted under an accepted PSK is only visible to a passive
/// observer when the evidence is unambiguous (DESIGN.md): the agent reports
/// "accepted" or "attempted", both true; the test counts them together.
fn early_verdict(outcome: &str) -> String {
    match outcome {
        "accepted" | "attempted" => "accepted|attempted".into(),
        other => other.into(),
    }
}

// ---- Prometheus ----

struct Prom<'a> {
    t: &'a Topology,
}

impl Prom<'_> {
    fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let body = get(self.t, &format!("http://{PROMETHEUS}{path}"), params)
            .unwrap_or_else(|e| panic!("{path} {params:?}: {e}"));
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(v["status"], "success", "{path} {params:?}: {body}");
        v["data"].clone()
    }

    /// An instant query: (labels, value) per series.
    fn query(&self, expr: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let data = self.api("/api/v1/query", &[("query", expr)]);
        let samples = match data["resultType"].as_str() {
            Some("vector") => data["result"].as_array().unwrap().clone(),
            Some("scalar") => vec![serde_json::json!({"metric": {}, "value": data["result"]})],
            other => panic!("{expr}: result type {other:?}"),
        };
        samples
            .iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let v = s["value"][1].as_str().unwrap();
                let v = match v {
                    "NaN" => f64::NAN,
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    _ => v.parse().unwrap(),
                };
                (labels, v)
            })
            .collect()
    }

    fn scalar(&self, expr: &str) -> f64 {
        let r = self.query(expr);
        assert_eq!(r.len(), 1, "{expr}: {r:?}");
        r[0].1
    }
}

/// The rows summed by `labels` (others, such as `family`, folded).
fn by<const N: usize>(
    rows: &[(BTreeMap<String, String>, f64)],
    labels: [&str; N],
) -> BTreeMap<[String; N], f64> {
    let mut m = BTreeMap::new();
    for (l, v) in rows.iter().filter(|(_, v)| *v != 0.0) {
        *m.entry(labels.map(|k| l.get(k).cloned().unwrap_or_default()))
            .or_default() += *v;
    }
    m
}

// ---- dashboards ----

fn load_dashboards() -> Vec<(String, Value)> {
    let dir = repo().join("dashboards");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Panels including those nested in collapsed rows.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter());
        }
    }
    out
}

fn targets(p: &Value) -> Vec<&Value> {
    p["targets"]
        .as_array()
        .map(|t| t.iter().collect())
        .unwrap_or_default()
}

/// The structure Grafana needs and the project promises (STYLE.md, Dashboards).
fn check_structure(dashboards: &[(String, Value)]) {
    let uids: BTreeSet<&str> = dashboards
        .iter()
        .map(|(_, d)| d["uid"].as_str().unwrap())
        .collect();
    assert_eq!(
        uids,
        UIDS.into_iter().collect(),
        "dashboard uids are stable: links and bookmarks use them"
    );
    let ds = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    for (file, d) in dashboards {
        let sv = d["schemaVersion"].as_u64().unwrap();
        assert!(
            (36..=41).contains(&sv),
            "{file}: schemaVersion {sv} is not Grafana 10/11's"
        );
        assert!(
            d["id"].is_null(),
            "{file}: a provisioned dashboard carries no database id"
        );
        let vars = d["templating"]["list"].as_array().unwrap();
        let var = |n: &str| {
            vars.iter()
                .find(|v| v["name"] == n)
                .unwrap_or_else(|| panic!("{file}: no variable {n}"))
        };
        assert_eq!(var("datasource")["type"], "datasource");
        assert_eq!(var("datasource")["query"], "prometheus");
        for (name, label) in [
            ("instance", "instance"),
            ("server_name", "server_name"),
            ("transport", "transport"),
        ] {
            let v = var(name);
            assert_eq!(v["type"], "query", "{file}: ${name}");
            assert_eq!(v["datasource"], ds, "{file}: ${name}");
            let q = v["query"]["query"].as_str().unwrap();
            assert!(
                q.starts_with("label_values(") && q.ends_with(&format!(", {label})")),
                "{file}: ${name}: {q}"
            );
        }
        let mut ids = BTreeSet::new();
        let mut cells: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        for p in panels(d) {
            let id = p["id"].as_u64().unwrap();
            assert!(ids.insert(id), "{file}: panel id {id} twice");
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_u64().unwrap(),
                g["y"].as_u64().unwrap(),
                g["w"].as_u64().unwrap(),
                g["h"].as_u64().unwrap(),
            );
            assert!(
                w > 0 && h > 0 && x + w <= 24,
                "{file}: panel {id} outside the 24-column grid"
            );
            for cx in x..x + w {
                for cy in y..y + h {
                    if let Some(other) = cells.insert((cx, cy), id) {
                        panic!("{file}: panels {other} and {id} overlap");
                    }
                }
            }
            if p["type"] == "row" {
                continue;
            }
            assert!(
                !p["title"].as_str().unwrap_or("").is_empty(),
                "{file}: panel {id} has no title"
            );
            assert!(
                !p["description"].as_str().unwrap_or("").is_empty(),
                "{file}: panel {} has no description",
                p["title"]
            );
            assert_eq!(p["datasource"], ds, "{file}: panel {}", p["title"]);
            let ts = targets(p);
            assert!(!ts.is_empty(), "{file}: panel {} has no query", p["title"]);
            let mut refs = BTreeSet::new();
            for t in ts {
                assert_eq!(t["datasource"], ds, "{file}: panel {}", p["title"]);
                assert!(
                    refs.insert(t["refId"].as_str().unwrap()),
                    "{file}: panel {}: refId twice",
                    p["title"]
                );
                let expr = t["expr"].as_str().unwrap();
                assert!(
                    expr.contains("instance=~\"$instance\""),
                    "{file}: panel {}: not filtered by $instance: {expr}",
                    p["title"]
                );
            }
        }
    }
    // The views issues 5 and 14 ask for.
    let titles: BTreeSet<String> = dashboards
        .iter()
        .flat_map(|(_, d)| {
            panels(d)
                .into_iter()
                .map(|p| p["title"].as_str().unwrap().to_lowercase())
        })
        .collect();
    for want in [
        "resumption rate by server name",
        "resumption offers: accepted vs declined",
        "0-rtt by outcome",
        "handshake duration",
        "handshake duration p50 / p90 / p99 by kind",
        "round trips before the client could send data",
        "tcp round-trip time",
        "avoidable handshake time by server name",
        "where the time goes",
        "clienthello delay p50 / p95 by server name",
        "top server names by declined offers",
        "tls versions",
        "transports",
        "packets, kernel events and records",
        "drops by reason",
        "flows tracked",
        "flows evicted and expired",
        "parse errors by reason",
        "resumption rate by address family",
        "resumption rate by version",
        "resumption rate by top client",
        "handshake duration p95 by address family",
        "handshake duration p95 by version",
        "handshake duration p95 by top client",
        // Issue 16.
        "handshakes by role",
        "resumption rate by role",
        "handshake duration p95 by role",
        "outbound handshakes per origin",
        "pool hit rate by origin",
        "idle before use p50 / p95 by role",
        "connection lifetime p50 / p95 by role",
        // Issue 17: from the recording rules.
        "handshake duration p50 / p95 by server name",
    ] {
        assert!(titles.contains(want), "no panel {want:?}");
    }
}

/// Metric names in a PromQL expression or a label_values() query: the
/// identifiers right before a `{` selector, and every tls_/tlsrum_ name.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == '"' {
            // skip string literals (label values, regexes)
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                i += if bytes[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_' || bytes[i] == ':')
            {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            let prev = if start > 0 { bytes[start - 1] } else { ' ' };
            if prev == '$' {
                continue; // a variable
            }
            if word.starts_with("tls_") || word.starts_with("tlsrum_") || bytes.get(i) == Some(&'{')
            {
                names.insert(word);
            }
            continue;
        }
        i += 1;
    }
    names
}

/// Sample names in the agent's exposition text.
fn exposed_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// Grafana's regex escaping of a variable value in a Prometheus query.
fn grafana_escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if "\\^$.|?*+()[]{}".contains(c) {
            out.push_str("\\\\");
        }
        out.push(c);
    }
    out
}

struct Vars {
    instance: String,
    server_name: String,
    transport: String,
    interval: String,
}

fn substitute(expr: &str, v: &Vars) -> String {
    let mut e = expr.to_string();
    for (name, value) in [
        ("__rate_interval", v.interval.as_str()),
        ("__interval", v.interval.as_str()),
        ("__range", v.interval.as_str()),
        ("instance", v.instance.as_str()),
        ("server_name", v.server_name.as_str()),
        ("transport", v.transport.as_str()),
    ] {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!e.contains('$'), "unsubstituted variable in {e}");
    e
}

type Rows = Vec<(BTreeMap<String, String>, f64)>;

/// Range and panel-specific checks of one query's result.
/// Which optional record fields the agent's records carry (issue 16: the
/// analyzer may not compute them yet): a panel of one shows data exactly
/// when the records have it.
#[derive(Clone, Copy)]
struct Has {
    idle_before_use: bool,
    lifetime: bool,
}

impl Has {
    fn of(events: &str) -> Has {
        let records: Vec<Value> = events
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let any = |f: &str| records.iter().any(|r| r["timing"][f].is_number());
        Has {
            idle_before_use: any("idle_before_use"),
            lifetime: any("lifetime"),
        }
    }
}

fn check_result(file: &str, p: &Value, expr: &str, rows: &Rows, all_names: bool, has: Has) {
    let title = p["title"].as_str().unwrap();
    let ctx = || format!("{file}: \"{title}\": {expr}\n=> {rows:?}");
    // Panels with no data by design: the outbound ones for a.test (only
    // the origin is outbound), those of a field the records lack.
    let no_data = match title {
        "Outbound handshakes per origin" => !all_names,
        "Pool hit rate by origin" => !all_names || !has.idle_before_use,
        "Idle before use p50 / p95 by role" => !has.idle_before_use,
        "Connection lifetime p50 / p95 by role" => !has.lifetime,
        _ => false,
    };
    if no_data {
        assert!(rows.is_empty(), "data where none is due: {}", ctx());
        return;
    }
    // Every step repeats each round, so each fingerprint of this test has
    // its own ja4_stable series by round 2 and `other` may stop moving: over the
    // window its rate is 0 and a quantile or ratio of it NaN (a gap in
    // Grafana). Every other value must be finite.
    let rows: &Rows = &rows
        .iter()
        .filter(|(l, v)| {
            !(title.ends_with("by top client")
                && v.is_nan()
                && l.get("ja4_stable").map(String::as_str) == Some("other"))
        })
        .cloned()
        .collect();
    assert!(!rows.is_empty(), "no data: {}", ctx());
    let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
    for (_, v) in rows {
        assert!(v.is_finite() && *v >= 0.0, "value out of range: {}", ctx());
        if unit == "percentunit" {
            assert!(*v <= 1.0 + 1e-9, "ratio above 1: {}", ctx());
        }
        if expr.starts_with("histogram_quantile") {
            // Veth round trips and loopback-speed handshakes: well under a second.
            assert!(*v > 0.0 && *v < 1.0, "implausible quantile: {}", ctx());
        }
    }
    let labels = |k: &str| -> BTreeSet<String> {
        rows.iter().filter_map(|(l, _)| l.get(k).cloned()).collect()
    };
    let nonzero = |k: &str| -> BTreeSet<String> {
        rows.iter()
            .filter(|(_, v)| *v > 0.0)
            .filter_map(|(l, _)| l.get(k).cloned())
            .collect()
    };
    let value = |k: &str, val: &str| {
        rows.iter()
            .find(|(l, _)| l.get(k).map(String::as_str) == Some(val))
            .map(|r| r.1)
    };
    let set = |xs: &[&str]| {
        xs.iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    match title {
        "Resumption rate by server name" => {
            let a = value("server_name", "a.test").unwrap_or_else(|| panic!("{}", ctx()));
            assert!(
                a > 0.0 && a < 1.0,
                "a.test resumes some, not all: {}",
                ctx()
            );
            if all_names {
                assert_eq!(
                    labels("server_name"),
                    set(&["a.test", "b.test", "c.test", ORIGIN]),
                    "{}",
                    ctx()
                );
                assert_eq!(
                    value("server_name", "c.test"),
                    Some(0.0),
                    "c.test never resumes: {}",
                    ctx()
                );
            }
        }
        "Resumption offers: accepted vs declined" => {
            assert_eq!(
                labels("outcome"),
                set(&["accepted", "declined"]),
                "{}",
                ctx()
            );
            assert_eq!(
                labels("method"),
                set(&["psk", "session_id", "ticket"]),
                "{}",
                ctx()
            );
        }
        "Offer acceptance by method" => {
            assert_eq!(
                labels("method"),
                set(&["psk", "session_id", "ticket"]),
                "{}",
                ctx()
            );
            assert!(
                rows.iter().all(|(_, v)| *v > 0.0 && *v < 1.0),
                "every method was both accepted and declined: {}",
                ctx()
            );
        }
        // Every name's offer series exist from its first handshake (issue
        // 17: 0 rather than "No data"); only a.test's count.
        "Top server names by declined offers" => {
            assert_eq!(
                nonzero("server_name"),
                set(&["a.test"]),
                "only a.test's offers were declined: {}",
                ctx()
            );
        }
        "0-RTT by outcome" => {
            let outcomes = labels("outcome");
            assert!(
                outcomes.contains("rejected")
                    && (outcomes.contains("accepted") || outcomes.contains("attempted")),
                "{}",
                ctx()
            );
            assert!(
                outcomes.is_subset(&set(&["accepted", "attempted", "rejected"])),
                "{}",
                ctx()
            );
        }
        "0-RTT by server name and outcome" => {
            assert_eq!(nonzero("server_name"), set(&["a.test"]), "{}", ctx());
            if all_names {
                // The names without 0-RTT show 0 (issue 17).
                assert_eq!(
                    labels("server_name"),
                    set(&["a.test", "b.test", "c.test", ORIGIN]),
                    "{}",
                    ctx()
                );
            }
        }
        "TLS versions" if all_names => assert_eq!(
            labels("version"),
            set(&["TLS1.2", "TLS1.3", "unknown"]),
            "{}",
            ctx()
        ),
        "TLS versions" => assert_eq!(labels("version"), set(&["TLS1.2", "TLS1.3"]), "{}", ctx()),
        "Transports" => assert_eq!(labels("transport"), set(&["tcp"]), "{}", ctx()),
        // Issue 15: the veth carries IPv4 only; a.test speaks TLS 1.2 and
        // 1.3; clients by fingerprint (TCP: `t...`), the top ones and other.
        "Resumption rate by address family" | "Handshake duration p95 by address family" => {
            assert_eq!(labels("family"), set(&["ipv4"]), "{}", ctx())
        }
        "Resumption rate by version" | "Handshake duration p95 by version" => {
            assert_eq!(labels("version"), set(&["TLS1.2", "TLS1.3"]), "{}", ctx())
        }
        "Resumption rate by top client" | "Handshake duration p95 by top client" => {
            let clients = labels("ja4_stable");
            assert!(
                clients.iter().any(|c| c.starts_with('t')),
                "no client of its own: {}",
                ctx()
            );
            assert!(
                clients.iter().all(|c| c.starts_with('t') || c == "other"),
                "{}",
                ctx()
            );
            if title.starts_with("Resumption") {
                assert!(
                    rows.iter().any(|(_, v)| *v > 0.0),
                    "some client resumes: {}",
                    ctx()
                );
            }
        }
        "Round trips before the client could send data" => {
            for le in ["1.0", "2.0", "+Inf"] {
                assert!(
                    value("le", le).is_some_and(|v| v > 0.0),
                    "no handshakes up to le={le}: {}",
                    ctx()
                );
            }
        }
        "Mean round trips by kind" => {
            // TLS 1.2 full 2, TLS 1.3 full 1 (2 with HRR); resumed 1, accepted 0-RTT 0.
            assert!(
                value("kind", "full").is_some_and(|v| (1.0..=2.0).contains(&v)),
                "{}",
                ctx()
            );
            assert!(
                value("kind", "resumed").is_some_and(|v| (0.0..=1.0).contains(&v)),
                "{}",
                ctx()
            );
        }
        // The HRRs come from the TLS 1.3-only server, not from a.test.
        "HelloRetryRequest share" if all_names => {
            assert!(rows.iter().all(|(_, v)| *v > 0.0 && *v < 1.0), "{}", ctx())
        }
        "HelloRetryRequest share" => assert!(rows.iter().all(|(_, v)| *v == 0.0), "{}", ctx()),
        "Where the time goes" => {
            assert_eq!(rows.len(), 1, "one mean per part: {}", ctx());
            if expr.contains("tls_handshake_network_seconds") {
                assert!(
                    rows[0].1 > 0.0,
                    "every handshake spans a round trip: {}",
                    ctx()
                );
            }
        }
        "ClientHello delay p50 / p95 by server name"
        | "Handshake duration p50 / p95 by server name"
            if all_names =>
        {
            assert_eq!(
                labels("server_name"),
                set(&["a.test", "b.test", "c.test", ORIGIN]),
                "{}",
                ctx()
            )
        }
        "ClientHello delay p50 / p95 by server name"
        | "Handshake duration p50 / p95 by server name" => {
            assert_eq!(labels("server_name"), set(&["a.test"]), "{}", ctx())
        }
        "Avoidable handshake time by server name" | "Avoidable time by server name" => {
            assert!(
                value("server_name", "a.test").is_some_and(|v| v > 0.0),
                "a.test's declined TLS 1.2 offers cost a round trip: {}",
                ctx()
            );
        }
        // Issue 16: the clients inbound, the agent's host to its origin
        // outbound (never resuming: one connection a round).
        "Handshakes by role"
        | "Handshake duration p95 by role"
        | "Idle before use p50 / p95 by role" => {
            let want: &[&str] = if all_names {
                &["inbound", "outbound"]
            } else {
                &["inbound"]
            };
            assert_eq!(labels("role"), set(want), "{}", ctx());
        }
        "Connection lifetime p50 / p95 by role" => {
            assert_eq!(labels("role"), set(&["inbound", "outbound"]), "{}", ctx())
        }
        "Resumption rate by role" => {
            assert!(
                value("role", "inbound").is_some_and(|v| v > 0.0 && v < 1.0),
                "{}",
                ctx()
            );
            if all_names {
                assert_eq!(value("role", "outbound"), Some(0.0), "{}", ctx());
            } else {
                assert_eq!(labels("role"), set(&["inbound"]), "{}", ctx());
            }
        }
        "Outbound handshakes per origin" => {
            assert_eq!(labels("server_name"), set(&[ORIGIN]), "{}", ctx());
            assert!(rows.iter().all(|(_, v)| *v > 0.0), "{}", ctx());
        }
        // curl sends its request at once: opened on demand, no pool hit.
        "Pool hit rate by origin" => {
            assert_eq!(labels("server_name"), set(&[ORIGIN]), "{}", ctx());
            assert!(rows.iter().all(|(_, v)| *v == 0.0), "{}", ctx());
        }
        // The agent analysed the test's traffic: it used CPU in the window.
        "Agent CPU" => assert!(rows.iter().all(|(_, v)| *v > 0.0), "{}", ctx()),
        // The buffer the agent was started with ([`start_agent`]), as the
        // kernel made it (one interface, a power of two).
        "Agent memory" if expr.contains("tlsrum_capture_buffer_bytes") => assert!(
            rows.iter().all(|(_, v)| *v == CAPTURE_BUFFER_BYTES as f64),
            "{}",
            ctx()
        ),
        "Agent memory" if expr.contains("process_resident_memory_bytes") => {
            assert!(rows.iter().all(|(_, v)| *v > (1 << 20) as f64), "{}", ctx())
        }
        _ => {}
    }
    if title.contains("by kind") {
        let kinds = labels("kind");
        assert!(
            kinds.contains("full") && kinds.contains("resumed"),
            "{}",
            ctx()
        );
    }
}

fn check_counters(prom: &Prom, instance: &str, want: &Totals, events: &str) {
    let sel = format!("{{instance=\"{instance}\"}}");
    let ctx = || format!("records the agent wrote:\n{events}");
    let hs = prom.query(&format!("tls_handshakes_total{sel}"));
    // Issue 16: the clients' handshakes inbound, the host's own outbound.
    let roles: BTreeMap<String, f64> = by(&hs, ["role"])
        .into_iter()
        .map(|([r], n)| (r, n))
        .collect();
    assert_eq!(roles, want.roles, "tls_handshakes_total by role\n{}", ctx());
    let got: BTreeMap<_, _> = by(&hs, ["kind", "method", "version", "server_name"])
        .into_iter()
        .map(|([k, m, v, s], n)| ((k, m, v, s), n))
        .collect();
    assert_eq!(
        got,
        want.handshakes,
        "tls_handshakes_total by kind, method, version, server_name\n{}",
        ctx()
    );
    let offers: BTreeMap<_, _> = by(
        &prom.query(&format!("tls_resumption_offers_total{sel}")),
        ["outcome", "method", "server_name"],
    )
    .into_iter()
    // Every name's offer series exist at 0 from its first handshake.
    .filter(|(_, n)| *n > 0.0)
    .map(|([o, m, s], n)| ((o, m, s), n))
    .collect();
    assert_eq!(
        offers,
        want.offers,
        "tls_resumption_offers_total\n{}",
        ctx()
    );
    let early: BTreeMap<_, _> = by(
        &prom.query(&format!("tls_early_data_total{sel}")),
        ["outcome", "server_name"],
    )
    .into_iter()
    .filter(|(_, n)| *n > 0.0) // likewise
    .fold(BTreeMap::new(), |mut m, ([o, s], n)| {
        *m.entry((early_verdict(&o), s)).or_default() += n;
        m
    });
    assert_eq!(early, want.early, "tls_early_data_total\n{}", ctx());
    assert_eq!(
        prom.scalar(&format!("sum(tls_hello_retry_requests_total{sel})")),
        want.hrr,
        "HRR\n{}",
        ctx()
    );
    assert_eq!(
        prom.scalar(&format!("sum(tlsrum_connection_records_total{sel})")),
        want.connections
    );
    // Every completed handshake with timing observed once per histogram.
    let timed = want.connections
        - want
            .handshakes
            .iter()
            .filter(|(k, _)| k.0 == "failed")
            .map(|(_, n)| n)
            .sum::<f64>();
    assert_eq!(
        prom.scalar(&format!("sum(tls_handshake_duration_seconds_count{sel})")),
        timed,
        "{}",
        ctx()
    );
    assert_eq!(
        prom.scalar(&format!("sum(tls_tcp_rtt_seconds_count{sel})")),
        want.connections,
        "{}",
        ctx()
    );
    assert!(prom.scalar(&format!("sum(tls_avoidable_handshake_seconds_total{sel})")) > 0.0);
    // Issue 15: every handshake once by client fingerprint, under its own
    // ja4_stable (one the records have) or other/none; the family on both.
    let records: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fingerprints: BTreeSet<&str> = records
        .iter()
        .filter_map(|r| r["ja4_stable"].as_str())
        .collect();
    let clients = prom.query(&format!("tls_client_handshakes_total{sel}"));
    assert_eq!(
        clients.iter().map(|(_, v)| v).sum::<f64>(),
        want.connections,
        "tls_client_handshakes_total\n{}",
        ctx()
    );
    let own: BTreeSet<&str> = clients
        .iter()
        .map(|(l, _)| l["ja4_stable"].as_str())
        .filter(|j| *j != "other" && *j != "none")
        .collect();
    assert!(
        !own.is_empty() && own.is_subset(&fingerprints),
        "ja4_stable values {own:?}, the records' {fingerprints:?}"
    );
    // --ja4-names: each series' `client` is its fingerprint's name, if any.
    let names = analyzer::client_names::ClientNames::load(&ja4_names()).unwrap();
    for (l, _) in &clients {
        let want = names.get(&l["ja4_stable"]).unwrap_or_default();
        assert_eq!(
            l.get("client").map(String::as_str).unwrap_or_default(),
            want,
            "{l:?}"
        );
    }
    assert_eq!(
        by(&hs, ["family"]).into_keys().collect::<Vec<_>>(),
        vec![["ipv4".to_string()]],
        "tls_handshakes_total by family"
    );
    check_time_split(prom, &sel, events);
}

/// Issue 14: the histograms behind "Where the time goes" and "ClientHello
/// delay" hold, as count and sum, exactly the records the agent wrote that
/// carry each field; the network part is the handshake less both think
/// times. All traffic here is TLS over TCP with its three-way handshake in
/// view, so every record has a ClientHello delay, and the three parts of
/// the split describe the same handshakes (the panel stacks them).
fn check_time_split(prom: &Prom, sel: &str, events: &str) {
    let records: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ctx = || format!("records the agent wrote:\n{events}");
    let field = |r: &Value, f: &str| r["timing"][f].as_f64();
    let network = |r: &Value| {
        Some(field(r, "handshake")? - field(r, "server_think")? - field(r, "client_think")?)
    };
    let mut counts = BTreeMap::new();
    for (metric, f) in [
        ("tls_client_hello_delay_seconds", Some("client_hello_delay")),
        ("tls_server_think_seconds", Some("server_think")),
        ("tls_client_think_seconds", Some("client_think")),
        ("tls_handshake_network_seconds", None),
    ] {
        let values: Vec<f64> = records
            .iter()
            .filter_map(|r| f.map_or_else(|| network(r), |f| field(r, f)))
            .collect();
        let count = prom.scalar(&format!("sum({metric}_count{sel})"));
        let sum = prom.scalar(&format!("sum({metric}_sum{sel})"));
        let want = values.iter().sum::<f64>() / 1e3;
        assert_eq!(count, values.len() as f64, "{metric}_count\n{}", ctx());
        assert!(
            (sum - want).abs() < 1e-6,
            "{metric}_sum {sum} vs the records' {want}\n{}",
            ctx()
        );
        counts.insert(metric, count);
    }
    assert_eq!(
        counts["tls_client_hello_delay_seconds"],
        records.len() as f64,
        "{}",
        ctx()
    );
    let split = counts["tls_handshake_network_seconds"];
    assert!(split > 0.0, "no handshake split\n{}", ctx());
    assert_eq!(counts["tls_client_think_seconds"], split, "{}", ctx());
    assert_eq!(counts["tls_server_think_seconds"], split, "{}", ctx());
}

// ---- the test ----

/// The JSON's structure, and Grafana's dashboard schema (@grafana/schema,
/// checked by the TypeScript compiler in tests/dashboards/validate.mjs).
#[test]
fn dashboards_match_grafanas_schema() {
    let dashboards = load_dashboards();
    check_structure(&dashboards);
    let modules = repo().join("tests/dashboards/node_modules");
    if !modules.join("@grafana/schema").exists() || !modules.join("typescript").exists() {
        common::not_here(
            "dashboards_match_grafanas_schema",
            "tests/dashboards/node_modules missing (npm ci)",
        );
        return;
    }
    if Command::new("node").arg("--version").output().is_err() {
        common::not_here("dashboards_match_grafanas_schema", "node not installed");
        return;
    }
    let out = Command::new("node")
        .arg(repo().join("tests/dashboards/validate.mjs"))
        .arg(repo().join("dashboards"))
        .output()
        .expect("node");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schema validation failed:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        summary["self_test"]["caught"], summary["self_test"]["planted"],
        "{report}"
    );
    assert_eq!(
        summary["dashboards"].as_array().unwrap().len(),
        dashboards.len()
    );
    eprintln!(
        "schema: {} dashboards, {} panels type-check against @grafana/schema {} (TypeScript {}); {} planted mistakes caught",
        dashboards.len(),
        summary["panels"],
        summary["schema"],
        summary["typescript"],
        summary["self_test"]["caught"],
    );
}

/// TLSRUM_TEST_BACKEND=pcap|ebpf runs the live test on that backend only
/// (any other value: pcap).
fn backend_wanted(backend: &str) -> bool {
    match std::env::var("TLSRUM_TEST_BACKEND").as_deref() {
        Ok("ebpf") => backend == "ebpf",
        Ok(_) => backend == "pcap",
        Err(_) => true,
    }
}

/// Every panel against a real Prometheus scraping a real agent on the
/// libpcap backend.
#[test]
fn dashboards_show_real_data_from_a_real_prometheus_pcap() {
    let test = "dashboards_show_real_data_from_a_real_prometheus_pcap";
    if let Some(why) = missing_prerequisite() {
        common::not_here(test, &why);
        return;
    }
    if !backend_wanted("pcap") {
        eprintln!("{test}: TLSRUM_TEST_BACKEND=ebpf, not run");
        return;
    }
    live_run("pcap", "dp", &load_dashboards());
}

/// The same on the eBPF backend, where it attaches here.
#[test]
fn dashboards_show_real_data_from_a_real_prometheus_ebpf() {
    let test = "dashboards_show_real_data_from_a_real_prometheus_ebpf";
    if let Some(why) = missing_prerequisite() {
        common::not_here(test, &why);
        return;
    }
    if !backend_wanted("ebpf") {
        eprintln!("{test}: TLSRUM_TEST_BACKEND is not ebpf, not run");
        return;
    }
    if std::env::var("TLSRUM_TEST_BACKEND").is_err() {
        // eBPF's own test (ebpf_attach) says why it cannot attach here.
        let ns = netns_with_veth("p");
        let scratch =
            std::env::temp_dir().join(format!("tlsrum-probe-{}.ndjson", std::process::id()));
        let (ok, err) = agent_once(&ns.name, "ebpf", None, None, &scratch);
        let _ = std::fs::remove_file(&scratch);
        if !ok {
            eprintln!("{test}: the eBPF backend does not start here, checking libpcap only: {err}");
            return;
        }
    }
    live_run("ebpf", "de", &load_dashboards());
}

fn live_run(backend: &str, tag: &str, dashboards: &[(String, Value)]) {
    let started = Instant::now();
    // Declared in this order so that drop stops the processes first, then
    // removes the namespaces.
    let topo = Topology::new(tag);
    let mut procs = Procs::default();
    std::fs::write(
        topo.dir.join("request.txt"),
        "GET / HTTP/1.0\r\nHost: tlsrum\r\n\r\n",
    )
    .unwrap();
    start_nginx(&topo, &mut procs);
    start_origin(&topo, &mut procs);
    start_agent(&topo, &mut procs, backend);
    start_prometheus(&topo, &mut procs);
    let prom = Prom { t: &topo };
    wait_for("the first scrape", Duration::from_secs(20), || {
        !prom
            .query(&format!("tlsrum_packets_total{{instance=\"{AGENT}\"}}"))
            .is_empty()
    });

    // Rounds a few scrapes apart (ROUNDS): every series exists before its second
    // increment, so rate() over the window sees it move.
    let steps = steps(&topo.dir);
    let outbound = outbound_steps();
    let want = totals(&steps, &outbound, ROUNDS);
    let traffic_start = now();
    for round in 0..ROUNDS {
        if round > 0 {
            std::thread::sleep(Duration::from_secs(3));
        }
        make_traffic(&topo.client_ns, &steps);
        make_traffic(&topo.server_ns, &outbound);
        procs.check_alive();
    }
    let events_path = topo.dir.join("events.ndjson");
    let records = || {
        prom.query(&format!(
            "tlsrum_connection_records_total{{instance=\"{AGENT}\"}}"
        ))
        .first()
        .map_or(0.0, |r| r.1)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while records() < want.connections && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    // The agent flushes --events about once a second: every record there
    // before the counters are compared with it.
    let written = || {
        std::fs::read_to_string(&events_path)
            .unwrap_or_default()
            .lines()
            .count() as f64
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while written() < want.connections && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let events = std::fs::read_to_string(&events_path).unwrap_or_default();
    assert_eq!(
        records(),
        want.connections,
        "{backend}: records scraped; the agent wrote:\n{events}"
    );
    let traffic_secs = now() - traffic_start;
    eprintln!(
        "{backend}: {} connections in {traffic_secs:.1}s, scraped; {:.1}s since the start",
        want.connections,
        started.elapsed().as_secs_f64()
    );

    // The agent's counters, as Prometheus has them, are what the test made.
    check_counters(&prom, AGENT, &want, &events);

    // Every metric a dashboard names is in the agent's /metrics.
    let exposition = get(&topo, &format!("http://{AGENT}/metrics"), &[]).unwrap();
    let exposed = exposed_names(&exposition);
    let mut used = BTreeSet::new();
    for (_, d) in dashboards {
        for p in panels(d) {
            for t in targets(p) {
                used.extend(metric_names(t["expr"].as_str().unwrap()));
            }
        }
        for v in d["templating"]["list"].as_array().unwrap() {
            if let Some(q) = v["query"]["query"].as_str() {
                used.extend(metric_names(q));
            }
        }
    }
    // A recorded series (level:metric:operations) is one a recording rule
    // makes, from metrics that must be in /metrics in turn.
    let mut recorded = BTreeSet::new();
    for f in rule_files(".rules.yml") {
        for g in yaml(f)["groups"].as_array().unwrap() {
            for r in g["rules"].as_array().unwrap() {
                if let Some(name) = r["record"].as_str() {
                    recorded.insert(name.to_string());
                    if used.contains(name) {
                        used.extend(metric_names(r["expr"].as_str().unwrap()));
                    }
                }
            }
        }
    }
    let unrecorded: Vec<&String> = used
        .iter()
        .filter(|n| n.contains(':') && !recorded.contains(*n))
        .collect();
    assert!(
        unrecorded.is_empty(),
        "the dashboards use {unrecorded:?}, which no recording rule makes"
    );
    used.retain(|n| !n.contains(':'));
    // A metric of a field the records lack (issue 16's idle before use and
    // lifetime, until the analyzer computes them) has no samples (an empty
    // family is not exposed at all): it must have none.
    let has = Has::of(&events);
    let of_absent_field = |n: &str| {
        let family = n.trim_end_matches("_bucket").trim_end_matches("_total");
        let absent = match family {
            "tls_idle_before_use_seconds" | "tls_connections_first_use" => !has.idle_before_use,
            "tls_connection_lifetime_seconds" => !has.lifetime,
            _ => false,
        };
        if absent {
            assert!(
                !exposed.contains(n),
                "{backend}: {n} has samples, the records no field for it"
            );
        }
        absent
    };
    let missing: Vec<&String> = used
        .iter()
        .filter(|n| !exposed.contains(*n) && !of_absent_field(n))
        .collect();
    assert!(missing.is_empty(), "{backend}: metrics the dashboards use but the agent does not expose: {missing:?}\nexposed: {exposed:?}");
    // The agent's own families, or the standard `process_*` ones it
    // exposes itself (metrics/process.rs; in `exposed`, checked above).
    for n in &used {
        assert!(
            n.starts_with("tls_") || n.starts_with("tlsrum_") || n.starts_with("process_"),
            "{n}: not one of the agent's metrics"
        );
    }
    let series = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    eprintln!("{backend}: the dashboards use {} metric names, all in /metrics ({series} series for 3 server names)", used.len());

    // Variables: label_values(METRIC{SELECTOR}, LABEL) as Grafana runs it.
    let instance = grafana_escape(AGENT);
    let window = format!("{}s", traffic_secs.ceil() as u64 + 10);
    for (file, d) in dashboards {
        for v in d["templating"]["list"].as_array().unwrap() {
            let Some(q) = v["query"]["query"].as_str() else {
                continue;
            };
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap();
            let (series, label) = inner.rsplit_once(", ").unwrap();
            let vars = Vars {
                instance: instance.clone(),
                server_name: ".*".into(),
                transport: "tcp".into(),
                interval: window.clone(),
            };
            let series = substitute(series, &vars);
            let data = prom.api(
                &format!("/api/v1/label/{label}/values"),
                &[("match[]", &series)],
            );
            let values: BTreeSet<&str> = data
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            let expect: &[&str] = match label {
                "instance" => &[AGENT],
                "server_name" => &["a.test", "b.test", "c.test", ORIGIN],
                "transport" => &["tcp"],
                other => panic!("{file}: unexpected variable label {other}"),
            };
            assert_eq!(
                values,
                expect.iter().copied().collect(),
                "{file}: ${}: {q}",
                v["name"]
            );
        }
    }

    // Every panel's queries, as Grafana would send them.
    let mut queries = 0;
    for server_name in [".*".to_string(), grafana_escape("a.test")] {
        let vars = Vars {
            instance: instance.clone(),
            server_name: server_name.clone(),
            transport: "tcp".into(),
            interval: window.clone(),
        };
        for (file, d) in dashboards {
            for p in panels(d) {
                for t in targets(p) {
                    let expr = substitute(t["expr"].as_str().unwrap(), &vars);
                    let rows = prom.query(&expr);
                    check_result(file, p, &expr, &rows, server_name == ".*", has);
                    if expr.contains("tlsrum_ringbuf_events_total") {
                        // Kernel events exist on the eBPF backend only.
                        let events = rows[0].1;
                        assert!(
                            if backend == "ebpf" {
                                events > 0.0
                            } else {
                                events == 0.0
                            },
                            "{backend}: ring-buffer events {events}"
                        );
                    }
                    queries += 1;
                }
            }
        }
    }
    // The shipped rules (recording and alerting) evaluate without error on
    // this traffic.
    for g in prom.api("/api/v1/rules", &[])["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_eq!(
                r["health"], "ok",
                "{backend}: rule {}: {}",
                r["name"], r["lastError"]
            );
        }
    }
    // Issue 17: on a server without 0-RTT (c.test) the 0-RTT panels
    // showed "No data"; its early-data series exist at 0 from its first
    // handshake, so they show 0.
    let vars = Vars {
        instance: instance.clone(),
        server_name: grafana_escape("c.test"),
        transport: "tcp".into(),
        interval: window.clone(),
    };
    let mut zero_panels = BTreeSet::new();
    for (_, d) in dashboards {
        for p in panels(d) {
            let title = p["title"].as_str().unwrap();
            for t in targets(p) {
                let expr = substitute(t["expr"].as_str().unwrap(), &vars);
                if !expr.contains("tls_early_data_total") {
                    continue;
                }
                let rows = prom.query(&expr);
                assert!(
                    !rows.is_empty() && rows.iter().all(|(_, v)| *v == 0.0),
                    "{title} for c.test (no 0-RTT): want 0, got {rows:?}\n{expr}"
                );
                zero_panels.insert(title.to_string());
            }
        }
    }
    assert_eq!(
        zero_panels,
        [
            "0-RTT by outcome",
            "0-RTT by server name and outcome",
            "0-RTT offers"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        "the panels of early data"
    );
    eprintln!(
        "{backend}: {queries} panel queries returned data in range (window {window}); {:.1}s",
        started.elapsed().as_secs_f64()
    );
    procs.check_alive();
}

#[test]
fn metric_names_are_parsed_out_of_queries() {
    let names = metric_names(
        r#"histogram_quantile(0.5, sum by (kind, le) (rate(tls_handshake_duration_seconds_bucket{instance=~"$instance", x="tls_not_a_metric"}[$__rate_interval]))) / up{job="a"} or label_values(tlsrum_packets_total, instance)"#,
    );
    assert_eq!(
        names,
        [
            "tls_handshake_duration_seconds_bucket",
            "tlsrum_packets_total",
            "up"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    );
    assert_eq!(grafana_escape("127.0.0.1:9853"), r"127\\.0\\.0\\.1:9853");
}

// ---- deploy/ ----

/// `KEY=a b c` values of the unit's [Service] section.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// Every system call a systemd syscall set (or name) allows, as
/// `systemd-analyze syscall-filter` lists them.
fn expand_syscalls(name: &str, out: &mut BTreeSet<String>) {
    if !name.starts_with('@') {
        out.insert(name.to_string());
        return;
    }
    let text = run(&["systemd-analyze", "syscall-filter", name]);
    for l in text.lines().skip(1) {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        expand_syscalls(l, out);
    }
}

/// A scratch directory, removed on drop (also when the test fails).
/// One network namespace with a veth pair (tu0, tu1) in it; deleted on drop.
fn netns_with_veth(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    run(&[
        "ip", "-n", &ns.name, "link", "add", "tu0", "type", "veth", "peer", "name", "tu1",
    ]);
    for dev in ["tu0", "tu1"] {
        run(&["ip", "-n", &ns.name, "link", "set", dev, "up"]);
    }
    ns
}

/// The agent for one second in `ns`, optionally as an unprivileged user
/// with only `caps`, optionally under strace; (success, stderr).
fn agent_once(
    ns: &str,
    backend: &str,
    caps: Option<&[String]>,
    strace: Option<&Path>,
    events: &Path,
) -> (bool, String) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]);
    if let Some(out) = strace {
        cmd.args(["strace", "-f", "-qq", "-o"]).arg(out);
    }
    if let Some(caps) = caps {
        let list: String = caps
            .iter()
            .map(|c| format!(",+{}", c.trim_start_matches("CAP_").to_lowercase()))
            .collect();
        cmd.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(format!("--inh-caps=-all{list}"))
        .arg(format!("--ambient-caps=-all{list}"))
        .arg(format!("--bounding-set=-all{list}"));
    }
    cmd.arg(env!("CARGO_BIN_EXE_tlsrum"))
        .args([
            "live",
            "--backend",
            backend,
            "--iface",
            "tu0",
            "--metrics",
            "127.0.0.1:9853",
            "--duration",
            "1.5",
            "--events",
        ])
        .arg(events);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A scrape while it runs, so the metrics path is exercised too.
    std::thread::sleep(Duration::from_millis(700));
    let _ = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "http://127.0.0.1:9853/metrics",
        ])
        .status();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A YAML file as JSON (PyYAML).
fn yaml(path: PathBuf) -> Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The rule files of deploy/prometheus/rules (`*.rules.yml`, what
/// prometheus.yml loads) and their unit tests (`*.test.yml`).
fn rule_files(suffix: &str) -> Vec<PathBuf> {
    let dir = repo().join("deploy/prometheus/rules");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

fn promtool(args: &[&str], files: &[PathBuf]) {
    let out = Command::new("promtool")
        .args(args)
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// deploy/prometheus/rules: `promtool check rules` and `promtool test
/// rules`, and the tests cover the rules: every alert both firing and not
/// firing, every recording rule's output in an expression test.
#[test]
fn prometheus_rules_pass_their_unit_tests() {
    let test = "prometheus_rules_pass_their_unit_tests";
    if common::skip_unless(test, &[Need::Tools(&["promtool", "python3"])]) {
        return;
    }
    let started = Instant::now();
    let (rules, tests) = (rule_files(".rules.yml"), rule_files(".test.yml"));
    assert!(!rules.is_empty() && !tests.is_empty());
    promtool(&["check", "rules"], &rules);
    promtool(&["test", "rules"], &tests);

    let (mut alerts, mut records) = (BTreeSet::new(), BTreeSet::new());
    for f in &rules {
        for g in yaml(f.clone())["groups"].as_array().unwrap() {
            for r in g["rules"].as_array().unwrap() {
                if let Some(a) = r["alert"].as_str() {
                    alerts.insert(a.to_string());
                    let notes = &r["annotations"];
                    assert!(
                        notes["summary"].is_string() && notes["description"].is_string(),
                        "{a}: summary and description (the runbook)"
                    );
                } else {
                    records.insert(r["record"].as_str().unwrap().to_string());
                }
            }
        }
    }
    let (mut firing, mut quiet, mut queried) = (BTreeSet::new(), BTreeSet::new(), String::new());
    for f in &tests {
        for t in yaml(f.clone())["tests"].as_array().unwrap() {
            for a in t["alert_rule_test"].as_array().into_iter().flatten() {
                let name = a["alertname"].as_str().unwrap().to_string();
                let none = a["exp_alerts"].as_array().is_none_or(|v| v.is_empty());
                if none { &mut quiet } else { &mut firing }.insert(name);
            }
            for e in t["promql_expr_test"].as_array().into_iter().flatten() {
                queried.push_str(e["expr"].as_str().unwrap());
                queried.push('\n');
            }
        }
    }
    assert_eq!(firing, alerts, "alerts tested firing");
    assert_eq!(quiet, alerts, "alerts tested not firing");
    let words: BTreeSet<&str> = queried
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .collect();
    for r in &records {
        assert!(
            words.contains(r.as_str()),
            "recording rule {r} has no expression test"
        );
    }
    eprintln!(
        "{test}: {} alerts, {} recording rules, {} test files; {:.1}s",
        alerts.len(),
        records.len(),
        tests.len(),
        started.elapsed().as_secs_f64()
    );
}

/// deploy/: the Prometheus examples pass promtool, the Grafana provisioning
/// files say what Grafana needs, and the systemd unit passes
/// `systemd-analyze verify`, while its promises hold without systemd: the
/// agent runs as an unprivileged user with exactly the unit's capabilities
/// (eBPF and libpcap backends), uses only system calls its
/// SystemCallFilter allows and socket families RestrictAddressFamilies
/// allows, and maps no writable-executable memory (MemoryDenyWriteExecute).
#[test]
fn deploy_files_hold_what_they_promise() {
    let test = "deploy_files_hold_what_they_promise";
    let tools = [
        "promtool",
        "python3",
        "systemd-analyze",
        "setpriv",
        "strace",
        "ip",
        "curl",
    ];
    if common::skip_unless(test, &[Need::Root, Need::Tools(&tools), Need::Netns]) {
        return;
    }
    let deploy = repo().join("deploy");

    for f in ["prometheus.yml", "federation.yml", "remote-write.yml"] {
        let out = Command::new("promtool")
            .args(["check", "config"])
            .arg(deploy.join("prometheus").join(f))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool check config {f}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let ds = yaml(deploy.join("grafana/provisioning/datasources/tlsrum-prometheus.yaml"));
    assert_eq!(ds["apiVersion"], 1);
    let d = &ds["datasources"][0];
    assert_eq!(d["type"], "prometheus");
    assert_eq!(d["access"], "proxy");
    assert!(d["url"].as_str().unwrap().starts_with("http"));
    assert_eq!(
        d["jsonData"]["timeInterval"], "15s",
        "the scrape interval of deploy/prometheus/prometheus.yml"
    );
    assert!(
        std::fs::read_to_string(deploy.join("prometheus/prometheus.yml"))
            .unwrap()
            .contains("scrape_interval: 15s")
    );
    // The dashboards preselect the provisioned data source.
    for (file, dash) in load_dashboards() {
        let var = dash["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap()
            .clone();
        assert_eq!(var["current"]["value"], d["uid"], "{file}");
    }
    let prov = yaml(deploy.join("grafana/provisioning/dashboards/tlsrum.yaml"));
    assert_eq!(prov["apiVersion"], 1);
    let p = &prov["providers"][0];
    assert_eq!(p["type"], "file");
    assert!(p["options"]["path"].as_str().unwrap().starts_with('/'));

    // The unit, as systemd reads it (ExecStart pointed at this build).
    let unit_text = std::fs::read_to_string(deploy.join("tlsrum.service")).unwrap();
    let scratch = Scratch::new("deploy");
    let dir = scratch.0.clone();
    let unit_copy = dir.join("tlsrum.service");
    std::fs::write(
        &unit_copy,
        unit_text.replace(
            "ExecStart=tlsrum ",
            &format!("ExecStart={} ", env!("CARGO_BIN_EXE_tlsrum")),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit_copy)
        .output()
        .unwrap();
    let complaints = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify:\n{complaints}"
    );
    let exec = unit_values(&unit_text, "ExecStart").join(" ");
    assert!(
        exec.contains("live --iface") && exec.contains("--metrics"),
        "{exec}"
    );
    assert!(unit_values(&unit_text, "Restart") == ["on-failure"]);
    let caps = unit_values(&unit_text, "AmbientCapabilities");
    let want_caps: BTreeSet<String> = ["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON", "CAP_NET_RAW"]
        .map(String::from)
        .into();
    assert_eq!(caps.iter().cloned().collect::<BTreeSet<_>>(), want_caps);
    assert_eq!(unit_values(&unit_text, "CapabilityBoundingSet"), caps);
    assert!(
        unit_values(&unit_text, "PrivateNetwork").is_empty(),
        "the agent must see the host's interfaces"
    );

    let ns = netns_with_veth("u");
    // Like the unit's StateDirectory: owned by the (dynamic) user.
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let events = state.join("events.ndjson");
    // Unprivileged with the unit's capabilities: both backends start (eBPF
    // only where it works as root at all: it is checked in ebpf_attach).
    let (ok, err) = agent_once(&ns.name, "pcap", Some(&caps), None, &events);
    assert!(ok, "pcap backend with the unit's capabilities:\n{err}");
    let (ok, err) = agent_once(&ns.name, "pcap", Some(&[]), None, &events);
    assert!(
        !ok && err.contains("tlsrum:"),
        "the pcap backend started without capabilities, the check above proves nothing:\n{err}"
    );
    eprintln!("{test}: without capabilities, as expected: {}", err.trim());
    let (root_ok, root_err) = agent_once(&ns.name, "ebpf", None, None, &events);
    let mut backends = vec!["pcap"];
    if root_ok {
        let (ok, err) = agent_once(&ns.name, "ebpf", Some(&caps), None, &events);
        assert!(ok, "eBPF backend with the unit's capabilities:\n{err}");
        backends.push("ebpf");
    } else {
        eprintln!("{test}: the eBPF backend does not start even as root here, capability check skipped: {root_err}");
    }

    // Sandboxing: what the agent does stays inside what the unit allows.
    let mut allowed = BTreeSet::new();
    for f in unit_values(&unit_text, "SystemCallFilter") {
        expand_syscalls(&f, &mut allowed);
    }
    let families: BTreeSet<String> = unit_values(&unit_text, "RestrictAddressFamilies")
        .into_iter()
        .collect();
    let mdwe = unit_values(&unit_text, "MemoryDenyWriteExecute") == ["yes"];
    for backend in backends {
        let trace = dir.join(format!("strace-{backend}.txt"));
        let (ok, err) = agent_once(&ns.name, backend, None, Some(&trace), &events);
        assert!(ok, "{backend} under strace:\n{err}");
        let text = std::fs::read_to_string(&trace).unwrap();
        let mut used = BTreeSet::new();
        for line in text.lines() {
            // "PID name(args) = ret", "PID <... name resumed>", "PID +++ exited"
            let Some(rest) = line.split_once(' ').map(|x| x.1.trim_start()) else {
                continue;
            };
            let Some((name, args)) = rest.split_once('(') else {
                continue;
            };
            if !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                || name.is_empty()
            {
                continue;
            }
            used.insert(name.to_string());
            if name == "socket" {
                let family = args.split(',').next().unwrap().trim();
                assert!(
                    families.contains(family),
                    "{backend}: socket({family}) outside RestrictAddressFamilies {families:?}"
                );
            }
            if mdwe
                && ((name == "mprotect" && args.contains("PROT_EXEC"))
                    || (name == "mmap" && args.contains("PROT_WRITE|PROT_EXEC")))
            {
                panic!("{backend}: {line}: MemoryDenyWriteExecute=yes would refuse this");
            }
        }
        // execve is the tracer starting the agent, before any filter applies... and
        // systemd allows it anyway (@system-service includes @process).
        let outside: Vec<&String> = used.iter().filter(|s| !allowed.contains(*s)).collect();
        assert!(
            outside.is_empty(),
            "{backend}: system calls outside the unit's SystemCallFilter: {outside:?}"
        );
        assert!(used.len() > 20, "{backend}: strace saw only {used:?}");
        eprintln!(
            "{test}: {backend}: {} distinct system calls, all allowed by the unit",
            used.len()
        );
    }
    drop(ns);
    drop(scratch);
}
