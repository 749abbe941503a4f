//! The aggregate outputs of `--by` / `--window` ([`crate::slice`]): a table,
//! NDJSON (one object per group, per window), CSV (the same flattened).
//! The schema is README's "Slicing"; the three are written from the same
//! [`cells`] of each row, so they cannot disagree.

use std::io::{self, Write};

use crate::aggregate::Histogram;
use crate::client_names::ClientNames;
use crate::record::UtcTime;
use crate::slice::{Row, SliceStats, Slicer};

/// The quantiles every time distribution reports.
pub const QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p75", 0.75), ("p95", 0.95), ("p99", 0.99)];

/// The distributions, by output name.
fn dists(s: &SliceStats) -> [(&'static str, &Histogram); 3] {
    [
        ("handshake", &s.handshake_ms),
        ("ttfb", &s.ttfb_ms),
        ("tcp_rtt", &s.tcp_rtt_ms),
    ]
}

/// Milliseconds rounded to the microsecond, as records carry them.
fn round_ms(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Whether the outputs carry a `client` column.
fn with_client(slicer: &Slicer, names: Option<&ClientNames>) -> bool {
    names.is_some() && slicer.dims().iter().any(|d| d.is_fingerprint())
}

/// The client name of a row's fingerprint, if known.
fn client<'a>(slicer: &Slicer, row: &Row<'_>, names: Option<&'a ClientNames>) -> Option<&'a str> {
    let i = slicer.dims().iter().position(|d| d.is_fingerprint())?;
    names?.get(row.group.get(i)?)
}

/// One value of a flat row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Str(String),
    Int(u64),
    Num(Option<f64>),
}

/// The flat (CSV) header.
pub(crate) fn header(slicer: &Slicer, names: Option<&ClientNames>) -> Vec<String> {
    let mut h = Vec::new();
    if slicer.windowed() {
        h.extend(["window_start".to_string(), "window_end".to_string()]);
    }
    h.extend(slicer.dims().iter().map(|d| d.column().to_string()));
    if with_client(slicer, names) {
        h.push("client".into());
    }
    h.extend(
        [
            "connections",
            "full",
            "resumed",
            "declined",
            "failed",
            "incomplete",
            "resumption_rate",
        ]
        .map(String::from),
    );
    for (d, _) in dists(&SliceStats::default()) {
        h.push(format!("{d}_n"));
        h.extend(QUANTILES.iter().map(|(q, _)| format!("{d}_{q}")));
    }
    h.push("avoidable_ms".into());
    h
}

/// The flat cells of a row, in [`header`]'s order.
pub(crate) fn cells(slicer: &Slicer, row: &Row<'_>, names: Option<&ClientNames>) -> Vec<Cell> {
    let mut c = Vec::new();
    if let Some((a, b)) = row.window {
        c.extend([Cell::Num(Some(a)), Cell::Num(Some(b))]);
    }
    c.extend(row.group.iter().map(|v| Cell::Str(v.clone())));
    if with_client(slicer, names) {
        c.push(Cell::Str(
            client(slicer, row, names).unwrap_or_default().to_string(),
        ));
    }
    let s = row.stats;
    c.extend(
        [
            s.connections,
            s.full,
            s.resumed,
            s.declined,
            s.failed,
            s.incomplete,
        ]
        .map(Cell::Int),
    );
    c.push(Cell::Num(s.resumption_rate()));
    for (_, h) in dists(s) {
        c.push(Cell::Int(h.count()));
        c.extend(
            QUANTILES
                .iter()
                .map(|(_, q)| Cell::Num(h.quantile(*q).map(round_ms))),
        );
    }
    c.push(Cell::Num(Some(round_ms(s.avoidable_ms))));
    c
}

fn json_num(out: &mut String, v: Option<f64>) {
    match v.filter(|v| v.is_finite()) {
        Some(v) => {
            out.push_str(&serde_json::Number::from_f64(v).map_or("null".into(), |n| n.to_string()))
        }
        None => out.push_str("null"),
    }
}

fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::Value::from(s).to_string());
}

