//! What Zeek's SSL analyzer would have seen of a handshake, for the Zeek
//! `ssl.log` columns (`docs/zeek.md`): which records Zeek treats as
//! plaintext, the `ssl_history` letters, the last plaintext alert, the
//! ECDHE curve of a ServerKeyExchange, certificate fingerprints and when
//! Zeek raises `ssl_established` (after which it logs and stops looking).
//!
//! Zeek's rules (its `ssl-protocol.pac`, `ssl-analyzer.pac` and
//! `base/protocols/ssl/main.zeek`): a side's records are plaintext until it
//! sends ChangeCipherSpec or, once a version other than SSLv2..TLS 1.2 was
//! negotiated (or none yet), application data; the first encrypted record
//! after both sides went encrypted raises `ssl_established`.

use sha2::{Digest, Sha256};

use super::event::{Dir, Event};
use super::machine::TraceMemory;
use crate::memory::HeapSize;
use crate::record::ZeekFacts;
use crate::tls::enums::HRR_RANDOM;

/// Zeek's `SSL::max_ssl_history_length`.
pub const MAX_HISTORY: usize = 100;
/// Certificates fingerprinted per side; a longer chain keeps its first ones.
pub const MAX_CHAIN: usize = 16;

const CCS: u8 = 20;
const APPLICATION_DATA: u8 = 23;
const HEARTBEAT: u8 = 24;

#[derive(Debug, Default)]
pub(super) struct ZeekView {
    /// Client, server: has Zeek switched this side to ciphertext?
    encrypted: [bool; 2],
    /// `ssl_established` was raised: Zeek logged the row then, so nothing
    /// after it shows.
    pub(super) established: bool,
    history: Vec<u8>,
    pub(super) last_alert: Option<u8>,
    /// From a plaintext ServerKeyExchange with ECDHE named-curve params.
    pub(super) ske_curve: Option<u16>,
    client_key_exchange: bool,
    /// The client's ChangeCipherSpec came before any ClientKeyExchange
    /// (Zeek's ticket-with-empty-session-id resumption rule).
    pub(super) client_ccs_without_cke: bool,
    /// The certificate chains' fingerprints, both set at the first file
    /// (boxed: an open handshake without certificates carries none).
    pub(super) fps: Option<Box<Chains>>,
    pub(super) sni_matches_cert: Option<bool>,
    /// When the first plaintext TLS record of either side was complete:
    /// Zeek's `ts` (`set_session` at the first SSL event, which its
    /// analyzer raises once a record is whole). A ClientHello split over
    /// segments (large key shares) has its ts at the last one.
    pub(super) first_plaintext: FirstTime,
}

/// Zeek's `cert_chain_fps` and `client_cert_chain_fps`.
#[derive(Debug, Default)]
pub(super) struct Chains {
    pub(super) server: Vec<[u8; 32]>,
    pub(super) client: Vec<[u8; 32]>,
}

/// A capture time set once; NaN until then (8 bytes where `Option<f64>`
/// takes 16, on every open handshake).
#[derive(Debug, Clone, Copy)]
pub(super) struct FirstTime(f64);

impl Default for FirstTime {
    fn default() -> Self {
        FirstTime(f64::NAN)
    }
}

impl FirstTime {
    pub(super) fn set_once(&mut self, ts: f64) {
        if self.0.is_nan() {
            self.0 = ts;
        }
    }

    pub(super) fn get(self) -> Option<f64> {
        (!self.0.is_nan()).then_some(self.0)
    }
}

impl HeapSize for ZeekView {
    fn heap_size(&self) -> usize {
        let fps = self.fps.as_ref().map_or(0, |f| {
            std::mem::size_of::<Chains>()
                + crate::memory::ALLOC_OVERHEAD
                + f.server.heap_size()
                + f.client.heap_size()
        });
        self.history.heap_size() + fps
    }
}

/// Zeek's `ssl_history` letter for a handshake message type (main.zeek).
fn letter(msg_type: u8) -> u8 {
    match msg_type {
        0 => b'h',
        1 => b'c',
        2 => b's',
        3 => b'v',
        4 => b't',
        5 => b'e',
        6 => b'j',
        8 => b'o',
        11 => b'x',
        12 => b'k',
        13 => b'r',
        14 => b'n',
        15 => b'y',
        16 => b'g',
        20 => b'f',
        21 => b'w',
        22 => b'u',
        23 => b'a',
        24 => b'p',
        254 => b'm',
        _ => b'z',
    }
}

