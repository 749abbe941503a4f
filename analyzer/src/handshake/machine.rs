//! The handshake state machine, one for TLS over TCP and QUIC. Its
//! transitions are the table in [`Handshake::on`]: a match over (state,
//! direction, event), after rusticata tls-parser's `tls_states.rs`. It
//! learns only from [`Event`]s and answers with [`Directive`]s; nothing
//! outside the `handshake` module writes its fields.

use std::sync::Arc;

use super::event::{Close, Dir, Directive, Event, Space};
use super::record_logs::RecordLogs;
use crate::memory::HeapSize;
use crate::record::{Certs, Transport, UtcTime};
use crate::seq::Seq;
use crate::tls::codec::InvalidMessage;
use crate::tls::enums::{content_type as ct, handshake_type as ht, ProtocolVersion};
use crate::tls::handshake::{
    parse_certificate_list, parse_certificate_list13, CertificateList, ClientHello, ServerHello,
};
use crate::tls::record::RecordInfo;

/// Length of an encrypted TLS 1.3 alert record: 2 bytes of alert, 1 inner
/// content type, 16 bytes of AEAD tag (8 for the CCM_8 suites).
const ENCRYPTED_ALERT_LENS: [u16; 2] = [19, 11];

/// A TLS 1.3 application_data record of an encrypted alert's length.
pub(super) fn alert_sized(rec: &RecordInfo) -> bool {
    ENCRYPTED_ALERT_LENS.contains(&rec.len)
}
/// Length of an encrypted EndOfEarlyData record: 4 bytes of message, 1
/// inner content type, the tag (16, or 8 for CCM_8).
const EOED_LENS: [u16; 2] = [21, 13];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for the ClientHello.
    Start,
    /// ClientHello sent, waiting for ServerHello.
    ClientHello,
    /// HelloRetryRequest sent, waiting for the second ClientHello.
    HelloRetry,
    /// TLS <= 1.2 ServerHello seen; the server's flight follows.
    ServerHello12,
    /// ServerHelloDone seen: a full TLS <= 1.2 handshake; client's flight next.
    ServerDone12,
    /// Full TLS <= 1.2: client's ChangeCipherSpec seen; server's CCS+Finished next.
    ClientCcs12,
    /// Abbreviated TLS <= 1.2: server's CCS came right after ServerHello.
    ServerCcsResumed12,
    /// TLS 1.3 ServerHello seen; the client's Finished (TCP) or first
    /// 1-RTT packet (QUIC) completes it.
    ServerHello13,
    /// SSLv2 SERVER-HELLO seen.
    Sslv2ServerHello,
    Complete,
    Failed,
}

/// Whether a session ID was issued earlier in the trace: known now, or to
/// be asked when the record is built ([`TraceMemory::answer_issued`]) by a
/// memory shared with analyzers running ahead or behind (sharded replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issued {
    Now(bool),
    /// The ID's hash and the memory's own stamp of the moment asked.
    Later(u64, u64),
}

/// What the classifier keeps across connections of one trace.
pub trait TraceMemory {
    /// Was this session ID issued by a server earlier in the trace?
    fn was_issued(&self, id: &[u8]) -> bool;
    /// [`was_issued`](Self::was_issued), or the question kept for later.
    fn ask_issued(&self, id: &[u8]) -> Issued {
        Issued::Now(self.was_issued(id))
    }
    /// The answer to an [`Issued::Later`] question, as of when it was
    /// asked; None when it is not known yet.
    fn answer_issued(&self, _hash: u64, _at: u64) -> Option<bool> {
        Some(false)
    }
    /// A server issued this session ID in a TLS <= 1.2 ServerHello.
    fn issued(&mut self, id: &[u8]);
    /// Subject, issuer and validity of a leaf certificate (servers send
    /// the same one to every client, so implementations cache by the DER's
    /// hash, and hand out the cached one: callers copy what they keep).
    fn leaf_names(&mut self, der: &[u8]) -> Arc<Leaf> {
        Arc::new(leaf_names(der))
    }
}

/// A trace memory that remembers nothing (QUIC has no session IDs; tests).
pub struct NoMemory;

impl TraceMemory for NoMemory {
    fn was_issued(&self, _: &[u8]) -> bool {
        false
    }
    fn issued(&mut self, _: &[u8]) {}
}

/// A Certificate message's parser: the TLS <= 1.2 form or the TLS 1.3 one.
type CertificateParser = fn(&[u8]) -> Result<CertificateList<'_>, InvalidMessage>;

/// What the record shows of a leaf certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaf {
    /// RFC 4514 strings.
    pub subject: Option<Arc<str>>,
    pub issuer: Option<Arc<str>>,
    pub not_before: Option<UtcTime>,
    pub not_after: Option<UtcTime>,
    /// Its subjectAltName DNS names, or its subject common names when it
    /// has none: what Zeek's `sni_matches_cert` compares the SNI with.
    pub host_names: Vec<String>,
}

/// Parses a DER certificate's subject, issuer (RFC 4514 strings) and
/// validity (RFC 5280 §4.1.2.5).
pub fn leaf_names(der: &[u8]) -> Leaf {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, c)) => {
            let v = c.validity();
            Leaf {
                subject: Some(c.subject().to_string().into()),
                issuer: Some(c.issuer().to_string().into()),
                not_before: Some(UtcTime(v.not_before.timestamp())),
                not_after: Some(UtcTime(v.not_after.timestamp())),
                host_names: super::zeek_view::host_names(&c),
            }
        }
        Err(_) => Leaf::default(),
    }
}

