//! What kind of handshake a connection had: a state machine over
//! (state, direction, event), fed by the record layers of both directions.
//! The rules are DESIGN.md's "Classification" section.

use crate::record::{Certs, EarlyData, HandshakeKind, Resumption};
use crate::tls::enums::{cipher_suite_name, content_type as ct, handshake_type as ht, ProtocolVersion};
use crate::tls::handshake::{parse_certificate_list, ClientHello, ServerHello};
use crate::tls::record::RecordInfo;
use crate::flow::reassembly::seq_diff;

/// Which side sent a record: the client is the side that sent ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Client,
    Server,
}

pub use crate::caps::MAX_RECORDS_PER_DIR;

/// Length of an encrypted TLS 1.3 alert record: 2 bytes of alert, 1 inner
/// content type, 16 bytes of AEAD tag (8 for the CCM_8 suites).
const ENCRYPTED_ALERT_LENS: [u16; 2] = [19, 11];

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
    /// TLS 1.3 ServerHello seen; the client's Finished completes it.
    ServerHello13,
    /// SSLv2 SERVER-HELLO seen.
    Sslv2ServerHello,
    Complete,
    Failed,
}

/// A TLS connection's handshake, as far as the wire shows it.
#[derive(Debug)]
pub struct TlsHandshake {
    pub state: State,
    /// The first ClientHello, kept only when a HelloRetryRequest brought a second.
    pub first_client_hello: Option<ClientHello>,
    /// The latest ClientHello.
    pub client_hello: Option<ClientHello>,
    pub server_hello: Option<ServerHello>,
    pub client_hello_ts: Option<f64>,
    /// Sequence number one past the final ServerHello's record.
    pub server_hello_end: Option<u32>,
    pub hrr: bool,
    pub abbreviated: bool,
    pub session_id_offered: bool,
    /// The server answered in SSL 2.0 (not merely a v2-compatible ClientHello).
    pub sslv2: bool,
    pub sslv2_session_hit: bool,
    /// The ClientHello's record was seen but its body was lost (capture gap).
    pub client_hello_lost: bool,
    pub certs: Option<Certs>,
    pub failure: Option<String>,
    /// The client record that completed the handshake (TLS 1.3 Finished,
    /// TLS 1.2 resumed CCS) or, for full TLS 1.2, the server's CCS.
    pub completed_by: Option<RecordInfo>,
    /// The client sent application data before the server's Finished (TLS 1.2 False Start).
    pub false_start: bool,
    /// TLS <= 1.2 full: end of the server's Finished record (the record after its CCS).
    pub server_finished_end: Option<u32>,
    /// When the client first acknowledged the server's Finished.
    pub client_acked_finished: Option<f64>,
    server_ccs_seen: bool,
    pub records: [Vec<RecordInfo>; 2],
    pub records_overflowed: bool,
    /// The server's handshake traffic secret, from a key log.
    pub server_handshake_secret: Option<Vec<u8>>,
    /// Decrypted EncryptedExtensions: did the server accept early data?
    pub early_data_accepted: Option<bool>,
    /// TLS 1.3 with early data offered: the client's encrypted records after
    /// it acknowledged the ServerHello that were not its Finished (0-RTT
    /// data it wrote before reading the server's flight, or an
    /// EndOfEarlyData): the first one, and the latest if EndOfEarlyData-sized.
    second_flight_first: Option<RecordInfo>,
    pending_eoed: Option<RecordInfo>,
    /// An EndOfEarlyData-sized record came right before the Finished-sized
    /// one that completed the handshake (heuristic `eoed_before_finished`).
    pub eoed_before_finished: bool,
    /// Where the client's last handshake flight starts (its EndOfEarlyData
    /// or Finished), for byte counts.
    pub client_flight_start: Option<u32>,
    pub parse_errors: u32,
}

