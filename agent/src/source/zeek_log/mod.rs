//! Zeek `ssl.log` as a source of connection records: `replay` reads such
//! logs beside captures, `live --zeek-log` follows one as Zeek writes it.
//!
//! Zeek writes the log as TSV (a `#separator`/`#fields`/`#types` header
//! block, then one row a line) or as JSON (one object a line, keys such as
//! `id.orig_h`); which one is told by the first line, never by the file's
//! name. Columns are read by name, so Bro's and older Zeek's logs (fewer or
//! other columns) read as well; only `ts` and the `id.*` four are required.
//!
//! A row becomes one [`analyzer::record::ConnectionRecord`] with what Zeek knows (see
//! [`row`] for the mapping); what it does not (timing, offers, bytes,
//! JA4) is null. A damaged line is an error naming its line number; every
//! other row is kept.

pub mod file;
mod json;
pub mod row;
pub mod tail;
mod tsv;

use row::Row;

analyzer::counters! {
    /// What reading Zeek logs met, for `--stats` and `/metrics`.
    pub struct ZeekStats in "zeek" {
        /// Rows of a Zeek ssl.log turned into connection records.
        rows,
        /// Lines of a Zeek ssl.log that could not be read (each reported with its line number).
        bad_lines,
        /// Rows of DTLS connections, which tlsrum does not analyse (no record).
        dtls_rows,
        /// Rows read before `live --zeek-log` started (skipped unless --zeek-from-start).
        skipped_existing,
        /// Times the followed ssl.log was rotated (renamed) or truncated.
        rotations,
    }
}

/// Longest line read; beyond it the line is an error and skipped (a
/// row of Zeek's standard columns is well under 1 KiB; with certificate
/// fingerprints and extensions a few KiB).
pub const MAX_LINE: usize = 1 << 20;

/// Errors shown per file on standard error; the rest are counted.
pub const ERRORS_SHOWN: u64 = 10;

/// What one line of a log was.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A header, comment or blank line.
    Nothing,
    Row(Box<Row>),
    /// A row of something tlsrum does not read (DTLS), counted.
    Dtls,
    /// The line is damaged: why (without the line number).
    Bad(String),
}

/// Which form the log is in, told by its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Tsv,
    Json,
}

impl Form {
    pub fn name(self) -> &'static str {
        match self {
            Form::Tsv => "TSV",
            Form::Json => "JSON",
        }
    }
}

/// Reads a log line by line, in order; one per file.
#[derive(Debug, Default)]
pub struct Parser {
    form: Option<Form>,
    tsv: tsv::Header,
    /// Columns no version of Zeek's ssl.log has, named once per file.
    unknown_columns: Vec<String>,
    /// A JSON line was an ssl.log row.
    json_row: bool,
}

impl Parser {
    /// The form, once the first line told it.
    pub fn form(&self) -> Option<Form> {
        self.form
    }

    /// Whether a TSV header (`#fields`) or a JSON ssl.log row was seen: a file
    /// with neither is not a Zeek log.
    pub fn saw_header(&self) -> bool {
        self.tsv.has_fields() || self.json_row
    }

    /// Columns of the header that Zeek's ssl.log never had (extensions by
    /// packages), each once; tlsrum does not read them.
    pub fn unknown_columns(&self) -> &[String] {
        &self.unknown_columns
    }

    /// One line, without its line ending.
    pub fn line(&mut self, raw: &[u8]) -> Line {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        let first = line.iter().position(|b| !b.is_ascii_whitespace());
        let Some(first) = first else {
            return Line::Nothing;
        };
        let form = *self.form.get_or_insert(if line[first] == b'{' {
            Form::Json
        } else {
            Form::Tsv
        });
        match form {
            Form::Json => {
                let out = json::line(line);
                self.json_row |= matches!(out, Line::Row(_) | Line::Dtls);
                out
            }
            Form::Tsv => {
                let out = self.tsv.line(line);
                if let tsv::Out::Fields = out {
                    for c in self.tsv.unknown_columns() {
                        if !self.unknown_columns.contains(&c) {
                            self.unknown_columns.push(c);
                        }
                    }
                }
                out.into()
            }
        }
    }
}

/// Zeek's ssl.log columns, any version (Bro 2.x to Zeek 7): every other
/// column is an extension and is named on standard error once.
pub const KNOWN_COLUMNS: &[&str] = &[
    "ts",
    "uid",
    "id.orig_h",
    "id.orig_p",
    "id.resp_h",
    "id.resp_p",
    "version",
    "cipher",
    "curve",
    "server_name",
    "session_id",
    "resumed",
    "client_ticket_empty_session_seen",
    "client_key_exchange_seen",
    "last_alert",
    "next_protocol",
    "established",
    "ssl_history",
    "cert_chain_fps",
    "client_cert_chain_fps",
    "cert_chain_fuids",
    "client_cert_chain_fuids",
    "subject",
    "issuer",
    "issuer_subject",
    "client_subject",
    "client_issuer",
    "not_valid_before",
    "not_valid_after",
    "sni_matches_cert",
    "validation_status",
    "valid_ct_logs",
    "valid_ct_operators",
    "notary.first_seen",
    "notary.times_seen",
    "notary.valid",
    "ja3",
    "ja3s",
    "ja4",
    "ja4s",
];
