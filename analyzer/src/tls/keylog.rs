//! TLS key logs (the NSS `SSLKEYLOGFILE` format that OpenSSL, GnuTLS, curl,
//! browsers and Wireshark share) and what tlsrum does with them: decrypt
//! the server's first encrypted TLS 1.3 record, the EncryptedExtensions,
//! to see whether early data was accepted (RFC 8446 §4.2.10), and the
//! server's first records after its handshake, to tell NewSessionTicket
//! from the first application data (`ttfb`). Without a key log the first
//! answer stays `attempted`: it is never guessed.

use std::collections::HashMap;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use hkdf::{Hkdf, HmacImpl};
use sha2::digest::OutputSizeUser;
use sha2::{Sha256, Sha384};

use super::codec::Reader;
use super::enums::{extension_type, handshake_type};
use super::suites::{Aead as SuiteAead, Tls13Suite};

/// Secrets of one connection, keyed in the log by the ClientHello.random.
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    pub server_handshake: Option<Vec<u8>>,
    pub client_handshake: Option<Vec<u8>>,
    /// SERVER_TRAFFIC_SECRET_0: the server's first application traffic
    /// secret, which opens its records after the handshake (tickets, data).
    pub server_traffic: Option<Vec<u8>>,
}

#[derive(Debug, Default)]
pub struct KeyLog {
    entries: HashMap<[u8; 32], Secrets>,
    /// Lines that were neither comments nor well-formed entries.
    pub bad_lines: usize,
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl KeyLog {
    /// Parses a key log; unknown labels are ignored, malformed lines counted.
    pub fn parse(text: &str) -> Self {
        let mut log = KeyLog::default();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let mut f = line.split_whitespace();
            let (Some(label), Some(random), Some(secret), None) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                log.bad_lines += 1;
                continue;
            };
            let (Some(random), Some(secret)) = (
                unhex(random).and_then(|r| <[u8; 32]>::try_from(r).ok()),
                unhex(secret),
            ) else {
                log.bad_lines += 1;
                continue;
            };
            let e = log.entries.entry(random).or_default();
            match label {
                "SERVER_HANDSHAKE_TRAFFIC_SECRET" => e.server_handshake = Some(secret),
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => e.client_handshake = Some(secret),
                "SERVER_TRAFFIC_SECRET_0" => e.server_traffic = Some(secret),
                _ => {}
            }
        }
        log
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, client_random: &[u8; 32]) -> Option<&Secrets> {
        self.entries.get(client_random)
    }
}

/// HKDF-Expand-Label info (RFC 8446 §7.1): length, "tls13 " + label, empty
/// context. Built on the stack: QUIC derives eight of them per connection.
pub(crate) struct LabelInfo {
    buf: [u8; LabelInfo::MAX],
    len: usize,
}

impl LabelInfo {
    /// Output length (2), full label (a length byte and up to 255 bytes),
    /// empty context (its length byte).
    const MAX: usize = 2 + 1 + 255 + 1;