impl Default for TlsHandshake {
    fn default() -> Self {
        TlsHandshake {
            state: State::Start,
            first_client_hello: None,
            client_hello: None,
            server_hello: None,
            client_hello_ts: None,
            server_hello_end: None,
            hrr: false,
            abbreviated: false,
            session_id_offered: false,
            sslv2: false,
            sslv2_session_hit: false,
            client_hello_lost: false,
            certs: None,
            failure: None,
            completed_by: None,
            false_start: false,
            server_finished_end: None,
            client_acked_finished: None,
            server_ccs_seen: false,
            records: [Vec::with_capacity(12), Vec::with_capacity(12)],
            records_overflowed: false,
            server_handshake_secret: None,
            early_data_accepted: None,
            second_flight_first: None,
            pending_eoed: None,
            eoed_before_finished: false,
            client_flight_start: None,
            parse_errors: 0,
        }
    }
}

/// What the classifier keeps across connections of one trace.
pub trait TraceMemory {
    /// Was this session ID issued by a server earlier in the trace?
    fn was_issued(&self, id: &[u8]) -> bool;
    /// A server issued this session ID in a TLS <= 1.2 ServerHello.
    fn issued(&mut self, id: &[u8]);
    /// Subject and issuer of a leaf certificate (servers send the same one
    /// to every client, so implementations cache by the DER's hash).
    fn leaf_names(&mut self, der: &[u8]) -> (Option<String>, Option<String>) {
        leaf_names(der)
    }
    /// The server handshake traffic secret a key log holds for this client random.
    fn server_handshake_secret(&self, _client_random: &[u8; 32]) -> Option<Vec<u8>> {
        None
    }
}

/// Parses a DER certificate's subject and issuer (RFC 4514 strings).
pub fn leaf_names(der: &[u8]) -> (Option<String>, Option<String>) {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, c)) => (Some(c.subject().to_string()), Some(c.issuer().to_string())),
        Err(_) => (None, None),
    }
}

impl TlsHandshake {
    pub fn is_over(&self) -> bool {
        matches!(self.state, State::Complete | State::Failed)
    }

    /// The version the server negotiated, if any.
    pub fn version(&self) -> Option<ProtocolVersion> {
        if self.sslv2 {
            return Some(ProtocolVersion::SSL2);
        }
        self.server_hello.as_ref().filter(|sh| !sh.is_hrr).map(|sh| sh.version())
    }

    pub fn is_tls13(&self) -> bool {
        self.version().is_some_and(|v| v.is_tls13())
    }

    /// Every record is logged (bounded) for timing and byte counts.
    pub fn on_record(&mut self, dir: Dir, rec: RecordInfo) {
        let log = &mut self.records[dir as usize];
        if log.len() < MAX_RECORDS_PER_DIR {
            log.push(rec);
        } else {
            self.records_overflowed = true;
        }
        if rec.content_type == ct::HANDSHAKE && dir == Dir::Client && self.client_hello_ts.is_none() {
            self.client_hello_ts = Some(rec.ts);
        }
        if dir == Dir::Server && self.server_ccs_seen && self.server_finished_end.is_none() {
            if rec.content_type == ct::CHANGE_CIPHER_SPEC {
                return;
            }
            self.server_finished_end = Some(rec.end);
        }
        if rec.content_type != ct::APPLICATION_DATA {
            if rec.content_type == ct::CHANGE_CIPHER_SPEC {
                self.on_ccs(dir, rec);
            }
            return;
        }
        match (self.state, dir) {
            // TLS 1.3: the client's first encrypted record sent after it saw
            // the ServerHello is its Finished — or an encrypted alert, told
            // apart by its length. With early data offered it may instead be
            // 0-RTT data written before the client read the server's flight
            // (the ACK only says the kernel had the ServerHello): then the
            // Finished is found by its size.
            (State::ServerHello13, Dir::Client) if self.acks_server_hello(&rec) => {
                if ENCRYPTED_ALERT_LENS.contains(&rec.len) {
                    self.fail("encrypted_alert".into());
                } else if self.client_hello.as_ref().is_some_and(|ch| ch.early_data) {
                    self.on_second_flight_record(rec);
                } else {
                    self.client_flight_start = Some(rec.seq);
                    self.complete(rec);
                }
            }
            (State::ServerDone12 | State::ClientCcs12, Dir::Client) => self.false_start = true,
            _ => {}
        }
    }

