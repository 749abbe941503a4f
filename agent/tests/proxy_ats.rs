//! tlsrum on an Apache Traffic Server host against ATS's own statistics
//! (issue 16). scripts/experiment/atslab.py builds
//! user ns (curl) -> proxy ns (traffic_server 9.2, `tlsrum live` eBPF on
//! both veths, tcpdump) -> router ns -> tools/delayline at 100 ms -> origin
//! ns (nginx, no session cache, no tickets). ATS terminates the client's
//! TLS and opens TLS 1.2 to the origin (`partial_blind_route` in sni.yaml),
//! so every request is one inbound and one full outbound handshake.
//!
//! Ground truth is the programs' own: ATS's counters read with
//! `traffic_ctl metric match` before and after the requests, nginx's access
//! log (ATS's source port, `$ssl_session_reused`), curl's `-w` timings.
//! Asserted, pre-warming off:
//!
//! - inbound handshakes (tlsrum live, server port 4443) = ATS's
//!   `total_success_handshake_count_in` delta = the requests; outbound
//!   (port 4401) = `total_success_handshake_count_out` delta = nginx's lines,
//!   each outbound record full with 2 round trips where nginx logged a new
//!   session, matched by ATS's source port;
//! - tlsrum's mean inbound handshake time within 3 ms of ATS's
//!   `total_handshake_time` / `total_success_handshake_count_in` (ATS adds
//!   the inbound handshakes only: 9.2 records it in the server handshake);
//! - each client's ttfb (curl `time_starttransfer - time_connect`) within
//!   5 ms + 2 % of tlsrum's inbound ttfb for its port (the client-proxy link
//!   has no delay; tlsrum's clock starts at the ClientHello, curl's at the
//!   TCP handshake's end);
//! - the talk's figure without pre-warming: mean ttfb at least 3.9 RTT (TCP,
//!   2 RTT of TLS 1.2, the request), "> 400 ms" at 100 ms;
//! - roles from `replay --local <proxy's addresses>` of the proxy's
//!   capture: inbound for the client side, outbound for the origin side.
//!   Live the same from the host's interfaces, and every outbound
//!   connection's `idle_before_use` within 10 ms of its handshake (no pool:
//!   ATS's pool hit count is 0 with pre-warming off).
//!
//! Pre-warming on is not run: Debian 12's traffic_server 9.2.9 aborts when a
//! pre-warm pool is configured (`Fatal: P_UnixEThread.h:209: failed
//! assertion this == this_ethread()` in
//! `PreWarmManager::reconfigure_prewarming_on_threads`, at start-up and on
//! `traffic_ctl config reload` alike: 9.2.1 added the check of
//! apache/trafficserver#9691 without the PreWarmManager fix of #9692);
//! atslab.py records that crash for `make experiment-ats`.
//!
//! Needs root, /dev/net/tun, BPF, traffic_server, nginx, curl, tcpdump:
//! skipped with the reason locally, a failure under CI=true.

mod common;

use common::Need;
use serde_json::Value;

