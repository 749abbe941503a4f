//! `ja4` and `ja4s` against FoxIO's own expected outputs for the captures
//! of their repository (in `../shared/corpus/ja4/`, never copied here):
//! the Rust tool's insta snapshots, the Python tool's test data (both per
//! connection, matched by client and server endpoints) and the Wireshark
//! plugin's test data (per packet, without endpoints: compared per
//! capture). Every connection FoxIO fingerprints must be reported with the
//! same value, except those in [`EXCEPTIONS`], each with its reason.
//! Skipped when the corpus is absent, except under CI=true.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// Where FoxIO's tools disagree with their own specification, which
/// tlsrum follows: (capture, tool, field, client, FoxIO's value, tlsrum's, why).
const EXCEPTIONS: &[(&str, &str, &str, &str, &str, &str, &str)] = &[
    (
        "tls-non-ascii-alpn.pcapng",
        "rust",
        "ja4",
        "192.168.1.168:50112",
        "t13d151699_8daaf6152771_e5627efa2ab1",
        "t13d1516bd_8daaf6152771_e5627efa2ab1",
        NON_ASCII_ALPN,
    ),
    (
        "tls-non-ascii-alpn.pcapng",
        "python",
        "ja4",
        "192.168.1.168:50112",
        "t13d151699_8daaf6152771_e5627efa2ab1",
        "t13d1516bd_8daaf6152771_e5627efa2ab1",
        NON_ASCII_ALPN,
    ),
];

const NON_ASCII_ALPN: &str = "the first ALPN value is the bytes 0xba 0xad; JA4.md \
    (\"ALPN Extension Value\") says a non-alphanumeric first or last byte gives the first \
    and last hex digit of the value, \"bd\"; the tools at the corpus' commit write '9' for \
    each non-ASCII character instead";

fn corpus() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus/ja4");
    if dir.join("pcap").is_dir() && dir.join("expected").is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but FoxIO's JA4 corpus is missing at {}",
        dir.display()
    );
    eprintln!("skipping: no JA4 corpus at {}", dir.display());
    None
}

/// (client, server, transport) -> tlsrum's records for it, in order.
type Records = HashMap<(String, String, String), Vec<Value>>;

