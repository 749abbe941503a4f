//! One JSON object per line: the record contract of DESIGN.md.
//!
//! The record is written field by field into a reused buffer: serde_json's
//! token-by-token writes cost more than the rest of a connection's analysis.
//! Numbers use the same algorithms as serde_json (ryu, itoa) and strings the
//! same escapes, and a test holds the output byte-identical to
//! `serde_json::to_string(record)`.
use std::io::{self, Write};

use crate::record::{ConnectionRecord, TimingValue};

#[derive(Default)]
pub struct NdjsonWriter {
    buf: Vec<u8>,
}

/// Whether a byte needs an escape in a JSON string: a control byte, `"`
/// or `\` ([`escaped`] writes each).
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// [`needs_escape`] for 8 bytes at once (`w`). It can say yes for a word
/// that needs none (a borrow runs into the byte above), never no for one
/// that does.
fn may_need_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    below_space | zero_byte(w ^ (ONES * b'"' as u64)) | zero_byte(w ^ (ONES * b'\\' as u64)) != 0
}

/// Whether `bytes` may need an escape. Most strings (names, hex,
/// fingerprints, endpoints) need none: a word at a time, the last word
/// read where it ends (over bytes already tested) rather than copied out
/// padded; under a word, byte by byte.
fn may_need_escapes(bytes: &[u8]) -> bool {
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([b' '; 8]));
    match bytes.len() {
        n if n < 8 => bytes.iter().any(|&b| needs_escape(b)),
        n => {
            bytes.chunks_exact(8).any(|w| may_need_escape(word(w)))
                || may_need_escape(word(&bytes[n - 8..]))
        }
    }
}

pub(super) fn str_(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.push(b'"');
    if may_need_escapes(bytes) {
        escaped(out, bytes);
    } else {
        out.extend_from_slice(bytes);
    }
    out.push(b'"');
}

/// The bytes of a string that needs an escape, as serde_json escapes them.
#[cold]
fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            let mut escape = *b"\\u0000";
            hex::encode_to_slice([b], &mut escape[4..]).expect("2 digits for a byte");
            out.extend_from_slice(&escape);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

pub(super) fn f64_(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.extend_from_slice(b"null");
    } else if !micros(out, v) {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    }
}

/// "00" to "99".
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `v` as ryu would when it is the double nearest a whole number of
/// millionths from 1e-5 (below it ryu writes an exponent) to 2^32 (every
/// timing, in ms to the µs, and every timestamp), and says whether it did. Such a decimal is ryu's shortest
/// form: its neighbours with as many digits are 1e-6 away, farther than
/// half the spacing of doubles below 2^32 (under 5e-7), so none of them
/// reads back as `v`; ryu writes it plainly (no exponent), with ".0" for a
/// whole number. Zero and negative numbers are left to ryu.
pub(super) fn micros(out: &mut Vec<u8>, v: f64) -> bool {
    if !(1e-5..4_294_967_296.0).contains(&v) {
        return false;
    }
    let scaled = (v * 1e6).round();
    if scaled / 1e6 != v {
        return false;
    }
    // The whole part by itoa, then the point and six fraction digits,
    // two at a time, with their trailing zeros cut: ".0" for a whole
    // number, "0.0..." below one. `scaled` is below 2^53: converted
    // through i64, one instruction (u64's branches for values past i64).
    let n = scaled as i64 as u64;
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(n / 1_000_000).as_bytes());
    let mut frac = (n % 1_000_000) as u32;
    if frac == 0 {
        out.extend_from_slice(b".0");
        return true;
    }
    let mut digits = *b".000000";
    for at in [5, 3, 1] {
        let pair = (frac % 100) as usize;
        frac /= 100;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair * 2..pair * 2 + 2]);
    }
    // All seven copied as one word (a slice's copy is a call), then the
    // trailing zeros cut.
    let zeros = digits.iter().rev().take_while(|&&d| d == b'0').count();
    out.extend_from_slice(&digits);
    out.truncate(out.len() - zeros);
    true
}