    pub(crate) fn new(label: &str, len: usize) -> Self {
        const PREFIX: &[u8] = b"tls13 ";
        // The full label's length is one byte; ours are a few letters.
        let label = label.as_bytes();
        let label = label.get(..255 - PREFIX.len()).unwrap_or(label);
        let mut buf = [0; Self::MAX];
        let full = PREFIX.len() + label.len();
        buf[..2].copy_from_slice(&(len as u16).to_be_bytes());
        buf[2] = full as u8;
        buf[3..3 + PREFIX.len()].copy_from_slice(PREFIX);
        buf[3 + PREFIX.len()..3 + full].copy_from_slice(label);
        // The empty context's length byte is the zero after the label.
        LabelInfo { buf, len: 4 + full }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, into `out`,
/// from a PRK whose HMAC key schedule is computed once for all the labels
/// derived from it; false if `out` is too long for the hash.
pub(crate) fn expand_label<H, I>(prk: &Hkdf<H, I>, label: &str, out: &mut [u8]) -> bool
where
    H: OutputSizeUser,
    I: HmacImpl<H>,
{
    prk.expand(LabelInfo::new(label, out.len()).as_bytes(), out)
        .is_ok()
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, SHA-256 or SHA-384.
pub(crate) fn expand(sha384: bool, secret: &[u8], label: &str, len: usize) -> Option<Vec<u8>> {
    let mut out = vec![0; len];
    let done = if sha384 {
        expand_label(&Hkdf::<Sha384>::from_prk(secret).ok()?, label, &mut out)
    } else {
        expand_label(&Hkdf::<Sha256>::from_prk(secret).ok()?, label, &mut out)
    };
    done.then_some(out)
}

/// Key length and hash (SHA-384 or SHA-256) of a TLS 1.3 suite tlsrum can
/// decrypt (see [`Tls13Suite::decryptable`]).
pub(crate) fn suite_key(suite: u16) -> Option<(usize, bool)> {
    Tls13Suite::get(suite)
        .filter(|s| s.decryptable())
        .map(|s| (s.key_len, s.sha384()))
}

/// Decrypts the record with sequence number `seq` protected under a TLS 1.3
/// traffic secret; returns (inner content type, plaintext).
pub fn decrypt_record(
    suite: u16,
    secret: &[u8],
    seq: u64,
    header: &[u8; 5],
    payload: &[u8],
) -> Option<(u8, Vec<u8>)> {
    let (key_len, sha384) = suite_key(suite)?;
    let key = expand(sha384, secret, "key", key_len)?;
    let mut nonce = expand(sha384, secret, "iv", 12)?;
    for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *n ^= s;
    }
    let msg = Payload {
        msg: payload,
        aad: header,
    };
    let nonce = aes_gcm::Nonce::from_slice(&nonce);
    let mut plain = match (Tls13Suite::get(suite)?.aead, key_len) {
        (SuiteAead::AesGcm, 16) => aes_gcm::Aes128Gcm::new_from_slice(&key)
            .ok()?
            .decrypt(nonce, msg)
            .ok()?,
        (SuiteAead::AesGcm, _) => aes_gcm::Aes256Gcm::new_from_slice(&key)
            .ok()?
            .decrypt(nonce, msg)
            .ok()?,
        _ => chacha20poly1305::ChaCha20Poly1305::new_from_slice(&key)
            .ok()?
            .decrypt(nonce, msg)
            .ok()?,
    };
    // TLSInnerPlaintext: content, content type, zero padding.
    while plain.last() == Some(&0) {
        plain.pop();
    }
    let inner = plain.pop()?;
    Some((inner, plain))
}

/// Whether the EncryptedExtensions at the start of a decrypted server
/// flight carries `early_data` (the server accepted 0-RTT). None if the
/// plaintext does not start with an EncryptedExtensions message.
pub fn accepts_early_data(plain: &[u8]) -> Option<bool> {
    let mut r = Reader::new(plain);
    if r.u8("handshake type").ok()? != handshake_type::ENCRYPTED_EXTENSIONS {
        return None;
    }
    let mut body = r.sub24("EncryptedExtensions").ok()?;
    early_data_in_extensions(body.rest())
}

/// Whether an EncryptedExtensions body carries `early_data`; None if it
/// does not parse.
pub fn early_data_in_extensions(body: &[u8]) -> Option<bool> {
    let mut body = Reader::new(body);
    let mut exts = body.sub16("extensions").ok()?;
    while exts.any_left() {
        let typ = exts.u16("extension type").ok()?;
        exts.sub16("extension data").ok()?;
        if typ == extension_type::EARLY_DATA {
            return Some(true);
        }
    }
    Some(false)
}

/// The protocol an EncryptedExtensions body's ALPN extension names (the
/// server's choice in TLS 1.3, RFC 8446 §4.3.1, RFC 7301 §3.1); None if it
/// has none or does not parse.
pub fn alpn_in_extensions(body: &[u8]) -> Option<String> {
    let mut body = Reader::new(body);
    let mut exts = body.sub16("extensions").ok()?;
    while exts.any_left() {
        let typ = exts.u16("extension type").ok()?;
        let mut data = exts.sub16("extension data").ok()?;
        if typ == extension_type::ALPN {
            let mut list = data.sub16("protocol_name_list").ok()?;
            let name = list.sub8("protocol_name").ok()?.rest();
            return Some(String::from_utf8_lossy(name).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_info_is_rfc_8446_hkdf_label() {
        // RFC 9001 A.1: the info of "quic key", 16 bytes.
        let want = b"\x00\x10\x0etls13 quic key\x00";
        assert_eq!(LabelInfo::new("quic key", 16).as_bytes(), want);
        // A label too long for its length byte is cut, not a panic.
        let long = "x".repeat(400);
        let info = LabelInfo::new(&long, 32);
        assert_eq!(info.as_bytes().len(), LabelInfo::MAX);
        assert_eq!(info.as_bytes()[2], 255);
    }

    #[test]
    fn alpn_of_encrypted_extensions() {
        // early_data, then ALPN ["h3"].
        let body = [0, 13, 0, 42, 0, 0, 0, 16, 0, 5, 0, 3, 2, b'h', b'3'];
        assert_eq!(alpn_in_extensions(&body).as_deref(), Some("h3"));
        assert_eq!(early_data_in_extensions(&body), Some(true));
        assert_eq!(alpn_in_extensions(&[0, 4, 0, 42, 0, 0]), None);
        assert_eq!(alpn_in_extensions(&body[..12]), None);
    }

    #[test]
    fn parses_nss_key_logs() {
        let r = "aa".repeat(32);
        let text = format!("# comment\nSERVER_HANDSHAKE_TRAFFIC_SECRET {r} 0102\nSERVER_TRAFFIC_SECRET_0 {r} 04\nCLIENT_RANDOM {r} 03\nbroken line\n");
        let log = KeyLog::parse(&text);
        assert_eq!(log.len(), 1);
        assert_eq!(log.bad_lines, 1);
        assert_eq!(
            log.get(&[0xaa; 32]).unwrap().server_handshake.as_deref(),
            Some(&[1u8, 2][..])
        );
        assert_eq!(
            log.get(&[0xaa; 32]).unwrap().server_traffic.as_deref(),
            Some(&[4u8][..])
        );
    }

    /// RFC 8448 §3: the server's handshake traffic key and IV derived from
    /// its handshake traffic secret (TLS_AES_128_GCM_SHA256).
    #[test]
    fn rfc8448_key_schedule() {
        let secret =
            unhex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38").unwrap();
        assert_eq!(
            expand(false, &secret, "key", 16).unwrap(),
            unhex("3fce516009c21727d0f2e4e86ee403bc").unwrap()
        );
        assert_eq!(
            expand(false, &secret, "iv", 12).unwrap(),
            unhex("5d313eb2671276ee13000b30").unwrap()
        );
    }

    #[test]
    fn round_trip_and_early_data_extension() {
        use aes_gcm::aead::Aead;
        let secret = [7u8; 32];
        let key = expand(false, &secret, "key", 16).unwrap();
        let iv = expand(false, &secret, "iv", 12).unwrap();
        // EncryptedExtensions with early_data (42), then inner type 22.
        let plain = [8u8, 0, 0, 6, 0, 4, 0, 42, 0, 0, 22];
        let header = [23u8, 3, 3, 0, (plain.len() + 16) as u8];
        let cipher = aes_gcm::Aes128Gcm::new_from_slice(&key)
            .unwrap()
            .encrypt(
                aes_gcm::Nonce::from_slice(&iv),
                Payload {
                    msg: &plain,
                    aad: &header,
                },
            )
            .unwrap();
        let (inner, body) = decrypt_record(0x1301, &secret, 0, &header, &cipher).unwrap();
        assert_eq!(inner, 22);
        assert_eq!(accepts_early_data(&body), Some(true));
        assert_eq!(accepts_early_data(&[8, 0, 0, 2, 0, 0]), Some(false));
        assert!(
            decrypt_record(0x1301, &[8u8; 32], 0, &header, &cipher).is_none(),
            "wrong key fails"
        );
    }
}
