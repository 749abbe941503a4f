//! QUIC packet protection (RFC 9001 §5.3-5.4): header protection removal
//! and AEAD decryption of one direction's packets, for any TLS 1.3 suite.
//! Initial keys (AES-128-GCM, derived from a connection ID) come from
//! [`initial`](super::initial); Handshake keys come from a TLS key log's
//! traffic secrets ([`DirKeys::from_traffic_secret`]).

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128, Aes256};
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce, Tag};
use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use chacha20::ChaCha20;
use chacha20poly1305::ChaCha20Poly1305;

use super::packet::Version;
use crate::tls::keylog::{expand, suite_key};
use crate::tls::suites::{Aead as SuiteAead, Tls13Suite};

/// Why a protected packet could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecryptError {
    #[error("packet too short for header protection sample and tag")]
    Short,
    #[error("AEAD authentication failed")]
    Aead,
}

// The AES-256 key schedules are boxed; AES-128 (every Initial) stays
// inline, bigger than the ChaCha20 variant but without an allocation.
#[allow(clippy::large_enum_variant)]
enum Aead {
    Aes128(Aes128Gcm),
    Aes256(Box<Aes256Gcm>),
    ChaCha(ChaCha20Poly1305),
}

#[allow(clippy::large_enum_variant)]
enum HeaderKey {
    Aes128(Aes128),
    Aes256(Box<Aes256>),
    ChaCha([u8; 32]),
}

impl HeaderKey {
    /// The 5-byte header protection mask for a 16-byte sample (RFC 9001 §5.4.3-5.4.4).
    fn mask(&self, sample: &[u8]) -> [u8; 5] {
        let mut out = [0; 5];
        match self {
            HeaderKey::Aes128(k) => {
                let mut b = aes::Block::clone_from_slice(sample);
                k.encrypt_block(&mut b);
                out.copy_from_slice(&b[..5]);
            }
            HeaderKey::Aes256(k) => {
                let mut b = aes::Block::clone_from_slice(sample);
                k.encrypt_block(&mut b);
                out.copy_from_slice(&b[..5]);
            }
            HeaderKey::ChaCha(k) => {
                // counter = sample[0..4] little-endian, nonce = sample[4..16].
                let counter = u32::from_le_bytes([sample[0], sample[1], sample[2], sample[3]]);
                let mut c = ChaCha20::new(k.into(), sample[4..16].into());
                c.seek(u64::from(counter) * 64);
                c.apply_keystream(&mut out);
            }
        }
        out
    }
}

/// One direction's packet protection at one encryption level.
pub struct DirKeys {
    aead: Aead,
    iv: [u8; 12],
    hp: HeaderKey,
}

impl DirKeys {
    /// AES-128-GCM keys (the Initial level's suite).
    pub(crate) fn aes128(key: [u8; 16], iv: [u8; 12], hp: [u8; 16]) -> Self {
        DirKeys {
            aead: Aead::Aes128(Aes128Gcm::new(&key.into())),
            iv,
            hp: HeaderKey::Aes128(Aes128::new(&hp.into())),
        }
    }

    /// Keys from a TLS 1.3 traffic secret (as a key log gives it) for the
    /// negotiated suite; None for a suite QUIC does not use here (CCM).
    pub fn from_traffic_secret(version: Version, suite: u16, secret: &[u8]) -> Option<Self> {
        let (key_len, sha384) = suite_key(suite)?;
        let [kl, il, hl] = version.labels();
        let key = expand(sha384, secret, kl, key_len)?;
        let iv: [u8; 12] = expand(sha384, secret, il, 12)?.try_into().ok()?;
        let hp = expand(sha384, secret, hl, key_len)?;
        let (aead, hp) = match (Tls13Suite::get(suite)?.aead, key_len) {
            (SuiteAead::AesGcm, 16) => (
                Aead::Aes128(Aes128Gcm::new_from_slice(&key).ok()?),
                HeaderKey::Aes128(Aes128::new_from_slice(&hp).ok()?),
            ),
            (SuiteAead::AesGcm, _) => (
                Aead::Aes256(Box::new(Aes256Gcm::new_from_slice(&key).ok()?)),
                HeaderKey::Aes256(Box::new(Aes256::new_from_slice(&hp).ok()?)),
            ),
            _ => (
                Aead::ChaCha(ChaCha20Poly1305::new_from_slice(&key).ok()?),
                HeaderKey::ChaCha(hp.try_into().ok()?),
            ),
        };
        Some(DirKeys { aead, iv, hp })
    }

