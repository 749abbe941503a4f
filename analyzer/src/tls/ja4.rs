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
//! `ja4_stable` is JA4 with the session-dependent extensions left out
//! ([`SESSION_DEPENDENT`]: padding, session_ticket, pre_shared_key,
//! early_data) from both the extension count and the extension hash, so
//! that a client's fresh and resuming ClientHellos share one value (the
//! idea of FoxIO-LLC/ja4 issue #303 "JA4E", huginn-net's JA4_s1 and
//! fingerproxy's stable JA4). Everything else is JA4's rule, by the same
//! code: [`ja4`] is [`ja4_stable`] with nothing left out.
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

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

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
    let (Some(&first), Some(&last)) = (value.first(), value.last()) else {
        return NO_ALPN;
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        [first, last]
    } else {
        let mut digits = [0; 4];
        hex::encode_to_slice([first, last], &mut digits).expect("4 digits for 2 bytes");
        [digits[0], digits[3]]
    }
}

/// The first 12 hex digits of SHA-256, or twelve zeros for an empty input
/// (the specification's marker for "no values").
pub fn hash12(s: &str) -> String {
    ascii(hash12_digits(s.as_bytes()).to_vec())
}

/// [`hash12`]'s twelve digits, without a String.
fn hash12_digits(s: &[u8]) -> [u8; 12] {
    let mut out = [b'0'; 12];
    if !s.is_empty() {
        let digest = Sha256::digest(s);
        hex::encode_to_slice(&digest[..6], &mut out).expect("12 digits for 6 bytes");
    }
    out
}

/// Appends `v` as 4 lower-case hex digits. Not `write!`: core::fmt made
/// JA4 strings ~12% of a replay's time.
fn push_hex4(out: &mut Vec<u8>, v: u16) {
    let mut digits = [0; 4];
    hex::encode_to_slice(v.to_be_bytes(), &mut digits).expect("4 digits for 2 bytes");
    out.extend_from_slice(&digits);
}

/// Appends `values` as comma-separated 4-digit lower-case hex.
fn push_hex_list(out: &mut Vec<u8>, values: impl IntoIterator<Item = u16>) {
    for (i, v) in values.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_hex4(out, v);
    }
}

/// Appends a count as two decimal digits, capped at 99.
fn push_count(out: &mut Vec<u8>, n: usize) {
    let n = n.min(99) as u8;
    out.extend_from_slice(&[b'0' + n / 10, b'0' + n % 10]);
}

/// A fingerprint built as bytes (so its parts hash without a copy) as a
/// String. It is ASCII unless a hand-made `ja4_alpn` holds other bytes
/// ([`alpn_chars`] gives ASCII only); those become the char of that code
/// point, as `char::from` did.
fn ascii(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|e| e.into_bytes().into_iter().map(char::from).collect())
}

/// The 2-character version code (JA4.md "TLS and DTLS Version").
fn version_code(v: u16) -> &'static [u8; 2] {
    match v {
        0x0304 => b"13",
        0x0303 => b"12",
        0x0302 => b"11",
        0x0301 => b"10",
        0x0300 => b"s3",
        0x0002 => b"s2",
        0xfeff => b"d1",
        0xfefd => b"d2",
        0xfefc => b"d3",
        _ => b"00",
    }
}

fn transport_char(quic: bool) -> u8 {
    if quic {
        b'q'
    } else {
        b't'
    }
}

/// The extensions whose presence or content depends on the session
/// rather than on the client: a resuming ClientHello adds pre_shared_key
/// (and early_data), fills session_ticket, and pads to a different
/// length. [`ja4_stable`] leaves them out.
pub const SESSION_DEPENDENT: [u16; 4] = [
    ext::PADDING,
    ext::SESSION_TICKET,
    ext::PRE_SHARED_KEY,
    ext::EARLY_DATA,
];

/// Fills `list` with the cipher suites of JA4's `b` part: GREASE
/// dropped, sorted.
fn client_suites(ch: &ClientHello, list: &mut Vec<u16>) {
    list.clear();
    list.extend(
        ch.cipher_suites()
            .iter()
            .copied()
            .filter(|&s| !is_grease(s)),
    );
    list.sort_unstable();
}