/// The part of a [`Handshake`] that the server's answer, the client's
/// second flight or a key log bring (boxed, see `Handshake::late`).
#[derive(Debug, Default)]
pub(super) struct Late {
    /// When the handshake completed (the client could send application data
    /// after its own last flight; for full TLS 1.2, the server's CCS).
    pub(super) completed_at: Option<f64>,
    /// TCP: the record that completed it (TLS 1.3 Finished, TLS 1.2
    /// resumed CCS) or, for full TLS 1.2, the server's CCS.
    pub(super) completed_by: Option<RecordInfo>,
    /// QUIC: the server's first 1-RTT packet after the handshake completed.
    pub(super) server_data: Option<f64>,
    /// TLS <= 1.2 full: end of the server's Finished record (the record after its CCS).
    pub(super) server_finished_end: Option<u32>,
    /// When the client first acknowledged the server's Finished.
    pub(super) client_acked_finished: Option<f64>,
    /// TLS 1.3 with a key log: the server's records after its Finished
    /// that opened as something other than data (NewSessionTicket or
    /// KeyUpdate, an alert such as close_notify), by sequence number;
    /// `ttfb` skips them. Bounded by the opener
    /// (`MAX_POST_HANDSHAKE_RECORDS` in `tls/server_flight.rs`).
    pub(super) server_post_handshake: Vec<u32>,
    /// Decrypted EncryptedExtensions: did the server accept early data?
    pub(super) early_data_accepted: Option<bool>,
    /// Decrypted EncryptedExtensions: the protocol the server chose (TLS 1.3).
    pub(super) encrypted_alpn: Option<String>,
    /// TLS 1.3 with early data offered: the client's encrypted records after
    /// it acknowledged the ServerHello that were not its Finished (0-RTT
    /// data it wrote before reading the server's flight, or an
    /// EndOfEarlyData): the first one, and the latest if EndOfEarlyData-sized.
    pub(super) second_flight_first: Option<RecordInfo>,
    pub(super) pending_eoed: Option<RecordInfo>,
    /// No ServerHello seen: the client's ChangeCipherSpec right after its
    /// hello (TLS 1.2 resumption, or TLS 1.3 compatibility mode: the next
    /// record tells).
    pub(super) client_ccs: Option<RecordInfo>,
}

/// What [`Handshake::late`] reads before anything was written.
static NO_LATE: Late = Late {
    completed_at: None,
    completed_by: None,
    server_data: None,
    server_finished_end: None,
    client_acked_finished: None,
    server_post_handshake: Vec::new(),
    early_data_accepted: None,
    encrypted_alpn: None,
    second_flight_first: None,
    pending_eoed: None,
    client_ccs: None,
};

/// A connection's handshake, as far as the wire shows it.
#[derive(Debug)]
pub struct Handshake {
    pub(super) transport: Transport,
    pub(super) state: State,
    /// The first ClientHello, kept only when a HelloRetryRequest or a
    /// Retry brought a second.
    pub(super) first_client_hello: Option<Box<ClientHello>>,
    /// The latest ClientHello.
    pub(super) client_hello: Option<Box<ClientHello>>,
    pub(super) server_hello: Option<Box<ServerHello>>,
    /// The HelloRetryRequest, kept only when a ServerHello replaced it
    /// (JA4S, like FoxIO's tools, fingerprints the server's first answer).
    pub(super) first_server_hello: Option<Box<ServerHello>>,
    /// Heap bytes of the four hellos above, summed when one is stored
    /// ([`Handshake::hellos_stored`]): they do not change once parsed, and
    /// summing them for every packet's footprint read four boxes a packet.
    /// (u32: fits where the struct had padding; hellos are capped far below.)
    hellos_heap: u32,
    /// When the handshake began: the ClientHello's first record (TCP), the
    /// client's first Initial (QUIC).
    pub(super) started: Option<f64>,
    /// Sequence number one past the final ServerHello's record.
    pub(super) server_hello_end: Option<u32>,
    pub(super) hrr: bool,
    pub(super) retry: bool,
    pub(super) version_negotiation: bool,
    pub(super) abbreviated: bool,
    pub(super) session_id_offered: bool,
    /// The session-ID question the trace memory answers later.
    session_id_later: Option<(u64, u64)>,
    /// The server answered in SSL 2.0 (not merely a v2-compatible ClientHello).
    pub(super) sslv2: bool,
    pub(super) sslv2_session_hit: bool,
    /// A ServerHello came but the ClientHello's body was lost (capture gap)
    /// or did not parse.
    pub(super) client_hello_lost: bool,
    pub(super) certs: Option<Box<Certs>>,
    pub(super) failure: Option<String>,
    /// What only a handshake past the hellos uses, made at its first write:
    /// a flow left waiting after its ClientHello does not carry it.
    pub(super) late: Option<Box<Late>>,
    /// The client sent application data before the server's Finished (TLS 1.2 False Start).
    pub(super) false_start: bool,
    /// TCP: the observer's round trip to the client (SYN-ACK -> its ACK),
    /// set by the flow ([`set_to_client`](Self::set_to_client)).
    pub(super) to_client: Option<f64>,
    server_ccs_seen: bool,
    pub(super) records: RecordLogs,
    pub(super) records_overflowed: bool,
    /// An EndOfEarlyData-sized record came right before the Finished-sized
    /// one that completed the handshake (heuristic `eoed_before_finished`).
    pub(super) eoed_before_finished: bool,
    /// Where the client's last handshake flight starts (its EndOfEarlyData
    /// or Finished), for byte counts.
    pub(super) client_flight_start: Option<u32>,
    pub(super) parse_errors: u32,
    /// The side whose direction the capture does not show (one-sided:
    /// a tap on one direction, asymmetric routing), once the transport
    /// knows; see [`one_sided`](Self::one_sided).
    pub(super) missing: Option<Dir>,
    /// No ServerHello seen: the version the client's second flight shows
    /// (its key exchange's or ChangeCipherSpec's record version for TLS
    /// <= 1.2; an encrypted record answering the server's flight for 1.3).
    pub(super) client_shown_version: Option<ProtocolVersion>,
    ccs_then_handshake: bool,
    /// Full TLS <= 1.2: the client sent an (encrypted) alert after its
    /// Finished, before the server's ChangeCipherSpec.
    client_alert_before_server_finished: bool,
    /// The acknowledgement numbers on the latest ClientHello's record and
    /// on the final ServerHello's: how much of the peer's stream each side
    /// had received then.
    client_hello_ack: Option<u32>,
    pub(super) server_hello_ack: Option<u32>,
    /// The furthest the server acknowledged the client's stream.
    server_acked: Option<u32>,
    /// What Zeek would see (the Zeek output formats).
    pub(super) zeek: super::zeek_view::ZeekView,
    /// `zeek` is followed ([`crate::Config::zeek_view`]).
    pub(super) zeek_view: bool,
}

