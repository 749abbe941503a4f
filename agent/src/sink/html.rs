//! `--html FILE`: a self-contained report (charts and tables) of the
//! records' aggregates ([`analyzer::output::html`]), written at the end.

use std::path::PathBuf;
use std::sync::Arc;

use analyzer::aggregate::Summary;
use analyzer::client_names::ClientNames;
use analyzer::output::html::Extras;
use analyzer::record::ConnectionRecord;
use analyzer::slice::{Dim, Slicer, Windows};
use anyhow::{Context, Result};

use super::{RecordSink, RunEnd};

/// What the report slices besides the summary: `--by` groups, and the
/// time series by version and by family (windows of `--window`, or
/// chosen from the capture's span).
pub struct HtmlSlices {
    by: Option<Slicer>,
    series: [Slicer; 2],
    names: Option<Arc<ClientNames>>,
}

impl HtmlSlices {
    pub fn new(dims: Vec<Dim>, window: Option<f64>, names: Option<Arc<ClientNames>>) -> Self {
        let w = window.map_or(Windows::Auto, Windows::Fixed);
        HtmlSlices {
            by: (!dims.is_empty()).then(|| Slicer::new(dims, Windows::None)),
            series: [
                Slicer::new(vec![Dim::Version], w),
                Slicer::new(vec![Dim::Family], w),
            ],
            names,
        }
    }
}

pub struct HtmlSink {
    path: PathBuf,
    summary: Box<Summary>,
    /// Server names shown; the rest are folded into "(other)".
    top: usize,
    slices: Box<HtmlSlices>,
}

impl HtmlSink {
    pub fn new(path: PathBuf, top: usize, slices: HtmlSlices) -> Self {
        HtmlSink {
            path,
            summary: Box::default(),
            top,
            slices: Box::new(slices),
        }
    }
}

impl RecordSink for HtmlSink {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.summary.add(r);
        if let Some(by) = &mut self.slices.by {
            by.add(r);
        }
        for s in &mut self.slices.series {
            s.add(r);
        }
        Ok(())
    }

    fn finish(&mut self, end: &RunEnd<'_>) -> Result<()> {
        for s in &mut self.slices.series {
            s.finish();
        }
        let s = &self.slices;
        let extras = Extras {
            names: s.names.as_deref(),
            by: s.by.as_ref(),
            series: s.series.iter().collect(),
        };
        let html = analyzer::output::html::render(&self.summary, end.title, self.top, &extras);
        // `--html -`: standard output, as `--events -`.
        if self.path.as_os_str() == "-" {
            let mut out = std::io::stdout().lock();
            return std::io::Write::write_all(&mut out, html.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the HTML report to standard output");
        }
        std::fs::write(&self.path, html).with_context(|| format!("writing {}", self.path.display()))
    }
}