    /// A client record after the ServerHello when early data was offered:
    /// Finished-sized completes the handshake (after an EndOfEarlyData-sized
    /// record right before it, early data was accepted); anything else waits
    /// (see [`settle`](Self::settle)).
    fn on_second_flight_record(&mut self, rec: RecordInfo) {
        let Some((eoed_len, fin_len)) = self.eoed_and_finished_lens() else {
            self.client_flight_start = Some(rec.seq);
            self.complete(rec);
            return;
        };
        let eoed = self.pending_eoed.take();
        if rec.len == fin_len {
            let eoed = eoed.filter(|e| e.end == rec.seq);
            self.eoed_before_finished = eoed.is_some();
            self.client_flight_start = Some(eoed.map_or(rec.seq, |e| e.seq));
            self.complete(rec);
            return;
        }
        if rec.len == eoed_len {
            self.pending_eoed = Some(rec);
        }
        // Only a longer record can be a padded Finished.
        if rec.len > fin_len {
            self.second_flight_first.get_or_insert(rec);
        }
    }

    /// The connection ends (or the capture does) while a TLS 1.3 client's
    /// Finished was not recognised by its size: its first record after the
    /// ServerHello long enough to be a padded Finished completed the
    /// handshake, as without early data.
    pub fn settle(&mut self) {
        if self.state == State::ServerHello13 {
            if let Some(first) = self.second_flight_first.take() {
                self.client_flight_start = Some(first.seq);
                self.complete(first);
            }
        }
    }

    fn acks_server_hello(&self, rec: &RecordInfo) -> bool {
        match (rec.ack, self.server_hello_end) {
            (Some(ack), Some(end)) => seq_diff(ack, end) >= 0,
            _ => false,
        }
    }

    /// Every segment's acknowledgement, for when the client received the
    /// server's Finished (TLS <= 1.2 full handshakes whose client sends no data).
    pub fn on_ack(&mut self, dir: Dir, ts: f64, ack: u32) {
        if dir == Dir::Client && self.client_acked_finished.is_none() {
            if let Some(end) = self.server_finished_end {
                if seq_diff(ack, end) >= 0 {
                    self.client_acked_finished = Some(ts);
                }
            }
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
            (State::ServerDone12 | State::ServerHello12, Dir::Client) => self.state = State::ClientCcs12,
            (State::ClientCcs12, Dir::Server) => self.complete(rec),
            (State::ServerCcsResumed12, Dir::Client) => self.complete(rec),
            _ => {}
        }
    }

    /// A complete plaintext handshake message.
    pub fn on_message(
        &mut self,
        dir: Dir,
        msg_type: u8,
        body: Option<&[u8]>,
        rec: RecordInfo,
        ids: &mut dyn TraceMemory,
    ) {
        match (self.state, dir, msg_type) {
            (State::Start | State::HelloRetry, Dir::Client, ht::CLIENT_HELLO) => {
                let Some(ch) = body.and_then(|b| self.parsed(ClientHello::parse(b))) else {
                    return;
                };
                self.accept_client_hello(ch, rec, ids);
            }
            // A ServerHello answering a ClientHello whose body the capture
            // lost still tells the version, the suite and what was resumed.
            (State::Start, Dir::Server, ht::SERVER_HELLO) if self.client_hello_ts.is_some() => {
                self.client_hello_lost = true;
                self.state = State::ClientHello;
                self.on_message(dir, msg_type, body, rec, ids);
            }
            (State::ClientHello, Dir::Server, ht::SERVER_HELLO) => {
                let Some(sh) = body.and_then(|b| self.parsed(ServerHello::parse(b))) else {
                    return;
                };
                self.server_hello_end = Some(rec.end);
                if sh.is_hrr {
                    self.hrr = true;
                    self.state = State::HelloRetry;
                } else if sh.version().is_tls13() {
                    self.state = State::ServerHello13;
                } else {
                    if !sh.session_id.is_empty() {
                        ids.issued(sh.session_id.as_bytes());
                    }
                    self.state = State::ServerHello12;
                }
                self.server_hello = Some(sh);
            }
            (State::ServerHello12, Dir::Server, ht::CERTIFICATE) => {
                self.certs = Some(match body {
                    Some(b) => match parse_certificate_list(b) {
                        Ok(list) => certs_summary(&list, ids),
                        Err(_) => {
                            self.parse_errors += 1;
                            return;
                        }
                    },
                    None => Certs { count: 0, bytes: 0, leaf_subject: None, leaf_issuer: None },
                });
            }
            (State::ServerHello12, Dir::Server, ht::SERVER_HELLO_DONE) => self.state = State::ServerDone12,
            _ => {}
        }
    }

