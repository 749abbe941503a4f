//! The summary table on standard output (`replay`'s default): records are
//! aggregated per server name and transport, and printed at the end with
//! a line of totals from the analyzer's counters.

use std::io::{self, Write};

use std::sync::Arc;

use analyzer::aggregate::Summary;
use analyzer::client_names::ClientNames;
use analyzer::output::table;
use analyzer::record::ConnectionRecord;
use anyhow::Result;

use super::{RecordSink, RunEnd};

pub struct TableSink {
    summary: Box<Summary>,
    /// Server names shown; the rest are folded into "(other)".
    top: usize,
    /// Client names for the never-resume section.
    names: Option<Arc<ClientNames>>,
}

impl TableSink {
    pub fn new(top: usize, names: Option<Arc<ClientNames>>) -> Self {
        TableSink {
            summary: Box::default(),
            top,
            names,
        }
    }
}

impl RecordSink for TableSink {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.summary.add(r);
        Ok(())
    }

    fn finish(&mut self, end: &RunEnd<'_>) -> Result<()> {
        let total = end.stats;
        let mut out = io::stdout().lock();
        table::write_table(&mut out, &self.summary, self.top, self.names.as_deref())?;
        writeln!(
            out,
            "{} files, {} packets, {} TLS-over-TCP and {} QUIC connections, {} non-TLS flows, {} stream errors, {} reassembly gaps, {} flows evicted",
            end.captures,
            total.packets,
            total.tls_connections,
            total.quic.connections,
            total.non_tls_flows,
            total.stream_errors,
            total.reassembly_gaps,
            total.flows_evicted
        )?;
        Ok(())
    }
}
