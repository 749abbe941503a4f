//! One ssl.log row as tlsrum reads it, and the record it becomes.
//!
//! The mapping (docs/zeek.md "Reading Zeek logs" shows it as a table):
//! - `client`/`server`: `id.orig_*` / `id.resp_*`, swapped when
//!   `ssl_history` starts with `^` (Zeek saw the ClientHello come from the
//!   responder); `family` from the server's address; `transport` is `tcp`
//!   (ssl.log does not say; DTLS rows are skipped by their version).
//! - `version`: `TLSv12` -> `TLS1.2`, `TLSv13-draftNN` and `unknown-N` of a
//!   TLS 1.3 draft or experiment -> `TLS1.3`, `SSLv3` -> `SSL3.0`.
//! - `cipher`: Zeek's IANA-style name as the analyzer spells the suite
//!   (`TLS_DH_ANON_…` -> `TLS_DH_anon_…`; `unknown-N` -> the suite N's name,
//!   or `0xNNNN`); names of suites outside IANA's table stay as Zeek wrote
//!   them.
//! - `handshake`: `established` T -> `resumed` T ? `resumed` : `full`;
//!   `established` F -> `failed` when a `last_alert` was seen (`failure`
//!   `alert:<name>`), else `incomplete` (Zeek does not say whether a reset,
//!   a close or the end of the capture cut it short: the weaker word); no
//!   `established` column (Bro before 2.4) -> null.
//! - `resumption`: `psk` for a resumed TLS 1.3 handshake (its only way);
//!   null for TLS <= 1.2 (Zeek does not say session ID or ticket).
//! - `hrr`: a `j` in `ssl_history`; `alpn_negotiated`: `next_protocol`.
//! - Everything the wire showed tlsrum but Zeek does not log (timing,
//!   offers, early data, bytes, JA4, certificates) is null; `notes` holds
//!   `zeek_ssl_log` so that such records are never mistaken for measured ones.

use std::borrow::Cow;
use std::net::IpAddr;

use analyzer::local_nets::LocalNets;
use analyzer::record::{
    endpoint, ConnectionRecord, Family, HandshakeBytes, HandshakeKind, Resumption, Timing,
    Transport,
};
use analyzer::tls::enums::{alert_name, cipher_label, cipher_suite_name, ProtocolVersion};

/// The note every record read from a Zeek log carries.
pub const NOTE: &str = "zeek_ssl_log";

/// The columns of one row that tlsrum reads; None: unset or absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub ts: f64,
    pub orig_h: Option<IpAddr>,
    pub orig_p: u16,
    pub resp_h: Option<IpAddr>,
    pub resp_p: u16,
    pub version: Option<String>,
    pub cipher: Option<String>,
    pub server_name: Option<String>,
    pub resumed: Option<bool>,
    pub established: Option<bool>,
    pub last_alert: Option<String>,
    pub next_protocol: Option<String>,
    pub ssl_history: Option<String>,
}

/// A version Zeek names that tlsrum reads: Some(record version or None
/// when unknown), or None for DTLS (no record).
pub fn version(v: &str) -> Option<Option<&'static str>> {
    if v.starts_with("DTLS") {
        return None;
    }
    Some(match v {
        "SSLv2" => Some("SSL2.0"),
        "SSLv3" => Some("SSL3.0"),
        "TLSv10" => Some("TLS1.0"),
        "TLSv11" => Some("TLS1.1"),
        "TLSv12" => Some("TLS1.2"),
        "TLSv13" => Some("TLS1.3"),
        v if v.starts_with("TLSv13-draft") => Some("TLS1.3"),
        v => v
            .strip_prefix("unknown-")
            .and_then(|n| n.parse::<u16>().ok())
            .and_then(|n| ProtocolVersion(n).name()),
    })
}

/// Zeek's name of a cipher suite as the analyzer's records spell it.
pub fn cipher(c: &str) -> Cow<'static, str> {
    if let Some(id) = c
        .strip_prefix("unknown-")
        .and_then(|n| n.parse::<u16>().ok())
    {
        return cipher_label(id);
    }
    iana_name(c).map_or_else(|| c.to_string().into(), Cow::Borrowed)
}

/// The IANA name equal to Zeek's but for case (Zeek upper-cases `anon`).
fn iana_name(zeek: &str) -> Option<&'static str> {
    use std::sync::OnceLock;
    static BY_UPPER: OnceLock<std::collections::HashMap<String, &'static str>> = OnceLock::new();
    let map = BY_UPPER.get_or_init(|| {
        (0..=u16::MAX)
            .filter_map(cipher_suite_name)
            .map(|n| (n.to_ascii_uppercase(), n))
            .collect()
    });
    map.get(&zeek.to_ascii_uppercase()).copied()
}

/// `failure` of a handshake Zeek saw end with this alert.
fn failure(alert: &str) -> String {
    let name = match alert
        .strip_prefix("unknown-")
        .and_then(|n| n.parse::<u8>().ok())
    {
        Some(n) => alert_name(n),
        None => alert,
    };
    format!("alert:{name}")
}

