//! Handshake messages tlsrum reads: the hellos (with their extensions),
//! Certificate, NewSessionTicket and Alert. Everything else is counted by
//! type and length only.

use super::codec::{InvalidMessage, Reader};
use super::enums::{extension_type as ext, is_grease, ProtocolVersion, HRR_RANDOM};
use crate::memory::HeapSize;
use smallvec::SmallVec;

/// A legacy session ID (at most 32 bytes, RFC 5246 §7.4.1.2).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionId {
    len: u8,
    bytes: [u8; 32],
}

impl SessionId {
    fn read(r: &mut Reader<'_>) -> Result<Self, InvalidMessage> {
        let mut sub = r.sub8("session_id")?;
        let raw = sub.rest();
        if raw.len() > 32 {
            return Err(InvalidMessage::Invalid("session_id length"));
        }
        let mut bytes = [0; 32];
        bytes[..raw.len()].copy_from_slice(raw);
        Ok(SessionId {
            len: raw.len() as u8,
            bytes,
        })
    }

    pub fn from_slice(raw: &[u8]) -> Self {
        let n = raw.len().min(32);
        let mut bytes = [0; 32];
        bytes[..n].copy_from_slice(&raw[..n]);
        SessionId {
            len: n as u8,
            bytes,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionId({} bytes)", self.len)
    }
}

/// The pre_shared_key extension of a ClientHello (RFC 8446 §4.2.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PskOffer {
    pub identities: u16,
    /// Length of the first identity (a ticket); never the ticket itself.
    pub first_identity_len: u16,
}

/// A ClientHello, reduced to what classification and fingerprints need.
#[derive(Debug, Clone, Default)]
pub struct ClientHello {
    pub legacy_version: u16,
    /// Keys the connection's entry in a TLS key log.
    pub random: [u8; 32],
    pub session_id: SessionId,
    /// Its cipher suites, extension types (in the order the client sent
    /// them, GREASE included) and signature algorithms.
    pub lists: HelloLists,
    /// Boxed `str`, the ticket length below a `u16` and the lists in one
    /// allocation each: the struct is 192 bytes, an allocator size class
    /// (one in every open handshake).
    pub server_name: Option<Box<str>>,
    pub alpn: ProtocolNames,
    /// JA4's two ALPN characters, from the first (non-GREASE) ALPN value's
    /// raw bytes ([`alpn_chars`](super::ja4::alpn_chars)); None without one.
    pub ja4_alpn: Option<[u8; 2]>,
    /// Inline up to eight (a client offers a few; no allocation for them).
    pub supported_versions: SmallVec<[u16; 8]>,
    /// Length of the SessionTicket extension's ticket (Some(0) = empty, asks for one).
    pub session_ticket_len: Option<u16>,
    pub psk: Option<PskOffer>,
    pub early_data: bool,
    /// Came in an SSLv2-compatible record (RFC 5246 Appendix E.2).
    pub sslv2_compat: bool,
    /// How many extensions' contents did not parse (their framing did).
    /// The contents of psk_key_exchange_modes, key_share and
    /// supported_groups are checked but not kept: nothing reads them, and a
    /// hello is held for as long as its handshake is open (issue 19).
    pub malformed_extensions: u8,
    /// The extensions block was cut short.
    pub truncated_extensions: bool,
}

impl HeapSize for ClientHello {
    fn heap_size(&self) -> usize {
        self.lists.heap_size()
            + self.server_name.heap_size()
            + self.alpn.heap_size()
            + self.supported_versions.heap_size()
    }
}

/// A ClientHello's three lists of 16-bit values in one allocation: a hello
/// is held as long as its handshake is open (a million may be), and as
/// three vectors they were three allocations and 72 bytes of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelloLists {
    /// The cipher suites, then the extension types, then the signature
    /// algorithms.
    values: Box<[u16]>,
    /// Where the extension types start, and the signature algorithms (a
    /// hello's body is under 2^24 bytes).
    extensions_at: u32,
    signatures_at: u32,
}

