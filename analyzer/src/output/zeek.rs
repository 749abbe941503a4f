//! Zeek's `ssl.log`: the ASCII (TSV) form with its header block and the
//! JSON form (one object per line), with Zeek's standard columns and
//! value conventions, then the Community ID and tlsrum's own findings
//! (`tlsrum_*`) as extension columns. `docs/zeek.md` lists each column's
//! rule and where Zeek's rules differ from the record's.
use std::borrow::Cow;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};

use base64::Engine as _;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::record::{ConnectionRecord, HandshakeKind, Transport, UtcTime};

/// Every column, name and Zeek type, in the log's order.
pub const COLUMNS: &[(&str, &str)] = &[
    ("ts", "time"),
    ("uid", "string"),
    ("id.orig_h", "addr"),
    ("id.orig_p", "port"),
    ("id.resp_h", "addr"),
    ("id.resp_p", "port"),
    ("version", "string"),
    ("cipher", "string"),
    ("curve", "string"),
    ("server_name", "string"),
    ("resumed", "bool"),
    ("last_alert", "string"),
    ("next_protocol", "string"),
    ("established", "bool"),
    ("ssl_history", "string"),
    ("cert_chain_fps", "vector[string]"),
    ("client_cert_chain_fps", "vector[string]"),
    ("sni_matches_cert", "bool"),
    ("community_id", "string"),
    ("tlsrum_handshake", "string"),
    ("tlsrum_resumption", "string"),
    ("tlsrum_offered", "set[string]"),
    ("tlsrum_early_data", "string"),
    ("tlsrum_hrr", "bool"),
    ("tlsrum_round_trips", "count"),
    ("tlsrum_tcp_rtt", "interval"),
    ("tlsrum_handshake_time", "interval"),
    ("tlsrum_ttfb", "interval"),
    ("tlsrum_avoidable", "interval"),
];

/// One column's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Unset,
    Time(f64),
    /// Borrowed from the record or static where it can be: a row is
    /// built per record.
    Str(Cow<'a, str>),
    Addr(IpAddr),
    Port(u16),
    Bool(bool),
    Count(u64),
    /// Seconds.
    Interval(f64),
    /// A vector or set of strings.
    List(Vec<Cow<'a, str>>),
}

fn opt<'a, T>(v: Option<T>, f: impl FnOnce(T) -> Value<'a>) -> Value<'a> {
    v.map_or(Value::Unset, f)
}

/// Zeek's `SSL::version_strings`, with its defaults for TLS 1.3 drafts
/// and unknown numbers.
pub fn version_name(v: u16) -> Cow<'static, str> {
    match v {
        0x0002 => "SSLv2".into(),
        0x0300 => "SSLv3".into(),
        0x0301 => "TLSv10".into(),
        0x0302 => "TLSv11".into(),
        0x0303 => "TLSv12".into(),
        0x0304 => "TLSv13".into(),
        0xfeff => "DTLSv10".into(),
        0xfefd => "DTLSv12".into(),
        0xfefc => "DTLSv13".into(),
        v if v / 0xff == 0x7f => format!("TLSv13-draft{}", v % 0x7f).into(),
        v => format!("unknown-{v}").into(),
    }
}

