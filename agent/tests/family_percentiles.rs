//! Per-group percentiles against curl's own clock: a capture made at the
//! client on the delay line with an IPv4 path (40 ms RTT) and an IPv6 path
//! (90 ms RTT, a second line between the same namespaces), nginx with no
//! session store (every handshake full), and curl making N connections per
//! (family x TLS 1.2 / TLS 1.3) group (scripts/experiment/famlab.py, run
//! through `common::delayline::run_lab_at`). Per group, p50/p75/p95/p99
//! of tlsrum's group output must agree with the same percentiles (nearest
//! rank, rank = ceil(q·n)) of curl's `-w` timings within 2 ms or 2 %.
//!
//! The mapping at the client vantage. README: `tcp_rtt` client-side is SYN
//! -> the client's ACK of the SYN-ACK; `handshake` and `ttfb` start at the
//! ClientHello; `client_hello_delay` is that ACK -> the ClientHello. curl's
//! spans start at `time_connect` (connect() returned: the ACK went out), so
//! they hold the client_hello_delay as well (0.5-1.5 ms here: curl's
//! per-connection TLS set-up; without it tlsrum's TLS 1.3 handshake read
//! ~1 ms short of curl's in the first run, with it within 0.3 ms):
//!
//! - `tcp_rtt` ~ `time_connect` (`--resolve` makes name resolution free);
//! - `handshake` ~ `time_appconnect - time_connect - chd`;
//! - `ttfb` ~ `time_starttransfer - time_connect - chd`;
//!
//! where chd is the wire's ACK -> first payload byte of that connection,
//! taken by the lab from the capture (not from tlsrum). Per connection that
//! is `handshake + client_hello_delay ~ time_appconnect - time_connect`;
//! it is moved to curl's side because percentiles do not add: the group
//! output gives p95 of `handshake`, not of a sum, and p95 of `handshake` is
//! what the test must check.
//!
//! A label whose curl clock was late, judged from curl's `-w` timings, the
//! delay lines' logs and the capture's TCP segments, never from tlsrum
//! (famlab.py `clock_late`), by more than 1 ms (half the 2 ms floor; curl's
//! normal overhead at each is 0.15-0.95 ms), is off by that much: the
//! connection is left out on both sides (curl's labels, and the capture
//! tlsrum reads: famlab filters its client port out with tcpdump). Late
//! means any of:
//!
//! - `time_connect` over the configured RTT plus what the line itself was
//!   late on that connection's SYN and SYN-ACK (curl cannot undercut it);
//! - the gap before curl's request: from the last packet before it, either
//!   way, to the request (`time_appconnect` is read in between);
//! - the gap after the response: from the response's segment (the
//!   server's last payload but one: TLS 1.3 session tickets may come before
//!   it, its close_notify after) to curl's next segment
//!   (`time_starttransfer` is read in between).
//!
//! The lab reruns (at most 4 times; reasons on stderr) while a group keeps
//! fewer than 3/4 of its labels, and reports its best attempt; the test
//! fails, naming the client, not tlsrum, when a group kept fewer than that
//! (a percentile of a few labels says little), and prints the comparison
//! anyway. On CI's busy machine 1-5 of 80 labels were late in every one of
//! 5 attempts, which failed the test when one late label was enough to
//! rerun; the comparison itself held. These stalls are real on the
//! shared 2-core box: in the first run, curl at normal priority stopped
//! 3-5 ms between its TLS 1.3 Finished and its request on 9 of 20 IPv6/TLS
//! 1.3 connections (handshake p75 off by 2.9 ms); at SCHED_FIFO 40 (below
//! the lines' 50; famlab runs curl so) one response in 80 was read 3.0 ms
//! late (ttfb p95 off by 2.4 ms). A late delay line is only noted: curl and
//! the capture see the same late packet, and nothing here is compared
//! against the configured RTT (wan_accuracy's `tcp_rtt` check is; there it
//! spoils the run).
//!
//! The capture is replayed with curl's own key log (SSLKEYLOGFILE): a busy
//! nginx can send its TLS 1.3 session tickets milliseconds before the
//! response, and they acknowledge the request; without keys tlsrum's `ttfb`
//! takes the first ticket for the first byte (README's known limit), which
//! failed 2 of 7 runs before (ipv4/TLS1.3 ttfb p95/p99 2.7-4.1 ms short of
//! curl's). The lab never reruns on that: it would hide a tlsrum error.
//!
//! tlsrum's side is its group output, `tlsrum replay --by family,version
//! --format ndjson` ([`tlsrum_groups`], the one place that reads it): its
//! percentiles, within 0.5 % of the nearest-rank order statistic, against
//! the nearest-rank percentiles of curl's values; and each group's
//! `connections` must equal its number of labels.
//!
//! Needs root, /dev/net/tun, nginx, curl, openssl, tcpdump, python3, chrt; a
//! skip locally without them, a failure under CI=true.