    fn accept_client_hello(&mut self, ch: ClientHello, rec: RecordInfo, ids: &mut dyn TraceMemory) {
        // A TLS 1.3 client's legacy session ID is random (compatibility
        // mode) unless a server handed it out earlier in the trace.
        if !ch.session_id.is_empty()
            && (!ch.offers_tls13() || ids.was_issued(ch.session_id.as_bytes()))
        {
            self.session_id_offered = true;
        }
        self.client_hello_ts.get_or_insert(rec.ts);
        // Keep the first hello only when a second one (after HRR) replaces it.
        if let Some(first) = self.client_hello.replace(ch) {
            self.first_client_hello.get_or_insert(first);
        }
        self.state = State::ClientHello;
    }

    /// The server's first encrypted TLS 1.3 record (EncryptedExtensions
    /// first), kept whole because a key log has the secret to open it.
    pub fn on_server_encrypted(&mut self, header: &[u8; 5], payload: &[u8]) {
        let (Some(secret), Some(sh)) = (self.server_handshake_secret.as_deref(), self.server_hello.as_ref()) else {
            return;
        };
        if let Some((22, plain)) = crate::tls::keylog::decrypt_record(sh.cipher_suite, secret, 0, header, payload) {
            self.early_data_accepted = crate::tls::keylog::accepts_early_data(&plain);
        }
    }

    /// The first record of a direction came in SSLv2 format.
    pub fn on_sslv2(&mut self, dir: Dir, msg_type: u8, body: &[u8], rec: RecordInfo) {
        match (self.state, dir, msg_type) {
            (State::Start, Dir::Client, 1) => {
                let Some(ch) = self.parsed(ClientHello::parse_sslv2(body)) else { return };
                self.client_hello_ts = Some(rec.ts);
                self.client_hello = Some(ch);
                self.state = State::ClientHello;
            }
            // SERVER-HELLO: session-id-hit, certificate type, version...
            (State::ClientHello, Dir::Server, 4) => {
                self.sslv2 = true;
                self.sslv2_session_hit = body.first().is_some_and(|&hit| hit != 0);
                self.state = State::Sslv2ServerHello;
            }
            // SSLv2 records after the hellos are not parsed: the client's
            // next one (CLIENT-MASTER-KEY or, resumed, CLIENT-FINISHED) completes it.
            (State::Sslv2ServerHello, Dir::Client, _) => self.complete(rec),
            _ => {}
        }
    }

    pub fn on_alert(&mut self, level: u8, description: u8) {
        if level == 2 && !self.is_over() && self.state != State::Start {
            self.fail(format!("alert:{}", crate::tls::enums::alert_name(description)));
        }
    }

    /// The TCP connection closed (FIN) or was reset.
    pub fn on_close(&mut self, reset: bool) {
        self.settle();
        if !self.is_over() && self.state != State::Start {
            self.fail(if reset { "reset" } else { "close" }.into());
        }
    }