/// Zeek's `SSL::cipher_desc` (`base/protocols/ssl/consts.zeek`). Its names
/// are its constants' names: IANA's upper-cased (`TLS_DH_ANON_…`,
/// `TLS_ECDH_ANON_…`), plus suites IANA does not list or names otherwise,
/// and `unknown-N` for the rest (0x002C–0x002E among them).
pub fn cipher_name(id: u16) -> Cow<'static, str> {
    let zeek_only = match id {
        0x001c => "SSL_FORTEZZA_KEA_WITH_NULL_SHA",
        0x001d => "SSL_FORTEZZA_KEA_WITH_FORTEZZA_CBC_SHA",
        0x002c..=0x002e => return format!("unknown-{id}").into(),
        0x0072 => "TLS_DHE_DSS_WITH_3DES_EDE_CBC_RMD",
        0x0073 => "TLS_DHE_DSS_WITH_AES_128_CBC_RMD",
        0x0074 => "TLS_DHE_DSS_WITH_AES_256_CBC_RMD",
        0x0077 => "TLS_DHE_RSA_WITH_3DES_EDE_CBC_RMD",
        0x0078 => "TLS_DHE_RSA_WITH_AES_128_CBC_RMD",
        0x0079 => "TLS_DHE_RSA_WITH_AES_256_CBC_RMD",
        0x007c => "TLS_RSA_WITH_3DES_EDE_CBC_RMD",
        0x007d => "TLS_RSA_WITH_AES_128_CBC_RMD",
        0x007e => "TLS_RSA_WITH_AES_256_CBC_RMD",
        0x0080 => "TLS_GOSTR341094_WITH_28147_CNT_IMIT",
        0x0081 => "TLS_GOSTR341001_WITH_28147_CNT_IMIT",
        0x0082 => "TLS_GOSTR341094_WITH_NULL_GOSTR3411",
        0x0083 => "TLS_GOSTR341001_WITH_NULL_GOSTR3411",
        0x1306 => "TLS_AEGIS_256_SHA384",
        0x16b7 => "TLS_CECPQ1_RSA_WITH_CHACHA20_POLY1305_SHA256",
        0x16b8 => "TLS_CECPQ1_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        0x16b9 => "TLS_CECPQ1_RSA_WITH_AES_256_GCM_SHA384",
        0x16ba => "TLS_CECPQ1_ECDSA_WITH_AES_256_GCM_SHA384",
        0xc100 => "TLS_GOSTR341112_256_WITH_KUZNYECHIK_CTR_OMAC",
        0xc101 => "TLS_GOSTR341112_256_WITH_MAGMA_CTR_OMAC",
        0xc102 => "TLS_GOSTR341112_256_WITH_28147_CNT_IMIT",
        0xc103 => "TLS_GOSTR341112_256_WITH_KUZNYECHIK_MGM_L",
        0xc104 => "TLS_GOSTR341112_256_WITH_MAGMA_MGM_L",
        0xc105 => "TLS_GOSTR341112_256_WITH_KUZNYECHIK_MGM_S",
        0xc106 => "TLS_GOSTR341112_256_WITH_MAGMA_MGM_S",
        0xcc13 => "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256_OLD",
        0xcc14 => "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256_OLD",
        0xcc15 => "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256_OLD",
        0xd004 => "TLS_ECDHE_PSK_WITH_AES_128_CCM_SHA256_OLD",
        0xfefe => "SSL_RSA_FIPS_WITH_DES_CBC_SHA",
        0xfeff => "SSL_RSA_FIPS_WITH_3DES_EDE_CBC_SHA",
        0xffe0 => "SSL_RSA_FIPS_WITH_3DES_EDE_CBC_SHA_2",
        0xffe1 => "SSL_RSA_FIPS_WITH_DES_CBC_SHA_2",
        0xff80 => "SSL_RSA_WITH_RC2_CBC_MD5",
        0xff81 => "SSL_RSA_WITH_IDEA_CBC_MD5",
        0xff82 => "SSL_RSA_WITH_DES_CBC_MD5",
        0xff83 => "SSL_RSA_WITH_3DES_EDE_CBC_MD5",
        g if crate::tls::enums::is_grease(g) => return format!("grease_0x{g:04X}").into(),
        _ => {
            return match crate::tls::enums::cipher_suite_name(id) {
                // Most IANA names are upper case already: borrowed as they are.
                Some(name) if !name.bytes().any(|b| b.is_ascii_lowercase()) => name.into(),
                Some(name) => name.to_ascii_uppercase().into(),
                None => format!("unknown-{id}").into(),
            };
        }
    };
    zeek_only.into()
}