impl HeapSize for Handshake {
    fn heap_size(&self) -> usize {
        // Boxed: only a server's answer brings them.
        let certs = self.certs.as_ref().map_or(0, |c| {
            std::mem::size_of::<Certs>()
                + crate::memory::ALLOC_OVERHEAD
                + c.leaf_subject.heap_size()
                + c.leaf_issuer.heap_size()
        });
        debug_assert_eq!(
            self.hellos_heap as usize,
            self.hellos_heap_now(),
            "hellos_stored not called"
        );
        self.hellos_heap as usize
            + certs
            + self.failure.heap_size()
            + self.late.as_ref().map_or(0, |l| {
                std::mem::size_of::<Late>()
                    + crate::memory::ALLOC_OVERHEAD
                    + l.encrypted_alpn.heap_size()
                    + l.server_post_handshake.heap_size()
            })
            + self.records.heap_size()
            + self.zeek.heap_size()
    }
}

impl Handshake {
    fn hellos_heap_now(&self) -> usize {
        self.first_client_hello.heap_size()
            + self.client_hello.heap_size()
            + self.server_hello.heap_size()
            + self.first_server_hello.heap_size()
    }

    /// A hello was stored: its heap bytes counted once, for every footprint
    /// after.
    fn hellos_stored(&mut self) {
        self.hellos_heap = u32::try_from(self.hellos_heap_now()).unwrap_or(u32::MAX);
    }

    /// A plaintext record of either side was complete at `now` (Zeek's
    /// `ts` is the first such time).
    pub fn zeek_plaintext_seen(&mut self, now: f64) {
        self.zeek.first_plaintext.set_once(now);
    }

    /// The late part, as read: empty until something is written.
    pub(super) fn late(&self) -> &Late {
        self.late.as_deref().unwrap_or(&NO_LATE)
    }

    /// The late part, to write: made now if it was not.
    pub(super) fn late_mut(&mut self) -> &mut Late {
        self.late.get_or_insert_with(Default::default)
    }

    pub fn new(transport: Transport) -> Self {
        Handshake {
            transport,
            state: State::Start,
            first_client_hello: None,
            client_hello: None,
            server_hello: None,
            first_server_hello: None,
            hellos_heap: 0,
            started: None,
            server_hello_end: None,
            hrr: false,
            retry: false,
            version_negotiation: false,
            abbreviated: false,
            session_id_offered: false,
            session_id_later: None,
            sslv2: false,
            sslv2_session_hit: false,
            client_hello_lost: false,
            certs: None,
            failure: None,
            late: None,
            false_start: false,
            to_client: None,
            server_ccs_seen: false,
            records: RecordLogs::default(),
            records_overflowed: false,
            eoed_before_finished: false,
            client_flight_start: None,
            parse_errors: 0,
            missing: None,
            client_shown_version: None,
            ccs_then_handshake: false,
            client_alert_before_server_finished: false,
            client_hello_ack: None,
            server_hello_ack: None,
            server_acked: None,
            zeek: Default::default(),
            zeek_view: true,
        }
    }

    /// Whether to follow the handshake as Zeek would
    /// ([`crate::Config::zeek_view`]); on unless told.
    pub fn zeek_view(mut self, on: bool) -> Self {
        self.zeek_view = on;
        self
    }

    /// One event. The two that every record and every segment bring (a
    /// record header, an acknowledgement) are taken here, in any state:
    /// entering the table below (a kilobyte of stack, every callee-saved
    /// register) cost more than what they do.
    #[inline]
    pub fn on(&mut self, dir: Dir, ev: Event<'_>, mem: &mut dyn TraceMemory) -> Option<Directive> {
        if self.zeek_view {
            self.zeek_sees(dir, &ev, mem);
        }
        match ev {
            Event::Record(rec) => self.on_record(dir, rec),
            Event::Ack { ts, ack } => self.on_ack(dir, ts, ack),
            ev => return self.transition(dir, ev, mem),
        }
        None
    }

    fn on_ack(&mut self, dir: Dir, ts: f64, ack: u32) {
        match dir {
            Dir::Client => self.on_client_ack(ts, ack),
            Dir::Server => {
                if self.server_acked.is_none_or(|a| Seq(ack) > Seq(a)) {
                    self.server_acked = Some(ack);
                }
            }
        }
    }