impl HelloLists {
    pub fn new(cipher_suites: &[u16], extensions: &[u16], signature_algorithms: &[u16]) -> Self {
        let mut values =
            Vec::with_capacity(cipher_suites.len() + extensions.len() + signature_algorithms.len());
        values.extend_from_slice(cipher_suites);
        values.extend_from_slice(extensions);
        values.extend_from_slice(signature_algorithms);
        HelloLists {
            values: values.into_boxed_slice(),
            extensions_at: cipher_suites.len() as u32,
            signatures_at: (cipher_suites.len() + extensions.len()) as u32,
        }
    }

    pub fn cipher_suites(&self) -> &[u16] {
        &self.values[..self.extensions_at as usize]
    }

    pub fn extensions(&self) -> &[u16] {
        &self.values[self.extensions_at as usize..self.signatures_at as usize]
    }

    pub fn signature_algorithms(&self) -> &[u16] {
        &self.values[self.signatures_at as usize..]
    }

    /// From the wire: the suites' bytes, the extension types, and the
    /// bytes of each signature_algorithms extension (big-endian pairs).
    fn read(suites: &[u8], extensions: &[u16], signatures: &[&[u8]]) -> Self {
        let signature_bytes: usize = signatures.iter().map(|s| s.len()).sum();
        let mut values =
            Vec::with_capacity((suites.len() + signature_bytes) / 2 + extensions.len());
        let be = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        values.extend(suites.chunks_exact(2).map(be));
        values.extend_from_slice(extensions);
        for s in signatures {
            values.extend(s.chunks_exact(2).map(be));
        }
        HelloLists {
            values: values.into_boxed_slice(),
            extensions_at: (suites.len() / 2) as u32,
            signatures_at: (suites.len() / 2 + extensions.len()) as u32,
        }
    }

    /// The lists changed as vectors (tests make variants of a hello).
    #[cfg(test)]
    pub fn edit(&mut self, f: impl FnOnce(&mut Vec<u16>, &mut Vec<u16>, &mut Vec<u16>)) {
        let (mut suites, mut exts, mut sigs) = (
            self.cipher_suites().to_vec(),
            self.extensions().to_vec(),
            self.signature_algorithms().to_vec(),
        );
        f(&mut suites, &mut exts, &mut sigs);
        *self = HelloLists::new(&suites, &exts, &sigs);
    }
}

impl HeapSize for HelloLists {
    fn heap_size(&self) -> usize {
        match self.values.len() {
            0 => 0,
            n => n * std::mem::size_of::<u16>() + crate::memory::ALLOC_OVERHEAD,
        }
    }
}

/// A list of 16-bit values as the bytes of its whole pairs, and the error
/// of reading the values one by one (`what`) if a byte is left over.
fn pairs<'a>(mut list: Reader<'a>, what: &'static str) -> (&'a [u8], Result<(), InvalidMessage>) {
    let whole = list.take(list.left() & !1, what).unwrap_or_default();
    let rest = if list.any_left() {
        list.u16(what).map(drop)
    } else {
        Ok(())
    };
    (whole, rest)
}

/// Bytes of the protocol names in an ALPN list, summed first, so that
/// their text is allocated once at its size.
fn alpn_bytes(mut list: Reader<'_>) -> usize {
    let mut n = 0;
    while let Ok(name) = list.sub8("protocol_name") {
        n += name.left();
    }
    n
}

/// ALPN protocol names (RFC 7301) in one allocation: the names back to
/// back, and where each ends. A ClientHello's list goes whole into its
/// record; as a `Vec<String>` it was an allocation for the list and one
/// for each name.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProtocolNames {
    text: Box<str>,
    /// Where each name ends in `text` (up to four without an allocation).
    ends: SmallVec<[u32; 4]>,
}

impl ProtocolNames {
    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + Clone + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(from, to)| {
            self.text
                .get(from as usize..to as usize)
                .unwrap_or_default()
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl<S: AsRef<str>> FromIterator<S> for ProtocolNames {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        let (mut text, mut ends) = (String::new(), SmallVec::new());
        for name in names {
            text.push_str(name.as_ref());
            ends.push(text.len() as u32);
        }
        ProtocolNames {
            text: text.into_boxed_str(),
            ends,
        }
    }
}

impl std::fmt::Debug for ProtocolNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl serde::Serialize for ProtocolNames {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl HeapSize for ProtocolNames {
    fn heap_size(&self) -> usize {
        self.text.heap_size() + self.ends.heap_size()
    }
}

impl ClientHello {
    pub fn cipher_suites(&self) -> &[u16] {
        self.lists.cipher_suites()
    }