/// Zeek's `SSL::ec_curves`.
pub fn curve_name(id: u16) -> Cow<'static, str> {
    let name = match id {
        1 => "sect163k1",
        2 => "sect163r1",
        3 => "sect163r2",
        4 => "sect193r1",
        5 => "sect193r2",
        6 => "sect233k1",
        7 => "sect233r1",
        8 => "sect239k1",
        9 => "sect283k1",
        10 => "sect283r1",
        11 => "sect409k1",
        12 => "sect409r1",
        13 => "sect571k1",
        14 => "sect571r1",
        15 => "secp160k1",
        16 => "secp160r1",
        17 => "secp160r2",
        18 => "secp192k1",
        19 => "secp192r1",
        20 => "secp224k1",
        21 => "secp224r1",
        22 => "secp256k1",
        23 => "secp256r1",
        24 => "secp384r1",
        25 => "secp521r1",
        26 => "brainpoolP256r1",
        27 => "brainpoolP384r1",
        28 => "brainpoolP512r1",
        29 => "x25519",
        30 => "x448",
        31 => "brainpoolP256r1tls13",
        32 => "brainpoolP384r1tls13",
        33 => "brainpoolP512r1tls13",
        34 => "GC256A",
        35 => "GC256B",
        36 => "GC256C",
        37 => "GC256D",
        38 => "GC512A",
        39 => "GC512B",
        40 => "GC512C",
        41 => "curveSM2",
        256 => "ffdhe2048",
        257 => "ffdhe3072",
        258 => "ffdhe4096",
        259 => "ffdhe6144",
        260 => "ffdhe8192",
        512 => "MLKEM512",
        513 => "MLKEM768",
        514 => "MLKEM1024",
        4587 => "SecP256r1MLKEM768",
        4588 => "X25519MLKEM768",
        4589 => "SecP384r1MLKEM1024",
        4590 => "curveSM2MLKEM768",
        16696 => "CECPQ2",
        25497 => "X25519Kyber768Draft00",
        25498 => "SecP256r1Kyber768Draft00",
        0xff01 => "arbitrary_explicit_prime_curves",
        0xff02 => "arbitrary_explicit_char2_curves",
        g if crate::tls::enums::is_grease(g) => return format!("grease_0x{g:04X}").into(),
        g => return format!("unknown-{g}").into(),
    };
    name.into()
}

/// Zeek's `SSL::alert_descriptions`.
fn alert_name(desc: u8) -> Cow<'static, str> {
    match desc {
        // missing_extension (RFC 8446) is not in Zeek's table.
        109 => "unknown-109".into(),
        117 => "general_error".into(),
        121 => "ech_required".into(),
        d => match crate::tls::enums::alert_name(d) {
            "unknown" => format!("unknown-{d}").into(),
            name => name.into(),
        },
    }
}

fn endpoint(s: &str) -> Option<SocketAddr> {
    s.parse().ok()
}

/// Community ID v1 (<https://github.com/corelight/community-id-spec>) of a
/// TCP or UDP flow, seed `seed`: `1:` + base64 of SHA-1 over the seed,
/// both endpoints ordered (lower address first, then lower port), the
/// protocol and a zero pad byte.
pub fn community_id(a: SocketAddr, b: SocketAddr, proto: u8, seed: u16) -> String {
    let key = |s: SocketAddr| match s.ip() {
        IpAddr::V4(v4) => (v4.octets().to_vec(), s.port()),
        IpAddr::V6(v6) => (v6.octets().to_vec(), s.port()),
    };
    let (mut x, mut y) = (key(a), key(b));
    if (&x.0, x.1) > (&y.0, y.1) {
        std::mem::swap(&mut x, &mut y);
    }
    let mut h = Sha1::new();
    h.update(seed.to_be_bytes());
    h.update(&x.0);
    h.update(&y.0);
    h.update([proto, 0]);
    h.update(x.1.to_be_bytes());
    h.update(y.1.to_be_bytes());
    format!(
        "1:{}",
        base64::engine::general_purpose::STANDARD.encode(h.finalize())
    )
}

