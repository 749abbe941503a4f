//! The HTML report in a real headless Chromium (Debian `chromium`, driven
//! by playwright-core from tests/html): it loads with no console errors and
//! no network requests, every chart draws, and the numbers on the page equal
//! aggregates computed here, independently, from the NDJSON of the same
//! captures (issue 14 included: the medians of ClientHello delay and think
//! times by name, and of the time split by kind). A screenshot is kept in
//! test-artifacts/.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[derive(Default, Debug)]
struct Counts {
    connections: u64,
    full: u64,
    resumed_session_id: u64,
    resumed_ticket: u64,
    resumed_psk: u64,
    declined: u64,
    early_attempted: u64,
    early_accepted: u64,
    early_rejected: u64,
    failed: u64,
    incomplete: u64,
    handshake_full: Vec<f64>,
    avoidable: f64,
    client_hello_delay: Vec<f64>,
    server_think: Vec<f64>,
    client_think: Vec<f64>,
}

/// The exact median as the report takes it (the lower one of an even
/// count), or None.
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (!v.is_empty()).then(|| v[v.len().div_ceil(2) - 1])
}

/// A median shown on the page against the exact one: the page's come from
/// ~1%-wide histogram buckets, so within 2% (and its two decimals); "-"
/// where there is nothing.
fn assert_median(shown: &str, exact: Option<f64>, what: &str) {
    match exact {
        None => assert_eq!(shown, "-", "{what}"),
        Some(exact) => {
            let shown: f64 = shown
                .parse()
                .unwrap_or_else(|_| panic!("{what}: {shown:?}"));
            assert!(
                (shown - exact).abs() <= exact * 0.02 + 0.01,
                "{what}: median {shown} vs exact {exact}"
            );
        }
    }
}

fn tool_missing(what: &str) -> bool {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    assert!(
        !ci,
        "CI=true but {what} is missing (scripts/install-deps.sh installs it)"
    );
    eprintln!("skipping: {what} is missing");
    true
}

/// Opens `report` in headless Chromium (tests/html/inspect.mjs), saves a
/// screenshot to `shot` and returns what the page showed, after checking
/// that it logged no error and fetched nothing.
fn inspect(html_dir: &Path, report: &Path, shot: &Path) -> Value {
    let node = Command::new("node")
        .arg(html_dir.join("inspect.mjs"))
        .arg(report)
        .arg(shot)
        .output()
        .expect("node");
    assert!(
        node.status.success(),
        "{}",
        String::from_utf8_lossy(&node.stderr)
    );
    let page: Value = serde_json::from_slice(&node.stdout).unwrap();
    assert_eq!(page["errors"], Value::Array(vec![]), "console errors");
    assert_eq!(
        page["requests"],
        Value::Array(vec![]),
        "the page must fetch nothing"
    );
    page
}