    /// Every other event. The transitions, as one table.
    fn transition(
        &mut self,
        dir: Dir,
        ev: Event<'_>,
        mem: &mut dyn TraceMemory,
    ) -> Option<Directive> {
        use Dir::{Client, Server};
        use State as S;
        match (self.state, dir, ev) {
            (_, _, Event::Begin { ts }) => {
                self.started.get_or_insert(ts);
            }
            (_, _, Event::Record(_) | Event::Ack { .. }) => {} // taken by `on`
            (_, _, Event::Opened { record, inner }) => {
                if dir == Server
                    && inner != ct::APPLICATION_DATA
                    && !self.late().server_post_handshake.contains(&record.seq)
                {
                    self.late_mut().server_post_handshake.push(record.seq);
                }
            }

            // The hellos. Over TCP a second ClientHello before any
            // ServerHello answers a HelloRetryRequest the capture does not
            // show (one-sided, or lost).
            (
                S::Start | S::HelloRetry | S::ClientHello,
                Client,
                Event::Message {
                    msg_type: ht::CLIENT_HELLO,
                    body,
                    ts,
                    record,
                },
            ) => {
                if let Some(ch) = body.and_then(|b| self.parsed(ClientHello::parse(b))) {
                    if self.state == S::ClientHello && self.transport == Transport::Tcp {
                        self.hrr = true;
                    }
                    self.client_hello_ack = record.and_then(|r| r.ack);
                    if let Some(late) = self.late.as_mut() {
                        late.client_ccs = None;
                    }
                    self.ccs_then_handshake = false;
                    self.accept_client_hello(ch, ts, mem);
                }
            }
            // No ServerHello seen, and the client sends its key exchange:
            // a full TLS <= 1.2 handshake in the version its record carries.
            (
                S::ClientHello,
                Client,
                Event::Message {
                    msg_type: ht::CLIENT_KEY_EXCHANGE,
                    record: Some(rec),
                    ..
                },
            ) if self.server_hello.is_none() && !self.sslv2 => {
                self.client_shown_version = Some(ProtocolVersion(0x0300 | u16::from(rec.minor)));
                self.state = S::ServerDone12;
                return Some(Directive::CcsEncrypts);
            }
            // A ServerHello answering a ClientHello whose body the capture
            // lost still tells the version, the suite and what was resumed.
            (
                S::Start | S::HelloRetry,
                Server,
                ev @ Event::Message {
                    msg_type: ht::SERVER_HELLO,
                    ..
                },
            ) if self.state == S::Start || self.missing_client_hello_after_hrr() => {
                // Not even the ClientHello's record: the capture shows the
                // server alone (noted one_sided instead), or lost it.
                self.client_hello_lost = true;
                self.state = S::ClientHello;
                return self.on(dir, ev, mem);
            }
            (
                S::ClientHello,
                Server,
                Event::Message {
                    msg_type: ht::SERVER_HELLO,
                    body,
                    record,
                    ..
                },
            ) => {
                return self.accept_server_hello(body, record, mem);
            }
            (
                S::ServerHello12,
                Server,
                Event::Message {
                    msg_type: ht::CERTIFICATE,
                    body,
                    ..
                },
            ) => self.accept_certificate(body, parse_certificate_list, mem),
            (
                S::ServerHello12,
                Server,
                Event::Message {
                    msg_type: ht::SERVER_HELLO_DONE,
                    ..
                },
            ) => self.state = S::ServerDone12,
            // Decrypted with a key log (TLS 1.3 over TCP, QUIC Handshake packets).
            (
                S::ServerHello13 | S::Complete,
                Server,
                Event::Message {
                    msg_type: ht::ENCRYPTED_EXTENSIONS,
                    body,
                    ..
                },
            ) => {
                if self.late().early_data_accepted.is_none() {
                    let late = self.late_mut();
                    late.early_data_accepted =
                        body.and_then(crate::tls::keylog::early_data_in_extensions);
                    late.encrypted_alpn = body.and_then(crate::tls::keylog::alpn_in_extensions);
                }
            }
            // Decrypted with a key log: the TLS 1.3 Certificate (the first;
            // a post-handshake one would answer a CertificateRequest).
            (
                S::ServerHello13 | S::Complete,
                Server,
                Event::Message {
                    msg_type: ht::CERTIFICATE,
                    body,
                    ..
                },
            ) if self.certs.is_none() => {
                self.accept_certificate(body, parse_certificate_list13, mem)
            }
            (_, _, Event::Message { .. }) => {}

            // SSL 2.0: the client's next record after SERVER-HELLO
            // (CLIENT-MASTER-KEY or, resumed, CLIENT-FINISHED) completes it.
            (
                S::Start,
                Client,
                Event::Sslv2 {
                    msg_type: 1,
                    body,
                    record,
                },
            ) => {
                if let Some(ch) = self.parsed(ClientHello::parse_sslv2(body)) {
                    self.started = Some(record.ts);
                    self.client_hello = Some(Box::new(ch));
                    self.hellos_stored();
                    self.state = S::ClientHello;
                }
            }
            (
                S::ClientHello,
                Server,
                Event::Sslv2 {
                    msg_type: 4, body, ..
                },
            ) => {
                self.sslv2 = true;
                self.sslv2_session_hit = body.first().is_some_and(|&hit| hit != 0);
                self.state = S::Sslv2ServerHello;
            }
            (S::Sslv2ServerHello, Client, Event::Sslv2 { record, .. }) => {
                self.complete(record.ts, Some(record))
            }
            (_, _, Event::Sslv2 { .. }) => {}

            // A server's fatal alert with no ClientHello seen (the capture
            // shows the server only) is still the handshake failing.
            (S::Complete | S::Failed, _, Event::Alert { .. })
            | (S::Start, Client, Event::Alert { .. }) => {}
            (_, _, Event::Alert { level, description }) => {
                if level == 2 {
                    self.fail(format!(
                        "alert:{}",
                        crate::tls::enums::alert_name(description)
                    ));
                }
            }

            // QUIC: the client's first 1-RTT packet proves it has the
            // server's Finished; the server's first one after that is its
            // first application data.
            (
                S::ServerHello13,
                Client,
                Event::Packet {
                    space: Space::OneRtt,
                    ts,
                },
            ) => self.complete(ts, None),
            // Without a ServerHello (the capture lacks the server, or its
            // Initial could not be opened) the client's 1-RTT packet still
            // shows it finished its handshake.
            (
                S::ClientHello,
                Client,
                Event::Packet {
                    space: Space::OneRtt,
                    ts,
                },
            ) if self.server_hello.is_none() => {
                self.client_shown_version = Some(ProtocolVersion::TLS1_3);
                self.complete(ts, None);
            }
            (
                S::Complete,
                Server,
                Event::Packet {
                    space: Space::OneRtt,
                    ts,
                },
            ) => {
                self.late_mut().server_data.get_or_insert(ts);
            }
            (_, _, Event::Packet { .. }) => {}
            (_, _, Event::Retry) => {
                self.retry = true;
                // The ClientHello comes again, and need not be the same one.
                if self.state == S::ClientHello {
                    self.state = S::Start;
                }
            }
            (_, _, Event::VersionNegotiation) => self.version_negotiation = true,

            (_, _, Event::Close(how)) => self.on_close(how),
        }
        None
    }