    /// Extension types in the order the client sent them (GREASE included).
    pub fn extensions(&self) -> &[u16] {
        self.lists.extensions()
    }

    pub fn signature_algorithms(&self) -> &[u16] {
        self.lists.signature_algorithms()
    }

    /// True if the client offers TLS 1.3 (or a draft of it).
    pub fn offers_tls13(&self) -> bool {
        self.supported_versions
            .iter()
            .any(|&v| !is_grease(v) && ProtocolVersion(v).is_tls13())
    }

    /// Parses the body of a ClientHello handshake message (RFC 8446 §4.1.2).
    pub fn parse(body: &[u8]) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(body);
        let mut ch = ClientHello {
            legacy_version: r.u16("client_version")?,
            ..Default::default()
        };
        ch.random.copy_from_slice(r.take(32, "client random")?);
        ch.session_id = SessionId::read(&mut r)?;
        // The three lists are gathered here and stored in one allocation:
        // the suites and signature algorithms as the runs of bytes they are.
        let (suites, odd) = pairs(r.sub16("cipher_suites")?, "cipher_suite");
        odd?;
        let mut types = SmallVec::<[u16; 32]>::new();
        let mut signatures = SmallVec::<[&[u8]; 1]>::new();
        r.sub8("compression_methods")?;
        if r.any_left() {
            // Lenient like the dissectors people compare us with: an
            // extensions block that claims more than the message holds is
            // read as far as it goes, and the shortfall is flagged.
            let declared = r.u16("extensions")? as usize;
            let avail = r.left();
            let block = r.take(declared.min(avail), "extensions")?;
            // Gathered, not counted first (walking the headers first to
            // count them cost a tenth of the parse).
            let mut exts = Reader::new(block);
            ch.truncated_extensions = declared > avail;
            while exts.any_left() {
                let (Ok(typ), Ok(data)) =
                    (exts.u16("extension type"), exts.sub16("extension data"))
                else {
                    ch.truncated_extensions = true;
                    break;
                };
                types.push(typ);
                // A malformed extension (e.g. an ALPN list with a bad length)
                // loses that extension only: its framing is intact.
                if ch.read_extension(typ, data, &mut signatures).is_err() {
                    ch.malformed_extensions = ch.malformed_extensions.saturating_add(1);
                }
            }
        }
        ch.lists = HelloLists::read(suites, &types, &signatures);
        r.expect_empty("ClientHello")?;
        ch.shrink();
        Ok(ch)
    }

    /// Drops the lists' spare capacity: a hello is kept as long as its
    /// handshake is open, and a million may be open at once.
    /// Lists whose length was not known when they were reserved (a
    /// malformed extension stops part way) give back what they did not use.
    fn shrink(&mut self) {
        self.supported_versions.shrink_to_fit();
    }

