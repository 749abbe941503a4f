//! Baselines (zeek btest style): the full `tlsrum replay --format ndjson`
//! output of every capture in `pcaps/` is checked in beside it and compared
//! byte for byte, so that a change in any field (timing, bytes, notes, ...)
//! shows, not only in the labelled ones `golden.rs` holds against the TLS
//! programs' own reports.
//!
//! - `pcaps/NAME.baseline.ndjson`: replay of `NAME.pcap[ng]`, with
//!   `--keylog pcaps/NAME.keylog` when that file exists;
//! - `pcaps/NAME.nokeylog.baseline.ndjson`: for captures with a key log, the
//!   same replay without it (another code path: early data stays
//!   `attempted`, EncryptedExtensions unread).
//!
//! The baselines pin tlsrum's own output, so they are not evidence that the
//! output is right (the labels are): they make every change of it visible
//! and reviewed. After an intended change, `make baselines`
//! (scripts/baselines.sh) rewrites them; the diff goes into the commit with
//! the change, each difference explained in its message.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const REGENERATE: &str = "If the change is intended, run `make baselines` (scripts/baselines.sh) \
     and commit the rewritten pcaps/*.baseline.ndjson with it, after reviewing `git diff pcaps/`.";
/// Differences shown per capture.
const SHOWN: usize = 12;
/// Characters of a line shown when it has no counterpart to compare with.
const LINE_CHARS: usize = 300;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `pcaps/NAME.pcap[ng]`, relative to the repository's root, sorted.
fn captures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("pcaps"))
        .expect("pcaps/ exists")
        .map(|e| PathBuf::from("pcaps").join(e.unwrap().file_name()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng" || e == "pcap"))
        .collect();
    files.sort();
    files
}

/// One replay whose output is pinned: (capture, key log, baseline file).
struct Case {
    capture: PathBuf,
    keylog: Option<PathBuf>,
    baseline: PathBuf,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "{}{}",
            self.capture.display(),
            if self.keylog.is_some() {
                " (with its key log)"
            } else {
                ""
            }
        )
    }
}

/// The baselines every capture must have.
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for capture in captures() {
        let keylog = capture.with_extension("keylog");
        if repo().join(&keylog).exists() {
            out.push(Case {
                baseline: capture.with_extension("baseline.ndjson"),
                keylog: Some(keylog),
                capture: capture.clone(),
            });
            out.push(Case {
                baseline: capture.with_extension("nokeylog.baseline.ndjson"),
                keylog: None,
                capture,
            });
        } else {
            out.push(Case {
                baseline: capture.with_extension("baseline.ndjson"),
                keylog: None,
                capture,
            });
        }
    }
    out
}

/// What scripts/baselines.sh runs, from the repository's root with the same
/// relative paths.
fn replay(case: &Case) -> Result<String, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tlsrum"));
    cmd.current_dir(repo())
        .args(["replay", "--format", "ndjson"]);
    if let Some(k) = &case.keylog {
        cmd.arg("--keylog").arg(k);
    }
    let out = cmd.arg(&case.capture).output().expect("run tlsrum");
    if !out.status.success() {
        return Err(format!(
            "tlsrum replay failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("output is not UTF-8: {e}"))
}

enum Op<'a> {
    Same,
    Gone(usize, &'a str),
    New(usize, &'a str),
}

/// A line diff (longest common subsequence; the files are a few dozen
/// lines): the baseline's lines that went and the output's that came, in
/// order, with their 1-based line numbers.
fn line_diff<'a>(want: &[&'a str], got: &[&'a str]) -> Vec<Op<'a>> {
    let (n, m) = (want.len(), got.len());
    // lcs[i][j]: common subsequence of want[i..] and got[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if want[i] == got[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::new();
    while i < n || j < m {
        if i < n && j < m && want[i] == got[j] {
            ops.push(Op::Same);
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(Op::New(j + 1, got[j]));
            j += 1;
        } else {
            ops.push(Op::Gone(i + 1, want[i]));
            i += 1;
        }
    }
    ops
}

fn clip(line: &str) -> String {
    if line.chars().count() <= LINE_CHARS {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(LINE_CHARS).collect();
        format!("{cut}...")
    }
}

/// The connection a record line is about: (transport, client, server).
fn connection(line: &str) -> Option<(Value, Value, Value)> {
    let v: Value = serde_json::from_str(line).ok()?;
    Some((
        v["transport"].clone(),
        v["client"].clone(),
        v["server"].clone(),
    ))
}

/// The differences as a reviewer reads them: a record that changed (a line
/// gone and one come for the same connection) as its changed fields, other
/// lines whole; the first `SHOWN` of them.
fn describe(want: &str, got: &str) -> String {
    let want: Vec<&str> = want.lines().collect();
    let got: Vec<&str> = got.lines().collect();
    let ops = line_diff(&want, &got);
    let mut shown = Vec::new();
    for run in ops.split(|o| matches!(o, Op::Same)) {
        let mut came: Vec<Option<(usize, &str)>> = run
            .iter()
            .filter_map(|o| match o {
                Op::New(n, l) => Some(Some((*n, *l))),
                _ => None,
            })
            .collect();
        for op in run {
            let Op::Gone(a, la) = op else { continue };
            let key = connection(la);
            let pair = key.as_ref().and_then(|k| {
                came.iter_mut()
                    .find(|c| c.is_some_and(|(_, lb)| connection(lb).as_ref() == Some(k)))
                    .and_then(Option::take)
            });
            match pair {
                Some((b, lb)) => {
                    let mut fields = Vec::new();
                    let x: Value = serde_json::from_str(la).unwrap();
                    let y: Value = serde_json::from_str(lb).unwrap();
                    common::json::field_differences(&x, &y, "", &mut fields);
                    shown.push(format!(
                        "  ~ line {a} (now {b}), client {}: {}",
                        y["client"],
                        fields.join("; ")
                    ));
                }
                None => shown.push(format!("  - line {a}: {}", clip(la))),
            }
        }
        for (b, lb) in came.into_iter().flatten() {
            shown.push(format!("  + line {b}: {}", clip(lb)));
        }
    }
    let total = shown.len();
    let mut text = shown.into_iter().take(SHOWN).collect::<Vec<_>>().join("\n");
    if total > SHOWN {
        text.push_str(&format!("\n  ... {} more", total - SHOWN));
    }
    text
}

#[test]
fn every_capture_has_its_baselines_and_every_baseline_a_capture() {
    let cases = cases();
    assert!(cases.len() >= 10, "only {} captures in pcaps/", cases.len());
    let mut problems = Vec::new();
    for c in &cases {
        if !repo().join(&c.baseline).exists() {
            problems.push(format!(
                "{}: no baseline {}",
                c.name(),
                c.baseline.display()
            ));
        }
    }
    let wanted: Vec<&PathBuf> = cases.iter().map(|c| &c.baseline).collect();
    for e in std::fs::read_dir(repo().join("pcaps")).unwrap() {
        let file = PathBuf::from("pcaps").join(e.unwrap().file_name());
        if file.to_string_lossy().ends_with(".baseline.ndjson") && !wanted.contains(&&file) {
            problems.push(format!(
                "{}: a baseline of no capture (or of a key log that is gone)",
                file.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}\n{REGENERATE}", problems.join("\n"));
}

#[test]
fn replay_output_is_the_baseline_byte_for_byte() {
    let cases = cases();
    assert!(cases.len() >= 10, "only {} captures in pcaps/", cases.len());
    let mut failures = Vec::new();
    let mut lines = 0;
    for c in &cases {
        let Ok(want) = std::fs::read_to_string(repo().join(&c.baseline)) else {
            // every_capture_has_its_baselines_and_every_baseline_a_capture says so.
            continue;
        };
        let got = match replay(c) {
            Ok(got) => got,
            Err(e) => {
                failures.push(format!("{}: {e}", c.name()));
                continue;
            }
        };
        lines += want.lines().count();
        if got != want {
            let mut text = describe(&want, &got);
            if text.is_empty() {
                // Same lines, other bytes: line ends or the final newline.
                text = format!(
                    "  same lines, different bytes ({} vs {} bytes)",
                    want.len(),
                    got.len()
                );
            }
            failures.push(format!(
                "{} differs from {} (- baseline, + now):\n{text}",
                c.name(),
                c.baseline.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} baselines differ ({lines} lines compared):\n{}\n\n{REGENERATE}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

/// Keeps the diff honest: a changed record is reported as its fields
/// (paired by connection, not by position), a lost or new line whole.
#[test]
fn line_diff_names_changed_fields_and_lost_lines() {
    let want = "{\"client\":\"b\"}\n{\"client\":\"a\",\"t\":{\"x\":1}}\n{\"client\":\"c\"}\n";
    let got = "{\"client\":\"a\",\"t\":{\"x\":2}}\n{\"client\":\"c\"}\n{\"client\":\"d\"}\n";
    let text = describe(want, got);
    assert_eq!(
        text,
        "  - line 1: {\"client\":\"b\"}\n  ~ line 2 (now 1), client \"a\": t.x: 1 -> 2\n  + line 3: {\"client\":\"d\"}",
        "{text}"
    );
    assert_eq!(describe(want, want), "");
}
