//! tlsrum's figures against a wide-area link: every handshake kind at 20,
//! 100 and 260 ms RTT through tools/delayline, nginx in one network
//! namespace, clients in another, captures at both ends replayed by tlsrum
//! and `tlsrum live --backend pcap` at the server. The orchestration is
//! scripts/experiment/accuracy.py (shared with `make experiment`); this test
//! runs it and asserts:
//!
//! - `tcp_rtt` within 1 ms of the configured RTT, at every vantage point;
//! - `round_trips` exactly what nginx's log says the connection was
//!   (TLS 1.2 full 2, resumed by session ID or ticket 1, TLS 1.3 full and
//!   PSK 1, accepted 0-RTT 0);
//! - `handshake` and `ttfb` within 2 ms or 2 % of the client's own clock
//!   (curl -w time_appconnect/time_starttransfer minus time_connect, or the
//!   same taken by the Python and libssl clients), matched by local port;
//!   at the server, ttfb plus the RTT (phases start when the ClientHello
//!   arrives; the response still has to travel back). The client's spans
//!   may be longer than tlsrum's by what the client capture shows of the
//!   client's own time (compare.py `client_slack`): its clock starts when
//!   connect() returns, between its ACK and its ClientHello
//!   (`client_hello_delay_ms`: 0.5-1 ms, 1.6 ms from a stalled Python
//!   client on CI); it reads its handshake clock before it sends its
//!   request (the gap before the request, `client_request_gap_ms`:
//!   0.15-0.7 ms, 3.6 and 5.4 ms from stalled clients whose handshake
//!   clocks were 3.3 and 5.1 ms long); and it reads its ttfb clock before it closes (idle
//!   beyond 1 ms after the server's last data, `client_idle_ms`: a stall,
//!   4.3 ms once while a build ran, its ttfb 4.4 ms long). The clients
//!   run at SCHED_FIFO 40 (wanlab.py);
//! - `avoidable` = RTT for TLS 1.2 full handshakes that offered a session
//!   (nginx `ssl_session_cache none`), 0 for TLS 1.3 ones without early data,
//!   and `tls_avoidable_handshake_seconds_total` from `tlsrum live` adds up
//!   to the records';
//! - live and replay at the server agree.
//!
//! The wall-clock bounds (tcp_rtt, avoidable, the client's clock) grow by
//! what the line measurably did to that connection: twice the largest
//! deviation of one of its packets' one-way delay, between the captures at
//! the line's two ends, from the configured one (scripts/experiment/
//! wanlab.py `line_deviation`). A connection the line's own log shows late
//! by more than 0.5 ms is not judged on them at all; at every RTT, every
//! scenario must have a connection that was (coverage: on CI's busy
//! machine 9 of 75 connections were late after two reruns, none of them
//! the last of its scenario; accuracy.py reruns an RTT up to four times
//! while a scenario has none, and keeps the best attempt).
//!
//! Needs root, /dev/net/tun, nginx, curl, openssl, tcpdump, python3: without
//! them the test is skipped with a message, except under CI=true where a
//! missing capability is a failure.

mod common;

use common::Need;
use serde_json::Value;

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn tolerance(ms: f64) -> f64 {
    (0.02 * ms.abs()).max(2.0)
}

/// A client's own work between reading its ttfb clock and closing; more
/// is a stall (compare.py CLIENT_WORK_MS).
const CLIENT_WORK_MS: f64 = 1.0;