    /// Reads one extension's contents; the signature algorithms' bytes go
    /// to `signatures` (stored with the other lists once the hello is read).
    fn read_extension<'a>(
        &mut self,
        typ: u16,
        mut r: Reader<'a>,
        signatures: &mut SmallVec<[&'a [u8]; 1]>,
    ) -> Result<(), InvalidMessage> {
        match typ {
            ext::SERVER_NAME => {
                let mut list = r.sub16("server_name_list")?;
                while list.any_left() {
                    let name_type = list.u8("name_type")?;
                    let name = list.sub16("host_name")?.rest();
                    if name_type == 0 && self.server_name.is_none() {
                        self.server_name = Some(String::from_utf8_lossy(name).into());
                    }
                }
            }
            ext::ALPN => {
                let mut list = r.sub16("protocol_name_list")?;
                // Added to what came before (a second ALPN extension); the
                // names before a malformed one are kept.
                let ProtocolNames { text, mut ends } = std::mem::take(&mut self.alpn);
                let mut text = String::from(text);
                text.reserve_exact(alpn_bytes(list.clone()));
                let mut read = Ok(());
                while list.any_left() {
                    let p = match list.sub8("protocol_name") {
                        Ok(mut p) => p.rest(),
                        Err(e) => {
                            read = Err(e);
                            break;
                        }
                    };
                    let grease = matches!(p, &[a, b] if is_grease(u16::from_be_bytes([a, b])));
                    if self.ja4_alpn.is_none() && !grease {
                        self.ja4_alpn = Some(super::ja4::alpn_chars(p));
                    }
                    text.push_str(&String::from_utf8_lossy(p));
                    ends.push(text.len() as u32);
                }
                self.alpn = ProtocolNames {
                    text: text.into_boxed_str(),
                    ends,
                };
                read?;
            }
            ext::SUPPORTED_VERSIONS => {
                let mut list = r.sub8("supported_versions")?;
                self.supported_versions.reserve_exact(list.left() / 2);
                while list.any_left() {
                    self.supported_versions.push(list.u16("version")?);
                }
            }
            ext::SESSION_TICKET => {
                // An extension's body is at most 2^16 - 1 bytes.
                self.session_ticket_len = Some(u16::try_from(r.rest().len()).unwrap_or(u16::MAX))
            }
            ext::PRE_SHARED_KEY => {
                let mut ids = r.sub16("psk identities")?;
                let mut offer = PskOffer {
                    identities: 0,
                    first_identity_len: 0,
                };
                while ids.any_left() {
                    let id = ids.sub16("psk identity")?;
                    if offer.identities == 0 {
                        offer.first_identity_len = id.left() as u16;
                    }
                    ids.u32("obfuscated_ticket_age")?;
                    offer.identities = offer.identities.saturating_add(1);
                }
                r.sub16("psk binders")?;
                self.psk = Some(offer);
            }
            ext::PSK_KEY_EXCHANGE_MODES => {
                r.sub8("psk_key_exchange_modes")?;
            }
            ext::EARLY_DATA => self.early_data = true,
            ext::KEY_SHARE => {
                let mut list = r.sub16("client_shares")?;
                while list.any_left() {
                    list.u16("group")?;
                    list.sub16("key_exchange")?;
                }
            }
            ext::SUPPORTED_GROUPS => {
                let mut list = r.sub16("named_group_list")?;
                while list.any_left() {
                    list.u16("group")?;
                }
            }
            ext::SIGNATURE_ALGORITHMS => {
                let list = r.sub16("supported_signature_algorithms")?;
                // A list of odd length keeps its whole pairs (and is malformed).
                let (whole, odd) = pairs(list, "signature scheme");
                signatures.push(whole);
                odd?;
            }
            // Unknown and GREASE extensions are kept in `extensions` only.
            _ => return Ok(()),
        }
        r.expect_empty("extension")
    }

    /// Parses an SSLv2-compatible ClientHello body (after the 2-byte record
    /// header and the msg_type byte, RFC 5246 Appendix E.2).
    pub fn parse_sslv2(body: &[u8]) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(body);
        let version = r.u16("v2 version")?;
        let spec_len = r.u16("cipher_spec_length")? as usize;
        let sid_len = r.u16("session_id_length")? as usize;
        let challenge_len = r.u16("challenge_length")? as usize;
        if !spec_len.is_multiple_of(3) {
            return Err(InvalidMessage::Invalid("cipher_spec_length"));
        }
        let mut specs = Reader::new(r.take(spec_len, "cipher_specs")?);
        let session_id = SessionId::from_slice(r.take(sid_len, "session_id")?);
        r.take(challenge_len, "challenge")?;
        let mut suites = Vec::new();
        while specs.any_left() {
            let spec = specs.take(3, "cipher_spec")?;
            // Only specs with a zero first byte name TLS cipher suites.
            if spec[0] == 0 {
                suites.push(u16::from_be_bytes([spec[1], spec[2]]));
            }
        }
        Ok(ClientHello {
            legacy_version: version,
            session_id,
            lists: HelloLists::new(&suites, &[], &[]),
            sslv2_compat: true,
            ..Default::default()
        })
    }
}

