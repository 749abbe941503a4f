//! Names for client fingerprints: a user-supplied CSV of `ja4,name`
//! (`--ja4-names FILE`), so reports can say "curl 7.88.1" next to
//! `t13d…`. One optional header line `ja4,name`, `#` comments and blank
//! lines allowed, names quoted as CSV (RFC 4180) when they hold commas.
//!
//! A fingerprint is a raw `ja4` or a `ja4_stable` value (the same shape):
//! each output looks up the kind of value it shows (`--by ja4` the raw one;
//! `--by client`, the never-resume table and the live `ja4_stable` label
//! the stable one), so a file names stable values by listing them.

use std::collections::HashMap;
use std::path::Path;

/// Fingerprints named at most (a names file is the user's, but bounded all the same).
pub const MAX_CLIENT_NAMES: usize = 100_000;

/// What is wrong with a names file, with its line number (1-based).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NamesError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {what}")]
    Line {
        path: String,
        line: u64,
        what: String,
    },
}

/// JA4 fingerprint -> client name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientNames {
    names: HashMap<String, String>,
}

impl ClientNames {
    /// Reads and checks the whole file: a bad line is an error naming the
    /// file and line.
    pub fn load(path: &Path) -> Result<Self, NamesError> {
        let shown = path.display().to_string();
        let text = std::fs::read(path).map_err(|source| NamesError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, what)| NamesError::Line {
            path: shown,
            line,
            what,
        })
    }

    /// Parses the file's bytes; Err((line, what)) on the first bad line.
    /// Each entry is one line (a quoted name holds commas, not line breaks).
    pub fn parse(text: &[u8]) -> Result<Self, (u64, String)> {
        let mut names = HashMap::new();
        let mut first = true;
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let line = i as u64 + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let trimmed = raw.trim_ascii();
            if trimmed.is_empty() || trimmed.starts_with(b"#") {
                continue;
            }
            // The csv crate reads a lone quote leniently; a names file should not.
            if trimmed.iter().filter(|&&b| b == b'"').count() % 2 == 1 {
                return Err((line, "unbalanced quote".into()));
            }
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .trim(csv::Trim::All)
                .from_reader(trimmed);
            let mut rec = csv::StringRecord::new();
            match reader.read_record(&mut rec) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return Err((line, format!("not CSV: {e}"))),
            }
            if rec.len() != 2 {
                return Err((
                    line,
                    format!(
                        "expected 2 fields `ja4,name`, found {}: {:?}",
                        rec.len(),
                        String::from_utf8_lossy(trimmed)
                    ),
                ));
            }
            let (ja4, name) = (&rec[0], &rec[1]);
            if std::mem::take(&mut first) && ja4.eq_ignore_ascii_case("ja4") {
                continue;
            }
            if !is_ja4(ja4) {
                return Err((line, format!("`{ja4}` is not a JA4 fingerprint")));
            }
            if name.is_empty() {
                return Err((line, format!("no name for `{ja4}`")));
            }
            if names.len() >= MAX_CLIENT_NAMES {
                return Err((line, format!("more than {MAX_CLIENT_NAMES} names")));
            }
            if let Some(old) = names.insert(ja4.to_string(), name.to_string()) {
                if old != name {
                    return Err((line, format!("`{ja4}` named twice: `{old}` and `{name}`")));
                }
            }
        }
        Ok(ClientNames { names })
    }

    /// The client's name, if the file names this fingerprint.
    pub fn get(&self, ja4: &str) -> Option<&str> {
        self.names.get(ja4).map(|s| s.as_str())
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// FoxIO JA4's shape: `a_b_c`, `a` 10 characters starting with t, q or d
/// (`t13d1516h2`), `b` and `c` 12 hex digits each.
fn is_ja4(s: &str) -> bool {
    let mut parts = s.split('_');
    let (Some(a), Some(b), Some(c), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    a.len() == 10
        && matches!(a.as_bytes().first(), Some(b't' | b'q' | b'd'))
        && a.bytes().all(|c| c.is_ascii_alphanumeric())
        && [b, c]
            .iter()
            .all(|p| p.len() == 12 && p.bytes().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CURL: &str = "t13d3112h2_e8f1e7e78f70_ce5650b735ce";

    #[test]
    fn header_comments_blanks_and_quotes() {
        let text = format!(
            "ja4,name\n# the clients of pcaps/\n\n{CURL},curl 7.88.1\n\"q13d0310h3_55b375c5d22e_cd85d2d88918\",\"aioquic, 0.9\"\n"
        );
        let n = ClientNames::parse(text.as_bytes()).unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!(n.get(CURL), Some("curl 7.88.1"));
        assert_eq!(
            n.get("q13d0310h3_55b375c5d22e_cd85d2d88918"),
            Some("aioquic, 0.9")
        );
        assert_eq!(n.get("t13d0000h2_000000000000_000000000000"), None);
    }

    /// A file may name raw and stable fingerprints side by side; a stable
    /// key finds its own entry, not its client's raw one.
    #[test]
    fn raw_and_stable_fingerprints_side_by_side() {
        let raw = "t13d0412h1_16476d049b0b_622f681f1a22";
        let stable = "t13d0411h1_16476d049b0b_303c7117418d";
        let only_raw = ClientNames::parse(format!("{raw},curl\n").as_bytes()).unwrap();
        assert_eq!(only_raw.get(stable), None);
        let both =
            ClientNames::parse(format!("ja4,name\n{raw},curl\n{stable},curl 8\n").as_bytes())
                .unwrap();
        assert_eq!(both.get(raw), Some("curl"));
        assert_eq!(both.get(stable), Some("curl 8"));
    }

    #[test]
    fn bad_lines_name_their_line() {
        for (text, line, what) in [
            (
                format!("ja4,name\n{CURL},curl\n{CURL}\n"),
                3,
                "expected 2 fields",
            ),
            (format!("{CURL},curl,extra\n"), 1, "expected 2 fields"),
            ("# c\n\nnot-a-fingerprint,x\n".to_string(), 3, "not a JA4"),
            (format!("{CURL},\n"), 1, "no name"),
            (format!("{CURL},a\n{CURL},b\n"), 2, "named twice"),
            (format!("{CURL},\"unterminated\n"), 1, "unbalanced quote"),
            (
                format!("ja4,name\n{CURL},\"a\"b\"\n"),
                2,
                "unbalanced quote",
            ),
        ] {
            let Err((l, w)) = ClientNames::parse(text.as_bytes()) else {
                panic!("accepted {text:?}");
            };
            assert_eq!(l, line, "{text:?}: {w}");
            assert!(w.contains(what), "{text:?}: {w}");
        }
    }

    #[test]
    fn load_names_the_file() {
        let dir = std::env::temp_dir().join(format!("tlsrum-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("n.csv");
        std::fs::write(&p, "ja4,name\nbad,x\n").unwrap();
        let e = ClientNames::load(&p).unwrap_err().to_string();
        assert!(e.contains("n.csv:2:"), "{e}");
        assert!(ClientNames::load(&dir.join("missing.csv")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