/// JA4's `a` part (`t13d1516h2`) and its `c` part before hashing (into
/// `c`), with the extensions in `leave_out` ignored as GREASE is (neither
/// counted nor hashed). `exts` is scratch space.
fn client_a_c(
    ch: &ClientHello,
    quic: bool,
    leave_out: &[u16],
    suites: usize,
    exts: &mut Vec<u16>,
    a: &mut Vec<u8>,
    c: &mut Vec<u8>,
) {
    exts.clear();
    exts.extend(
        ch.extensions()
            .iter()
            .copied()
            .filter(|&e| !is_grease(e) && !leave_out.contains(&e)),
    );
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
        b'd'
    } else {
        b'i'
    };
    a.push(transport_char(quic));
    a.extend_from_slice(version_code(version));
    a.push(sni);
    push_count(a, suites);
    push_count(a, exts.len());
    a.extend_from_slice(&ch.ja4_alpn.unwrap_or(NO_ALPN));

    exts.retain(|&e| e != ext::SERVER_NAME && e != ext::ALPN);
    exts.sort_unstable();
    push_hex_list(c, exts.iter().copied());
    let mut sigs = ch
        .signature_algorithms()
        .iter()
        .copied()
        .filter(|&s| !is_grease(s))
        .peekable();
    if sigs.peek().is_some() {
        c.push(b'_');
        push_hex_list(c, sigs);
    }
}

/// JA4 of a ClientHello: `t13d1516h2_8daaf6152771_e5627efa2ab1`.
pub fn ja4(ch: &ClientHello, quic: bool) -> Arc<str> {
    ja4_and_stable(ch, quic).0
}

/// JA4 without the [`SESSION_DEPENDENT`] extensions: the same value for a
/// client's fresh and resuming ClientHellos.
pub fn ja4_stable(ch: &ClientHello, quic: bool) -> Arc<str> {
    ja4_and_stable(ch, quic).1
}

/// Fingerprints this thread already computed, by their exact inputs: a
/// client sends the same hello fields connection after connection, and
/// building and hashing the strings was ~6 % of a replay here, a quarter
/// of its instructions where the CPU has no SHA extensions. Emptied when
/// full ([`MEMO_ENTRIES`]), so bounded whatever the traffic.
struct Memo {
    known: Known<(Arc<str>, Arc<str>)>,
    /// JA4S, by its inputs ([`ja4s`]).
    known_server: Known<Arc<str>>,
    /// Scratch for the key being looked up.
    key: Vec<u16>,
}

/// Distinct hellos remembered per thread (~0.5 KiB each at most: the
/// inputs and two 36-byte strings).
const MEMO_ENTRIES: usize = 1024;

/// Values by their fingerprint's exact inputs. The records share them
/// (`Arc`): a clone is a count, not a copy.
type Known<V> = HashMap<Box<[u16]>, V, foldhash::fast::RandomState>;

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo {
        known: HashMap::default(),
        known_server: HashMap::default(),
        key: Vec::new(),
    });
}

/// The memo keys' parts: the two ALPN characters (none apart from any
/// value) and a list after its length, so that two hellos with equal keys
/// have equal fingerprints.
fn push_alpn(key: &mut Vec<u16>, alpn: Option<[u8; 2]>) {
    let v = alpn.map_or(0, |[a, b]| 0x1_0000 | u32::from(a) << 8 | u32::from(b));
    key.extend([(v >> 16) as u16, v as u16]);
}

fn push_list(key: &mut Vec<u16>, list: &[u16]) {
    let len = list.len() as u64;
    key.extend([(len >> 32) as u16, (len >> 16) as u16, len as u16]);
    key.extend_from_slice(list);
}

