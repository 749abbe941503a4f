//! Ground truth for `timing.client_hello_delay`, `server_think` and
//! `client_think` (issue 14): real peers (OpenSSL s_client/s_server,
//! GnuTLS gnutls-cli/gnutls-serv, nginx, aioquic) whose writes
//! tools/thinkshim holds for known times, over two chained delay lines
//! (client 30 % of the round trip from a router, the server 70 %) at 20,
//! 100 and 260 ms, watched at the client, at the router (the middle) and at
//! the server. The orchestration is scripts/experiment/thinktime.py; this
//! test runs it and asserts, for TLS 1.2 full and resumed, TLS 1.3 full and
//! with HelloRetryRequest, and QUIC:
//!
//! - the kind is what the programs themselves reported (s_client's
//!   New/Reused and ClientHellos, gnutls-cli's resumption and
//!   HelloRetryRequest lines, nginx's `$ssl_session_reused`, aioquic's
//!   state), and tlsrum's record agrees;
//! - the shim held exactly the writes it was told to, each at least as long
//!   as asked (its own log), and injected is what the wire can show of the
//!   hold (the clock around its sleep, since a busy machine wakes a sleeper
//!   late, from the last of the peer's packets that came during it);
//! - the link behaved during the handshake: no packet's delay across either
//!   line (between the captures at its ends, and by the line's own log)
//!   more than 0.5 ms off, and `tcp_rtt` within 1 ms of the configured RTT.
//!   A connection where it did not is a failed trial, not judged.
//!   thinktime.py keeps every attempt's lab and reruns an RTT (up to
//!   four times) while some program's kind, injected or not, has no faithful
//!   connection at it; every kind must be judged at every RTT and every
//!   program's kinds at some RTT;
//! - each field within [injected − 1 ms, injected + natural + 1 ms] at every
//!   vantage, where natural is the largest value of that field on the same
//!   program's connections without injection in this run (the same work:
//!   any full handshake, in which the client verifies the same chain and
//!   the server signs with the same key, or the same resumed kind; any
//!   RTT, any vantage): the program's own think time, which the injected
//!   connections carry too. A kind's own few connections alone understate
//!   its spread (gnutls-cli's client_think over full handshakes ran to
//!   5.5 ms in one CI run while its three HRR connections stayed under
//!   3.4 and an injected HRR one carried 4.9 at all three vantages). The
//!   upper bound is instead the hold plus the connection's own time, by the
//!   program's own clock (the shim's log of its reads and of its writes up
//!   to their return, the kernel's count of the time it waited for a CPU,
//!   and the time from its input's last packet on its host's capture to
//!   the read or connect() that returned it: a program woken on an idle
//!   virtual CPU ran 3.4 ms after its SYN-ACK with 0.1 ms of run-queue wait
//!   in one CI run, and a ClientHello left 4.2 ms after its hold in
//!   another, which only the write's return shows), plus
//!   the largest remainder its clock does not see on the natural
//!   connections (figure less own time: under 0.4 ms in kept labs),
//!   wherever that is larger (this 2-core machine is shared). The
//!   field is judged less what the lines measurably added to the gaps it
//!   sums at that vantage beyond the TCP handshake's round trip (from the
//!   three captures: each packet within the link judge's 500 µs, four of
//!   them 0.94 ms in all in one CI run);
//! - `handshake ≈ round_trips × tcp_rtt + server_think + client_think`
//!   within 1 ms wherever all the terms exist;
//! - QUIC: `client_think` and `client_hello_delay` null (DESIGN.md);
//! - each field the same within 1 ms at the three vantages, plus what the
//!   lines measurably did to that connection (a packet held longer between
//!   two captures widens one vantage's gap only).
//!
//! It prints the problems first (CI keeps only the head of a failed test's
//! output), then the natural think times and, per field, vantage and RTT,
//! the largest excess over the injected time.
//!
//! Needs root, /dev/net/tun, network namespaces, cc, tcpdump, openssl,
//! gnutls-cli, gnutls-serv, nginx, python3 with aioquic: without them the
//! test is skipped with a message, except under CI=true where a missing
//! capability is a failure.