/// A Zeek-style connection uid, `C` + base62: stable for the same
/// connection in the same capture (a hash of its endpoints, transport and
/// first packet's time), so a rerun writes the same uids.
pub fn uid(r: &ConnectionRecord) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut h = Sha256::new();
    h.update(r.client.as_bytes());
    h.update(b"|");
    h.update(r.server.as_bytes());
    h.update(r.transport.as_str().as_bytes());
    h.update(r.ts.to_bits().to_be_bytes());
    let d = h.finalize();
    // 96 bits, as Zeek's uids carry.
    let mut n = d[..12].iter().fold(0u128, |n, &b| n << 8 | u128::from(b));
    let mut out = vec![b'C'];
    while n > 0 {
        out.push(DIGITS[(n % 62) as usize]);
        n /= 62;
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The row's values, in [`COLUMNS`]' order.
pub fn row(r: &ConnectionRecord) -> Vec<Value<'_>> {
    let z = r.zeek.as_deref();
    let (client, server) = (endpoint(&r.client), endpoint(&r.server));
    let proto = match r.transport {
        Transport::Tcp => 6,
        Transport::Quic => 17,
    };
    let s = |v| Value::Str(Cow::Borrowed(v));
    let ms = |v: Option<f64>| opt(v, |ms| Value::Interval(ms / 1000.0));
    vec![
        Value::Time(z.map_or(r.ts, |z| z.ts)),
        Value::Str(uid(r).into()),
        opt(client, |c| Value::Addr(c.ip())),
        opt(client, |c| Value::Port(c.port())),
        opt(server, |c| Value::Addr(c.ip())),
        opt(server, |c| Value::Port(c.port())),
        opt(z.and_then(|z| z.version), |v| Value::Str(version_name(v))),
        opt(z.and_then(|z| z.cipher), |c| Value::Str(cipher_name(c))),
        opt(z.and_then(|z| z.curve), |c| Value::Str(curve_name(c))),
        opt(r.sni.as_deref(), s),
        Value::Bool(z.is_some_and(|z| z.resumed)),
        opt(z.and_then(|z| z.last_alert), |a| Value::Str(alert_name(a))),
        opt(z.and_then(|z| z.next_protocol.as_deref()), s),
        Value::Bool(z.is_some_and(|z| z.established)),
        s(z.map_or("", |z| z.history.as_str())),
        opt(z.and_then(|z| z.cert_chain_fps.as_ref()), |l| {
            Value::List(l.iter().map(|fp| hex::encode(fp).into()).collect())
        }),
        opt(z.and_then(|z| z.client_cert_chain_fps.as_ref()), |l| {
            Value::List(l.iter().map(|fp| hex::encode(fp).into()).collect())
        }),
        opt(z.and_then(|z| z.sni_matches_cert), Value::Bool),
        opt(client.zip(server), |(c, sv)| {
            Value::Str(community_id(c, sv, proto, 0).into())
        }),
        opt(r.handshake.map(HandshakeKind::as_str), s),
        opt(r.resumption.map(|m| m.as_str()), s),
        opt(r.offered.as_ref(), |o| {
            Value::List(o.iter().map(|m| m.as_str().into()).collect())
        }),
        opt(r.early_data.map(|e| e.as_str()), s),
        Value::Bool(r.hrr),
        opt(r.timing.round_trips, |n| Value::Count(n.into())),
        ms(r.timing.tcp_rtt),
        ms(r.timing.handshake),
        ms(r.timing.ttfb),
        ms(r.timing.avoidable),
    ]
}

/// Zeek's ASCII writer escapes: the separator, backslash and bytes that
/// are not printable ASCII as `\xNN`; a string that is exactly the unset
/// marker `-` gets its first byte escaped. A string `(empty)` is written as
/// it is (Zeek's `formatters/Ascii.cc` checks the unset marker only).
fn tsv_str(out: &mut Vec<u8>, s: &str, in_set: bool) {
    if s == "-" {
        let _ = write!(out, "\\x{:02x}", s.as_bytes()[0]);
        out.extend_from_slice(&s.as_bytes()[1..]);
        return;
    }
    for &b in s.as_bytes() {
        if b == b'\t' || b == b'\\' || !(0x20..0x7f).contains(&b) || (in_set && b == b',') {
            let _ = write!(out, "\\x{b:02x}");
        } else {
            out.push(b);
        }
    }
}