    fn complete(&mut self, rec: RecordInfo) {
        self.completed_by = Some(rec);
        self.state = State::Complete;
    }

    fn fail(&mut self, why: String) {
        self.failure = Some(why);
        self.state = State::Failed;
    }

    fn parsed<T>(&mut self, r: Result<T, crate::tls::codec::InvalidMessage>) -> Option<T> {
        r.map_err(|_| self.parse_errors += 1).ok()
    }

    pub fn kind(&self) -> HandshakeKind {
        match self.state {
            State::Complete if self.resumption().is_some() => HandshakeKind::Resumed,
            State::Complete => HandshakeKind::Full,
            State::Failed => HandshakeKind::Failed,
            _ => HandshakeKind::Incomplete,
        }
    }

    /// The resumption method the server accepted.
    pub fn resumption(&self) -> Option<Resumption> {
        if self.sslv2 {
            return self.sslv2_session_hit.then_some(Resumption::SessionId);
        }
        let sh = self.server_hello.as_ref().filter(|sh| !sh.is_hrr)?;
        if sh.version().is_tls13() {
            return sh.psk_selected.map(|_| Resumption::Psk);
        }
        if !self.abbreviated {
            return None;
        }
        // RFC 5077 §3.4: a server accepting a ticket echoes the client's
        // session ID, so a non-empty ticket wins over the echoed ID.
        let ticket = self.client_hello.as_ref().and_then(|ch| ch.session_ticket_len).unwrap_or(0) > 0;
        Some(if ticket { Resumption::Ticket } else { Resumption::SessionId })
    }

    /// Resumption methods the client offered (over both ClientHellos).
    pub fn offered(&self) -> Vec<Resumption> {
        let hellos = [self.first_client_hello.as_ref(), self.client_hello.as_ref()];
        let mut out = Vec::new();
        if self.session_id_offered || self.resumption() == Some(Resumption::SessionId) {
            out.push(Resumption::SessionId);
        }
        if hellos.iter().flatten().any(|ch| ch.session_ticket_len.unwrap_or(0) > 0)
            || self.resumption() == Some(Resumption::Ticket)
        {
            out.push(Resumption::Ticket);
        }
        if hellos.iter().flatten().any(|ch| ch.psk.is_some()) {
            out.push(Resumption::Psk);
        }
        out
    }

    pub fn early_data(&self) -> EarlyData {
        let first = self.first_client_hello.as_ref().or(self.client_hello.as_ref());
        let offered = first.is_some_and(|ch| ch.early_data);
        if !offered {
            return EarlyData::None;
        }
        if self.hrr {
            return EarlyData::Rejected; // RFC 8446 §4.2.10: HRR rejects 0-RTT.
        }
        match self.server_hello.as_ref() {
            Some(sh) if !sh.version().is_tls13() || sh.psk_selected.is_none() => EarlyData::Rejected,
            // PSK accepted: whether early data was too is in the encrypted
            // EncryptedExtensions, readable only with a key log -- or shown
            // by the client's EndOfEarlyData (heuristic eoed_before_finished).
            _ => match self.early_data_accepted {
                Some(true) => EarlyData::Accepted,
                Some(false) => EarlyData::Rejected,
                None if self.eoed_before_finished => EarlyData::Accepted,
                None => EarlyData::Attempted,
            },
        }
    }

    /// Sizes of the TLS 1.3 client's encrypted EndOfEarlyData and Finished
    /// records for the negotiated suite (no padding): EndOfEarlyData is a
    /// 4-byte handshake header, Finished adds the transcript hash; each record
    /// adds 1 byte of inner content type and the AEAD tag (RFC 8446 §4.5,
    /// §4.4.4, §5.2).
    pub fn eoed_and_finished_lens(&self) -> Option<(u16, u16)> {
        let sh = self.server_hello.as_ref().filter(|sh| !sh.is_hrr && sh.version().is_tls13())?;
        let suite = crate::tls::suites::Tls13Suite::get(sh.cipher_suite)?;
        let (hash, tag) = (suite.hash_len as u16, suite.tag_len()? as u16);
        Some((4 + 1 + tag, 4 + hash + 1 + tag))
    }

