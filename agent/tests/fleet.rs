//! Fleets run on Prometheus (issue 17): two hosts, each with its own agent
//! and its own Prometheus, one central Prometheus, and the dashboards'
//! fleet-wide queries there.
//!
//! `fleet_remote_write_and_federation_sum_both_agents`: each "host" is a
//! common::Topology (its server namespace: nginx serving www.test, `tlsrum
//! live` on the veth, Prometheus in agent mode; its client namespace: curl
//! making a known number of handshakes). The hosts' Prometheus run
//! deploy/prometheus/remote-write.yml as shipped, with the host's name, its
//! site, the central URL and 1 s intervals filled in, and remote-write over
//! a veth each to a central namespace, where a Prometheus with
//! `--web.enable-remote-write-receiver` loads deploy/prometheus/rules. A
//! global Prometheus beside it runs deploy/prometheus/federation.yml (filled
//! in: 1 s intervals, the central one as its only site). Checks on the
//! central Prometheus, then the same on the global one:
//! - `up` and the handshake counters of both agents arrive, each under its
//!   own instance and site label, equal to what each agent's /metrics
//!   says and to the handshakes curl made;
//! - the dashboards' $instance variable lists both hosts;
//! - every panel query of both dashboards with the variables set to All
//!   returns, per label set, the sum of the same query for each host alone
//!   (ratios and quantiles, which do not add, must return data), and the
//!   panels reading recording rules return data (the rules ran on the
//!   remote-written series);
//! - every shipped rule is loaded and evaluates without error, no alert is
//!   pending or firing on this healthy traffic, and the agent alerts'
//!   `up{job=~"tlsrum.*"}` holds exactly the two agents, up.
//!
//! The shipped configs are filled in by text replacement, each of which
//! must match, so that they and this test cannot drift apart. Needs root,
//! iproute2, nginx, openssl, curl and prometheus (Debian 12's 2.42 has
//! agent mode and the receiver flag); about 20 s.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{ns_cmd, run, wait_for, Need, Netns, Procs, Topology, SERVER_IP};
use serde_json::Value;

const PORT: u16 = 4443;
const NAME: &str = "www.test"; // one service on both hosts, as behind a load balancer
const AGENT: &str = "127.0.0.1:9853"; // in each host's server namespace
const HOST_PROMETHEUS: &str = "127.0.0.1:9090"; // likewise
const CENTRAL_PORT: u16 = 9090; // in the central namespace
const GLOBAL_PORT: u16 = 9091; // likewise: the federating Prometheus

struct Host {
    /// The instance label its Prometheus gives the agent.
    name: &'static str,
    site: &'static str,
    /// The link to the central namespace: (central's end, the host's end).
    link: (&'static str, &'static str),
    /// curl runs, two handshakes each.
    runs: usize,
    topo: Topology,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// GET from inside namespace `ns`; the body.
fn get(ns: &str, url: &str, params: &[(&str, &str)]) -> Result<String, String> {
    let mut c = ns_cmd(ns, &["curl", "-sS", "--max-time", "10", "--get", url]);
    for (k, v) in params {
        c.arg("--data-urlencode").arg(format!("{k}={v}"));
    }
    let out = c.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

type Rows = BTreeMap<BTreeMap<String, String>, f64>;

/// A Prometheus' HTTP API in the central namespace.
struct Central<'a> {
    ns: &'a str,
    port: u16,
}

impl Central<'_> {
    fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let body = get(self.ns, &url, params).unwrap_or_else(|e| panic!("{path}: {e}"));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["status"], "success", "{path} {params:?}: {body}");
        v["data"].clone()
    }

    /// An instant query at `time` (now if None): value per label set.
    fn query(&self, expr: &str, time: Option<f64>) -> Rows {
        let t = time.map(|t| format!("{t:.3}"));
        let mut params = vec![("query", expr)];
        if let Some(t) = &t {
            params.push(("time", t.as_str()));
        }
        let data = self.api("/api/v1/query", &params);
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
                let v = match s["value"][1].as_str().unwrap() {
                    "NaN" => f64::NAN,
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v.parse().unwrap(),
                };
                (labels, v)
            })
            .collect()
    }

    fn scalar(&self, expr: &str) -> f64 {
        let rows = self.query(expr, None);
        rows.values().next().copied().unwrap_or(f64::NAN)
    }
}

