//! Records flattened to CSV, one row per connection (RFC 4180 quoting via the `csv` crate).
use std::io::Write;

use crate::record::ConnectionRecord;

pub const HEADER: [&str; 27] = [
    "ts", "transport", "client", "server", "sni", "version", "cipher", "alpn", "handshake", "offered",
    "resumption", "early_data", "hrr", "retry", "tcp_rtt_ms", "handshake_ms", "ttfb_ms", "round_trips",
    "avoidable_ms", "client_handshake_bytes", "server_handshake_bytes", "cert_count", "cert_bytes",
    "leaf_subject", "leaf_issuer", "failure", "notes",
];

pub struct CsvWriter<W: Write> {
    w: csv::Writer<W>,
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
}

impl<W: Write> CsvWriter<W> {
    pub fn new(w: W) -> csv::Result<Self> {
        let mut w = csv::Writer::from_writer(w);
        w.write_record(HEADER)?;
        Ok(CsvWriter { w })
    }

    pub fn write(&mut self, r: &ConnectionRecord) -> csv::Result<()> {
        let t = &r.timing;
        let certs = r.certs.as_ref();
        self.w.write_record([
            format!("{:.6}", r.ts),
            format!("{:?}", r.transport).to_lowercase(),
            r.client.clone(),
            r.server.clone(),
            opt(&r.sni),
            opt(&r.version),
            opt(&r.cipher),
            r.alpn.join(";"),
            r.handshake.as_str().into(),
            r.offered.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(";"),
            opt(&r.resumption.map(|m| m.as_str())),
            r.early_data.as_str().into(),
            r.hrr.to_string(),
            r.retry.to_string(),
            opt(&t.tcp_rtt),
            opt(&t.handshake),
            opt(&t.ttfb),
            opt(&t.round_trips),
            opt(&t.avoidable),
            r.bytes.client_handshake.to_string(),
            r.bytes.server_handshake.to_string(),
            opt(&certs.map(|c| c.count)),
            opt(&certs.map(|c| c.bytes)),
            opt(&certs.and_then(|c| c.leaf_subject.clone())),
            opt(&certs.and_then(|c| c.leaf_issuer.clone())),
            opt(&r.failure),
            r.notes.join(";"),
        ])
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}
