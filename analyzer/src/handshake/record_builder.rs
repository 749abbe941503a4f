//! The one record builder: a finished [`Handshake`] plus what its
//! transport layer knows (endpoints, round-trip time, byte counts, notes)
//! becomes a [`ConnectionRecord`].

use super::event::Dir;
use super::machine::Handshake;
use super::timing::{ms, Vantage};
use crate::flow::table::Endpoint;
use crate::record::{endpoint, ConnectionRecord, Family, HandshakeBytes, Transport, Unsettled};
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
    /// (TLS <= 1.2), else a decrypted EncryptedExtensions; taken.
    fn take_alpn_negotiated(&mut self) -> Option<String> {
        self.server_hello
            .as_mut()
            .filter(|sh| !sh.is_hrr)
            .and_then(|sh| sh.alpn.take())
            .or_else(|| self.late.as_deref_mut()?.encrypted_alpn.take())
    }

    /// The Zeek `ssl.log` facts, by Zeek's rules (main.zeek's
    /// `ssl_server_hello`, `ssl_extension` and `ssl_change_cipher_spec`
    /// handlers for `resumed`).
    fn zeek_facts(&self, first_ts: f64) -> super::zeek_view::Hellos {
        let ch = self.client_hello.as_deref();
        let sh = self.server_hello.as_ref();
        let version = if self.sslv2 {
            Some(0x0002)
        } else {
            sh.map(|sh| sh.version().0)
        };
        // Zeek keeps the client's session ID unless empty or 32 zero bytes.
        let client_sid = ch
            .map(|c| c.session_id.as_bytes())
            .filter(|id| !id.is_empty() && id.iter().any(|&b| b != 0));
        let by_sid = match (client_sid, sh, version) {
            (Some(id), Some(sh), Some(v)) => {
                id == sh.session_id.as_bytes() && v / 0xff != 0x7f && v != 0x0304
            }
            _ => false,
        };
        let by_psk = ch.is_some_and(|c| c.extensions().contains(&41))
            && sh.is_some_and(|sh| sh.extensions.contains(&41));
        super::zeek_view::Hellos {
            ts: self.started.unwrap_or(first_ts),
            version,
            cipher: sh.filter(|_| !self.sslv2).map(|sh| sh.cipher_suite),
            key_share: sh.and_then(|sh| sh.key_share_group),
            resumed_by_ids: by_sid || by_psk,
            ticket_empty_session: ch.is_some_and(|c| {
                c.session_ticket_len.is_some_and(|n| n > 0) && client_sid.is_none()
            }),
            alpn: sh.filter(|sh| !sh.is_hrr).and_then(|sh| sh.alpn.clone()),
        }
    }

    /// What a record built with an unanswered session-ID question
    /// ([`resolve_session_id`](Handshake::resolve_session_id)) would say
    /// had the ID been issued: its `offered` and `timing.avoidable` (the
    /// only fields that depend on it). `rtt` is the record's view's.
    pub fn if_session_id_issued(&mut self, question: (u64, u64), rtt: Option<f64>) -> Unsettled {
        let was = std::mem::replace(&mut self.session_id_offered, true);
        let shows_client = self.missing != Some(Dir::Client);
        let offered = shows_client.then(|| self.offered());
        let avoidable = self
            .avoidable_round_trips()
            .zip(rtt)
            .map(|(n, rtt)| ms(f64::from(n) * rtt));
        self.session_id_offered = was;
        Unsettled {
            session_id: question,
            offered,
            avoidable,
        }
    }

    /// The connection's record, its last use of the handshake: the strings
    /// the record shows are moved into it, not copied (the server name, the
    /// ALPN lists, the certificate's names, the failure). Notes are sorted
    /// and deduplicated.
    pub fn take_record(&mut self, view: TransportView, why: Finish) -> ConnectionRecord {
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
        if self.late().early_data_accepted.is_some() {
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
            .or(self.server_hello.as_deref());
        let (ja4, ja4_stable) = first_ch.map(|c| ja4::ja4_and_stable(c, quic)).unzip();
        let ja4s = first_sh.map(|s| ja4::ja4s(s, quic));
        let zeek = self
            .zeek_view
            .then(|| Box::new(self.zeek.facts(self.zeek_facts(view.first_ts))));
        let mut record = ConnectionRecord {
            ts: view.first_ts,
            transport: view.transport,
            client: endpoint(view.client.0, view.client.1),
            server: endpoint(view.server.0, view.server.1),
            sni: None,
            version: self.version().and_then(|v| v.name()),
            cipher: self.cipher(),
            alpn: None,
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
            certs: self.certs.take().map(|c| *c),
            failure: self.failure.take(),
            notes,
            ja4,
            ja4_stable,
            ja4s,
            alpn_negotiated: self.take_alpn_negotiated(),
            family: Family::of(view.client.0),
            role: None,
            proxied_client: view
                .proxied_client
                .map(|(ip, port)| endpoint(ip, port).to_string()),
            capture: None,
            zeek,
            unsettled: None,
        };
        // Last: everything above may read the ClientHello.
        let mut ch = self.client_hello.as_deref_mut();
        if shows_client {
            record.alpn = Some(
                ch.as_mut()
                    .map(|c| std::mem::take(&mut c.alpn))
                    .unwrap_or_default(),
            );
        }
        record.sni = ch.and_then(|c| c.server_name.take()).map(String::from);
        record
    }
}
