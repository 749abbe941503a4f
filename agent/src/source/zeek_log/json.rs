//! Zeek's JSON log writer's format (`LogAscii::use_json`, or the JSON
//! streaming writers): one object a line, keys as the TSV columns
//! (`id.orig_h`; some shippers nest them as `"id": {"orig_h": …}`), unset
//! fields left out (or null), sets and vectors as arrays, `ts` a number of
//! seconds (the default `JSON::TS_EPOCH`) or an ISO 8601 string
//! (`JSON::TS_ISO8601`).

use serde_json::{Map, Value};

use super::row::Row;
use super::tsv::{row_line, set};
use super::Line;

/// `2020-09-16T14:01:26.194646Z` as seconds since the epoch.
fn iso8601(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    // Four-digit years, as Zeek writes them: a longer one (all digits
    // parse) overflowed the day count below.
    if !(0..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..=23).contains(&hh)
        || !(0..=59).contains(&mm)
        || !(0..=60).contains(&ss)
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let frac: f64 = if frac.is_empty() {
        0.0
    } else {
        format!("0.{frac}").parse().ok()?
    };
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss) as f64 + frac)
}

/// A value of the key, the flat form (`id.orig_h`) or nested (`id.orig_h`
/// as `"id": {"orig_h": …}`).
fn get<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if let Some(v) = o.get(key) {
        return Some(v);
    }
    let (outer, inner) = key.split_once('.')?;
    o.get(outer)?.as_object()?.get(inner)
}

pub fn line(line: &[u8]) -> Line {
    let o: Map<String, Value> = match serde_json::from_slice(line) {
        Ok(o) => o,
        Err(e) => return Line::Bad(format!("not a JSON object: {e}")),
    };
    if let Some(p) = o.get("_path").and_then(Value::as_str) {
        if !p.starts_with("ssl") {
            return Line::Bad(format!("a row of Zeek's `{p}` log (_path), not ssl.log"));
        }
    }
    let mut row = Row::default();
    match get(&o, "ts") {
        Some(Value::Number(n)) => match n.as_f64() {
            Some(t) if t.is_finite() => row.ts = t,
            _ => return Line::Bad(format!("ts: {n} is not a time")),
        },
        Some(Value::String(s)) => match iso8601(s) {
            Some(t) => row.ts = t,
            None => return Line::Bad(format!("ts: \"{s}\" is not a time")),
        },
        Some(v) => return Line::Bad(format!("ts: {v} is not a time")),
        None => return Line::Bad("no ts".into()),
    }
    for key in ["id.orig_h", "id.resp_h"] {
        match get(&o, key) {
            Some(Value::String(s)) if s.parse::<std::net::IpAddr>().is_ok() => {
                set(&mut row, key, s.clone())
            }
            Some(v) => return Line::Bad(format!("{key}: {v} is not an address")),
            None => return Line::Bad(format!("no {key}")),
        }
    }
    for key in ["id.orig_p", "id.resp_p"] {
        match get(&o, key) {
            Some(Value::Number(n)) if n.as_u64().is_some_and(|p| p <= 65535) => {
                set(&mut row, key, n.to_string())
            }
            Some(v) => return Line::Bad(format!("{key}: {v} is not a port")),
            None => return Line::Bad(format!("no {key}")),
        }
    }
    for key in ["resumed", "established"] {
        match get(&o, key) {
            Some(Value::Bool(b)) => set(&mut row, key, if *b { "T" } else { "F" }.into()),
            None | Some(Value::Null) => {}
            Some(v) => return Line::Bad(format!("{key}: {v} is not a bool")),
        }
    }
    for key in [
        "version",
        "cipher",
        "server_name",
        "last_alert",
        "next_protocol",
        "ssl_history",
    ] {
        match get(&o, key) {
            Some(Value::String(s)) if !s.is_empty() => set(&mut row, key, s.clone()),
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(v) => return Line::Bad(format!("{key}: {v} is not a string")),
        }
    }
    // A JSON line of another log (conn.log) has none of ssl.log's own keys.
    let ssl_keys = [
        "version",
        "cipher",
        "server_name",
        "resumed",
        "established",
        "ssl_history",
    ];
    if !ssl_keys.iter().any(|k| o.contains_key(*k)) {
        return Line::Bad(format!("none of ssl.log's keys ({})", ssl_keys.join(", ")));
    }
    row_line(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_timestamps() {
        assert_eq!(iso8601("1970-01-01T00:00:00Z"), Some(0.0));
        let t = iso8601("2020-09-16T14:01:26.194646Z").unwrap();
        assert!((t - 1_600_264_886.194_646).abs() < 1e-6, "{t}");
        assert_eq!(iso8601("2020-13-16T14:01:26Z"), None);
        assert_eq!(iso8601("yesterday"), None);
    }

    /// Found by fuzzing (fuzz/regressions/zeek_log/year-overflow): a year
    /// of many digits overflowed the day count (a panic with overflow
    /// checks, a wrong time without); negative fields and a fraction with
    /// an exponent passed too.
    #[test]
    fn iso_timestamps_out_of_range_are_no_time() {
        let long = format!("{}2020-09-16T13:54:57.033503Z", "0".repeat(60) + "9");
        assert_eq!(iso8601(&long), None);
        assert_eq!(iso8601("99999-01-01T00:00:00Z"), None);
        assert_eq!(iso8601("2020-09-16T-1:00:00Z"), None);
        assert_eq!(iso8601("2020-09-16T00:-5:00Z"), None);
        assert_eq!(iso8601("2020-09-16T00:00:00.5e300Z"), None);
        // Leading zeros of a four-digit year are fine.
        assert_eq!(iso8601("01970-01-01T00:00:00Z"), Some(0.0));
    }

    #[test]
    fn rows_flat_and_nested() {
        let flat = br#"{"ts":1598983678.585087,"uid":"C","id.orig_h":"192.168.4.142","id.orig_p":58802,"id.resp_h":"13.32.202.2","id.resp_p":443,"version":"TLSv13","resumed":true,"established":true}"#;
        let nested = br#"{"ts":"2020-09-01T18:07:58.585087Z","id":{"orig_h":"192.168.4.142","orig_p":58802,"resp_h":"13.32.202.2","resp_p":443},"version":"TLSv13","resumed":true,"established":true}"#;
        for l in [&flat[..], &nested[..]] {
            let Line::Row(r) = line(l) else {
                panic!("{}", String::from_utf8_lossy(l));
            };
            assert_eq!(r.resp_p, 443);
            assert_eq!(r.resumed, Some(true));
            assert!((r.ts - 1_598_983_678.585_087).abs() < 1e-6);
        }
        assert!(matches!(line(b"{\"ts\":1"), Line::Bad(w) if w.contains("not a JSON object")));
        assert!(
            matches!(line(br#"{"ts":1,"id.orig_h":"1.2.3.4","id.orig_p":1,"id.resp_h":"1.2.3.4","id.resp_p":2,"proto":"tcp"}"#), Line::Bad(w) if w.contains("none of ssl.log"))
        );
        assert!(
            matches!(line(br#"{"ts":1,"id.orig_h":"1.2.3.4","id.orig_p":1,"id.resp_h":"1.2.3.4","id.resp_p":2,"resumed":"yes"}"#), Line::Bad(w) if w.contains("resumed"))
        );
    }
}