/// One JSON object per row, in table order (windows ascending).
pub fn write_ndjson(
    w: &mut impl Write,
    slicer: &Slicer,
    names: Option<&ClientNames>,
) -> io::Result<()> {
    let mut out = String::new();
    for row in slicer.rows() {
        out.clear();
        out.push('{');
        if let Some((a, b)) = row.window {
            out.push_str("\"window_start\":");
            json_num(&mut out, Some(a));
            out.push_str(",\"window_end\":");
            json_num(&mut out, Some(b));
            out.push(',');
        }
        out.push_str("\"group\":{");
        for (i, (d, v)) in slicer.dims().iter().zip(row.group).enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_str(&mut out, d.column());
            out.push(':');
            json_str(&mut out, v);
        }
        out.push('}');
        if let Some(name) = client(slicer, &row, names) {
            out.push_str(",\"client\":");
            json_str(&mut out, name);
        }
        let s = row.stats;
        for (k, v) in [
            ("connections", s.connections),
            ("full", s.full),
            ("resumed", s.resumed),
            ("declined", s.declined),
            ("failed", s.failed),
            ("incomplete", s.incomplete),
        ] {
            out.push_str(&format!(",\"{k}\":{v}"));
        }
        out.push_str(",\"resumption_rate\":");
        json_num(&mut out, s.resumption_rate());
        for (d, h) in dists(s) {
            out.push_str(&format!(",\"{d}_ms\":{{\"n\":{}", h.count()));
            for (q, p) in QUANTILES {
                out.push_str(&format!(",\"{q}\":"));
                json_num(&mut out, h.quantile(p).map(round_ms));
            }
            out.push('}');
        }
        out.push_str(",\"avoidable_ms\":");
        json_num(&mut out, Some(round_ms(s.avoidable_ms)));
        out.push_str("}\n");
        w.write_all(out.as_bytes())?;
    }
    Ok(())
}

/// A header row, then one row per group (per window).
pub fn write_csv(w: impl Write, slicer: &Slicer, names: Option<&ClientNames>) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(w);
    w.write_record(header(slicer, names))?;
    for row in slicer.rows() {
        w.write_record(cells(slicer, &row, names).iter().map(|c| match c {
            Cell::Str(s) => s.clone(),
            Cell::Int(n) => n.to_string(),
            Cell::Num(v) => v.map(|v| v.to_string()).unwrap_or_default(),
        }))?;
    }
    w.flush()?;
    Ok(())
}

/// Column headings of the table for the flat names (shorter).
fn table_heading(flat: &str) -> String {
    match flat {
        "connections" => "conns".into(),
        "incomplete" => "incompl".into(),
        "resumption_rate" => "resumed%".into(),
        "window_start" => "window".into(),
        f => f
            .strip_prefix("handshake_")
            .map(|q| format!("hs_{q}"))
            .or_else(|| f.strip_prefix("tcp_rtt_").map(|q| format!("rtt_{q}")))
            .unwrap_or_else(|| f.to_string()),
    }
}

/// A window's start in the table: UTC, with milliseconds under a second.
fn window_label(start: f64, step: f64) -> String {
    let secs = start.floor();
    let t = UtcTime(secs as i64).to_string();
    if step < 1.0 {
        format!(
            "{}.{:03}Z",
            t.trim_end_matches('Z'),
            ((start - secs) * 1000.0).round() as u32
        )
    } else {
        t
    }
}

fn table_cell(c: &Cell, heading: &str) -> String {
    match c {
        Cell::Str(s) if s.is_empty() => "-".into(),
        Cell::Str(s) => s.clone(),
        Cell::Int(n) => n.to_string(),
        Cell::Num(None) => "-".into(),
        Cell::Num(Some(v)) if heading == "resumed%" => format!("{:.0}%", v * 100.0),
        Cell::Num(Some(v)) if heading == "avoidable_ms" => format!("{v:.1}"),
        Cell::Num(Some(v)) if *v < 10.0 => format!("{v:.2}"),
        Cell::Num(Some(v)) => format!("{v:.1}"),
    }
}

