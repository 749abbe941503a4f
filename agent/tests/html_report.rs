//! The HTML report in a real headless Chromium (Debian `chromium`, driven
//! by playwright-core from tests/html): it loads with no console errors and
//! no network requests, every chart draws, and the numbers on the page equal
//! aggregates computed here, independently, from the NDJSON of the same
//! captures (issue 14 included: the medians of ClientHello delay and think
//! times by name, and of the time split by kind). A screenshot is kept in
//! test-artifacts/.
//!
//! Issue 17: the 0-RTT counts equal the table's and the records' for every
//! capture; rows split TLS over TCP and QUIC as the table does; every table
//! is named (caption or heading); every chart has a y axis with ticks; a
//! long server name (a real openssl ClientHello's) is never clipped.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

#[derive(Default, Debug)]
struct Counts {
    connections: u64,
    full: u64,
    resumed_session_id: u64,
    resumed_ticket: u64,
    resumed_psk: u64,
    declined: u64,
    early_tried: u64,
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

/// Opens each (report, screenshot) in headless Chromium
/// (tests/html/inspect.mjs, one browser for all; screenshot `-`: none) and
/// returns what each page showed, after checking that it logged no error
/// and fetched nothing.
fn inspect_all(html_dir: &Path, pages: &[(PathBuf, PathBuf)]) -> Vec<Value> {
    let mut cmd = Command::new("node");
    cmd.arg(html_dir.join("inspect.mjs"));
    for (report, shot) in pages {
        cmd.arg(report).arg(shot);
    }
    let node = cmd.output().expect("node");
    assert!(
        node.status.success(),
        "{}",
        String::from_utf8_lossy(&node.stderr)
    );
    let out: Vec<Value> = String::from_utf8(node.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(out.len(), pages.len());
    for page in &out {
        let r = &page["report"];
        assert_eq!(page["errors"], Value::Array(vec![]), "console errors: {r}");
        assert_eq!(
            page["requests"],
            Value::Array(vec![]),
            "the page must fetch nothing: {r}"
        );
    }
    out
}

fn inspect(html_dir: &Path, report: &Path, shot: &Path) -> Value {
    inspect_all(html_dir, &[(report.into(), shot.into())]).remove(0)
}

/// Chromium and tests/html's playwright-core, or false (a skip; a failure
/// under CI=true).
fn have_chromium(html_dir: &Path) -> bool {
    if !Path::new("/usr/bin/chromium").exists()
        && std::env::var_os("CHROMIUM").is_none()
        && tool_missing("chromium")
    {
        return false;
    }
    html_dir.join("node_modules/playwright-core").exists()
        || !tool_missing("tests/html/node_modules (npm ci)")
}

/// A server name longer than any chart label or name column has room for.
const LONG_NAME: &str =
    "a-rather-long-server-name-for-layout-tests.eu-west-3.internal.shop.example.com";

/// A capture of one TLS-over-TCP connection to [`LONG_NAME`]: the TCP
/// handshake, then the ClientHello a real `openssl s_client` sent (read
/// here off a loopback socket), unanswered: an incomplete handshake.
fn long_name_capture(path: &Path) {
    use etherparse::PacketBuilder;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut client = Command::new("openssl")
        .args(["s_client", "-tls1_3", "-servername", LONG_NAME, "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl");
    let (mut sock, _) = listener.accept().unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The record header, then its length.
    let mut hello = vec![0u8; 5];
    sock.read_exact(&mut hello).unwrap();
    let len = u16::from_be_bytes([hello[3], hello[4]]) as usize;
    hello.resize(5 + len, 0);
    sock.read_exact(&mut hello[5..]).unwrap();
    let _ = client.kill();
    let _ = client.wait();

    let (c, s) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let (cport, sport) = (40_000u16, 443u16);
    let eth = || PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let frame = |b: etherparse::PacketBuilderStep<etherparse::TcpHeader>, payload: &[u8]| {
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    };
    let packets = [
        frame(
            eth().ipv4(c, s, 64).tcp(cport, sport, 1000, 64240).syn(),
            &[],
        ),
        frame(
            eth()
                .ipv4(s, c, 64)
                .tcp(sport, cport, 5000, 64240)
                .syn()
                .ack(1001),
            &[],
        ),
        frame(
            eth()
                .ipv4(c, s, 64)
                .tcp(cport, sport, 1001, 64240)
                .ack(5001),
            &[],
        ),
        frame(
            eth()
                .ipv4(c, s, 64)
                .tcp(cport, sport, 1001, 64240)
                .ack(5001)
                .psh(),
            &hello,
        ),
    ];
    let file = std::fs::File::create(path).unwrap();
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(file, header).unwrap();
    for (i, p) in packets.iter().enumerate() {
        let ts = Duration::from_secs_f64(1_700_000_000.0 + i as f64 * 0.001);
        w.write_packet(&PcapPacket::new(ts, p.len() as u32, p))
            .unwrap();
    }
}

/// Every table is named (a caption, or a heading right before it) and has
/// header cells; every chart has a y axis with ticks; every server name in
/// a table cell fits it (wrapped, not clipped) and every chart label lies
/// inside its chart, whole or cut with the whole name as its tooltip.
fn assert_layout(page: &Value) {
    for t in page["tables"].as_array().unwrap() {
        let named = [&t["caption"], &t["heading"]]
            .iter()
            .any(|v| v.as_str().is_some_and(|s| !s.is_empty()));
        assert!(named, "a table without a caption or heading: {t}");
        assert!(t["headerCells"].as_u64().unwrap() > 0, "no header: {t}");
    }
    for c in page["charts"].as_array().unwrap() {
        assert!(c["yAxis"].as_u64().unwrap() >= 1, "no y axis: {c}");
        // A value axis has at least two ticks, a category axis (bars) one a bar.
        let ticks = c["yTicks"].as_array().unwrap().len();
        let bars = c["labels"].as_array().unwrap().len();
        assert!(
            ticks >= if bars > 0 { bars } else { 2 },
            "y axis without ticks: {c}"
        );
        for l in c["labels"].as_array().unwrap() {
            assert_eq!(l["inside"], true, "label clipped: {l}");
            let (full, shown) = (l["full"].as_str().unwrap(), l["shown"].as_str().unwrap());
            if shown != full {
                let (head, tail) = shown.split_once('…').expect("a cut label has a …");
                assert!(full.starts_with(head) && full.ends_with(tail), "{l}");
                assert_eq!(l["title"].as_str(), Some(full), "tooltip: {l}");
            }
        }
    }
    for n in page["names"].as_array().unwrap() {
        assert!(
            n["scrollWidth"].as_u64() <= n["clientWidth"].as_u64(),
            "server name overflows its cell: {n}"
        );
        assert_eq!(n["text"], n["title"], "{n}");
    }
}

#[test]
fn report_renders_in_chromium_and_matches_the_records() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let html_dir = root.join("tests/html");
    if !have_chromium(&html_dir) {
        return;
    }
    let artifacts = root.join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let report = artifacts.join("report.html");
    let long = artifacts.join("long-server-name.pcap");
    long_name_capture(&long);
    let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(["replay", "--format", "ndjson", "--html"])
        .arg(&report)
        .arg(root.join("pcaps"))
        .arg(&long)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Aggregates from the records, computed here.
    let mut by_name: BTreeMap<String, Counts> = BTreeMap::new();
    let mut by_transport: BTreeMap<String, Counts> = BTreeMap::new();
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
        let name = r["sni"].as_str().unwrap_or("(no sni)");
        let transport = r["transport"].as_str().unwrap();
        // The table's rows: by name and transport, a total per transport, the total.
        for c in [
            by_name.entry(format!("{name}/{transport}")).or_default(),
            by_transport
                .entry(format!("TOTAL/{transport}"))
                .or_default(),
            &mut total,
        ] {
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
            // Tried: offered, whatever the outcome.
            match r["early_data"].as_str().unwrap() {
                "none" => {}
                e => {
                    c.early_tried += 1;
                    c.early_accepted += u64::from(e == "accepted");
                    c.early_rejected += u64::from(e == "rejected");
                }
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
    assert!(by_name.contains_key(&format!("{LONG_NAME}/tcp")));
    assert!(
        by_transport.contains_key("TOTAL/quic"),
        "QUIC captures in pcaps/"
    );

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

    assert_layout(&page);
    let labels: Vec<&Value> = charts
        .iter()
        .flat_map(|c| c["labels"].as_array().unwrap())
        .collect();
    assert!(
        labels
            .iter()
            .any(|l| l["full"] == format!("{LONG_NAME} (tcp)") && l["shown"] != l["full"]),
        "the long name is cut in the charts: {labels:?}"
    );
    assert!(
        page["names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["text"] == LONG_NAME),
        "the long name is in the table"
    );

    let m = &page["metrics"];
    let get = |k: &str| {
        m[k].as_str()
            .unwrap_or_else(|| panic!("no metric {k} on the page"))
    };
    // The headline's split is the table's.
    for t in ["tcp", "quic"] {
        assert_eq!(
            get(&format!("headline/{t}_connections")),
            by_transport[&format!("TOTAL/{t}")].connections.to_string()
        );
    }
    for (name, c) in by_name
        .iter()
        .chain(&by_transport)
        .chain([(&"TOTAL/all".to_string(), &total)])
    {
        for (k, v) in [
            ("connections", c.connections),
            ("full", c.full),
            ("resumed_session_id", c.resumed_session_id),
            ("resumed_ticket", c.resumed_ticket),
            ("resumed_psk", c.resumed_psk),
            ("declined", c.declined),
            ("early_tried", c.early_tried),
            ("early_accepted", c.early_accepted),
            ("early_rejected", c.early_rejected),
            ("failed", c.failed),
            ("incomplete", c.incomplete),
        ] {
            assert_eq!(get(&format!("{name}/{k}")), v.to_string(), "{name}/{k}");
        }
        let done = c.full + c.resumed_session_id + c.resumed_ticket + c.resumed_psk;
        let rate = if done == 0 {
            "-".to_string()
        } else {
            format!("{:.1}%", (done - c.full) as f64 / done as f64 * 100.0)
        };
        assert_eq!(get(&format!("{name}/resumption_rate")), rate, "{name}");
        if !name.starts_with("TOTAL/") {
            // The 0-RTT bar sums to the table's "tried".
            assert_eq!(
                get(&format!("early/{name}/tried")),
                c.early_tried.to_string(),
                "{name}"
            );
        }
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
    if !have_chromium(&html_dir) {
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
    assert_layout(&page);
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

/// Issue 17: for every capture in pcaps/ (and with its key log, where it
/// has one), the report's 0-RTT numbers (tried, accepted, rejected, per
/// row and in total, and the bar's length) equal the table's and those
/// counted here from the NDJSON records.
#[test]
fn zero_rtt_counts_agree_with_the_table_for_every_capture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let html_dir = root.join("tests/html");
    if !have_chromium(&html_dir) {
        return;
    }
    let dir = root.join("test-artifacts/html-0rtt");
    std::fs::create_dir_all(&dir).unwrap();
    let mut runs: Vec<(String, Vec<PathBuf>)> = Vec::new();
    let mut captures: Vec<PathBuf> = std::fs::read_dir(root.join("pcaps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng" || e == "pcap"))
        .collect();
    captures.sort();
    for cap in &captures {
        let stem = cap.file_stem().unwrap().to_str().unwrap().to_string();
        runs.push((stem.clone(), vec![cap.clone()]));
        let keylog = cap.with_extension("keylog");
        if keylog.exists() {
            runs.push((
                format!("{stem}.keylog"),
                vec!["--keylog".into(), keylog, cap.clone()],
            ));
        }
    }
    assert!(runs.len() > 30, "{} runs", runs.len());
    let bin = env!("CARGO_BIN_EXE_tlsrum");
    // (tried, accepted, rejected) by "name/transport" and "TOTAL/all", per run.
    let mut expected: Vec<BTreeMap<String, [u64; 3]>> = Vec::new();
    let mut pages = Vec::new();
    for (stem, args) in &runs {
        let report = dir.join(format!("{stem}.html"));
        let out = Command::new(bin)
            .args(["replay", "--format", "ndjson", "--html"])
            .arg(&report)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{stem}");
        let mut counts: BTreeMap<String, [u64; 3]> = BTreeMap::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            let e = r["early_data"].as_str().unwrap();
            let key = format!(
                "{}/{}",
                r["sni"].as_str().unwrap_or("(no sni)"),
                r["transport"].as_str().unwrap()
            );
            for k in [key, "TOTAL/all".into()] {
                let c = counts.entry(k).or_default();
                c[0] += u64::from(e != "none");
                c[1] += u64::from(e == "accepted");
                c[2] += u64::from(e == "rejected");
            }
        }
        // The table's "0rtt:try/ok/rej" of its total row.
        let table = Command::new(bin).arg("replay").args(args).output().unwrap();
        assert!(table.status.success(), "{stem}");
        let table = String::from_utf8(table.stdout).unwrap();
        let mut lines = table.lines();
        let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let col = head.iter().position(|h| *h == "0rtt:try/ok/rej").unwrap();
        let total_row: Vec<&str> = lines
            .find(|l| l.starts_with("TOTAL") && l.split_whitespace().nth(1) == Some("all"))
            .unwrap_or_else(|| panic!("{stem}: no total row:\n{table}"))
            .split_whitespace()
            .collect();
        let t = counts.get("TOTAL/all").copied().unwrap_or_default();
        assert_eq!(
            total_row[col],
            format!("{}/{}/{}", t[0], t[1], t[2]),
            "{stem}: the table's 0-RTT vs the records'"
        );
        expected.push(counts);
        pages.push((report, PathBuf::from("-")));
    }
    assert!(
        expected.iter().any(|c| c["TOTAL/all"][0] > 0),
        "no capture with 0-RTT"
    );
    for (((stem, _), counts), page) in runs
        .iter()
        .zip(&expected)
        .zip(inspect_all(&html_dir, &pages))
    {
        let m = &page["metrics"];
        let get = |k: &str| {
            m[k].as_str()
                .unwrap_or_else(|| panic!("{stem}: no metric {k} on the page"))
                .to_string()
        };
        for (key, c) in counts {
            for (i, what) in ["tried", "accepted", "rejected"].iter().enumerate() {
                assert_eq!(
                    get(&format!("{key}/early_{what}")),
                    c[i].to_string(),
                    "{stem}: {key} 0-RTT {what}"
                );
            }
            if key != "TOTAL/all" {
                assert_eq!(
                    get(&format!("early/{key}/tried")),
                    c[0].to_string(),
                    "{stem}: {key} bar"
                );
            }
        }
    }
}
