//! The one way data flows, for `replay` and `live` alike: a [`Source`]'s
//! packets into the [`Analyzer`], its records out to a [`RecordSink`], and
//! the flows it is done with that still send back to the source.

use std::time::Duration;

use analyzer::Analyzer;
use anyhow::Result;

use crate::pcap_out::PacketWriter;
use crate::sink::RecordSink;
use crate::source::{Captured, Source, Status};

/// Records held before they go to the sink in the middle of a poll: one
/// poll of a full ring under a flood finished ~41,000 flows, and holding
/// their records (~1 KiB each) until it returned cost ~50 MiB of peak.
const RECORD_BATCH: usize = 1024;

/// Polls the source once (waiting up to `timeout`) and feeds what came to
/// the analyzer, and to `tap` (`--write-pcap`) if there is one; records go
/// to `sink` whenever [`RECORD_BATCH`] are waiting (the rest at
/// [`deliver`] or [`flush_records`]).
pub fn pump(
    source: &mut dyn Source,
    timeout: Duration,
    analyzer: &mut Analyzer,
    mut tap: Option<&mut PacketWriter>,
    sink: &mut dyn RecordSink,
) -> Result<Status> {
    let mut sink_error = None;
    let status = source.poll(timeout, &mut |c: Captured<'_>| {
        if let Some(w) = tap.as_deref_mut() {
            w.captured(&c);
        }
        c.analyze(analyzer);
        if analyzer.records_waiting() >= RECORD_BATCH && sink_error.is_none() {
            sink_error = flush_records(analyzer, sink).err();
        }
    })?;
    match sink_error {
        Some(e) => Err(e),
        None => Ok(status),
    }
}

/// Hands the records the analyzer has finished to the sink.
pub fn flush_records(analyzer: &mut Analyzer, sink: &mut dyn RecordSink) -> Result<()> {
    if analyzer.records_waiting() == 0 {
        return Ok(());
    }
    analyzer.with_records(|records| sink.records(records))
}

/// Flows finished per step at the end of input (see [`finish`]).
const FINISH_BATCH: usize = 4096;

/// End of input: every flow still open is finished, in steps whose records
/// go to the sink as they come (the flows a flood left open never become
/// as many records in memory at once).
pub fn finish(analyzer: &mut Analyzer, sink: &mut dyn RecordSink) -> Result<()> {
    while !analyzer.finish_some(FINISH_BATCH) {
        flush_records(analyzer, sink)?;
    }
    flush_records(analyzer, sink)
}

/// Tells the source which flows the analyzer is done with and still sent
/// a segment (so that it can stop sending them), then hands the records
/// to the sink.
pub fn deliver(
    analyzer: &mut Analyzer,
    source: &mut dyn Source,
    sink: &mut dyn RecordSink,
) -> Result<()> {
    let stragglers = analyzer.take_stragglers();
    if !stragglers.is_empty() {
        source.stragglers(&stragglers);
    }
    flush_records(analyzer, sink)
}