/// The value `known` holds for `key`, else `compute`'s, remembered
/// (`known` is emptied first when full).
fn recall<V: Clone>(known: &mut Known<V>, key: &[u16], compute: impl FnOnce() -> V) -> V {
    if let Some(v) = known.get(key) {
        return v.clone();
    }
    let v = compute();
    if known.len() >= MEMO_ENTRIES {
        known.clear();
    }
    known.insert(key.into(), v.clone());
    v
}

/// [`ja4`] and [`ja4_stable`] together: they share the suites hash, and
/// are one value when the hello has no session-dependent extension.
pub fn ja4_and_stable(ch: &ClientHello, quic: bool) -> (Arc<str>, Arc<str>) {
    MEMO.with_borrow_mut(|memo| {
        let key = &mut memo.key;
        key.clear();
        key.extend([u16::from(quic), ch.legacy_version]);
        push_alpn(key, ch.ja4_alpn);
        for list in [
            ch.cipher_suites(),
            ch.extensions(),
            &ch.supported_versions,
            ch.signature_algorithms(),
        ] {
            push_list(key, list);
        }
        recall(&mut memo.known, key, || compute_ja4_and_stable(ch, quic))
    })
}

/// [`ja4_and_stable`] without the memo. One scratch list and one text
/// buffer serve every part.
fn compute_ja4_and_stable(ch: &ClientHello, quic: bool) -> (Arc<str>, Arc<str>) {
    let mut list = Vec::with_capacity(ch.cipher_suites().len().max(ch.extensions().len()));
    client_suites(ch, &mut list);
    let suites = list.len();
    let mut text = Vec::with_capacity(5 * list.capacity());
    push_hex_list(&mut text, list.iter().copied());
    let b = hash12_digits(&text);
    let mut hashed = |leave_out: &[u16]| {
        let mut out = Vec::with_capacity(36);
        text.clear();
        client_a_c(ch, quic, leave_out, suites, &mut list, &mut out, &mut text);
        out.push(b'_');
        out.extend_from_slice(&b);
        out.push(b'_');
        out.extend_from_slice(&hash12_digits(&text));
        Arc::<str>::from(ascii(out))
    };
    let ja4 = hashed(&[]);
    let stable = if ch
        .extensions()
        .iter()
        .any(|e| SESSION_DEPENDENT.contains(e))
    {
        hashed(&SESSION_DEPENDENT)
    } else {
        ja4.clone()
    };
    (ja4, stable)
}

/// JA4_r, the same before hashing: sorted suites, sorted extensions (SNI
/// and ALPN left out), signature algorithms in the client's order.
pub fn ja4_r(ch: &ClientHello, quic: bool) -> String {
    let (mut suites, mut exts) = (Vec::new(), Vec::new());
    client_suites(ch, &mut suites);
    let (mut out, mut c) = (Vec::new(), Vec::new());
    client_a_c(ch, quic, &[], suites.len(), &mut exts, &mut out, &mut c);
    out.push(b'_');
    push_hex_list(&mut out, suites);
    out.push(b'_');
    out.extend_from_slice(&c);
    ascii(out)
}

/// JA4S's `a_b` part (`t120400_c030`).
fn push_server_ab(out: &mut Vec<u8>, sh: &ServerHello, quic: bool) {
    out.push(transport_char(quic));
    out.extend_from_slice(version_code(sh.version().0));
    push_count(out, sh.extensions.len());
    out.extend_from_slice(&sh.ja4_alpn.unwrap_or(NO_ALPN));
    out.push(b'_');
    push_hex4(out, sh.cipher_suite);
}

/// JA4S of a ServerHello: `t120400_c030_4e8089b08790` (extensions hashed
/// in the server's order). Remembered by its inputs, as [`ja4_and_stable`].
pub fn ja4s(sh: &ServerHello, quic: bool) -> Arc<str> {
    MEMO.with_borrow_mut(|memo| {
        let key = &mut memo.key;
        key.clear();
        key.extend([u16::from(quic), sh.version().0, sh.cipher_suite]);
        push_alpn(key, sh.ja4_alpn);
        push_list(key, &sh.extensions);
        recall(&mut memo.known_server, key, || compute_ja4s(sh, quic))
    })
}

