//! Zeek's ASCII (TSV) log writer's format: a header block of `#` lines
//! (`#separator \x09`, then `#set_separator`, `#empty_field`,
//! `#unset_field`, `#path`, `#open`, `#fields`, `#types`), rows of
//! separated values, `#close` at the end. A file may hold several blocks
//! (`cat` of logs): each `#separator` line starts a new header. Values
//! escape the separator and unprintable bytes as `\xNN` and `\` as `\\`.

use std::net::IpAddr;

use super::row::{self, Row};
use super::{Line, KNOWN_COLUMNS};

/// Columns every row must have.
const REQUIRED: [&str; 5] = ["ts", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p"];

/// The current header block.
#[derive(Debug)]
pub struct Header {
    separator: Vec<u8>,
    set_separator: Vec<u8>,
    empty: Vec<u8>,
    unset: Vec<u8>,
    path: Option<String>,
    fields: Option<Vec<String>>,
    types: Option<Vec<String>>,
    /// Why the header cannot be read (a required column missing, not an
    /// ssl log), said again for each row under it.
    broken: Option<String>,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            separator: b"\t".to_vec(),
            set_separator: b",".to_vec(),
            empty: b"(empty)".to_vec(),
            unset: b"-".to_vec(),
            path: None,
            fields: None,
            types: None,
            broken: None,
        }
    }
}

/// What a TSV line was.
pub enum Out {
    Nothing,
    /// A `#fields` line: the columns are known.
    Fields,
    Line(Line),
}

impl From<Out> for Line {
    fn from(o: Out) -> Line {
        match o {
            Out::Nothing | Out::Fields => Line::Nothing,
            Out::Line(l) => l,
        }
    }
}

