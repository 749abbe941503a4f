//! One JSON object per line (the record contract of DESIGN.md), encoded
//! by [`analyzer::output::ndjson`]: `replay --format ndjson` and
//! `live --events`.

use std::io::Write;

use analyzer::output::ndjson::NdjsonWriter;
use analyzer::record::ConnectionRecord;
use anyhow::Result;

use super::{Encoder, RecordSink, RunEnd};

pub struct NdjsonSink<W: Write> {
    w: W,
    encoder: NdjsonWriter,
}

impl<W: Write> NdjsonSink<W> {
    /// Records go to `w`, which should be buffered.
    pub fn new(w: W) -> Self {
        NdjsonSink {
            w,
            encoder: NdjsonWriter::default(),
        }
    }

    /// The writer back (flush first).
    pub fn into_inner(self) -> W {
        self.w
    }
}

impl<W: Write> RecordSink for NdjsonSink<W> {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        Ok(self.encoder.write(&mut self.w, r)?)
    }

    fn encoder(&self) -> Option<Encoder> {
        Some(|r, out| {
            analyzer::output::ndjson::encode(out, r);
            out.push(b'\n');
        })
    }

    fn encoded(&mut self, bytes: &[u8]) -> Result<()> {
        Ok(self.w.write_all(bytes)?)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.w.flush()?)
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        self.flush()
    }
}