/// A ServerHello or HelloRetryRequest.
#[derive(Debug, Clone, Default)]
pub struct ServerHello {
    pub legacy_version: u16,
    pub is_hrr: bool,
    pub session_id: SessionId,
    pub cipher_suite: u16,
    /// Inline up to eight (a server answers with a handful; no allocation
    /// a connection for them).
    pub extensions: SmallVec<[u16; 8]>,
    /// From supported_versions (TLS 1.3).
    pub selected_version: Option<u16>,
    /// From pre_shared_key: the index of the client's identity the server chose.
    pub psk_selected: Option<u16>,
    /// The server included an (empty) SessionTicket extension: it will issue a ticket.
    pub session_ticket_ext: bool,
    pub alpn: Option<String>,
    /// JA4S's two ALPN characters, from the raw bytes of `alpn`.
    pub ja4_alpn: Option<[u8; 2]>,
    pub key_share_group: Option<u16>,
}

impl HeapSize for ServerHello {
    fn heap_size(&self) -> usize {
        self.extensions.heap_size() + self.alpn.heap_size()
    }
}

impl ServerHello {
    /// The version the server negotiated.
    pub fn version(&self) -> ProtocolVersion {
        ProtocolVersion(self.selected_version.unwrap_or(self.legacy_version))
    }

    /// Parses the body of a ServerHello (RFC 8446 §4.1.3, RFC 5246 §7.4.1.3).
    pub fn parse(body: &[u8]) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(body);
        let mut sh = ServerHello {
            legacy_version: r.u16("server_version")?,
            ..Default::default()
        };
        sh.is_hrr = r.take(32, "server random")? == HRR_RANDOM;
        // TLS 1.3 drafts before -22 put the version here (as 0x7fNN, or
        // 0x0304 in the earliest ones; final 1.3 always says 0x0303) and
        // dropped the legacy session ID and compression fields.
        let early_draft = sh.legacy_version == 0x0304
            || ((sh.legacy_version >> 8) == 0x7f && (sh.legacy_version & 0xff) < 22);
        if !early_draft {
            sh.session_id = SessionId::read(&mut r)?;
        }
        sh.cipher_suite = r.u16("cipher_suite")?;
        if !early_draft {
            r.u8("compression_method")?;
        }
        if r.any_left() {
            let mut exts = r.sub16("extensions")?;
            while exts.any_left() {
                let typ = exts.u16("extension type")?;
                let mut data = exts.sub16("extension data")?;
                sh.extensions.push(typ);
                match typ {
                    ext::SUPPORTED_VERSIONS => {
                        sh.selected_version = Some(data.u16("selected_version")?)
                    }
                    ext::PRE_SHARED_KEY => sh.psk_selected = Some(data.u16("selected_identity")?),
                    ext::SESSION_TICKET => sh.session_ticket_ext = true,
                    ext::KEY_SHARE => sh.key_share_group = Some(data.u16("key_share group")?),
                    // TLS 1.3 drafts before 23 numbered key_share 40 (Zeek
                    // reads both); once extended_random, so never an error.
                    ext::KEY_SHARE_DRAFT => sh.key_share_group = data.u16("key_share group").ok(),
                    ext::ALPN => {
                        let mut list = data.sub16("protocol_name_list")?;
                        let p = list.sub8("protocol_name")?.rest();
                        sh.ja4_alpn = Some(super::ja4::alpn_chars(p));
                        sh.alpn = Some(String::from_utf8_lossy(p).into_owned());
                    }
                    _ => {}
                }
            }
        }
        r.expect_empty("ServerHello")?;
        Ok(sh)
    }
}

/// A Certificate message's certificates, in order: held inline up to four
/// (a server's chain is two or three; the list is read once and dropped,
/// so no allocation a handshake for it).
pub type CertificateList<'a> = SmallVec<[&'a [u8]; 4]>;

