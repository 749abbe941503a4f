//! The one record builder: a finished [`Handshake`] plus what its
//! transport layer knows (endpoints, round-trip time, byte counts, notes)
//! becomes a [`ConnectionRecord`].

use super::event::Dir;
use super::machine::Handshake;
use super::timing::Vantage;
use crate::flow::table::Endpoint;
use crate::record::{endpoint, ConnectionRecord, Family, HandshakeBytes, Transport};
use crate::tls::ja4;

/// Why a connection's record is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Nothing more to learn (handshake timed, failed, or the connection closed).
    Done,
    /// The capture ended.
    CaptureEnd,
    /// The flow table was full.
    Evicted,
    /// No packet for the idle timeout.
    Expired,
}

/// What the transport layer contributes to a record.
#[derive(Debug)]
pub struct TransportView {
    pub transport: Transport,
    /// First packet of the connection.
    pub first_ts: f64,
    pub client: Endpoint,
    pub server: Endpoint,
    /// TCP's three-way handshake, QUIC's Initial exchange (seconds).
    pub rtt: Option<f64>,
    /// Where the observer sits on the path (TCP's three-way handshake).
    pub vantage: Vantage,
    pub bytes: HandshakeBytes,
    /// What limited the transport's view (gaps, losses, decryption).
    pub notes: Vec<&'static str>,
    /// The original client a PROXY protocol header named.
    pub proxied_client: Option<Endpoint>,
}

impl Handshake {
    /// The server's ALPN choice where the wire shows it: the ServerHello
    /// (TLS <= 1.2), else a decrypted EncryptedExtensions.
    fn alpn_negotiated(&self) -> Option<String> {
        self.server_hello
            .as_ref()
            .filter(|sh| !sh.is_hrr)
            .and_then(|sh| sh.alpn.clone())
            .or_else(|| self.encrypted_alpn.clone())
    }

    /// The connection's record. Notes are sorted and deduplicated.
    pub fn to_record(&self, view: TransportView, why: Finish) -> ConnectionRecord {
        let mut notes = view.notes;
        if !self.is_over() {
            match why {
                Finish::CaptureEnd => notes.push("capture_ended"),
                Finish::Evicted => notes.push("evicted"),
                Finish::Expired => notes.push("idle_timeout"),
                Finish::Done => {}
            }
        }
        if self.records_overflowed {
            notes.push("record_limit");
        }
        match view.transport {
            Transport::Tcp if self.client_hello_lost && self.missing != Some(Dir::Client) => {
                notes.push("client_hello_lost")
            }
            Transport::Quic if self.client_hello.is_none() => notes.push("no_client_hello"),
            _ => {}
        }
        if self.early_data_accepted.is_some() {
            notes.push("decrypted_with_keylog");
        }
        if self.false_start {
            notes.push("false_start");
        }
        match self.missing {
            Some(Dir::Client) => notes.push("one_sided:client"),
            Some(Dir::Server) => notes.push("one_sided:server"),
            None => {}
        }
        let shows_client = self.missing != Some(Dir::Client);
        notes.sort_unstable();
        notes.dedup();
        let ch = self.client_hello.as_deref();
        let quic = view.transport == Transport::Quic;
        // FoxIO's tools fingerprint a connection's first ClientHello and
        // ServerHello: the one a HelloRetryRequest or Retry answered, and
        // that HelloRetryRequest, when there was one.
        let first_ch = self.first_client_hello.as_deref().or(ch);
        let first_sh = self
            .first_server_hello
            .as_deref()
            .or(self.server_hello.as_ref());
        ConnectionRecord {
            ts: view.first_ts,
            transport: view.transport,
            client: endpoint(view.client.0, view.client.1),
            server: endpoint(view.server.0, view.server.1),
            sni: ch.and_then(|c| c.server_name.clone()),
            version: self.version().and_then(|v| v.name()),
            cipher: self.cipher(),
            alpn: shows_client.then(|| ch.map(|c| c.alpn.clone()).unwrap_or_default()),
            handshake: self.kind(),
            offered: shows_client.then(|| self.offered()),
            resumption: self
                .resumption()
                .filter(|_| self.state() == super::machine::State::Complete),
            early_data: shows_client.then(|| self.early_data()),
            hrr: self.hrr,
            retry: self.retry,
            timing: self.timing(view.rtt, view.vantage),
            bytes: view.bytes,
            certs: self.certs.clone(),
            failure: self.failure.clone(),
            notes,
            ja4: first_ch.map(|c| ja4::ja4(c, quic)),
            ja4_stable: first_ch.map(|c| ja4::ja4_stable(c, quic)),
            ja4s: first_sh.map(|s| ja4::ja4s(s, quic)),
            alpn_negotiated: self.alpn_negotiated(),
            family: Family::of(view.client.0),
            role: None,
            proxied_client: view.proxied_client.map(|(ip, port)| endpoint(ip, port)),
            capture: None,
        }
    }
}