    // Heuristic `eoed_before_finished` (set in on_second_flight_record):
    // early data was accepted if the client's Finished-sized record right
    // after the ServerHello reached it follows an EndOfEarlyData-sized one
    // directly in its stream. A client sends EndOfEarlyData only when the
    // server's EncryptedExtensions accepted early data (RFC 8446 §4.5); after
    // a rejection its Finished follows its 0-RTT data directly. The
    // lookalike -- exactly 4 bytes of 0-RTT data written after the server's
    // flight arrived but before the client read it, then the Finished -- is
    // not something a TLS stack produces; padded records leave the answer
    // "attempted".

    /// Handshake round trips before the client could send application data.
    pub fn round_trips(&self) -> Option<u8> {
        if self.state != State::Complete || self.sslv2 {
            return None;
        }
        let base = if self.is_tls13() {
            match self.early_data() {
                EarlyData::Accepted => 0,
                EarlyData::Attempted => return None,
                _ => 1,
            }
        } else if self.abbreviated || self.false_start {
            // A False Start client sends data after its own Finished, one
            // round trip in, without waiting for the server's.
            1
        } else {
            2
        };
        Some(base + self.hrr as u8)
    }

    /// Round trips a resumed handshake would have saved (for a full
    /// handshake whose client offered resumption).
    pub fn avoidable_round_trips(&self) -> Option<u8> {
        if self.kind() != HandshakeKind::Full || self.offered().is_empty() {
            return None;
        }
        let took = self.round_trips()?.saturating_sub(self.hrr as u8);
        // What the resumed handshake would have taken: TLS 1.2 one round
        // trip, TLS 1.3 one, or none with early data (if the client offered it).
        let resumed = if self.is_tls13() && self.early_data() != EarlyData::None { 0 } else { 1 };
        Some(took.saturating_sub(resumed))
    }

    pub fn cipher(&self) -> Option<String> {
        let sh = self.server_hello.as_ref().filter(|sh| !sh.is_hrr)?;
        Some(match cipher_suite_name(sh.cipher_suite) {
            Some(name) => name.to_string(),
            None => format!("0x{:04x}", sh.cipher_suite),
        })
    }
}