    /// Every record is logged (bounded) for timing and byte counts.
    fn on_record(&mut self, dir: Dir, rec: RecordInfo) {
        if !self.records.push(dir, rec) {
            self.records_overflowed = true;
        }
        if rec.content_type == ct::HANDSHAKE && dir == Dir::Client && self.started.is_none() {
            self.started = Some(rec.ts);
        }
        if dir == Dir::Server && self.server_ccs_seen && self.late().server_finished_end.is_none() {
            if rec.content_type == ct::CHANGE_CIPHER_SPEC {
                return;
            }
            self.late_mut().server_finished_end = Some(rec.end);
        }
        match (self.state, dir, rec.content_type) {
            (_, _, ct::CHANGE_CIPHER_SPEC) => self.on_ccs(dir, rec),
            // TLS 1.3: the client's first encrypted record sent after it saw
            // the ServerHello is its Finished — or an encrypted alert, told
            // apart by its length. With early data offered it may instead be
            // 0-RTT data written before the client read the server's flight
            // (the ACK only says the kernel had the ServerHello): then the
            // Finished is found by its size.
            (State::ServerHello13, Dir::Client, ct::APPLICATION_DATA)
                if self.acks_server_hello(&rec) =>
            {
                if alert_sized(&rec) {
                    self.fail("encrypted_alert".into());
                } else if self.client_hello.as_ref().is_some_and(|ch| ch.early_data) {
                    self.on_second_flight_record(rec);
                } else {
                    self.client_flight_start = Some(rec.seq);
                    self.complete(rec.ts, Some(rec));
                }
            }
            (State::ServerDone12 | State::ClientCcs12, Dir::Client, ct::APPLICATION_DATA) => {
                self.false_start = true
            }
            // An alert after the client's own CCS is encrypted: its level
            // is not shown. If the server's CCS still comes, the handshake
            // completed (the contract's moment); if the connection ends
            // first, the client abandoned it: `encrypted_alert`.
            (State::ClientCcs12, Dir::Client, ct::ALERT) => {
                self.client_alert_before_server_finished = true
            }
            // Without the server's direction, the client's Finished after
            // its key exchange and ChangeCipherSpec completes it.
            (State::ClientCcs12, Dir::Client, ct::HANDSHAKE) if self.server_hello.is_none() => {
                self.complete(rec.ts, Some(rec))
            }
            (State::ClientHello, Dir::Client, _) if self.server_hello.is_none() => {
                self.client_flight_without_server_hello(rec)
            }
            // Without the server's direction: data before the client had
            // anything back after its Finished is False Start.
            (State::Complete, Dir::Client, ct::APPLICATION_DATA)
                if self.server_hello.is_none()
                    && self.client_shown_version.is_some_and(|v| !v.is_tls13())
                    && !self.abbreviated
                    && self.late().client_acked_finished.is_none()
                    && self
                        .records
                        .of(Dir::Client)
                        .iter()
                        .filter(|r| r.content_type == ct::APPLICATION_DATA)
                        .take(2)
                        .count()
                        <= 1 =>
            {
                self.false_start |= self.late().completed_by.is_some_and(|f| f.ack == rec.ack);
            }
            _ => {}
        }
    }