    fn nonce(&self, pn: u64) -> [u8; 12] {
        let mut nonce = self.iv;
        for (n, p) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
            *n ^= p;
        }
        nonce
    }

    /// Removes header protection and decrypts a packet in place (`pkt` is
    /// the whole packet, `pn_offset` where its packet number starts).
    /// Returns the full packet number and the plaintext's range in `pkt`.
    /// `largest` is the largest packet number opened so far in this
    /// direction and space, to expand the truncated number (RFC 9000 §A.3).
    pub fn open(
        &self,
        pkt: &mut [u8],
        pn_offset: usize,
        largest: Option<u64>,
    ) -> Result<(u64, std::ops::Range<usize>), DecryptError> {
        let sample_at = pn_offset + 4;
        let sample = pkt
            .get(sample_at..sample_at + 16)
            .ok_or(DecryptError::Short)?;
        let mask = self.hp.mask(sample);
        // Long headers protect 4 bits of the first byte, short headers 5.
        pkt[0] ^= mask[0] & if pkt[0] & 0x80 != 0 { 0x0f } else { 0x1f };
        let pn_len = usize::from(pkt[0] & 3) + 1;
        let mut truncated = 0u64;
        for i in 0..pn_len {
            pkt[pn_offset + i] ^= mask[1 + i];
            truncated = (truncated << 8) | u64::from(pkt[pn_offset + i]);
        }
        let header_len = pn_offset + pn_len;
        if pkt.len() < header_len + 16 {
            return Err(DecryptError::Short);
        }
        let pn = decode_packet_number(largest, truncated, pn_len as u32 * 8);
        let nonce = self.nonce(pn);
        let nonce = Nonce::from_slice(&nonce);
        let tag_at = pkt.len() - 16;
        let (head, rest) = pkt.split_at_mut(header_len);
        let (payload, tag) = rest.split_at_mut(tag_at - header_len);
        let tag = Tag::from_slice(tag);
        let opened = match &self.aead {
            Aead::Aes128(a) => a.decrypt_in_place_detached(nonce, head, payload, tag),
            Aead::Aes256(a) => a.decrypt_in_place_detached(nonce, head, payload, tag),
            Aead::ChaCha(a) => a.decrypt_in_place_detached(nonce, head, payload, tag),
        };
        opened.map_err(|_| DecryptError::Aead)?;
        Ok((pn, header_len..tag_at))
    }
}

impl DirKeys {
    /// Protects a packet (tests and the flood generator build traffic with
    /// it): `header` ends with the `pn_len`-byte packet number.
    pub fn seal(&self, header: &[u8], pn_len: usize, pn: u64, payload: &[u8]) -> Vec<u8> {
        let nonce = self.nonce(pn);
        let nonce = Nonce::from_slice(&nonce);
        let mut body = payload.to_vec();
        let tag = match &self.aead {
            Aead::Aes128(a) => a.encrypt_in_place_detached(nonce, header, &mut body),
            Aead::Aes256(a) => a.encrypt_in_place_detached(nonce, header, &mut body),
            Aead::ChaCha(a) => a.encrypt_in_place_detached(nonce, header, &mut body),
        }
        .unwrap();
        let mut out = header.to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(&tag);
        let pn_offset = header.len() - pn_len;
        let mask = self.hp.mask(&out[pn_offset + 4..pn_offset + 20]);
        out[0] ^= mask[0] & if out[0] & 0x80 != 0 { 0x0f } else { 0x1f };
        for i in 0..pn_len {
            out[pn_offset + i] ^= mask[1 + i];
        }
        out
    }
}

/// RFC 9000 Appendix A.3.
fn decode_packet_number(largest: Option<u64>, truncated: u64, bits: u32) -> u64 {
    let expected = largest.map_or(0, |l| l + 1);
    let win = 1u64 << bits;
    let hwin = win / 2;
    let mask = win - 1;
    let candidate = (expected & !mask) | truncated;
    if candidate + hwin <= expected && candidate < (1u64 << 62) - win {
        candidate + win
    } else if candidate > expected + hwin && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quic::initial::tests::hex;

    #[test]
    fn packet_numbers_expand_as_rfc9000_a3() {
        assert_eq!(
            decode_packet_number(Some(0xa82f30ea), 0x9b32, 16),
            0xa82f9b32
        );
        assert_eq!(decode_packet_number(None, 2, 32), 2);
        assert_eq!(decode_packet_number(Some(255), 1, 8), 257);
    }

    /// RFC 9001 A.5: a short-header packet under ChaCha20-Poly1305, keys
    /// derived from its traffic secret.
    #[test]
    fn rfc9001_a5_chacha20_short_header() {
        let secret = hex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b");
        let keys = DirKeys::from_traffic_secret(Version::V1, 0x1303, &secret).unwrap();
        let mut pkt = hex("4cfe4189655e5cd55c41f69080575d7999c25a5bfb");
        // 654360564 = 0x2700bff4, sent as its 3 low bytes.
        let (pn, range) = keys.open(&mut pkt, 1, Some(654360563)).unwrap();
        assert_eq!(pn, 654360564);
        assert_eq!(&pkt[..range.start], &hex("4200bff4")[..]);
        assert_eq!(&pkt[range], &[0x01]);
        let sealed = keys.seal(&hex("4200bff4"), 3, 654360564, &[0x01]);
        assert_eq!(sealed, hex("4cfe4189655e5cd55c41f69080575d7999c25a5bfb"));
    }

    /// Every suite seals and opens its own long-header packets; a wrong
    /// secret fails cleanly.
    #[test]
    fn every_suite_round_trips() {
        for (suite, len) in [(0x1301, 32), (0x1302, 48), (0x1303, 32)] {
            let secret = vec![7u8; len];
            let keys = DirKeys::from_traffic_secret(Version::V1, suite, &secret).unwrap();
            let header = [0xe1, 0, 0, 0, 1, 0, 0, 0x40, 0x30, 0, 5];
            let sealed = keys.seal(&header, 2, 5, &[6u8; 30]);
            let mut pkt = sealed.clone();
            let (pn, range) = keys.open(&mut pkt, 9, None).unwrap();
            assert_eq!((pn, &pkt[range]), (5, &[6u8; 30][..]), "suite {suite:04x}");
            let other = DirKeys::from_traffic_secret(Version::V1, suite, &vec![8u8; len]).unwrap();
            let mut pkt = sealed.clone();
            assert!(
                other.open(&mut pkt, 9, None).is_err(),
                "suite {suite:04x}: wrong key opened"
            );
        }
        assert!(
            DirKeys::from_traffic_secret(Version::V1, 0x1304, &[7; 32]).is_none(),
            "CCM"
        );
    }
}