const INBOUND_PORT: &str = ":4443";
const OUTBOUND_PORT: &str = ":4401";

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn port(endpoint: &Value) -> u64 {
    endpoint
        .as_str()
        .and_then(|s| s.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

fn delta(stats: &Value, name: &str) -> f64 {
    let key = format!("proxy.process.ssl.{name}");
    f(&stats["after"][&key]) - f(&stats["before"][&key])
}

#[test]
fn ats_per_role_figures_agree_with_traffic_server() {
    if common::skip_unless(
        "ats_per_role_figures_agree_with_traffic_server",
        &[
            Need::Root,
            Need::Tun,
            Need::Netns,
            Need::Bpf,
            Need::Tools(&[
                "ip",
                "tcpdump",
                "nginx",
                "curl",
                "openssl",
                "python3",
                "ethtool",
                "traffic_server",
                "traffic_manager",
                "traffic_ctl",
            ]),
        ],
    ) {
        return;
    }
    let n = 12;
    let (doc, work) = common::delayline::run_lab_args(
        "atslab.py",
        "ats",
        &["--rtt", "100", "--modes", "off", "--n", &n.to_string()],
    )
    .unwrap_or_else(|work| panic!("atslab.py failed (lab error); logs in {}", work.display()));
    let mode = &doc["modes"][0];
    let rtt = f(&mode["rtt"]);
    let live = mode["live"].as_array().unwrap();
    let side = |recs: &[Value], p: &str| -> Vec<Value> {
        recs.iter()
            .filter(|r| r["server"].as_str().is_some_and(|s| s.ends_with(p)))
            .cloned()
            .collect()
    };
    let (inbound, outbound) = (side(live, INBOUND_PORT), side(live, OUTBOUND_PORT));
    let stats = &mode["ats"];
    let mut failures = Vec::new();

    // Handshake counts: tlsrum, ATS, nginx, curl.
    let ats_in = delta(stats, "total_success_handshake_count_in");
    let ats_out = delta(stats, "total_success_handshake_count_out");
    let nginx = mode["nginx"].as_array().unwrap();
    for (what, got, want) in [
        (
            "inbound records vs ATS count_in",
            inbound.len() as f64,
            ats_in,
        ),
        (
            "outbound records vs ATS count_out",
            outbound.len() as f64,
            ats_out,
        ),
        (
            "outbound records vs nginx lines",
            outbound.len() as f64,
            nginx.len() as f64,
        ),
        (
            "inbound records vs curl requests",
            inbound.len() as f64,
            n as f64,
        ),
    ] {
        if got != want {
            failures.push(format!("{what}: tlsrum {got}, truth {want}"));
        }
    }
    // Outbound: full TLS 1.2, 2 round trips, where nginx logged a new session.
    for r in &outbound {
        let p = port(&r["client"]);
        let Some(line) = nginx
            .iter()
            .find(|l| l["port"].as_str() == Some(&p.to_string()))
        else {
            failures.push(format!("outbound port {p}: not in nginx's log"));
            continue;
        };
        let full = line["reused"].as_str() == Some(".");
        if full != (r["handshake"].as_str() == Some("full")) || r["timing"]["round_trips"] != 2 {
            failures.push(format!(
                "outbound port {p}: nginx reused={} but tlsrum {} with {} round trips",
                line["reused"], r["handshake"], r["timing"]["round_trips"]
            ));
        }
    }

    // Inbound handshake time: ATS's mean against tlsrum's.
    let ats_mean = delta(stats, "total_handshake_time") / ats_in / 1e6;
    let ours: Vec<f64> = inbound
        .iter()
        .map(|r| f(&r["timing"]["handshake"]))
        .collect();
    let our_mean = ours.iter().sum::<f64>() / ours.len().max(1) as f64;
    eprintln!("inbound handshake mean: ATS {ats_mean:.2} ms, tlsrum {our_mean:.2} ms");
    if (ats_mean - our_mean).abs() > 3.0 || !ats_mean.is_finite() {
        failures.push(format!(
            "inbound handshake mean: ATS {ats_mean:.2} ms, tlsrum {our_mean:.2} ms (bound 3 ms)"
        ));
    }

    // Clients' ttfb: curl against tlsrum's inbound record on its port.
    let mut ttfbs = Vec::new();
    for c in mode["curl"].as_array().unwrap() {
        let p = c["local_port"].as_u64().unwrap();
        let curl_ttfb = (f(&c["time_starttransfer"]) - f(&c["time_connect"])) * 1e3;
        ttfbs.push(curl_ttfb);
        let Some(r) = inbound.iter().find(|r| port(&r["client"]) == p) else {
            failures.push(format!("client port {p}: no inbound record"));
            continue;
        };
        let ours = f(&r["timing"]["ttfb"]);
        if (curl_ttfb - ours).abs() > 5.0 + 0.02 * curl_ttfb {
            failures.push(format!(
                "client port {p}: curl ttfb {curl_ttfb:.1} ms, tlsrum {ours:.1} ms"
            ));
        }
    }
    let mean_ttfb = ttfbs.iter().sum::<f64>() / ttfbs.len().max(1) as f64;
    eprintln!("clients' mean ttfb without pre-warming: {mean_ttfb:.1} ms at {rtt} ms RTT");
    if mean_ttfb < 3.9 * rtt {
        failures.push(format!(
            "mean ttfb {mean_ttfb:.1} ms < 3.9 RTT without pre-warming"
        ));
    }

    // Roles: replay from --local, live from the host's interfaces.
    let replay = mode["replay"].as_array().unwrap();
    for (recs, p, want) in [
        (side(replay, INBOUND_PORT), INBOUND_PORT, "inbound"),
        (side(replay, OUTBOUND_PORT), OUTBOUND_PORT, "outbound"),
    ] {
        if recs.len() != n {
            failures.push(format!("replay: {} records on {p}, want {n}", recs.len()));
        }
        for r in &recs {
            if r["role"].as_str() != Some(want) {
                failures.push(format!(
                    "replay {}: role {}, want {want}",
                    r["client"], r["role"]
                ));
            }
        }
    }
    for (recs, want) in [(&inbound, "inbound"), (&outbound, "outbound")] {
        for r in recs.iter() {
            if r["role"].as_str() != Some(want) {
                failures.push(format!(
                    "live {}: role {}, want {want}",
                    r["client"], r["role"]
                ));
            }
        }
    }
    // Pool hits: none without pre-warming, every outbound connection opened
    // on demand (used within 10 ms of its handshake).
    let idle: Vec<f64> = outbound
        .iter()
        .filter_map(|r| r["timing"]["idle_before_use"].as_f64())
        .collect();
    if idle.len() != outbound.len() || idle.iter().any(|&ms| ms > 10.0) {
        failures.push(format!(
            "outbound idle_before_use without a pool: {idle:?} (want all <= 10 ms)"
        ));
    }

    assert!(
        failures.is_empty(),
        "{} failure(s) (logs in {}):\n{}",
        failures.len(),
        work.display(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(work);
}
