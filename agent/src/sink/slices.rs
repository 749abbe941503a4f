//! `replay --by DIM[,DIM...]` / `--window DURATION`: records aggregated by
//! group (and window), written at the end as a table, NDJSON or CSV
//! ([`analyzer::output::slices`]), then the never-resume section (table).

use std::io::{self, BufWriter, Write};
use std::sync::Arc;

use analyzer::client_names::ClientNames;
use analyzer::never_resume::ByClient;
use analyzer::output::{slices, table};
use analyzer::record::ConnectionRecord;
use analyzer::slice::{Slicer, MAX_CELLS, MAX_GROUPS, MAX_WINDOWS};
use anyhow::Result;

use super::{Format, RecordSink, RunEnd};

pub struct SliceSink {
    slicer: Box<Slicer>,
    clients: Box<ByClient>,
    format: Format,
    names: Option<Arc<ClientNames>>,
}

impl SliceSink {
    pub fn new(slicer: Slicer, format: Format, names: Option<Arc<ClientNames>>) -> Self {
        SliceSink {
            slicer: Box::new(slicer),
            clients: Box::default(),
            format,
            names,
        }
    }
}

impl RecordSink for SliceSink {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.slicer.add(r);
        self.clients.add(r);
        Ok(())
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        self.slicer.finish();
        let names = self.names.as_deref();
        let mut out = BufWriter::new(io::stdout().lock());
        match self.format {
            Format::Table => {
                slices::write_table(&mut out, &self.slicer, names)?;
                table::write_never_resume(&mut out, &self.clients, names)?;
            }
            Format::Ndjson => slices::write_ndjson(&mut out, &self.slicer, names)?,
            Format::Csv => slices::write_csv(&mut out, &self.slicer, names)?,
            // Refused with --by/--window before any record (replay.rs).
            Format::Zeek | Format::ZeekJson => {
                anyhow::bail!("aggregates have no Zeek form: drop --by/--window")
            }
        }
        out.flush()?;
        warn_folded(&self.slicer);
        Ok(())
    }
}

/// Says on stderr what the caps folded (the table says it too).
pub fn warn_folded(s: &Slicer) {
    if s.folded.groups > 0 {
        eprintln!(
            "tlsrum: {} connections folded into (other): more than {MAX_GROUPS} groups or {MAX_CELLS} (window, group) cells",
            s.folded.groups
        );
    }
    if s.folded.windows > 0 {
        eprintln!(
            "tlsrum: {} connections left out of the windowed output: more than {MAX_WINDOWS} windows (use a longer --window)",
            s.folded.windows
        );
    }
}
