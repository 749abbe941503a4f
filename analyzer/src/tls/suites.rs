//! TLS 1.3 cipher suites (RFC 8446 §B.4): each suite's AEAD, key length and
//! hash, generated from `data/tls-ciphersuites.txt` by `build.rs`. The
//! record sizes, key schedules and packet protection that depend on the
//! suite all read it here.

/// The AEAD of a TLS 1.3 suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aead {
    AesGcm,
    ChaCha20Poly1305,
    AesCcm,
    AesCcm8,
    Sm4Gcm,
    Sm4Ccm,
    /// AEGIS (draft) and the integrity-only suites (RFC 9150): record
    /// overheads tlsrum does not assume.
    Other,
}

/// One TLS 1.3 cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tls13Suite {
    pub id: u16,
    pub name: &'static str,
    pub aead: Aead,
    /// AEAD key length in bytes.
    pub key_len: usize,
    /// Hash output length in bytes (32: SHA-256, 48: SHA-384).
    pub hash_len: usize,
}

include!(concat!(env!("OUT_DIR"), "/tls13_suites.rs"));

impl Tls13Suite {
    /// The TLS 1.3 suite with this code point, if it is one.
    pub fn get(id: u16) -> Option<&'static Tls13Suite> {
        TLS13_SUITES.iter().find(|s| s.id == id)
    }

    /// AEAD tag length (RFC 8446 §5.2, RFC 8998): 8 for CCM_8, 16 for the
    /// other AEADs; None where tlsrum does not know it.
    pub fn tag_len(&self) -> Option<usize> {
        match self.aead {
            Aead::AesCcm8 => Some(8),
            Aead::Other => None,
            _ => Some(16),
        }
    }

    /// Whether the hash is SHA-384 (else SHA-256).
    pub fn sha384(&self) -> bool {
        self.hash_len == 48
    }

    /// Whether tlsrum can decrypt records or packets under this suite
    /// (GCM and ChaCha20-Poly1305; not the CCM suites).
    pub fn decryptable(&self) -> bool {
        matches!(self.aead, Aead::AesGcm | Aead::ChaCha20Poly1305)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8446_suites() {
        let got: Vec<(u16, usize, usize, Option<usize>)> = TLS13_SUITES
            .iter()
            .filter(|s| s.id >> 8 == 0x13 && s.id <= 0x1305)
            .map(|s| (s.id, s.key_len, s.hash_len, s.tag_len()))
            .collect();
        assert_eq!(
            got,
            [
                (0x1301, 16, 32, Some(16)),
                (0x1302, 32, 48, Some(16)),
                (0x1303, 32, 32, Some(16)),
                (0x1304, 16, 32, Some(16)),
                (0x1305, 16, 32, Some(8))
            ]
        );
        assert_eq!(
            Tls13Suite::get(0x00c6).map(|s| (s.aead, s.tag_len())),
            Some((Aead::Sm4Gcm, Some(16)))
        );
        assert_eq!(Tls13Suite::get(0x1306).and_then(|s| s.tag_len()), None);
        assert_eq!(
            Tls13Suite::get(0x1303).map(|s| s.aead),
            Some(Aead::ChaCha20Poly1305)
        );
        assert!(Tls13Suite::get(0xc02f).is_none());
    }
}
