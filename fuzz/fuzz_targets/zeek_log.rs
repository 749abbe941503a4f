//! Zeek ssl.log lines (`zeek_log::Parser`, TSV and JSON) and the records
//! their rows become (`Row::record`).
//!
//! Input: the text of a log, split at newlines as the readers split it.
//! Checks: every row's record carries the `zeek_ssl_log` note and
//! serializes to one JSON object; a line is never both a row and damaged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsrum::source::zeek_log::row::NOTE;
use tlsrum::source::zeek_log::{Line, Parser};

fuzz_target!(|data: &[u8]| {
    let mut parser = Parser::default();
    let mut rows = 0usize;
    for line in data.split(|&b| b == b'\n') {
        match parser.line(line) {
            Line::Row(row) => {
                rows += 1;
                if let Some(r) = row.record(Some("fuzz"), None) {
                    assert_eq!(r.notes, vec![NOTE]);
                    let json = serde_json::to_string(&r).expect("a record serializes");
                    assert!(json.starts_with('{') && !json.contains('\n'));
                }
            }
            Line::Bad(why) => assert!(!why.is_empty()),
            Line::Nothing | Line::Dtls => {}
        }
    }
    assert!(rows <= data.split(|&b| b == b'\n').count());
    let _ = (parser.form(), parser.saw_header(), parser.unknown_columns());
});
