//! FoxIO's JA4 (client) and JA4S (server) fingerprints of the hellos, as
//! `technical_details/JA4.md` and `JA4S.md` of <https://github.com/FoxIO-LLC/ja4>
//! define them. JA4 is BSD-3-Clause; JA4S is under the FoxIO License 1.1
//! (free for internal use and research; see that repository's `License FAQ`
//! before building a product that sells it).
//!
//! GREASE values (RFC 8701) are ignored everywhere, as JA4.md says: in
//! suites, extensions, supported_versions, signature algorithms, and the
//! ALPN list (its first non-GREASE value counts). JA4S takes the server's
//! values as sent. Where FoxIO's tools and JA4.md part (a non-alphanumeric
//! ALPN byte: the tools whose outputs the corpus holds write `9` per
//! non-ASCII character, JA4.md takes hex digits),
//! tlsrum follows JA4.md; `agent/tests/ja4.rs` lists the one capture.
//!
//! Computed when the record is built, from what the parsed hellos keep
//! anyway (suites, extension types in order, signature algorithms,
//! versions); the only extra per-handshake state is each hello's two ALPN
//! characters ([`alpn_chars`]), taken from the raw bytes at parse time.
//!
//! ```
//! use analyzer::tls::ja4::{alpn_chars, hash12};
//! assert_eq!(&alpn_chars(b"http/1.1"), b"h1");
//! assert_eq!(&alpn_chars(&[0xab, 0xcd]), b"ad");
//! assert_eq!(hash12(""), "000000000000");
//! ```

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::enums::{extension_type as ext, is_grease};
use super::handshake::{ClientHello, ServerHello};

/// "No ALPN": no extension, no value, or an empty first value.
pub const NO_ALPN: [u8; 2] = *b"00";

/// The two ALPN characters of JA4/JA4S from the first ALPN value's raw
/// bytes: its first and last byte when both are ASCII alphanumerics (one
/// byte counts as both), else the first and last hex digit of the value
/// (`0xab 0xcd` -> `ad`); `00` for an empty value.
pub fn alpn_chars(value: &[u8]) -> [u8; 2] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let (Some(&first), Some(&last)) = (value.first(), value.last()) else {
        return NO_ALPN;
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        [first, last]
    } else {
        [HEX[usize::from(first >> 4)], HEX[usize::from(last & 0x0f)]]
    }
}

