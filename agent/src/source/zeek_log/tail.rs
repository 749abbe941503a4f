//! Following a Zeek ssl.log as Zeek writes it (`live --zeek-log`), as
//! `tail -F` does: by polling, because the file's own growth is the only
//! event needed and polling each 100 ms (the live loop's pace) costs one
//! `stat` and one `read`; `inotify` (the `notify` crate) would add a
//! dependency and a thread for no earlier answer, and does not see files
//! on NFS or written from a container's other mount namespace.
//!
//! Rotation, as Zeek does it (the log is closed with `#close`, renamed to
//! `ssl.<date>.log` or moved to the archive, and a new `ssl.log` with a new
//! header is created): the renamed file is read to its end through the
//! descriptor still open, then the new one from its first byte, so no row
//! is lost or read twice. `copytruncate` (logrotate): the file shrinks
//! under the reader, which starts again at its beginning; rows written
//! between logrotate's copy and its truncation are lost, as for any reader.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use analyzer::local_nets::LocalNets;
use analyzer::record::ConnectionRecord;

use super::{Line, Parser, ZeekStats, ERRORS_SHOWN, MAX_LINE};

/// Bytes read per poll at most: records of a burst go out in steps.
const READ_PER_POLL: usize = 4 << 20;

/// The log being followed.
struct Open {
    file: File,
    /// (device, inode): a rotation makes `path` another file.
    id: (u64, u64),
    /// Bytes of it read.
    offset: u64,
    /// Lines of it read (messages).
    line_no: u64,
}

pub struct Tail {
    path: PathBuf,
    name: String,
    from_start: bool,
    started: bool,
    open: Option<Open>,
    parser: Parser,
    /// The unfinished last line.
    partial: Vec<u8>,
    /// The partial line grew past [`MAX_LINE`]: skip to its end.
    skipping: bool,
    stats: ZeekStats,
    /// Whether rows are records yet (not before start, unless from_start).
    emit: bool,
}

impl Tail {
    /// Follows `path`; rows already in it are read only with `from_start`.
    /// The file may not exist yet (Zeek starting): it is waited for.
    pub fn new(path: &Path, from_start: bool) -> Self {
        Tail {
            path: path.to_path_buf(),
            name: path.display().to_string(),
            from_start,
            started: false,
            open: None,
            parser: Parser::default(),
            partial: Vec::new(),
            skipping: false,
            stats: ZeekStats::default(),
            emit: from_start,
        }
    }

    pub fn stats(&self) -> &ZeekStats {
        &self.stats
    }

    /// Whether the file is open (for /healthz).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Reads what was appended since the last poll (and follows a
    /// rotation): its rows' records go to `out`.
    pub fn poll(&mut self, local: Option<&LocalNets>, out: &mut Vec<ConnectionRecord>) {
        if self.open.is_none() {
            self.reopen(local, out);
            if self.open.is_none() {
                return;
            }
        }
        self.read_some(local, out);
        let now = std::fs::metadata(&self.path)
            .ok()
            .map(|m| ((m.dev(), m.ino()), m.len()));
        let Some(open) = &self.open else {
            return;
        };
        match now {
            // Renamed and not (yet) created again: keep reading the old one.
            None => {}
            Some((id, _)) if id != open.id => {
                // Rotated: what was written before the rename, then the new file.
                while self.read_some(local, out) {}
                self.end_of_file(local, out);
                self.stats.rotations += 1;
                self.open = None;
                self.parser = Parser::default();
                self.reopen(local, out);
            }
            Some((_, len)) if len < open.offset => {
                // Truncated in place: the header stays what it was.
                self.stats.rotations += 1;
                self.partial.clear();
                self.skipping = false;
                if let Some(o) = self.open.as_mut() {
                    o.offset = 0;
                    let _ = o.file.seek(SeekFrom::Start(0));
                }
            }
            Some(_) => {}
        }
    }

    /// Opens `path`; at the agent's start (without --zeek-from-start) its
    /// rows are read for the header only and counted as skipped.
    fn reopen(&mut self, local: Option<&LocalNets>, out: &mut Vec<ConnectionRecord>) {
        let Ok(file) = File::open(&self.path) else {
            return;
        };
        let Ok(meta) = file.metadata() else {
            return;
        };
        self.open = Some(Open {
            file,
            id: (meta.dev(), meta.ino()),
            offset: 0,
            line_no: 0,
        });
        self.partial.clear();
        self.skipping = false;
        if !self.started {
            self.started = true;
            if !self.from_start {
                while self.read_some(local, out) {}
            }
        }
        self.emit = true;
    }

    /// Reads up to [`READ_PER_POLL`] bytes; whether there may be more.
    fn read_some(&mut self, local: Option<&LocalNets>, out: &mut Vec<ConnectionRecord>) -> bool {
        let Some(open) = self.open.as_mut() else {
            return false;
        };
        let mut buf = vec![0u8; READ_PER_POLL];
        let n = match open.file.read(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("tlsrum: {}: reading failed: {e}", self.name);
                return false;
            }
        };
        open.offset += n as u64;
        buf.truncate(n);
        let mut rest = &buf[..];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(i);
            rest = after.get(1..).unwrap_or_default();
            if self.skipping {
                self.skipping = false;
                self.partial.clear();
                continue;
            }
            let mut whole = std::mem::take(&mut self.partial);
            whole.extend_from_slice(line);
            self.line(&whole, local, out);
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_LINE {
                self.skipping = true;
                self.partial.clear();
                self.bad(&format!("longer than {MAX_LINE} bytes"));
            }
        }
        n == READ_PER_POLL
    }

    /// The rotated file ended: an unfinished last line is damage.
    fn end_of_file(&mut self, local: Option<&LocalNets>, out: &mut Vec<ConnectionRecord>) {
        if !self.partial.is_empty() && !self.skipping {
            let last = std::mem::take(&mut self.partial);
            self.line(&last, local, out);
        }
    }

    fn line(&mut self, raw: &[u8], local: Option<&LocalNets>, out: &mut Vec<ConnectionRecord>) {
        if let Some(o) = self.open.as_mut() {
            o.line_no += 1;
        }
        match self.parser.line(raw) {
            Line::Nothing => {}
            Line::Row(_) if !self.emit => self.stats.skipped_existing += 1,
            Line::Row(row) => match row.record(None, local) {
                Some(r) => {
                    self.stats.rows += 1;
                    out.push(r);
                }
                None => self.bad("no addresses"),
            },
            Line::Dtls => self.stats.dtls_rows += 1,
            Line::Bad(why) => self.bad(&why),
        }
    }

    fn bad(&mut self, why: &str) {
        self.stats.bad_lines += 1;
        let line_no = self.open.as_ref().map_or(0, |o| o.line_no);
        // A service's log: the first errors, then one in a thousand.
        if self.stats.bad_lines <= ERRORS_SHOWN || self.stats.bad_lines.is_multiple_of(1000) {
            eprintln!(
                "tlsrum: {}:{line_no}: {why} ({} damaged lines so far)",
                self.name, self.stats.bad_lines
            );
        }
    }
}