/// Writes aligned columns: text left, numbers right, a rule before the
/// row `rule_before`.
pub(crate) fn write_columns(
    w: &mut impl Write,
    rows: &[Vec<String>],
    left: usize,
    rule_before: Option<usize>,
) -> io::Result<()> {
    let cols = rows.first().map_or(0, |r| r.len());
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |v| v.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, r) in rows.iter().enumerate() {
        if Some(i) == rule_before {
            let rule: Vec<String> = widths.iter().map(|&n| "-".repeat(n)).collect();
            writeln!(w, "{}", rule.join("  "))?;
        }
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (v, &n))| {
                if c < left {
                    format!("{v:<n$}")
                } else {
                    format!("{v:>n$}")
                }
            })
            .collect();
        writeln!(w, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

/// The table: one row per group (per window), then TOTAL over everything.
pub fn write_table(
    w: &mut impl Write,
    slicer: &Slicer,
    names: Option<&ClientNames>,
) -> io::Result<()> {
    let flat = header(slicer, names);
    // The table shows a window by its start.
    let skip_end = |i: usize| slicer.windowed() && i == 1;
    let heads: Vec<String> = flat
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip_end(*i))
        .map(|(_, h)| table_heading(h))
        .collect();
    let left = heads.iter().position(|h| h == "conns").unwrap_or(0);
    let mut rows = vec![heads.clone()];
    let text_row = |cells: Vec<Cell>, window: Option<(f64, f64)>| -> Vec<String> {
        cells
            .iter()
            .enumerate()
            .filter(|(i, _)| !skip_end(*i))
            .zip(&heads)
            .map(|((i, c), h)| match (i, window) {
                (0, Some((start, _))) => window_label(start, slicer.step()),
                _ => table_cell(c, h),
            })
            .collect()
    };
    for row in slicer.rows() {
        rows.push(text_row(cells(slicer, &row, names), row.window));
    }
    let rule = rows.len();
    let all: Vec<String> = vec![String::new(); slicer.dims().len()];
    let total = Row {
        window: slicer.windowed().then_some((0.0, 0.0)),
        group: &all,
        stats: &slicer.total,
    };
    let mut t = text_row(cells(slicer, &total, names), None);
    for (i, v) in t.iter_mut().take(left).enumerate() {
        *v = if i == 0 { "TOTAL".into() } else { "all".into() };
    }
    rows.push(t);
    write_columns(w, &rows, left, Some(rule))?;
    writeln!(w, "(times in ms: nearest-rank percentiles within 0.5%; hs = completed handshakes (full and resumed); ttfb and rtt over every connection that has them; declined = full handshakes whose client offered resumption)")?;
    if slicer.folded.groups > 0 {
        writeln!(
            w,
            "({} connections folded into (other): more than {} groups or {} cells)",
            slicer.folded.groups,
            crate::slice::MAX_GROUPS,
            crate::slice::MAX_CELLS
        )?;
    }
    if slicer.folded.windows > 0 {
        writeln!(
            w,
            "({} connections left out of the windows: more than {} windows; TOTAL has them)",
            slicer.folded.windows,
            crate::slice::MAX_WINDOWS
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::*;
    use crate::slice::{Dim, Windows};

    fn rec(ts: f64, ja4: &str, kind: HandshakeKind, hs: f64) -> ConnectionRecord {
        ConnectionRecord {
            ts,
            sni: Some("a.test".into()),
            timing: Timing {
                handshake: Some(hs),
                ..Timing::default()
            },
            ja4: Some(ja4.into()),
            ..ConnectionRecord::sample(kind)
        }
    }

    const A: &str = "t13d3112h2_e8f1e7e78f70_ce5650b735ce";

    fn slicer(windows: Windows) -> Slicer {
        let mut s = Slicer::new(vec![Dim::Ja4, Dim::Version], windows);
        for (ts, kind, hs) in [
            (10.0, HandshakeKind::Full, 10.0),
            (20.0, HandshakeKind::Resumed, 5.0),
            (70.0, HandshakeKind::Failed, 1.0),
        ] {
            s.add(&rec(ts, A, kind, hs));
        }
        s
    }

    #[test]
    fn ndjson_objects_follow_the_schema() {
        let names = ClientNames::parse(format!("{A},curl 7.88.1\n").as_bytes()).unwrap();
        let mut out = Vec::new();
        write_ndjson(&mut out, &slicer(Windows::Fixed(60.0)), Some(&names)).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        let first = &lines[0];
        assert_eq!(first["window_start"], 0.0);
        assert_eq!(first["window_end"], 60.0);
        assert_eq!(
            first["group"],
            serde_json::json!({"ja4": A, "version": "TLS1.3"})
        );
        assert_eq!(first["client"], "curl 7.88.1");
        assert_eq!(first["connections"], 2);
        assert_eq!(first["resumption_rate"], 0.5);
        assert_eq!(first["handshake_ms"]["n"], 2);
        assert_eq!(first["ttfb_ms"]["p50"], serde_json::Value::Null);
        let p99 = first["handshake_ms"]["p99"].as_f64().unwrap();
        assert!((p99 - 10.0).abs() <= 0.05, "{p99}");
        // The failed one: no completed handshake, no rate.
        assert_eq!(lines[1]["resumption_rate"], serde_json::Value::Null);
        assert_eq!(lines[1]["handshake_ms"]["n"], 0);
        assert_eq!(lines[1]["failed"], 1);
    }

    #[test]
    fn csv_header_and_table_agree() {
        let s = slicer(Windows::None);
        let mut out = Vec::new();
        write_csv(&mut out, &s, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "ja4,version,connections,full,resumed,declined,failed,incomplete,resumption_rate,handshake_n,handshake_p50,handshake_p75,handshake_p95,handshake_p99,ttfb_n,ttfb_p50,ttfb_p75,ttfb_p95,ttfb_p99,tcp_rtt_n,tcp_rtt_p50,tcp_rtt_p75,tcp_rtt_p95,tcp_rtt_p99,avoidable_ms"
        );
        assert!(lines
            .next()
            .unwrap()
            .starts_with(&format!("{A},TLS1.3,3,1,1,0,1,0,0.5,2,")));
        let mut out = Vec::new();
        write_table(&mut out, &s, None).unwrap();
        let table = String::from_utf8(out).unwrap();
        let rows: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0][..4], ["ja4", "version", "conns", "full"]);
        assert_eq!(rows[1][..4], [A, "TLS1.3", "3", "1"]);
        assert_eq!(rows[3][..4], ["TOTAL", "all", "3", "1"]);
        assert_eq!(rows[1][8], "50%");
    }
}