/// A TLS 1.2-and-earlier Certificate message (RFC 5246 §7.4.2): DER certs.
pub fn parse_certificate_list(body: &[u8]) -> Result<CertificateList<'_>, InvalidMessage> {
    let mut r = Reader::new(body);
    let mut list = r.sub24("certificate_list")?;
    r.expect_empty("Certificate")?;
    let mut certs = CertificateList::new();
    while list.any_left() {
        certs.push(list.sub24("ASN.1Cert")?.rest());
    }
    Ok(certs)
}

/// A TLS 1.3 Certificate message (RFC 8446 §4.4.2): a request context,
/// then entries of a DER certificate (X.509 type; RFC 7250 raw public keys
/// come out as what they are) and per-entry extensions.
pub fn parse_certificate_list13(body: &[u8]) -> Result<CertificateList<'_>, InvalidMessage> {
    let mut r = Reader::new(body);
    r.sub8("certificate_request_context")?;
    let mut list = r.sub24("certificate_list")?;
    r.expect_empty("Certificate")?;
    let mut certs = CertificateList::new();
    while list.any_left() {
        certs.push(list.sub24("cert_data")?.rest());
        list.sub16("CertificateEntry extensions")?;
    }
    Ok(certs)
}

/// A TLS 1.2 NewSessionTicket (RFC 5077 §3.3): the ticket's length only.
pub fn parse_new_session_ticket12(body: &[u8]) -> Result<usize, InvalidMessage> {
    let mut r = Reader::new(body);
    r.u32("ticket_lifetime_hint")?;
    let ticket = r.sub16("ticket")?;
    r.expect_empty("NewSessionTicket")?;
    Ok(ticket.left())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ClientHello from RFC 8448 §3 (simple 1-RTT handshake), body only.
    pub(crate) const RFC8448_CH: &str = "0303cb34ecb1e78163ba1c38c6dacb196a6dffa21a8d9912ec18a2ef6283024dece7000006130113031302010000910000000b0009000006736572766572ff01000100000a00140012001d0017001800190100010101020103010400230000003300260024001d002099381de560e4bd43d23d8e435a7dbafeb3c06e51c13cae4d5413691e529aaf2c002b0003020304000d0020001e040305030603020308040805080604010501060102010402050206020202002d00020101001c00024001";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc8448_client_hello() {
        let ch = ClientHello::parse(&hex(RFC8448_CH)).unwrap();
        assert_eq!(ch.legacy_version, 0x0303);
        assert!(ch.session_id.is_empty());
        assert_eq!(ch.cipher_suites(), [0x1301, 0x1303, 0x1302]);
        assert_eq!(ch.server_name.as_deref(), Some("server"));
        assert!(ch.offers_tls13());
        assert_eq!(ch.session_ticket_len, Some(0));
        assert_eq!(ch.malformed_extensions, 0);
        assert!(ch.psk.is_none() && !ch.early_data);
        assert_eq!(ch.extensions().first(), Some(&0));
    }

    /// A hello with `suites` (bytes) and one signature_algorithms
    /// extension holding `sigs` (bytes), then supported_versions.
    fn hello_with(suites: &[u8], sigs: &[u8]) -> Vec<u8> {
        let mut b = vec![0x03, 0x03];
        b.extend([7; 32]);
        b.push(0);
        b.extend((suites.len() as u16).to_be_bytes());
        b.extend(suites);
        b.extend([1, 0]);
        let mut exts = vec![0x00, 0x0d];
        exts.extend((sigs.len() as u16 + 2).to_be_bytes());
        exts.extend((sigs.len() as u16).to_be_bytes());
        exts.extend(sigs);
        exts.extend([0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
        b.extend((exts.len() as u16).to_be_bytes());
        b.extend(exts);
        b
    }

    /// The suites and signature algorithms are read as runs of pairs: an
    /// odd suites list is an error, an odd signature list keeps its whole
    /// pairs and counts as a malformed extension; the three lists keep
    /// their order and bounds.
    #[test]
    fn pairs_lists_of_odd_length() {
        let ch = ClientHello::parse(&hello_with(&[0x13, 0x01, 0xc0, 0x2f], &[4, 3, 8, 4])).unwrap();
        assert_eq!(ch.cipher_suites(), [0x1301, 0xc02f]);
        assert_eq!(ch.extensions(), [0x000d, 0x002b]);
        assert_eq!(ch.signature_algorithms(), [0x0403, 0x0804]);
        assert_eq!(ch.malformed_extensions, 0);
        assert!(ch.offers_tls13());

        assert!(ClientHello::parse(&hello_with(&[0x13, 0x01, 0xc0], &[4, 3])).is_err());

        let ch = ClientHello::parse(&hello_with(&[0x13, 0x01], &[4, 3, 8])).unwrap();
        assert_eq!(ch.cipher_suites(), [0x1301]);
        assert_eq!(ch.signature_algorithms(), [0x0403]);
        assert_eq!(ch.extensions(), [0x000d, 0x002b]);
        assert_eq!(ch.malformed_extensions, 1);
        assert!(ch.offers_tls13(), "the extension after it is read");

        let ch = ClientHello::parse(&hello_with(&[], &[])).unwrap();
        assert!(ch.cipher_suites().is_empty() && ch.signature_algorithms().is_empty());
        assert_eq!(ch.extensions(), [0x000d, 0x002b]);
    }

    /// A hello with one suite and the extensions `exts` (type, contents).
    fn hello_exts(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![0x03, 0x03];
        b.extend([7; 32]);
        b.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        let mut block = Vec::new();
        for (typ, data) in exts {
            block.extend(typ.to_be_bytes());
            block.extend((data.len() as u16).to_be_bytes());
            block.extend(data);
        }
        b.extend((block.len() as u16).to_be_bytes());
        b.extend(block);
        b
    }

    /// An ALPN list: each name 8-bit-length-prefixed, the list 16-bit.
    fn alpn_list(names: &[&[u8]]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(n.len() as u8);
            list.extend(*n);
        }
        let mut v = (list.len() as u16).to_be_bytes().to_vec();
        v.extend(list);
        v
    }

    /// ALPN names are kept in order in one allocation: an empty name and
    /// invalid UTF-8 (replaced) included; a second ALPN extension adds to
    /// the first; a malformed list keeps the names before the fault.
    #[test]
    fn alpn_names_in_one_allocation() {
        let ch = ClientHello::parse(&hello_exts(&[(
            ext::ALPN,
            alpn_list(&[b"h2", b"", b"\xffx", b"http/1.1"]),
        )]))
        .unwrap();
        let names: Vec<&str> = ch.alpn.iter().collect();
        assert_eq!(names, ["h2", "", "\u{fffd}x", "http/1.1"]);
        assert_eq!((ch.alpn.len(), ch.malformed_extensions), (4, 0));
        assert_eq!(
            serde_json::to_string(&ch.alpn).unwrap(),
            "[\"h2\",\"\",\"\u{fffd}x\",\"http/1.1\"]"
        );
        assert_eq!(format!("{:?}", ch.alpn), format!("{names:?}"));
        // The text and no list: four names fit in place.
        assert_eq!(ch.alpn.heap_size(), "h2\u{fffd}xhttp/1.1".len() + 16);

        let ch = ClientHello::parse(&hello_exts(&[
            (ext::ALPN, alpn_list(&[b"h2"])),
            (ext::ALPN, alpn_list(&[b"h3", b"spdy/3"])),
        ]))
        .unwrap();
        assert_eq!(ch.alpn.iter().collect::<Vec<_>>(), ["h2", "h3", "spdy/3"]);

        // A name whose length runs past the list: the ones before stay.
        let mut bad = alpn_list(&[b"h2", b"http/1.1"]);
        bad[1] += 1;
        bad.push(5);
        bad.extend(b"ab");
        let ch = ClientHello::parse(&hello_exts(&[(ext::ALPN, bad)])).unwrap();
        assert_eq!(ch.alpn.iter().collect::<Vec<_>>(), ["h2", "http/1.1"]);
        assert_eq!(ch.malformed_extensions, 1);
        assert_eq!(ch.ja4_alpn, Some(*b"h2"));

        let none = ClientHello::parse(&hello_exts(&[])).unwrap();
        assert!(none.alpn.is_empty() && none.alpn.iter().next().is_none());
        assert_eq!(none.alpn.heap_size(), 0);
    }

    /// One is held in every open handshake (the memory goal of issue 19).
    #[test]
    fn a_client_hello_is_192_bytes() {
        assert_eq!(std::mem::size_of::<ClientHello>(), 192);
    }

    #[test]
    fn truncated_client_hello_is_an_error_or_flagged_at_every_cut() {
        let body = hex(RFC8448_CH);
        // Up to the extensions, every cut is an error; 2+32+1+8+2 bytes is a
        // complete extension-less (TLS 1.0 style) hello; a cut inside the
        // extensions keeps what came before and flags the rest.
        for cut in 0..45 {
            assert!(ClientHello::parse(&body[..cut]).is_err(), "cut at {cut}");
        }
        for cut in 47..body.len() {
            let ch = ClientHello::parse(&body[..cut]).unwrap();
            assert!(ch.truncated_extensions, "cut at {cut}");
        }
    }

    #[test]
    fn oversized_session_id_is_invalid() {
        let mut body = vec![3, 3];
        body.extend([0; 32]);
        body.push(33);
        body.extend([0; 33]);
        assert_eq!(
            ClientHello::parse(&body).unwrap_err(),
            InvalidMessage::Invalid("session_id length")
        );
    }

    /// Regression: nDPI's tls_invalid_reads.pcap has an ALPN list whose
    /// length overruns the extension; the server name must survive.
    #[test]
    fn malformed_extension_loses_only_itself() {
        let mut body = hex(RFC8448_CH);
        // Append an ALPN extension whose list length (0xb889) overruns it.
        body.extend([0, 16, 0, 4, 0xb8, 0x89, 2, b'h']);
        let ext_len_at = 2 + 32 + 1 + 2 + 6 + 2;
        let ext_len = u16::from_be_bytes([body[ext_len_at], body[ext_len_at + 1]]) + 8;
        body[ext_len_at..ext_len_at + 2].copy_from_slice(&ext_len.to_be_bytes());
        let ch = ClientHello::parse(&body).unwrap();
        assert_eq!(ch.server_name.as_deref(), Some("server"));
        assert_eq!(ch.malformed_extensions, 1);
        assert!(ch.alpn.is_empty());
    }

    /// JA4's ALPN characters come from the raw bytes of the first
    /// non-GREASE value (GREASE is ignored everywhere in JA4), not from
    /// the lossy string the record shows.
    #[test]
    fn ja4_alpn_from_raw_bytes_skipping_grease() {
        let with_alpn = |values: &[&[u8]]| {
            let mut list = Vec::new();
            for v in values {
                list.push(v.len() as u8);
                list.extend(*v);
            }
            let mut body = hex(RFC8448_CH);
            let mut ext = vec![0, 16];
            ext.extend(((list.len() + 2) as u16).to_be_bytes());
            ext.extend((list.len() as u16).to_be_bytes());
            ext.extend(list);
            let ext_len_at = 2 + 32 + 1 + 2 + 6 + 2;
            let n = u16::from_be_bytes([body[ext_len_at], body[ext_len_at + 1]]) + ext.len() as u16;
            body[ext_len_at..ext_len_at + 2].copy_from_slice(&n.to_be_bytes());
            body.extend(ext);
            ClientHello::parse(&body).unwrap().ja4_alpn
        };
        assert_eq!(with_alpn(&[b"\x1a\x1a", b"h2", b"http/1.1"]), Some(*b"h2"));
        assert_eq!(with_alpn(&[&[0xba, 0xad], b"http/1.1"]), Some(*b"bd"));
        assert_eq!(with_alpn(&[b""]), Some(*b"00"));
        assert_eq!(ClientHello::parse(&hex(RFC8448_CH)).unwrap().ja4_alpn, None);
    }

    #[test]
    fn hello_retry_request_is_recognised() {
        let mut body = vec![3, 3];
        body.extend(HRR_RANDOM);
        body.extend([0, 0x13, 0x01, 0]); // empty session id, suite, compression
        body.extend([0, 6, 0, 43, 0, 2, 3, 4]); // supported_versions = 1.3
        let sh = ServerHello::parse(&body).unwrap();
        assert!(sh.is_hrr);
        assert!(sh.version().is_tls13());
    }
}