/// `text` with `from` replaced by `to`; `from` must be there (the shipped
/// file and this test agree).
fn fill(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in the shipped config");
    text.replacen(from, to, 1)
}

fn start_central(ns: &str, dir: &Path, procs: &mut Procs) {
    let config = dir.join("central.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  evaluation_interval: 1s\nrule_files: ['{}/*.rules.yml']\n",
            repo().join("deploy/prometheus/rules").display()
        ),
    )
    .unwrap();
    let mut cmd = ns_cmd(ns, &["prometheus"]);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("central-data").display()
        ))
        .arg(format!("--web.listen-address=0.0.0.0:{CENTRAL_PORT}"))
        .arg("--web.enable-remote-write-receiver")
        .arg("--log.level=warn");
    procs.spawn_logged("central prometheus", cmd, &dir.join("central.log"));
}

/// deploy/prometheus/federation.yml, filled in: federating from the
/// central Prometheus (which holds both sites, as a site's would hold its
/// own), 1 s intervals, the rules by absolute path.
fn start_global(ns: &str, dir: &Path, procs: &mut Procs) {
    let shipped = std::fs::read_to_string(repo().join("deploy/prometheus/federation.yml")).unwrap();
    let mut config = fill(&shipped, "scrape_interval: 30s", "scrape_interval: 1s");
    config = fill(
        &config,
        "evaluation_interval: 30s",
        "evaluation_interval: 1s",
    );
    config = fill(
        &config,
        "- rules/*.rules.yml",
        &format!(
            "- {}/*.rules.yml",
            repo().join("deploy/prometheus/rules").display()
        ),
    );
    config = fill(
        &config,
        "- prometheus.eu-1.example.internal:9090\n          - prometheus.us-2.example.internal:9090",
        &format!("- 127.0.0.1:{CENTRAL_PORT}"),
    );
    let path = dir.join("federation.yml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = ns_cmd(ns, &["prometheus"]);
    cmd.arg(format!("--config.file={}", path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("global-data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{GLOBAL_PORT}"))
        .arg("--log.level=warn");
    procs.spawn_logged("global prometheus", cmd, &dir.join("global.log"));
}

/// Joins the host's server namespace to the central one.
fn link(central: &str, h: &Host, i: usize) {
    let pid = std::process::id();
    let (c_dev, h_dev) = (format!("rfc{i}{pid}"), format!("rfh{i}{pid}"));
    run(&[
        "ip",
        "link",
        "add",
        &c_dev,
        "netns",
        central,
        "type",
        "veth",
        "peer",
        "name",
        &h_dev,
        "netns",
        &h.topo.server_ns,
    ]);
    for (ns, dev, ip) in [
        (central, &c_dev, h.link.0),
        (h.topo.server_ns.as_str(), &h_dev, h.link.1),
    ] {
        common::netns::address_up(ns, dev, &format!("{ip}/24"));
    }
}

fn start_host(h: &Host, procs: &mut Procs) {
    let t = &h.topo;
    let (key, cert) = t.self_signed(NAME);
    let http = format!(
        r#"  access_log off;
  server {{
    listen {SERVER_IP}:{PORT} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_session_cache shared:S:1m;
    location / {{ return 200 "{name}\n"; }}
  }}
"#,
        cert = cert.display(),
        key = key.display(),
        name = h.name,
    );
    common::servers::nginx(
        &t.server_ns,
        &t.path("nginx"),
        &http,
        &format!("nginx {}", h.name),
        procs,
    );

    let mut cmd = ns_cmd(&t.server_ns, &[env!("CARGO_BIN_EXE_tlsrum")]);
    cmd.args([
        "live",
        "--backend",
        "pcap",
        "--iface",
        &t.veth,
        "--metrics",
        AGENT,
        "--port",
        &PORT.to_string(),
        "--idle-timeout",
        "5",
    ]);
    procs.spawn_logged(&format!("tlsrum {}", h.name), cmd, &t.path("tlsrum.log"));

    // deploy/prometheus/remote-write.yml, filled in for this host.
    let shipped =
        std::fs::read_to_string(repo().join("deploy/prometheus/remote-write.yml")).unwrap();
    let mut config = fill(&shipped, "scrape_interval: 15s", "scrape_interval: 1s");
    config = fill(&config, "site: eu-1", &format!("site: {}", h.site));
    config = fill(
        &config,
        "instance: web-1.example.internal",
        &format!("instance: {}", h.name),
    );
    let url = format!("http://{}:{CENTRAL_PORT}/api/v1/write", h.link.0);
    config = fill(
        &config,
        "url: https://metrics.example.internal/api/v1/write",
        // Batches within a second rather than 5 s: a short test.
        &format!("url: {url}\n    queue_config: {{batch_send_deadline: 1s}}"),
    );
    let path = t.path("remote-write.yml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = ns_cmd(&t.server_ns, &["prometheus", "--enable-feature=agent"]);
    cmd.arg(format!("--config.file={}", path.display()))
        .arg(format!(
            "--storage.agent.path={}",
            t.path("prometheus-agent").display()
        ))
        .arg(format!("--web.listen-address={HOST_PROMETHEUS}"))
        .arg("--log.level=warn");
    procs.spawn_logged(
        &format!("prometheus {}", h.name),
        cmd,
        &t.path("prometheus.log"),
    );
}

/// `sum(tls_handshakes_total)` in the agent's own /metrics.
fn agent_handshakes(h: &Host) -> f64 {
    let text = get(&h.topo.server_ns, &format!("http://{AGENT}/metrics"), &[]).unwrap();
    text.lines()
        .filter(|l| l.starts_with("tls_handshakes_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

fn load_dashboards() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for f in ["tlsrum-resumption.json", "tlsrum-handshake-cost.json"] {
        let text = std::fs::read_to_string(repo().join("dashboards").join(f)).unwrap();
        out.push((f.to_string(), serde_json::from_str(&text).unwrap()));
    }
    out
}

/// Every panel's (title, expr), rows included.
fn panel_queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut visit = |p: &Value| {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                p["title"].as_str().unwrap().to_string(),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    };
    for p in d["panels"].as_array().unwrap() {
        visit(p);
        for inner in p["panels"].as_array().into_iter().flatten() {
            visit(inner);
        }
    }
    out
}

/// A query with Grafana's variables set: $instance to `instance`, the
/// others to All (`.*`), the intervals to `window`.
fn substitute(expr: &str, instance: &str, window: &str) -> String {
    let mut e = expr.to_string();
    for (name, value) in [
        ("__rate_interval", window),
        ("__interval", window),
        ("__range", window),
        ("instance", instance),
        ("server_name", ".*"),
        ("transport", ".*"),
    ] {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!e.contains('$'), "unsubstituted variable in {e}");
    e
}

/// Round 0: one curl run on each host; round 1: the rest of its runs.
/// Each run fetches twice over two connections (Connection: close): two
/// handshakes.
fn make_traffic(hosts: &[Host], round: usize) {
    for h in hosts {
        let runs = if round == 0 { 1 } else { h.runs - 1 };
        for _ in 0..runs {
            let url = format!("https://{NAME}:{PORT}/");
            let out = ns_cmd(
                &h.topo.client_ns,
                &[
                    "curl",
                    "-sS",
                    "-k",
                    "--max-time",
                    "10",
                    "--resolve",
                    &format!("{NAME}:{PORT}:{SERVER_IP}"),
                    "-H",
                    "Connection: close",
                    &url,
                    &url,
                ],
            )
            .output()
            .unwrap();
            let body = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                body.matches(h.name).count(),
                2,
                "{}: curl: {body}{}",
                h.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Equal but for the order of float additions (Prometheus sums series in
/// no fixed order).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn same(a: &Rows, b: &Rows) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| close(*v, *w)))
}

#[test]
fn fleet_remote_write_and_federation_sum_both_agents() {
    let test = "fleet_remote_write_and_federation_sum_both_agents";
    let tools = ["ip", "ss", "nginx", "openssl", "curl", "prometheus"];
    if common::skip_unless(test, &[Need::Root, Need::Tools(&tools), Need::Netns]) {
        return;
    }
    let started = Instant::now();
    // Drop order: processes first, then the namespaces.
    let central = Netns::new("rc");
    let hosts = [
        Host {
            name: "host-a",
            site: "eu-1",
            link: ("198.51.100.1", "198.51.100.2"),
            runs: 3,
            topo: Topology::new("ra"),
        },
        Host {
            name: "host-b",
            site: "us-2",
            link: ("203.0.113.1", "203.0.113.2"),
            runs: 5,
            topo: Topology::new("rb"),
        },
    ];
    let mut procs = Procs::default();
    start_central(&central.name, &hosts[0].topo.dir, &mut procs);
    start_global(&central.name, &hosts[0].topo.dir, &mut procs);
    for (i, h) in hosts.iter().enumerate() {
        link(&central.name, h, i);
        start_host(h, &mut procs);
    }
    let prom = Central {
        ns: &central.name,
        port: CENTRAL_PORT,
    };
    for port in [CENTRAL_PORT, GLOBAL_PORT] {
        wait_for("the central Prometheus", Duration::from_secs(30), || {
            get(
                &central.name,
                &format!("http://127.0.0.1:{port}/-/ready"),
                &[],
            )
            .is_ok()
        });
    }
    for h in &hosts {
        h.topo.wait_listening(PORT, &mut procs);
        wait_for("the agent's /metrics", Duration::from_secs(20), || {
            get(&h.topo.server_ns, &format!("http://{AGENT}/metrics"), &[]).is_ok()
        });
    }
    // Both agents scraped and their samples at the centre before traffic,
    // so that rate() sees every series move.
    wait_for(
        "both hosts' up at the centre",
        Duration::from_secs(30),
        || prom.scalar(r#"count(up{job="tlsrum"} == 1)"#) == 2.0,
    );
    procs.check_alive();

    // Two rounds: a counter's series appears at its first increment, and
    // rate() needs it to move again after a scrape has seen it.
    let traffic_start = now();
    make_traffic(&hosts, 0);
    let first = 2.0 * hosts.len() as f64;
    wait_for(
        "the first round at the centre",
        Duration::from_secs(30),
        || prom.scalar("sum(tls_handshakes_total)") == first,
    );
    make_traffic(&hosts, 1);
    let dashboards = load_dashboards();
    check_store(
        &prom,
        "remote-write receiver",
        &hosts,
        &dashboards,
        traffic_start,
    );
    procs.check_alive();
    // Federation (deploy/prometheus/federation.yml): the global Prometheus
    // pulls from the central one's /federate as it would from a site's.
    let global = Central {
        ns: &central.name,
        port: GLOBAL_PORT,
    };
    check_store(&global, "federation", &hosts, &dashboards, traffic_start);
    procs.check_alive();
    eprintln!("{test}: {:.1}s", started.elapsed().as_secs_f64());
}

/// The checks on one Prometheus holding both hosts' series (`what`: the
/// central one, or the global one federating from it).
fn check_store(
    prom: &Central,
    what: &str,
    hosts: &[Host],
    dashboards: &[(String, Value)],
    traffic_start: f64,
) {
    let want: f64 = hosts.iter().map(|h| 2.0 * h.runs as f64).sum();
    // The recording rules evaluate what has arrived when they run: wait
    // for their output from both hosts' completed handshakes too.
    wait_for(
        &format!("every handshake at the {what}, and recorded"),
        Duration::from_secs(30),
        || {
            prom.scalar("sum(tls_handshakes_total)") == want
                && prom.scalar(
                    r#"count(count by (instance) (instance_server_name:tls_handshakes:rate5m{kind=~"full|resumed"} > 0))"#,
                ) == 2.0
        },
    );
    // The queries below all at `at`, once every sample up to then has
    // arrived from both hosts (each sends in order, within its 1 s batch
    // deadline), so that they see the same data.
    let at = now();
    std::thread::sleep(Duration::from_secs(2));
    eprintln!(
        "{what}: {want} handshakes {:.1}s after the traffic began",
        now() - traffic_start,
    );

    // Each agent's share, under its own instance and site label, is what
    // it counted itself and what curl made.
    let shares = prom.query(
        "sum by (job, instance, site) (tls_handshakes_total)",
        Some(at),
    );
    assert_eq!(shares.len(), hosts.len(), "{shares:?}");
    for h in hosts {
        let key: BTreeMap<String, String> =
            [("job", "tlsrum"), ("instance", h.name), ("site", h.site)]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let share = shares.get(&key).copied();
        assert_eq!(share, Some(2.0 * h.runs as f64), "{}: {shares:?}", h.name);
        assert_eq!(share, Some(agent_handshakes(h)), "{}: its /metrics", h.name);
    }

    // The agent alerts' `up{job=~"tlsrum.*"}`: the two agents, up (the
    // federating job's own `up` is not among them).
    let ups = prom.query(r#"up{job=~"tlsrum.*"}"#, Some(at));
    assert_eq!(
        ups.iter()
            .map(|(l, v)| (l["instance"].clone(), *v))
            .collect::<BTreeMap<_, _>>(),
        hosts.iter().map(|h| (h.name.to_string(), 1.0)).collect(),
        "{what}: {ups:?}"
    );
    // Every rule evaluates without error on these series, and healthy
    // traffic raises no alert.
    let mut rules = 0;
    for g in prom.api("/api/v1/rules", &[])["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_eq!(
                r["health"], "ok",
                "{what}: {}: {}",
                r["name"], r["lastError"]
            );
            if r["type"] == "alerting" {
                assert_eq!(
                    r["state"], "inactive",
                    "{what}: {}: {}",
                    r["name"], r["alerts"]
                );
            }
            rules += 1;
        }
    }
    let shipped: usize = ["recording", "alerts"]
        .iter()
        .map(|f| {
            let path = repo().join(format!("deploy/prometheus/rules/{f}.rules.yml"));
            let text = std::fs::read_to_string(path).unwrap();
            text.matches("- record:").count() + text.matches("- alert:").count()
        })
        .sum();
    assert_eq!(rules, shipped, "{what}: rules loaded");

    // The dashboards' Agent list.
    let instances: BTreeSet<String> = prom
        .api(
            "/api/v1/label/instance/values",
            &[("match[]", "tlsrum_packets_total")],
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        instances,
        hosts.iter().map(|h| h.name.to_string()).collect(),
        "$instance"
    );

    // Every panel: All = host-a + host-b.
    let window = format!("{}s", (now() - traffic_start).ceil() as u64 + 10);
    let (mut summed, mut other, mut recorded, mut retries) = (0, 0, 0, 0);
    for (file, d) in dashboards {
        for (title, expr) in panel_queries(d) {
            let fleet_q = substitute(&expr, ".*", &window);
            let fleet = prom.query(&fleet_q, Some(at));
            let ctx = |rows: &Rows| format!("{file}: \"{title}\": {fleet_q}\n=> {rows:?}");
            if expr.contains(':') {
                // A recording rule's output: the rules ran here.
                assert!(!fleet.is_empty(), "no data: {}", ctx(&fleet));
                recorded += 1;
            }
            if expr.contains('/') || expr.contains("histogram_quantile") {
                other += 1;
                continue;
            }
            // All three queries must see the same data: if a late batch
            // (or federation scrape) added samples up to `at` meanwhile,
            // the fleet query changes; then ask again.
            let mut tries = 0;
            let (fleet, parts) = loop {
                let fleet = prom.query(&fleet_q, Some(at));
                let mut parts = Rows::new();
                for h in hosts {
                    let rows = prom.query(&substitute(&expr, h.name, &window), Some(at));
                    for (l, v) in rows {
                        *parts.entry(l).or_default() += v;
                    }
                }
                if same(&prom.query(&fleet_q, Some(at)), &fleet) || tries == 5 {
                    break (fleet, parts);
                }
                tries += 1;
                retries += 1;
                std::thread::sleep(Duration::from_secs(1));
            };
            let keys: BTreeSet<_> = fleet.keys().chain(parts.keys()).collect();
            for k in keys {
                let (f, p) = (
                    fleet.get(k).copied().unwrap_or(0.0),
                    parts.get(k).copied().unwrap_or(0.0),
                );
                assert!(
                    close(f, p),
                    "{k:?}: fleet {f} != host-a + host-b {p}: {}\nparts {parts:?}",
                    ctx(&fleet)
                );
            }
            if !fleet.is_empty() {
                summed += 1;
            }
        }
    }
    assert!(
        summed >= 10,
        "only {summed} summable panel queries had data"
    );
    assert!(
        recorded >= 3,
        "only {recorded} panel queries read recording rules"
    );
    // The fleet-wide recording rules: both hosts' www.test in one series.
    let completed = prom.query(
        &format!(r#"server_name_role:tls_handshakes_completed:rate5m{{server_name="{NAME}"}}"#),
        Some(at),
    );
    assert!(
        completed.len() == 1 && completed.values().all(|v| *v > 0.0),
        "{completed:?}"
    );
    eprintln!(
        "{what}: {summed} panel queries with data equal the sum of both hosts', {other} ratios or quantiles, {recorded} from recording rules (window {window}; {retries} asked again)"
    );
}
