//! Record sinks: where connection records go. NDJSON, CSV, the summary
//! table and the HTML report are here, the Prometheus metrics in the
//! `metrics` module; `replay` and `live` write through the same ones,
//! several at once through [`FanOut`]. A new output format is one new file
//! here implementing [`RecordSink`], and its value in [`Format`] (or its
//! own option, as `--html`).

pub mod csv;
pub mod events_file;
pub mod html;
pub mod ndjson;
pub mod slices;
pub mod table;
pub mod top;
pub mod zeek;

use std::io::{self, BufWriter};

use analyzer::output::zeek::ZeekForm;
use analyzer::record::ConnectionRecord;
use analyzer::Stats;
use anyhow::Result;
use clap::ValueEnum;

/// What a run was, for sinks that write something at its end.
pub struct RunEnd<'a> {
    /// The analyzer's counters over the whole run (every capture merged).
    pub stats: &'a Stats,
    /// Capture files read (replay; 0 for live).
    pub captures: usize,
    /// What was analysed, for titles: the capture, or how many under which paths.
    pub title: &'a str,
}

/// Appends a record's bytes as a sink writes them.
pub type Encoder = fn(&ConnectionRecord, &mut Vec<u8>);

/// A destination for connection records.
pub trait RecordSink {
    /// Takes one record.
    fn record(&mut self, r: &ConnectionRecord) -> Result<()>;
    /// Takes records in order; sinks that pay per call (a lock) take them
    /// at once.
    fn records(&mut self, records: &[ConnectionRecord]) -> Result<()> {
        records.iter().try_for_each(|r| self.record(r))
    }
    /// A sink that writes each record as bytes and keeps nothing else of
    /// it may hand out how it encodes one: a sharded replay then encodes
    /// on its shards and hands over the bytes ([`encoded`](Self::encoded))
    /// instead of the records.
    fn encoder(&self) -> Option<Encoder> {
        None
    }
    /// Takes records as `encoder` encoded them, in order.
    fn encoded(&mut self, _bytes: &[u8]) -> Result<()> {
        anyhow::bail!("this sink takes records, not encoded bytes")
    }
    /// Hands buffered output to its reader (live: every second).
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// The run is over: writes what comes at the end (a summary, a
    /// report) and flushes.
    fn finish(&mut self, end: &RunEnd<'_>) -> Result<()>;
}

/// Several sinks fed the same records, in the order they were added.
#[derive(Default)]
pub struct FanOut(Vec<Box<dyn RecordSink>>);

impl FanOut {
    pub fn push(&mut self, sink: Box<dyn RecordSink>) {
        self.0.push(sink);
    }
}

impl RecordSink for FanOut {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.record(r))
    }

    fn records(&mut self, records: &[ConnectionRecord]) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.records(records))
    }

    /// One sink's, when it is the only one.
    fn encoder(&self) -> Option<Encoder> {
        match &self.0[..] {
            [only] => only.encoder(),
            _ => None,
        }
    }

    fn encoded(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.0[..] {
            [only] => only.encoded(bytes),
            _ => anyhow::bail!("several sinks take records, not encoded bytes"),
        }
    }

    fn flush(&mut self) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.flush())
    }

    fn finish(&mut self, end: &RunEnd<'_>) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.finish(end))
    }
}

/// `replay --format`: what goes to standard output.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Table,
    Ndjson,
    Csv,
    /// Zeek's ssl.log, TSV with its header block (docs/zeek.md).
    Zeek,
    /// Zeek's ssl.log in Zeek's JSON form, one object per line.
    ZeekJson,
}

impl Format {
    /// Writes Zeek's ssl.log: its records need the analyzer's Zeek view
    /// ([`analyzer::Config::zeek_view`]).
    pub fn is_zeek(self) -> bool {
        matches!(self, Format::Zeek | Format::ZeekJson)
    }

    /// The sink writing this format to standard output; `top` is the
    /// number of server names the table shows, `names` the client names
    /// its never-resume section uses; `with_capture`: a CSV column naming
    /// each record's capture (NDJSON writes `capture` whenever it is set).
    pub fn stdout_sink(
        self,
        top: usize,
        names: Option<std::sync::Arc<analyzer::client_names::ClientNames>>,
        with_capture: bool,
    ) -> Result<Box<dyn RecordSink>> {
        let stdout = || BufWriter::with_capacity(1 << 16, io::stdout());
        Ok(match self {
            Format::Table => Box::new(table::TableSink::new(top, names)),
            Format::Ndjson => Box::new(ndjson::NdjsonSink::new(stdout())),
            Format::Csv => Box::new(csv::CsvSink::new(stdout(), with_capture)),
            Format::Zeek => Box::new(zeek::ZeekSink::new(stdout(), ZeekForm::Tsv, true)),
            Format::ZeekJson => Box::new(zeek::ZeekSink::new(stdout(), ZeekForm::Json, true)),
        })
    }

    /// As written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Ndjson => "ndjson",
            Format::Csv => "csv",
            Format::Zeek => "zeek",
            Format::ZeekJson => "zeek-json",
        }
    }
}