pub(super) fn u64_(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn opt_f64(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(v) => f64_(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(s) => str_(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn list<'a>(out: &mut Vec<u8>, items: impl Iterator<Item = &'a str>) {
    out.push(b'[');
    for (i, s) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        str_(out, s);
    }
    out.push(b']');
}

fn opt_list<'a>(out: &mut Vec<u8>, items: Option<impl Iterator<Item = &'a str>>) {
    match items {
        Some(items) => list(out, items),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => u64_(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// RFC 3339 has nothing to escape.
fn opt_time(out: &mut Vec<u8>, v: Option<crate::record::UtcTime>) {
    match v {
        Some(t) => {
            out.push(b'"');
            t.write_to(out);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// `"name":` after `pre` (a comma, a brace): one copy of a constant,
/// where a push and two copies were ~15 instructions each, a hundred a
/// record.
macro_rules! key {
    ($out:expr, $pre:literal, $name:literal) => {
        $out.extend_from_slice(concat!($pre, "\"", $name, "\":").as_bytes())
    };
}

/// Appends the record's JSON (no newline).
pub fn encode(out: &mut Vec<u8>, r: &ConnectionRecord) {
    key!(out, "{", "ts");
    f64_(out, r.ts);
    out.extend_from_slice(match r.transport {
        crate::record::Transport::Tcp => b",\"transport\":\"tcp\"",
        crate::record::Transport::Quic => b",\"transport\":\"quic\"",
    });
    key!(out, ",", "client");
    str_(out, &r.client);
    key!(out, ",", "server");
    str_(out, &r.server);
    key!(out, ",", "sni");
    opt_str(out, r.sni.as_deref());
    key!(out, ",", "version");
    opt_str(out, r.version);
    key!(out, ",", "cipher");
    opt_str(out, r.cipher.as_deref());
    key!(out, ",", "alpn");
    opt_list(out, r.alpn.as_ref().map(|l| l.iter()));
    key!(out, ",", "handshake");
    opt_str(out, r.handshake.map(|k| k.as_str()));
    key!(out, ",", "offered");
    opt_list(
        out,
        r.offered.as_ref().map(|l| l.iter().map(|m| m.as_str())),
    );
    key!(out, ",", "resumption");
    opt_str(out, r.resumption.map(|m| m.as_str()));
    key!(out, ",", "early_data");
    opt_str(out, r.early_data.map(|e| e.as_str()));
    out.extend_from_slice(if r.hrr {
        b",\"hrr\":true"
    } else {
        b",\"hrr\":false"
    });
    out.extend_from_slice(if r.retry {
        b",\"retry\":true"
    } else {
        b",\"retry\":false"
    });
    out.extend_from_slice(b",\"timing\":");
    // Every key comes with a comma before it: the first one's becomes the
    // object's opening brace.
    let open = out.len();
    r.timing.each_json(out, |out, v| match v {
        TimingValue::Ms(ms) => opt_f64(out, ms),
        TimingValue::Count(Some(n)) => u64_(out, n.into()),
        TimingValue::Count(None) => out.extend_from_slice(b"null"),
    });
    match out.get_mut(open) {
        Some(comma) => *comma = b'{',
        None => out.push(b'{'),
    }
    key!(out, "},\"bytes\":{", "client_handshake");
    opt_u64(out, r.bytes.client_handshake);
    key!(out, ",", "server_handshake");
    opt_u64(out, r.bytes.server_handshake);
    key!(out, ",", "client_app");
    opt_u64(out, r.bytes.client_app);
    key!(out, ",", "server_app");
    opt_u64(out, r.bytes.server_app);
    key!(out, "},", "certs");
    match &r.certs {
        None => out.extend_from_slice(b"null"),
        Some(c) => {
            key!(out, "{", "count");
            u64_(out, c.count as u64);
            key!(out, ",", "bytes");
            u64_(out, c.bytes as u64);
            key!(out, ",", "leaf_subject");
            opt_str(out, c.leaf_subject.as_deref());
            key!(out, ",", "leaf_issuer");
            opt_str(out, c.leaf_issuer.as_deref());
            key!(out, ",", "not_before");
            opt_time(out, c.not_before);
            key!(out, ",", "not_after");
            opt_time(out, c.not_after);
            out.push(b'}');
        }
    }
    key!(out, ",", "failure");
    opt_str(out, r.failure.as_deref());
    key!(out, ",", "notes");
    list(out, r.notes.iter().copied());
    key!(out, ",", "ja4");
    opt_str(out, r.ja4.as_deref());
    key!(out, ",", "ja4_stable");
    opt_str(out, r.ja4_stable.as_deref());
    key!(out, ",", "ja4s");
    opt_str(out, r.ja4s.as_deref());
    key!(out, ",", "alpn_negotiated");
    opt_str(out, r.alpn_negotiated.as_deref());
    out.extend_from_slice(match r.family {
        crate::record::Family::Ipv4 => b",\"family\":\"ipv4\"",
        crate::record::Family::Ipv6 => b",\"family\":\"ipv6\"",
    });
    key!(out, ",", "role");
    opt_str(out, r.role.map(|r| r.as_str()));
    key!(out, ",", "proxied_client");
    opt_str(out, r.proxied_client.as_deref());
    // Present only when set (several captures, or --with-filename).
    if let Some(c) = &r.capture {
        key!(out, ",", "capture");
        str_(out, c);
    }
    out.push(b'}');
}

impl NdjsonWriter {
    pub fn write(&mut self, w: &mut impl Write, r: &ConnectionRecord) -> io::Result<()> {
        self.buf.clear();
        encode(&mut self.buf, r);
        self.buf.push(b'\n');
        w.write_all(&self.buf)
    }
}

pub fn write_record(w: &mut impl Write, r: &ConnectionRecord) -> io::Result<()> {
    NdjsonWriter::default().write(w, r)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::*;

    fn sample(text: &str, n: u32) -> ConnectionRecord {
        ConnectionRecord {
            ts: 1_700_000_000.123_456 + n as f64 * 0.000_001,
            transport: if n.is_multiple_of(2) {
                Transport::Tcp
            } else {
                Transport::Quic
            },
            client: format!("10.0.0.{n}:4{n}").into(),
            server: "[2001:db8::1]:443".into(),
            sni: (!n.is_multiple_of(3)).then(|| text.to_string()),
            version: Some("TLS1.3"),
            cipher: (n.is_multiple_of(2)).then(|| "TLS_AES_128_GCM_SHA256".into()),
            // Every nullable field null in some samples (one-sided captures).
            alpn: (n % 5 != 4).then(|| [text, "h2"].into_iter().collect()),
            handshake: [
                Some(HandshakeKind::Full),
                Some(HandshakeKind::Resumed),
                Some(HandshakeKind::Failed),
                Some(HandshakeKind::Incomplete),
                None,
            ][n as usize % 5],
            offered: (n % 5 != 4)
                .then(|| vec![Resumption::SessionId, Resumption::Psk][..(n as usize % 3)].to_vec()),
            resumption: (n % 2 == 1).then_some(Resumption::Ticket),
            early_data: [
                Some(EarlyData::None),
                Some(EarlyData::Accepted),
                Some(EarlyData::Rejected),
                Some(EarlyData::Attempted),
                None,
            ][n as usize % 5],
            hrr: n.is_multiple_of(5),
            retry: n.is_multiple_of(7),
            timing: Timing {
                tcp_rtt: Some(0.025 * n as f64),
                handshake: (n.is_multiple_of(2)).then_some(1.0 / (n as f64 + 3.0)),
                ttfb: Some(1e-7 * n as f64),
                round_trips: (!n.is_multiple_of(3)).then_some((n % 4) as u8),
                avoidable: (n.is_multiple_of(4)).then_some(100.0),
                client_hello_delay: (n % 3 != 1).then_some(0.001 * n as f64),
                server_think: (n % 4 != 1).then_some(2.5),
                client_think: (n % 6 != 1).then_some(1e3 / (n as f64 + 1.0)),
                idle_before_use: (n % 3 != 2).then_some(0.5 * n as f64),
                lifetime: (n % 4 != 2).then_some(1e4 + n as f64),
            },
            bytes: HandshakeBytes {
                client_handshake: (n % 5 != 4).then_some(n as u64 * 517),
                server_handshake: (n % 5 != 3).then_some(u64::MAX - n as u64),
                client_app: (!n.is_multiple_of(3)).then_some(n as u64 * 1000),
                server_app: (n % 3 != 1).then_some(n as u64 * 7),
            },
            certs: (n.is_multiple_of(2)).then(|| Certs {
                count: n as usize,
                bytes: 1234,
                leaf_subject: Some(format!("CN={text}").into()),
                leaf_issuer: None,
                not_before: (n % 4 != 2).then_some(UtcTime(1_769_903_999 - n as i64)),
                not_after: (n % 3 != 2).then_some(UtcTime(1_800_000_000)),
            }),
            failure: (n.is_multiple_of(3)).then(|| "alert:handshake_failure".into()),
            notes: if n.is_multiple_of(2) {
                vec!["no_syn", "capture_ended"]
            } else {
                vec![]
            },
            ja4: (n % 5 != 4).then(|| "t13d1516h2_8daaf6152771_e5627efa2ab1".into()),
            ja4_stable: (n % 5 != 4).then(|| "t13d1514h2_8daaf6152771_9b2f2e1d2a0c".into()),
            ja4s: (n % 3 != 1).then(|| "t130200_1301_234ea6891581".into()),
            alpn_negotiated: (n % 4 == 1).then(|| text.to_string()),
            family: if n.is_multiple_of(2) {
                Family::Ipv4
            } else {
                Family::Ipv6
            },
            role: match n % 4 {
                0 => None,
                1 => Some(Role::Inbound),
                2 => Some(Role::Outbound),
                _ => Some(Role::Transit),
            },
            proxied_client: n
                .is_multiple_of(3)
                .then(|| format!("[2001:db8::{n}]:{text}")),
            capture: (n % 5 == 2).then(|| format!("dir/{text}.pcap")),
            zeek: None,
            unsettled: None,
        }
    }

    /// Numbers written without ryu are written as ryu writes them: whole
    /// millionths and thousandths across the range, their neighbours a few
    /// doubles away (which ryu must take), and arbitrary doubles.
    #[test]
    fn numbers_as_ryu_writes_them() {
        let ryu = |v: f64| ryu::Buffer::new().format_finite(v).to_string();
        for v in number_spread() {
            let mut mine = Vec::new();
            f64_(&mut mine, v);
            assert_eq!(String::from_utf8(mine).unwrap(), ryu(v), "{v:e}");
        }
    }

    /// Finite doubles to check a number writer on (the CSV writer's too):
    /// whole millionths and thousandths across the range, their neighbours
    /// a few doubles away, special values and arbitrary doubles.
    pub(in crate::output) fn number_spread() -> Vec<f64> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            // xorshift64*: reproducible, no dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            0.001,
            0.000_001,
            1e-7,
            0.1,
            0.3,
            2.5,
            1e3,
            4_294_967_295.999_999,
            4_294_967_296.0,
            1_795_322_130.979_839,
            1e16,
            -1.5,
            f64::MIN_POSITIVE,
            f64::MAX,
        ];
        for _ in 0..200_000 {
            let r = next();
            let magnitude = 10u64.pow((r % 16) as u32);
            let millionths = (next() % magnitude) as f64;
            for scale in [1e6, 1e3, 1.0] {
                let v = millionths / scale;
                values.extend([
                    v,
                    f64::from_bits(v.to_bits() + 1),
                    f64::from_bits(v.to_bits().saturating_sub(1)),
                ]);
            }
            values.push(f64::from_bits(next()));
        }
        values.retain(|v| v.is_finite());
        values
    }

    /// Every byte that needs an escape, and one that does not, at every
    /// place in strings of every length across three words, escaped as
    /// serde_json escapes it.
    #[test]
    fn strings_escaped_as_serde_json() {
        let specials = [
            '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1f}', '\u{7f}', 'ü', ' ',
            '~',
        ];
        for len in 0..=24 {
            for at in 0..len.max(1) {
                for &c in &specials {
                    let s: String = (0..len)
                        .map(|i| {
                            if i == at {
                                c
                            } else {
                                (b'a' + (i % 26) as u8) as char
                            }
                        })
                        .collect();
                    let mut mine = Vec::new();
                    str_(&mut mine, &s);
                    assert_eq!(
                        String::from_utf8(mine).unwrap(),
                        serde_json::to_string(&s).unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn identical_to_serde_json() {
        let texts = [
            "example.com",
            "",
            "quote\" back\\slash",
            "ctl\u{1}\u{1f}\n\r\t\u{8}\u{c}",
            "üñï¢ødé ✓",
            "\u{7f}del",
        ];
        for (i, t) in texts.iter().enumerate() {
            for n in 0..24 {
                let r = sample(t, n + i as u32 * 24);
                let mut mine = Vec::new();
                encode(&mut mine, &r);
                assert_eq!(
                    String::from_utf8(mine).unwrap(),
                    serde_json::to_string(&r).unwrap()
                );
            }
        }
    }
}