fn certs_summary(list: &[&[u8]], ids: &mut dyn TraceMemory) -> Certs {
    let (leaf_subject, leaf_issuer) = list.first().map_or((None, None), |der| ids.leaf_names(der));
    Certs { count: list.len(), bytes: list.iter().map(|c| c.len()).sum(), leaf_subject, leaf_issuer }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoMemory;
    impl TraceMemory for NoMemory {
        fn was_issued(&self, _: &[u8]) -> bool {
            false
        }
        fn issued(&mut self, _: &[u8]) {}
    }

    fn rec(ts: f64, content_type: u8, seq: u32, len: u16, ack: u32) -> RecordInfo {
        RecordInfo { ts, content_type, len, seq, end: seq + 5 + len as u32, ack: Some(ack) }
    }

    /// A TLS 1.2-only ClientHello with an empty session ID and no extensions.
    fn client_hello12() -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([7; 32]);
        b.extend([0, 0, 2, 0xc0, 0x2f, 1, 0]);
        b
    }

    fn server_hello12() -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([9; 32]);
        b.extend([0, 0xc0, 0x2f, 0]);
        b
    }

    /// Drives a full TLS 1.2 handshake; `false_start` makes the client send
    /// application data before the server's ChangeCipherSpec.
    fn full12(false_start: bool) -> TlsHandshake {
        let mut hs = TlsHandshake::default();
        let mut m = NoMemory;
        let (c, s) = (Dir::Client, Dir::Server);
        let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
        hs.on_record(c, ch);
        hs.on_message(c, ht::CLIENT_HELLO, Some(&client_hello12()), ch, &mut m);
        let sh = rec(0.1, ct::HANDSHAKE, 5000, 42, ch.end);
        hs.on_record(s, sh);
        hs.on_message(s, ht::SERVER_HELLO, Some(&server_hello12()), sh, &mut m);
        hs.on_message(s, ht::SERVER_HELLO_DONE, Some(&[]), sh, &mut m);
        hs.on_record(c, rec(0.2, ct::CHANGE_CIPHER_SPEC, ch.end, 1, sh.end));
        if false_start {
            hs.on_record(c, rec(0.2, ct::APPLICATION_DATA, ch.end + 6, 100, sh.end));
        }
        hs.on_record(s, rec(0.3, ct::CHANGE_CIPHER_SPEC, sh.end, 1, ch.end + 200));
        hs
    }

    #[test]
    fn tls12_full_is_two_round_trips() {
        let hs = full12(false);
        assert_eq!(hs.kind(), HandshakeKind::Full);
        assert_eq!(hs.round_trips(), Some(2));
        assert!(!hs.false_start);
    }

    /// Regression: browsers' TLS 1.2 False Start (corpus browsers-x509.pcapng)
    /// sends data after one round trip; round_trips must say so.
    #[test]
    fn tls12_false_start_is_one_round_trip() {
        let hs = full12(true);
        assert_eq!(hs.kind(), HandshakeKind::Full);
        assert!(hs.false_start);
        assert_eq!(hs.round_trips(), Some(1));
    }

    /// A TLS 1.3 PSK resumption whose client sent early data (AES_256_GCM:
    /// EndOfEarlyData 21 bytes, Finished 69), as openssl s_client sends it to
    /// nginx with ssl_early_data on. `client_tail` is the client's records
    /// after the server's flight: (length, same segment as the previous one).
    fn resumed13_early(client_tail: &[(u16, bool)]) -> TlsHandshake {
        use crate::tls::handshake::{ClientHello, PskOffer, ServerHello};
        let mut hs = TlsHandshake::default();
        let (c, s) = (Dir::Client, Dir::Server);
        let ch = rec(0.0, ct::HANDSHAKE, 1000, 578, 5000);
        hs.on_record(c, ch);
        hs.client_hello = Some(ClientHello {
            supported_versions: vec![0x0304],
            psk: Some(PskOffer { identities: 1, first_identity_len: 192 }),
            early_data: true,
            ..Default::default()
        });
        hs.state = State::ClientHello;
        let early = rec(0.0, ct::APPLICATION_DATA, ch.end, 54, 5000);
        hs.on_record(c, early);
        let sh = rec(0.1, ct::HANDSHAKE, 5000, 128, early.end);
        hs.on_record(s, sh);
        hs.server_hello = Some(ServerHello {
            legacy_version: 0x0303,
            selected_version: Some(0x0304),
            psk_selected: Some(0),
            cipher_suite: 0x1302,
            ..Default::default()
        });
        hs.server_hello_end = Some(sh.end);
        hs.state = State::ServerHello13;
        hs.on_record(s, rec(0.1, ct::CHANGE_CIPHER_SPEC, sh.end, 1, early.end));
        let ee = rec(0.1, ct::APPLICATION_DATA, sh.end + 6, 46, early.end);
        let fin = rec(0.1, ct::APPLICATION_DATA, ee.end, 69, early.end);
        let response = rec(0.1002, ct::APPLICATION_DATA, fin.end, 162, early.end);
        for r in [ee, fin, response] {
            hs.on_record(s, r);
        }
        let (mut seq, mut ts) = (early.end, 0.2);
        for &(len, same_segment) in client_tail {
            if !same_segment {
                ts += 0.0001;
            }
            let r = rec(ts, ct::APPLICATION_DATA, seq, len, response.end);
            hs.on_record(c, r);
            seq = r.end;
        }
        hs
    }

    /// Regression: without a key log, 0-RTT that nginx accepted (its log said
    /// $ssl_early_data=1; delay-line capture at 20/100/260 ms) came out
    /// "attempted" with round_trips null, though the client's EndOfEarlyData
    /// was on the wire.
    #[test]
    fn accepted_early_data_was_attempted_despite_end_of_early_data() {
        let hs = resumed13_early(&[(21, false), (69, true)]);
        assert_eq!(hs.kind(), HandshakeKind::Resumed);
        assert_eq!(hs.early_data(), EarlyData::Accepted);
        assert_eq!(hs.round_trips(), Some(0));
    }

    /// Regression: the 0.5-RTT response to accepted early data was sent
    /// before the client's Finished arrived, so ttfb was null.
    #[test]
    fn zero_rtt_ttfb_was_null() {
        let hs = resumed13_early(&[(21, false), (69, true)]);
        let t = crate::timing::timing(&hs, &crate::timing::TcpHandshake::default());
        assert_eq!(t.ttfb, Some(100.2));
        assert_eq!(t.handshake, Some(200.1));
    }

    #[test]
    fn early_data_without_end_of_early_data_stays_attempted() {
        // Rejected (only a Finished), a record that is no EndOfEarlyData, or
        // one not followed by a Finished-sized record.
        for tail in [&[(69, false)][..], &[(22, false), (69, true)], &[(21, false), (53, true)], &[(21, false), (300, false), (69, false)]] {
            let hs = resumed13_early(tail);
            assert_eq!(hs.early_data(), EarlyData::Attempted, "{tail:?}");
            assert_eq!(hs.round_trips(), None);
        }
    }

    /// Regression (Chromium and gnutls-cli against nginx): 0-RTT data the
    /// client wrote after the kernel had the ServerHello but before it read
    /// the server's flight acknowledges the ServerHello too. It completed
    /// the handshake (too early), and hid the EndOfEarlyData; gnutls-cli's
    /// EndOfEarlyData and Finished travel in separate segments.
    #[test]
    fn late_zero_rtt_data_is_not_the_finished() {
        for (tail, accepted) in [
            (&[(566, false), (21, false), (69, true)][..], true),
            (&[(21, false), (69, false)], true),
            (&[(566, false), (69, false)], false),
        ] {
            let hs = resumed13_early(tail);
            assert_eq!(hs.kind(), HandshakeKind::Resumed, "{tail:?}");
            let want = if accepted { EarlyData::Accepted } else { EarlyData::Attempted };
            assert_eq!(hs.early_data(), want, "{tail:?}");
            let fin = hs.completed_by.unwrap();
            assert_eq!(fin.len, 69, "{tail:?}: completed by the Finished");
            // Handshake bytes: EndOfEarlyData and Finished, never the 0-RTT data.
            let client_bytes = crate::timing::handshake_bytes(&hs).client_handshake;
            let flight: u64 = if accepted { 5 + 21 + 5 + 69 } else { 5 + 69 };
            assert_eq!(client_bytes, 5 + 578 + flight, "{tail:?}");
        }
        // A padded Finished is never recognised by size: the first record
        // after the ServerHello completes the handshake once it closes.
        let mut hs = resumed13_early(&[(566, false), (120, false)]);
        assert_eq!(hs.kind(), HandshakeKind::Incomplete);
        hs.on_close(false);
        assert_eq!((hs.kind(), hs.completed_by.map(|r| r.len)), (HandshakeKind::Resumed, Some(566)));
        assert_eq!(hs.early_data(), EarlyData::Attempted);
        // gnutls-cli sent its EndOfEarlyData, never its Finished, and was
        // reset: nothing that could be a Finished, so the handshake failed.
        let mut hs = resumed13_early(&[(21, false)]);
        hs.on_close(true);
        assert_eq!((hs.kind(), hs.failure.as_deref()), (HandshakeKind::Failed, Some("reset")));
    }
}