#[test]
fn report_renders_in_chromium_and_matches_the_records() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let html_dir = root.join("tests/html");
    if !Path::new("/usr/bin/chromium").exists()
        && std::env::var_os("CHROMIUM").is_none()
        && tool_missing("chromium")
    {
        return;
    }
    if !html_dir.join("node_modules/playwright-core").exists()
        && tool_missing("tests/html/node_modules (npm ci)")
    {
        return;
    }
    let artifacts = root.join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let report = artifacts.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--format", "ndjson", "--html"])
        .arg(&report)
        .arg(root.join("pcaps"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Aggregates from the records, computed here.
    let mut by_name: BTreeMap<String, Counts> = BTreeMap::new();
    let mut total = Counts::default();
    let mut round_trips = [0u64; 5];
    // Where the time goes, by kind: (network, server, client) of every
    // handshake whose split is known.
    let mut split: BTreeMap<String, [Vec<f64>; 3]> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let t = |f: &str| r["timing"][f].as_f64();
        if let (Some(hs), Some(server), Some(client)) =
            (t("handshake"), t("server_think"), t("client_think"))
        {
            let kind = r["handshake"].as_str().unwrap().to_string();
            let parts = split.entry(kind).or_default();
            for (v, x) in parts
                .iter_mut()
                .zip([(hs - server - client).max(0.0), server, client])
            {
                v.push(x);
            }
        }
        let name = r["sni"].as_str().unwrap_or("(no sni)").to_string();
        for c in [by_name.entry(name).or_default(), &mut total] {
            c.connections += 1;
            match (r["handshake"].as_str().unwrap(), r["resumption"].as_str()) {
                ("full", _) => c.full += 1,
                ("resumed", Some("session_id")) => c.resumed_session_id += 1,
                ("resumed", Some("ticket")) => c.resumed_ticket += 1,
                ("resumed", _) => c.resumed_psk += 1,
                ("failed", _) => c.failed += 1,
                _ => c.incomplete += 1,
            }
            if r["handshake"] == "full" && !r["offered"].as_array().unwrap().is_empty() {
                c.declined += 1;
            }
            match r["early_data"].as_str().unwrap() {
                "attempted" => c.early_attempted += 1,
                "accepted" => c.early_accepted += 1,
                "rejected" => c.early_rejected += 1,
                _ => {}
            }
            if r["handshake"] == "full" {
                if let Some(ms) = r["timing"]["handshake"].as_f64() {
                    c.handshake_full.push(ms);
                }
            }
            c.avoidable += r["timing"]["avoidable"].as_f64().unwrap_or(0.0);
            for (v, f) in [
                (&mut c.client_hello_delay, "client_hello_delay"),
                (&mut c.server_think, "server_think"),
                (&mut c.client_think, "client_think"),
            ] {
                v.extend(t(f));
            }
        }
        if let Some(n) = r["timing"]["round_trips"].as_u64() {
            round_trips[(n as usize).min(4)] += 1;
        }
    }
    assert!(total.connections > 20);

    let shot = artifacts.join("html-report.png");
    let page = inspect(&html_dir, &report, &shot);
    let charts = page["charts"].as_array().unwrap();
    assert!(charts.len() >= 8, "{charts:?}");
    assert!(
        charts.iter().any(|c| c["id"] == "time-split"),
        "no time-split chart: {charts:?}"
    );
    for c in charts {
        assert!(
            c["drawn"].as_u64().unwrap() > 0 && c["width"].as_f64().unwrap() > 0.0,
            "blank chart {c}"
        );
    }
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "screenshot kept"
    );

    let m = &page["metrics"];
    let get = |k: &str| {
        m[k].as_str()
            .unwrap_or_else(|| panic!("no metric {k} on the page"))
    };
    for (name, c) in by_name.iter().chain([(&"TOTAL".to_string(), &total)]) {
        for (k, v) in [
            ("connections", c.connections),
            ("full", c.full),
            ("resumed_session_id", c.resumed_session_id),
            ("resumed_ticket", c.resumed_ticket),
            ("resumed_psk", c.resumed_psk),
            ("declined", c.declined),
            ("early_attempted", c.early_attempted),
            ("early_accepted", c.early_accepted),
            ("early_rejected", c.early_rejected),
            ("failed", c.failed),
            ("incomplete", c.incomplete),
        ] {
            assert_eq!(get(&format!("{name}/{k}")), v.to_string(), "{name}/{k}");
        }
        let done = c.full + c.resumed_session_id + c.resumed_ticket + c.resumed_psk;
        let rate = format!("{:.1}%", (done - c.full) as f64 / done as f64 * 100.0);
        assert_eq!(get(&format!("{name}/resumption_rate")), rate, "{name}");
        assert_eq!(
            get(&format!("{name}/avoidable_ms")),
            format!("{:.1}", c.avoidable),
            "{name}"
        );
        for (m, v) in [
            ("handshake_full", &c.handshake_full),
            ("client_hello_delay", &c.client_hello_delay),
            ("server_think", &c.server_think),
            ("client_think", &c.client_think),
        ] {
            let k = format!("{name}/{m}_p50_ms");
            assert_median(get(&k), median(v), &k);
        }
    }
    for kind in ["full", "resumed"] {
        let parts = split.get(kind).unwrap_or_else(|| panic!("no {kind} split"));
        assert_eq!(
            get(&format!("split/{kind}/handshakes")),
            parts[0].len().to_string(),
            "{kind}"
        );
        for (part, v) in ["network", "server", "client"].iter().zip(parts) {
            let k = format!("split/{kind}/{part}_p50_ms");
            assert_median(get(&k), median(v), &k);
        }
    }
    for (i, n) in round_trips.iter().enumerate() {
        assert_eq!(get(&format!("total/round_trips_{i}")), n.to_string());
    }
}

