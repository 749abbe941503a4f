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
    /// Writes Zeek's ssl.log ([`analyzer::Config::zeek_view`]).
    pub fn is_zeek(self) -> bool {
        matches!(self, EventsFormat::Zeek | EventsFormat::ZeekJson)
    }

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

/// Bytes written to the file at a time (or at the second's flush): a
/// record is ~1.5 KB, and 8 KiB pieces cost a write() every five records.
const WRITE_BUFFER: usize = 256 * 1024;

fn open_append(path: &Path, format: EventsFormat) -> Result<Box<dyn EventsSink>> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
        .with_context(|| format!("opening {} for appending", path.display()))?;
    let header = needs_header(&mut file).with_context(|| format!("reading {}", path.display()))?;
    Ok(format.sink(BufWriter::with_capacity(WRITE_BUFFER, file), header))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn end_run(path: &Path, reopen: &Arc<AtomicBool>) {
        let mut f = EventsFile::open(path, EventsFormat::Zeek, Arc::clone(reopen)).unwrap();
        let stats = analyzer::Stats::default();
        f.finish(&RunEnd {
            stats: &stats,
            captures: 0,
            title: "t",
        })
        .unwrap();
    }

    #[test]
    fn zeek_header_when_opened_empty_or_closed() {
        let dir = std::env::temp_dir().join(format!("tlsrum-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ssl.log");
        let _ = std::fs::remove_file(&path);
        let reopen = Arc::new(AtomicBool::new(false));
        end_run(&path, &reopen);
        end_run(&path, &reopen);
        let text = std::fs::read_to_string(&path).unwrap();
        // Two runs, each its own header block and #close.
        assert_eq!(text.matches("#fields\t").count(), 2, "{text}");
        assert_eq!(text.matches("#close\t").count(), 2, "{text}");
        // A file that does not end in #close (rows appended by a run still
        // going, or killed) gets no second header.
        std::fs::write(&path, "#fields\tts\n1.0\n").unwrap();
        let mut file = OpenOptions::new().read(true).open(&path).unwrap();
        assert!(!needs_header(&mut file).unwrap());
        // SIGHUP after logrotate moved the file: the new file gets a header,
        // the old one its #close.
        let mut f = EventsFile::open(&path, EventsFormat::Zeek, Arc::clone(&reopen)).unwrap();
        let moved = dir.join("ssl.log.1");
        std::fs::rename(&path, &moved).unwrap();
        reopen.store(true, Ordering::Relaxed);
        f.flush().unwrap();
        // The header comes with the first row (or at the end of the run).
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        let stats = analyzer::Stats::default();
        f.finish(&RunEnd {
            stats: &stats,
            captures: 0,
            title: "t",
        })
        .unwrap();
        assert!(std::fs::read_to_string(&moved).unwrap().ends_with('\n'));
        assert!(std::fs::read_to_string(&moved)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .starts_with("#close\t"));
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .starts_with("#separator \\x09\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