    /// The client's records after its hello when no ServerHello was seen:
    /// its ChangeCipherSpec followed by an encrypted handshake record is a
    /// TLS 1.2 abbreviated handshake (completed at that CCS, as with both
    /// sides); an application_data record sent after the client received
    /// more of the server's stream than when it sent its hello is its TLS
    /// 1.3 Finished (or, by its length, an encrypted alert). Records sent
    /// before anything came back are 0-RTT data.
    fn client_flight_without_server_hello(&mut self, rec: RecordInfo) {
        if self.abbreviated_without_server_hello() {
            return;
        }
        match rec.content_type {
            // Encrypted (a TLS 1.2 Finished) unless a second ClientHello
            // comes out of it, which clears `client_ccs`: decided at the
            // next record or at the end.
            ct::HANDSHAKE if self.late().client_ccs.is_some() => self.ccs_then_handshake = true,
            ct::APPLICATION_DATA => {
                let answered = match (rec.ack, self.client_hello_ack) {
                    (Some(ack), Some(hello)) => Seq(ack) > Seq(hello),
                    _ => !self.client_hello.as_ref().is_some_and(|ch| ch.early_data),
                };
                if !answered {
                    return;
                }
                self.client_shown_version = Some(ProtocolVersion::TLS1_3);
                let early = self.client_hello.as_ref().is_some_and(|ch| ch.early_data);
                if alert_sized(&rec) {
                    self.fail("encrypted_alert".into());
                } else if early && EOED_LENS.contains(&rec.len) {
                    // EndOfEarlyData (no Finished is this short): the
                    // Finished follows it.
                    self.late_mut().pending_eoed = Some(rec);
                } else {
                    let eoed = self.late.as_mut().and_then(|l| l.pending_eoed.take());
                    let eoed = eoed.filter(|e| e.end == rec.seq);
                    self.eoed_before_finished = eoed.is_some();
                    self.client_flight_start = Some(eoed.map_or(rec.seq, |e| e.seq));
                    self.complete(rec.ts, Some(rec));
                }
            }
            _ => {}
        }
    }

    /// A client record after the ServerHello when early data was offered:
    /// Finished-sized completes the handshake (after an EndOfEarlyData-sized
    /// record right before it, early data was accepted); anything else waits
    /// (see [`settle`](Self::settle)).
    ///
    /// Heuristic `eoed_before_finished`: a client sends EndOfEarlyData only
    /// when the server's EncryptedExtensions accepted early data (RFC 8446
    /// §4.5); after a rejection its Finished follows its 0-RTT data
    /// directly. The lookalike -- exactly 4 bytes of 0-RTT data written after
    /// the server's flight arrived but before the client read it, then the
    /// Finished -- is not something a TLS stack produces; padded records
    /// leave the answer "attempted".
    fn on_second_flight_record(&mut self, rec: RecordInfo) {
        let Some((eoed_len, fin_len)) = self.eoed_and_finished_lens() else {
            self.client_flight_start = Some(rec.seq);
            self.complete(rec.ts, Some(rec));
            return;
        };
        let eoed = self.late.as_mut().and_then(|l| l.pending_eoed.take());
        if rec.len == fin_len {
            let eoed = eoed.filter(|e| e.end == rec.seq);
            self.eoed_before_finished = eoed.is_some();
            self.client_flight_start = Some(eoed.map_or(rec.seq, |e| e.seq));
            self.complete(rec.ts, Some(rec));
            return;
        }
        if rec.len == eoed_len {
            self.late_mut().pending_eoed = Some(rec);
        }
        // Only a longer record can be a padded Finished.
        if rec.len > fin_len {
            self.late_mut().second_flight_first.get_or_insert(rec);
        }
    }

    /// The capture shows one side only: `missing` is the other. Without
    /// the client, the server's own records show completion: its
    /// ChangeCipherSpec after the client's flight (full TLS 1.2), its
    /// Finished (abbreviated), or for TLS 1.3 how much the server
    /// acknowledged after its flight: at least a Finished's worth is the
    /// client's Finished, exactly an encrypted alert's (with or without a
    /// ChangeCipherSpec before it) is that alert.
    pub fn one_sided(&mut self, missing: Dir) {
        self.missing = Some(missing);
        self.settle();
        if missing != Dir::Client || self.is_over() {
            return;
        }
        let server = self.records.of(Dir::Server);
        let ccs = server
            .iter()
            .position(|r| r.content_type == ct::CHANGE_CIPHER_SPEC);
        match self.state {
            State::ServerDone12 => {
                if let Some(ccs) = ccs.map(|i| server[i]) {
                    self.complete(ccs.ts, Some(ccs));
                }
            }
            State::ServerCcsResumed12 => {
                if let Some(fin) = ccs.and_then(|i| server.get(i + 1)).copied() {
                    self.complete(fin.ts, Some(fin));
                }
            }
            State::ServerHello13 => {
                let (Some(hello), Some(acked)) = (self.server_hello_ack, self.server_acked) else {
                    return;
                };
                let sent = Seq(acked).diff(Seq(hello));
                // Smallest Finished record: 5 + 4 + 32 (SHA-256) + 1 + 8 (CCM_8 tag).
                const MIN_FINISHED_RECORD: i64 = 50;
                if ENCRYPTED_ALERT_LENS
                    .iter()
                    .any(|&l| sent == 5 + i64::from(l) || sent == 6 + 5 + i64::from(l))
                {
                    self.fail("encrypted_alert".into());
                } else if sent >= MIN_FINISHED_RECORD {
                    // When is the client's: not shown.
                    self.state = State::Complete;
                }
            }
            _ => {}
        }
    }

    /// After a HelloRetryRequest, a ServerHello without a second ClientHello
    /// (the capture shows the server only): it answers the one not shown.
    fn missing_client_hello_after_hrr(&self) -> bool {
        self.hrr && self.client_hello.is_none()
    }

    /// The client's ChangeCipherSpec was followed by an encrypted handshake
    /// record (no second ClientHello came out of it): TLS 1.2 resumed.
    fn abbreviated_without_server_hello(&mut self) -> bool {
        if !std::mem::take(&mut self.ccs_then_handshake) || self.state != State::ClientHello {
            return false;
        }
        let Some(ccs) = self.late.as_mut().and_then(|l| l.client_ccs.take()) else {
            return false;
        };
        self.client_shown_version = Some(ProtocolVersion(0x0300 | u16::from(ccs.minor)));
        self.abbreviated = true;
        self.complete(ccs.ts, Some(ccs));
        true
    }

