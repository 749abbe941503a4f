//! Protocol numbers as open enums: unknown values and GREASE pass through.

include!(concat!(env!("OUT_DIR"), "/cipher_suites.rs"));

/// A cipher suite as records name it: its IANA name (no copy), or
/// `0x....` for a value that has none.
pub fn cipher_label(id: u16) -> std::borrow::Cow<'static, str> {
    cipher_suite_name(id).map_or_else(|| format!("0x{id:04x}").into(), Into::into)
}

/// TLS record content types (RFC 8446 §5.1).
pub mod content_type {
    pub const CHANGE_CIPHER_SPEC: u8 = 20;
    pub const ALERT: u8 = 21;
    pub const HANDSHAKE: u8 = 22;
    pub const APPLICATION_DATA: u8 = 23;
    pub const HEARTBEAT: u8 = 24;
}

/// Handshake message types (RFC 8446 §4, RFC 5246 §7.4).
pub mod handshake_type {
    pub const HELLO_REQUEST: u8 = 0;
    pub const CLIENT_HELLO: u8 = 1;
    pub const SERVER_HELLO: u8 = 2;
    pub const NEW_SESSION_TICKET: u8 = 4;
    pub const END_OF_EARLY_DATA: u8 = 5;
    pub const ENCRYPTED_EXTENSIONS: u8 = 8;
    pub const CERTIFICATE: u8 = 11;
    pub const SERVER_KEY_EXCHANGE: u8 = 12;
    pub const CERTIFICATE_REQUEST: u8 = 13;
    pub const SERVER_HELLO_DONE: u8 = 14;
    pub const CERTIFICATE_VERIFY: u8 = 15;
    pub const CLIENT_KEY_EXCHANGE: u8 = 16;
    pub const FINISHED: u8 = 20;
    pub const CERTIFICATE_STATUS: u8 = 22;
    pub const KEY_UPDATE: u8 = 24;
}

/// Extension code points (IANA "TLS ExtensionType Values").
pub mod extension_type {
    pub const SERVER_NAME: u16 = 0;
    pub const SUPPORTED_GROUPS: u16 = 10;
    pub const SIGNATURE_ALGORITHMS: u16 = 13;
    pub const ALPN: u16 = 16;
    pub const PADDING: u16 = 21;
    pub const SESSION_TICKET: u16 = 35;
    pub const PRE_SHARED_KEY: u16 = 41;
    pub const EARLY_DATA: u16 = 42;
    pub const SUPPORTED_VERSIONS: u16 = 43;
    pub const PSK_KEY_EXCHANGE_MODES: u16 = 45;
    pub const KEY_SHARE: u16 = 51;
    /// key_share in TLS 1.3 drafts before 23.
    pub const KEY_SHARE_DRAFT: u16 = 40;
}

/// A protocol version as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtocolVersion(pub u16);

impl ProtocolVersion {
    pub const SSL2: Self = Self(0x0002);
    pub const SSL3: Self = Self(0x0300);
    pub const TLS1_0: Self = Self(0x0301);
    pub const TLS1_1: Self = Self(0x0302);
    pub const TLS1_2: Self = Self(0x0303);
    pub const TLS1_3: Self = Self(0x0304);

    /// Drafts of TLS 1.3 (0x7fNN), the browsers' middlebox experiments
    /// (0x7eNN: Chrome's "TLS 1.3 Experiment" 1-3, BoringSSL's
    /// `TLS1_3_EXPERIMENT*_VERSION`) and Facebook's fizz variants of the
    /// drafts (0xfbNN) negotiate the same handshake shape as 1.3: a
    /// session ID echoed by such a server is compatibility mode, never
    /// TLS 1.2 resumption.
    pub fn is_tls13(self) -> bool {
        self == Self::TLS1_3 || matches!(self.0 >> 8, 0x7e | 0x7f | 0xfb)
    }

    /// The name used in records, or None for values no handshake negotiates.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::SSL2 => Some("SSL2.0"),
            Self::SSL3 => Some("SSL3.0"),
            Self::TLS1_0 => Some("TLS1.0"),
            Self::TLS1_1 => Some("TLS1.1"),
            Self::TLS1_2 => Some("TLS1.2"),
            v if v.is_tls13() => Some("TLS1.3"),
            _ => None,
        }
    }
}

/// GREASE values (RFC 8701) are 0x?a?a with both bytes equal.
pub fn is_grease(v: u16) -> bool {
    (v & 0x0f0f) == 0x0a0a && (v >> 8) == (v & 0xff)
}

/// IANA name of an alert description (RFC 8446 §6).
pub fn alert_name(desc: u8) -> &'static str {
    match desc {
        0 => "close_notify",
        10 => "unexpected_message",
        20 => "bad_record_mac",
        21 => "decryption_failed",
        22 => "record_overflow",
        30 => "decompression_failure",
        40 => "handshake_failure",
        41 => "no_certificate",
        42 => "bad_certificate",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired",
        46 => "certificate_unknown",
        47 => "illegal_parameter",
        48 => "unknown_ca",
        49 => "access_denied",
        50 => "decode_error",
        51 => "decrypt_error",
        60 => "export_restriction",
        70 => "protocol_version",
        71 => "insufficient_security",
        80 => "internal_error",
        86 => "inappropriate_fallback",
        90 => "user_canceled",
        100 => "no_renegotiation",
        109 => "missing_extension",
        110 => "unsupported_extension",
        111 => "certificate_unobtainable",
        112 => "unrecognized_name",
        113 => "bad_certificate_status_response",
        114 => "bad_certificate_hash_value",
        115 => "unknown_psk_identity",
        116 => "certificate_required",
        120 => "no_application_protocol",
        _ => "unknown",
    }
}

/// The ServerHello.random that marks a HelloRetryRequest (RFC 8446 §4.1.3).
pub const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(cipher_suite_name(0x1301), Some("TLS_AES_128_GCM_SHA256"));
        assert_eq!(
            cipher_suite_name(0xc02f),
            Some("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
        );
        assert_eq!(cipher_suite_name(0x0a0a), None);
        assert!(is_grease(0x1a1a) && !is_grease(0x1a2a) && !is_grease(0x1301));
        assert_eq!(ProtocolVersion(0x7f1c).name(), Some("TLS1.3"));
        assert_eq!(ProtocolVersion(0xfb1a).name(), Some("TLS1.3"));
        assert_eq!(ProtocolVersion(0x7e02).name(), Some("TLS1.3"));
        assert_eq!(ProtocolVersion(0x0305).name(), None);
    }
}
