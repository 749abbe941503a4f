//! A whole Zeek ssl.log read at once (`replay`): rows to records, damaged
//! lines reported with their line numbers (the first [`ERRORS_SHOWN`] on
//! standard error, the rest counted), every good row kept.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use analyzer::local_nets::LocalNets;
use anyhow::Result;

use super::{Form, Line, Parser, ZeekStats, ERRORS_SHOWN, MAX_LINE};
use crate::sink::RecordSink;

/// Records handed to the sink at once.
const BATCH: usize = 1024;

/// What reading one log gave.
#[derive(Debug, Default)]
pub struct Outcome {
    pub stats: ZeekStats,
    pub form: Option<Form>,
    /// A `#fields` header or a JSON row was seen: it is a Zeek log.
    pub saw_header: bool,
    pub unknown_columns: Vec<String>,
    /// The first damaged line's message, `name:line: why`.
    pub first_error: Option<String>,
}

/// Reads one line of at most [`MAX_LINE`] bytes into `buf` (without its
/// newline); Ok(None) at the end, Ok(Some(false)) for a longer line (read
/// past, not kept).
pub fn read_line(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    buf.clear();
    let n = r.take(MAX_LINE as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Some(true));
    }
    if buf.len() <= MAX_LINE {
        // The last line, without a newline.
        return Ok(Some(true));
    }
    // Too long: skip to its end.
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                break;
            }
            None => {
                let len = chunk.len();
                r.consume(len);
            }
        }
    }
    buf.clear();
    Ok(Some(false))
}

/// Reads the log `stream` (named `name` in messages) into `sink`;
/// `capture`: the record's `capture`, `local`: this host's addresses.
pub fn read(
    name: &str,
    stream: Box<dyn Read + Send>,
    capture: Option<&str>,
    local: Option<&LocalNets>,
    sink: &mut dyn RecordSink,
) -> Result<Outcome> {
    let mut reader = BufReader::with_capacity(1 << 16, stream);
    let mut parser = Parser::default();
    let mut out = Outcome::default();
    let mut batch = Vec::with_capacity(BATCH);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut io_error = None;
    loop {
        let whole = match read_line(&mut reader, &mut buf) {
            Ok(Some(w)) => w,
            Ok(None) => break,
            Err(e) => {
                io_error = Some(e);
                break;
            }
        };
        line_no += 1;
        let line = if whole {
            parser.line(&buf)
        } else {
            Line::Bad(format!("longer than {MAX_LINE} bytes"))
        };
        match line {
            Line::Nothing => {}
            Line::Row(row) => match row.record(capture, local) {
                Some(r) => {
                    out.stats.rows += 1;
                    batch.push(r);
                    if batch.len() >= BATCH {
                        sink.records(&batch)?;
                        batch.clear();
                    }
                }
                None => bad(name, line_no, "no addresses", &mut out),
            },
            Line::Dtls => out.stats.dtls_rows += 1,
            Line::Bad(why) => bad(name, line_no, &why, &mut out),
        }
    }
    sink.records(&batch)?;
    out.form = parser.form();
    out.saw_header = parser.saw_header();
    out.unknown_columns = parser.unknown_columns().to_vec();
    if out.stats.bad_lines > ERRORS_SHOWN {
        eprintln!(
            "tlsrum: {name}: {} more damaged lines not shown",
            out.stats.bad_lines - ERRORS_SHOWN
        );
    }
    if let Some(e) = io_error {
        let msg = format!("{name}: reading failed after line {line_no}: {e}");
        eprintln!("tlsrum: {msg}");
        out.stats.bad_lines += 1;
        out.first_error.get_or_insert(msg);
    }
    Ok(out)
}

fn bad(name: &str, line_no: u64, why: &str, out: &mut Outcome) {
    out.stats.bad_lines += 1;
    let msg = format!("{name}:{line_no}: {why}");
    if out.stats.bad_lines <= ERRORS_SHOWN {
        eprintln!("tlsrum: {msg}");
    }
    out.first_error.get_or_insert(msg);
}

/// Whether a file a directory scan found holds a Zeek ssl.log (plain,
/// gzip or zstd): a TSV header whose `#path` is `ssl`, or a JSON first
/// line that is an ssl.log row.
pub fn sniff(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(crate::source::pcap_file::Opened::Text(stream)) =
        crate::source::pcap_file::PcapFile::open_input_file(path.display().to_string(), file)
    else {
        return false;
    };
    let mut reader = BufReader::new(stream);
    let mut parser = Parser::default();
    let mut buf = Vec::new();
    // The header block is a dozen lines.
    for _ in 0..16 {
        match read_line(&mut reader, &mut buf) {
            Ok(Some(true)) => {}
            _ => return false,
        }
        if buf.starts_with(b"#path") {
            return buf.windows(3).any(|w| w == b"ssl");
        }
        if let Line::Row(_) | Line::Dtls = parser.line(&buf) {
            return parser.form() == Some(Form::Json);
        }
    }
    false
}
