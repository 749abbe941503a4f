//! Records flattened to CSV, one row per connection (RFC 4180 quoting via the `csv` crate).
use std::io::Write;

use crate::record::{ConnectionRecord, TimingValue};

/// Columns before the timing fields, and after them.
const BEFORE_TIMING: [&str; 14] = [
    "ts",
    "transport",
    "client",
    "server",
    "sni",
    "version",
    "cipher",
    "alpn",
    "handshake",
    "offered",
    "resumption",
    "early_data",
    "hrr",
    "retry",
];
const AFTER_TIMING: [&str; 19] = [
    "client_handshake_bytes",
    "server_handshake_bytes",
    "client_app_bytes",
    "server_app_bytes",
    "cert_count",
    "cert_bytes",
    "leaf_subject",
    "leaf_issuer",
    "leaf_not_before",
    "leaf_not_after",
    "failure",
    "notes",
    "ja4",
    "ja4_stable",
    "ja4s",
    "alpn_negotiated",
    "family",
    "role",
    "proxied_client",
];

/// The header row: timing columns come from [`Timing::each`](crate::record::Timing::each)
/// (`<name>_ms` for milliseconds).
pub fn header() -> Vec<String> {
    let mut h: Vec<String> = BEFORE_TIMING.iter().map(|s| s.to_string()).collect();
    crate::record::Timing::default().each(|name, v| {
        h.push(match v {
            TimingValue::Ms(_) => format!("{name}_ms"),
            TimingValue::Count(_) => name.to_string(),
        })
    });
    h.extend(AFTER_TIMING.iter().map(|s| s.to_string()));
    h
}

pub struct CsvWriter<W: Write> {
    w: csv::Writer<W>,
    /// A last `capture` column (several captures, or `--with-filename`).
    with_capture: bool,
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
}

impl<W: Write> CsvWriter<W> {
    /// Writes the header row; `with_capture` adds a last column naming
    /// each record's capture.
    pub fn new(w: W, with_capture: bool) -> csv::Result<Self> {
        let mut w = csv::Writer::from_writer(w);
        let mut h = header();
        if with_capture {
            h.push("capture".into());
        }
        w.write_record(h)?;
        Ok(CsvWriter { w, with_capture })
    }

    pub fn write(&mut self, r: &ConnectionRecord) -> csv::Result<()> {
        let certs = r.certs.as_ref();
        let mut row = vec![
            format!("{:.6}", r.ts),
            format!("{:?}", r.transport).to_lowercase(),
            r.client.clone(),
            r.server.clone(),
            opt(&r.sni),
            opt(&r.version),
            opt(&r.cipher),
            r.alpn.as_ref().map(|l| l.join(";")).unwrap_or_default(),
            opt(&r.handshake.map(|k| k.as_str())),
            r.offered
                .iter()
                .flatten()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(";"),
            opt(&r.resumption.map(|m| m.as_str())),
            opt(&r.early_data.map(|e| e.as_str())),
            r.hrr.to_string(),
            r.retry.to_string(),
        ];
        r.timing.each(|_, v| {
            row.push(match v {
                TimingValue::Ms(ms) => opt(&ms),
                TimingValue::Count(n) => opt(&n),
            })
        });
        row.extend([
            opt(&r.bytes.client_handshake),
            opt(&r.bytes.server_handshake),
            opt(&r.bytes.client_app),
            opt(&r.bytes.server_app),
            opt(&certs.map(|c| c.count)),
            opt(&certs.map(|c| c.bytes)),
            opt(&certs.and_then(|c| c.leaf_subject.clone())),
            opt(&certs.and_then(|c| c.leaf_issuer.clone())),
            opt(&certs.and_then(|c| c.not_before)),
            opt(&certs.and_then(|c| c.not_after)),
            opt(&r.failure),
            r.notes.join(";"),
            opt(&r.ja4),
            opt(&r.ja4_stable),
            opt(&r.ja4s),
            opt(&r.alpn_negotiated),
            r.family.as_str().to_string(),
            opt(&r.role.map(|r| r.as_str())),
            opt(&r.proxied_client),
        ]);
        if self.with_capture {
            row.push(opt(&r.capture));
        }
        self.w.write_record(row)
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}