/// Zeek writes times and intervals with six decimals.
fn secs(out: &mut Vec<u8>, v: f64) {
    let _ = write!(out, "{v:.6}");
}

fn tsv_value(out: &mut Vec<u8>, v: &Value<'_>) {
    match v {
        Value::Unset => out.push(b'-'),
        Value::Time(t) | Value::Interval(t) => secs(out, *t),
        Value::Str(s) if s.is_empty() => out.extend_from_slice(b"(empty)"),
        Value::Str(s) => tsv_str(out, s, false),
        Value::Addr(a) => {
            let _ = write!(out, "{a}");
        }
        Value::Port(p) => {
            let _ = write!(out, "{p}");
        }
        Value::Bool(b) => out.push(if *b { b'T' } else { b'F' }),
        Value::Count(n) => {
            let _ = write!(out, "{n}");
        }
        Value::List(l) if l.is_empty() => out.extend_from_slice(b"(empty)"),
        Value::List(l) => {
            for (i, s) in l.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                tsv_str(out, s, true);
            }
        }
    }
}

/// Zeek's `#open`/`#close` time form, `YYYY-MM-DD-HH-MM-SS` (UTC).
pub fn header_time(unix: i64) -> String {
    UtcTime(unix)
        .to_string()
        .trim_end_matches('Z')
        .replace(['T', ':'], "-")
}

/// The TSV header block, up to `#types`; `open` is the `#open` time.
pub fn tsv_header(open: i64) -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
    let types: Vec<&str> = COLUMNS.iter().map(|c| c.1).collect();
    format!(
        "#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n#path\tssl\n#open\t{}\n#fields\t{}\n#types\t{}\n",
        header_time(open),
        names.join("\t"),
        types.join("\t")
    )
}

/// The closing line of a TSV log.
pub fn tsv_footer(close: i64) -> String {
    format!("#close\t{}\n", header_time(close))
}

/// Appends one TSV row with its newline.
pub fn encode_tsv(out: &mut Vec<u8>, r: &ConnectionRecord) {
    for (i, v) in row(r).iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        tsv_value(out, v);
    }
    out.push(b'\n');
}

/// Appends one JSON row with its newline: Zeek's JSON writer (`LogAscii::use_json`)
/// omits unset fields, writes times and intervals as numbers of seconds,
/// booleans as `true`/`false`, containers as arrays.
pub fn encode_json(out: &mut Vec<u8>, r: &ConnectionRecord) {
    use super::ndjson::{f64_, micros, str_, u64_};
    // Keys in the log's column order, as Zeek writes them; values as
    // serde_json writes them (NDJSON's writers, which match it).
    out.push(b'{');
    let mut first = true;
    for ((name, _), v) in COLUMNS.iter().zip(row(r)) {
        if matches!(v, Value::Unset) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        str_(out, name);
        out.push(b':');
        match v {
            Value::Unset => {}
            Value::Time(t) | Value::Interval(t) => {
                // Six decimals, as Zeek, in the shortest form that reads
                // back. A value to the microsecond already is one (NDJSON's
                // path for them writes it); others are rounded first.
                if !micros(out, t) {
                    f64_(out, format!("{t:.6}").parse().unwrap_or(t));
                }
            }
            Value::Str(s) => str_(out, &s),
            // An address needs no escape.
            Value::Addr(a) => {
                let _ = write!(out, "\"{a}\"");
            }
            Value::Port(p) => u64_(out, p.into()),
            Value::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
            Value::Count(n) => u64_(out, n),
            Value::List(l) => {
                out.push(b'[');
                for (i, s) in l.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    str_(out, s);
                }
                out.push(b']');
            }
        }
    }
    out.extend_from_slice(b"}\n");
}

/// Zeek's two log forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeekForm {
    Tsv,
    Json,
}

/// Writes records as Zeek `ssl.log` to `w`: the TSV header before the
/// first row (or at [`finish`](Self::finish)), `#close` at the end.
pub struct ZeekWriter<W: Write> {
    w: W,
    form: ZeekForm,
    buf: Vec<u8>,
    header_done: bool,
    now: fn() -> i64,
}

