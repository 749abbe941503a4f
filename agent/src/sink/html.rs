//! `--html FILE`: a self-contained report (charts and tables) of the
//! records' aggregates ([`analyzer::output::html`]), written at the end.

use std::path::PathBuf;

use analyzer::aggregate::Summary;
use analyzer::record::ConnectionRecord;
use anyhow::{Context, Result};

use super::{RecordSink, RunEnd};

pub struct HtmlSink {
    path: PathBuf,
    summary: Box<Summary>,
    /// Server names shown; the rest are folded into "(other)".
    top: usize,
}

impl HtmlSink {
    pub fn new(path: PathBuf, top: usize) -> Self {
        HtmlSink {
            path,
            summary: Box::default(),
            top,
        }
    }
}

impl RecordSink for HtmlSink {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.summary.add(r);
        Ok(())
    }

    fn finish(&mut self, end: &RunEnd<'_>) -> Result<()> {
        std::fs::write(
            &self.path,
            analyzer::output::html::render(&self.summary, end.title, self.top),
        )
        .with_context(|| format!("writing {}", self.path.display()))
    }
}
