//! The connection record: one per TLS-over-TCP or QUIC connection, the
//! contract of `tlsrum replay --format ndjson` (DESIGN.md "Classification").

use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Quic,
}

impl Transport {
    /// As the records spell it (`tcp`, `quic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Quic => "quic",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum HandshakeKind {
    Full,
    Resumed,
    Failed,
    Incomplete,
}

impl HandshakeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Resumed => "resumed",
            Self::Failed => "failed",
            Self::Incomplete => "incomplete",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Resumption {
    SessionId,
    Ticket,
    Psk,
}

impl Resumption {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionId => "session_id",
            Self::Ticket => "ticket",
            Self::Psk => "psk",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum EarlyData {
    None,
    Accepted,
    Rejected,
    Attempted,
}

impl EarlyData {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::Attempted => "attempted",
        }
    }
}

/// A timing field's value, as the encoders see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimingValue {
    /// Milliseconds (CSV column `<name>_ms`).
    Ms(Option<f64>),
    /// A count (CSV column `<name>`).
    Count(Option<u8>),
}

/// Defines [`Timing`] once: its fields and the walk every encoder (NDJSON,
/// CSV) uses, so a new timing field is one line here plus where it is
/// computed (`handshake/timing.rs`).
macro_rules! timing_fields {
    ($( $(#[doc = $doc:literal])+ $field:ident : $kind:ident, )*) => {
        /// Milliseconds at the observer; None where the wire does not show it.
        #[derive(Debug, Clone, Default, PartialEq, Serialize)]
        pub struct Timing {
            $( $(#[doc = $doc])+ pub $field: timing_fields!(@type $kind), )*
        }

        impl Timing {
            /// Every field with its name, in the contract's order.
            pub fn each(&self, mut f: impl FnMut(&'static str, TimingValue)) {
                $( f(stringify!($field), TimingValue::$kind(self.$field)); )*
            }

            /// The same walk for NDJSON: each field's key, `,"name":`, is
            /// written to `out` here, where its length is a constant (a
            /// fixed copy, not a call), before `f` writes its value.
            pub fn each_json(&self, out: &mut Vec<u8>, mut f: impl FnMut(&mut Vec<u8>, TimingValue)) {
                $(
                    out.extend_from_slice(concat!(",\"", stringify!($field), "\":").as_bytes());
                    f(out, TimingValue::$kind(self.$field));
                )*
            }
        }
    };
    (@type Ms) => { Option<f64> };
    (@type Count) => { Option<u8> };
}

timing_fields! {
    /// TCP's three-way handshake (QUIC: the Initial exchange).
    tcp_rtt: Ms,
    /// ClientHello -> the client's first application data or Finished.
    handshake: Ms,
    /// ClientHello -> the server's first application data.
    ttfb: Ms,
    /// Handshake round trips before the client could send application data.
    round_trips: Count,
    /// What a resumed handshake would have saved.
    avoidable: Ms,
    /// TCP handshake's end (the client's ACK of the SYN-ACK) -> the
    /// ClientHello: time the client spent before it started (curl 7.87's
    /// CA-store load). Null for QUIC.
    client_hello_delay: Ms,
    /// The server's own time between receiving a client flight and sending
    /// its answer, summed over the handshake (the observer's round trip to
    /// the server taken out).
    server_think: Ms,
    /// The client's own time between receiving a server flight and sending
    /// its next one, summed up to the handshake's end (the observer's round
    /// trip to the client taken out).
    client_think: Ms,
    /// The handshake's end -> the client's first application data: near
    /// zero for a connection opened on demand, long for a pooled or
    /// pre-warmed one.
    idle_before_use: Ms,
    /// The connection's first packet -> its FIN/RST; null while open.
    lifetime: Ms,
}

impl Timing {
    /// The handshake's time on the wire: `handshake` less both sides'
    /// think time, where all three are known (TLS over TCP; QUIC shows no
    /// client think time). By the identity of DESIGN.md's "Time
    /// decomposition" this is about the round trips the handshake spans ×
    /// `tcp_rtt`, and with the think times it adds up to `handshake`
    /// exactly, which is what a "where the time goes" view stacks. Not a
    /// record field: the record carries its three terms.
    pub fn network(&self) -> Option<f64> {
        let (hs, server, client) = (self.handshake?, self.server_think?, self.client_think?);
        // Rounded terms can leave a hair below zero.
        Some((hs - server - client).max(0.0))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HandshakeBytes {
    /// None when the capture does not show that direction (one-sided).
    pub client_handshake: Option<u64>,
    pub server_handshake: Option<u64>,
    /// Bytes each way after the handshake (application data, tickets,
    /// alerts) over the connection's life, from TCP's sequence numbers at
    /// its FIN/RST; null while open.
    pub client_app: Option<u64>,
    pub server_app: Option<u64>,
}

/// A UTC instant in whole seconds since the epoch, written as RFC 3339
/// with a `Z` (`2026-01-31T23:59:59Z`): the form certificates' validity
/// takes in the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime(pub i64);

impl UtcTime {
    /// The civil date and time: year, month, day, hours, minutes, seconds.
    fn civil(self) -> (i64, i64, i64, i64, i64, i64) {
        // Days to a civil date (H. Hinnant, "chrono-Compatible Low-Level
        // Date Algorithms"), exact over the proleptic Gregorian calendar.
        let (days, secs) = (self.0.div_euclid(86_400), self.0.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        (year, month, day, secs / 3600, secs / 60 % 60, secs % 60)
    }

    /// Appends what [`Display`](std::fmt::Display) writes: digit by digit
    /// for years 0-9999 (core::fmt's padding cost ~2,000 instructions a
    /// time, 2 % of a replay's), through `Display` otherwise.
    pub fn write_to(self, out: &mut Vec<u8>) {
        let (year, month, day, h, m, s) = self.civil();
        if !(0..=9999).contains(&year) {
            use std::io::Write as _;
            let _ = write!(out, "{self}");
            return;
        }
        let two = |n: i64| [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8];
        let (y1, y2) = (two(year / 100), two(year % 100));
        let (mo, d, h, m, s) = (two(month), two(day), two(h), two(m), two(s));
        out.extend_from_slice(&[
            y1[0], y1[1], y2[0], y2[1], b'-', mo[0], mo[1], b'-', d[0], d[1], b'T', h[0], h[1],
            b':', m[0], m[1], b':', s[0], s[1], b'Z',
        ]);
    }
}

impl std::fmt::Display for UtcTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (year, month, day, h, m, s) = self.civil();
        write!(f, "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    }
}

impl Serialize for UtcTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The server's certificate chain as sent in TLS <= 1.2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Certs {
    pub count: usize,
    pub bytes: usize,
    /// Shared with the leaf-certificate cache (a server sends the same
    /// certificate to every client: no copy a connection).
    pub leaf_subject: Option<Arc<str>>,
    pub leaf_issuer: Option<Arc<str>>,
    /// The leaf's validity (RFC 5280 §4.1.2.5), UTC.
    pub not_before: Option<UtcTime>,
    pub not_after: Option<UtcTime>,
}

/// Which end of the connection this host is (DESIGN.md `role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// This host is the TLS server.
    Inbound,
    /// This host is the TLS client.
    Outbound,
    /// Neither: a tap or a router.
    Transit,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inbound => "inbound",
            Self::Outbound => "outbound",
            Self::Transit => "transit",
        }
    }
}

/// The IP version of the connection as seen (the innermost header, after
/// tunnels: the one its flow is keyed on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    pub fn of(ip: std::net::IpAddr) -> Self {
        match ip {
            std::net::IpAddr::V4(_) => Self::Ipv4,
            std::net::IpAddr::V6(_) => Self::Ipv6,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ipv4 => "ipv4",
            Self::Ipv6 => "ipv6",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnectionRecord {
    pub ts: f64,
    pub transport: Transport,
    pub client: EndpointText,
    pub server: EndpointText,
    pub sni: Option<String>,
    pub version: Option<&'static str>,
    /// A static name for every suite tlsrum knows; `0x....` for others.
    pub cipher: Option<std::borrow::Cow<'static, str>>,
    /// The client's offer; None when the capture does not show the client.
    pub alpn: Option<crate::tls::handshake::ProtocolNames>,
    /// None: the capture shows one side only, and that side cannot tell
    /// (a TLS 1.3 client that offered a PSK: was it accepted?).
    pub handshake: Option<HandshakeKind>,
    /// None when the capture does not show the client.
    pub offered: Option<Vec<Resumption>>,
    pub resumption: Option<Resumption>,
    /// None when the capture does not show the client.
    pub early_data: Option<EarlyData>,
    pub hrr: bool,
    /// QUIC Retry; always false for TCP.
    pub retry: bool,
    pub timing: Timing,
    pub bytes: HandshakeBytes,
    pub certs: Option<Certs>,
    /// Why a `failed` handshake failed: `alert:<name>`, `encrypted_alert`,
    /// `reset`, `close`. None otherwise.
    pub failure: Option<String>,
    /// What limited the view of this connection (lost bytes, caps hit,
    /// heuristics used), e.g. `client_gap`, `no_syn`, `evicted`.
    pub notes: Vec<&'static str>,
    /// FoxIO JA4 of the (first) ClientHello; None when the capture does not
    /// show it.
    pub ja4: Option<Arc<str>>,
    /// JA4 without the session-dependent extensions (padding,
    /// session_ticket, pre_shared_key, early_data): the same for a client's
    /// fresh and resuming hellos ([`ja4_stable`](crate::tls::ja4::ja4_stable)).
    /// None where `ja4` is.
    pub ja4_stable: Option<Arc<str>>,
    /// FoxIO JA4S of the ServerHello answering it; None when not shown.
    pub ja4s: Option<Arc<str>>,
    /// The protocol the server chose: its ServerHello's ALPN (TLS <= 1.2),
    /// or the decrypted EncryptedExtensions' (TLS 1.3, QUIC; a key log).
    /// None when neither is visible, never guessed from the offer.
    pub alpn_negotiated: Option<String>,
    pub family: Family,
    /// This host's end of the connection; None when this host's addresses
    /// are not known (replay without `--local`).
    pub role: Option<Role>,
    /// `ip:port` of the original client named by a PROXY protocol header
    /// in front of the ClientHello (a load balancer's backend), else None.
    pub proxied_client: Option<String>,
    /// The capture the connection came from, as named on the command line
    /// (replay of several captures, or `--with-filename`); absent otherwise,
    /// so that one capture's records stay as they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<String>,
    /// What Zeek's SSL analyzer would log for this connection (the Zeek
    /// output formats, `docs/zeek.md`); not part of the NDJSON contract.
    /// None for records that do not come from a capture.
    #[serde(skip)]
    pub zeek: Option<Box<ZeekFacts>>,
    /// A question about the trace this record's analyzer could not answer
    /// when it built it (a sharded replay, `Issued::Later`): settled with
    /// [`settle`](Self::settle) before the record is written. None
    /// otherwise.
    #[serde(skip)]
    pub unsettled: Option<Box<Unsettled>>,
}

/// Was the session ID of a TLS 1.3 client's ClientHello issued by a server
/// earlier in the trace (DESIGN.md: then it counts as offered)? The
/// question, and the record's fields had it been.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsettled {
    /// The ID's hash, and the memory's stamp of the moment it was asked.
    pub session_id: (u64, u64),
    /// `offered` and `timing.avoidable` if it was issued.
    pub offered: Option<Vec<Resumption>>,
    pub avoidable: Option<f64>,
}

impl ConnectionRecord {
    /// Answers the record's open question: `issued` is whether the
    /// session ID asked about was issued before it was asked.
    pub fn settle(&mut self, issued: bool) {
        if let Some(u) = self.unsettled.take() {
            if issued {
                self.offered = u.offered;
                self.timing.avoidable = u.avoidable;
            }
        }
    }
}

/// The Zeek `ssl.log` columns tlsrum's records do not otherwise carry,
/// by Zeek's own rules (`handshake/zeek_view.rs`); raw code points, named
/// by the Zeek writer.
#[derive(Debug, Clone, PartialEq)]
pub struct ZeekFacts {
    /// Zeek's `ts`: the first TLS message (the ClientHello), not the
    /// connection's first packet.
    pub ts: f64,
    pub version: Option<u16>,
    pub cipher: Option<u16>,
    pub curve: Option<u16>,
    pub resumed: bool,
    pub last_alert: Option<u8>,
    pub next_protocol: Option<String>,
    pub established: bool,
    pub history: String,
    /// SHA-256 of each DER certificate, in order; None when no plaintext
    /// Certificate message came.
    pub cert_chain_fps: Option<Vec<[u8; 32]>>,
    pub client_cert_chain_fps: Option<Vec<[u8; 32]>>,
    pub sni_matches_cert: Option<bool>,
}

/// Bytes of the longest endpoint text: `[` + 39 (the longest IPv6 text) +
/// `]:` + 5.
const ENDPOINT_TEXT_MAX: usize = 47;

/// An endpoint as text (see [`endpoint`]), held in place: a record has two,
/// and as `String`s they were two of its allocations. It reads, compares
/// and hashes as a `str` (the bytes past its length do not count).
#[derive(Clone, Copy)]
pub struct EndpointText {
    buf: [u8; ENDPOINT_TEXT_MAX],
    len: u8,
}

impl EndpointText {
    pub fn as_str(&self) -> &str {
        // Only whole UTF-8 text goes in (`endpoint` writes ASCII, `From`
        // cuts at a character boundary): never the default.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or_default()
    }

    fn push(&mut self, b: u8) {
        self.buf[usize::from(self.len)] = b;
        self.len += 1;
    }

    fn push_all(&mut self, s: &[u8]) {
        let at = usize::from(self.len);
        self.buf[at..at + s.len()].copy_from_slice(s);
        self.len += s.len() as u8;
    }

    fn digits(&mut self, n: u16) {
        // itoa writes two digits at a time from its table.
        self.push_all(itoa::Buffer::new().format(n).as_bytes());
    }

    fn dotted(&mut self, v4: std::net::Ipv4Addr) {
        /// Each octet's decimal text and a dot, padded to four bytes, with
        /// its length without the dot.
        const OCTETS: [(u8, [u8; 4]); 256] = {
            let mut t = [(0u8, [0u8; 4]); 256];
            let mut n = 0;
            while n < 256 {
                let d = [
                    b'0' + (n / 100) as u8,
                    b'0' + (n / 10 % 10) as u8,
                    b'0' + (n % 10) as u8,
                ];
                t[n] = match n {
                    0..=9 => (1, [d[2], b'.', 0, 0]),
                    10..=99 => (2, [d[1], d[2], b'.', 0]),
                    _ => (3, [d[0], d[1], d[2], b'.']),
                };
                n += 1;
            }
            t
        };
        // Each octet's text from a table, its dot after it, the last dot
        // taken back (an endpoint cost a third more formatting each
        // octet's digits).
        for o in v4.octets() {
            let (len, text) = OCTETS[usize::from(o)];
            let at = usize::from(self.len);
            self.buf[at..at + 4].copy_from_slice(&text);
            self.len += len + 1;
        }
        self.len -= 1;
    }

    fn hex_groups(&mut self, groups: &[u16]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (i, &g) in groups.iter().enumerate() {
            if i > 0 {
                self.push(b':');
            }
            let mut shift = 12;
            while shift > 0 && g >> shift == 0 {
                shift -= 4;
            }
            loop {
                self.push(HEX[usize::from(g >> shift & 0xf)]);
                if shift == 0 {
                    break;
                }
                shift -= 4;
            }
        }
    }
}

impl Default for EndpointText {
    fn default() -> Self {
        EndpointText {
            buf: [0; ENDPOINT_TEXT_MAX],
            len: 0,
        }
    }
}

/// Text made elsewhere (tests, hand-made records): at most
/// [`ENDPOINT_TEXT_MAX`] bytes of it, cut at a character boundary.
impl From<&str> for EndpointText {
    fn from(s: &str) -> Self {
        let mut n = s.len().min(ENDPOINT_TEXT_MAX);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        let mut t = EndpointText::default();
        t.push_all(&s.as_bytes()[..n]);
        t
    }
}

impl From<String> for EndpointText {
    fn from(s: String) -> Self {
        EndpointText::from(s.as_str())
    }
}

impl std::ops::Deref for EndpointText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for EndpointText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for EndpointText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for EndpointText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for EndpointText {}

impl std::hash::Hash for EndpointText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for EndpointText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for EndpointText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for EndpointText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl Serialize for EndpointText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Formats an endpoint as `ip:port`, IPv6 as `[addr]:port`, as std's
/// `SocketAddr` does (RFC 5952: lowercase hex, the first longest run of two
/// or more zero groups as `::`, IPv4-mapped as `::ffff:a.b.c.d`). Written
/// into a buffer by hand: std's formatting machinery costs more than the
/// rest of a record (1,700 instructions an IPv6 endpoint).
pub fn endpoint(addr: std::net::IpAddr, port: u16) -> EndpointText {
    let mut out = EndpointText::default();
    match addr {
        std::net::IpAddr::V4(v4) => out.dotted(v4),
        std::net::IpAddr::V6(v6) => {
            out.push(b'[');
            if let Some(v4) = v6.to_ipv4_mapped() {
                out.push_all(b"::ffff:");
                out.dotted(v4);
            } else {
                let groups = v6.segments();
                // The first longest run of zero groups.
                let (mut best, mut run) = ((0, 0), (0, 0));
                for (i, &g) in groups.iter().enumerate() {
                    if g != 0 {
                        run = (i + 1, 0);
                        continue;
                    }
                    run.1 += 1;
                    if run.1 > best.1 {
                        best = run;
                    }
                }
                if best.1 > 1 {
                    out.hex_groups(&groups[..best.0]);
                    out.push_all(b"::");
                    out.hex_groups(&groups[best.0 + best.1..]);
                } else {
                    out.hex_groups(&groups);
                }
            }
            out.push(b']');
        }
    }
    out.push(b':');
    out.digits(port);
    out
}

/// A TLS 1.3 connection over TCP and IPv4 of `kind`, with nothing else
/// known: unit tests set the fields they are about on top of it.
#[cfg(test)]
impl ConnectionRecord {
    pub(crate) fn sample(kind: HandshakeKind) -> Self {
        ConnectionRecord {
            ts: 0.0,
            transport: Transport::Tcp,
            client: "10.0.0.1:40000".into(),
            server: "10.0.0.2:443".into(),
            sni: None,
            version: Some("TLS1.3"),
            cipher: None,
            alpn: Some(Default::default()),
            handshake: Some(kind),
            offered: Some(vec![]),
            resumption: None,
            early_data: Some(EarlyData::None),
            hrr: false,
            retry: false,
            timing: Timing::default(),
            bytes: HandshakeBytes::default(),
            certs: None,
            failure: None,
            notes: vec![],
            proxied_client: None,
            capture: None,
            zeek: None,
            unsettled: None,
            ja4: None,
            ja4_stable: None,
            ja4s: None,
            alpn_negotiated: None,
            family: Family::Ipv4,
            role: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{endpoint, UtcTime};

    #[test]
    fn utc_times_are_rfc3339() {
        for (t, want) in [
            (0, "1970-01-01T00:00:00Z"),
            (1_769_903_999, "2026-01-31T23:59:59Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (2_524_607_999, "2049-12-31T23:59:59Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
            (-631_152_000, "1950-01-01T00:00:00Z"),
        ] {
            assert_eq!(UtcTime(t).to_string(), want, "{t}");
        }
    }

    /// The digit-by-digit writer writes what `Display` does, years past
    /// 9999 and before 0 included (through `Display` itself).
    #[test]
    fn utc_time_writer_matches_display() {
        let mut t: i64 = -80_000_000_000;
        while t < 400_000_000_000 {
            let mut out = Vec::new();
            UtcTime(t).write_to(&mut out);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                UtcTime(t).to_string(),
                "{t}"
            );
            t += 86_399 * 7 + 3_661;
        }
    }

    #[test]
    fn endpoints_match_std() {
        for (ip, port) in [
            ("10.0.0.1", 443u16),
            ("0.0.0.0", 0),
            ("255.255.255.255", 65535),
            ("2001:db8::1", 8443),
            ("::ffff:1.2.3.4", 1),
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(
                endpoint(ip, port),
                std::net::SocketAddr::new(ip, port).to_string()
            );
        }
        // Every octet value in every place (one to three digits, each
        // octet's text from a table), plain and IPv4-mapped.
        for o in 0..=255u8 {
            let v4 = std::net::Ipv4Addr::new(o, o.wrapping_add(7), 255 - o, o / 2);
            for ip in [std::net::IpAddr::V4(v4), v4.to_ipv6_mapped().into()] {
                let port = u16::from(o) * 257;
                let want = std::net::SocketAddr::new(ip, port).to_string();
                assert_eq!(endpoint(ip, port), want);
            }
        }
        // Every pattern of zero and non-zero groups, with groups of one to
        // four hex digits, and IPv4-mapped and -compatible addresses.
        for pattern in 0u32..256 {
            for fill in [1u16, 0xa, 0xbc, 0xdef, 0x1234, 0xffff] {
                let groups: [u16; 8] = std::array::from_fn(|i| {
                    if pattern >> i & 1 == 1 {
                        fill.rotate_left(i as u32 * 4) | 1
                    } else {
                        0
                    }
                });
                let ip = std::net::IpAddr::from(groups);
                let want = std::net::SocketAddr::new(ip, 443).to_string();
                assert_eq!(endpoint(ip, 443), want, "{groups:x?}");
            }
        }
        for ip in [
            "::ffff:0.0.0.0",
            "::1.2.3.4",
            "::ffff:0:1.2.3.4",
            "64:ff9b::1.2.3.4",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(
                endpoint(ip, 1),
                std::net::SocketAddr::new(ip, 1).to_string()
            );
        }
    }

    /// Endpoint text reads, compares, hashes and serializes as its `str`;
    /// text made elsewhere keeps at most 47 bytes, cut at a character.
    #[test]
    fn endpoint_text_is_its_str() {
        use super::EndpointText;
        use std::hash::BuildHasher;
        let ip: std::net::IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        let e = super::endpoint(ip, 65535);
        let text = "[2001:db8:1:2:3:4:5:6]:65535";
        assert_eq!(e, text);
        assert_eq!(e, EndpointText::from(text));
        assert_eq!(e.len(), text.len());
        assert_eq!(format!("{e} {e:?}"), format!("{text} {text:?}"));
        assert_eq!(serde_json::to_string(&e).unwrap(), format!("\"{text}\""));
        let h = std::collections::hash_map::RandomState::new();
        assert_eq!(h.hash_one(e), h.hash_one(EndpointText::from(text)));
        // The longest: a full IPv6 text, bracketed, with a 5-digit port.
        let long = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
        assert_eq!(EndpointText::from(long), long);
        let over = format!("{long}9");
        assert_eq!(EndpointText::from(over.as_str()), long);
        let wide = format!("{}\u{e9}", &long[..46]);
        assert_eq!(EndpointText::from(wide.as_str()), &long[..46]);
        assert_eq!(EndpointText::default(), "");
    }

    /// A settled question changes `offered` and `avoidable` only when the
    /// ID was issued, and goes either way.
    #[test]
    fn settling_a_session_id_question() {
        use super::{ConnectionRecord, HandshakeKind, Resumption, Unsettled};
        let mut r = ConnectionRecord::sample(HandshakeKind::Full);
        r.offered = Some(vec![]);
        let open = Unsettled {
            session_id: (1, 2),
            offered: Some(vec![Resumption::SessionId]),
            avoidable: Some(20.0),
        };
        let (mut yes, mut no) = (r.clone(), r.clone());
        yes.unsettled = Some(Box::new(open.clone()));
        no.unsettled = Some(Box::new(open));
        yes.settle(true);
        no.settle(false);
        assert_eq!(
            (yes.offered, yes.timing.avoidable, yes.unsettled),
            (Some(vec![Resumption::SessionId]), Some(20.0), None)
        );
        assert_eq!(no, r);
    }
}
