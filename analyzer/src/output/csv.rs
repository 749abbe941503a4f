//! Records flattened to CSV, one row per connection (RFC 4180 quoting via the `csv` crate).
use std::fmt::Display;
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
    /// One field's text, reused: a row is written field by field, with
    /// no string allocated per field.
    buf: Vec<u8>,
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
        Ok(CsvWriter {
            w,
            with_capture,
            buf: Vec::new(),
        })
    }

    /// A field as `Display` writes it.
    fn shown(&mut self, v: impl Display) -> csv::Result<()> {
        self.buf.clear();
        write!(self.buf, "{v}")?;
        self.w.write_field(&self.buf)
    }

    /// Milliseconds as `Display` writes them (the shortest decimal that
    /// reads back), through NDJSON's path for values to the microsecond
    /// where it applies: the same digits, but for the ".0" it gives a
    /// whole number.
    fn ms(&mut self, v: Option<f64>) -> csv::Result<()> {
        let Some(v) = v else {
            return self.w.write_field("");
        };
        self.buf.clear();
        if !super::ndjson::micros(&mut self.buf, v) {
            return self.shown(v);
        }
        if self.buf.ends_with(b".0") {
            self.buf.truncate(self.buf.len() - 2);
        }
        self.w.write_field(&self.buf)
    }

    /// A text field that may be absent, as it is (empty then).
    fn text(&mut self, v: Option<&str>) -> csv::Result<()> {
        self.w.write_field(v.unwrap_or(""))
    }

    /// A field that may be absent: empty then.
    fn opt(&mut self, v: Option<impl Display>) -> csv::Result<()> {
        match v {
            Some(v) => self.shown(v),
            None => self.w.write_field(""),
        }
    }

    /// A list field, its items joined by `;`.
    fn joined<'a>(&mut self, items: impl IntoIterator<Item = &'a str>) -> csv::Result<()> {
        self.buf.clear();
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(b';');
            }
            self.buf.extend_from_slice(item.as_bytes());
        }
        self.w.write_field(&self.buf)
    }

    pub fn write(&mut self, r: &ConnectionRecord) -> csv::Result<()> {
        let certs = r.certs.as_ref();
        self.shown(format_args!("{:.6}", r.ts))?;
        self.w.write_field(r.transport.as_str())?;
        self.w.write_field(r.client.as_str())?;
        self.w.write_field(r.server.as_str())?;
        self.text(r.sni.as_deref())?;
        self.text(r.version)?;
        self.text(r.cipher.as_deref())?;
        self.joined(r.alpn.iter().flat_map(|l| l.iter()))?;
        self.text(r.handshake.map(|k| k.as_str()))?;
        self.joined(r.offered.iter().flatten().map(|m| m.as_str()))?;
        self.text(r.resumption.map(|m| m.as_str()))?;
        self.text(r.early_data.map(|e| e.as_str()))?;
        self.shown(r.hrr)?;
        self.shown(r.retry)?;
        let mut timing = Ok(());
        r.timing.each(|_, v| {
            if timing.is_ok() {
                timing = match v {
                    TimingValue::Ms(ms) => self.ms(ms),
                    TimingValue::Count(n) => self.opt(n),
                };
            }
        });
        timing?;
        self.opt(r.bytes.client_handshake)?;
        self.opt(r.bytes.server_handshake)?;
        self.opt(r.bytes.client_app)?;
        self.opt(r.bytes.server_app)?;
        self.opt(certs.map(|c| c.count))?;
        self.opt(certs.map(|c| c.bytes))?;
        self.text(certs.and_then(|c| c.leaf_subject.as_deref()))?;
        self.text(certs.and_then(|c| c.leaf_issuer.as_deref()))?;
        self.opt(certs.and_then(|c| c.not_before))?;
        self.opt(certs.and_then(|c| c.not_after))?;
        self.text(r.failure.as_deref())?;
        self.joined(r.notes.iter().copied())?;
        self.text(r.ja4.as_deref())?;
        self.text(r.ja4_stable.as_deref())?;
        self.text(r.ja4s.as_deref())?;
        self.text(r.alpn_negotiated.as_deref())?;
        self.w.write_field(r.family.as_str())?;
        self.text(r.role.map(|r| r.as_str()))?;
        self.text(r.proxied_client.as_deref())?;
        if self.with_capture {
            self.text(r.capture.as_deref())?;
        }
        // The record ends here (an empty record appended to its fields).
        self.w.write_record(None::<&[u8]>)
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::CsvWriter;

    /// Milliseconds are written as `Display` writes them, the form CSV
    /// has always had, on NDJSON's spread of doubles.
    #[test]
    fn milliseconds_as_display_writes_them() {
        // One field a row, no header.
        let mut w = CsvWriter {
            w: csv::WriterBuilder::new()
                .flexible(true)
                .from_writer(Vec::new()),
            with_capture: false,
            buf: Vec::new(),
        };
        let mut start = 0;
        for v in crate::output::ndjson::tests::number_spread() {
            w.ms(Some(v)).unwrap();
            w.w.write_record(None::<&[u8]>).unwrap();
            w.flush().unwrap();
            let out = &w.w.get_ref()[start..];
            start += out.len();
            assert_eq!(std::str::from_utf8(out).unwrap(), format!("{v}\n"), "{v:e}");
        }
    }
}
