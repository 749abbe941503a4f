//! `live --events FILE`: records (NDJSON, or Zeek's ssl.log with
//! `--events-format`) appended to a file that logrotate may move away. The file is opened for appending (a restarted agent never
//! truncates what an earlier run wrote), and a SIGHUP makes the agent open
//! the path again, logrotate's move-then-HUP (`postrotate ... kill -HUP`),
//! so no `copytruncate` is needed.
//!
//! Records are never torn across a reopen: the switch happens only
//! between two batches of records, after the old file got everything
//! written so far.
//!
//! Zeek's TSV form writes its header block whenever the file it opens is
//! empty or ends with a previous run's `#close` (as Zeek starts a new
//! block), and `#close` before letting a file go.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use analyzer::output::zeek::ZeekForm;
use analyzer::record::ConnectionRecord;
use anyhow::{Context, Result};
use clap::ValueEnum;

use super::ndjson::NdjsonSink;
use super::zeek::ZeekSink;
use super::{RecordSink, RunEnd};

/// `live --events-format`: what `--events` writes.
#[derive(Clone, Copy, Debug, Default, ValueEnum, PartialEq, Eq)]
pub enum EventsFormat {
    /// The record contract (DESIGN.md), one JSON object per line.
    #[default]
    Ndjson,
    /// Zeek's ssl.log, TSV with its header block (docs/zeek.md).
    Zeek,
    /// Zeek's ssl.log in Zeek's JSON form.
    ZeekJson,
}

impl EventsFormat {
    /// The sink writing this format to `w`; `header`: a Zeek TSV header
    /// block first.
    pub fn sink<W: std::io::Write + 'static>(self, w: W, header: bool) -> Box<dyn EventsSink> {
        match self {
            EventsFormat::Ndjson => Box::new(NdjsonSink::new(w)),
            EventsFormat::Zeek => Box::new(ZeekSink::new(w, ZeekForm::Tsv, header)),
            EventsFormat::ZeekJson => Box::new(ZeekSink::new(w, ZeekForm::Json, header)),
        }
    }
}

/// A record sink that can end its file (Zeek TSV: `#close`) before a reopen.
pub trait EventsSink: RecordSink {
    fn close(&mut self) -> Result<()> {
        self.flush()
    }
}

impl<W: std::io::Write> EventsSink for NdjsonSink<W> {}

impl<W: std::io::Write> EventsSink for ZeekSink<W> {
    fn close(&mut self) -> Result<()> {
        ZeekSink::close(self)
    }
}

pub struct EventsFile {
    path: PathBuf,
    format: EventsFormat,
    sink: Box<dyn EventsSink>,
    /// Set by the SIGHUP handler, cleared here once the path is reopened.
    reopen: Arc<AtomicBool>,
}

/// Whether a Zeek TSV header block is due: the file is empty or its last
/// line is a `#close`.
fn needs_header(file: &mut File) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    let tail = len.min(64);
    file.seek(SeekFrom::Start(len - tail))?;
    let mut buf = Vec::new();
    file.take(tail).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let last = text
        .trim_end_matches('\n')
        .rsplit('\n')
        .next()
        .unwrap_or("");
    Ok(last.starts_with("#close"))
}

fn open_append(path: &Path, format: EventsFormat) -> Result<Box<dyn EventsSink>> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
        .with_context(|| format!("opening {} for appending", path.display()))?;
    let header = needs_header(&mut file).with_context(|| format!("reading {}", path.display()))?;
    Ok(format.sink(BufWriter::new(file), header))
}

impl EventsFile {
    /// Opens `path` for appending; `reopen` is the flag a SIGHUP sets.
    pub fn open(path: &Path, format: EventsFormat, reopen: Arc<AtomicBool>) -> Result<Self> {
        Ok(EventsFile {
            path: path.to_path_buf(),
            format,
            sink: open_append(path, format)?,
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
        match open_append(&self.path, self.format) {
            Ok(sink) => {
                self.sink.close()?;
                self.sink = sink;
            }
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
