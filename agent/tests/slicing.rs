//! Issue 15, slicing: `replay --by`, `--window` and `--ja4-names` on the
//! bundled captures, checked against aggregates computed here,
//! independently, from the per-connection NDJSON of the same captures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tlsrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .current_dir(root())
        .arg("replay")
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = tlsrum(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn records() -> Vec<Value> {
    ok(&["--format", "ndjson", "pcaps"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A record's value in a dimension, as the contract defines it.
fn value(r: &Value, dim: &str) -> String {
    let s = |f: &str, none: &str| r[f].as_str().unwrap_or(none).to_string();
    match dim {
        "sni" => s("sni", "(no sni)"),
        "ja4" => s("ja4", "(none)"),
        "client" => s("ja4_stable", "(none)"),
        "family" => s("family", "?"),
        "version" => s("version", "(unknown)"),
        "alpn" => s("alpn_negotiated", "(unknown)"),
        "transport" => s("transport", "?"),
        "server" => {
            let ep = r["server"].as_str().unwrap();
            let ip = match ep.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap(),
                None => ep.rsplit_once(':').unwrap().0,
            };
            ip.to_string()
        }
        _ => unreachable!(),
    }
}

#[derive(Default, Debug, PartialEq)]
struct Expect {
    connections: u64,
    full: u64,
    resumed: u64,
    declined: u64,
    failed: u64,
    incomplete: u64,
    handshake: Vec<f64>,
    ttfb: Vec<f64>,
    avoidable: f64,
}

fn expect(recs: &[Value], dims: &[&str]) -> BTreeMap<Vec<String>, Expect> {
    let mut m: BTreeMap<Vec<String>, Expect> = BTreeMap::new();
    for r in recs {
        let e = m
            .entry(dims.iter().map(|d| value(r, d)).collect())
            .or_default();
        e.connections += 1;
        let kind = r["handshake"].as_str().unwrap_or("");
        match kind {
            "full" => e.full += 1,
            "resumed" => e.resumed += 1,
            "failed" => e.failed += 1,
            "incomplete" => e.incomplete += 1,
            _ => {}
        }
        let offered = r["offered"].as_array().is_some_and(|o| !o.is_empty());
        if kind == "full" && offered {
            e.declined += 1;
        }
        let t = |f: &str| r["timing"][f].as_f64();
        if let (Some(hs), "full" | "resumed") = (t("handshake"), kind) {
            e.handshake.push(hs);
        }
        if let Some(v) = t("ttfb") {
            e.ttfb.push(v);
        }
        e.avoidable += t("avoidable").unwrap_or(0.0);
    }
    m
}

/// Nearest-rank quantile of exact values.
fn nearest_rank(v: &[f64], q: f64) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    (n > 0).then(|| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
}

fn near(shown: &Value, exact: Option<f64>, what: &str) {
    match exact {
        None => assert!(shown.is_null(), "{what}: {shown} vs none"),
        Some(x) => {
            let s = shown.as_f64().unwrap_or_else(|| panic!("{what}: {shown}"));
            // 0.5% from the histogram, and the microsecond rounding.
            assert!((s - x).abs() <= x * 0.005 + 0.001, "{what}: {s} vs {x}");
        }
    }
}

/// A dimension's key in the outputs: its name, `ja4_stable` for `client`.
fn column(dim: &str) -> &str {
    match dim {
        "client" => "ja4_stable",
        d => d,
    }
}

fn group_of(o: &Value, dims: &[&str]) -> Vec<String> {
    let g = o["group"].as_object().unwrap();
    assert_eq!(g.len(), dims.len(), "{o}");
    dims.iter()
        .map(|d| g[column(d)].as_str().unwrap().to_string())
        .collect()
}

/// Every dimension alone and some combinations: the groups and their
/// counts and percentiles equal those computed from the records.
#[test]
fn by_each_dimension_and_combinations_matches_the_records() {
    let recs = records();
    assert!(recs.len() > 50, "{}", recs.len());
    for dims in [
        &["sni"][..],
        &["ja4"],
        &["client"],
        &["family"],
        &["version"],
        &["alpn"],
        &["transport"],
        &["server"],
        &["family", "version"],
        &["ja4", "transport", "server"],
        &["client", "version"],
    ] {
        let by = dims.join(",");
        let out = ok(&["--by", &by, "--format", "ndjson", "pcaps"]);
        let want = expect(&recs, dims);
        let objs: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(objs.len(), want.len(), "--by {by}: {out}");
        let mut prev = u64::MAX;
        for o in &objs {
            let g = group_of(o, dims);
            let e = want
                .get(&g)
                .unwrap_or_else(|| panic!("--by {by}: unexpected group {g:?}"));
            let what = format!("--by {by} {g:?}");
            for (k, v) in [
                ("connections", e.connections),
                ("full", e.full),
                ("resumed", e.resumed),
                ("declined", e.declined),
                ("failed", e.failed),
                ("incomplete", e.incomplete),
            ] {
                assert_eq!(o[k].as_u64(), Some(v), "{what} {k}");
            }
            assert_eq!(
                o["handshake_ms"]["n"].as_u64(),
                Some(e.handshake.len() as u64),
                "{what}"
            );
            assert_eq!(
                o["ttfb_ms"]["n"].as_u64(),
                Some(e.ttfb.len() as u64),
                "{what}"
            );
            for (q, p) in [("p50", 0.5), ("p75", 0.75), ("p95", 0.95), ("p99", 0.99)] {
                near(
                    &o["handshake_ms"][q],
                    nearest_rank(&e.handshake, p),
                    &format!("{what} hs {q}"),
                );
                near(
                    &o["ttfb_ms"][q],
                    nearest_rank(&e.ttfb, p),
                    &format!("{what} ttfb {q}"),
                );
            }
            let done = e.full + e.resumed;
            if done == 0 {
                assert!(o["resumption_rate"].is_null(), "{what}");
            } else {
                near(
                    &o["resumption_rate"],
                    Some(e.resumed as f64 / done as f64),
                    &what,
                );
            }
            assert!(
                (o["avoidable_ms"].as_f64().unwrap() - e.avoidable).abs() < 0.002,
                "{what}"
            );
            assert!(o.get("window_start").is_none(), "{what}");
            // Table order: connections descending.
            let n = o["connections"].as_u64().unwrap();
            assert!(n <= prev, "--by {by}: order");
            prev = n;
        }
    }
}

/// `--by a --by b` is `--by a,b`.
#[test]
fn by_is_repeatable() {
    assert_eq!(
        ok(&["--by", "family", "--by", "version", "--format", "ndjson", "pcaps"]),
        ok(&["--by", "family,version", "--format", "ndjson", "pcaps"])
    );
}

/// The same groups and numbers in NDJSON, CSV and the table.
#[test]
fn ndjson_csv_and_table_agree() {
    let args = ["--by", "version,transport", "pcaps"];
    let nd: Vec<Value> = ok(&[&args[..], &["--format", "ndjson"]].concat())
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let csv_text = ok(&[&args[..], &["--format", "csv"]].concat());
    let mut csv_lines = csv_text.lines();
    let head: Vec<&str> = csv_lines.next().unwrap().split(',').collect();
    assert_eq!(head[..4], ["version", "transport", "connections", "full"]);
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let csv_rows: Vec<Vec<&str>> = csv_lines.map(|l| l.split(',').collect()).collect();
    let table = ok(&[&args[..], &["--format", "table"]].concat());
    let table_rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('-'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(nd.len(), csv_rows.len());
    assert_eq!(nd.len(), table_rows.len(), "{table}");
    for ((o, c), t) in nd.iter().zip(&csv_rows).zip(&table_rows) {
        let g = group_of(o, &["version", "transport"]);
        assert_eq!(c[..2], [g[0].as_str(), g[1].as_str()]);
        assert_eq!(t[..2], [g[0].as_str(), g[1].as_str()]);
        for k in [
            "connections",
            "full",
            "resumed",
            "declined",
            "failed",
            "incomplete",
        ] {
            let n = o[k].as_u64().unwrap().to_string();
            assert_eq!(c[col(k)], n, "{k}");
        }
        assert_eq!(t[2], o["connections"].as_u64().unwrap().to_string());
        let p50 = o["handshake_ms"]["p50"].as_f64();
        let csv_p50: Option<f64> = c[col("handshake_p50")].parse().ok();
        assert_eq!(csv_p50, p50);
    }
    let total = table.lines().find(|l| l.starts_with("TOTAL")).unwrap();
    let n: u64 = nd.iter().map(|o| o["connections"].as_u64().unwrap()).sum();
    assert_eq!(
        total.split_whitespace().nth(2),
        Some(n.to_string().as_str()),
        "{table}"
    );
}

/// `--window`: windows aligned to the epoch, ascending, each group's
/// counts those of its records; `--window` alone gives empty groups.
#[test]
fn windows_match_the_records() {
    let recs = records();
    for (arg, secs) in [("1h", 3600.0), ("90", 90.0), ("1d", 86400.0)] {
        let out = ok(&[
            "--window",
            arg,
            "--by",
            "transport",
            "--format",
            "ndjson",
            "pcaps",
        ]);
        let mut want: BTreeMap<(i64, String), u64> = BTreeMap::new();
        for r in &recs {
            let w = (r["ts"].as_f64().unwrap() / secs).floor() as i64;
            *want.entry((w, value(r, "transport"))).or_default() += 1;
        }
        let mut got: BTreeMap<(i64, String), u64> = BTreeMap::new();
        let mut prev = f64::MIN;
        for l in out.lines() {
            let o: Value = serde_json::from_str(l).unwrap();
            let (a, b) = (
                o["window_start"].as_f64().unwrap(),
                o["window_end"].as_f64().unwrap(),
            );
            assert_eq!(b - a, secs, "{l}");
            assert_eq!((a / secs).fract(), 0.0, "aligned: {l}");
            assert!(a >= prev, "ascending: {l}");
            prev = a;
            let g = group_of(&o, &["transport"]);
            got.insert(
                ((a / secs) as i64, g[0].clone()),
                o["connections"].as_u64().unwrap(),
            );
        }
        assert_eq!(got, want, "--window {arg}");
    }
    let out = ok(&["--window", "1d", "--format", "csv", "pcaps"]);
    assert!(
        out.starts_with("window_start,window_end,connections,"),
        "{out}"
    );
    let first: Value = serde_json::from_str(
        ok(&["--window", "1d", "--format", "ndjson", "pcaps"])
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["group"], serde_json::json!({}));
}

#[test]
fn bad_windows_are_refused() {
    for bad in ["0", "0s", "-5m", "soon"] {
        let out = tlsrum(&[&format!("--window={bad}"), "pcaps"]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--window"),
            "{bad}"
        );
    }
}

/// The shipped names file names every fingerprint of the bundled
/// captures, and the names reach NDJSON, CSV, the table and its
/// never-resume section.
#[test]
fn ja4_names_appear() {
    let names = ["--ja4-names", "docs/ja4-names.csv"];
    let out = ok(&[&names[..], &["--by", "ja4", "--format", "ndjson", "pcaps"]].concat());
    let mut seen = Vec::new();
    for l in out.lines() {
        let o: Value = serde_json::from_str(l).unwrap();
        let client = o["client"]
            .as_str()
            .unwrap_or_else(|| panic!("no client: {l}"));
        seen.push(client.to_string());
    }
    // The stable fingerprints (`--by client`) are named too, each with
    // the name of the raw fingerprints it gathers.
    let stable = ok(&[
        &names[..],
        &["--by", "client", "--format", "ndjson", "pcaps"],
    ]
    .concat());
    let mut raw_names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let named = analyzer::client_names::ClientNames::load(std::path::Path::new(&format!(
        "{}/../docs/ja4-names.csv",
        env!("CARGO_MANIFEST_DIR")
    )))
    .unwrap();
    for r in records() {
        if let (Some(raw), Some(s)) = (r["ja4"].as_str(), r["ja4_stable"].as_str()) {
            let name = named.get(raw).unwrap_or_else(|| panic!("{raw} not named"));
            raw_names.entry(s.into()).or_default().insert(name.into());
        }
    }
    let mut stable_seen = 0;
    for l in stable.lines() {
        let o: Value = serde_json::from_str(l).unwrap();
        let fp = o["group"]["ja4_stable"].as_str().unwrap();
        let client = o["client"]
            .as_str()
            .unwrap_or_else(|| panic!("no client: {l}"));
        if let Some(want) = raw_names.get(fp) {
            assert!(want.contains(client), "{fp}: {client} not in {want:?}");
            stable_seen += 1;
        }
    }
    assert_eq!(stable_seen, raw_names.len(), "{stable}");
    for want in [
        "curl 7.88.1",
        "openssl s_client 3.0",
        "gnutls-cli 3.7",
        "aioquic",
    ] {
        assert!(seen.iter().any(|s| s == want), "{want} not in {seen:?}");
    }
    // Without names, no client key; with names but no ja4 dimension, none either.
    let plain = ok(&["--by", "ja4", "--format", "ndjson", "pcaps"]);
    assert!(!plain.contains("\"client\""));
    let no_ja4 = ok(&[
        &names[..],
        &["--by", "version", "--format", "ndjson", "pcaps"],
    ]
    .concat());
    assert!(!no_ja4.contains("\"client\""));
    let csv = ok(&[&names[..], &["--by", "ja4", "--format", "csv", "pcaps"]].concat());
    assert!(csv.starts_with("ja4,client,connections,"), "{csv}");
    // The default table's never-resume section, named.
    let table = ok(&[&names[..], &["pcaps"]].concat());
    let section = table
        .split("clients that never resume\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no never-resume section:\n{table}"));
    let head = section.lines().next().unwrap();
    assert!(
        head.starts_with("ja4_stable") && head.contains("client") && head.contains("full_no_offer"),
        "{head}"
    );
    assert!(section.contains("curl 7.88.1"), "{section}");
}

/// The never-resume section lists the fingerprints with the most full
/// handshakes that offered nothing or were declined, as the records say.
#[test]
fn never_resume_section_matches_the_records() {
    let recs = records();
    let mut missed: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for r in &recs {
        let Some(fp) = r["ja4_stable"].as_str() else {
            continue;
        };
        let e = missed.entry(fp.to_string()).or_default();
        let offered = r["offered"].as_array().map(|o| !o.is_empty());
        match (r["handshake"].as_str(), offered) {
            (Some("full"), Some(false)) => e.0 += 1,
            (Some("full"), Some(true)) => e.1 += 1,
            (Some("resumed"), _) => e.2 += 1,
            _ => {}
        }
    }
    let mut want: Vec<(&String, &(u64, u64, u64))> =
        missed.iter().filter(|(_, c)| c.0 + c.1 > 0).collect();
    want.sort_by(|a, b| (b.1 .0 + b.1 .1).cmp(&(a.1 .0 + a.1 .1)).then(a.0.cmp(b.0)));
    want.truncate(10);
    assert!(!want.is_empty());
    for args in [&["pcaps"][..], &["--by", "sni", "pcaps"]] {
        let table = ok(args);
        let section = table.split("clients that never resume\n").nth(1).unwrap();
        let rows: Vec<Vec<&str>> = section
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with('('))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), want.len(), "{section}");
        for (row, (ja4, (no_offer, declined, resumed))) in rows.iter().zip(&want) {
            assert_eq!(
                row[..4],
                [
                    ja4.as_str(),
                    &no_offer.to_string(),
                    &declined.to_string(),
                    &resumed.to_string()
                ],
                "{section}"
            );
        }
    }
}

#[test]
fn bad_names_file_is_an_error_with_its_line() {
    let dir = root().join("target/slicing-test");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad-names.csv");
    std::fs::write(
        &bad,
        "ja4,name\n# ok so far\nt13d0413h1_16476d049b0b_50cd2e2f76fc,curl\nt13d0413h1_16476d049b0b_50cd2e2f76fc\n",
    )
    .unwrap();
    let out = tlsrum(&[
        "--ja4-names",
        bad.to_str().unwrap(),
        "--format",
        "ndjson",
        "pcaps",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad-names.csv:4:"), "{err}");
    // Before anything was read: no records.
    assert!(out.stdout.is_empty());
    let out = tlsrum(&["--ja4-names", "/nonexistent/names.csv", "pcaps"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/names.csv"));
}

/// Without --by and --window, --format ndjson stays per-connection records.
#[test]
fn without_by_records_are_unchanged() {
    let recs = records();
    assert!(recs
        .iter()
        .all(|r| r.get("group").is_none() && r.get("ts").is_some()));
}
