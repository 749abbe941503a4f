//! One JSON object per line: the record contract of DESIGN.md.
use std::io::{self, Write};

use crate::record::ConnectionRecord;

pub fn write_record(w: &mut impl Write, r: &ConnectionRecord) -> io::Result<()> {
    serde_json::to_writer(&mut *w, r)?;
    w.write_all(b"\n")
}