mod common;

use std::collections::BTreeMap;

use common::Need;
use serde_json::Value;

const FIELDS: [&str; 3] = ["client_hello_delay", "server_think", "client_think"];
const VANTAGES: [(&str, &str); 3] = [
    ("client", "tlsrum_client"),
    ("middle", "tlsrum_router"),
    ("server", "tlsrum_server"),
];

/// What the programs said the connection was, or why it is not `kind`.
/// The work a kind of handshake asks of its peers: every full handshake
/// verifies and signs the same chain (HRR adds a key share, well under the
/// spread), so their natural think times are one population.
fn same_work(kind: &str) -> &str {
    match kind {
        "tls12-full" | "tls13-full" | "tls13-hrr" => "full",
        other => other,
    }
}

fn label_problem(c: &Value) -> Option<String> {
    let kind = c["kind"].as_str().unwrap();
    let l = &c["label"];
    let session = l["session"].as_str().unwrap_or("");
    let version = l["version"].as_str().unwrap_or("").replace("TLSv", "TLS");
    let hellos = l["client_hellos"].as_u64();
    let want = match kind {
        "tls12-full" => ("New", "TLS1.2", Some(1)),
        "tls12-resumed" => ("Reused", "TLS1.2", Some(1)),
        "tls13-full" => ("New", "TLS1.3", Some(1)),
        "tls13-hrr" => ("New", "TLS1.3", Some(2)),
        "quic-full" => ("New", "QUIC", None),
        other => return Some(format!("unknown kind {other}")),
    };
    if session != want.0 || version != want.1 || (want.2.is_some() && hellos != want.2) {
        return Some(format!("the client reported {l}"));
    }
    if c["client"] == "gnutls-cli" && l["hrr_reported"].as_bool() != Some(kind == "tls13-hrr") {
        return Some(format!("gnutls-cli's HelloRetryRequest report {l}"));
    }
    if c["program"] == "nginx" {
        let ng = &c["nginx"];
        let reused = ng["reused"] == "r";
        let proto = ng["protocol"].as_str().unwrap_or("").replace("TLSv", "TLS");
        if reused != (kind == "tls12-resumed") || proto != want.1 {
            return Some(format!("nginx logged {ng}"));
        }
    }
    None
}

/// Why the lab's link did not carry this handshake faithfully, if it did
/// not: a delay line released a packet late by its own log, a packet's
/// delay between two captures was off (bounds 500 µs; thinktime.py's
/// LATE_US), or TCP's round trip was off the configured one (1 ms).
fn link_misbehaved(c: &Value) -> Option<String> {
    let late = c["line_late_max_us"].as_f64().unwrap_or(0.0);
    let delay_off = c["line_delay_off_us"].as_f64().unwrap_or(0.0);
    let off = c["link_rtt_off_ms"].as_f64().unwrap_or(0.0);
    (late > 500.0 || delay_off > 500.0 || off > 1.0).then(|| {
        format!(
            "the link misbehaved: a line {late:.0} µs late by its log, a packet {delay_off:.0} µs off its delay, tcp_rtt {off} ms off"
        )
    })
}

/// What the lines added to the gaps `field` sums at the vantage `at`
/// (a `tlsrum_*` key), beyond the TCP handshake's round trip: thinktime.py
/// link_excess.
fn link_share(c: &Value, at: &str, field: &str) -> f64 {
    c["link"][at.trim_start_matches("tlsrum_")][field]
        .as_f64()
        .unwrap_or(0.0)
}

/// The holds the shim logged on this connection, by side: (write, ms).
fn holds(writes: &Value) -> Vec<(u64, f64)> {
    writes
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["held"].as_f64().unwrap_or(0.0) > 0.0)
        .map(|w| (w["n"].as_u64().unwrap(), w["held"].as_f64().unwrap()))
        .collect()
}