impl Row {
    /// The record of this row; `capture` names the log (replay of several
    /// inputs), `local` this host's addresses (the record's `role`).
    /// None for a row without its addresses.
    pub fn record(
        &self,
        capture: Option<&str>,
        local: Option<&LocalNets>,
    ) -> Option<ConnectionRecord> {
        let (orig_h, resp_h) = (self.orig_h?, self.resp_h?);
        let flipped = self
            .ssl_history
            .as_deref()
            .is_some_and(|h| h.starts_with('^'));
        let ((ch, cp), (sh, sp)) = if flipped {
            ((resp_h, self.resp_p), (orig_h, self.orig_p))
        } else {
            ((orig_h, self.orig_p), (resp_h, self.resp_p))
        };
        let version = self.version.as_deref().and_then(|v| version(v).flatten());
        let alert = self.last_alert.as_deref();
        let handshake = match (self.established, self.resumed) {
            (Some(true), Some(true)) => Some(HandshakeKind::Resumed),
            (Some(true), _) => Some(HandshakeKind::Full),
            (Some(false), _) if alert.is_some() => Some(HandshakeKind::Failed),
            (Some(false), _) => Some(HandshakeKind::Incomplete),
            (None, _) => None,
        };
        let resumption = (handshake == Some(HandshakeKind::Resumed) && version == Some("TLS1.3"))
            .then_some(Resumption::Psk);
        Some(ConnectionRecord {
            ts: self.ts,
            transport: Transport::Tcp,
            client: endpoint(ch, cp),
            server: endpoint(sh, sp),
            sni: self.server_name.clone(),
            version,
            cipher: self.cipher.as_deref().map(cipher),
            alpn: None,
            handshake,
            offered: None,
            resumption,
            early_data: None,
            hrr: self.ssl_history.as_deref().is_some_and(|h| h.contains('j')),
            retry: false,
            timing: Timing::default(),
            bytes: HandshakeBytes::default(),
            certs: None,
            failure: (handshake == Some(HandshakeKind::Failed))
                .then(|| alert.map(failure))
                .flatten(),
            notes: vec![NOTE],
            ja4: None,
            ja4_stable: None,
            ja4s: None,
            alpn_negotiated: self.next_protocol.clone(),
            family: Family::of(sh),
            role: local.map(|l| l.role(ch, sh)),
            proxied_client: None,
            capture: capture.map(str::to_string),
            zeek: None,
            unsettled: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_records_name_them() {
        assert_eq!(version("TLSv12"), Some(Some("TLS1.2")));
        assert_eq!(version("TLSv13-draft14"), Some(Some("TLS1.3")));
        // Facebook's fizz (0xfb1a), which Zeek names by number.
        assert_eq!(version("unknown-64282"), Some(Some("TLS1.3")));
        assert_eq!(version("SSLv3"), Some(Some("SSL3.0")));
        assert_eq!(version("unknown-0"), Some(None));
        assert_eq!(version("DTLSv12"), None);
    }

    #[test]
    fn ciphers_as_records_name_them() {
        assert_eq!(
            cipher("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        );
        assert_eq!(
            cipher("TLS_DH_ANON_WITH_AES_128_CBC_SHA"),
            "TLS_DH_anon_WITH_AES_128_CBC_SHA"
        );
        assert_eq!(cipher("unknown-4865"), "TLS_AES_128_GCM_SHA256");
        assert_eq!(cipher("unknown-65278"), "0xfefe");
        assert_eq!(
            cipher("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256_OLD"),
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256_OLD"
        );
    }

    fn row() -> Row {
        Row {
            ts: 1.5,
            orig_h: "10.0.0.1".parse().ok(),
            orig_p: 40000,
            resp_h: "2001:db8::1".parse().ok(),
            resp_p: 443,
            version: Some("TLSv13".into()),
            established: Some(true),
            resumed: Some(true),
            ..Row::default()
        }
    }

    #[test]
    fn kinds_from_established_resumed_and_alert() {
        let r = row().record(None, None).unwrap();
        assert_eq!(r.handshake, Some(HandshakeKind::Resumed));
        assert_eq!(r.resumption, Some(Resumption::Psk));
        assert_eq!(r.server, "[2001:db8::1]:443");
        assert_eq!(r.family, Family::Ipv6);
        let failed = Row {
            established: Some(false),
            last_alert: Some("protocol_version".into()),
            ..row()
        }
        .record(None, None)
        .unwrap();
        assert_eq!(failed.handshake, Some(HandshakeKind::Failed));
        assert_eq!(failed.failure.as_deref(), Some("alert:protocol_version"));
        assert_eq!(failed.resumption, None);
        let cut = Row {
            established: Some(false),
            ..row()
        };
        assert_eq!(
            cut.record(None, None).unwrap().handshake,
            Some(HandshakeKind::Incomplete)
        );
        let old = Row {
            established: None,
            resumed: None,
            ..row()
        };
        assert_eq!(old.record(None, None).unwrap().handshake, None);
    }

    #[test]
    fn flipped_connections_name_the_hello_sender_client() {
        let r = Row {
            ssl_history: Some("^Cjs".into()),
            ..row()
        }
        .record(None, None)
        .unwrap();
        assert_eq!(r.client, "[2001:db8::1]:443");
        assert!(r.hrr);
    }
}