#[test]
fn wan_accuracy_at_20_100_260_ms() {
    // The namespaces are accuracy.py's (scripts/experiment/).
    if common::skip_unless(
        "wan_accuracy_at_20_100_260_ms",
        &[
            Need::Root,
            Need::Tun,
            Need::Netns,
            Need::Tools(&["ip", "tcpdump", "nginx", "curl", "openssl", "python3"]),
        ],
    ) {
        return;
    }
    let (doc, work): (Value, _) = common::delayline::run_lab("accuracy.py", "wan");

    let mut failures = Vec::new();
    let mut late_lines: Vec<String> = Vec::new();
    let mut widest_allow = 0.0f64;
    let mut connections = 0usize;
    let mut checked = 0;
    let mut kinds_seen = std::collections::BTreeSet::new();
    // (rtt, scenario) -> whether a connection of it was judged on the
    // wall-clock bounds.
    let mut coverage = std::collections::BTreeMap::new();
    for lab in doc["labs"].as_array().unwrap() {
        let rtt = f(&lab["rtt"]).unwrap();
        let mut avoidable_live_sum = 0.0;
        let mut avoidable_offers = 0;
        for c in lab["connections"].as_array().unwrap() {
            let who = format!(
                "rtt {rtt} {} #{} port {}",
                c["scenario"].as_str().unwrap(),
                c["index"],
                c["local_port"]
            );
            // A delay line late on a connection is a disturbed trial of
            // the lab (accuracy.py reran the RTT and kept its best
            // attempt): the wire no longer shows the configured RTT, so the
            // figures measured against wall-clock expectations (tcp_rtt vs
            // the configured RTT, the client's clock, avoidable = RTT) are
            // not judged; kinds, round trips, live = replay and the
            // counters still are. Reported, and each scenario must have a
            // judged connection at each RTT (coverage, below).
            let late = f(&c["line_late_max_us"]).unwrap_or(0.0);
            let disturbed = late > 500.0;
            connections += 1;
            if disturbed {
                late_lines.push(format!(
                    "{who}: the delay line was {late:.0} µs late on this connection (bound 500 µs)"
                ));
            }
            // What the line measurably did to this connection's packets
            // besides: the largest deviation of a packet's one-way delay
            // between the captures at its two ends (a stall before the
            // line read a packet, which its own log cannot show: a SYN-ACK
            // 1.6 ms slow, tcp_rtt 21.4 at 20 ms, line log on time). A
            // round trip is two such trips: the wall-clock bounds below
            // grow by twice it, and only by it.
            let line_allow = 2.0 * f(&c["line_delay_off_us"]).unwrap_or(0.0) / 1e3;
            widest_allow = f64::max(widest_allow, line_allow);
            let Some(want_rt) = c["expected_round_trips"].as_u64() else {
                failures.push(format!("{who}: nginx logged no kind ({})", c["nginx"]));
                continue;
            };
            kinds_seen.insert(c["expected_kind"].as_str().unwrap().to_string());
            // The client's spans and how much longer than tlsrum's they
            // may be (module doc; compare.py client_slack).
            let client_clock = c["time_connect"].as_f64().and_then(|tc| {
                let Some(chd) = f(&c["client_hello_delay_ms"]) else {
                    failures.push(format!(
                        "{who}: no ACK and ClientHello in the client capture"
                    ));
                    return None;
                };
                let request = f(&c["client_request_gap_ms"]).unwrap_or(0.0);
                let idle = (f(&c["client_idle_ms"]).unwrap_or(0.0) - CLIENT_WORK_MS).max(0.0);
                let hs = (f(&c["time_appconnect"]).unwrap() - tc) * 1e3;
                let ttfb = (f(&c["time_starttransfer"]).unwrap() - tc) * 1e3;
                Some(((hs, chd + request), (ttfb, chd + idle)))
            });
            let judged = !disturbed && !c["warmup"].as_bool().unwrap_or(false);
            *coverage
                .entry((rtt.to_string(), c["scenario"].as_str().unwrap().to_string()))
                .or_insert(false) |= judged;
            for vantage in ["client", "server", "live"] {
                let rec = &c[format!("tlsrum_{vantage}")];
                let who = format!("{who} at {vantage}");
                if rec.is_null() {
                    failures.push(format!("{who}: no tlsrum record"));
                    continue;
                }
                checked += 1;
                let t = &rec["timing"];
                if t["round_trips"].as_u64() != Some(want_rt) {
                    failures.push(format!(
                        "{who}: round_trips {} but {} is {want_rt}",
                        t["round_trips"], c["expected_kind"]
                    ));
                }
                match f(&t["tcp_rtt"]) {
                    Some(r) if disturbed || (r - rtt).abs() <= 1.0 + line_allow => {}
                    other => failures.push(format!(
                        "{who}: tcp_rtt {other:?}, configured {rtt} (bound 1 ms + {line_allow:.3} the line's measured deviation)"
                    )),
                }
                if let (Some((chs, cttfb)), false) = (
                    client_clock,
                    c["warmup"].as_bool().unwrap_or(false) || disturbed,
                ) {
                    let shift = if vantage == "client" { 0.0 } else { rtt };
                    for (name, mine, (theirs, slack)) in [
                        ("handshake", f(&t["handshake"]), chs),
                        ("ttfb", f(&t["ttfb"]).map(|v| v + shift), cttfb),
                    ] {
                        let tol = tolerance(theirs) + line_allow;
                        match mine {
                            Some(m) if theirs - slack - tol <= m && m <= theirs + tol => {}
                            other => failures.push(format!(
                                "{who}: {name} {other:?} ms (+{shift}), client's clock {theirs:.3} \
                                 (may be up to {slack:.3} longer)"
                            )),
                        }
                    }
                }
                // Avoidable: full handshakes whose client offered a session.
                let offered = rec["offered"].as_array().is_some_and(|o| !o.is_empty());
                let full = rec["handshake"] == "full";
                let avoidable = f(&t["avoidable"]);
                match (full && offered, rec["version"].as_str()) {
                    (true, Some("TLS1.2")) => match avoidable {
                        Some(a) if disturbed || (a - rtt).abs() <= 1.0 + line_allow => {}
                        other => failures.push(format!(
                            "{who}: avoidable {other:?}, expected one RTT ({rtt})"
                        )),
                    },
                    (true, Some("TLS1.3"))
                        if rec["early_data"] == "none" && avoidable != Some(0.0) =>
                    {
                        failures.push(format!("{who}: avoidable {avoidable:?}, expected 0 (TLS 1.3 without early data)"));
                    }
                    (false, _) if avoidable.is_some() => {
                        failures.push(format!(
                            "{who}: avoidable {avoidable:?} on a {} handshake offering {}",
                            rec["handshake"], rec["offered"]
                        ));
                    }
                    _ => {}
                }
                if vantage == "live" {
                    avoidable_live_sum += avoidable.unwrap_or(0.0);
                    if full && offered && rec["version"] == "TLS1.2" {
                        avoidable_offers += 1;
                    }
                    let server = &c["tlsrum_server"];
                    for field in [
                        "handshake",
                        "resumption",
                        "early_data",
                        "offered",
                        "version",
                    ] {
                        if rec[field] != server[field] {
                            failures.push(format!(
                                "{who}: live {field} {} but replay {}",
                                rec[field], server[field]
                            ));
                        }
                    }
                    // Two packet sockets (the agent's and dumpcap's) stamp a
                    // TUN device's packets each on their own receipt: tens of
                    // microseconds apart under load. The live contract is 1 ms.
                    for field in ["tcp_rtt", "handshake", "ttfb"] {
                        if let (Some(a), Some(b)) = (f(&t[field]), f(&server["timing"][field])) {
                            if (a - b).abs() > 1.0 {
                                failures.push(format!("{who}: live {field} {a} but replay {b}"));
                            }
                        }
                    }
                }
            }
        }
        // The Prometheus counter, scraped from `tlsrum live` before it stopped.
        let metrics = lab["metrics"].as_str().unwrap_or("");
        let counter: f64 = metrics
            .lines()
            .filter(|l| {
                l.starts_with("tls_avoidable_handshake_seconds_total{")
                    && l.contains("server_name=\"tlsrum.test\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if metrics.is_empty() {
            failures.push(format!("rtt {rtt}: no /metrics scraped from tlsrum live"));
        } else if (counter - avoidable_live_sum / 1e3).abs() > 1e-6 || avoidable_offers == 0 {
            failures.push(format!(
                "rtt {rtt}: tls_avoidable_handshake_seconds_total{{server_name=\"tlsrum.test\"}} = {counter}, records sum to {} s over {avoidable_offers} TLS 1.2 offers",
                avoidable_live_sum / 1e3
            ));
        } else if rtt == 100.0 {
            eprintln!("rtt 100: tls_avoidable_handshake_seconds_total = {counter} s for {avoidable_offers} full TLS 1.2 handshakes that offered a session");
        }
    }
    for kind in [
        "TLS1.2 full",
        "TLS1.2 resumed (session ID)",
        "TLS1.2 resumed (ticket)",
        "TLS1.3 full",
        "TLS1.3 PSK",
        "TLS1.3 0-RTT (early data accepted)",
    ] {
        if !kinds_seen.contains(kind) {
            failures.push(format!("nginx never logged a {kind} handshake"));
        }
    }
    for ((rtt, scenario), judged) in &coverage {
        if !judged {
            failures.push(format!(
                "rtt {rtt} {scenario}: the delay line was late on every connection (listed below): \
                 none judged against the wall clock"
            ));
        }
    }
    // The problems first: CI keeps only the head of a failed test's output.
    if !failures.is_empty() {
        eprintln!("{} problems:", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
    }
    for r in doc["reruns"].as_array().into_iter().flatten() {
        eprintln!("rerun at rtt {}: {}", r["rtt"], r["why"]);
    }
    for l in &late_lines {
        eprintln!("late line: {l}");
    }
    eprintln!("largest allowance for the line's measured deviation: {widest_allow:.3} ms");
    eprintln!(
        "the line was late on {} of {connections} connections",
        late_lines.len()
    );
    eprintln!(
        "{checked} records checked in {:.0} s",
        f(&doc["elapsed"]).unwrap_or(0.0)
    );
    assert!(
        failures.is_empty(),
        "{} problems (listed at the top of this output); first: {}",
        failures.len(),
        failures.first().map(String::as_str).unwrap_or("")
    );
    let _ = std::fs::remove_dir_all(&work);
}