/// Issue 15: with `--by` and `--ja4-names`, the report gains the by-table,
/// the never-resume section (names included) and the time series by
/// version and by family; each renders in Chromium and its numbers are
/// the records'.
#[test]
fn slicing_sections_render_in_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let html_dir = root.join("tests/html");
    if !Path::new("/usr/bin/chromium").exists()
        && std::env::var_os("CHROMIUM").is_none()
        && tool_missing("chromium")
    {
        return;
    }
    if !html_dir.join("node_modules/playwright-core").exists()
        && tool_missing("tests/html/node_modules (npm ci)")
    {
        return;
    }
    let artifacts = root.join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let report = artifacts.join("report-slicing.html");
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .current_dir(&root)
        .args([
            "replay",
            "--format",
            "ndjson",
            "--by",
            "version",
            "--ja4-names",
        ])
        .arg("docs/ja4-names.csv")
        .arg("--html")
        .arg(&report)
        .arg("pcaps")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The records, for the numbers (with --by, stdout has the aggregates).
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .current_dir(&root)
        .args(["replay", "--format", "ndjson", "pcaps"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut by_version: BTreeMap<String, u64> = BTreeMap::new();
    let mut missed: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let v = r["version"].as_str().unwrap_or("(unknown)").to_string();
        *by_version.entry(v).or_default() += 1;
        // The never-resume table groups clients by ja4_stable.
        if let (Some(fp), Some("full")) = (r["ja4_stable"].as_str(), r["handshake"].as_str()) {
            if r["offered"].is_array() {
                *missed.entry(fp.to_string()).or_default() += 1;
            }
        }
    }
    let shot = artifacts.join("html-report-slicing.png");
    let page = inspect(&html_dir, &report, &shot);
    let charts = page["charts"].as_array().unwrap();
    for id in [
        "series-version-resumption",
        "series-version-handshake",
        "series-family-resumption",
        "series-family-handshake",
    ] {
        let c = charts
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no chart {id}: {charts:?}"));
        // The frame, the grid, and at least one line per value.
        assert!(c["drawn"].as_u64().unwrap() > 6, "{c}");
        assert!(c["width"].as_f64().unwrap() > 0.0, "{c}");
    }
    let m = &page["metrics"];
    let get = |k: &str| {
        m[k].as_str()
            .unwrap_or_else(|| panic!("no metric {k} on the page"))
            .to_string()
    };
    for (v, n) in &by_version {
        assert_eq!(get(&format!("by/{v}/connections")), n.to_string(), "{v}");
    }
    let total: u64 = by_version.values().sum();
    assert_eq!(get("by/TOTAL/connections"), total.to_string());
    // The never-resume table: the busiest missing fingerprint, named.
    let (top, n) = missed
        .iter()
        .max_by_key(|(k, n)| (**n, std::cmp::Reverse(*k)))
        .unwrap();
    let shown: u64 = get(&format!("never_resume/{top}/full_no_offer"))
        .parse::<u64>()
        .unwrap()
        + get(&format!("never_resume/{top}/declined"))
            .parse::<u64>()
            .unwrap();
    assert_eq!(shown, *n, "{top}");
    assert_ne!(get(&format!("never_resume/{top}/client")), "-");
    // Points of the series carry their values.
    let points = m
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("series/version/"))
        .count();
    assert!(points >= 2, "{points} series points");
}
