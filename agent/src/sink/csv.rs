//! One CSV row per connection ([`analyzer::output::csv`]).

use std::io::Write;

use analyzer::output::csv::CsvWriter;
use analyzer::record::ConnectionRecord;
use anyhow::Result;

use super::{RecordSink, RunEnd};

/// The header row is written with the first record (or at the end): a
/// run that fails before reading anything leaves standard output empty.
pub struct CsvSink<W: Write> {
    pending: Option<(W, bool)>,
    writer: Option<CsvWriter<W>>,
}

impl<W: Write> CsvSink<W> {
    /// `with_capture`: a last column naming each record's capture.
    pub fn new(w: W, with_capture: bool) -> Self {
        CsvSink {
            pending: Some((w, with_capture)),
            writer: None,
        }
    }

    fn writer(&mut self) -> Result<&mut CsvWriter<W>> {
        if let Some((w, with_capture)) = self.pending.take() {
            self.writer = Some(CsvWriter::new(w, with_capture)?);
        }
        self.writer
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("the CSV writer failed earlier"))
    }
}

impl<W: Write> RecordSink for CsvSink<W> {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        Ok(self.writer()?.write(r)?)
    }

    fn flush(&mut self) -> Result<()> {
        match &mut self.writer {
            Some(w) => Ok(w.flush()?),
            None => Ok(()),
        }
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        Ok(self.writer()?.flush()?)
    }
}
