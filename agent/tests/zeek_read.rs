//! Zeek ssl.log as input: `replay` reads logs Zeek itself wrote (TSV and
//! JSON, plain and gzip) into records whose counts per server name and
//! kind follow the rows; damaged lines are named and the rest kept; `live
//! --zeek-log` follows a log through Zeek's rotation and copytruncate and
//! counts every row written after its start once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

fn tlsrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tlsrum"))
        .args(args)
        .output()
        .unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/zeek")
        .join(name)
}

/// A directory of this test's own, emptied first; removed when the test
/// passes, kept for a look when it fails.
fn scratch(tag: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("tlsrum-zeek-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// btest canonified the baselines' times: each becomes a real one again.
fn with_times(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split("XXXXXXXXXX.XXXXXX").enumerate() {
        if i > 0 {
            out.push_str(&format!("{}.{:06}", 1_500_000_000 + i, i));
        }
        out.push_str(part);
    }
    out
}

fn records(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The data rows of a TSV log as column -> value maps, read here by the
/// header's names alone (not by tlsrum's reader), `-` left out.
fn tsv_rows(text: &str) -> Vec<Map<String, Value>> {
    let mut fields: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("#fields\t") {
            fields = f.split('\t').map(str::to_string).collect();
        } else if !line.starts_with('#') && !line.is_empty() {
            let mut row = Map::new();
            for (k, v) in fields.iter().zip(line.split('\t')) {
                if v != "-" {
                    row.insert(k.clone(), Value::String(v.to_string()));
                }
            }
            out.push(row);
        }
    }
    out
}

/// Counts of (sni, handshake) over records.
fn by_sni_kind(recs: &[Value]) -> std::collections::BTreeMap<(String, String), usize> {
    let mut m = std::collections::BTreeMap::new();
    for r in recs {
        let sni = r["sni"].as_str().unwrap_or("-").to_string();
        let kind = r["handshake"].as_str().unwrap_or("null").to_string();
        *m.entry((sni, kind)).or_default() += 1;
    }
    m
}

/// The tls13 baseline, times restored, in a file of its own.
fn tls13_log(dir: &Path) -> (PathBuf, String) {
    let text = with_times(&std::fs::read_to_string(fixture("tls13-ssl-out.log")).unwrap());
    let p = dir.join("ssl.log");
    std::fs::write(&p, &text).unwrap();
    (p, text)
}

#[test]
fn zeek_baseline_counts_per_server_name_and_kind() {
    let dir = scratch("counts");
    let (log, text) = tls13_log(&dir);
    let out = tlsrum(&["replay", "--format", "ndjson", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&out);
    // What the rows say, by Zeek's own columns.
    let rows = tsv_rows(&text);
    assert_eq!(recs.len(), rows.len());
    let mut want = std::collections::BTreeMap::new();
    for r in &rows {
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
        let kind = match (s("established").as_str(), s("resumed").as_str()) {
            ("T", "T") => "resumed",
            ("T", _) => "full",
            _ if s("last_alert") != "-" => "failed",
            _ => "incomplete",
        };
        *want
            .entry((s("server_name"), kind.to_string()))
            .or_default() += 1;
    }
    assert_eq!(by_sni_kind(&recs), want);
    for (rec, row) in recs.iter().zip(&rows) {
        assert_eq!(
            rec["client"],
            format!(
                "{}:{}",
                row["id.orig_h"].as_str().unwrap(),
                row["id.orig_p"].as_str().unwrap()
            )
        );
        let alert = row.get("last_alert").and_then(Value::as_str);
        if rec["handshake"] == "failed" {
            assert_eq!(rec["failure"], format!("alert:{}", alert.unwrap()));
        }
        if row.contains_key("version") {
            // TLSv13 and its drafts.
            assert_eq!(rec["version"], "TLS1.3", "{row:?}");
        } else {
            assert!(rec["version"].is_null());
        }
        assert_eq!(rec["timing"]["handshake"], Value::Null);
        assert_eq!(rec["notes"], serde_json::json!(["zeek_ssl_log"]));
    }
    // As kept in Zeek's repository, with btest's `XXXXXXXXXX.XXXXXX`:
    // every row is named as damaged, nothing is made up.
    let raw = tlsrum(&[
        "replay",
        "--format",
        "ndjson",
        fixture("tls13-ssl-out.log").to_str().unwrap(),
    ]);
    assert_eq!(raw.status.code(), Some(1));
    assert!(records(&raw).is_empty());
    let err = stderr(&raw);
    assert!(
        err.contains("tls13-ssl-out.log:10: ts: `XXXXXXXXXX.XXXXXX` is not a time"),
        "{err}"
    );
    assert_eq!(err.matches("is not a time").count(), rows.len(), "{err}");
}

#[test]
fn older_bro_columns_and_dtls_rows() {
    let out = tlsrum(&[
        "replay",
        "--format",
        "ndjson",
        fixture("basic-bro-ssl.log").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&out);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["sni"], "ssl.gstatic.com");
    assert_eq!(recs[0]["version"], "TLS1.0");
    assert_eq!(recs[0]["cipher"], "TLS_ECDHE_RSA_WITH_RC4_128_SHA");
    // Bro 2.1 logged no `established`: the kind is not known.
    assert!(recs[0]["handshake"].is_null());
    let dir = scratch("dtls");
    let dtls = dir.join("dtls.log");
    std::fs::write(
        &dtls,
        with_times(&std::fs::read_to_string(fixture("dtls-ssl.log")).unwrap()),
    )
    .unwrap();
    let out = tlsrum(&[
        "replay",
        "--stats",
        "--format",
        "ndjson",
        dtls.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(records(&out).is_empty());
    let err = stderr(&out);
    assert!(err.contains("1 DTLS rows skipped"), "{err}");
    let stats: Value = serde_json::from_str(&err[err.find('{').unwrap()..]).unwrap();
    assert_eq!(stats["zeek"]["dtls_rows"], 1);
    assert_eq!(stats["zeek"]["rows"], 0);
}

/// Zeek's JSON writer's form of TSV rows: numbers, bools, arrays, unset
/// fields left out.
fn as_json(text: &str) -> String {
    let mut types: Vec<String> = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    let mut out = String::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("#fields\t") {
            fields = f.split('\t').map(str::to_string).collect();
        } else if let Some(t) = line.strip_prefix("#types\t") {
            types = t.split('\t').map(str::to_string).collect();
        } else if !line.starts_with('#') && !line.is_empty() {
            let mut o = Map::new();
            for ((k, t), v) in fields.iter().zip(&types).zip(line.split('\t')) {
                let v = match (t.as_str(), v) {
                    (_, "-") => continue,
                    (t, "(empty)") if t.contains('[') => Value::Array(vec![]),
                    (t, v) if t.contains('[') => {
                        v.split(',').map(|e| Value::String(e.into())).collect()
                    }
                    ("time" | "port" | "count", v) => serde_json::from_str(v).unwrap(),
                    ("bool", v) => Value::Bool(v == "T"),
                    (_, v) => Value::String(v.into()),
                };
                o.insert(k.clone(), v);
            }
            out.push_str(&serde_json::to_string(&o).unwrap());
            out.push('\n');
        }
    }
    out
}

#[test]
fn json_tsv_and_gzip_give_the_same_aggregates() {
    let dir = scratch("forms");
    let (tsv, text) = tls13_log(&dir);
    let json = dir.join("ssl.json");
    std::fs::write(&json, as_json(&text)).unwrap();
    let gz = dir.join("ssl.json.gz");
    let status = Command::new("gzip")
        .args(["-kc", json.to_str().unwrap()])
        .stdout(std::fs::File::create(&gz).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let run = |p: &Path, args: &[&str]| {
        let mut a = vec!["replay"];
        a.extend_from_slice(args);
        a.push(p.to_str().unwrap());
        let o = tlsrum(&a);
        assert_eq!(o.status.code(), Some(0), "{}: {}", p.display(), stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let records = run(&tsv, &["--format", "ndjson"]);
    assert_eq!(records.lines().count(), tsv_rows(&text).len());
    for form in [&json, &gz] {
        assert_eq!(
            run(form, &["--format", "ndjson"]),
            records,
            "{}",
            form.display()
        );
        assert_eq!(
            run(form, &["--by", "sni,version", "--format", "csv"]),
            run(&tsv, &["--by", "sni,version", "--format", "csv"])
        );
    }
    // Told by content, whatever the name: a log named like a capture.
    let odd = dir.join("trace.pcap");
    std::fs::copy(&json, &odd).unwrap();
    assert_eq!(run(&odd, &["--format", "ndjson"]), records);
}

#[test]
fn captures_and_zeek_logs_in_one_run() {
    let capture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps/openssl-openssl-tls13-psk.pcapng");
    let alone = records(&tlsrum(&[
        "replay",
        "--format",
        "ndjson",
        capture.to_str().unwrap(),
    ]));
    let docs = fixture("zeek-docs-ssl.json");
    let out = tlsrum(&[
        "replay",
        "--format",
        "ndjson",
        capture.to_str().unwrap(),
        docs.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&out);
    let from_docs = std::fs::read_to_string(&docs).unwrap().lines().count();
    assert_eq!(recs.len(), alone.len() + from_docs);
    let named = |name: &str| {
        recs.iter()
            .filter(|r| r["capture"].as_str().is_some_and(|c| c.ends_with(name)))
            .count()
    };
    assert_eq!(named("tls13-psk.pcapng"), alone.len());
    assert_eq!(named("zeek-docs-ssl.json"), from_docs);
    // The table's footer counts the rows as connections.
    let table = tlsrum(&["replay", docs.to_str().unwrap()]);
    let footer = String::from_utf8_lossy(&table.stdout);
    assert!(
        footer.contains(&format!("{from_docs} TLS-over-TCP")),
        "{footer}"
    );
}

/// One damaged input: its exit status, its stderr, and the records kept.
fn damaged(name: &str, text: &str) -> (Option<i32>, String, Vec<Value>) {
    let dir = scratch(name);
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    let out = tlsrum(&["replay", "--format", "ndjson", p.to_str().unwrap()]);
    (out.status.code(), stderr(&out), records(&out))
}

/// Line number (1-based) of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn missing_fields_header_names_its_rows_and_keeps_the_others() {
    let text = with_times(&std::fs::read_to_string(fixture("tls13-ssl-out.log")).unwrap());
    // The third log's #fields line removed.
    let third = text.match_indices("#fields").nth(2).unwrap().0;
    let end = third + text[third..].find('\n').unwrap() + 1;
    let cut = format!("{}{}", &text[..third], &text[end..]);
    let (code, err, recs) = damaged("nofields.log", &cut);
    assert_eq!(code, Some(1), "{err}");
    let rows = tsv_rows(&text).len();
    assert_eq!(
        recs.len(),
        rows - 2,
        "the third log's two rows are lost, no other"
    );
    let first_bad = line_of(&cut, "192.150.187.20\t54980");
    assert!(
        err.contains(&format!(
            "nofields.log:{first_bad}: a row before any #fields line"
        )),
        "{err}"
    );
}

#[test]
fn wrong_column_count_type_and_truncated_last_line() {
    let text = with_times(&std::fs::read_to_string(fixture("tls13-ssl-out.log")).unwrap());
    let rows = tsv_rows(&text).len();
    // A row cut short in the middle of the file.
    let victim = text.lines().find(|l| l.contains("53994")).unwrap();
    let short: String = victim.split('\t').take(8).collect::<Vec<_>>().join("\t");
    let (code, err, recs) = damaged("short.log", &text.replace(victim, &short));
    assert_eq!((code, recs.len()), (Some(1), rows - 1), "{err}");
    assert!(
        err.contains(&format!(
            "short.log:{}: 8 columns where #fields names 20",
            line_of(&text, "53994")
        )),
        "{err}"
    );
    // A bool that is not one.
    let edited = victim.replacen("\tF\t-\t-\tF\t", "\tmaybe\t-\t-\tF\t", 1);
    assert_ne!(edited, victim);
    let (code, err, recs) = damaged("type.log", &text.replace(victim, &edited));
    assert_eq!((code, recs.len()), (Some(1), rows - 1), "{err}");
    assert!(
        err.contains("resumed: `maybe` is not a bool (as #types says)"),
        "{err}"
    );
    // The file cut in its last row (no #close, no newline).
    let last = text.lines().rfind(|l| !l.starts_with('#')).unwrap();
    let at = text.rfind(last).unwrap() + last.len() / 2;
    let (code, err, recs) = damaged("cut.log", &text[..at]);
    assert_eq!((code, recs.len()), (Some(1), rows - 1), "{err}");
    assert!(
        err.contains(&format!("cut.log:{}: ", line_of(&text, last))),
        "{err}"
    );
}

#[test]
fn garbage_json_lines_and_files() {
    let docs = std::fs::read_to_string(fixture("zeek-docs-ssl.json")).unwrap();
    let n = docs.lines().count();
    let mut lines: Vec<&str> = docs.lines().collect();
    lines.insert(2, "{\"ts\": 1598983678.5, \"id.orig_h\": ");
    lines.insert(4, "not json at all");
    let (code, err, recs) = damaged("garbage.json", &(lines.join("\n") + "\n"));
    assert_eq!((code, recs.len()), (Some(1), n), "{err}");
    assert!(
        err.contains("garbage.json:3: not a JSON object")
            && err.contains("garbage.json:5: not a JSON object"),
        "{err}"
    );
    // Nothing usable and no header: nothing could be read.
    let (code, err, recs) = damaged("junk.json", "{nope\n{still not\n");
    assert_eq!((code, recs.len()), (Some(2), 0), "{err}");
    assert!(
        err.contains("junk.json:1:") && err.contains("neither a capture nor a Zeek ssl.log"),
        "{err}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// Sum of a metric's series (`name{…} value` and `name value`).
fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn live_follows_rotation_and_copytruncate_without_loss_or_doubles() {
    let dir = scratch("live");
    let text = std::fs::read_to_string(fixture("tls13-ssl-out.log")).unwrap();
    // One header block as Zeek writes it (with a real #open) and a row template.
    let header: String = text
        .lines()
        .skip(1)
        .take(8)
        .map(|l| {
            format!(
                "{}\n",
                l.replace("#open XXXX-XX-XX-XX-XX-XX", "#open\t2026-01-01-00-00-00")
            )
        })
        .collect();
    let mut n = 0u32;
    let mut row = |name: &str, resumed: bool| {
        n += 1;
        format!(
            "1700000000.{n:06}\tC{n}\t10.0.0.1\t{}\t10.0.0.2\t443\tTLSv13\tTLS_AES_128_GCM_SHA256\tx25519\t{name}\t{}\t-\t-\tT\t-\t-\t-\t-\t-\t-\n",
            20000 + n,
            if resumed { "T" } else { "F" }
        )
    };
    let log = dir.join("ssl.log");
    let append = |s: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(s.as_bytes())
            .unwrap();
    };
    // Before the agent starts: not counted.
    append(&(header.clone() + &row("before.example", false) + &row("before.example", true)));
    let port = free_port();
    let _agent = Child(
        Command::new(env!("CARGO_BIN_EXE_tlsrum"))
            .args([
                "live",
                "--zeek-log",
                log.to_str().unwrap(),
                "--metrics",
                &format!("127.0.0.1:{port}"),
                "--duration",
                "60",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let wait = |what: &str, ok: &dyn Fn(&str) -> bool| -> String {
        let start = Instant::now();
        loop {
            if let Some(m) = scrape(port) {
                if ok(&m) {
                    return m;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("the agent to read the existing rows", &|m| {
        total(m, "tlsrum_zeek_skipped_existing_total") == 2.0
    });
    // Zeek's rotation: rows, then the rename and a new file at once.
    append(&(row("a.example", false) + &row("a.example", true) + &row("b.example", true)));
    std::fs::rename(&log, dir.join("ssl.2026-01-01-00-00-00.log")).unwrap();
    append(&(header.clone() + &row("a.example", true) + &row("c.example", false)));
    wait("the rotation", &|m| {
        total(m, "tlsrum_zeek_rotations_total") == 1.0 && total(m, "tls_handshakes_total") == 5.0
    });
    append(&row("c.example", true));
    // logrotate's copytruncate: the file emptied in place, rows go on.
    wait("the row after the rotation", &|m| {
        total(m, "tls_handshakes_total") == 6.0
    });
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    wait("the truncation", &|m| {
        total(m, "tlsrum_zeek_rotations_total") == 2.0
    });
    append(&(row("a.example", false) + &row("d.example", true)));
    // The agent's own counters are brought up to date each second.
    let m = wait("every row", &|m| {
        total(m, "tls_handshakes_total") == 8.0 && total(m, "tlsrum_zeek_rows_total") == 8.0
    });
    // Give a doubled row time to show, then check once more.
    std::thread::sleep(Duration::from_millis(1500));
    let m2 = scrape(port).unwrap_or(m);
    assert_eq!(
        total(&m2, "tls_handshakes_total"),
        8.0,
        "rows written after start, once each"
    );
    assert_eq!(total(&m2, "tlsrum_zeek_rows_total"), 8.0);
    assert_eq!(total(&m2, "tlsrum_zeek_bad_lines_total"), 0.0);
    let resumed: f64 = m2
        .lines()
        .filter(|l| l.starts_with("tls_handshakes_total{") && l.contains("kind=\"resumed\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(resumed, 5.0);
    assert!(
        !m2.lines().any(|l| l.starts_with("tls_handshakes_total{")
            && l.contains("before.example")
            && !l.ends_with(" 0")),
        "rows written before the start are not counted"
    );
}

/// The fields Zeek's columns carry, per connection, of TLS-over-TCP records
/// (ssl.log does not say which rows are QUIC), with the kind as Zeek's
/// `established`/`resumed` can tell it: a handshake that did not complete
/// is one kind (Zeek does not tell a reset from an alert-less end).
fn zeek_view(recs: &[Value]) -> Vec<String> {
    let mut rows: Vec<String> = recs
        .iter()
        .filter(|r| r["transport"] != "quic")
        .map(|r| {
            let kind = match r["handshake"].as_str() {
                Some("failed" | "incomplete") => "not completed",
                Some(k) => k,
                None => "null",
            };
            format!(
                "{} {} sni={} version={} cipher={} alpn={} {kind}",
                r["client"], r["server"], r["sni"], r["version"], r["cipher"], r["alpn_negotiated"]
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Round trip: every capture in pcaps/ through `--format zeek` and
/// `--format zeek-json`, read back: the same connections with the same
/// server name, version, cipher, negotiated protocol and kind, and the
/// same table per server name and kind. These captures' programs label
/// their kinds themselves, and Zeek's `resumed` rule agrees with tlsrum's
/// on them (docs/zeek.md lists where the two rules part).
#[test]
fn captures_written_as_zeek_logs_read_back_the_same() {
    let dir = scratch("roundtrip");
    let pcaps = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps");
    let mut captures: Vec<PathBuf> = std::fs::read_dir(&pcaps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng"))
        .collect();
    captures.sort();
    assert!(captures.len() >= 10, "{}", pcaps.display());
    let mut compared = 0;
    for cap in &captures {
        let c = cap.to_str().unwrap();
        let original = tlsrum(&["replay", "--format", "ndjson", c]);
        assert_eq!(
            original.status.code(),
            Some(0),
            "{c}: {}",
            stderr(&original)
        );
        let want = zeek_view(&records(&original));
        for (format, name) in [("zeek", "ssl.log"), ("zeek-json", "ssl.json")] {
            let written = tlsrum(&["replay", "--format", format, c]);
            assert_eq!(written.status.code(), Some(0), "{c}: {}", stderr(&written));
            let log = dir.join(name);
            std::fs::write(&log, &written.stdout).unwrap();
            let l = log.to_str().unwrap();
            let back = tlsrum(&["replay", "--format", "ndjson", l]);
            assert_eq!(
                back.status.code(),
                Some(0),
                "{c} {format}: {}",
                stderr(&back)
            );
            let got = records(&back);
            assert!(
                got.iter().all(|r| r["notes"][0] == "zeek_ssl_log"),
                "{c} {format}"
            );
            if want.len() == got.len() {
                // QUIC rows come back as TCP: only TCP captures compare.
                assert_eq!(zeek_view(&got), want, "{c} as {format}");
                let table = |p: &str| {
                    let o = tlsrum(&["replay", "--by", "sni", "--format", "csv", p]);
                    String::from_utf8_lossy(&o.stdout).into_owned()
                };
                if format == "zeek" {
                    let kinds = |o: &Output| by_sni_kind(&records(o));
                    assert_eq!(kinds(&back), kinds(&original), "{c}: kinds per name");
                    assert_eq!(table(l).lines().count(), table(c).lines().count(), "{c}");
                }
                compared += 1;
            } else {
                assert!(
                    records(&original).iter().any(|r| r["transport"] == "quic"),
                    "{c} as {format}: {} records back for {}",
                    got.len(),
                    want.len()
                );
            }
        }
    }
    assert!(compared >= 20, "only {compared} round trips compared");
}