    /// The connection ends (or the capture does) while a TLS 1.3 client's
    /// Finished was not recognised by its size: its first record after the
    /// ServerHello long enough to be a padded Finished completed the
    /// handshake, as without early data.
    pub fn settle(&mut self) {
        self.abbreviated_without_server_hello();
        if self.state == State::ServerHello13 {
            if let Some(first) = self
                .late
                .as_mut()
                .and_then(|l| l.second_flight_first.take())
            {
                self.client_flight_start = Some(first.seq);
                self.complete(first.ts, Some(first));
            }
        }
    }

    fn acks_server_hello(&self, rec: &RecordInfo) -> bool {
        match (rec.ack, self.server_hello_end) {
            (Some(ack), Some(end)) => Seq(ack) >= Seq(end),
            _ => false,
        }
    }

    /// For when the client received the server's Finished (TLS <= 1.2 full
    /// handshakes whose client sends no data).
    fn on_client_ack(&mut self, ts: f64, ack: u32) {
        if self.late().client_acked_finished.is_some() {
            return;
        }
        let acked = match self.late().server_finished_end {
            Some(end) => Seq(ack) >= Seq(end),
            // Without the server's direction: full TLS 1.2 completed by the
            // client's Finished, and the client acknowledges more than it
            // had then (the server's ChangeCipherSpec and Finished).
            None => {
                self.server_hello.is_none()
                    && self.state == State::Complete
                    && !self.abbreviated
                    && !self.is_tls13()
                    && self
                        .late()
                        .completed_by
                        .and_then(|f| f.ack)
                        .is_some_and(|a| Seq(ack) > Seq(a))
            }
        };
        if acked {
            self.late_mut().client_acked_finished = Some(ts);
        }
    }

    fn on_ccs(&mut self, dir: Dir, rec: RecordInfo) {
        if dir == Dir::Server && !self.is_tls13() {
            self.server_ccs_seen = true;
        }
        match (self.state, dir) {
            (State::ServerHello12, Dir::Server) => {
                self.abbreviated = true;
                self.state = State::ServerCcsResumed12;
            }
            // The client's CCS before the server's is a full handshake, even
            // when the ServerHelloDone was lost to a capture gap.
            (State::ServerDone12 | State::ServerHello12, Dir::Client) => {
                self.state = State::ClientCcs12
            }
            (State::ClientCcs12, Dir::Server) | (State::ServerCcsResumed12, Dir::Client) => {
                if dir == Dir::Server && self.false_start {
                    self.false_start = self.client_data_before(rec.ts);
                }
                self.complete(rec.ts, Some(rec))
            }
            (State::ClientHello, Dir::Client) if self.server_hello.is_none() => {
                self.late_mut().client_ccs = Some(rec)
            }
            _ => {}
        }
    }

    /// Did the client send application data before `ts`, as captured? The
    /// server's bytes that waited behind a hole the capture never filled
    /// (skipped when the flow ended, `tcp.rs`) reach the machine after
    /// client records captured later: those were no False Start.
    fn client_data_before(&self, ts: f64) -> bool {
        self.records
            .of(Dir::Client)
            .iter()
            .any(|r| r.content_type == ct::APPLICATION_DATA && r.ts <= ts)
    }

    /// Asks the trace memory a session-ID question it left for later
    /// (before the record is built).
    ///
    /// Returns the question when the memory cannot answer it yet: the
    /// record is then built as if the ID was not issued, and
    /// [`if_session_id_issued`](Self::if_session_id_issued) gives what
    /// changes if it was.
    pub fn resolve_session_id(&mut self, mem: &dyn TraceMemory) -> Option<(u64, u64)> {
        let (hash, at) = self.session_id_later.take()?;
        match mem.answer_issued(hash, at) {
            Some(issued) => {
                self.session_id_offered |= issued;
                None
            }
            None => Some((hash, at)),
        }
    }

    fn accept_client_hello(&mut self, ch: ClientHello, ts: f64, mem: &mut dyn TraceMemory) {
        // A TLS 1.3 client's legacy session ID is random (compatibility
        // mode) unless a server handed it out earlier in the trace.
        if !ch.session_id.is_empty() {
            let issued = if ch.offers_tls13() {
                mem.ask_issued(ch.session_id.as_bytes())
            } else {
                Issued::Now(true)
            };
            match issued {
                Issued::Now(offered) => self.session_id_offered |= offered,
                Issued::Later(hash, at) => self.session_id_later = Some((hash, at)),
            }
        }
        self.started.get_or_insert(ts);
        // Keep the first hello only when a second one (after HRR) replaces it.
        if let Some(first) = self.client_hello.replace(Box::new(ch)) {
            self.first_client_hello.get_or_insert(first);
        }
        self.hellos_stored();
        self.state = State::ClientHello;
    }

    fn accept_server_hello(
        &mut self,
        body: Option<&[u8]>,
        record: Option<RecordInfo>,
        mem: &mut dyn TraceMemory,
    ) -> Option<Directive> {
        let sh = body.and_then(|b| self.parsed(ServerHello::parse(b)))?;
        self.server_hello_end = record.map(|r| r.end);
        self.server_hello_ack = record.and_then(|r| r.ack);
        let mut directive = None;
        if sh.is_hrr {
            self.hrr = true;
            self.state = State::HelloRetry;
        } else if sh.version().is_tls13() {
            self.state = State::ServerHello13;
        } else {
            if !sh.session_id.is_empty() {
                mem.issued(sh.session_id.as_bytes());
            }
            self.state = State::ServerHello12;
            directive = Some(Directive::CcsEncrypts);
        }
        if let Some(hrr) = self.server_hello.replace(Box::new(sh)).filter(|h| h.is_hrr) {
            self.first_server_hello.get_or_insert(hrr);
        }
        self.hellos_stored();
        directive
    }

