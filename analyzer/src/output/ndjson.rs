//! One JSON object per line: the record contract of DESIGN.md.
use std::io::{self, Write};

use crate::record::ConnectionRecord;

/// Serialises into a reused buffer and hands the writer one slice per
/// record: serde_json's many small writes are cheap into a Vec and costly
/// through a `BufWriter`.
#[derive(Default)]
pub struct NdjsonWriter {
    buf: Vec<u8>,
}

impl NdjsonWriter {
    pub fn write(&mut self, w: &mut impl Write, r: &ConnectionRecord) -> io::Result<()> {
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, r)?;
        self.buf.push(b'\n');
        w.write_all(&self.buf)
    }
}

pub fn write_record(w: &mut impl Write, r: &ConnectionRecord) -> io::Result<()> {
    NdjsonWriter::default().write(w, r)
}