impl<W: Write> ZeekWriter<W> {
    /// `header`: write the TSV header block (false when appending to a
    /// file that has one); `now` gives the `#open`/`#close` times.
    pub fn new(w: W, form: ZeekForm, header: bool, now: fn() -> i64) -> Self {
        ZeekWriter {
            w,
            form,
            buf: Vec::with_capacity(512),
            header_done: !header || form == ZeekForm::Json,
            now,
        }
    }

    fn header(&mut self) -> io::Result<()> {
        if !self.header_done {
            self.header_done = true;
            self.w.write_all(tsv_header((self.now)()).as_bytes())?;
        }
        Ok(())
    }

    pub fn write(&mut self, r: &ConnectionRecord) -> io::Result<()> {
        self.header()?;
        self.buf.clear();
        match self.form {
            ZeekForm::Tsv => encode_tsv(&mut self.buf, r),
            ZeekForm::Json => encode_json(&mut self.buf, r),
        }
        self.w.write_all(&self.buf)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The header if no row came, then `#close` (TSV), and flushes.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.form == ZeekForm::Tsv {
            self.header()?;
            self.w.write_all(tsv_footer((self.now)()).as_bytes())?;
        }
        self.w.flush()
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn community_id_matches_the_spec_examples() {
        // From the spec's baseline (community-id-spec, baseline/tcp.pcap).
        let a: SocketAddr = "128.232.110.120:34855".parse().unwrap();
        let b: SocketAddr = "66.35.250.204:80".parse().unwrap();
        assert_eq!(community_id(a, b, 6, 0), "1:LQU9qZlK+B5F3KDmev6m5PMibrg=");
        assert_eq!(community_id(b, a, 6, 0), community_id(a, b, 6, 0));
    }

    #[test]
    fn names_follow_zeek() {
        assert_eq!(version_name(0x0303), "TLSv12");
        assert_eq!(version_name(0x7f12), "TLSv13-draft18");
        assert_eq!(version_name(0x7e02), "unknown-32258");
        assert_eq!(curve_name(29), "x25519");
        assert_eq!(curve_name(0x0a0a), "grease_0x0A0A");
        assert_eq!(cipher_name(0x1301), "TLS_AES_128_GCM_SHA256");
        assert_eq!(alert_name(40), "handshake_failure");
        assert_eq!(alert_name(200), "unknown-200");
        assert_eq!(header_time(1_700_000_000), "2023-11-14-22-13-20");
    }

    #[test]
    fn tsv_escapes_what_zeek_escapes() {
        let mut out = Vec::new();
        tsv_str(&mut out, "a\tb\\c", false);
        tsv_str(&mut out, "-", false);
        tsv_str(&mut out, "x,y", true);
        assert_eq!(out, b"a\\x09b\\x5cc\\x2dx\\x2cy");
        let mut out = Vec::new();
        tsv_str(&mut out, "(empty)", false);
        assert_eq!(out, b"(empty)");
    }

    #[test]
    fn cipher_and_alert_names_are_zeeks() {
        // consts.zeek's constant names: `ANON` upper-cased.
        assert_eq!(cipher_name(0x0034), "TLS_DH_ANON_WITH_AES_128_CBC_SHA");
        assert_eq!(cipher_name(0xc018), "TLS_ECDH_ANON_WITH_AES_128_CBC_SHA");
        assert_eq!(
            cipher_name(0xcc13),
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256_OLD"
        );
        assert_eq!(cipher_name(0x1306), "TLS_AEGIS_256_SHA384");
        assert_eq!(cipher_name(0x002c), "unknown-44");
        assert_eq!(cipher_name(0xc02f), "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
        assert_eq!(cipher_name(0x0a0a), "grease_0x0A0A");
        assert_eq!(cipher_name(0x0300), "unknown-768");
        assert_eq!(alert_name(109), "unknown-109");
        assert_eq!(alert_name(121), "ech_required");
    }
}