    /// The server's Certificate (`parse`: the TLS <= 1.2 or the TLS 1.3
    /// form): the same fields either way.
    fn accept_certificate(
        &mut self,
        body: Option<&[u8]>,
        parse: CertificateParser,
        mem: &mut dyn TraceMemory,
    ) {
        self.certs = Some(Box::new(match body {
            Some(b) => match parse(b) {
                Ok(list) => {
                    let leaf = list.first().map(|der| mem.leaf_names(der));
                    let leaf = leaf.as_deref();
                    Certs {
                        count: list.len(),
                        bytes: list.iter().map(|c| c.len()).sum(),
                        leaf_subject: leaf.and_then(|l| l.subject.clone()),
                        leaf_issuer: leaf.and_then(|l| l.issuer.clone()),
                        not_before: leaf.and_then(|l| l.not_before),
                        not_after: leaf.and_then(|l| l.not_after),
                    }
                }
                Err(_) => {
                    self.parse_errors += 1;
                    return;
                }
            },
            None => Certs {
                count: 0,
                bytes: 0,
                leaf_subject: None,
                leaf_issuer: None,
                not_before: None,
                not_after: None,
            },
        }));
    }

    fn on_close(&mut self, how: Close) {
        self.settle();
        // Over TCP a close before any ClientHello is no handshake at all;
        // QUIC's CONNECTION_CLOSE always ends one.
        let started = self.state != State::Start || matches!(how, Close::Quic(_));
        if !self.is_over() && started {
            self.fail(match how {
                _ if self.client_alert_before_server_finished => "encrypted_alert".into(),
                Close::Fin => "close".into(),
                Close::Reset => "reset".into(),
                Close::Quic(why) => why,
            });
        }
    }

    fn complete(&mut self, ts: f64, rec: Option<RecordInfo>) {
        let late = self.late_mut();
        late.completed_at = Some(ts);
        late.completed_by = rec;
        self.state = State::Complete;
    }

    fn fail(&mut self, why: String) {
        self.failure = Some(why);
        self.state = State::Failed;
    }

    fn parsed<T>(&mut self, r: Result<T, InvalidMessage>) -> Option<T> {
        r.map_err(|_| self.parse_errors += 1).ok()
    }

    // What the layers below and the record builder may read.

    pub fn state(&self) -> State {
        self.state
    }

    pub fn is_over(&self) -> bool {
        matches!(self.state, State::Complete | State::Failed)
    }

    /// The version the server negotiated, if any.
    pub fn version(&self) -> Option<ProtocolVersion> {
        if self.sslv2 {
            return Some(ProtocolVersion::SSL2);
        }
        self.server_hello
            .as_ref()
            .filter(|sh| !sh.is_hrr)
            .map(|sh| sh.version())
            .or(self.client_shown_version)
    }

    pub fn is_tls13(&self) -> bool {
        self.version().is_some_and(|v| v.is_tls13())
    }

    /// The latest ClientHello.
    pub fn client_hello(&self) -> Option<&ClientHello> {
        self.client_hello.as_deref()
    }

    /// What the trace memory said of the ClientHello's session ID, for
    /// [`restore_session_id_answer`](Self::restore_session_id_answer): a
    /// parked TCP flow's handshake is made again later, when the memory
    /// may know of IDs issued since.
    pub fn session_id_answer(&self) -> (bool, Option<(u64, u64)>) {
        (self.session_id_offered, self.session_id_later)
    }

    pub fn restore_session_id_answer(&mut self, (offered, later): (bool, Option<(u64, u64)>)) {
        self.session_id_offered = offered;
        self.session_id_later = later;
    }

    /// The negotiated suite's code point (not a HelloRetryRequest's).
    pub fn cipher_suite(&self) -> Option<u16> {
        self.server_hello
            .as_ref()
            .filter(|sh| !sh.is_hrr)
            .map(|sh| sh.cipher_suite)
    }

    /// Hands an event to the Zeek view with what it needs of the hellos.
    fn zeek_sees(&mut self, dir: Dir, ev: &Event<'_>, mem: &mut dyn TraceMemory) {
        let sh = self.server_hello.as_ref();
        let cx = super::zeek_view::Context {
            quic: self.transport == Transport::Quic,
            version: sh.map(|sh| sh.version().0),
            cipher: sh.map(|sh| sh.cipher_suite),
            sni: self
                .client_hello
                .as_deref()
                .and_then(|c| c.server_name.as_deref()),
        };
        self.zeek.on(dir, ev, &cx, mem);
    }

    /// The connection hit the per-direction record cap.
    pub fn records_overflowed(&self) -> bool {
        self.records_overflowed
    }

    /// Handshake messages that did not parse.
    pub fn parse_errors(&self) -> u32 {
        self.parse_errors
    }

    /// Sizes of the TLS 1.3 client's encrypted EndOfEarlyData and Finished
    /// records for the negotiated suite (no padding): EndOfEarlyData is a
    /// 4-byte handshake header, Finished adds the transcript hash; each record
    /// adds 1 byte of inner content type and the AEAD tag (RFC 8446 §4.5,
    /// §4.4.4, §5.2).
    pub(super) fn eoed_and_finished_lens(&self) -> Option<(u16, u16)> {
        let sh = self
            .server_hello
            .as_ref()
            .filter(|sh| !sh.is_hrr && sh.version().is_tls13())?;
        let suite = crate::tls::suites::Tls13Suite::get(sh.cipher_suite)?;
        let (hash, tag) = (suite.hash_len as u16, suite.tag_len()? as u16);
        Some((4 + 1 + tag, 4 + hash + 1 + tag))
    }
}
