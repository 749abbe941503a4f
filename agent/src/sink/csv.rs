//! One CSV row per connection ([`analyzer::output::csv`]).

use std::io::Write;

use analyzer::output::csv::CsvWriter;
use analyzer::record::ConnectionRecord;
use anyhow::Result;

use super::{RecordSink, RunEnd};

pub struct CsvSink<W: Write>(CsvWriter<W>);

impl<W: Write> CsvSink<W> {
    /// Writes the header row first.
    pub fn new(w: W) -> Result<Self> {
        Ok(CsvSink(CsvWriter::new(w)?))
    }
}

impl<W: Write> RecordSink for CsvSink<W> {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        Ok(self.0.write(r)?)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.0.flush()?)
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        self.flush()
    }
}
