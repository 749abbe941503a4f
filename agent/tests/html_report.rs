//! The HTML report in a real headless Chromium (Debian `chromium`, driven
//! by playwright-core from tests/html): it loads with no console errors and
//! no network requests, every chart draws, and the numbers on the page equal
//! aggregates computed here, independently, from the NDJSON of the same
//! captures. A screenshot is kept in test-artifacts/.

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
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
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
        }
        if let Some(n) = r["timing"]["round_trips"].as_u64() {
            round_trips[(n as usize).min(4)] += 1;
        }
    }
    assert!(total.connections > 20);

    let shot = artifacts.join("html-report.png");
    let node = Command::new("node")
        .arg(html_dir.join("inspect.mjs"))
        .arg(&report)
        .arg(&shot)
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
    let charts = page["charts"].as_array().unwrap();
    assert!(charts.len() >= 7, "{charts:?}");
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
        // Medians come from ~1%-wide histogram buckets: within 2% of the exact one.
        let mut v = c.handshake_full.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let exact = v[v.len().div_ceil(2) - 1];
        let shown: f64 = get(&format!("{name}/handshake_full_p50_ms"))
            .parse()
            .unwrap();
        assert!(
            (shown - exact).abs() <= exact * 0.02 + 0.01,
            "{name}: median {shown} vs exact {exact}"
        );
    }
    for (i, n) in round_trips.iter().enumerate() {
        assert_eq!(get(&format!("total/round_trips_{i}")), n.to_string());
    }
}