mod common;

use std::collections::BTreeMap;

use common::Need;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const QUANTILES: [(&str, f64); 4] = [("p50", 0.50), ("p75", 0.75), ("p95", 0.95), ("p99", 0.99)];
const METRICS: [&str; 3] = ["handshake", "ttfb", "tcp_rtt"];

type Group = (String, String);
/// Group -> metric -> quantile name -> ms.
type Percentiles = BTreeMap<Group, BTreeMap<&'static str, BTreeMap<&'static str, f64>>>;

/// Nearest rank: the value at rank ceil(q·n) of the sorted values.
fn nearest_rank(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn percentiles(samples: BTreeMap<Group, BTreeMap<&'static str, Vec<f64>>>) -> Percentiles {
    samples
        .into_iter()
        .map(|(g, by_metric)| {
            let m = by_metric
                .into_iter()
                .map(|(metric, mut v)| {
                    let qs = QUANTILES
                        .iter()
                        .map(|&(name, q)| (name, nearest_rank(&mut v, q)))
                        .collect();
                    (metric, qs)
                })
                .collect();
            (g, m)
        })
        .collect()
}

/// tlsrum's per-group percentiles of the capture, from the group output
/// `tlsrum replay --by family,version --format ndjson` (one object per
/// group: `handshake_ms`, `ttfb_ms`, `tcp_rtt_ms` each `{n, p50, p75, p95,
/// p99}`, within 0.5 % of the nearest-rank order statistic), and each
/// group's `connections`; with curl's own key log, so that TLS 1.3 session
/// tickets sent before the response are not taken for its first byte
/// (README, `ttfb`).
fn tlsrum_groups(capture: &str, keylog: &str) -> (Percentiles, BTreeMap<Group, u64>) {
    let out = common::run(&[
        BIN,
        "replay",
        "--by",
        "family,version",
        "--keylog",
        keylog,
        "--format",
        "ndjson",
        capture,
    ]);
    let mut groups = Percentiles::new();
    let mut counts = BTreeMap::new();
    for line in out.lines() {
        let o: Value = serde_json::from_str(line).unwrap();
        let g = (
            o["group"]["family"].as_str().unwrap_or("null").to_owned(),
            o["group"]["version"].as_str().unwrap_or("null").to_owned(),
        );
        counts.insert(g.clone(), o["connections"].as_u64().unwrap());
        let by_metric = METRICS
            .iter()
            .map(|&m| {
                let h = &o[format!("{m}_ms")];
                let qs = QUANTILES
                    .iter()
                    .filter_map(|&(name, _)| Some((name, h[name].as_f64()?)))
                    .collect();
                (m, qs)
            })
            .collect();
        assert!(
            groups.insert(g.clone(), by_metric).is_none(),
            "group {g:?} twice"
        );
    }
    (groups, counts)
}

/// The same percentiles of curl's own timings, its spans moved from
/// connect() to the ClientHello by the wire's gap between them (module
/// doc). A connection whose ClientHello the lab did not find in the
/// capture is a failure.
fn curl_groups(conns: &[Value], failures: &mut Vec<String>) -> Percentiles {
    let mut samples: BTreeMap<Group, BTreeMap<&'static str, Vec<f64>>> = BTreeMap::new();
    for c in conns {
        let g = (
            c["family"].as_str().unwrap().to_owned(),
            c["version"].as_str().unwrap().to_owned(),
        );
        let t = |k: &str| c[k].as_f64().unwrap() * 1000.0;
        let Some(chd) = c["client_hello_delay_ms"].as_f64() else {
            failures.push(format!(
                "port {}: no ACK and ClientHello in the capture",
                c["local_port"]
            ));
            continue;
        };
        let e = samples.entry(g).or_default();
        e.entry("tcp_rtt").or_default().push(t("time_connect"));
        e.entry("handshake")
            .or_default()
            .push(t("time_appconnect") - t("time_connect") - chd);
        e.entry("ttfb")
            .or_default()
            .push(t("time_starttransfer") - t("time_connect") - chd);
    }
    percentiles(samples)
}

fn tolerance(ms: f64) -> f64 {
    (0.02 * ms.abs()).max(2.0)
}

#[test]
fn family_version_percentiles_match_curl() {
    if common::skip_unless(
        "family_version_percentiles_match_curl",
        &[
            Need::Root,
            Need::Tun,
            Need::Netns,
            Need::Tools(&[
                "ip", "tcpdump", "nginx", "curl", "openssl", "python3", "chrt",
            ]),
        ],
    ) {
        return;
    }
    let (doc, work) = common::delayline::run_lab_at("famlab.py", "fam", "40,90");
    let conns = doc["connections"].as_array().unwrap();
    let reruns = doc["reruns"].as_array().map_or(0, Vec::len);
    let client_bound = doc["client_late_bound_ms"].as_f64().unwrap();
    let min_faithful = doc["min_faithful"].as_f64().unwrap();
    let mut failures = Vec::new();
    let mut kept: BTreeMap<Group, (u64, u64)> = BTreeMap::new();
    let faithful: Vec<Value> = conns
        .iter()
        .filter(|c| {
            let line = c["line_late_max_us"].as_f64().unwrap_or(0.0);
            if line > 500.0 {
                // Both clocks saw the same late packet (module doc): logged only.
                eprintln!(
                    "note: port {}: a delay line was {line:.0} µs late",
                    c["local_port"]
                );
            }
            let late = c["client_clock_late"].as_array().unwrap();
            for why in late {
                eprintln!("left out: {}", why.as_str().unwrap());
            }
            let g = (
                c["family"].as_str().unwrap().to_owned(),
                c["version"].as_str().unwrap().to_owned(),
            );
            let k = kept.entry(g).or_default();
            k.0 += late.is_empty() as u64;
            k.1 += 1;
            late.is_empty()
        })
        .cloned()
        .collect();
    for ((f, v), (ok, n)) in &kept {
        if (*ok as f64) < min_faithful * *n as f64 {
            failures.push(format!(
                "lab, after {reruns} reruns: curl's clock late by more than {client_bound} ms \
                 (the client, not tlsrum) on {} of {n} {f}/{v} labels; at least {:.0}% must be \
                 on time",
                n - ok,
                min_faithful * 100.0
            ));
        }
    }
    let want = curl_groups(&faithful, &mut failures);
    let (got, counts) = tlsrum_groups(
        doc["capture"].as_str().unwrap(),
        doc["keylog"].as_str().unwrap(),
    );
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "groups"
    );
    for (g, metrics) in &want {
        let labels = faithful
            .iter()
            .filter(|c| c["family"] == g.0.as_str() && c["version"] == g.1.as_str())
            .count() as u64;
        if counts[g] != labels {
            failures.push(format!(
                "{}/{}: tlsrum {} connections, curl {labels}",
                g.0, g.1, counts[g]
            ));
        }
        for (m, qs) in metrics {
            for (q, w) in qs {
                let line = match got[g][m].get(q) {
                    Some(t) if (t - w).abs() <= tolerance(*w) => {
                        eprintln!("{}/{} {m} {q}: tlsrum {t:.3} curl {w:.3}", g.0, g.1);
                        continue;
                    }
                    Some(t) => format!("{}/{} {m} {q}: tlsrum {t:.3} curl {w:.3}", g.0, g.1),
                    None => format!("{}/{} {m} {q}: tlsrum none, curl {w:.3}", g.0, g.1),
                };
                eprintln!("{line}");
                failures.push(line);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(work);
    if let Some(parent) = std::path::Path::new(doc["capture"].as_str().unwrap()).parent() {
        let _ = std::fs::remove_dir_all(parent);
    }
}