/// `\xNN` escapes (and `\\`) undone.
fn unescape(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while let Some(&b) = v.get(i) {
        if b == b'\\' {
            if v.get(i + 1) == Some(&b'\\') {
                out.push(b'\\');
                i += 2;
                continue;
            }
            if v.get(i + 1) == Some(&b'x') {
                let hex = v
                    .get(i + 2..i + 4)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(h) = hex {
                    out.push(h);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b);
        i += 1;
    }
    out
}

/// Splits on a separator of one or more bytes (an empty one: no split).
fn split<'a>(line: &'a [u8], sep: &'a [u8]) -> Vec<&'a [u8]> {
    if sep.is_empty() {
        return vec![line];
    }
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + sep.len() <= line.len() {
        if line.get(i..i + sep.len()) == Some(sep) {
            out.push(line.get(start..i).unwrap_or_default());
            i += sep.len();
            start = i;
        } else {
            i += 1;
        }
    }
    out.push(line.get(start..).unwrap_or_default());
    out
}

fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

/// Whether `v` (unescaped, set) is a value of Zeek type `ty`; types tlsrum
/// does not check (string, enum, …) take anything.
fn is_type(ty: &str, v: &str, set_sep: &str) -> bool {
    let inner = ty
        .strip_prefix("set[")
        .or_else(|| ty.strip_prefix("vector["))
        .and_then(|t| t.strip_suffix(']'));
    if let Some(inner) = inner {
        if set_sep.is_empty() {
            return true;
        }
        return v.split(set_sep).all(|e| is_type(inner, e, ""));
    }
    match ty {
        "time" | "interval" | "double" => v.parse::<f64>().is_ok_and(f64::is_finite),
        "count" => v.parse::<u64>().is_ok(),
        "int" => v.parse::<i64>().is_ok(),
        "port" => v.parse::<u16>().is_ok(),
        "addr" => v.parse::<IpAddr>().is_ok(),
        "subnet" => v
            .split_once('/')
            .is_some_and(|(a, l)| a.parse::<IpAddr>().is_ok() && l.parse::<u8>().is_ok()),
        "bool" => v == "T" || v == "F",
        _ => true,
    }
}

/// The type tlsrum reads a column it uses as, whatever `#types` says.
fn used_type(column: &str) -> Option<&'static str> {
    Some(match column {
        "ts" => "time",
        "id.orig_h" | "id.resp_h" => "addr",
        "id.orig_p" | "id.resp_p" => "port",
        "resumed" | "established" => "bool",
        "version" | "cipher" | "server_name" | "last_alert" | "next_protocol" | "ssl_history" => {
            "string"
        }
        _ => return None,
    })
}

impl Header {
    pub fn has_fields(&self) -> bool {
        self.fields.is_some()
    }

    /// Columns of `#fields` that no ssl.log of Zeek's has.
    pub fn unknown_columns(&self) -> Vec<String> {
        self.fields
            .iter()
            .flatten()
            .filter(|f| !KNOWN_COLUMNS.contains(&f.as_str()))
            .cloned()
            .collect()
    }

    pub fn line(&mut self, line: &[u8]) -> Out {
        if line.first() == Some(&b'#') {
            return self.directive(line);
        }
        Out::Line(self.row(line))
    }

    fn directive(&mut self, line: &[u8]) -> Out {
        // `#separator` is the one directive written with a space (the
        // separator is not known yet).
        if let Some(v) = line.strip_prefix(b"#separator ") {
            *self = Header {
                separator: unescape(v),
                ..Header::default()
            };
            return Out::Nothing;
        }
        let mut parts = split(line, &self.separator).into_iter();
        let key = parts.next().unwrap_or_default();
        let rest: Vec<&[u8]> = parts.collect();
        let one = || rest.first().map(|v| unescape(v)).unwrap_or_default();
        match key {
            b"#set_separator" => self.set_separator = one(),
            b"#empty_field" => self.empty = one(),
            b"#unset_field" => self.unset = one(),
            b"#path" => {
                self.path = Some(text(&one()));
            }
            b"#fields" => {
                let fields: Vec<String> = rest.iter().map(|f| text(f)).collect();
                self.types = None;
                self.broken = None;
                let missing: Vec<&str> = REQUIRED
                    .into_iter()
                    .filter(|r| !fields.iter().any(|f| f == r))
                    .collect();
                if let Some(p) = self.path.as_deref().filter(|p| !p.starts_with("ssl")) {
                    self.broken = Some(format!("the log is Zeek's `{p}` log (#path), not ssl.log"));
                } else if !missing.is_empty() {
                    self.broken = Some(format!(
                        "#fields lacks {}, which every row needs",
                        missing.join(", ")
                    ));
                }
                self.fields = Some(fields);
                if let Some(why) = &self.broken {
                    return Out::Line(Line::Bad(why.clone()));
                }
                return Out::Fields;
            }
            b"#types" => {
                let types: Vec<String> = rest.iter().map(|f| text(f)).collect();
                let n = self.fields.as_ref().map_or(0, Vec::len);
                if types.len() != n {
                    let bad = format!(
                        "#types names {} types for {} #fields; the types are not checked",
                        types.len(),
                        n
                    );
                    return Out::Line(Line::Bad(bad));
                }
                self.types = Some(types);
            }
            // #open, #close and comments (btest's `###` line) say nothing
            // about the rows.
            _ => {}
        }
        Out::Nothing
    }

    fn row(&self, line: &[u8]) -> Line {
        let Some(fields) = &self.fields else {
            return Line::Bad(
                "a row before any #fields line: the header block is missing or cut".into(),
            );
        };
        if let Some(why) = &self.broken {
            return Line::Bad(why.clone());
        }
        let values = split(line, &self.separator);
        if values.len() != fields.len() {
            return Line::Bad(format!(
                "{} columns where #fields names {} (a cut or edited row)",
                values.len(),
                fields.len()
            ));
        }
        let set_sep = text(&self.set_separator);
        let mut row = Row::default();
        for (i, (name, raw)) in fields.iter().zip(values).enumerate() {
            if raw == self.unset.as_slice() {
                if REQUIRED.contains(&name.as_str()) {
                    return Line::Bad(format!("{name} is unset (`{}`)", text(raw)));
                }
                continue;
            }
            let is_empty = raw == self.empty.as_slice();
            let v = text(&unescape(raw));
            let declared = self
                .types
                .as_ref()
                .and_then(|t| t.get(i))
                .map(String::as_str);
            if let Some(ty) = declared.filter(|_| !is_empty) {
                if !is_type(ty, &v, &set_sep) {
                    return Line::Bad(format!("{name}: `{v}` is not a {ty} (as #types says)"));
                }
            }
            let Some(ty) = used_type(name) else {
                continue;
            };
            if is_empty {
                continue;
            }
            if !is_type(ty, &v, "") {
                return Line::Bad(format!("{name}: `{v}` is not a {ty}"));
            }
            set(&mut row, name, v);
        }
        row_line(row)
    }
}

/// Sets one column tlsrum reads, already checked to be of its type.
pub(super) fn set(row: &mut Row, name: &str, v: String) {
    match name {
        "ts" => row.ts = v.parse().unwrap_or_default(),
        "id.orig_h" => row.orig_h = v.parse().ok(),
        "id.resp_h" => row.resp_h = v.parse().ok(),
        "id.orig_p" => row.orig_p = v.parse().unwrap_or_default(),
        "id.resp_p" => row.resp_p = v.parse().unwrap_or_default(),
        "resumed" => row.resumed = Some(v == "T"),
        "established" => row.established = Some(v == "T"),
        "version" => row.version = Some(v),
        "cipher" => row.cipher = Some(v),
        "server_name" => row.server_name = Some(v),
        "last_alert" => row.last_alert = Some(v),
        "next_protocol" => row.next_protocol = Some(v),
        "ssl_history" => row.ssl_history = Some(v),
        _ => {}
    }
}

/// A complete row: DTLS rows are counted, not recorded.
pub(super) fn row_line(row: Row) -> Line {
    if row
        .version
        .as_deref()
        .is_some_and(|v| row::version(v).is_none())
    {
        return Line::Dtls;
    }
    Line::Row(Box::new(row))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n#path\tssl\n#open\t2024-01-01-00-00-00\n#fields\tts\tuid\tid.orig_h\tid.orig_p\tid.resp_h\tid.resp_p\tversion\tcipher\tserver_name\tresumed\testablished\tcert_chain_fps\n#types\ttime\tstring\taddr\tport\taddr\tport\tstring\tstring\tstring\tbool\tbool\tvector[string]\n";

    fn lines(text: &str) -> Vec<Line> {
        let mut h = Header::default();
        text.lines().map(|l| h.line(l.as_bytes()).into()).collect()
    }

    #[test]
    fn a_row_under_its_header() {
        let text = format!("{HEAD}1700000000.5\tC1\t10.0.0.1\t5000\t10.0.0.2\t443\tTLSv12\tTLS_AES_128_GCM_SHA256\ta\\x09b\tT\tT\t(empty)\n");
        let got = lines(&text);
        let Some(Line::Row(row)) = got.last() else {
            panic!("{got:?}");
        };
        assert_eq!(row.ts, 1_700_000_000.5);
        assert_eq!(row.server_name.as_deref(), Some("a\tb"));
        assert_eq!(row.resumed, Some(true));
    }

    #[test]
    fn damaged_rows_say_why() {
        let wrong_count = format!("{HEAD}1700000000.5\tC1\t10.0.0.1\n");
        assert!(
            matches!(lines(&wrong_count).last(), Some(Line::Bad(w)) if w.contains("3 columns where #fields names 12"))
        );
        let wrong_type = format!(
            "{HEAD}XXXXXXXXXX.XXXXXX\tC1\t10.0.0.1\t5000\t10.0.0.2\t443\t-\t-\t-\tF\tF\t-\n"
        );
        assert!(
            matches!(lines(&wrong_type).last(), Some(Line::Bad(w)) if w.contains("ts: `XXXXXXXXXX.XXXXXX` is not a time"))
        );
        let no_header = "1700000000.5\tC1\t10.0.0.1\t5000\t10.0.0.2\t443\n";
        assert!(
            matches!(lines(no_header).last(), Some(Line::Bad(w)) if w.contains("before any #fields"))
        );
        let conn = HEAD.replace("#path\tssl", "#path\tconn");
        assert!(lines(&conn)
            .iter()
            .any(|l| matches!(l, Line::Bad(w) if w.contains("`conn` log"))));
    }
}