/// The first 12 hex digits of SHA-256, or twelve zeros for an empty input
/// (the specification's marker for "no values").
pub fn hash12(s: &str) -> String {
    if s.is_empty() {
        return "000000000000".into();
    }
    let digest = Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(12);
    for b in &digest[..6] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The 2-character version code (JA4.md "TLS and DTLS Version").
fn version_code(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

fn transport_char(quic: bool) -> char {
    if quic {
        'q'
    } else {
        't'
    }
}

/// Comma-separated 4-digit lower-case hex.
fn hex_list(values: impl IntoIterator<Item = u16>) -> String {
    let mut out = String::new();
    for v in values {
        if !out.is_empty() {
            out.push(',');
        }
        let _ = write!(out, "{v:04x}");
    }
    out
}

/// A fingerprint's parts before hashing.
struct Parts {
    a: String,
    b: String,
    c: String,
}

fn client_parts(ch: &ClientHello, quic: bool) -> Parts {
    let mut suites: Vec<u16> = ch
        .cipher_suites
        .iter()
        .copied()
        .filter(|&s| !is_grease(s))
        .collect();
    let mut exts: Vec<u16> = ch
        .extensions
        .iter()
        .copied()
        .filter(|&e| !is_grease(e))
        .collect();
    // The highest version in supported_versions (GREASE ignored) when
    // the extension is there, else the hello's own version field.
    let version = ch
        .supported_versions
        .iter()
        .copied()
        .filter(|&v| !is_grease(v))
        .max()
        .filter(|_| exts.contains(&ext::SUPPORTED_VERSIONS))
        .unwrap_or(ch.legacy_version);
    let sni = if exts.contains(&ext::SERVER_NAME) {
        'd'
    } else {
        'i'
    };
    let alpn = ch.ja4_alpn.unwrap_or(NO_ALPN);
    let a = format!(
        "{}{}{sni}{:02}{:02}{}{}",
        transport_char(quic),
        version_code(version),
        suites.len().min(99),
        exts.len().min(99),
        char::from(alpn[0]),
        char::from(alpn[1]),
    );
    suites.sort_unstable();
    exts.retain(|&e| e != ext::SERVER_NAME && e != ext::ALPN);
    exts.sort_unstable();
    let mut c = hex_list(exts);
    let sigs = hex_list(
        ch.signature_algorithms
            .iter()
            .copied()
            .filter(|&s| !is_grease(s)),
    );
    if !sigs.is_empty() {
        c.push('_');
        c.push_str(&sigs);
    }
    Parts {
        a,
        b: hex_list(suites),
        c,
    }
}

/// JA4 of a ClientHello: `t13d1516h2_8daaf6152771_e5627efa2ab1`.
pub fn ja4(ch: &ClientHello, quic: bool) -> String {
    let p = client_parts(ch, quic);
    format!("{}_{}_{}", p.a, hash12(&p.b), hash12(&p.c))
}

/// JA4_r, the same before hashing: sorted suites, sorted extensions (SNI
/// and ALPN left out), signature algorithms in the client's order.
pub fn ja4_r(ch: &ClientHello, quic: bool) -> String {
    let p = client_parts(ch, quic);
    format!("{}_{}_{}", p.a, p.b, p.c)
}

fn server_parts(sh: &ServerHello, quic: bool) -> (String, String) {
    let alpn = sh.ja4_alpn.unwrap_or(NO_ALPN);
    let ab = format!(
        "{}{}{:02}{}{}_{:04x}",
        transport_char(quic),
        version_code(sh.version().0),
        sh.extensions.len().min(99),
        char::from(alpn[0]),
        char::from(alpn[1]),
        sh.cipher_suite,
    );
    (ab, hex_list(sh.extensions.iter().copied()))
}

/// JA4S of a ServerHello: `t120400_c030_4e8089b08790` (extensions hashed
/// in the server's order).
pub fn ja4s(sh: &ServerHello, quic: bool) -> String {
    let (ab, c) = server_parts(sh, quic);
    format!("{ab}_{}", hash12(&c))
}

/// JA4S_r, before hashing.
pub fn ja4s_r(sh: &ServerHello, quic: bool) -> String {
    let (ab, c) = server_parts(sh, quic);
    format!("{ab}_{c}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JA4.md's worked example.
    fn example() -> ClientHello {
        ClientHello {
            legacy_version: 0x0303,
            cipher_suites: vec![
                0x0a0a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8,
                0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
            ],
            extensions: vec![
                0x2a2a, 0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005,
                0x0023, 0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015, 0x3a3a,
            ],
            supported_versions: vec![0x7a7a, 0x0304, 0x0303],
            signature_algorithms: vec![
                0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
            ],
            ja4_alpn: Some(*b"h2"),
            ..Default::default()
        }
    }

    #[test]
    fn specification_example() {
        let ch = example();
        assert_eq!(ja4(&ch, false), "t13d1516h2_8daaf6152771_e5627efa2ab1");
        assert_eq!(
            ja4_r(&ch, false),
            "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601"
        );
        assert_eq!(ja4(&ch, true), "q13d1516h2_8daaf6152771_e5627efa2ab1");
    }

    #[test]
    fn without_signature_algorithms_no_underscore() {
        let mut ch = example();
        ch.signature_algorithms.clear();
        assert!(ja4(&ch, false).ends_with("_6d807ffa2a79"));
    }

    #[test]
    fn empty_lists_hash_to_zeros() {
        let ch = ClientHello {
            legacy_version: 0x0301,
            ..Default::default()
        };
        assert_eq!(ja4(&ch, false), "t10i000000_000000000000_000000000000");
    }

    #[test]
    fn version_from_supported_versions_only_when_the_extension_is_there() {
        let mut ch = example();
        ch.extensions.retain(|&e| e != ext::SUPPORTED_VERSIONS);
        assert!(ja4(&ch, false).starts_with("t12d1515h2"));
    }

    #[test]
    fn alpn_characters_follow_the_specification() {
        assert_eq!(&alpn_chars(b"h2"), b"h2");
        assert_eq!(&alpn_chars(b"http/1.1"), b"h1");
        assert_eq!(&alpn_chars(b"a"), b"aa");
        assert_eq!(&alpn_chars(b""), b"00");
        // JA4.md's examples of non-alphanumeric first or last bytes.
        assert_eq!(&alpn_chars(&[0xab]), b"ab");
        assert_eq!(&alpn_chars(&[0xab, 0xcd]), b"ad");
        assert_eq!(&alpn_chars(&[0x30, 0xab]), b"3b");
        assert_eq!(&alpn_chars(&[0x30, 0x31, 0xab, 0xcd]), b"3d");
        assert_eq!(&alpn_chars(&[0x30, 0xab, 0xcd, 0x31]), b"01");
    }

    /// The example of FoxIO's own JA4S test (rust/ja4/src/tls.rs).
    #[test]
    fn ja4s_example() {
        let sh = ServerHello {
            legacy_version: 0x0303,
            cipher_suite: 0xc030,
            extensions: vec![0x0005, 0x0017, 0xff01, 0x0000],
            ..Default::default()
        };
        assert_eq!(ja4s(&sh, false), "t120400_c030_4e8089b08790");
        assert_eq!(ja4s_r(&sh, false), "t120400_c030_0005,0017,ff01,0000");
    }
}