/// What the view needs from the rest of the handshake when an event comes.
pub(super) struct Context<'a> {
    pub quic: bool,
    /// The negotiated version so far (a HelloRetryRequest's counts), None
    /// before any ServerHello.
    pub version: Option<u16>,
    /// The cipher suite so far (ServerHello or HelloRetryRequest).
    pub cipher: Option<u16>,
    /// The client's server name, for `sni_matches_cert`.
    pub sni: Option<&'a str>,
}

impl ZeekView {
    fn side(dir: Dir) -> usize {
        match dir {
            Dir::Client => 0,
            Dir::Server => 1,
        }
    }

    fn add(&mut self, dir: Dir, c: u8) {
        if self.history.len() < MAX_HISTORY {
            self.history.push(match dir {
                Dir::Client => c.to_ascii_uppercase(),
                Dir::Server => c,
            });
        }
    }

    /// One event, before the state machine takes it.
    pub(super) fn on(
        &mut self,
        dir: Dir,
        ev: &Event<'_>,
        cx: &Context<'_>,
        mem: &mut dyn TraceMemory,
    ) {
        if self.established {
            return;
        }
        let side = Self::side(dir);
        match *ev {
            Event::Record(rec) => {
                if !self.encrypted[side] {
                    match rec.content_type {
                        CCS => {
                            self.add(dir, b'i');
                            self.encrypted[side] = true;
                            if dir == Dir::Client && !self.client_key_exchange {
                                self.client_ccs_without_cke = true;
                            }
                            return;
                        }
                        HEARTBEAT => self.add(dir, b'b'),
                        // Zeek: "all of those weird version numbers are
                        // some sort of TLS1.3".
                        APPLICATION_DATA
                            if !matches!(cx.version, Some(0x0002 | 0x0300..=0x0303)) =>
                        {
                            self.encrypted[side] = true;
                        }
                        _ => {}
                    }
                }
                if self.encrypted[side] && self.encrypted[1 - side] {
                    self.established = true;
                }
            }
            Event::Alert { description, .. } if !self.encrypted[side] && !cx.quic => {
                self.add(dir, b'l');
                self.last_alert = Some(description);
            }
            Event::Message { msg_type, body, .. } => {
                // QUIC: Zeek reads the Initial packets' CRYPTO frames only.
                let plaintext = if cx.quic {
                    matches!(msg_type, 1 | 2)
                } else {
                    !self.encrypted[side]
                };
                if !plaintext {
                    return;
                }
                let hrr = msg_type == 2
                    && body
                        .and_then(|b| b.get(2..34))
                        .is_some_and(|r| r == HRR_RANDOM);
                self.add(dir, if hrr { b'j' } else { letter(msg_type) });
                let Some(body) = body else { return };
                match msg_type {
                    16 if dir == Dir::Client => self.client_key_exchange = true,
                    11 => self.certificates(dir, body, cx.sni, mem),
                    12 if cx.cipher.is_some_and(zeek_parses_ecdh_ske) => {
                        // ECParameters: curve_type 3 (named_curve), NamedCurve.
                        if let [3, hi, lo, ..] = *body {
                            self.ske_curve = Some(u16::from_be_bytes([hi, lo]));
                        }
                    }
                    _ => {}
                }
            }
            Event::Sslv2 { msg_type, .. } => match msg_type {
                1 => self.add(Dir::Client, b'c'),
                4 => self.add(Dir::Server, b's'),
                // CLIENT-MASTER-KEY: Zeek raises ssl_established.
                2 => self.established = true,
                _ => {}
            },
            _ => {}
        }
    }

    /// A plaintext Certificate message (TLS <= 1.2 form): SHA-256 of each
    /// DER certificate, Zeek's default `X509::hash_function`.
    fn certificates(
        &mut self,
        dir: Dir,
        body: &[u8],
        sni: Option<&str>,
        mem: &mut dyn TraceMemory,
    ) {
        let Ok(list) = crate::tls::handshake::parse_certificate_list(body) else {
            return;
        };
        // Zeek's analyzer hands each non-empty certificate to file analysis
        // (`proc-certificate.pac` skips zero-length ones), and the first
        // such file of either side sets *both* chains, server's and
        // client's, to empty vectors (`ssl/files.zeek`, `file_sniff`). So a
        // server's certificates make `client_cert_chain_fps` `(empty)`,
        // and a Certificate message with no certificate sets neither.
        if list.iter().all(|der| der.is_empty()) {
            return;
        }
        let chains = self.fps.get_or_insert_with(Default::default);
        let fps = match dir {
            Dir::Client => &mut chains.client,
            Dir::Server => &mut chains.server,
        };
        // Zeek's chain vector exists once a certificate came, but only
        // certificates its X509 analyzer parses get a fingerprint. A full
        // X.509 parse of every chain certificate cost 16% of replay's time
        // on TLS 1.2 captures, so the DER envelope stands in for it.
        let parsed = list.iter().filter(|der| der_envelope_ok(der));
        for der in parsed.take(MAX_CHAIN.saturating_sub(fps.len())) {
            fps.push(Sha256::digest(der).into());
        }
        // Zeek's `cert_chain[0]`: the first certificate that became a file.
        let first = list.iter().find(|der| !der.is_empty());
        if let (Dir::Server, Some(leaf), Some(sni)) = (dir, first, sni) {
            // The trace memory caches leaves: servers send the same one to
            // every client.
            let leaf = mem.leaf_names(leaf);
            self.sni_matches_cert = leaf
                .subject
                .is_some()
                .then(|| leaf.host_names.iter().any(|n| hostname_matches(sni, n)));
        }
    }