/// Every capture's records, replayed once for all the tests.
fn replays(dir: &Path) -> &'static BTreeMap<String, Records> {
    static REPLAYS: OnceLock<BTreeMap<String, Records>> = OnceLock::new();
    REPLAYS.get_or_init(|| {
        let mut all = BTreeMap::new();
        for entry in std::fs::read_dir(dir.join("pcap")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let out = Command::new(env!("CARGO_BIN_EXE_tlsrum"))
                .args(["replay", "--format", "ndjson"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut recs = Records::new();
            for line in String::from_utf8(out.stdout).unwrap().lines() {
                let r: Value = serde_json::from_str(line).unwrap();
                let key = (
                    r["client"].as_str().unwrap().to_string(),
                    r["server"].as_str().unwrap().to_string(),
                    r["transport"].as_str().unwrap().to_string(),
                );
                recs.entry(key).or_default().push(r);
            }
            all.insert(name, recs);
        }
        assert!(!all.is_empty(), "no captures in {}", dir.display());
        all
    })
}

fn endpoint(ip: &str, port: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// One connection as a FoxIO tool reports it.
struct Expected {
    key: (String, String, String),
    ja4: Option<String>,
    ja4s: Option<String>,
}

/// The Rust tool's insta snapshot: a YAML list of flat maps (plus nested
/// certificate lists, skipped), read line by line.
fn rust_snapshot(text: &str) -> Vec<Expected> {
    let body = text.split_once("\n---\n").map_or(text, |(_, b)| b);
    let mut maps: Vec<HashMap<String, String>> = Vec::new();
    for line in body.lines() {
        let (new, rest) = if let Some(r) = line.strip_prefix("- ") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("  ") {
            (false, r)
        } else {
            continue;
        };
        if new {
            maps.push(HashMap::new());
        }
        let (Some(map), Some((k, v))) = (maps.last_mut(), rest.split_once(": ")) else {
            continue;
        };
        if !k.starts_with(' ') {
            map.insert(k.to_string(), v.trim_matches('\'').to_string());
        }
    }
    maps.into_iter()
        .filter(|m| m.contains_key("ja4") || m.contains_key("ja4s"))
        .map(|m| Expected {
            key: (
                endpoint(&m["src"], &m["src_port"]),
                endpoint(&m["dst"], &m["dst_port"]),
                if m["transport"] == "udp" {
                    "quic"
                } else {
                    "tcp"
                }
                .to_string(),
            ),
            ja4: m.get("ja4").cloned(),
            ja4s: m.get("ja4s").cloned(),
        })
        .collect()
}

/// The Python tool's test data: TCP connections only; `JA4.1` is the
/// first ClientHello's.
fn python_testdata(v: &Value) -> Vec<Expected> {
    let s = |e: &Value, k: &str| e[k].as_str().map(str::to_string);
    v.as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("JA4.1").is_some() || e.get("JA4S").is_some())
        .map(|e| Expected {
            key: (
                endpoint(e["src"].as_str().unwrap(), e["srcport"].as_str().unwrap()),
                endpoint(e["dst"].as_str().unwrap(), e["dstport"].as_str().unwrap()),
                "tcp".to_string(),
            ),
            ja4: s(e, "JA4.1"),
            ja4s: s(e, "JA4S"),
        })
        .collect()
}

/// Compares one tool's connections with tlsrum's records; returns how many
/// values were compared, and the disagreements not in [`EXCEPTIONS`].
fn compare(
    capture: &str,
    tool: &str,
    expected: &[Expected],
    recs: &Records,
    excepted: &mut usize,
) -> (usize, Vec<String>) {
    let mut compared = 0;
    let mut bad = Vec::new();
    let mut seen: HashMap<&(String, String, String), usize> = HashMap::new();
    for e in expected {
        // The n-th connection FoxIO lists between two endpoints is tlsrum's n-th.
        let n = seen.entry(&e.key).or_default();
        let Some(r) = recs.get(&e.key).and_then(|l| l.get(*n)) else {
            bad.push(format!(
                "{capture}: {tool} lists {:?}; tlsrum has no record",
                e.key
            ));
            continue;
        };
        *n += 1;
        for (field, want) in [("ja4", &e.ja4), ("ja4s", &e.ja4s)] {
            let Some(want) = want else { continue };
            compared += 1;
            let got = r[field].as_str().unwrap_or("null");
            if got == want {
                continue;
            }
            let listed = EXCEPTIONS.iter().any(|x| {
                (x.0, x.1, x.2, x.3, x.4, x.5)
                    == (capture, tool, field, e.key.0.as_str(), want, got)
            });
            if listed {
                *excepted += 1;
            } else {
                bad.push(format!(
                    "{capture}: {} -> {} {field}: FoxIO {tool} {want}, tlsrum {got}",
                    e.key.0, e.key.1
                ));
            }
        }
    }
    (compared, bad)
}

fn check(tool: &str, expected_of: impl Fn(&Path, &str) -> Vec<Expected>) {
    let Some(dir) = corpus() else { return };
    let (mut compared, mut excepted, mut bad) = (0, 0, Vec::new());
    for (capture, recs) in replays(&dir) {
        let expected = expected_of(&dir.join("expected"), capture);
        let (n, b) = compare(capture, tool, &expected, recs, &mut excepted);
        compared += n;
        bad.extend(b);
    }
    eprintln!("{tool}: {compared} values compared, {excepted} listed exceptions");
    assert!(compared > 0, "{tool}: nothing compared");
    assert!(
        bad.is_empty(),
        "{} disagreements:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn ja4_and_ja4s_equal_foxio_rust_snapshots() {
    check("rust", |dir, capture| {
        let path = dir.join(format!("rust-snapshots/ja4__insta@{capture}.snap"));
        rust_snapshot(&std::fs::read_to_string(path).unwrap())
    });
}

#[test]
fn ja4_and_ja4s_equal_foxio_python_testdata() {
    check("python", |dir, capture| {
        let path = dir.join(format!("python-testdata/{capture}.json"));
        python_testdata(&serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
    });
}

/// The Wireshark plugin fingerprints every ServerHello packet, without
/// endpoints: per capture, tlsrum's JA4S values must all be among the
/// plugin's, and the plugin may have one more per connection with a
/// HelloRetryRequest (whose JA4S tlsrum, like FoxIO's other tools, takes
/// from the first ServerHello: the HelloRetryRequest).
#[test]
fn ja4s_equal_foxio_wireshark_plugin() {
    let Some(dir) = corpus() else { return };
    let mut bad = Vec::new();
    let mut compared = 0;
    for (capture, recs) in replays(&dir) {
        let path = dir.join(format!("expected/wireshark-plugin-testdata/{capture}.json"));
        let frames: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut plugin: HashMap<String, i64> = HashMap::new();
        for f in frames.as_array().unwrap() {
            for v in f["_source"]["layers"]["ja4.ja4s"]
                .as_array()
                .into_iter()
                .flatten()
            {
                *plugin.entry(v.as_str().unwrap().to_string()).or_default() += 1;
            }
        }
        let plugin_total: i64 = plugin.values().sum();
        let (mut ours, mut hrr) = (0, 0);
        for r in recs.values().flatten() {
            let Some(v) = r["ja4s"].as_str() else {
                continue;
            };
            ours += 1;
            hrr += i64::from(r["hrr"] == true);
            compared += 1;
            match plugin.get_mut(v) {
                Some(n) if *n > 0 => *n -= 1,
                _ => bad.push(format!(
                    "{capture}: tlsrum ja4s {v} not (or not as often) in the plugin's output"
                )),
            }
        }
        if plugin_total != ours + hrr {
            bad.push(format!(
                "{capture}: the plugin has {plugin_total} JA4S, tlsrum {ours} with {hrr} HelloRetryRequests"
            ));
        }
    }
    eprintln!("wireshark: {compared} JA4S values compared");
    assert!(compared > 0);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