/// The ClientHello's hold is 6 ms (thinktime.py's HOLD): at 13 ms it ended
/// just before the client-side line's release of the client's ACK at 15 ms
/// (0.15 RTT at 100 ms), whose last 1 ms that SCHED_FIFO line busy-polls,
/// and s_client's ClientHello left ~2 ms late in 4 of 8 runs, at every
/// vantage alike. At 6 ms: 3 of 3 quiet runs pass (97-162 s).
#[test]
fn think_times_against_injected_delays_at_20_100_260_ms() {
    if common::skip_unless(
        "think_times_against_injected_delays_at_20_100_260_ms",
        &[
            Need::Root,
            Need::Tun,
            Need::Netns,
            Need::Tools(&[
                "ip",
                "cc",
                "tcpdump",
                "ping",
                "openssl",
                "gnutls-cli",
                "gnutls-serv",
                "nginx",
                "python3",
            ]),
            Need::Python("aioquic"),
        ],
    ) {
        return;
    }
    // THINK_TIME_DOC judges a kept lab's think.json again, without a run.
    let (doc, work): (Value, Option<std::path::PathBuf>) = match std::env::var_os("THINK_TIME_DOC")
    {
        Some(path) => {
            let doc = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            (doc, None)
        }
        None => {
            let (doc, work) = common::delayline::run_lab("thinktime.py", "think");
            (doc, Some(work))
        }
    };
    let mut failures = Vec::new();
    // Connections the delay lines disturbed, and whether each (program,
    // kind, injected) was judged at all.
    let mut unjudged: Vec<String> = Vec::new();
    let mut connections = 0usize;
    let mut cells: BTreeMap<(String, String, bool), bool> = BTreeMap::new();
    let mut rtt_kinds: std::collections::BTreeSet<(u64, String)> = Default::default();
    let mut judged_rtt_kinds: std::collections::BTreeSet<(u64, String)> = Default::default();

    // Natural think: the largest value of each field on the connections
    // without injection that the link carried faithfully, per (program,
    // work), over every RTT and vantage (a late line adds its lateness to
    // the far vantages' figures, which is not the program's think).
    //
    // And the programs' own time around the held write, by their own clock
    // (the shim's log: from the first read of the input it answers, or
    // connect() returning, to the write, less the hold, plus the rest of a
    // flight written in several calls, plus the time the kernel kept it
    // waiting for a CPU since its previous write). On those same
    // connections, a field less the link's share is that own time plus a
    // small remainder the program's clock cannot see (the kernel's path
    // between the wire and the read or write): `unexplained` is the
    // largest remainder, per program, work and field, over every RTT and
    // vantage. An injected connection is then allowed the hold plus its
    // own time plus that remainder, where this exceeds the natural bound:
    // the same connection's clock and figure, compared like with like
    // (the largest own time and the largest figure over natural
    // connections can come from different connections: one CI run's
    // nginx server was 2.3 ms slower on an injected connection by its own
    // clock, with no allowance for it).
    let mut natural: BTreeMap<(String, String, &str), f64> = BTreeMap::new();
    let mut unexplained: BTreeMap<(String, String, &str), f64> = BTreeMap::new();
    for lab in doc["labs"].as_array().unwrap() {
        for c in lab["connections"].as_array().unwrap() {
            if c["injected"].as_bool().unwrap() || link_misbehaved(c).is_some() {
                continue;
            }
            let key = |f| {
                (
                    c["program"].as_str().unwrap().to_string(),
                    same_work(c["kind"].as_str().unwrap()).to_string(),
                    f,
                )
            };
            for (_, at) in VANTAGES {
                for field in FIELDS {
                    let Some(v) = c[at]["timing"][field].as_f64() else {
                        continue;
                    };
                    let e = natural.entry(key(field)).or_insert(0.0);
                    *e = e.max(v);
                    if let Some(own) = c["own"][field].as_f64() {
                        let rest = v - link_share(c, at, field) - own;
                        let e = unexplained.entry(key(field)).or_insert(f64::MIN);
                        *e = e.max(rest);
                    }
                }
            }
        }
    }

    // (field, vantage, rtt) -> (min, max) of measured − injected.
    let mut excess: BTreeMap<(&str, &str, u64), (f64, f64)> = BTreeMap::new();
    let mut checked = 0;
    let mut oversleep: BTreeMap<&str, f64> = BTreeMap::new();
    let mut widened: BTreeMap<&str, f64> = BTreeMap::new();
    let mut spread: BTreeMap<&str, f64> = BTreeMap::new();
    for lab in doc["labs"].as_array().unwrap() {
        let rtt = lab["rtt"].as_f64().unwrap();
        let hold = &lab["hold"];
        for c in lab["connections"].as_array().unwrap() {
            let program = c["program"].as_str().unwrap();
            let kind = c["kind"].as_str().unwrap();
            let injected = c["injected"].as_bool().unwrap();
            let quic = kind == "quic-full";
            let who = format!(
                "rtt {rtt} (attempt {}) {program} {kind} {} port {}",
                lab["attempt"],
                if injected { "injected" } else { "natural" },
                c["local_port"]
            );
            if let Some(p) = label_problem(c) {
                failures.push(format!("{who}: not a {kind}: {p}"));
                continue;
            }
            // A line that released this handshake's packets late changed
            // the wire: its figures show the stall, not the injection.
            // thinktime.py reran the RTT while a cell had no faithful
            // connection, and kept every attempt.
            let delay_off = c["line_delay_off_us"].as_f64().unwrap_or(0.0);
            let cell = (program.to_string(), kind.to_string(), injected);
            cells.entry(cell.clone()).or_insert(false);
            rtt_kinds.insert((rtt as u64, kind.to_string()));
            connections += 1;
            if let Some(why) = link_misbehaved(c) {
                // A failed trial of the lab, not evidence about tlsrum:
                // counted, and every program and kind must still be judged.
                unjudged.push(format!("{who}: {why}: not judged"));
                continue;
            }
            cells.insert(cell, true);
            judged_rtt_kinds.insert((rtt as u64, kind.to_string()));
            // The shim did what it was told, and nothing else.
            let want_server: Vec<(u64, f64)> = if injected {
                vec![(1, hold["server_think"].as_f64().unwrap())]
            } else {
                vec![]
            };
            if holds(&c["server_writes"]) != want_server {
                failures.push(format!(
                    "{who}: the server's holds were {:?}, wanted {want_server:?}",
                    holds(&c["server_writes"])
                ));
            }
            let client_holds = holds(&c["writes"]);
            if injected == client_holds.is_empty() && !quic {
                failures.push(format!("{who}: the client's holds were {client_holds:?}"));
            }
            // The injected time is what the wire can show of the shim's
            // hold (thinktime.py actual_holds: its clock before and after
            // the sleep, which a busy machine makes a little longer than
            // asked, from the last of the peer's packets to reach the
            // host during it: gnutls-cli holds on reading the ServerHello,
            // and one CI run's server flight ended 4.6 ms into a 21 ms
            // hold). That the shim slept what it was asked is checked on
            // its log alone, below.
            let inj = |field: &str| {
                if !injected || (quic && field != "server_think") {
                    0.0
                } else {
                    c["held"][field].as_f64().unwrap_or(f64::NAN)
                }
            };
            if injected {
                for (side, writes) in [("client", &c["writes"]), ("server", &c["server_writes"])] {
                    for w in writes.as_array().into_iter().flatten() {
                        let asked = w["held"].as_f64().unwrap_or(0.0);
                        if asked <= 0.0 {
                            continue;
                        }
                        let slept = (w["t1"].as_f64().unwrap() - w["t0"].as_f64().unwrap()) * 1e3;
                        // Its log's clock is to the µs.
                        if slept < asked - 0.002 {
                            failures.push(format!(
                                "{who}: the {side}'s shim slept {slept:.3} ms before write {}, asked {asked}",
                                w["n"]
                            ));
                        }
                        let o = oversleep.entry(side).or_insert(0.0);
                        *o = f64::max(*o, slept - asked);
                    }
                }
                for field in FIELDS {
                    if quic && field != "server_think" {
                        continue;
                    }
                    if inj(field).is_nan() {
                        failures.push(format!("{who}: no hold of {field} in the shim's log"));
                    }
                }
            }
            // One figure whatever the vantage (DESIGN.md): the three
            // captures of one connection agree within 1 ms, field by field
            // (this holds whatever the peers' own timing did), plus what
            // the lines measurably did to this connection's packets
            // between the captures (`delay_off`, under the 500 µs above):
            // a packet held that much longer on its way widens one
            // vantage's gap and not the others'.
            for field in FIELDS {
                let vs: Vec<f64> = VANTAGES
                    .iter()
                    .filter_map(|(_, at)| c[*at]["timing"][field].as_f64())
                    .collect();
                let (lo, hi) = vs
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
                if vs.len() > 1 && hi - lo > 1.0 + delay_off / 1e3 {
                    failures.push(format!(
                        "{who}: {field} differs by {:.3} ms between vantages: {vs:?}",
                        hi - lo
                    ));
                }
                if vs.len() > 1 {
                    let e = spread.entry(field).or_insert(0.0);
                    *e = f64::max(*e, hi - lo);
                }
            }
            for (vantage, at) in VANTAGES {
                let rec = &c[at];
                let who = format!("{who} at {vantage}");
                if rec.is_null() {
                    failures.push(format!("{who}: no tlsrum record"));
                    continue;
                }
                checked += 1;
                let t = &rec["timing"];
                let hrr = rec["hrr"].as_bool().unwrap_or(false);
                let want_hs = if kind == "tls12-resumed" {
                    "resumed"
                } else {
                    "full"
                };
                if rec["handshake"] != want_hs || hrr != (kind == "tls13-hrr") {
                    failures.push(format!(
                        "{who}: tlsrum says handshake {} hrr {hrr}",
                        rec["handshake"]
                    ));
                }
                for field in FIELDS {
                    let v = t[field].as_f64();
                    if quic && field != "server_think" {
                        if v.is_some() {
                            failures.push(format!("{who}: {field} {v:?}, null for QUIC"));
                        }
                        continue;
                    }
                    let Some(v) = v else {
                        failures.push(format!("{who}: {field} null"));
                        continue;
                    };
                    let want = inj(field);
                    let nat = natural
                        .get(&(program.to_string(), same_work(kind).to_string(), field))
                        .copied()
                        .unwrap_or(0.0);
                    // QUIC's server_think is, by its definition (think_quic
                    // in analyzer/src/handshake/timing.rs), the server's
                    // time on the client's Initial less its time answering
                    // the client's first 1-RTT packet, which stands in for
                    // the round trip to the server. The server's own
                    // capture shows that answer time (its QUIC round trip
                    // less server_think): it is the allowance below.
                    let answer = if quic {
                        let st = &c["tlsrum_server"]["timing"];
                        match (st["tcp_rtt"].as_f64(), st["server_think"].as_f64()) {
                            (Some(r), Some(s)) => (r - s).max(0.0),
                            _ => 0.0,
                        }
                    } else {
                        0.0
                    };
                    // The program slower on this connection by its own
                    // clock (above): the hold, its own time and the
                    // largest remainder on natural connections.
                    let by_own = match (
                        injected,
                        c["own"][field].as_f64(),
                        unexplained.get(&(program.to_string(), same_work(kind).to_string(), field)),
                    ) {
                        (true, Some(own), Some(&rest)) => own + rest,
                        _ => 0.0,
                    };
                    let extra = (by_own - nat).max(0.0);
                    // What the lines measurably added to (or took from)
                    // the gaps this field sums at this vantage, beyond the
                    // TCP handshake's round trip it subtracts: each packet
                    // is within the link judge's 500 µs, their sum need
                    // not be (thinktime.py link_excess, from the three
                    // captures). The field less it is judged.
                    let link = link_share(c, at, field);
                    let judged = v - link;
                    if judged < want - answer - 1.0 || judged > want + nat + extra + 1.0 {
                        failures.push(format!(
                            "{who}: {field} {v} ms, less the link's {link:.3} {judged:.3}, injected {want} (natural up to {nat}, its own clock allows {extra:.3} more, answer {answer:.3}): outside [{:.3}, {:.3}]",
                            want - answer - 1.0,
                            want + nat + extra + 1.0
                        ));
                    }
                    if extra > 0.0 {
                        let e = widened.entry(field).or_insert(0.0);
                        *e = f64::max(*e, extra);
                    }
                    if injected {
                        let e = excess
                            .entry((field, vantage, rtt as u64))
                            .or_insert((f64::MAX, f64::MIN));
                        e.0 = e.0.min(v - want);
                        e.1 = e.1.max(v - want);
                    }
                }
                // The decomposition, wherever all its terms exist.
                let terms = [
                    t["handshake"].as_f64(),
                    t["round_trips"].as_f64(),
                    t["tcp_rtt"].as_f64(),
                    t["server_think"].as_f64(),
                    t["client_think"].as_f64(),
                ];
                if let [Some(hs), Some(rt), Some(r), Some(st), Some(ct)] = terms {
                    let sum = rt * r + st + ct;
                    if (hs - sum).abs() > 1.0 {
                        failures.push(format!(
                            "{who}: handshake {hs} but {rt} × {r} + {st} + {ct} = {sum:.3}"
                        ));
                    }
                    let e = excess
                        .entry(("identity", vantage, rtt as u64))
                        .or_insert((f64::MAX, f64::MIN));
                    e.0 = e.0.min(hs - sum);
                    e.1 = e.1.max(hs - sum);
                } else if !quic {
                    failures.push(format!("{who}: a term of the decomposition is null: {t}"));
                }
            }
        }
    }
    // Failed trials may be many on a jittery machine (8-20% on the 2-core
    // VM, 28 Nov 2026); what the test needs is that every kind is still
    // judged at every RTT, and every program's kinds at some RTT.
    for (rtt, kind) in &rtt_kinds {
        if !judged_rtt_kinds.contains(&(*rtt, kind.clone())) {
            failures.push(format!("rtt {rtt}: no {kind} connection judged"));
        }
    }
    for ((program, kind, injected), judged) in &cells {
        if !judged {
            failures.push(format!(
                "{program} {kind} (injected: {injected}): no connection judged at any RTT"
            ));
        }
    }
    // The problems first, then what the run measured.
    if !failures.is_empty() {
        eprintln!("{} problems:", failures.len());
        for f in &failures {
            eprintln!("  {f}");
        }
    }
    eprintln!("natural think times (ms, largest over RTTs and vantages):");
    for ((program, kind, field), v) in &natural {
        eprintln!("  {program:8} {kind:14} {field:19} {v:.3}");
    }
    eprintln!("the shim's largest oversleep (ms): {oversleep:?}");
    eprintln!("largest spread of a field across the three vantages (ms): {spread:?}");
    eprintln!("largest remainder beyond the own clock on natural connections (ms):");
    for ((program, kind, field), v) in &unexplained {
        eprintln!("  {program:8} {kind:14} {field:19} {v:+.3}");
    }
    eprintln!(
        "largest own-clock allowance over natural on an injected connection (ms): {widened:?}"
    );
    eprintln!("measured − injected (ms) on injected connections; identity: handshake − sum:");
    for ((field, vantage, rtt), (lo, hi)) in &excess {
        eprintln!("  {field:19} {vantage:7} rtt {rtt:3}: {lo:+.3} .. {hi:+.3}");
    }
    for r in doc["reruns"].as_array().into_iter().flatten() {
        eprintln!("rerun at rtt {}: {}", r["rtt"], r["why"]);
    }
    eprintln!(
        "{checked} records checked in {:.0} s",
        doc["elapsed"].as_f64().unwrap_or(0.0)
    );
    for u in &unjudged {
        eprintln!("not judged: {u}");
    }
    eprintln!(
        "{} of {connections} connections not judged (the delay lines misbehaved)",
        unjudged.len()
    );
    assert!(
        failures.is_empty(),
        "{} problems (listed at the top of this output); first: {}",
        failures.len(),
        failures.first().map(String::as_str).unwrap_or("")
    );
    if let Some(work) = work {
        let _ = std::fs::remove_dir_all(work);
    }
}