    /// The history string.
    pub(super) fn history(&self) -> String {
        String::from_utf8_lossy(&self.history).into_owned()
    }
}

/// Whether Zeek reads a ServerKeyExchange under this suite as ECDHE or
/// ECDH_anon parameters (`tls-handshake-protocol.pac`, `ServerKeyExchange`):
/// its list holds the ECDHE and ECDH_anon suites but for the ECDHE_PSK
/// ones of RFC 7905 (0xCCAC) and RFC 8442 (0xD001–0xD005); static ECDH
/// suites send none.
fn zeek_parses_ecdh_ske(suite: u16) -> bool {
    if matches!(suite, 0xccac | 0xd001..=0xd005) {
        return false;
    }
    crate::tls::enums::cipher_suite_name(suite)
        .is_some_and(|n| n.contains("_ECDHE_") || n.contains("_ECDH_anon_"))
}

/// One DER TLV at the start of `b`: its tag, contents and what follows.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (digits, rest) = (rest.get(..n)?, rest.get(n..)?);
        (
            digits.iter().fold(0usize, |l, &d| l << 8 | usize::from(d)),
            rest,
        )
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// A Certificate's envelope (RFC 5280 §4.1): one SEQUENCE filling the
/// bytes, holding a SEQUENCE (tbsCertificate), a SEQUENCE (the signature
/// algorithm) and a BIT STRING, nothing else.
fn der_envelope_ok(der: &[u8]) -> bool {
    let Some((0x30, body, [])) = tlv(der) else {
        return false;
    };
    let Some((0x30, _, rest)) = tlv(body) else {
        return false;
    };
    let Some((0x30, _, rest)) = tlv(rest) else {
        return false;
    };
    matches!(tlv(rest), Some((0x03, _, [])))
}

/// The names Zeek's `x509_check_cert_hostname` (x509 `functions.bif`)
/// matches a host name against: the subjectAltName's DNS names when the
/// certificate has a subjectAltName extension at all (its subject is then
/// ignored, even when the extension holds no DNS name), else the subject's
/// last common name.
pub fn host_names(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    use x509_parser::oid_registry::OID_X509_EXT_SUBJECT_ALT_NAME;
    let mut names: Vec<String> = Vec::new();
    let san = cert
        .extensions()
        .iter()
        .find(|e| e.oid == OID_X509_EXT_SUBJECT_ALT_NAME);
    if let Some(san) = san {
        if let ParsedExtension::SubjectAlternativeName(san) = san.parsed_extension() {
            for n in &san.general_names {
                if let GeneralName::DNSName(d) = n {
                    names.push((*d).to_string());
                }
            }
        }
        return names;
    }
    names.extend(
        cert.subject()
            .iter_common_name()
            .last()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string),
    );
    names
}

/// One certificate name against a host name: Zeek's `check_hostname`
/// (x509 `functions.bif`). Equal bytes (case-sensitive, as Zeek compares),
/// or a wildcard: the name's first `*` is the last character of its first
/// label, the name has at least three labels, everything from the first
/// `.` on is equal in both, and the characters before the `*` equal the
/// host's first characters.
fn hostname_matches(host: &str, name: &str) -> bool {
    if host == name {
        return true;
    }
    let (Some(wild), Some(dot)) = (name.find('*'), name.find('.')) else {
        return false;
    };
    if !name[dot + 1..].contains('.') || wild + 1 != dot {
        return false;
    }
    let Some(host_dot) = host.find('.') else {
        return false;
    };
    host[host_dot..] == name[dot..] && (wild == 0 || host.get(..wild) == Some(&name[..wild]))
}

