//! Zeek `ssl.log` (TSV with its header block, or Zeek's JSON form),
//! encoded by [`analyzer::output::zeek`]: `replay --format zeek|zeek-json`
//! and `live --events-format zeek|zeek-json`. See `docs/zeek.md`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use analyzer::output::zeek::{ZeekForm, ZeekWriter};
use analyzer::record::ConnectionRecord;
use anyhow::Result;

use super::{RecordSink, RunEnd};

/// Wall-clock seconds, for `#open` and `#close`.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub struct ZeekSink<W: Write> {
    w: ZeekWriter<W>,
}

impl<W: Write> ZeekSink<W> {
    /// Records go to `w`, which should be buffered; `header`: write the
    /// TSV header block first (not when appending to a log that has one).
    pub fn new(w: W, form: ZeekForm, header: bool) -> Self {
        ZeekSink {
            w: ZeekWriter::new(w, form, header, now),
        }
    }

    /// Ends the log (TSV: `#close`) and flushes.
    pub fn close(&mut self) -> Result<()> {
        Ok(self.w.finish()?)
    }
}

impl<W: Write> RecordSink for ZeekSink<W> {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        Ok(self.w.write(r)?)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.w.flush()?)
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        self.close()
    }
}
