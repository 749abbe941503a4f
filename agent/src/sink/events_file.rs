//! `live --events FILE`: NDJSON appended to a file that logrotate may move
//! away. The file is opened for appending (a restarted agent never
//! truncates what an earlier run wrote), and a SIGHUP makes the agent open
//! the path again, logrotate's move-then-HUP (`postrotate ... kill -HUP`),
//! so no `copytruncate` is needed.
//!
//! Records are never torn across a reopen: the switch happens only
//! between two batches of records, after the old file got everything
//! written so far.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use analyzer::record::ConnectionRecord;
use anyhow::{Context, Result};

use super::ndjson::NdjsonSink;
use super::{RecordSink, RunEnd};

pub struct EventsFile {
    path: PathBuf,
    sink: NdjsonSink<BufWriter<File>>,
    /// Set by the SIGHUP handler, cleared here once the path is reopened.
    reopen: Arc<AtomicBool>,
}

fn open_append(path: &Path) -> Result<NdjsonSink<BufWriter<File>>> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {} for appending", path.display()))?;
    Ok(NdjsonSink::new(BufWriter::new(file)))
}

impl EventsFile {
    /// Opens `path` for appending; `reopen` is the flag a SIGHUP sets.
    pub fn open(path: &Path, reopen: Arc<AtomicBool>) -> Result<Self> {
        Ok(EventsFile {
            path: path.to_path_buf(),
            sink: open_append(path)?,
            reopen,
        })
    }

    /// After a SIGHUP: flushes the old file and opens the path again. If
    /// that fails (the directory went away), records keep going to the old
    /// file and the next SIGHUP tries again: losing records is worse.
    fn reopen_if_asked(&mut self) -> Result<()> {
        if !self.reopen.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        self.sink.flush()?;
        match open_append(&self.path) {
            Ok(sink) => self.sink = sink,
            Err(e) => eprintln!("tlsrum: {e:#}; still writing to the file opened before"),
        }
        Ok(())
    }
}

impl RecordSink for EventsFile {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.records(std::slice::from_ref(r))
    }

    fn records(&mut self, records: &[ConnectionRecord]) -> Result<()> {
        self.reopen_if_asked()?;
        self.sink.records(records)
    }

    /// Live flushes every second: a SIGHUP is acted on within a second
    /// even when no record comes.
    fn flush(&mut self) -> Result<()> {
        self.reopen_if_asked()?;
        self.sink.flush()
    }

    fn finish(&mut self, end: &RunEnd<'_>) -> Result<()> {
        self.sink.finish(end)
    }
}