impl ZeekView {
    /// The facts the record carries, with what the hellos say.
    pub(super) fn facts(&self, hello: Hellos) -> ZeekFacts {
        ZeekFacts {
            ts: self.first_plaintext.get().unwrap_or(hello.ts),
            version: hello.version,
            cipher: hello.cipher,
            curve: hello.key_share.or(self.ske_curve),
            resumed: hello.resumed_by_ids
                || (hello.ticket_empty_session && self.client_ccs_without_cke),
            last_alert: self.last_alert,
            next_protocol: hello.alpn,
            established: self.established,
            history: self.history(),
            cert_chain_fps: self.fps.as_ref().map(|f| f.server.clone()),
            client_cert_chain_fps: self.fps.as_ref().map(|f| f.client.clone()),
            sni_matches_cert: self.sni_matches_cert,
        }
    }
}

/// What the hellos contribute to the Zeek columns.
pub(super) struct Hellos {
    pub ts: f64,
    pub version: Option<u16>,
    pub cipher: Option<u16>,
    pub key_share: Option<u16>,
    /// Zeek's session-ID rule or its pre_shared_key rule held.
    pub resumed_by_ids: bool,
    /// The client sent a non-empty SessionTicket with an empty (or zero)
    /// session ID.
    pub ticket_empty_session: bool,
    pub alpn: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::hostname_matches;

    #[test]
    fn wildcards_cover_one_label() {
        assert!(hostname_matches("www.example.com", "*.example.com"));
        assert!(hostname_matches("www.example.com", "www.example.com"));
        assert!(!hostname_matches("a.b.example.com", "*.example.com"));
        assert!(!hostname_matches("example.com", "*.example.com"));
        assert!(!hostname_matches("www.example.org", "*.example.com"));
    }

    /// A TLS <= 1.2 Certificate body holding these certificates.
    fn certificate_body(certs: &[&[u8]]) -> Vec<u8> {
        let len = |n: usize| [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let list: Vec<u8> = certs
            .iter()
            .flat_map(|c| len(c.len()).into_iter().chain(c.iter().copied()))
            .collect();
        len(list.len()).into_iter().chain(list).collect()
    }

    #[test]
    fn a_servers_certificate_sets_both_chains() {
        use super::super::event::Dir;
        use super::super::machine::NoMemory;
        use super::ZeekView;
        // SEQUENCE { SEQUENCE {}, SEQUENCE {}, BIT STRING {0} }
        let der: &[u8] = &[0x30, 0x07, 0x30, 0x00, 0x30, 0x00, 0x03, 0x01, 0x00];
        let mut v = ZeekView::default();
        v.certificates(Dir::Server, &certificate_body(&[der]), None, &mut NoMemory);
        assert_eq!(v.fps.as_ref().map(|f| f.server.len()), Some(1));
        // Zeek's file_sniff sets client_cert_chain_fps to an empty vector too.
        assert_eq!(v.fps.as_ref().map(|f| f.client.len()), Some(0));
        // An empty Certificate message (a client without a certificate)
        // gives Zeek no file: neither chain is set.
        let mut v = ZeekView::default();
        v.certificates(Dir::Client, &certificate_body(&[]), None, &mut NoMemory);
        assert!(v.fps.is_none());
    }

    #[test]
    fn ske_curve_only_under_zeeks_ecdh_suites() {
        use super::zeek_parses_ecdh_ske;
        assert!(zeek_parses_ecdh_ske(0xc02f)); // ECDHE_RSA_WITH_AES_128_GCM
        assert!(zeek_parses_ecdh_ske(0xc018)); // ECDH_anon_WITH_AES_128_CBC
        assert!(zeek_parses_ecdh_ske(0xc035)); // ECDHE_PSK_WITH_AES_128_CBC
        assert!(!zeek_parses_ecdh_ske(0xccac)); // ECDHE_PSK_WITH_CHACHA20
        assert!(!zeek_parses_ecdh_ske(0xd001)); // ECDHE_PSK_WITH_AES_128_GCM
        assert!(!zeek_parses_ecdh_ske(0xc004)); // static ECDH_ECDSA
        assert!(!zeek_parses_ecdh_ske(0x009e)); // DHE_RSA
    }

    #[test]
    fn hostnames_match_as_zeeks_check_hostname() {
        // Zeek compares bytes: no case folding.
        assert!(!hostname_matches("WWW.Example.com", "www.example.COM"));
        // Not below the third level.
        assert!(!hostname_matches("example.com", "*.com"));
        // Characters may come before the `*`, none after it.
        assert!(hostname_matches("web1.example.com", "web*.example.com"));
        assert!(!hostname_matches("mail.example.com", "web*.example.com"));
        assert!(!hostname_matches("www.example.com", "*w.example.com"));
    }
}