/// [`ja4s`] without the memo.
fn compute_ja4s(sh: &ServerHello, quic: bool) -> Arc<str> {
    let mut out = Vec::with_capacity(25);
    push_server_ab(&mut out, sh, quic);
    out.push(b'_');
    let mut c = Vec::with_capacity(5 * sh.extensions.len());
    push_hex_list(&mut c, sh.extensions.iter().copied());
    out.extend_from_slice(&hash12_digits(&c));
    ascii(out).into()
}

/// JA4S_r, before hashing.
pub fn ja4s_r(sh: &ServerHello, quic: bool) -> String {
    let mut out = Vec::new();
    push_server_ab(&mut out, sh, quic);
    out.push(b'_');
    push_hex_list(&mut out, sh.extensions.iter().copied());
    ascii(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::handshake::HelloLists;

    /// JA4.md's worked example.
    fn example() -> ClientHello {
        ClientHello {
            legacy_version: 0x0303,
            lists: HelloLists::new(
                &[
                    0x0a0a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8,
                    0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
                ],
                &[
                    0x2a2a, 0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005,
                    0x0023, 0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015, 0x3a3a,
                ],
                &[
                    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
                ],
            ),
            supported_versions: [0x7a7a, 0x0304, 0x0303].into_iter().collect(),
            ja4_alpn: Some(*b"h2"),
            ..Default::default()
        }
    }

    #[test]
    fn specification_example() {
        let ch = example();
        assert_eq!(&*ja4(&ch, false), "t13d1516h2_8daaf6152771_e5627efa2ab1");
        assert_eq!(
            ja4_r(&ch, false),
            "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_0403,0804,0401,0503,0805,0501,0806,0601"
        );
        assert_eq!(&*ja4(&ch, true), "q13d1516h2_8daaf6152771_e5627efa2ab1");
    }

    /// `memo` answers what `compute` does for each hello, twice over, asked
    /// in turn so that each is remembered before the next.
    fn memo_answers<H, V: PartialEq + std::fmt::Debug>(
        hellos: &[H],
        memo: fn(&H, bool) -> V,
        compute: fn(&H, bool) -> V,
    ) {
        for round in 0..2 {
            for (i, h) in hellos.iter().enumerate() {
                for quic in [false, true] {
                    assert_eq!(
                        memo(h, quic),
                        compute(h, quic),
                        "hello {i}, quic {quic}, round {round}"
                    );
                }
            }
        }
    }

    /// The memo answers what computing answers, for hellos that differ in
    /// any one input (moving a value from one list to the next included),
    /// asked in turn so that each is remembered before the next.
    #[test]
    fn memo_answers_as_computing() {
        let base = example();
        let mut hellos = vec![base.clone()];
        let mut v = base.clone();
        v.supported_versions.clear();
        hellos.push(v.clone());
        v.legacy_version = 0x0301;
        hellos.push(v);
        let mut v = base.clone();
        v.ja4_alpn = None;
        hellos.push(v);
        let mut v = base.clone();
        v.ja4_alpn = Some(*b"00");
        hellos.push(v);
        let mut v = base.clone();
        v.lists.edit(|suites, _, _| {
            suites.pop();
        });
        hellos.push(v);
        let mut v = base.clone();
        v.lists.edit(|_, exts, _| exts.push(0x0029));
        hellos.push(v);
        let mut v = base.clone();
        v.supported_versions = [0x0303].into_iter().collect();
        hellos.push(v);
        let mut v = base.clone();
        v.lists
            .edit(|suites, exts, _| exts.insert(0, suites.pop().unwrap()));
        hellos.push(v);
        let mut v = base.clone();
        v.lists.edit(|_, _, sigs| sigs.clear());
        hellos.push(v);
        memo_answers(&hellos, ja4_and_stable, compute_ja4_and_stable);
    }

    #[test]
    fn without_signature_algorithms_no_underscore() {
        let mut ch = example();
        ch.lists.edit(|_, _, sigs| sigs.clear());
        assert!(ja4(&ch, false).ends_with("_6d807ffa2a79"));
    }

    #[test]
    fn empty_lists_hash_to_zeros() {
        let ch = ClientHello {
            legacy_version: 0x0301,
            ..Default::default()
        };
        assert_eq!(&*ja4(&ch, false), "t10i000000_000000000000_000000000000");
    }

    #[test]
    fn version_from_supported_versions_only_when_the_extension_is_there() {
        let mut ch = example();
        ch.lists
            .edit(|_, exts, _| exts.retain(|&e| e != ext::SUPPORTED_VERSIONS));
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

    /// curl 8 (OpenSSL) against nginx, TLS 1.3 with tickets: the
    /// ClientHello bodies of its first (fresh) and second (resuming)
    /// connection in `pcaps/curl-nginx-tls13-tickets-only.pcapng`. The
    /// second adds pre_shared_key.
    const CURL_FRESH: &str = "030374ec73bf0cca33240e9094f81a829cff98c3a9103c1275c4fe093ae19ed7e178207560107d1a7b6fdc2b3843e9c038389bcd36d971edfc9babb17e0bd014885865000813021303130100ff010000aa00000010000e00000b746c7372756d2e74657374000b000403000102000a00160014001d0017001e00190018010001010102010301040010000b000908687474702f312e31001600000017000000310000000d001e001c040305030603080708080809080a080b080408050806040105010601002b0003020304002d00020101003300260024001d002006df0052170def192ae069feb9c83582b8df064a21b0069909bcbc7ffe0ef858";
    const CURL_RESUMING: &str = "0303dfdbd392c8f7b65a3e9a4ac9f56d2c19ad8e5f3f6a023daa3e3028fa4a6191ac2063babe335c2ffe42f01380768d16f029c3f23fee00dc942818a9b9a9389ca2d0000813021303130100ff010001e900000010000e00000b746c7372756d2e74657374000b000403000102000a00160014001d0017001e00190018010001010102010301040010000b000908687474702f312e31001600000017000000310000000d001e001c040305030603080708080809080a080b080408050806040105010601002b0003020304002d00020101003300260024001d002018befec0109bbb871c43c68fee3f6341873e4341bd909fd5c219c826abca2a290029013b0106010051ee24e8df5417e942fa8d7a0a3c9da6956da2c4a4a6525f26cf10c285fbf2b3a1c14340add5c953d5a29765db4fd599ae61eca8b4e2df9cc522a7e0d528273bb106ea874951ea1ee35180c02a2fcba4c7648e23f41de071b39ee5da9884719d2ffb26af51802fd8a52031589fbf787fc40f4e05a6105feea1c69bfda65ab76d05e37a3a92f583d59b17c12bacbf37f377b2a35519c279f8e84adb8df6caaa0f01f813945e8d30223865aa2a2e0cc7cbfaa1a6a4e52cbaa784b035d8b8cc982e378ac45cf9e261396f9a9baf50cffd5764ebdf7882d03306ce2e79c0ba2f3dff69dc8e391a201d4174e6d964f5e93ad044d8183adda3a3ab01b6db0c89e30564f764d176003130d0fa9221e8a4e3adcf0b48d232748bea5a3edf1e869fef170c15068f7d55b02b719697f21b9a852b057a7cde04e2066e";

    fn parse_hex(s: &str) -> ClientHello {
        let bytes: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect();
        ClientHello::parse(&bytes).unwrap()
    }

    #[test]
    fn stable_is_the_same_for_fresh_and_resuming_hellos() {
        let fresh = parse_hex(CURL_FRESH);
        let resuming = parse_hex(CURL_RESUMING);
        assert!(resuming.extensions().contains(&ext::PRE_SHARED_KEY));
        assert_eq!(&*ja4(&fresh, false), "t13d0411h1_16476d049b0b_303c7117418d");
        assert_eq!(
            &*ja4(&resuming, false),
            "t13d0412h1_16476d049b0b_622f681f1a22"
        );
        assert_eq!(ja4_stable(&fresh, false), ja4_stable(&resuming, false));
        assert_eq!(ja4_stable(&fresh, false), ja4(&fresh, false));
    }

    #[test]
    fn stable_equals_ja4_without_session_dependent_extensions() {
        let mut ch = example();
        ch.lists
            .edit(|_, exts, _| exts.retain(|e| !SESSION_DEPENDENT.contains(e)));
        assert_eq!(ja4_stable(&ch, false), ja4(&ch, false));
        assert_eq!(ja4_stable(&ch, true), ja4(&ch, true));
    }

    /// The specification example carries padding and session_ticket: both
    /// leave the count and the hash; the suites part does not change.
    #[test]
    fn stable_leaves_session_dependent_extensions_out_of_count_and_hash() {
        let mut ch = example();
        let stable = ja4_stable(&ch, false);
        assert_eq!(&stable[..23], "t13d1514h2_8daaf6152771");
        ch.lists
            .edit(|_, exts, _| exts.extend([ext::PRE_SHARED_KEY, ext::EARLY_DATA]));
        assert_ne!(ja4(&ch, false), ja4(&example(), false));
        assert_eq!(ja4_stable(&ch, false), stable);
        ch.lists
            .edit(|_, exts, _| exts.retain(|&e| e != ext::PADDING && e != ext::SESSION_TICKET));
        assert_eq!(ja4(&ch, false)[..10], *"t13d1516h2");
        assert_ne!(ja4(&ch, false), stable);
        assert_eq!(ja4_stable(&ch, false), stable);
    }

    #[test]
    fn together_as_apart() {
        let mut ch = example();
        for quic in [false, true] {
            let (raw, stable) = ja4_and_stable(&ch, quic);
            assert_eq!(raw[1..], *"13d1516h2_8daaf6152771_e5627efa2ab1");
            assert_eq!(stable, ja4_stable(&ch, quic));
            assert_eq!(
                stable[..23],
                *"t13d1514h2_8daaf6152771".replace('t', &raw[..1])
            );
        }
        ch.lists
            .edit(|_, exts, _| exts.retain(|e| !SESSION_DEPENDENT.contains(e)));
        let (raw, stable) = ja4_and_stable(&ch, false);
        assert_eq!(raw, stable);
    }

    /// Only a hand-made `ja4_alpn` can hold a non-ASCII byte: it shows as
    /// the char of that code point, as before the byte buffers.
    #[test]
    fn non_ascii_alpn_bytes_are_chars() {
        let mut ch = example();
        ch.ja4_alpn = Some([0xe9, b'2']);
        assert!(ja4(&ch, false).starts_with("t13d1516\u{e9}2_"));
    }

    /// The example of FoxIO's own JA4S test (rust/ja4/src/tls.rs).
    #[test]
    fn ja4s_example() {
        let sh = ServerHello {
            legacy_version: 0x0303,
            cipher_suite: 0xc030,
            extensions: [0x0005, 0x0017, 0xff01, 0x0000].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(&*ja4s(&sh, false), "t120400_c030_4e8089b08790");
        assert_eq!(ja4s_r(&sh, false), "t120400_c030_0005,0017,ff01,0000");
    }

    /// JA4S's memo answers what computing answers, as the client's.
    #[test]
    fn server_memo_answers_as_computing() {
        let base = ServerHello {
            legacy_version: 0x0303,
            cipher_suite: 0xc030,
            extensions: [0x0005, 0x0017, 0xff01, 0x0000].into_iter().collect(),
            ..Default::default()
        };
        let mut hellos = vec![base.clone()];
        let mut v = base.clone();
        v.selected_version = Some(0x0304);
        hellos.push(v);
        let mut v = base.clone();
        v.cipher_suite = 0x1301;
        hellos.push(v);
        let mut v = base.clone();
        v.ja4_alpn = Some(*b"h2");
        hellos.push(v);
        let mut v = base.clone();
        v.extensions.swap(0, 1);
        hellos.push(v);
        let mut v = base.clone();
        v.extensions.pop();
        hellos.push(v);
        memo_answers(&hellos, ja4s, compute_ja4s);
    }
}
